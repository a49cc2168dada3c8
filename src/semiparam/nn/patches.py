"""Images as rows: patch embeddings and pixel heads for NPT and SPIN (NPT paper, appendix B.8).

An image enters a table model as a row whose first ``C * H * W`` columns are its pixels (channel,
then row, then column order), each a continuous cell with its own mask bit, followed by the
table's other columns (the label). The pixels are not embedded one by one: the image is cut into
``(H / p) * (W / p)`` square patches of ``p x p`` pixels and each patch becomes one attribute
token of width e, as ViT does; the label column keeps the table embedding
(:class:`~semiparam.nn.columns.ColumnEmbedding`) and acts as the class token. So NPT's ABA attends
between the patches and the label of an image, and ABD between images.

- ``encoder="linear"`` (the paper's MNIST and CIFAR-10 linear patching): the patch's pixels and
  their mask bits (the mask is an extra channel, per pixel) through one linear map shared by all
  patches, plus a learned position embedding per patch (the paper's column-index embedding).
- ``encoder="cnn"``: a small convolutional stem over the image and its mask channel, whose output
  at stride p gives the patch tokens. The paper's CIFAR-10 CNN encoder is a ResNet-18 feeding ABD
  only; this keeps the token layout of the linear patching (so ABA, masking and the pixel
  reconstruction loss stay as they are) with a convolution's view of neighbouring pixels.

The heads map every patch token back to its pixels (one linear map shared by all patches, for the
feature-masking loss: squared error per pixel) and the label token to class logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ..data.columns import CONTINUOUS, ColumnLayout
from .columns import ColumnEmbedding, ColumnHeads, ColumnOutputs
from .dropout import Dropout

__all__ = ["ImageGeometry", "PatchEmbedding", "PatchHeads"]


@dataclass(frozen=True)
class ImageGeometry:
    """Images of ``channels x height x width`` pixels cut into square patches of ``patch`` pixels
    (height and width are multiples of it)."""

    channels: int
    height: int
    width: int
    patch: int

    def __post_init__(self) -> None:
        for name in ("channels", "height", "width", "patch"):
            if getattr(self, name) < 1:
                raise ValueError(f"image {name} must be >= 1, got {getattr(self, name)}")
        if self.height % self.patch or self.width % self.patch:
            raise ValueError(
                f"patch size {self.patch} does not divide the image size {self.height} x {self.width}"
            )

    @property
    def n_pixels(self) -> int:
        """Pixel cells per image (all channels)."""
        return self.channels * self.height * self.width

    @property
    def grid(self) -> tuple[int, int]:
        return self.height // self.patch, self.width // self.patch

    @property
    def n_patches(self) -> int:
        rows, cols = self.grid
        return rows * cols

    @property
    def patch_cells(self) -> int:
        """Pixel cells per patch (all channels)."""
        return self.channels * self.patch * self.patch

    def check_layout(self, layout: ColumnLayout) -> ColumnLayout:
        """The layout of the columns after the pixels; raises unless the first ``n_pixels``
        columns of ``layout`` are continuous and at least one column follows them."""
        n = self.n_pixels
        if layout.n_columns <= n:
            raise ValueError(
                f"an image model needs the {n} pixel columns and at least one more (the label); "
                f"the table has {layout.n_columns} columns"
            )
        if any(kind != CONTINUOUS for kind in layout.kinds[:n]):
            raise ValueError(f"the first {n} columns of an image table must be continuous pixels")
        return ColumnLayout(layout.kinds[n:], layout.cardinalities[n:])

    def to_patches(self, pixels: Tensor) -> Tensor:
        """``(b, C * H * W) -> (b, n_patches, C * p * p)``, patches in row-major grid order."""
        b = pixels.shape[0]
        rows, cols = self.grid
        p, c = self.patch, self.channels
        grid = pixels.reshape(b, c, rows, p, cols, p).permute(0, 2, 4, 1, 3, 5)
        return grid.reshape(b, rows * cols, c * p * p)

    def from_patches(self, patches: Tensor) -> Tensor:
        """The inverse of :meth:`to_patches`: ``(b, n_patches, C * p * p) -> (b, C * H * W)``."""
        b = patches.shape[0]
        rows, cols = self.grid
        p, c = self.patch, self.channels
        grid = patches.reshape(b, rows, cols, c, p, p).permute(0, 3, 1, 4, 2, 5)
        return grid.reshape(b, self.n_pixels)


class PatchEmbedding(nn.Module):
    """``(values, hidden) (n, C*H*W + k) -> (n, n_patches + k, e)``: patch tokens, then the
    embeddings of the k other columns. See the module docstring."""

    def __init__(
        self,
        layout: ColumnLayout,
        geometry: ImageGeometry,
        d_embedding: int,
        *,
        encoder: Literal["linear", "cnn"] = "linear",
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.geometry = geometry
        self.columns = ColumnEmbedding(geometry.check_layout(layout), d_embedding, dropout=0.0)
        c, p, e = geometry.channels, geometry.patch, d_embedding
        self.encoder = encoder
        if encoder == "linear":
            # [pixels, mask bits] of a patch -> e; nn.Linear's default initialisation
            self.project = nn.Linear(2 * c * p * p, e)
        elif encoder == "cnn":
            # NOTE[DIFF]: the paper's CNN encoder (CIFAR-10) is a ResNet-18 whose 128-d output feeds
            # ABD only, without label input (spec-npt 9.25); this stem keeps one token per patch so
            # ABA, the mask channel and the pixel loss stay those of the linear patching
            width = max(16, e)
            self.project = nn.Sequential(
                nn.Conv2d(2 * c, width, 3, padding=1),
                nn.GELU(),
                nn.Conv2d(width, 2 * width, 3, padding=1),
                nn.GELU(),
                nn.Conv2d(2 * width, e, p, stride=p),  # one output per patch
            )
        else:
            raise ValueError(f"image encoder must be 'linear' or 'cnn', got {encoder!r}")
        # the patch's learned position, as the column-index embedding of a table (N(0, 1))
        self.position = nn.Parameter(torch.randn(geometry.n_patches, e))
        self.dropout = Dropout(dropout)

    def forward(self, values: Tensor, hidden: Tensor) -> Tensor:
        g = self.geometry
        n_pix = g.n_pixels
        m = hidden[:, :n_pix].to(values.dtype)
        x = values[:, :n_pix] * (1.0 - m)  # hidden pixel -> 0, its mask bit says so
        if self.encoder == "linear":
            tokens = self.project(torch.cat([g.to_patches(x), g.to_patches(m)], dim=-1))
        else:
            b = values.shape[0]
            image = torch.cat([x, m], dim=1).reshape(b, 2 * g.channels, g.height, g.width)
            tokens = self.project(image).flatten(2).transpose(1, 2)  # (b, n_patches, e)
        tokens = tokens + self.position
        others = self.columns(values[:, n_pix:], hidden[:, n_pix:])
        return self.dropout(torch.cat([tokens, others], dim=1))


class PatchHeads(nn.Module):
    """``(n, n_patches + k, e) -> ColumnOutputs`` over all ``C*H*W + k`` columns: each patch
    token's pixels (one linear map for all patches), then the other columns' heads."""

    def __init__(
        self, layout: ColumnLayout, geometry: ImageGeometry, d_embedding: int, *, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.geometry = geometry
        self.columns = ColumnHeads(geometry.check_layout(layout), d_embedding, dropout=dropout)
        self.pixels = nn.Linear(d_embedding, geometry.patch_cells)
        bound = 1.0 / math.sqrt(d_embedding)
        nn.init.uniform_(self.pixels.weight, -bound, bound)
        self.dropout = Dropout(dropout)

    def forward(self, h: Tensor) -> ColumnOutputs:
        g = self.geometry
        pixels = g.from_patches(self.pixels(self.dropout(h[:, : g.n_patches])))  # (n, C*H*W)
        others = self.columns(h[:, g.n_patches :])
        continuous = torch.cat([pixels.unsqueeze(-1), others.continuous], dim=1)
        return ColumnOutputs(continuous, others.categorical)
