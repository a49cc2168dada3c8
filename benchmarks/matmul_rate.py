"""The machine's matrix-multiply rate, measured in the calling process: what a training step's
achieved FLOP rate is compared with (``step_cost.py``, ``step_profile.py``, and the official-code
harness ``official_spin_step.py``, which runs in another environment, hence a module of torch only).
On a CPU the rate is fp32's; on a GPU it is that of the dtype the step's matrix products run in
(bf16 under the default autocast), on products large enough to fill the card."""

from __future__ import annotations

import time

MATMUL_SIZE = 2048  # on a CPU
GPU_MATMUL_SIZE = 8192
RATE_PROBE_SECONDS = 0.5  # a probe between two timed steps


def matmul_rate(threads: int, seconds: float = 1.0, device: str = "cpu", dtype: str = "float32") -> float:
    """Best GFLOP/s of square products of ``dtype`` on ``device`` (``threads`` threads on a CPU)
    over ``seconds``: ``MATMUL_SIZE`` on a CPU, ``GPU_MATMUL_SIZE`` elsewhere, random operands
    (zeros run faster on some cards), each product timed between device synchronisations."""
    import torch

    torch.set_num_threads(threads)
    on_gpu = torch.device(device).type != "cpu"
    size = GPU_MATMUL_SIZE if on_gpu else MATMUL_SIZE
    a = torch.randn(size, size, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(size, size, device=device, dtype=getattr(torch, dtype))

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize(device)

    for _ in range(3 if on_gpu else 1):  # warm-up (the card's clocks rise under load)
        torch.mm(a, b)
    sync()
    best = float("inf")
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9
