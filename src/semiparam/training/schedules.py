"""Learning-rate and loss-weight schedules, as functions of the optimiser step."""

from __future__ import annotations

import math


def flat_cosine(step: int, total_steps: int, flat_fraction: float) -> float:
    """NPT's "flat then anneal": 1 for ``flat_fraction * total`` steps, then cosine to exactly 0."""
    flat = int(flat_fraction * total_steps)
    if step < flat:
        return 1.0
    span = max(total_steps - flat, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(step - flat, span) / span))


def poly_warmup(step: int, total_steps: int, warmup_fraction: float, end_ratio: float = 1e-4) -> float:
    """Linear warmup over ``warmup_fraction`` of the steps, then linear decay to ``end_ratio``
    (NPT's Forest Cover schedule: 1% warmup, decay to 1e-7 from a base of 5e-3... as a ratio)."""
    warmup = max(int(warmup_fraction * total_steps), 1)
    if step < warmup:
        return (step + 1) / warmup
    frac = (step - warmup) / max(total_steps - warmup, 1)
    return max(1.0 - frac, 0.0) * (1.0 - end_ratio) + end_ratio


def cosine_tradeoff(step: int, total_steps: int, start: float = 1.0) -> float:
    """Feature-loss weight lambda: cosine from ``start`` to 0 over all steps (NPT appendix C.1.1)."""
    return start * 0.5 * (1.0 + math.cos(math.pi * min(step, total_steps) / max(total_steps, 1)))
