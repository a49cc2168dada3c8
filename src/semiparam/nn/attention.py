"""The one attention primitive of the library and the block built on it.

Everything that attends -- attention between datapoints (ABD), between attributes (ABA), and the
inducing-point cross-attention of SPIN (XABD/XABA) -- is a :class:`MAB` (multihead attention block)
called as ``mab(queries, keys_values)``. The block is the pre-LayerNorm variant of the NPT paper
(Kossen et al. 2021, section 2.3 and appendix C.2.1)::

    Res(H) = H W_res + Dropout(MHAtt(LN(H), LN(Y)))        # learned projection on the residual
    MAB(H) = Res(H) + rFF(LN(Res(H)))                       # rFF = Linear(4w) GELU Dropout Linear Dropout

Attention itself goes through :func:`torch.nn.functional.scaled_dot_product_attention`, which picks
a memory-efficient kernel (memory linear in the sequence length) whenever it is allowed to: no
dropout on the attention weights and no explicit mask. Attention-weight dropout, which the paper
uses, forces PyTorch's quadratic "math" path on the CPU. We therefore apply it only while
training and only when ``attention_dropout > 0``; the CPU preset sets it to 0 (see ``NPTConfig``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

AttentionScale = Literal["full", "per_head"]


def attention_scale(width: int, n_heads: int, scale: AttentionScale) -> float:
    """Softmax temperature for a block of ``width`` channels split over ``n_heads`` heads.

    NOTE[DIFF-free]: the NPT paper and its code divide by sqrt(full width), not the usual
    sqrt(width / n_heads); ``"full"`` reproduces the paper, ``"per_head"`` is the standard choice.
    """
    if scale == "full":
        return 1.0 / math.sqrt(width)
    if scale == "per_head":
        return 1.0 / math.sqrt(width // n_heads)
    raise ValueError(f"attention scale must be 'full' or 'per_head', got {scale!r}")


class MultiheadAttention(nn.Module):
    """Queries attend to keys/values: ``(B, n_q, w) x (B, n_kv, w) -> (B, n_q, w)``.

    Q, K and V are each one ``Linear(w, w)`` split into heads; ``out`` mixes the heads (W^O).
    """

    def __init__(
        self,
        width: int,
        n_heads: int,
        *,
        attention_dropout: float = 0.0,
        scale: AttentionScale = "full",
    ) -> None:
        super().__init__()
        if width % n_heads != 0:
            raise ValueError(f"width {width} is not divisible by n_heads {n_heads}")
        self.width = width
        self.n_heads = n_heads
        self.attention_dropout = attention_dropout
        self.scale = attention_scale(width, n_heads, scale)
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def _split(self, x: Tensor) -> Tensor:
        # (B, n, w) -> (B, heads, n, w / heads)
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.width // self.n_heads).transpose(1, 2)

    def project_kv(self, kv_input: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``kv_input`` (B, n_kv, w), each (B, heads, n_kv, w / heads)."""
        return self._split(self.k(kv_input)), self._split(self.v(kv_input))

    def forward(
        self,
        q_input: Tensor,
        kv_input: Tensor | None = None,
        *,
        prefix_kv: tuple[Tensor, Tensor] | None = None,
        attn_mask: Tensor | None = None,
    ) -> Tensor:
        """Attend from ``q_input`` to ``prefix_kv`` (precomputed) followed by ``kv_input``.

        ``prefix_kv`` lets cached keys/values of a context set (from :meth:`project_kv`) be reused
        across calls; ``attn_mask`` (bool, True = may attend) is over the concatenated keys.
        """
        q = self._split(self.q(q_input))
        keys: list[Tensor] = []
        values: list[Tensor] = []
        if prefix_kv is not None:
            keys.append(prefix_kv[0])
            values.append(prefix_kv[1])
        if kv_input is not None:
            k, v = self.project_kv(kv_input)
            keys.append(k)
            values.append(v)
        if not keys:
            raise ValueError("attention needs kv_input or prefix_kv")
        k = keys[0] if len(keys) == 1 else torch.cat(keys, dim=2)
        v = values[0] if len(values) == 1 else torch.cat(values, dim=2)
        if prefix_kv is not None and k.shape[0] != q.shape[0]:
            # a cached context (batch 1) shared by a batch of query sets
            k = k.expand(q.shape[0], -1, -1, -1)
            v = v.expand(q.shape[0], -1, -1, -1)
        dropout_p = self.attention_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=self.scale
        )  # (B, heads, n_q, w / heads)
        b, _, n_q, _ = y.shape
        y = y.transpose(1, 2).reshape(b, n_q, self.width)
        return self.out(y)


