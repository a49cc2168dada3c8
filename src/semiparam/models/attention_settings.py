"""The attention-backend, width and memory settings NPT and SPIN share (``nn.backends``), and the
attention block both build from their settings (:func:`attention_block`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from .._config import ConfigError, FrozenConfig
from ..nn.attention import MAB, AttentionScale
from ..nn.backends import BACKENDS, backend_names, backend_options

S = TypeVar("S", bound="AttentionSettings")


@dataclass(frozen=True)
class AttentionSettings(FrozenConfig):
    """Which attention backend each kind of attention uses, the backends' settings, and activation
    checkpointing. ``row_attention``: attention over rows (NPT's ABD, SPIN's XABD, whose keys are
    the rows); ``column_attention``: the attention within a row or over a few tokens (NPT's ABA,
    SPIN's XABA, ABLA and predictor). Names are those of ``semiparam.nn.backends.BACKENDS``
    (``"sdpa"``, ``"dense"``, ``"chunked"``, ``"performer"``, ``"topk"`` and any registered)."""

    # the model's widths, which its config restates with its own defaults and meaning: e per
    # cell, and the heads of the attention over rows
    d_embedding: int = 16
    n_heads: int = 4
    row_attention: str = "sdpa"
    column_attention: str = "sdpa"
    attention_chunk: int = 1024  # chunked / topk (and sdpa with dropout): queries per chunk
    attention_top_k: int = 32  # topk: keys each query attends to
    random_features: int = 256  # performer: random features per head
    # recompute each block's activations in the backward pass instead of storing them (training
    # memory about one block's instead of all of them, for about a third more time per step)
    checkpoint_blocks: bool = False
    # heads of the attention within a row (NPT's ABA; SPIN's XABA, ABLA and ``predictor_aba``);
    # None: ``n_heads``, as the papers. Its tokens are single cells of width e, so with e=8 and
    # 4 heads each head compares 2 numbers, and PyTorch's CPU attention kernel pays per (row,
    # head) pair, so fewer heads make the step cheaper (``benchmarks/results/fit_cost.md``).
    column_heads: int | None = None
    # NOTE[DIFF]: a cap on a row token's width n_columns * e for wide tables (NPT's ABD rows,
    # SPIN's predictor rows): e shrinks, to a multiple of every head count (at least that), so
    # that the token stays near this width. The papers keep e fixed; attention over rows of
    # width d*e costs O(n * (d e)^2) per step, which on a table of 30 columns dominates a step.
    # None: no cap (the paper presets).
    max_row_width: int | None = None

    def for_columns(self: S, n_columns: int) -> S:
        """The configuration a table of ``n_columns`` gets: ``d_embedding`` lowered under the
        ``max_row_width`` cap."""
        e = self.capped_embedding(self.d_embedding, self.n_heads, n_columns, self.max_row_width)
        return self if e == self.d_embedding else dataclasses.replace(self, d_embedding=e)

    def column_head_count(self, n_heads: int) -> int:
        """The heads of the attention within a row, for a model of ``n_heads`` heads."""
        return n_heads if self.column_heads is None else self.column_heads

    def capped_embedding(self, d_embedding: int, n_heads: int, n_columns: int, cap: int | None) -> int:
        """The per-cell width e of a table of ``n_columns``: ``d_embedding``, or lowered so that a
        row token (``n_columns * e``) stays near ``cap``, to a multiple of every head count (and
        at least that multiple)."""
        if cap is None or n_columns * d_embedding <= cap:
            return d_embedding
        step = math.lcm(n_heads, self.column_head_count(n_heads))
        return min(d_embedding, max(step, (cap // n_columns) // step * step))

    def validate_widths(self, d_embedding: int, n_heads: int) -> None:
        """Both head counts divide ``d_embedding``; ``max_row_width`` is positive or None."""
        if d_embedding < 1 or n_heads < 1:
            raise ConfigError(f"d_embedding and n_heads must be >= 1, got {d_embedding} and {n_heads}")
        if d_embedding % n_heads:
            raise ConfigError(f"n_heads ({n_heads}) must divide d_embedding ({d_embedding})")
        if self.max_row_width is not None and self.max_row_width < 1:
            raise ConfigError(f"max_row_width must be >= 1 or None, got {self.max_row_width}")
        if self.column_heads is None:
            return
        if self.column_heads < 1:
            raise ConfigError(f"column_heads must be >= 1 or None, got {self.column_heads}")
        if d_embedding % self.column_heads:
            raise ConfigError(f"column_heads ({self.column_heads}) must divide d_embedding ({d_embedding})")

    def validate_attention(self, attention_dropout: float) -> None:
        for kind in ("row_attention", "column_attention"):
            name = getattr(self, kind)
            if name not in BACKENDS:
                raise ConfigError(
                    f"{kind} {name!r} is not an attention backend; choose from {backend_names()}"
                )
            if attention_dropout > 0 and not BACKENDS[name].attention_dropout:
                raise ConfigError(
                    f"{kind} {name!r} does not apply attention dropout; set attention_dropout=0 "
                    "or choose another backend"
                )
        for name in ("attention_chunk", "attention_top_k", "random_features"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    def attention_kwargs(self, kind: Literal["row", "column"]) -> dict[str, Any]:
        """``backend`` and ``backend_options`` for a :class:`~semiparam.nn.attention.MAB` of this kind."""
        name = self.row_attention if kind == "row" else self.column_attention
        settings = {
            "chunk": self.attention_chunk,
            "top_k": self.attention_top_k,
            "n_features": self.random_features,
        }
        return {"backend": name, "backend_options": backend_options(name, settings)}


class BlockSettings(Protocol):
    """What a table model's config says about each of its attention blocks (NPTConfig, SPINConfig)."""

    @property
    def dropout(self) -> float: ...
    @property
    def attention_dropout(self) -> float: ...
    @property
    def attention_scale(self) -> AttentionScale: ...
    @property
    def normalize_kv(self) -> bool: ...
    @property
    def ff_multiplier(self) -> int: ...
    def attention_kwargs(self, kind: Literal["row", "column"]) -> dict[str, Any]: ...


def attention_block(
    config: BlockSettings, width: int, n_heads: int, kind: Literal["row", "column"], **options: Any
) -> MAB:
    """A :class:`~semiparam.nn.attention.MAB` of a table model: the config's dropout, attention
    dropout and scale, ``normalize_kv`` and feed-forward multiplier, the backend of ``kind``
    (:meth:`AttentionSettings.attention_kwargs`), and the block's own ``options`` (``cross``,
    ``kv_width``)."""
    return MAB(
        width,
        n_heads,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        scale=config.attention_scale,
        normalize_kv=config.normalize_kv,
        ff_multiplier=config.ff_multiplier,
        **config.attention_kwargs(kind),
        **options,
    )
