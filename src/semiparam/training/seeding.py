"""Seeded model building without sharing PyTorch's global generator: :func:`seeded_build`.

Weights are initialised by PyTorch's ``nn.init`` functions, which draw from the global generator.
A fit therefore seeds it, builds its model and hands its dropout a generator of its own
(:mod:`semiparam.nn.dropout`); the masking draws come from the trainer's generator. Training then
never reads the global generator, so two models fitted at once in two threads give what each gives
fitted alone, and the caller's global random state is left as it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import torch

M = TypeVar("M")

# Two builds in two threads would otherwise seed and draw from the one global generator at once.
_GLOBAL_GENERATOR = threading.Lock()


def seeded_build(build: Callable[[], M], seed: int, device: torch.device) -> tuple[M, torch.Generator]:
    """``build()`` with the global generator seeded by ``seed`` (restored afterwards), and the
    generator the model's dropout draws from. On the CPU that generator starts where the global
    one stands after the build; on other devices it is a fresh generator of the device seeded by
    ``seed`` (the state the device's global generator is in after seeding)."""
    devices = [device.index or 0] if device.type == "cuda" else []
    with _GLOBAL_GENERATOR, torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        module = build()
        if device.type == "cpu":
            dropout = torch.Generator()
            dropout.set_state(torch.get_rng_state())
        else:
            dropout = torch.Generator(device=device).manual_seed(seed)
    return module, dropout


__all__ = ["seeded_build"]
