"""The machine's fp32 matrix-multiply rate, measured in the calling process: what a training step's
achieved FLOP rate is compared with (``step_cost.py``, ``step_profile.py``, and the official-code
harness ``official_spin_step.py``, which runs in another environment, hence a module of torch only)."""

from __future__ import annotations

import time

MATMUL_SIZE = 2048
RATE_PROBE_SECONDS = 0.5  # a probe between two timed steps


def matmul_rate(threads: int, seconds: float = 1.0) -> float:
    """Best fp32 GFLOP/s of ``MATMUL_SIZE``-square products on ``threads`` threads over ``seconds``."""
    import torch

    torch.set_num_threads(threads)
    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    b = torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    torch.mm(a, b)  # warm-up
    best = float("inf")
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * MATMUL_SIZE**3 / best / 1e9
