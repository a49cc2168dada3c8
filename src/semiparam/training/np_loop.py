"""Meta-training loop for neural processes: one fresh batch of tasks per step.

SPIN paper appendix A.6: Adam, learning rate 5e-4, cosine annealing to 0 over the run, 16 tasks
per step, the same for every model. Each step draws a batch from the task sampler, computes the
model's loss (negative log-likelihood or negative ELBO per target point) and takes one step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from .._config import ConfigError, FrozenConfig
from .schedules import flat_cosine


@dataclass(frozen=True)
class NPTrainConfig(FrozenConfig):
    """Optimisation settings of a neural process (paper A.6 defaults except ``max_steps``)."""

    max_steps: int = 1000  # paper: 100_000
    batch_size: int = 16  # tasks per step
    learning_rate: float = 5e-4
    lr_schedule: Literal["cosine", "constant"] = "cosine"  # cosine = anneal to 0 over max_steps
    objective: Literal["elbo", "iwae"] = "elbo"  # latent models only
    n_z_samples: int = 1  # latent samples per task and step (latent models only)
    clip_norm: float | None = None  # gradient-norm clipping; None = off (paper: off)
    log_every: int = 50  # steps between entries in the loss history

    def validate(self) -> None:
        for name in ("max_steps", "batch_size", "n_z_samples", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"NPTrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ConfigError(f"NPTrainConfig.learning_rate must be > 0, got {self.learning_rate}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ConfigError(f"NPTrainConfig.clip_norm must be > 0 or None, got {self.clip_norm}")


class TaskSource(Protocol):
    """Anything that hands out batches of tasks, e.g. :class:`semiparam.np.GPTaskSampler`."""

    def sample(self, batch_size: int) -> Any: ...


@dataclass
class NPTrainHistory:
    """Loss every ``log_every`` steps (mean over the steps since the last entry) and timings."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    n_steps: int = 0
    seconds: float = 0.0  # wall time of the optimisation steps, batch drawing excluded
    sampling_seconds: float = 0.0  # wall time spent drawing batches

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(self.n_steps, 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "loss": self.loss,
            "n_steps": self.n_steps,
            "seconds": self.seconds,
            "sampling_seconds": self.sampling_seconds,
        }


def train_neural_process(
    module: torch.nn.Module,
    draw_batch: Callable[[], tuple[Tensor, ...]],
    config: NPTrainConfig,
    *,
    generator: torch.Generator | None = None,
    callback: Callable[[int, float], bool | None] | None = None,
) -> NPTrainHistory:
    """Train ``module`` (a :class:`~semiparam.models.np_base.NeuralProcess`) for ``config.max_steps``.

    ``draw_batch()`` returns ``(context_x, context_y, context_mask, target_x, target_y, target_mask)``
    on the module's device. ``callback(step, loss)`` runs after every step; returning True stops.
    A non-finite loss raises at once rather than silently corrupting the weights.
    """
    optimizer = torch.optim.Adam(module.parameters(), lr=config.learning_rate)
    if config.lr_schedule == "cosine":
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: flat_cosine(step, config.max_steps, flat_fraction=0.0)
        )
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    history = NPTrainHistory()
    module.train()
    running, count = 0.0, 0
    for step in range(1, config.max_steps + 1):
        start = time.perf_counter()
        batch = draw_batch()
        drawn = time.perf_counter()
        loss = module.loss(
            *batch, objective=config.objective, n_samples=config.n_z_samples, generator=generator
        )
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"training loss became {value} at step {step}; lower the learning rate")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(module.parameters(), config.clip_norm)
        optimizer.step()
        scheduler.step()
        if loss.is_cuda:  # kernels run asynchronously: wait for them so the timing is honest
            torch.cuda.synchronize(loss.device)
        history.sampling_seconds += drawn - start
        history.seconds += time.perf_counter() - drawn
        history.n_steps = step
        running += value
        count += 1
        if step % config.log_every == 0 or step == config.max_steps:
            history.steps.append(step)
            history.loss.append(running / count)
            running, count = 0.0, 0
        if callback is not None and callback(step, value):
            break
    module.eval()
    return history
