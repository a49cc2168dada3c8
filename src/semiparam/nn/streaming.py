"""Exact cross-attention over keys/values that arrive in chunks (online log-sum-exp).

A cross-attention block whose few queries (e.g. SPIN's h inducing points) attend over very many
keys (every row of a training set) does not need all keys at once: the softmax over all keys can be
assembled from per-chunk pieces. For each chunk c and each query, keep

- ``lse_c = logsumexp_j(s_j)`` over the chunk's scores ``s_j = q . k_j * scale``, and
- ``out_c = sum_j softmax_c(s)_j v_j``, the chunk's own normalised attention output;

two pieces combine exactly as ``lse = logaddexp(lse_a, lse_b)`` and
``out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)`` (the flash-attention recurrence).
After the last chunk ``out`` is the attention over all keys, up to float rounding, and memory is
O(n_queries * chunk) instead of O(n_queries * n_keys).

Attention-weight dropout is not applied here: streaming is an inference path.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import MAB


class StreamingCrossAttention:
    """``MAB(x, concat(y_1, ..., y_m))`` computed one chunk ``y_i`` at a time.

    ``x (B, n_q, w)`` are the block's query tokens; each :meth:`update` takes a chunk of key/value
    tokens ``(B, n_i, w_kv)``; :meth:`result` returns the block output ``(B, n_q, w)``, equal to
    ``mab(x, torch.cat(chunks, dim=1))``.
    """

    def __init__(self, mab: MAB, x: Tensor) -> None:
        if not mab.cross:
            raise ValueError("streaming needs a cross-attention block (MAB(cross=True))")
        self.mab = mab
        self.x = x
        self.q = mab.query_heads(x)  # (B, heads, n_q, w / heads)
        self.scale = mab.attention.scale
        self.lse: Tensor | None = None  # (B, heads, n_q)
        self.out: Tensor | None = None  # (B, heads, n_q, w / heads), normalised over keys so far
        self.n_keys = 0

    def update(self, y_chunk: Tensor) -> None:
        """Fold the key/value tokens ``y_chunk (B, n_i, w_kv)`` into the running attention."""
        if y_chunk.shape[1] == 0:
            return
        k, v = self.mab.context_kv(y_chunk)  # each (B, heads, n_i, w / heads)
        scores = torch.matmul(self.q, k.transpose(-1, -2)) * self.scale  # (B, heads, n_q, n_i)
        lse_chunk = torch.logsumexp(scores, dim=-1)  # (B, heads, n_q)
        out_chunk = torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, heads, n_q, w / heads)
        self.n_keys += y_chunk.shape[1]
        if self.lse is None or self.out is None:
            self.lse, self.out = lse_chunk, out_chunk
            return
        lse = torch.logaddexp(self.lse, lse_chunk)
        self.out = self.out * torch.exp(self.lse - lse).unsqueeze(-1) + out_chunk * torch.exp(
            lse_chunk - lse
        ).unsqueeze(-1)
        self.lse = lse

    def result(self) -> Tensor:
        """The block output ``(B, n_q, w)`` over every key seen so far."""
        if self.out is None:
            raise ValueError("no keys were streamed: attention over an empty set is undefined")
        return self.mab.finish(self.x, self.out)
