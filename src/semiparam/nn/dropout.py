"""Dropout whose masks come from a generator the model is given, not from PyTorch's global one.

A fit seeds its own ``torch.Generator`` and hands it to every module that draws masks
(:func:`set_dropout_generator`): two models fitted at once in two threads then draw what each would
draw alone, and the caller's global random state is never read or advanced while training.

The masks are drawn as 16-bit uniform integers, four to each 64-bit draw of the generator: on a
CPU, PyTorch's ``bernoulli_`` (and ``F.dropout``) draw one value per element and cost more than
the matrix products the dropout guards (``benchmarks/fit_cost.py`` profiles a fit). The keep
probability is therefore ``1 - p`` rounded to a multiple of 1/65,536. Without a generator
(``None``) the module is plain :func:`torch.nn.functional.dropout`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def dropout(
    x: Tensor, p: float, *, generator: torch.Generator | None = None, training: bool = True
) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the rest by ``1 / (1 - p)``,
    drawing from ``generator`` (None: PyTorch's global generator, through ``F.dropout``)."""
    if not training or p == 0.0:
        return x
    if generator is None:
        return F.dropout(x, p)
    if p == 1.0:
        return x * torch.zeros_like(x)
    noise = keep_mask(x.shape, p, generator, x.device).to(x.dtype).mul_(1.0 / (1.0 - p))
    return x * noise  # one product to differentiate


_LEVELS = 1 << 16  # a mask element is one 16-bit draw


def keep_mask(
    shape: torch.Size | tuple[int, ...], p: float, generator: torch.Generator, device: torch.device
) -> Tensor:
    """A bool tensor of ``shape``, each element False with probability ``p`` (to 1/65,536) and
    independent: 64-bit draws of ``generator`` read as four 16-bit integers each, an element kept
    when its integer is at least the threshold."""
    numel = math.prod(shape)
    # the full 64-bit range: every 16-bit lane of a word is uniform (a narrower range leaves the
    # top lane's sign bit clear). A new tensor, not random_() in place: under torch.func.vmap
    # (ensemble members trained together) each member then gets its own draws
    size = ((numel + 3) // 4,)
    words = torch.randint(
        -(1 << 63), (1 << 63) - 1, size, dtype=torch.int64, generator=generator, device=device
    )
    try:
        lanes = words.view(torch.int16)[:numel]  # each uniform on [-32768, 32767]
    except RuntimeError:  # under vmap before PyTorch 2.13, which has no batching rule for it
        return _keep_mask_by_shifts(words, numel, p).view(shape)
    threshold = round(p * _LEVELS) - (_LEVELS // 2)
    return (lanes >= threshold).view(shape)


def _keep_mask_by_shifts(words: Tensor, numel: int, p: float) -> Tensor:
    """:func:`keep_mask`'s mask from its words by arithmetic, lane by lane in the order
    ``view(torch.int16)`` reads them on a little-endian machine (the same mask): each lane's
    unsigned value with its top bit flipped is its int16 value plus 32,768."""
    lanes = torch.stack([(words >> shift) & 0xFFFF for shift in (0, 16, 32, 48)], dim=-1)
    return (lanes.reshape(-1)[:numel] ^ 0x8000) >= round(p * _LEVELS)


class Dropout(nn.Dropout):
    """:class:`torch.nn.Dropout` that draws from ``dropout_generator`` when one is set."""

    dropout_generator: torch.Generator | None = None

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, generator=self.dropout_generator, training=self.training)


def set_dropout_generator(module: nn.Module, generator: torch.Generator | None) -> None:
    """Give ``generator`` to every submodule of ``module`` that draws random masks (those with a
    ``dropout_generator`` attribute); None returns them to the global generator."""
    for sub in module.modules():
        if hasattr(sub, "dropout_generator"):
            sub.dropout_generator = generator


def replaying(fn: Callable[..., Any], generator: torch.Generator | None) -> Callable[..., Any]:
    """``fn`` for :func:`torch.utils.checkpoint.checkpoint`: activation checkpointing restores the
    global generators before it recomputes a block, not ours, so this wrapper does it for
    ``generator``: every call after the first runs from the state the first call started in (the
    same dropout masks, hence the same gradients) and leaves ``generator`` where it was."""
    if generator is None:
        return fn
    start = generator.get_state()
    calls = [0]

    def run(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            return fn(*args)
        now = generator.get_state()
        generator.set_state(start)
        try:
            return fn(*args)
        finally:
            generator.set_state(now)

    return run


__all__ = ["Dropout", "dropout", "keep_mask", "replaying", "set_dropout_generator"]
