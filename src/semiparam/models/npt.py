"""Non-Parametric Transformer (Kossen et al. 2021, "Self-Attention Between Datapoints").

The model reads a whole table: rows are datapoints, columns are attributes (features and targets
alike). After a per-column embedding (``H: (n, d, e)``) it alternates

- **ABD**, attention between datapoints: each row flattened to one token of width ``h = d * e``,
  multihead self-attention across the n rows (cost O(n^2 h));
- **ABA**, attention between attributes: within each row, self-attention across its d attribute
  tokens of width e (weights shared across rows);

starting with ABD, ``n_blocks`` blocks in all, then one linear head per column.

Prediction uses a *context* of training rows: the context is encoded once (its per-block keys and
values cached) and each query row attends to the context and to itself, never to other query
rows, so its prediction does not depend on which rows share its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from .._config import ConfigError
from ..nn.attention import run_block
from ..nn.columns import ColumnLayout, ColumnOutputs
from .attention_settings import AttentionSettings, attention_block
from .input_settings import InputSettings


@dataclass(frozen=True)
class NPTConfig(AttentionSettings, InputSettings):
    """Architecture of an NPT. Presets: :meth:`cpu` (default), :meth:`paper_small`, :meth:`paper_base`.
    The attention backends (``row_attention`` for ABD, ``column_attention`` for ABA) and
    activation checkpointing are set through the fields of :class:`AttentionSettings`; images
    through those of :class:`InputSettings`."""

    d_embedding: int = 16  # e, per-attribute width; ABD width is n_columns * e
    n_blocks: int = 4  # ABD and ABA blocks counted together (paper's "layers"), even
    n_heads: int = 4  # must divide e
    dropout: float = 0.1  # hidden, feed-forward, embedding and pre-head dropout
    ff_multiplier: int = 4  # hidden units of each block's feed-forward, per channel (paper: 4)
    # NOTE[DIFF]: the paper uses 0.1 on the attention weights; that forces PyTorch's quadratic
    # attention path, so the CPU preset turns it off. paper_* presets set it to 0.1.
    attention_dropout: float = 0.0
    attention_scale: Literal["full", "per_head"] = "full"  # paper: 1/sqrt(full width)
    # NOTE[DIFF]: "cosine" gives ABD one projection for queries and keys and a learned per-head
    # temperature on their cosine (nn.attention.MultiheadAttention), so a row attends most to rows
    # like it from the first step, as a nearest-neighbour lookup. The paper: "dot", two projections
    row_similarity: Literal["dot", "cosine"] = "dot"
    normalize_kv: bool = True  # paper: K, V from LN(H); False = reference-code quirk (raw H)
    use_aba: bool = True  # False = the "NPT without ABA" ablation (ABD blocks only)
    embedding_layer_norm: bool = False
    gaussian_head: bool = False  # NOTE[DIFF]: a mean + scale head for continuous columns (not in paper)
    # periodic embedding of continuous values (0 = the paper's linear embedding only; see
    # nn.columns.ColumnEmbedding): number of learned frequencies per column and their init scale
    n_frequencies: int = 0
    frequency_scale: float = 1.0
    # piecewise-linear numeric encoding (nn.columns.ColumnEmbedding): bins per column (0 = none;
    # no preset sets it, see docs/guide/tables.md)
    n_bins: int = 0

    LATER_FIELDS = ("n_bins",)  # added after fits were first checkpointed (FrozenConfig)

    def validate(self) -> None:
        if self.n_frequencies < 0 or not self.frequency_scale > 0:
            raise ConfigError("n_frequencies must be >= 0 and frequency_scale > 0")
        if self.n_bins < 0:
            raise ConfigError(f"n_bins must be >= 0, got {self.n_bins}")
        if self.ff_multiplier < 1:
            raise ConfigError(f"ff_multiplier must be >= 1, got {self.ff_multiplier}")
        self.validate_widths(self.d_embedding, self.n_heads)
        if self.n_blocks < 2 or self.n_blocks % 2:
            raise ConfigError(f"n_blocks must be even and >= 2, got {self.n_blocks}")
        for name in ("dropout", "attention_dropout"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {p}")
        self.validate_attention(self.attention_dropout)
        self.validate_inputs(self.gaussian_head)

    @classmethod
    def cpu(cls) -> NPTConfig:
        """Small enough to train on a laptop CPU in seconds on tables of a few thousand rows:
        e=16 (capped so that a row token has at most 128 channels), 2 blocks (one ABD, one ABA),
        4 heads over rows and one within a row, feed-forwards as wide as their input, no
        dropout, periodic numeric embeddings (see ``n_frequencies``).

        NOTE[DIFF]: the paper's NPT-Small has 8 blocks of 8 heads at e=128, 4x feed-forwards and
        dropout 0.1. Each cut here was scored on the development suite's 14 tables over three
        splits each against the defaults before it, beside CatBoost and HGB (``benchmarks/results/
        fit_cost.md``, the "quality held" sections): the row cap of 128 and 2x feed-forwards,
        then 2 blocks with one head within a row, then 1x feed-forwards without dropout (the
        members stop on their validation loss, which regularises them). Each made a step cheaper
        and moved the scores within the split-to-split noise. One head within a row: a row's
        tokens are single cells of width e (4 to 16 here), and PyTorch's CPU attention kernel pays
        per row and head, so four heads of 1 to 4 channels cost several times one head of e.

        Cosine row attention (``row_similarity``; NOTE[DIFF], issue 49 item 4): with the paper's
        two projections a fitted NPT put its attention anywhere but on an exact copy of the
        query among the context rows (``benchmarks/results/context_use``); with one projection
        and cosine similarity a row attends to its copies from the first step, the attention
        explanation finds the source row, and the paper's lookup task trains in a fraction of
        the steps. On the development suite it scored within the split-to-split noise of the
        dot product (``benchmarks/tabular_defaults.py --set npt.model_options.row_similarity=dot``
        beside the default)."""
        return cls(
            row_similarity="cosine",
            n_frequencies=16,
            frequency_scale=0.5,
            max_row_width=128,
            ff_multiplier=1,
            dropout=0.0,
            n_blocks=2,
            column_heads=1,
        )

    @classmethod
    def prior(cls) -> NPTConfig:
        """The prior-fitted NPT (``training.pretrain``): e=16 over a fixed layout of feature slots
        and two target slots, 4 blocks (two ABD, two ABA), 4 heads over rows and one within a row,
        2x feed-forwards, no dropout (each task is new: nothing to memorise), periodic numeric
        embeddings, the usual per-head softmax scale (sharper than the paper's 1/sqrt(full width)
        at the start, which is where a model first has to find the rows worth reading). NOTE[DIFF]:
        not a paper setting; sized to pretrain on a CPU."""
        return cls(
            attention_scale="per_head",
            row_similarity="dot",  # the weights in semiparam/weights were pretrained so
            n_frequencies=16,
            frequency_scale=0.5,
            ff_multiplier=2,
            dropout=0.0,
            n_blocks=4,
            column_heads=1,
        )

    @classmethod
    def paper_small(cls) -> NPTConfig:
        """NPT-Small of the paper (Breast Cancer, Boston, Concrete, Yacht): 8 blocks, 8 heads, e=128."""
        return cls(d_embedding=128, n_blocks=8, n_heads=8, attention_dropout=0.1)

    @classmethod
    def paper_base(cls) -> NPTConfig:
        """NPT-Base of the paper (the large datasets): 8 blocks, 8 heads, e=64."""
        return cls(d_embedding=64, n_blocks=8, n_heads=8, attention_dropout=0.1)

    @classmethod
    def preset(cls, name: str) -> NPTConfig:
        presets = {"cpu": cls.cpu, "small": cls.paper_small, "base": cls.paper_base}
        if name not in presets:
            raise ConfigError(f"unknown NPT preset {name!r}; choose from {sorted(presets)}")
        return presets[name]()


class AttentionBetweenDatapoints(nn.Module):
    """ABD: rows as tokens of width d*e; ``(n, d, e) -> (n, d, e)``."""

    def __init__(self, config: NPTConfig, n_columns: int) -> None:
        super().__init__()
        width = n_columns * config.d_embedding
        self.mab = attention_block(config, width, config.n_heads, "row", similarity=config.row_similarity)

    def forward(self, h: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        n, d, e = h.shape
        rows = h.reshape(1, n, d * e)  # (1, n, h): one sequence of n datapoint tokens
        return self.mab(rows, attn_mask=attn_mask).reshape(n, d, e)

    def context_kv(self, h: Tensor) -> tuple[Tensor, Tensor]:
        n, d, e = h.shape
        return self.mab.context_kv(h.reshape(1, n, d * e))

    def forward_queries(self, h: Tensor, context_kv: tuple[Tensor, Tensor]) -> Tensor:
        """Each query row attends to the cached context rows and to itself only."""
        n, d, e = h.shape
        out = self.mab(h.reshape(1, n, d * e), prefix_kv=context_kv, paired=True)
        return out.reshape(n, d, e)


class AttentionBetweenAttributes(nn.Module):
    """ABA: within each row, attributes as tokens of width e; ``(n, d, e) -> (n, d, e)``."""

    def __init__(self, config: NPTConfig) -> None:
        super().__init__()
        heads = config.column_head_count(config.n_heads)
        self.mab = attention_block(config, config.d_embedding, heads, "column")

    def forward(self, h: Tensor) -> Tensor:
        return self.mab(h)  # batch = rows, sequence = attributes


ContextCache = list[tuple[Tensor, Tensor]]


class NPT(nn.Module):
    """``(values, hidden) (n, d) -> ColumnOutputs``. See the module docstring."""

    dropout_generator: torch.Generator | None = None  # replayed by checkpointed blocks (nn.dropout)

    def __init__(self, config: NPTConfig, layout: ColumnLayout) -> None:
        super().__init__()
        d = config.n_tokens(layout)  # attribute tokens of a row (columns, or patches + label)
        config = config.for_columns(d)
        self.config = config
        self.layout = layout
        e = config.d_embedding
        self.embedding = config.input_embedding(
            layout,
            e,
            dropout=config.dropout,
            n_frequencies=config.n_frequencies,
            frequency_scale=config.frequency_scale,
            n_bins=config.n_bins,
        )
        self.embedding_norm = nn.LayerNorm(e, eps=1e-12) if config.embedding_layer_norm else None
        blocks: list[nn.Module] = []
        for i in range(config.n_blocks if config.use_aba else config.n_blocks // 2):
            if i % 2 == 0 or not config.use_aba:
                blocks.append(AttentionBetweenDatapoints(config, d))
            else:
                blocks.append(AttentionBetweenAttributes(config))
        self.blocks = nn.ModuleList(blocks)
        self.heads = config.output_heads(
            layout, e, dropout=config.dropout, gaussian_head=config.gaussian_head
        )

    def _embed(self, values: Tensor, hidden: Tensor) -> Tensor:
        h = self.embedding(values, hidden)  # (n, d, e)
        return self.embedding_norm(h) if self.embedding_norm is not None else h

    def forward(self, values: Tensor, hidden: Tensor, is_query: Tensor | None = None) -> ColumnOutputs:
        """Full forward over all rows. With ``is_query`` (bool, n), query rows attend to non-query
        rows and themselves only, and non-query rows never attend to queries -- the same answer
        as :meth:`encode_context` + :meth:`forward_queries`, in one quadratic pass."""
        h = self._embed(values, hidden)
        mask = None
        if is_query is not None:
            n = values.shape[0]
            eye = torch.eye(n, dtype=torch.bool, device=values.device)
            mask = (~is_query).unsqueeze(0) | eye  # (n_q_rows, n_kv_rows): keys = context or self
        for block in self.blocks:
            args = (h, mask) if isinstance(block, AttentionBetweenDatapoints) else (h,)
            h = run_block(
                block,
                *args,
                checkpointed=self.config.checkpoint_blocks and self.training,
                generator=self.dropout_generator,
            )
        return self.heads(h)

    @torch.no_grad()
    def encode_context(self, values: Tensor, hidden: Tensor) -> ContextCache:
        """Per-ABD-block keys and values of the context rows; computed once, reused by queries."""
        h = self._embed(values, hidden)
        cache: ContextCache = []
        for block in self.blocks:
            if isinstance(block, AttentionBetweenDatapoints):
                cache.append(block.context_kv(h))
            h = block(h)
        return cache

    def forward_queries(self, values: Tensor, hidden: Tensor, cache: ContextCache) -> ColumnOutputs:
        """Predict query rows ``(n_q, d)`` from a cached context (see :meth:`encode_context`)."""
        h = self._embed(values, hidden)
        kv = iter(cache)
        for block in self.blocks:
            if isinstance(block, AttentionBetweenDatapoints):
                h = block.forward_queries(h, next(kv))
            else:
                h = block(h)
        return self.heads(h)

    @torch.no_grad()
    def attention_maps(self, values: Tensor, hidden: Tensor, cache: ContextCache) -> dict[str, list[Tensor]]:
        """The attention weights of query rows ``(n_q, d)`` predicted from a cached context, block
        by block: ``"rows"``, one ``(n_q, heads, n_ctx + 1)`` per ABD block (the weight on each
        context row, then on the query row itself: what :meth:`forward_queries` uses), and
        ``"columns"``, one ``(n_q, heads, d, d)`` per ABA block (attribute i attending to
        attribute j within the query row). Memory is that of the maps, O(n_q * n_ctx) per block."""
        h = self._embed(values, hidden)
        kv = iter(cache)
        rows: list[Tensor] = []
        columns: list[Tensor] = []
        for block in self.blocks:
            n, d, e = h.shape
            if isinstance(block, AttentionBetweenDatapoints):
                k_ctx, v_ctx = next(kv)
                tokens = h.reshape(1, n, d * e)
                rows.append(block.mab.self_and_prefix_weights(tokens, (k_ctx, v_ctx))[0].transpose(0, 1))
                h = block.forward_queries(h, (k_ctx, v_ctx))
            else:
                columns.append(block.mab.self_attention_weights(h))
                h = block(h)
        return {"rows": rows, "columns": columns}
