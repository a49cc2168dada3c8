"""Attention backends: how a block turns queries, keys and values into its attention output.

One contract (spec-weng F1): a backend is called as ``backend(q, k, v, scale=, attn_mask=,
dropout_p=, generator=)`` (``generator``: where attention-dropout masks are drawn from) on
per-head tensors ``q (B, H, n_q, dh)``, ``k, v (B, H, n_k, dh)`` and returns
``(B, H, n_q, dh)``; ``attn_mask`` (bool, True = may attend) broadcasts against ``(B, H, n_q, n_k)``.
``backend.paired(q, k_ctx, v_ctx, k_self, v_self, scale=, dropout_p=)`` is the prediction form:
each query attends to a shared cached context and to its own key only. Backends are chosen by name
per attention kind (``NPTConfig.row_attention`` for attention between datapoints and SPIN's XABD,
``column_attention`` for the attention within a row) from :data:`BACKENDS`, and each declares

- ``exact``: equal to softmax attention up to float rounding;
- ``row_equivariant``: permuting the keys (with their values and mask columns) leaves every output
  unchanged, and permuting the queries permutes the outputs -- the property NPT's predictions
  rest on (spec-weng 2.2);
- ``pair_masks``: whether an arbitrary (query, key) mask is honoured (otherwise only key masks);
- ``attention_dropout``: whether dropout on the attention weights is applied.

The backends (spec-weng 2.3):

- ``"sdpa"`` (default): PyTorch's fused ``scaled_dot_product_attention`` (memory linear in the
  keys on the CPU). Its fused kernels do not support attention-weight dropout; while training with
  dropout it therefore computes the same attention chunk by chunk (``"chunked"``), so the paper
  presets (attention dropout 0.1) no longer fall back to PyTorch's quadratic "math" path.
- ``"dense"``: the reference, ``softmax(q k^T * scale) v`` written out (quadratic memory).
- ``"chunked"``: exact; queries in chunks of ``chunk`` rows, each recomputed in the backward pass
  (activation checkpointing), so memory is O(chunk * n_k) with or without dropout. With dropout
  it is one autograd function (:func:`dropout_attention`) whose backward pass recomputes each
  chunk's weights and redraws its dropout mask from a per-chunk seed (:func:`dropout_mask`), so no
  mask is stored and none is drawn by PyTorch's per-element Bernoulli sampler.
- ``"performer"``: FAVOR+ positive orthogonal random features (Choromanski et al. 2021): linear in
  n, approximate; the features are drawn once when the model is built (from torch's seeded RNG,
  kept as a buffer, so prediction is deterministic). Key masks only; no attention dropout.
- ``"topk"``: each query attends to its ``top_k`` highest-scoring keys (exact when ``top_k`` >= the
  number of keys); scores computed chunk by chunk, memory O(chunk * n_k).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .dropout import dropout, replaying

__all__ = [
    "BACKENDS",
    "AttentionBackend",
    "ChunkedAttention",
    "DenseAttention",
    "PerformerAttention",
    "SDPAAttention",
    "TopKAttention",
    "backend_names",
    "backend_options",
    "dropout_attention",
    "dropout_mask",
    "make_backend",
    "orthogonal_gaussian",
    "paired_weights",
    "register_backend",
]


def _masked_scores(q: Tensor, k: Tensor, scale: float, attn_mask: Tensor | None) -> Tensor:
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return scores


def _dense(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    attn_mask: Tensor | None,
    dropout_p: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    weights = torch.softmax(_masked_scores(q, k, scale, attn_mask), dim=-1)
    weights = dropout(weights, dropout_p, generator=generator)
    return torch.matmul(weights, v)


def paired_weights(q: Tensor, k_ctx: Tensor, k_self: Tensor, scale: float) -> Tensor:
    """The exact weights of :meth:`AttentionBackend.paired`: softmax over the cached context keys
    and then the query's own key, ``(B, H, n_q, n_ctx + 1)``."""
    logits_ctx = torch.matmul(q, k_ctx.transpose(-1, -2)) * scale
    logit_self = (q * k_self).sum(-1, keepdim=True) * scale
    return torch.softmax(torch.cat([logits_ctx, logit_self], dim=-1), dim=-1)


