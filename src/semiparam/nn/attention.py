"""The one attention primitive of the library and the block built on it.

Everything that attends -- attention between datapoints (ABD), between attributes (ABA), and the
inducing-point cross-attention of SPIN (XABD/XABA) -- is a :class:`MAB` (multihead attention block)
called as ``mab(queries, keys_values)``. The block is the pre-LayerNorm variant of the NPT paper
(Kossen et al. 2021, section 2.3 and appendix C.2.1)::

    Res(H) = H W_res + Dropout(MHAtt(LN(H), LN(Y)))        # learned projection on the residual
    MAB(H) = Res(H) + rFF(LN(Res(H)))                       # rFF = Linear(4w) GELU Dropout Linear Dropout

Attention itself is computed by an attention backend (``nn.backends``): by default PyTorch's
:func:`torch.nn.functional.scaled_dot_product_attention`, which picks a memory-efficient kernel
(memory linear in the sequence length) whenever it is allowed to; with attention-weight dropout
(the paper's, applied only while training and only when ``attention_dropout > 0``) the same
attention is computed exactly in chunks of queries instead of PyTorch's quadratic "math" path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .backends import AttentionBackend, make_backend, paired_weights
from .dropout import Dropout, replaying

AttentionScale = Literal["full", "per_head"]


def attention_scale(width: int, n_heads: int, scale: AttentionScale) -> float:
    """Softmax temperature for a block of ``width`` channels split over ``n_heads`` heads.

    As the paper: the NPT paper and its code divide by sqrt(full width), not the usual
    sqrt(width / n_heads); ``"full"`` reproduces the paper, ``"per_head"`` is the standard choice.
    """
    if scale == "full":
        return 1.0 / math.sqrt(width)
    if scale == "per_head":
        return 1.0 / math.sqrt(width // n_heads)
    raise ValueError(f"attention scale must be 'full' or 'per_head', got {scale!r}")


def run_block(
    block: Callable[..., Tensor],
    *args: Any,
    checkpointed: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``block(*args)``; with ``checkpointed`` (and gradients on) its activations are recomputed
    in the backward pass instead of stored (spec-weng F11), with the random state (the global one
    and ``generator``, the block's dropout generator) restored so that dropout draws the same masks:
    the same gradients as the plain call."""
    if checkpointed and torch.is_grad_enabled():
        return checkpoint(replaying(block, generator), *args, use_reentrant=False)
    return block(*args)