class MAB(nn.Module):
    """Multihead attention block, pre-LayerNorm, with the NPT paper's learned residual projection.

    ``mab(x)`` is self-attention; ``mab(x, y)`` is cross-attention from ``x`` to ``y`` (then the
    keys/values get their own LayerNorm). Shapes: ``x (B, n_q, w)``, ``y (B, n_kv, w)``.

    ``normalize_kv=False`` reproduces a quirk of the NPT reference code, where only the queries
    come from LN(H) and keys/values from the raw H; the paper (and our default) normalises all three.
    """

    def __init__(
        self,
        width: int,
        n_heads: int,
        *,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        scale: AttentionScale = "full",
        normalize_kv: bool = True,
        cross: bool = False,
        ff_multiplier: int = 4,
        layer_norm_eps: float = 1e-12,
    ) -> None:
        super().__init__()
        self.normalize_kv = normalize_kv
        self.cross = cross
        self.norm_q = nn.LayerNorm(width, eps=layer_norm_eps)
        self.norm_kv = nn.LayerNorm(width, eps=layer_norm_eps) if cross else None
        self.attention = MultiheadAttention(
            width, n_heads, attention_dropout=attention_dropout, scale=scale
        )
        self.residual = nn.Linear(width, width)  # W^res: a learned projection, not an identity
        self.dropout = nn.Dropout(dropout)
        self.norm_ff = nn.LayerNorm(width, eps=layer_norm_eps)
        self.ff = nn.Sequential(
            nn.Linear(width, ff_multiplier * width),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(ff_multiplier * width, width),
            nn.Dropout(dropout),
        )

    def kv_input(self, y: Tensor) -> Tensor:
        """What keys and values are projected from: LN(y) (paper) or raw y (reference code)."""
        if not self.normalize_kv:
            return y
        norm = self.norm_kv if self.cross else self.norm_q
        assert norm is not None
        return norm(y)

    def context_kv(self, y: Tensor) -> tuple[Tensor, Tensor]:
        """Keys/values of a context set ``y`` (B, n_kv, w), to pass later as ``prefix_kv``."""
        return self.attention.project_kv(self.kv_input(y))

    def forward(
        self,
        x: Tensor,
        y: Tensor | None = None,
        *,
        prefix_kv: tuple[Tensor, Tensor] | None = None,
        include_self: bool = True,
        attn_mask: Tensor | None = None,
    ) -> Tensor:
        """Self-attention (``y`` None, ``include_self``), cross-attention to ``y``, and/or to a cached
        ``prefix_kv``. With ``include_self=False`` and ``y=None`` the queries attend to the prefix only."""
        if self.cross and y is None and prefix_kv is None:
            raise ValueError("a cross-attention block needs y or prefix_kv")
        h = self.norm_q(x)
        if y is not None:
            kv = self.kv_input(y)
        elif include_self and not self.cross:
            kv = h if self.normalize_kv else x
        else:
            kv = None
        attended = self.attention(h, kv, prefix_kv=prefix_kv, attn_mask=attn_mask)
        res = self.residual(x) + self.dropout(attended)
        return res + self.ff(self.norm_ff(res))