def _mask_rows(attn_mask: Tensor | None, start: int, stop: int, n_q: int) -> Tensor | None:
    """The rows ``start:stop`` of a mask over (queries, keys), or the mask itself if it does not
    vary over queries."""
    if attn_mask is None or attn_mask.dim() < 2 or attn_mask.shape[-2] != n_q or n_q == 1:
        return attn_mask
    return attn_mask[..., start:stop, :]


def _by_query_chunks(
    fn: Callable[..., Tensor],
    q: Tensor,
    chunk: int,
    attn_mask: Tensor | None,
    *args: Any,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``fn(q_chunk, mask_chunk, *args)`` over chunks of queries, each recomputed in the backward
    pass when gradients are needed (memory of one chunk's scores, not all of them). The random
    state (the global one, and ``generator``, the one ``fn`` draws its dropout from) is restored for
    the recomputation, so dropout draws the same mask twice."""
    n_q = q.shape[-2]
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in (q, *args)
    )
    outs = []
    for start in range(0, n_q, chunk):
        stop = min(start + chunk, n_q)
        q_c = q[..., start:stop, :]
        mask_c = _mask_rows(attn_mask, start, stop, n_q)
        if needs_grad and n_q > chunk:
            outs.append(checkpoint(replaying(fn, generator), q_c, mask_c, *args, use_reentrant=False))
        else:
            outs.append(fn(q_c, mask_c, *args))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)


# Attention-weight dropout in the chunked backends draws its masks 16 bits per element, two elements
# per 32-bit draw, so p is used as round(p * 2**16) / 2**16 (within 8e-6 of p); the draws are made
# in parts of MASK_PART words, each from its own generator, spread over PyTorch's CPU threads.
MASK_BITS = 16
MASK_PART = 1 << 20
_PART_STRIDE = 0x9E3779B97F4A7C15  # odd: parts of one seed, and seeds a few apart, never share one
_pools: dict[int, ThreadPoolExecutor] = {}


def _random_words(n_words: int, seed: int, device: torch.device | str) -> Tensor:
    """``n_words`` uniform int32 words, a function of ``seed`` and ``n_words`` only (not of the
    number of threads): part ``j`` of ``MASK_PART`` words comes from a generator seeded with
    ``seed + (j + 1) * _PART_STRIDE``. PyTorch's CPU generator is serial, so on the CPU the parts
    are drawn on as many Python threads as PyTorch has (its ops release the GIL)."""
    words = torch.empty(n_words, dtype=torch.int32, device=device)

    def draw(part: int) -> None:
        generator = torch.Generator(device=device).manual_seed((seed + (part + 1) * _PART_STRIDE) % (1 << 63))
        words[part * MASK_PART : (part + 1) * MASK_PART].random_(
            -(1 << 31), (1 << 31) - 1, generator=generator
        )

    parts = range((n_words + MASK_PART - 1) // MASK_PART)
    threads = torch.get_num_threads()
    if words.device.type != "cpu" or len(parts) < 2 or threads < 2:
        for part in parts:
            draw(part)
    else:
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="semiparam-mask")
        list(pool.map(draw, parts))
    return words


def dropout_mask(
    shape: tuple[int, ...], p: float, seed: int, device: torch.device | str = "cpu"
) -> tuple[Tensor, float]:
    """A bool mask of ``shape``, each element True (dropped) with probability
    ``p' = round(p * 2**16) / 2**16``, and the scale ``1 / (1 - p')`` for the kept elements; the
    same ``seed`` (and shape) redraws the same mask.

    NOTE[DIFF]: not PyTorch's ``bernoulli_``, which on the CPU draws a double per element from one
    serial generator; at the paper presets' attention dropout that sampling was the largest single
    cost of an NPT training step. Here two 16-bit uniforms come from each 32-bit draw, the draws
    are spread over the CPU threads (:func:`_random_words`), and each is compared with an integer
    threshold: the same Bernoulli distribution for p' (at most 2**-17 from p), several times
    faster, and redrawable chunk by chunk without storing the mask."""
    levels = 1 << MASK_BITS
    dropped = round(p * levels)
    if dropped >= levels:
        return torch.ones(shape, dtype=torch.bool, device=device), 0.0
    numel = math.prod(shape)
    halves = _random_words((numel + 1) // 2, seed, device).view(torch.int16)
    # int16 values are uniform on [-2**15, 2**15): the lowest `dropped` of them drop
    drop = halves[:numel].view(shape) < dropped - (1 << 15)
    return drop, levels / (levels - dropped)


def _draw_seed(generator: torch.Generator | None) -> int:
    """A seed for :func:`dropout_mask`, drawn from ``generator`` (None: PyTorch's global CPU one)."""
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, 1 << 62, (1,), generator=generator, device=device).item())


