"""The one attention primitive of the library and the one block family built on it.

Everything that attends -- attention between datapoints (ABD), between attributes (ABA), the
inducing-point cross-attention of SPIN and the IPNPs (XABD/XABA), the attentive neural processes'
set encoders and cross-attention, TNP-D's transformer layers -- is a :class:`MAB` (multihead
attention block) called as ``mab(queries, keys_values)``. By default the block is the pre-LayerNorm
variant of the NPT paper (Kossen et al. 2021, section 2.3 and appendix C.2.1)::

    Res(H) = H W_res + Dropout(MHAtt(LN(H), LN(Y)))        # learned projection on the residual
    MAB(H) = Res(H) + rFF(LN(Res(H)))                       # rFF = Linear(4w) GELU Dropout Linear Dropout

and its options give the other forms the models need: ``norm="post"`` (the original transformer's
``LN(H + MHAtt(H, Y))``, then ``LN(. + rFF(.))``), ``residual_projection=False`` (an identity
residual), ``activation="relu"``, ``ff_multiplier=0`` (no feed-forward: attention and residual
only), ``separate_values=True`` (keys and values from two inputs, each with its LayerNorm).
:class:`InducingPointAttention` (XABD: h learned inducing points attend to a set) and
:class:`InducedSetAttention` (the Set Transformer's ISAB: XABD, then the set reads back from the
inducing points) are built from it.

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
Similarity = Literal["dot", "cosine"]
NormPlacement = Literal["pre", "post"]
Activation = Literal["gelu", "relu"]
_ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "relu": nn.ReLU}


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

    ``similarity="cosine"`` (self-attention widths only): queries and keys come from *one*
    projection, each head's unit-normalised, and their dot product is multiplied by a learned
    per-head temperature (initially ``temperature``) instead of ``scale``. A token is then most
    similar to itself and to tokens equal to it from the first step: attention starts out as a
    soft nearest-neighbour lookup (the retrieval of TabR, Gorishniy et al. 2024, and ModernNCA),
    which the dot product of two independent projections has to learn. The temperature is folded
    into the queries, so every backend computes it unchanged (with ``scale`` 1).
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
        similarity: Similarity = "dot",
        temperature: float = 8.0,
    ) -> None:
        super().__init__()
        if similarity not in ("dot", "cosine"):
            raise ValueError(f"similarity must be 'dot' or 'cosine', got {similarity!r}")
        if similarity == "cosine" and kv_width not in (None, width):
            raise ValueError("cosine similarity shares one projection: it needs kv_width == width")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
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
        self.scale = attention_scale(width, n_heads, scale) if similarity == "dot" else 1.0
        self.q = nn.Linear(width, width)
        # cosine: one projection, q, for queries and keys
        self.k = None if similarity == "cosine" else nn.Linear(kv_width or width, width)
        self.log_temperature = (
            nn.Parameter(torch.full((n_heads,), math.log(temperature))) if similarity == "cosine" else None
        )
        self.v = nn.Linear(kv_width or width, width)
        self.out = nn.Linear(width, width)

    def _split(self, x: Tensor) -> Tensor:
        # (B, n, w) -> (B, heads, n, w / heads)
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.width // self.n_heads).transpose(1, 2)

    def project_kv(self, kv_input: Tensor, v_input: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Keys and values of ``kv_input`` (B, n_kv, w_kv), each (B, heads, n_kv, w / heads); the
        values of ``v_input`` instead where given (keys and values from two inputs)."""
        values = kv_input if v_input is None else v_input
        if self.k is not None:
            keys = self._split(self.k(kv_input))
        else:  # cosine: the queries' projection, unit-normalised
            keys = nn.functional.normalize(self._split(self.q(kv_input)), dim=-1)
        return keys, self._split(self.v(values))

    def project_q(self, q_input: Tensor) -> Tensor:
        """Queries of ``q_input`` (B, n_q, w), split into heads: (B, heads, n_q, w / heads); with
        cosine similarity unit-normalised and times the head's temperature."""
        queries = self._split(self.q(q_input))
        if self.log_temperature is not None:
            temperature = self.log_temperature.exp().view(1, -1, 1, 1)
            queries = nn.functional.normalize(queries, dim=-1) * temperature
        return queries

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
        v_input: Tensor | None = None,
        attn_mask: Tensor | None = None,
        paired: bool = False,
    ) -> Tensor:
        """Attend from ``q_input`` to ``prefix_kv`` (precomputed) followed by ``kv_input``.

        ``prefix_kv`` lets cached keys/values of a context set (from :meth:`project_kv`) be reused
        across calls; ``attn_mask`` (bool, True = may attend) is over the concatenated keys.
        ``paired=True``: query i attends to the prefix and to row i of ``kv_input`` only.
        ``v_input``: the values come from it, the keys from ``kv_input`` (same length).
        """
        q = self.project_q(q_input)
        if paired:
            if prefix_kv is None or kv_input is None:
                raise ValueError("paired attention needs prefix_kv and kv_input")
            return self.out(self._paired(q, prefix_kv, *self.project_kv(kv_input, v_input)))
        keys: list[Tensor] = []
        values: list[Tensor] = []
        if prefix_kv is not None:
            keys.append(prefix_kv[0])
            values.append(prefix_kv[1])
        if kv_input is not None:
            k, v = self.project_kv(kv_input, v_input)
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
    """Multihead attention block; by default pre-LayerNorm with the NPT paper's learned residual
    projection (module docstring).

    ``mab(x)`` is self-attention; ``mab(x, y)`` is cross-attention from ``x`` to ``y`` (then the
    keys/values get their own LayerNorm). Shapes: ``x (B, n_q, w)``, ``y (B, n_kv, w)``.

    Options (one block for every form the models use):

    - ``normalize_kv=False`` reproduces a quirk of the NPT reference code, where only the queries
      come from LN(H) and keys/values from the raw H; the paper (and our default) normalises all three.
    - ``norm="post"``: ``LN(H + MHAtt(H, Y))`` then ``LN(. + rFF(.))``, nothing normalised before
      the attention (the original transformer, PyTorch's ``TransformerEncoderLayer``; TNP-D).
    - ``residual_projection=False``: the residual is ``H`` itself, not ``H W_res``.
    - ``ff_multiplier`` (or ``d_feedforward``, the hidden width itself) 0: no feed-forward, the block
      is its attention and residual only; ``activation``: the feed-forward's, ``"gelu"`` or ``"relu"``.
    - ``separate_values=True`` (a cross block): ``mab(x, keys, values=v)`` takes the keys and the
      values from two inputs, each with its LayerNorm (the attentive NPs' keys MLP(x_c)).
    - ``similarity="cosine"`` (self-attention): one projection for queries and keys, cosine
      similarity times a learned temperature (:class:`MultiheadAttention`).
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
        d_feedforward: int | None = None,
        activation: Activation = "gelu",
        norm: NormPlacement = "pre",
        residual_projection: bool = True,
        separate_values: bool = False,
        layer_norm_eps: float = 1e-12,
        kv_width: int | None = None,
        backend: str = "sdpa",
        backend_options: Mapping[str, Any] | None = None,
        similarity: Similarity = "dot",
    ) -> None:
        super().__init__()
        if kv_width is not None and kv_width != width and not cross:
            raise ValueError(f"kv_width {kv_width} != width {width} needs a cross-attention block")
        if separate_values and not cross:
            raise ValueError("separate_values (keys and values from two inputs) needs cross=True")
        if norm not in ("pre", "post"):
            raise ValueError(f"norm must be 'pre' or 'post', got {norm!r}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.normalize_kv = normalize_kv
        self.cross = cross
        self.separate_values = separate_values
        self.post_norm = norm == "post"
        pre = not self.post_norm
        kv = kv_width or width
        # pre-norm: LayerNorms on the attention's inputs (queries; a cross block's keys, values)
        self.norm_q = nn.LayerNorm(width, eps=layer_norm_eps) if pre else None
        self.norm_kv = nn.LayerNorm(kv, eps=layer_norm_eps) if pre and cross else None
        self.norm_v = nn.LayerNorm(kv, eps=layer_norm_eps) if pre and separate_values else None
        self.attention = MultiheadAttention(
            width,
            n_heads,
            attention_dropout=attention_dropout,
            scale=scale,
            kv_width=kv_width,
            backend=backend,
            backend_options=backend_options,
            similarity=similarity,
        )
        # post-norm: the LayerNorm of the attention's residual sum
        self.norm_attention = nn.LayerNorm(width, eps=layer_norm_eps) if self.post_norm else None
        # W^res: a learned projection (NPT), or None for the identity
        self.residual = nn.Linear(width, width) if residual_projection else None
        self.dropout = Dropout(dropout)
        hidden = ff_multiplier * width if d_feedforward is None else d_feedforward
        self.norm_ff: nn.LayerNorm | None = None
        if hidden and pre:
            self.norm_ff = nn.LayerNorm(width, eps=layer_norm_eps)
        self.ff = (
            nn.Sequential(
                nn.Linear(width, hidden),
                _ACTIVATIONS[activation](),
                Dropout(dropout),
                nn.Linear(hidden, width),
                Dropout(dropout),
            )
            if hidden
            else None
        )
        if hidden and self.post_norm:  # after ff: the parameter order TNP-D's layers had
            self.norm_ff = nn.LayerNorm(width, eps=layer_norm_eps)

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        """Weights saved by the blocks this one replaced (issue 50 item 5) load under today's names:
        ``np_base.KeyValueCrossAttention`` (``norm_k``, and a feed-forward without dropout layers,
        whose second Linear was ``ff.2``) and ``tnpd.TransformerLayer`` (``ff.2``)."""
        renames = {"ff.2.": "ff.3."} if self.ff is not None else {}  # ff[2] is a Dropout: no weights
        if self.norm_v is not None:
            renames["norm_k."] = "norm_kv."
        for key in [k for k in state_dict if k.startswith(prefix)]:
            name = key[len(prefix) :]
            for old, new in renames.items():
                if name.startswith(old):
                    state_dict[prefix + new + name[len(old) :]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _query_input(self, x: Tensor) -> Tensor:
        return x if self.norm_q is None else self.norm_q(x)

    def _self_kv(self, x: Tensor, queries: Tensor) -> Tensor:
        """What self-attention's keys and values are projected from, given its query input."""
        return queries if self.normalize_kv else x

    def kv_input(self, y: Tensor) -> Tensor:
        """What keys and values are projected from: LN(y) (paper) or raw y (reference code, post-norm)."""
        norm = self.norm_kv if self.cross else self.norm_q
        return y if not self.normalize_kv or norm is None else norm(y)

    def value_input(self, values: Tensor) -> Tensor:
        """What the values of a ``separate_values`` block are projected from."""
        return values if not self.normalize_kv or self.norm_v is None else self.norm_v(values)

    def context_kv(self, y: Tensor, values: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Keys/values of a context set ``y`` (B, n_kv, w), to pass later as ``prefix_kv``."""
        v_input = None if values is None else self.value_input(values)
        return self.attention.project_kv(self.kv_input(y), v_input)

    def _output(self, x: Tensor, attended: Tensor) -> Tensor:
        """The block's output from its input ``x`` and the mixed attention output ``attended``."""
        res = (x if self.residual is None else self.residual(x)) + self.dropout(attended)
        if self.norm_attention is not None:  # post-norm
            res = self.norm_attention(res)
            return res if self.ff is None or self.norm_ff is None else self.norm_ff(res + self.ff(res))
        return res if self.ff is None or self.norm_ff is None else res + self.ff(self.norm_ff(res))

    # The two halves of ``forward`` around the attention itself, for callers that compute the
    # attention their own way (e.g. streamed over chunks of keys, ``nn.streaming``).
    def query_heads(self, x: Tensor) -> Tensor:
        """Queries of ``x`` (B, n_q, w) as attention sees them: (B, heads, n_q, w / heads)."""
        return self.attention.project_q(self._query_input(x))

    def finish(self, x: Tensor, heads_out: Tensor) -> Tensor:
        """The block's output from its input ``x`` and the attention result per head
        ``heads_out`` (B, heads, n_q, w / heads): residual, head mixing, feed-forward."""
        return self._output(x, self.attention.merge_heads(heads_out))

    # -- attention weights, for explanations: the softmax the forward pass applies, written out
    def weights(self, x: Tensor, y: Tensor) -> Tensor:
        """Cross-attention weights of queries ``x (B, n_q, w)`` over keys ``y (B, n_kv, w_kv)``:
        ``(B, heads, n_q, n_kv)``, each row summing to 1."""
        q = self.query_heads(x)
        k, _ = self.context_kv(y)
        return torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.attention.scale, dim=-1)

    def self_attention_weights(self, x: Tensor) -> Tensor:
        """Self-attention weights within each set of ``x (B, n, w)``: ``(B, heads, n, n)``."""
        h = self._query_input(x)
        k, _ = self.attention.project_kv(self._self_kv(x, h))
        q = self.attention.project_q(h)
        return torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.attention.scale, dim=-1)

    def self_and_prefix_weights(self, x: Tensor, prefix_kv: tuple[Tensor, Tensor]) -> Tensor:
        """Weights of the ``paired`` forward: each query of ``x (B, n_q, w)`` over the cached
        prefix keys and then itself: ``(B, heads, n_q, n_prefix + 1)``."""
        h = self._query_input(x)
        k_self, _ = self.attention.project_kv(self._self_kv(x, h))
        return paired_weights(self.attention.project_q(h), prefix_kv[0], k_self, self.attention.scale)

    def forward(
        self,
        x: Tensor,
        y: Tensor | None = None,
        *,
        values: Tensor | None = None,
        prefix_kv: tuple[Tensor, Tensor] | None = None,
        include_self: bool = True,
        attn_mask: Tensor | None = None,
        paired: bool = False,
    ) -> Tensor:
        """Self-attention (``y`` None, ``include_self``), cross-attention to ``y``, and/or to a cached
        ``prefix_kv``. With ``include_self=False`` and ``y=None`` the queries attend to the prefix only;
        ``paired=True`` (self-attention with a prefix): each query attends to the prefix and itself.
        ``values`` (``separate_values`` blocks): the values, ``y`` then gives the keys only."""
        if self.cross and y is None and prefix_kv is None:
            raise ValueError("a cross-attention block needs y or prefix_kv")
        if (values is not None) != (self.separate_values and y is not None):
            raise ValueError("values go with y, and only to a block built with separate_values=True")
        h = self._query_input(x)
        v_input = None
        if y is not None:
            kv = self.kv_input(y)
            v_input = None if values is None else self.value_input(values)
        elif include_self and not self.cross:
            kv = self._self_kv(x, h)
        else:
            kv = None
        attended = self.attention(
            h, kv, v_input=v_input, prefix_kv=prefix_kv, attn_mask=attn_mask, paired=paired
        )
        return self._output(x, attended)