class MultiheadAttention(nn.Module):
    """Queries attend to keys/values: ``(B, n_q, w) x (B, n_kv, w_kv) -> (B, n_q, w)``.

    Q is ``Linear(w, w)``, K and V are ``Linear(w_kv, w)`` (``w_kv = kv_width``, default ``w``),
    each split into heads; ``out`` mixes the heads (W^O). ``backend`` names the attention backend
    (``nn.backends``; default PyTorch's fused attention), ``backend_options`` its options.
    Attention-weight dropout draws from ``dropout_generator`` (see :mod:`semiparam.nn.dropout`).
    """

    dropout_generator: torch.Generator | None = None

    def __init__(
        self,
        width: int,
        n_heads: int,
        *,
        attention_dropout: float = 0.0,
        scale: AttentionScale = "full",
        kv_width: int | None = None,
        backend: str = "sdpa",
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if width % n_heads != 0:
            raise ValueError(f"width {width} is not divisible by n_heads {n_heads}")
        self.width = width
        self.n_heads = n_heads
        self.attention_dropout = attention_dropout
        self.backend: AttentionBackend = make_backend(backend, width // n_heads, **(backend_options or {}))
        if attention_dropout > 0 and not self.backend.attention_dropout:
            raise ValueError(
                f"the {backend!r} attention backend does not apply attention dropout; "
                "set attention_dropout=0 or choose another backend"
            )
        self.scale = attention_scale(width, n_heads, scale)
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(kv_width or width, width)
        self.v = nn.Linear(kv_width or width, width)
        self.out = nn.Linear(width, width)

    def _split(self, x: Tensor) -> Tensor:
        # (B, n, w) -> (B, heads, n, w / heads)
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.width // self.n_heads).transpose(1, 2)

    def project_kv(self, kv_input: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``kv_input`` (B, n_kv, w_kv), each (B, heads, n_kv, w / heads)."""
        return self._split(self.k(kv_input)), self._split(self.v(kv_input))

    def project_q(self, q_input: Tensor) -> Tensor:
        """Queries of ``q_input`` (B, n_q, w), split into heads: (B, heads, n_q, w / heads)."""
        return self._split(self.q(q_input))

    def merge_heads(self, y: Tensor) -> Tensor:
        """Per-head attention outputs (B, heads, n_q, w / heads) -> mixed output (B, n_q, w)."""
        b, _, n_q, _ = y.shape
        return self.out(y.transpose(1, 2).reshape(b, n_q, self.width))

    def forward(
        self,
        q_input: Tensor,
        kv_input: Tensor | None = None,
        *,
        prefix_kv: tuple[Tensor, Tensor] | None = None,
        attn_mask: Tensor | None = None,
        paired: bool = False,
    ) -> Tensor:
        """Attend from ``q_input`` to ``prefix_kv`` (precomputed) followed by ``kv_input``.

        ``prefix_kv`` lets cached keys/values of a context set (from :meth:`project_kv`) be reused
        across calls; ``attn_mask`` (bool, True = may attend) is over the concatenated keys.
        ``paired=True``: query i attends to the prefix and to row i of ``kv_input`` only.
        """
        q = self._split(self.q(q_input))
        if paired:
            if prefix_kv is None or kv_input is None:
                raise ValueError("paired attention needs prefix_kv and kv_input")
            return self.out(self._paired(q, prefix_kv, *self.project_kv(kv_input)))
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
        y = self.backend(
            q,
            k,
            v,
            scale=self.scale,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            generator=self.dropout_generator,
        )
        b, _, n_q, _ = y.shape  # y: (B, heads, n_q, w / heads)
        y = y.transpose(1, 2).reshape(b, n_q, self.width)
        return self.out(y)

    def _paired(self, q: Tensor, prefix: tuple[Tensor, Tensor], k_self: Tensor, v_self: Tensor) -> Tensor:
        """Each query attends to the shared prefix and to its own key only (the backend's
        :meth:`~semiparam.nn.backends.AttentionBackend.paired`)."""
        k_ctx, v_ctx = prefix  # (1 or B, heads, n_ctx, dh)
        dropout_p = self.attention_dropout if self.training else 0.0
        y = self.backend.paired(
            q,
            k_ctx,
            v_ctx,
            k_self,
            v_self,
            scale=self.scale,
            dropout_p=dropout_p,
            generator=self.dropout_generator,
        )
        b, _, n_q, _ = y.shape  # y: (B, heads, n_q, dh)
        return y.transpose(1, 2).reshape(b, n_q, self.width)


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
        kv_width: int | None = None,
        backend: str = "sdpa",
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if kv_width is not None and kv_width != width and not cross:
            raise ValueError(f"kv_width {kv_width} != width {width} needs a cross-attention block")
        self.normalize_kv = normalize_kv
        self.cross = cross
        self.norm_q = nn.LayerNorm(width, eps=layer_norm_eps)
        self.norm_kv = nn.LayerNorm(kv_width or width, eps=layer_norm_eps) if cross else None
        self.attention = MultiheadAttention(
            width,
            n_heads,
            attention_dropout=attention_dropout,
            scale=scale,
            kv_width=kv_width,
            backend=backend,
            backend_options=backend_options,
        )
        self.residual = nn.Linear(width, width)  # W^res: a learned projection, not an identity
        self.dropout = Dropout(dropout)
        self.norm_ff = nn.LayerNorm(width, eps=layer_norm_eps)
        self.ff = nn.Sequential(
            nn.Linear(width, ff_multiplier * width),
            nn.GELU(),
            Dropout(dropout),
            nn.Linear(ff_multiplier * width, width),
            Dropout(dropout),
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

    # The two halves of ``forward`` around the attention itself, for callers that compute the
    # attention their own way (e.g. streamed over chunks of keys, ``nn.streaming``).
    def query_heads(self, x: Tensor) -> Tensor:
        """Queries of ``x`` (B, n_q, w) as attention sees them: (B, heads, n_q, w / heads)."""
        return self.attention.project_q(self.norm_q(x))

    def finish(self, x: Tensor, heads_out: Tensor) -> Tensor:
        """The block's output from its input ``x`` and the attention result per head
        ``heads_out`` (B, heads, n_q, w / heads): residual, head mixing, feed-forward."""
        res = self.residual(x) + self.dropout(self.attention.merge_heads(heads_out))
        return res + self.ff(self.norm_ff(res))

    # -- attention weights, for explanations: the softmax the forward pass applies, written out
    def weights(self, x: Tensor, y: Tensor) -> Tensor:
        """Cross-attention weights of queries ``x (B, n_q, w)`` over keys ``y (B, n_kv, w_kv)``:
        ``(B, heads, n_q, n_kv)``, each row summing to 1."""
        q = self.query_heads(x)
        k, _ = self.context_kv(y)
        return torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.attention.scale, dim=-1)

    def self_attention_weights(self, x: Tensor) -> Tensor:
        """Self-attention weights within each set of ``x (B, n, w)``: ``(B, heads, n, n)``."""
        q = self.query_heads(x)
        k, _ = self.attention.project_kv(self.norm_q(x) if self.normalize_kv else x)
        return torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.attention.scale, dim=-1)

    def self_and_prefix_weights(self, x: Tensor, prefix_kv: tuple[Tensor, Tensor]) -> Tensor:
        """Weights of the ``paired`` forward: each query of ``x (B, n_q, w)`` over the cached
        prefix keys and then itself: ``(B, heads, n_q, n_prefix + 1)``."""
        q = self.query_heads(x)
        k_self, _ = self.attention.project_kv(self.norm_q(x) if self.normalize_kv else x)
        return paired_weights(q, prefix_kv[0], k_self, self.attention.scale)

    def forward(
        self,
        x: Tensor,
        y: Tensor | None = None,
        *,
        prefix_kv: tuple[Tensor, Tensor] | None = None,
        include_self: bool = True,
        attn_mask: Tensor | None = None,
        paired: bool = False,
    ) -> Tensor:
        """Self-attention (``y`` None, ``include_self``), cross-attention to ``y``, and/or to a cached
        ``prefix_kv``. With ``include_self=False`` and ``y=None`` the queries attend to the prefix only;
        ``paired=True`` (self-attention with a prefix): each query attends to the prefix and itself."""
        if self.cross and y is None and prefix_kv is None:
            raise ValueError("a cross-attention block needs y or prefix_kv")
        h = self.norm_q(x)
        if y is not None:
            kv = self.kv_input(y)
        elif include_self and not self.cross:
            kv = h if self.normalize_kv else x
        else:
            kv = None
        attended = self.attention(h, kv, prefix_kv=prefix_kv, attn_mask=attn_mask, paired=paired)
        res = self.residual(x) + self.dropout(attended)
        return res + self.ff(self.norm_ff(res))