def _chunk_weights(
    q_scaled: Tensor, k: Tensor, attn_mask: Tensor | None, p: float, seed: int
) -> tuple[Tensor, Tensor, float]:
    """Softmax weights of the (already scaled) queries over ``k``, the chunk's dropout mask and the
    kept weights' scale: the same inputs and ``seed`` give the same tensors bit for bit."""
    scores = torch.matmul(q_scaled, k.transpose(-1, -2))
    if attn_mask is not None:
        scores = scores.masked_fill_(~attn_mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    drop, keep_scale = dropout_mask(tuple(probs.shape), p, seed, probs.device)
    return probs, drop, keep_scale


class _DropoutAttention(torch.autograd.Function):
    """Softmax attention with dropout on its weights over chunks of queries; see
    :func:`dropout_attention`. The scales (softmax temperature, dropout's 1 / (1 - p)) are applied
    to the small (n_q, dh) tensors, not to the (n_q, n_k) weights."""

    @staticmethod
    def forward(  # noqa: D102
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        attn_mask: Tensor | None,
        scale: float,
        p: float,
        chunk: int,
        seed: int,
    ) -> Tensor:
        n_q = q.shape[-2]
        outs = []
        for i, start in enumerate(range(0, n_q, chunk)):
            stop = min(start + chunk, n_q)
            mask_c = _mask_rows(attn_mask, start, stop, n_q)
            probs, drop, keep_scale = _chunk_weights(q[..., start:stop, :] * scale, k, mask_c, p, seed + i)
            outs.append(torch.matmul(probs.masked_fill_(drop, 0.0), v).mul_(keep_scale))
        ctx.save_for_backward(q, k, v, attn_mask)
        ctx.settings = (scale, p, chunk, seed)
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # noqa: D102
        q, k, v, attn_mask = ctx.saved_tensors
        scale, p, chunk, seed = ctx.settings
        n_q = q.shape[-2]
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        grad_q = torch.empty(*batch, *q.shape[-2:], dtype=q.dtype, device=q.device)
        grad_k = torch.zeros(*batch, *k.shape[-2:], dtype=k.dtype, device=k.device)
        grad_v = torch.zeros(*batch, *v.shape[-2:], dtype=v.dtype, device=v.device)
        for i, start in enumerate(range(0, n_q, chunk)):
            stop = min(start + chunk, n_q)
            q_scaled = q[..., start:stop, :] * scale
            mask_c = _mask_rows(attn_mask, start, stop, n_q)
            probs, drop, keep_scale = _chunk_weights(q_scaled, k, mask_c, p, seed + i)
            grad_c = grad_out[..., start:stop, :] * keep_scale
            grad_v += torch.matmul(probs.masked_fill(drop, 0.0).transpose(-1, -2), grad_c)
            grad_probs = torch.matmul(grad_c, v.transpose(-1, -2)).masked_fill_(drop, 0.0)
            # softmax backward: probs * (g - sum(g * probs)); masked keys have probs 0, so grad 0
            grad_scores = torch._softmax_backward_data(grad_probs, probs, -1, probs.dtype)
            grad_q[..., start:stop, :] = torch.matmul(grad_scores, k).mul_(scale)
            grad_k += torch.matmul(grad_scores.transpose(-1, -2), q_scaled)
        return (
            grad_q.sum_to_size(q.shape) if ctx.needs_input_grad[0] else None,
            grad_k.sum_to_size(k.shape) if ctx.needs_input_grad[1] else None,
            grad_v.sum_to_size(v.shape) if ctx.needs_input_grad[2] else None,
            None,
            None,
            None,
            None,
            None,
        )


def dropout_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    dropout_p: float,
    chunk: int,
    attn_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Exact softmax attention with dropout ``dropout_p`` on its weights, ``chunk`` queries at a
    time, in memory O(chunk * n_k): the backward pass recomputes each chunk's weights and redraws
    its mask (:func:`dropout_mask`, seeded per chunk from one seed drawn from ``generator``) instead
    of storing either. Activation checkpointing of the enclosing block (which restores
    ``generator``) therefore redraws the same masks as well."""
    seed = _draw_seed(generator)
    return _DropoutAttention.apply(q, k, v, attn_mask, scale, dropout_p, chunk, seed)


class AttentionBackend(nn.Module):
    """Base class: subclasses set the class attributes and implement :meth:`forward`."""

    name: ClassVar[str] = ""
    exact: ClassVar[bool] = True
    row_equivariant: ClassVar[bool] = True
    pair_masks: ClassVar[bool] = True
    attention_dropout: ClassVar[bool] = True

    def __init__(self, head_dim: int, **options: Any) -> None:
        super().__init__()
        self.head_dim = head_dim
        if options:
            raise TypeError(f"attention backend {self.name!r} takes no options {sorted(options)}")

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        scale: float,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        raise NotImplementedError

    def paired(
        self,
        q: Tensor,
        k_ctx: Tensor,
        v_ctx: Tensor,
        k_self: Tensor,
        v_self: Tensor,
        *,
        scale: float,
        dropout_p: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Each query attends to the shared context (``k_ctx, v_ctx``: ``(1 or B, H, n_ctx, dh)``)
        and to its own key/value only (``k_self, v_self``: like ``q``). Written out rather than
        through a mask so that every query's softmax is reduced in the same order whatever its
        position: a row's prediction is bit-for-bit independent of which rows share its batch.
        Memory is ``(B, H, n_q, n_ctx)``, bounded by the query batch size."""
        weights = dropout(paired_weights(q, k_ctx, k_self, scale), dropout_p, generator=generator)
        return torch.matmul(weights[..., :-1], v_ctx) + weights[..., -1:] * v_self

    def extra_repr(self) -> str:
        return f"name={self.name!r}, head_dim={self.head_dim}, exact={self.exact}"


BACKENDS: dict[str, type[AttentionBackend]] = {}


def register_backend(cls: type[AttentionBackend]) -> type[AttentionBackend]:
    """Class decorator: make ``cls`` choosable by its ``name`` (``row_attention=name``)."""
    if not cls.name:
        raise ValueError("an attention backend needs a non-empty class attribute 'name'")
    BACKENDS[cls.name] = cls
    return cls


def backend_names() -> list[str]:
    return sorted(BACKENDS)


def backend_options(name: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``settings`` (model-wide: ``chunk``, ``top_k``, ``n_features``) that backend
    ``name`` takes: a model config names each setting once for whichever backend is chosen."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose from {backend_names()}")
    accepted = inspect.signature(BACKENDS[name].__init__).parameters
    return {key: value for key, value in settings.items() if key in accepted and key != "head_dim"}


def make_backend(name: str, head_dim: int, **options: Any) -> AttentionBackend:
    """The backend registered as ``name`` for heads of width ``head_dim``; ``options`` are its own
    (``chunk`` for chunked/topk, ``n_features`` for performer, ``top_k`` for topk)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose from {backend_names()}")
    return BACKENDS[name](head_dim, **options)


@register_backend
class DenseAttention(AttentionBackend):
    """The reference: softmax attention written out (quadratic memory)."""

    name = "dense"

    def forward(self, q, k, v, *, scale, attn_mask=None, dropout_p=0.0, generator=None):  # noqa: D102
        return _dense(q, k, v, scale, attn_mask, dropout_p, generator)


@register_backend
class ChunkedAttention(AttentionBackend):
    """Exact softmax attention over chunks of ``chunk`` queries, each recomputed in the backward
    pass: memory O(chunk * n_k), attention dropout included."""

    name = "chunked"

    def __init__(self, head_dim: int, *, chunk: int = 1024) -> None:
        super().__init__(head_dim)
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.chunk = chunk

    def forward(self, q, k, v, *, scale, attn_mask=None, dropout_p=0.0, generator=None):  # noqa: D102
        if dropout_p > 0:
            return dropout_attention(
                q,
                k,
                v,
                scale=scale,
                dropout_p=dropout_p,
                chunk=self.chunk,
                attn_mask=attn_mask,
                generator=generator,
            )

        def one(q_c: Tensor, mask_c: Tensor | None, k: Tensor, v: Tensor) -> Tensor:
            return _dense(q_c, k, v, scale, mask_c, 0.0)

        return _by_query_chunks(one, q, self.chunk, attn_mask, k, v)


@register_backend
class SDPAAttention(AttentionBackend):
    """PyTorch's ``scaled_dot_product_attention``; with attention dropout in training, the exact
    chunked computation (see the module docstring)."""

    name = "sdpa"

    def __init__(self, head_dim: int, *, chunk: int = 1024) -> None:
        super().__init__(head_dim)
        self.chunked = ChunkedAttention(head_dim, chunk=chunk)

    def forward(self, q, k, v, *, scale, attn_mask=None, dropout_p=0.0, generator=None):  # noqa: D102
        if dropout_p > 0:
            return self.chunked(
                q, k, v, scale=scale, attn_mask=attn_mask, dropout_p=dropout_p, generator=generator
            )
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)


@register_backend
class TopKAttention(AttentionBackend):
    """Each query attends to its ``top_k`` highest-scoring (unmasked) keys; softmax over those.
    Exact when ``top_k`` >= the number of keys. Scores are computed ``chunk`` queries at a time."""

    name = "topk"
    exact = False

    def __init__(self, head_dim: int, *, top_k: int = 32, chunk: int = 1024) -> None:
        super().__init__(head_dim)
        if top_k < 1 or chunk < 1:
            raise ValueError(f"top_k and chunk must be >= 1, got {top_k} and {chunk}")
        self.top_k = top_k
        self.chunk = chunk

    @staticmethod
    def _sparse_softmax(scores: Tensor, top_k: int) -> Tensor:
        """Softmax over each row's ``top_k`` largest scores, zero elsewhere (same shape)."""
        if top_k >= scores.shape[-1]:
            return torch.softmax(scores, dim=-1)
        top, index = scores.topk(top_k, dim=-1)
        return torch.zeros_like(scores).scatter(-1, index, torch.softmax(top, dim=-1))

    def forward(self, q, k, v, *, scale, attn_mask=None, dropout_p=0.0, generator=None):  # noqa: D102
        def one(q_c: Tensor, mask_c: Tensor | None, k: Tensor, v: Tensor) -> Tensor:
            weights = self._sparse_softmax(_masked_scores(q_c, k, scale, mask_c), self.top_k)
            return torch.matmul(dropout(weights, dropout_p, generator=generator), v)

        return _by_query_chunks(one, q, self.chunk, attn_mask, k, v, generator=generator)

    def paired(self, q, k_ctx, v_ctx, k_self, v_self, *, scale, dropout_p=0.0, generator=None):  # noqa: D102
        logits_ctx = torch.matmul(q, k_ctx.transpose(-1, -2)) * scale
        logit_self = (q * k_self).sum(-1, keepdim=True) * scale
        weights = self._sparse_softmax(torch.cat([logits_ctx, logit_self], dim=-1), self.top_k)
        weights = dropout(weights, dropout_p, generator=generator)
        return torch.matmul(weights[..., :-1], v_ctx) + weights[..., -1:] * v_self


def orthogonal_gaussian(n_features: int, dim: int, generator: torch.Generator | None = None) -> Tensor:
    """``(n_features, dim)`` rows in blocks of ``dim`` mutually orthogonal directions (QR of a
    Gaussian block), each scaled to the norm of a ``dim``-dimensional standard Gaussian vector:
    the Performer's block-orthogonal random features, unbiased with lower variance than i.i.d."""
    blocks = []
    for start in range(0, n_features, dim):
        gaussian = torch.randn(dim, dim, generator=generator)
        q, r = torch.linalg.qr(gaussian)
        # signs of R's diagonal onto Q's columns: without them the directions are not uniform
        # (LAPACK's sign convention biases them), and the kernel estimate is biased
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
        blocks.append(q.T[: min(dim, n_features - start)])
    directions = torch.cat(blocks, dim=0)
    norms = torch.randn(n_features, dim, generator=generator).norm(dim=1, keepdim=True)
    return directions * norms


@register_backend
class PerformerAttention(AttentionBackend):
    """FAVOR+ (spec-weng 4.2): ``exp(q.k * scale) ~ phi(q) . phi(k)`` with positive features
    ``phi(x) = exp(w x - |x|^2 / 2) / sqrt(m)`` of ``x = x * sqrt(scale)``; then
    ``out_i = phi(q_i) S / (phi(q_i) . z)`` with ``S = sum_j phi(k_j) v_j^T`` and ``z = sum_j
    phi(k_j)``: O((n_q + n_k) m dh). Stabilised by subtracting a maximum per query row and one
    shared by all keys of a (batch, head), both of which cancel in the ratio."""

    name = "performer"
    exact = False
    pair_masks = False
    attention_dropout = False

    def __init__(self, head_dim: int, *, n_features: int = 256) -> None:
        super().__init__(head_dim)
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        self.n_features = n_features
        self.register_buffer("projection", orthogonal_gaussian(n_features, head_dim))

    def _logits(self, x: Tensor, scale: float) -> Tensor:
        x = x * math.sqrt(scale)
        wx = torch.matmul(x, self.projection.to(x.dtype).T)  # (B, H, n, m)
        return wx - 0.5 * (x * x).sum(-1, keepdim=True)

    def _query_features(self, q: Tensor, scale: float) -> Tensor:
        logits = self._logits(q, scale)
        return torch.exp(logits - logits.amax(dim=-1, keepdim=True).detach())

    @staticmethod
    def _key_features(logits: Tensor, shift: Tensor) -> Tensor:
        return torch.exp(logits - shift)

    @staticmethod
    def _key_mask(attn_mask: Tensor | None, n_k: int) -> Tensor | None:
        """A mask that is the same for every query, as ``(..., n_k, 1)`` floats; other masks raise."""
        if attn_mask is None:
            return None
        if attn_mask.dim() >= 2 and attn_mask.shape[-2] != 1:
            rows = attn_mask.reshape(-1, attn_mask.shape[-2], attn_mask.shape[-1])
            if not bool((rows == rows[:, :1, :]).all()):
                raise ValueError(
                    "the performer backend honours key masks only (the same keys for every query); "
                    "use an exact backend for a mask over (query, key) pairs"
                )
            attn_mask = attn_mask[..., :1, :]
        return attn_mask.transpose(-1, -2).to(torch.get_default_dtype())

    def forward(self, q, k, v, *, scale, attn_mask=None, dropout_p=0.0, generator=None):  # noqa: D102
        phi_q = self._query_features(q, scale)
        k_logits = self._logits(k, scale)
        shift = k_logits.amax(dim=(-2, -1), keepdim=True).detach()
        phi_k = self._key_features(k_logits, shift)  # (B, H, n_k, m)
        mask = self._key_mask(attn_mask, k.shape[-2])
        if mask is not None:
            phi_k = phi_k * mask.to(phi_k.dtype)
        kv = torch.matmul(phi_k.transpose(-1, -2), v)  # (B, H, m, dh)
        z = phi_k.sum(dim=-2)  # (B, H, m)
        numerator = torch.matmul(phi_q, kv)
        denominator = (phi_q * z.unsqueeze(-2)).sum(-1, keepdim=True)
        return numerator / denominator.clamp_min(torch.finfo(q.dtype).tiny)

    def paired(self, q, k_ctx, v_ctx, k_self, v_self, *, scale, dropout_p=0.0, generator=None):  # noqa: D102
        phi_q = self._query_features(q, scale)
        ctx_logits = self._logits(k_ctx, scale)
        self_logits = self._logits(k_self, scale)
        shift = torch.maximum(
            ctx_logits.amax(dim=(-2, -1), keepdim=True).amax(dim=0, keepdim=True),
            self_logits.amax(dim=(-2, -1), keepdim=True).amax(dim=0, keepdim=True),
        ).detach()  # one constant for every key any query sees
        phi_ctx = self._key_features(ctx_logits, shift)
        phi_self = self._key_features(self_logits, shift)
        kv = torch.matmul(phi_ctx.transpose(-1, -2), v_ctx)  # (1 or B, H, m, dh)
        z = phi_ctx.sum(dim=-2).unsqueeze(-2)  # (1 or B, H, 1, m)
        w_self = (phi_q * phi_self).sum(-1, keepdim=True)  # (B, H, n_q, 1)
        numerator = torch.matmul(phi_q, kv) + w_self * v_self
        denominator = (phi_q * z).sum(-1, keepdim=True) + w_self
        return numerator / denominator.clamp_min(torch.finfo(q.dtype).tiny)
