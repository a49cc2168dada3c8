"""Per-column input embeddings and output heads shared by NPT and SPIN.

A table enters a model as two tensors:

- ``values (n_rows, n_cols)`` float: a standardised scalar for a continuous column, the category
  index (stored as a float) for a categorical column. Hidden cells hold anything; they are zeroed.
- ``hidden (n_rows, n_cols)`` bool: the mask bit, True where the value is hidden (masked or missing).

Each column j is embedded as in NPT (appendix C.3.1): its one-hot or scalar encoding with the mask
bit appended, a linear map of its own to width ``d_embedding`` (with bias), plus a learned
column-index embedding and, when the table mixes both kinds, a learned column-type embedding.
For a categorical column ``Linear([one_hot, mask_bit])`` equals ``E[index] * (1 - m) + w_m * m + b``,
which is what we compute: one lookup in a table of all columns' categories instead of one-hot vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# The column kinds and ColumnLayout describe data, not modules: they live in semiparam.data.columns
# and are re-exported here for the modules and callers that import them from semiparam.nn.columns.
from ..data.columns import CATEGORICAL, CONTINUOUS, ColumnLayout
from .dropout import Dropout

__all__ = [
    "CATEGORICAL",
    "CONTINUOUS",
    "ColumnEmbedding",
    "ColumnHeads",
    "ColumnLayout",
    "ColumnOutputs",
]


@dataclass
class ColumnOutputs:
    """Per-column predictions of a model.

    ``continuous (n_rows, n_continuous, n_out)``: n_out = 1 (mean, standardised units) or 2 (mean and
    raw scale of a Gaussian head); ``categorical``: one ``(n_rows, n_categories_j)`` logit tensor per
    categorical column, in layout order.
    """

    continuous: Tensor
    categorical: list[Tensor]

    def rows(self, index: Tensor | slice) -> ColumnOutputs:
        return ColumnOutputs(self.continuous[index], [c[index] for c in self.categorical])

    def float(self) -> ColumnOutputs:
        """The outputs in float32 (those of a forward pass under bf16 autocast)."""
        return ColumnOutputs(self.continuous.float(), [c.float() for c in self.categorical])


class ColumnEmbedding(nn.Module):
    """``(values, hidden) (n, d) -> (n, d, d_embedding)``."""

    # buffers (register_buffer), typed for the checker
    cont_idx: Tensor
    cat_idx: Tensor
    cat_offsets: Tensor
    column_order: Tensor
    col_type: Tensor
    bin_left: Tensor
    bin_width: Tensor

    def __init__(
        self,
        layout: ColumnLayout,
        d_embedding: int,
        *,
        dropout: float = 0.1,
        n_frequencies: int = 0,
        frequency_scale: float = 1.0,
        n_bins: int = 0,
    ) -> None:
        super().__init__()
        self.layout = layout
        cont = layout.continuous
        cat = layout.categorical
        self.register_buffer("cont_idx", torch.tensor(cont, dtype=torch.long), persistent=False)
        self.register_buffer("cat_idx", torch.tensor(cat, dtype=torch.long), persistent=False)
        cards = [layout.cardinalities[j] for j in cat]
        offsets = [0]
        for c in cards[:-1]:
            offsets.append(offsets[-1] + c)
        self.register_buffer("cat_offsets", torch.tensor(offsets, dtype=torch.long), persistent=False)
        # position of column j among the continuous then categorical embeddings: the forward
        # concatenates the two and reorders, no in-place writes (which torch.func.vmap, used to
        # train ensemble members together, cannot batch)
        order = torch.argsort(torch.tensor(list(cont) + list(cat), dtype=torch.long))
        self.register_buffer("column_order", order, persistent=False)
        # nn.Linear's default init draws U(-1/sqrt(fan_in), 1/sqrt(fan_in)); fan_in = e_j + 1.
        bound_cont = 1.0 / math.sqrt(2.0)
        self.cont_value = nn.Parameter(_uniform((len(cont), d_embedding), bound_cont))
        self.cont_mask = nn.Parameter(_uniform((len(cont), d_embedding), bound_cont))
        self.cont_bias = nn.Parameter(_uniform((len(cont), d_embedding), bound_cont))
        # one bound per category row of the shared table, 1/sqrt(C_j + 1) for column j's rows
        row_bounds = torch.tensor([1.0 / math.sqrt(c + 1.0) for c in cards for _ in range(c)])
        cat_bounds = torch.tensor([1.0 / math.sqrt(c + 1.0) for c in cards]).view(-1, 1)
        self.cat_table = nn.Parameter(_uniform((sum(cards), d_embedding), 1.0) * row_bounds.view(-1, 1))
        self.cat_mask = nn.Parameter(_uniform((len(cat), d_embedding), 1.0) * cat_bounds)
        self.cat_bias = nn.Parameter(_uniform((len(cat), d_embedding), 1.0) * cat_bounds)
        self.index_embedding = nn.Embedding(layout.n_columns, d_embedding)
        # The type embedding is skipped when every column has the same kind (NPT reference code).
        self.use_type = bool(cont) and bool(cat)
        if self.use_type:
            self.type_embedding = nn.Embedding(2, d_embedding)
            col_type = torch.tensor([int(k == CATEGORICAL) for k in layout.kinds], dtype=torch.long)
            self.register_buffer("col_type", col_type, persistent=False)
        # NOTE[DIFF]: optional periodic embedding of continuous values (Gorishniy et al. 2022,
        # "On Embeddings for Numerical Features", PLR): ReLU(Linear([sin 2pi c x, cos 2pi c x]))
        # with learned per-column frequencies c ~ N(0, frequency_scale^2), added to the paper's
        # linear embedding. A linear map of one scalar gives every value the same direction in
        # embedding space; the periodic part lets attention tell nearby values apart.
        self.n_frequencies = n_frequencies
        if n_frequencies and cont:
            k = n_frequencies
            self.frequencies = nn.Parameter(torch.randn(len(cont), k) * frequency_scale)
            bound = 1.0 / math.sqrt(2 * k)
            self.periodic_weight = nn.Parameter(_uniform((len(cont), 2 * k, d_embedding), bound))
            self.periodic_bias = nn.Parameter(_uniform((len(cont), d_embedding), bound))
        # NOTE[DIFF]: optional piecewise-linear encoding of continuous values (Gorishniy et al.
        # 2022, "PLE"): n_bins bins between fixed edges at the standard normal's quantiles (the
        # quantile feature map makes them the training rows' quantiles), each bin's share of x
        # clamped to [0, 1], a linear map of its own per column, added to the embedding. It
        # gives a value's embedding a different direction below and above each edge, as a tree
        # splits.
        self.n_bins = n_bins
        if n_bins and cont:
            # n_bins - 1 inner edges at the normal's quantiles, the outer two one unit beyond
            # (one bin: [-1, 1])
            probs = torch.linspace(0.0, 1.0, n_bins + 1, dtype=torch.float64)[1:-1]
            inner = torch.distributions.Normal(0.0, 1.0).icdf(probs)
            outer = (inner[:1] - 1.0, inner[-1:] + 1.0) if n_bins > 1 else (-torch.ones(1), torch.ones(1))
            edges = torch.cat([outer[0], inner, outer[1]]).double()
            self.register_buffer("bin_left", edges[:-1].float(), persistent=False)
            self.register_buffer("bin_width", (edges[1:] - edges[:-1]).float(), persistent=False)
            bound = 1.0 / math.sqrt(n_bins)
            self.bin_weight = nn.Parameter(_uniform((len(cont), n_bins, d_embedding), bound))
        self.dropout = Dropout(dropout)
        self.d_embedding = d_embedding

    def _piecewise(self, x: Tensor) -> Tensor:
        """``(n, n_cont) -> (n, n_cont, e)``: the piecewise-linear part of the continuous embedding."""
        share = ((x.unsqueeze(-1) - self.bin_left) / self.bin_width).clamp(0.0, 1.0)  # (n, n_cont, T)
        return torch.einsum("nct,cte->nce", share, self.bin_weight)

    def _periodic(self, x: Tensor) -> Tensor:
        """``(n, n_cont) -> (n, n_cont, e)``: the periodic part of the continuous embedding."""
        angles = 2 * math.pi * x.unsqueeze(-1) * self.frequencies  # (n, n_cont, k)
        feats = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)  # (n, n_cont, 2k)
        out = torch.einsum("nck,cke->nce", feats, self.periodic_weight) + self.periodic_bias
        return torch.relu(out)

    def forward(self, values: Tensor, hidden: Tensor) -> Tensor:
        n, d = values.shape
        if d != self.layout.n_columns:
            raise ValueError(f"expected {self.layout.n_columns} columns, got {d}")
        parts: list[Tensor] = []
        m = hidden.to(values.dtype)
        if self.cont_idx.numel():
            x = values[:, self.cont_idx] * (1.0 - m[:, self.cont_idx])  # hidden value -> 0
            mc = m[:, self.cont_idx].unsqueeze(-1)
            cont = x.unsqueeze(-1) * self.cont_value + mc * self.cont_mask + self.cont_bias
            if self.n_frequencies:
                cont = cont + self._periodic(x) * (1.0 - mc)
            if self.n_bins:
                cont = cont + self._piecewise(x) * (1.0 - mc)
            parts.append(cont)  # (n, n_cont, e)
        if self.cat_idx.numel():
            mk = hidden[:, self.cat_idx]
            codes = values[:, self.cat_idx].long().masked_fill(mk, 0)  # hidden -> any valid code
            # an embedding lookup, not tensor indexing: indexing's backward accumulates repeated
            # codes in a thread-dependent order (different gradients run to run on 2 threads);
            # F.embedding's backward sums them in a fixed order
            emb = F.embedding(codes + self.cat_offsets, self.cat_table)  # (n, n_cat, e)
            mc = mk.to(values.dtype).unsqueeze(-1)
            parts.append(emb * (1.0 - mc) + mc * self.cat_mask + self.cat_bias)  # (n, n_cat, e)
        # (n, d, e) in column order (a permutation: its backward has no repeated index)
        out = torch.cat(parts, dim=1).index_select(1, self.column_order)
        out = out + self.index_embedding.weight
        if self.use_type:
            out = out + self.type_embedding(self.col_type)
        return self.dropout(out)


class ColumnHeads(nn.Module):
    """``(n, d, d_embedding) -> ColumnOutputs``: one linear head per column (NPT appendix C.3.2)."""

    cont_idx: Tensor  # a buffer (register_buffer), typed for the checker

    def __init__(
        self, layout: ColumnLayout, d_embedding: int, *, gaussian: bool = False, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.layout = layout
        self.n_out = 2 if gaussian else 1
        cont = layout.continuous
        self.register_buffer("cont_idx", torch.tensor(cont, dtype=torch.long), persistent=False)
        self.cat_columns = layout.categorical
        bound = 1.0 / math.sqrt(d_embedding)
        self.cont_weight = nn.Parameter(_uniform((len(cont), d_embedding, self.n_out), bound))
        self.cont_bias = nn.Parameter(_uniform((len(cont), self.n_out), bound))
        self.cat_heads = nn.ModuleList(
            nn.Linear(d_embedding, layout.cardinalities[j]) for j in self.cat_columns
        )
        self.dropout = Dropout(dropout)

    def forward(self, h: Tensor) -> ColumnOutputs:
        h = self.dropout(h)
        # (n, n_cont, e) x (n_cont, e, n_out) -> (n, n_cont, n_out)
        cont = torch.einsum("nce,ceo->nco", h[:, self.cont_idx], self.cont_weight) + self.cont_bias
        # the columns as views of h, split once: the backward pass then stacks their gradients
        # once, where h[:, j] per column would add a zero-filled copy of h per column (the same
        # values either way, and the same views of h as h[:, j], so the same products)
        cells = h.unbind(1) if self.cat_columns else ()
        cat = [head(cells[j]) for j, head in zip(self.cat_columns, self.cat_heads, strict=True)]
        return ColumnOutputs(cont, cat)


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    return (torch.rand(shape) * 2 - 1) * bound
