"""Gaussian-process regression tasks: the meta-learning benchmark of neural processes.

Each task is one function drawn from a GP prior on scalar inputs, observed with Gaussian noise at
m context and n target points (SPIN paper section 4.2 and appendix A.6, following the TNP/BNP
convention the authors' code uses):

- x ~ U(-2, 2) independently for every context and target point;
- RBF kernel ``s^2 exp(-d^2 / (2 l^2))`` with lengthscale l ~ U(0.1, 0.6) and scale s ~ U(0.1, 1),
  drawn per task; observation noise std 0.02;
- m ~ U{min_ctx, ..., max_ctx} and n ~ U{4, ..., 64} (inclusive), drawn once per batch and shared
  by its B tasks (``shared_sizes=True``, the paper's convention) or per task (then padded + masks).

Matern-5/2 and periodic kernels are offered for out-of-distribution evaluation; the paper reports
RBF only and gives no hyper-parameters for the others. NOTE[DIFF]: our choices for them are
Matern-5/2 ``s^2 (1 + r + r^2/3) exp(-r)`` with ``r = sqrt(5) d / l`` and l ~ U(0.1, 0.6), and periodic
``s^2 exp(-2 sin^2(pi d / p) / l^2)`` with l ~ U(0.5, 1.5) and period p ~ U(0.5, 2.0).

Draws are made in float64 from the sampler's own seeded CPU generator, so a seed gives the same
tasks on any device; batches are then moved to ``device`` as float32. On a CUDA device the
covariance and its Cholesky (the cost of a draw) are computed there, in float64 too: the same tasks
up to float64 rounding, and the draw no longer holds back a training step on the GPU.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor
from torch.distributions import Normal

from .tasks import TaskBatch, load_task_batches, save_task_batches

Kernel = Literal["rbf", "matern52", "periodic"]
KERNELS: tuple[str, ...] = ("rbf", "matern52", "periodic")

_DEFAULT_LENGTHSCALES: dict[str, tuple[float, float]] = {
    "rbf": (0.1, 0.6),
    "matern52": (0.1, 0.6),
    "periodic": (0.5, 1.5),
}
_DEFAULT_PERIOD = (0.5, 2.0)
_JITTER = 1e-8  # added to the covariance diagonal (float64) on top of the noise variance


def kernel_matrix(kernel: str, x1: Tensor, x2: Tensor, params: dict[str, Tensor]) -> Tensor:
    """Covariance ``k(x1, x2)`` for a batch of tasks: ``x1 (B, n1, 1)``, ``x2 (B, n2, 1)`` ->
    ``(B, n1, n2)``; ``params`` holds per-task ``lengthscale``, ``scale`` (and ``period``), each (B,)."""
    lengthscale = params["lengthscale"][:, None, None]
    variance = params["scale"][:, None, None] ** 2
    if kernel == "periodic":
        dist = (x1 - x2.transpose(1, 2)).abs_()  # (B, n1, n2); inputs are 1-D
        period = params["period"][:, None, None]
        return (
            torch.sin_(dist.mul_(math.pi / period))
            .square_()
            .mul_(-2.0 / lengthscale**2)
            .exp_()
            .mul_(variance)
        )
    # scale the inputs first: one pass over the (B, n1, n2) matrix less (this is the sampler's hot spot)
    dist = x1 / lengthscale - (x2 / lengthscale).transpose(1, 2)  # (B, n1, n2), in lengthscales
    if kernel == "rbf":
        return dist.square_().mul_(-0.5).exp_().mul_(variance)
    if kernel == "matern52":
        r = dist.abs_().mul_(math.sqrt(5.0))
        return (r.square() / 3.0 + r + 1.0).mul_(torch.exp(-r)).mul_(variance)
    raise ValueError(f"unknown kernel {kernel!r}; choose one of {list(KERNELS)}")


class GPTaskSampler:
    """Draws batches of 1-D GP regression tasks (see the module docstring for the distribution).

    ``sample(batch_size)`` returns a :class:`TaskBatch` with ``context_x``, ``context_y``,
    ``target_x``, ``target_y`` of shapes ``(B, m, 1)`` / ``(B, n, 1)`` and the masks; with
    ``shared_sizes=False`` every task gets its own m and n and the batch is padded.
    """

    def __init__(
        self,
        kernel: Kernel = "rbf",
        *,
        min_ctx: int = 64,
        max_ctx: int = 128,
        min_tgt: int = 4,
        max_tgt: int = 64,
        x_range: tuple[float, float] = (-2.0, 2.0),
        noise_std: float = 0.02,
        lengthscale_range: tuple[float, float] | None = None,
        scale_range: tuple[float, float] = (0.1, 1.0),
        period_range: tuple[float, float] = _DEFAULT_PERIOD,
        shared_sizes: bool = True,
        random_state: int | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; choose one of {list(KERNELS)}")
        for lo_name, lo, hi_name, hi in (
            ("min_ctx", min_ctx, "max_ctx", max_ctx),
            ("min_tgt", min_tgt, "max_tgt", max_tgt),
        ):
            if not isinstance(lo, int) or not isinstance(hi, int) or lo < 1 or hi < lo:
                raise ValueError(
                    f"need integers 1 <= {lo_name} <= {hi_name}, got {lo_name}={lo!r}, {hi_name}={hi!r}"
                )
        if noise_std < 0 or not math.isfinite(noise_std):
            raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
        lengthscale_range = lengthscale_range or _DEFAULT_LENGTHSCALES[kernel]
        for name, (lo, hi) in (
            ("x_range", x_range),
            ("lengthscale_range", lengthscale_range),
            ("scale_range", scale_range),
            ("period_range", period_range),
        ):
            if not lo <= hi or (name != "x_range" and lo <= 0):
                raise ValueError(f"{name} must be (low, high) with low <= high (and low > 0), got {(lo, hi)}")
        self.kernel = kernel
        self.min_ctx, self.max_ctx = min_ctx, max_ctx
        self.min_tgt, self.max_tgt = min_tgt, max_tgt
        self.x_range = (float(x_range[0]), float(x_range[1]))
        self.noise_std = float(noise_std)
        self.lengthscale_range = (float(lengthscale_range[0]), float(lengthscale_range[1]))
        self.scale_range = (float(scale_range[0]), float(scale_range[1]))
        self.period_range = (float(period_range[0]), float(period_range[1]))
        self.shared_sizes = shared_sizes
        self.random_state = random_state
        self.device = torch.device(device)
        self._generator = torch.Generator()
        if random_state is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(int(random_state))

    def settings(self) -> dict[str, Any]:
        """Everything needed to rebuild this sampler (JSON-serialisable)."""
        return {
            "kernel": self.kernel,
            "min_ctx": self.min_ctx,
            "max_ctx": self.max_ctx,
            "min_tgt": self.min_tgt,
            "max_tgt": self.max_tgt,
            "x_range": list(self.x_range),
            "noise_std": self.noise_std,
            "lengthscale_range": list(self.lengthscale_range),
            "scale_range": list(self.scale_range),
            "period_range": list(self.period_range),
            "shared_sizes": self.shared_sizes,
            "random_state": self.random_state,
        }

    def state_dict(self) -> dict[str, Any]:
        """The random state of the draws, so a resumed training run draws the same tasks."""
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._generator.set_state(state["generator"])

    def _uniform(self, shape: tuple[int, ...], low: float, high: float) -> Tensor:
        return low + (high - low) * torch.rand(shape, generator=self._generator, dtype=torch.float64)

    def _sizes(self, low: int, high: int, batch_size: int) -> Tensor:
        count = 1 if self.shared_sizes else batch_size
        sizes = torch.randint(low, high + 1, (count,), generator=self._generator)
        return sizes.expand(batch_size) if self.shared_sizes else sizes

    def sample(self, batch_size: int = 16) -> TaskBatch:
        """One batch of ``batch_size`` tasks, on ``self.device``, float32, with kernel parameters."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        n_ctx = self._sizes(self.min_ctx, self.max_ctx, batch_size)  # (B,)
        n_tgt = self._sizes(self.min_tgt, self.max_tgt, batch_size)  # (B,)
        m, n = int(n_ctx.max()), int(n_tgt.max())
        params = {
            "lengthscale": self._uniform((batch_size,), *self.lengthscale_range),
            "scale": self._uniform((batch_size,), *self.scale_range),
        }
        if self.kernel == "periodic":
            params["period"] = self._uniform((batch_size,), *self.period_range)
        # m + n points per task; any subset of GP draws is a GP draw, so a shorter task just
        # uses the first m_i context and first n_i target points of its block
        x = self._uniform((batch_size, m + n, 1), *self.x_range)  # (B, m + n, 1)
        # the draws stay on the CPU generator; on a CUDA device the covariance and its Cholesky
        # (the cost of a draw: O((m + n)^3) per task) are computed there, in float64 too
        where = self.device if self.device.type == "cuda" else torch.device("cpu")
        x = x.to(where)
        params = {k: v.to(where) for k, v in params.items()}
        cov = kernel_matrix(self.kernel, x, x, params)  # (B, m + n, m + n)
        cov.diagonal(dim1=1, dim2=2).add_(self.noise_std**2 + _JITTER)
        chol = torch.linalg.cholesky(cov)
        eps = torch.randn((batch_size, m + n, 1), generator=self._generator, dtype=torch.float64)
        y = chol @ eps.to(where)  # (B, m + n, 1)
        positions_c = torch.arange(m, device=where)[None, :]
        positions_t = torch.arange(n, device=where)[None, :]
        n_ctx, n_tgt = n_ctx.to(where), n_tgt.to(where)
        context_mask = positions_c < n_ctx[:, None]  # (B, m)
        target_mask = positions_t < n_tgt[:, None]  # (B, n)
        keep_c = context_mask[..., None].to(torch.float64)
        keep_t = target_mask[..., None].to(torch.float64)
        batch = TaskBatch(
            context_x=(x[:, :m] * keep_c).float(),
            context_y=(y[:, :m] * keep_c).float(),
            target_x=(x[:, m:] * keep_t).float(),
            target_y=(y[:, m:] * keep_t).float(),
            context_mask=context_mask,
            target_mask=target_mask,
            params={k: v.float() for k, v in params.items()},
        )
        return batch.to(self.device) if self.device.type != "cpu" else batch

    def eval_set(self, n_batches: int, batch_size: int = 16, *, seed: int = 0) -> list[TaskBatch]:
        """``n_batches`` batches from a fresh sampler with these settings and ``seed``: the same
        tasks every call, independent of how many batches this sampler has drawn."""
        settings = self.settings()
        settings["random_state"] = seed
        fresh = GPTaskSampler(**_from_settings(settings), device=self.device)
        return [fresh.sample(batch_size) for _ in range(n_batches)]

    def save_eval_set(
        self, path: str | Path, n_batches: int, batch_size: int = 16, *, seed: int = 0
    ) -> list[TaskBatch]:
        """Draw :meth:`eval_set` and write it to ``path`` (``.safetensors`` + ``.json``)."""
        batches = self.eval_set(n_batches, batch_size, seed=seed)
        metadata = {
            "sampler": "GPTaskSampler",
            "settings": {**self.settings(), "random_state": seed},
            "batch_size": batch_size,
        }
        save_task_batches(path, batches, metadata)
        return batches