class InducingPointAttention(nn.Module):
    """XABD, cross-attention between datapoints with learned inducing points (Rastogi et al. 2023):
    h learned inducing points ``H_D (1, h, w)`` attend to a set, ``(B, m, w_kv) -> (B, h, w)``, cost
    O(m h). ``block_options`` are the cross-attention :class:`MAB`'s."""

    def __init__(self, width: int, n_heads: int, n_inducing: int, **block_options: Any) -> None:
        super().__init__()
        self.inducing = nn.Parameter(torch.empty(1, n_inducing, width))  # H_D^0, (1, h, w)
        nn.init.xavier_uniform_(self.inducing)
        self.mab = MAB(width, n_heads, cross=True, **block_options)

    def forward(self, tokens: Tensor, *, attn_mask: Tensor | None = None) -> Tensor:
        """The inducing points after attending to ``tokens (B, m, w_kv)``: ``(B, h, w)``.
        ``attn_mask`` (True = may attend) broadcasts against ``(B, heads, h, m)``."""
        queries = self.inducing.expand(tokens.shape[0], -1, -1)  # (B, h, w)
        return self.mab(queries, tokens, attn_mask=attn_mask)


class InducedSetAttention(nn.Module):
    """ISAB, the Set Transformer's induced set attention (Lee et al. 2019): XABD
    (:class:`InducingPointAttention`), then the set reads back from the h summaries with a second
    cross-attention :class:`MAB`, ``(B, m, w) -> (B, m, w)``; O(m h) both. The read-back block's
    feed-forward has ``readback_ff_multiplier`` x w hidden units (0: none, attention and residual
    only). ``block_options`` go to both blocks."""

    def __init__(
        self,
        width: int,
        n_heads: int,
        n_inducing: int,
        *,
        readback_ff_multiplier: int = 4,
        **block_options: Any,
    ) -> None:
        super().__init__()
        self.inducing = InducingPointAttention(width, n_heads, n_inducing, **block_options)
        self.readback = MAB(width, n_heads, cross=True, ff_multiplier=readback_ff_multiplier, **block_options)

    def forward(self, tokens: Tensor, *, attn_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(read-back (B, m, w), summaries (B, h, w))``; ``attn_mask`` masks the set's points
        as keys of XABD (a key mask over m)."""
        summaries = self.inducing(tokens, attn_mask=attn_mask)  # (B, h, w)
        return self.readback(tokens, summaries), summaries
