"""Dropout whose masks come from a generator the model is given, not from PyTorch's global one.

A fit seeds its own ``torch.Generator`` and hands it to every module that draws masks
(:func:`set_dropout_generator`): two models fitted at once in two threads then draw what each would
draw alone, and the caller's global random state is never read or advanced while training.

On the CPU the masks are those PyTorch's own dropout draws from a global generator in the same
state (the same Bernoulli draws, scaled and multiplied in the same order), so a fit whose generator
starts where the global one would have been gives bit-for-bit the same model. Without a generator
(``None``) the module is plain :func:`torch.nn.functional.dropout`.
"""

from __future__ import annotations

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
    noise = torch.empty_like(x).bernoulli_(1.0 - p, generator=generator)
    noise.div_(1.0 - p)
    return x * noise


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


__all__ = ["Dropout", "dropout", "replaying", "set_dropout_generator"]