def _from_settings(settings: dict[str, Any]) -> dict[str, Any]:
    out = dict(settings)
    for key in ("x_range", "lengthscale_range", "scale_range", "period_range"):
        out[key] = tuple(out[key])
    return out


def load_eval_set(
    path: str | Path, *, device: str | torch.device = "cpu"
) -> tuple[list[TaskBatch], dict[str, Any]]:
    """Read an evaluation set written by :meth:`GPTaskSampler.save_eval_set`."""
    return load_task_batches(path, device=device)


def gp_log_likelihood(batch: TaskBatch, kernel: str, noise_std: float) -> Tensor:
    """Per-target-point log-likelihood under the true GP posterior (the Bayes-optimal predictor),
    ``(B, n)``, NaN at padded targets. Needs the batch's kernel ``params``; a reference line for
    benchmarks (no neural process can beat it in expectation)."""
    if batch.params is None:
        raise ValueError("the batch carries no kernel parameters; draw it with GPTaskSampler")
    params = {k: v.detach().cpu().double() for k, v in batch.params.items()}
    cx = batch.context_x.detach().cpu().double()
    cy = batch.context_y.detach().cpu().double()
    tx = batch.target_x.detach().cpu().double()
    ty = batch.target_y.detach().cpu().double()
    cmask = batch.context_mask.detach().cpu()
    tmask = batch.target_mask.detach().cpu()
    k_cc = kernel_matrix(kernel, cx, cx, params)  # (B, m, m)
    # padded context points: decouple them (unit variance, no covariance) and zero their y
    pair = cmask[:, :, None] & cmask[:, None, :]
    k_cc = torch.where(pair, k_cc, torch.zeros_like(k_cc))
    diag = torch.where(cmask, noise_std**2 + _JITTER, 1.0).double()
    k_cc = k_cc + torch.diag_embed(diag)
    k_tc = kernel_matrix(kernel, tx, cx, params) * cmask[:, None, :]  # (B, n, m)
    chol = torch.linalg.cholesky(k_cc)
    alpha = torch.cholesky_solve(cy * cmask[..., None], chol)  # (B, m, 1)
    mean = (k_tc @ alpha)[..., 0]  # (B, n)
    v = torch.linalg.solve_triangular(chol, k_tc.transpose(1, 2), upper=False)  # (B, m, n)
    prior_var = params["scale"][:, None] ** 2  # k(x, x) for all three kernels
    var = prior_var - (v**2).sum(1) + noise_std**2  # (B, n)
    ll = Normal(mean, var.sqrt(), validate_args=False).log_prob(ty[..., 0])
    return torch.where(tmask, ll, torch.full_like(ll, float("nan"))).float()
