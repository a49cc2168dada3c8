"""How NPT and SPIN read a row: one token per column (tables), or patches of an image."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import nn

from .._config import ConfigError, FrozenConfig
from ..nn.columns import ColumnEmbedding, ColumnHeads, ColumnLayout
from ..nn.patches import ImageGeometry, PatchEmbedding, PatchHeads


@dataclass(frozen=True)
class InputSettings(FrozenConfig):
    """``image_channels = 0`` (default): a table, each column one attribute token. Otherwise the
    first ``image_channels * image_height * image_width`` columns are an image's pixels, embedded
    as patches of ``patch_size`` pixels (:mod:`semiparam.nn.patches`) by ``image_encoder``; the
    image estimators (``NPTImageClassifier``) set these from the images they are given."""

    image_channels: int = 0
    image_height: int = 0
    image_width: int = 0
    patch_size: int = 0
    image_encoder: Literal["linear", "cnn"] = "linear"

    def validate_inputs(self, gaussian_head: bool) -> None:
        sizes = (self.image_channels, self.image_height, self.image_width, self.patch_size)
        if self.image_channels == 0:
            if any(sizes):
                raise ConfigError("image_height, image_width and patch_size need image_channels >= 1")
            return
        try:
            self.image_geometry()
        except ValueError as err:
            raise ConfigError(str(err)) from err
        if gaussian_head:
            raise ConfigError("an image model has no Gaussian head (gaussian_head=True)")

    def image_geometry(self) -> ImageGeometry | None:
        if self.image_channels == 0:
            return None
        return ImageGeometry(self.image_channels, self.image_height, self.image_width, self.patch_size)

    def n_tokens(self, layout: ColumnLayout) -> int:
        """Attribute tokens of a row: one per column, or one per patch plus the other columns."""
        geometry = self.image_geometry()
        if geometry is None:
            return layout.n_columns
        return geometry.n_patches + layout.n_columns - geometry.n_pixels

    def input_embedding(
        self,
        layout: ColumnLayout,
        d_embedding: int,
        *,
        dropout: float,
        n_frequencies: int,
        frequency_scale: float,
        n_bins: int = 0,
    ) -> nn.Module:
        """``(values, hidden) (n, d) -> (n, n_tokens, e)`` for a model of this configuration."""
        geometry = self.image_geometry()
        if geometry is None:
            return ColumnEmbedding(
                layout,
                d_embedding,
                dropout=dropout,
                n_frequencies=n_frequencies,
                frequency_scale=frequency_scale,
                n_bins=n_bins,
            )
        return PatchEmbedding(layout, geometry, d_embedding, encoder=self.image_encoder, dropout=dropout)

    def output_heads(
        self, layout: ColumnLayout, d_embedding: int, *, dropout: float, gaussian_head: bool
    ) -> nn.Module:
        """``(n, n_tokens, e) -> ColumnOutputs`` over all columns of ``layout``."""
        geometry = self.image_geometry()
        if geometry is None:
            return ColumnHeads(layout, d_embedding, gaussian=gaussian_head, dropout=dropout)
        return PatchHeads(layout, geometry, d_embedding, dropout=dropout)
