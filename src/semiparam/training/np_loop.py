"""Meta-training of neural processes on the library's one training engine.

SPIN paper appendix A.6: Adam, learning rate 5e-4, cosine annealing to 0 over the run, 16 tasks
per step, the same for every model. Each step draws a batch of tasks from the task source, computes
the model's loss (negative log-likelihood or negative ELBO per target point) and takes one step.

:class:`NPTrainer` is the :class:`~semiparam.training.engine.Engine` whose step loss is the neural
process's own objective; schedule, clipping, validation and early stopping, checkpoints and resume,
progress bar and the non-finite-loss check are the engine's, shared with the table models.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from .._config import ConfigError, FrozenConfig
from .checkpoint import TrainingCheckpoint
from .config import TrainConfig
from .distributed import ProcessGroup
from .engine import BestCheckpoint, Callback, Engine, ProgressBar, TrainHistory


@dataclass(frozen=True)
class NPTrainConfig(FrozenConfig):
    """Optimisation settings of a neural process (paper A.6 defaults except ``max_steps``).

    ``eval_every`` and ``patience`` act only when the fit is given validation tasks: the
    validation loss (negative target log-likelihood per point) is computed every ``eval_every``
    steps, the best weights are kept and restored at the end, and after ``patience`` evaluations
    without improvement training stops (None: run every step, as the paper does).

    ``lr_schedule="adaptive"`` trains until the validation score stops improving instead of for a
    fixed number of steps: the learning rate stays flat until ``patience`` evaluations pass without
    the validation loss (smoothed by an exponential moving average, weight ``smoothing`` on the past)
    improving by 0.1%, then a cosine anneal to 0 over ``anneal_fraction`` x the steps run so far
    ends the fit; ``max_steps`` is only a ceiling (the anneal starts in time to end there), and no
    plateau is declared before ``min_steps``. The engine's adaptive schedule, the table models'
    default. With ``lr_drops`` > 0 the first ``lr_drops`` plateaus each multiply the learning rate
    by ``drop_factor`` (a step down; the plateau rule starts afresh) and only the next one starts the
    anneal: at a flat learning rate the validation score plateaus where the optimiser's noise
    hides its progress, and a lower rate can still go on improving (a run converged when even the
    lowest rate stops improving). NOTE[DIFF]: the paper trains a fixed 100,000 steps of cosine
    annealing; a fixed schedule's best weights are its last by construction, so it cannot tell a
    converged run from one cut short, while a plateau at the lowest learning rate can.
    """

    max_steps: int = 1000  # paper: 100_000
    batch_size: int = 16  # tasks per step
    learning_rate: float = 5e-4
    # cosine = anneal to 0 over max_steps; adaptive = flat until a validation plateau, then anneal
    lr_schedule: Literal["cosine", "constant", "adaptive"] = "cosine"
    objective: Literal["elbo", "iwae"] = "elbo"  # latent models only
    n_z_samples: int = 1  # latent samples per task and step (latent models only)
    clip_norm: float | None = None  # gradient-norm clipping; None = off (paper: off)
    log_every: int = 50  # steps between entries in the loss history
    eval_every: int = 250  # steps between validation scores (with validation tasks only)
    patience: int | None = None  # evaluations without improvement before stopping; None = never
    time_budget: float | None = None  # seconds of training; None = no limit
    # steps between training checkpoints (with a checkpoint directory); was checkpoint_every (ALIASES)
    checkpoint_every_steps: int = 500
    smoothing: float = 0.0  # EMA weight of past validation losses in the plateau rule (patience)
    min_steps: int = 0  # no plateau declared before this step
    anneal_fraction: float = 0.5  # adaptive: anneal length / steps run before it
    lr_drops: int = 0  # adaptive: plateaus that step the learning rate down before the anneal
    drop_factor: float = 0.3  # adaptive: the learning rate's factor at each step down

    # fields added after fits were first checkpointed: they enter a fit's checkpoint fingerprint only
    # when set away from their defaults, so fits checkpointed before they existed still resume
    LATER_FIELDS = ("smoothing", "min_steps", "anneal_fraction", "lr_drops", "drop_factor")

    def validate(self) -> None:
        for name in (
            "max_steps",
            "batch_size",
            "n_z_samples",
            "log_every",
            "eval_every",
            "checkpoint_every_steps",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"NPTrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ConfigError(f"NPTrainConfig.learning_rate must be > 0, got {self.learning_rate}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ConfigError(f"NPTrainConfig.clip_norm must be > 0 or None, got {self.clip_norm}")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"NPTrainConfig.patience must be >= 1 or None, got {self.patience}")
        if self.time_budget is not None and not self.time_budget > 0:
            raise ConfigError(
                f"NPTrainConfig.time_budget must be > 0 seconds or None, got {self.time_budget}"
            )
        if not self.anneal_fraction > 0:
            raise ConfigError(f"NPTrainConfig.anneal_fraction must be > 0, got {self.anneal_fraction}")
        if not 0.0 <= self.smoothing < 1.0:
            raise ConfigError(f"NPTrainConfig.smoothing must be in [0, 1), got {self.smoothing}")
        if self.min_steps < 0 or self.lr_drops < 0:
            raise ConfigError(
                f"NPTrainConfig.min_steps and lr_drops must be >= 0, got {self.min_steps}, {self.lr_drops}"
            )
        if not 0.0 < self.drop_factor < 1.0:
            raise ConfigError(f"NPTrainConfig.drop_factor must be in (0, 1), got {self.drop_factor}")

    def fingerprint_dict(self) -> dict[str, Any]:
        """The settings that decide a fit, for its checkpoint's fingerprint: the base's (renamed
        keys spelt as before) less the ``LATER_FIELDS`` left at their defaults."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return {
            k: v
            for k, v in super().fingerprint_dict().items()
            if k not in self.LATER_FIELDS or v != defaults[k]
        }

    def engine_config(self) -> TrainConfig:
        """The engine's settings: cosine to exactly 0 over ``max_steps`` (no flat part), constant, or
        the engine's adaptive schedule (no warm-up); gradient-norm clipping or none."""
        schedule = {"cosine": "flat_cosine", "constant": "constant", "adaptive": "adaptive"}
        return TrainConfig(
            max_steps=self.max_steps,
            learning_rate=self.learning_rate,
            lr_schedule=schedule[self.lr_schedule],  # type: ignore[arg-type]
            flat_fraction=0.0,
            warmup_fraction=0.0,
            anneal_fraction=self.anneal_fraction,
            min_anneal_steps=1,
            min_steps=self.min_steps,
            smoothing=self.smoothing,
            clip_mode="norm" if self.clip_norm is not None else "none",
            clip_value=self.clip_norm if self.clip_norm is not None else 1.0,
            eval_every=self.eval_every,
            time_budget=self.time_budget,
            batch_size=self.batch_size,
        )


class TaskSource(Protocol):
    """Anything that hands out batches of tasks, e.g. :class:`semiparam.neural_processes.GPTaskSampler`."""

    def sample(self, batch_size: int) -> Any: ...


@dataclass
class NPTrainHistory:
    """Loss every ``log_every`` steps (mean over the steps since the last entry), the validation
    scores when there were validation tasks, and timings."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    n_steps: int = 0
    seconds: float = 0.0  # wall time of the optimisation steps, batch drawing and validation excluded
    sampling_seconds: float = 0.0  # wall time spent drawing batches
    eval_steps: list[int] = field(default_factory=list)  # 1-based steps of the validation scores
    val_loss: list[float] = field(default_factory=list)
    best_step: int | None = None  # 1-based step of the weights kept (validation only)
    anneal_start: int | None = None  # adaptive schedule: 1-based first step of the final anneal
    lr_drops: list[int] = field(default_factory=list)  # adaptive: 1-based first steps at each lower rate
    stop_reason: str = ""
    eval_seconds: float = 0.0

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(self.n_steps, 1)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_engine(
        cls, history: TrainHistory, log_every: int, sampling_seconds: float, lr_drops: Sequence[int] = ()
    ) -> NPTrainHistory:
        out = cls(
            n_steps=len(history.train_loss),
            sampling_seconds=sampling_seconds,
            seconds=max(history.seconds - sampling_seconds - history.eval_seconds, 0.0),
            eval_steps=[s + 1 for s in history.eval_steps],
            val_loss=list(history.val_loss),
            best_step=None if history.best_step is None else history.best_step + 1,
            anneal_start=None if history.anneal_start is None else history.anneal_start + 1,
            lr_drops=[s + 1 for s in lr_drops],
            stop_reason=history.stop_reason,
            eval_seconds=history.eval_seconds,
        )
        running, count = 0.0, 0
        for i, value in enumerate(history.train_loss, start=1):
            running += value
            count += 1
            if i % log_every == 0 or i == out.n_steps:
                out.steps.append(i)
                out.loss.append(running / count)
                running, count = 0.0, 0
        return out


class _StepCallback(Callback):
    """Runs a user's ``callback(step, loss)`` (1-based step) after each step; True stops."""

    def __init__(self, callback: Callable[[int, float], bool | None] | None) -> None:
        self.callback = callback

    def on_step_end(self, trainer: Engine, step: int, stats: dict[str, float]) -> None:
        if self.callback is not None and self.callback(step + 1, stats["loss"]):
            trainer.request_stop(step, "callback")


class NPTrainer(Engine):
    """The engine for a :class:`~semiparam.models.np_base.NeuralProcess`: Adam, the model's own
    loss on each batch ``(context_x, context_y, context_mask, target_x, target_y, target_mask)``;
    ``generator`` draws the latent samples of the latent models' objectives. One process (a task
    batch is small; several fits run side by side instead, see ``semiparam.parallel``)."""

    def __init__(
        self,
        module: torch.nn.Module,
        config: NPTrainConfig,
        *,
        generator: torch.Generator | None = None,
        callbacks: Sequence[Callback] = (),
    ) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        super().__init__(
            module,
            config.engine_config(),
            callbacks=callbacks,
            optimizer=torch.optim.Adam(params, lr=config.learning_rate),
            generators={"latent": generator},
            group=ProcessGroup(),
        )
        self.np_config = config
        self.lr_drops: list[int] = []  # 0-based first steps at each lower learning rate

    def request_stop(self, step: int, reason: str) -> None:
        """A plateau while steps down are left (``lr_drops``) lowers the learning rate from the next
        step and starts the plateau rule afresh (its smoothed score, best and patience count are
        the lower rate's own: a best reached by a lucky spike at the higher rate does not count
        against it); otherwise as the engine (stop, or start the anneal)."""
        c = self.np_config
        stepping_down = c.lr_schedule == "adaptive" and reason == "plateau" and self.anneal_start is None
        if stepping_down and len(self.lr_drops) < c.lr_drops:
            self.lr_drops.append(step + 1)
            for cb in self.callbacks:  # the plateau rule starts afresh: the lower rate's own scores
                if isinstance(cb, BestCheckpoint):  # (the best weights so far stay kept)
                    cb.bad_evals, cb.smoothed, cb.best_smoothed = 0, None, None
            return
        super().request_stop(step, reason)

    def learning_rate(self, step: int) -> float:
        drops = sum(1 for first in self.lr_drops if first <= step)
        return super().learning_rate(step) * self.np_config.drop_factor**drops

    def state_dict(self, step: int, seconds: float, *, finished: bool = False) -> dict[str, Any]:
        return {**super().state_dict(step, seconds, finished=finished), "lr_drops": list(self.lr_drops)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.lr_drops = list(state.get("lr_drops", []))  # checkpoints from before the option: none

    def step_loss(self, batch: tuple[Tensor | None, ...], step: int) -> tuple[Tensor, dict[str, float]]:
        c = self.np_config
        loss = self.model.loss(  # type: ignore[operator]
            *batch, objective=c.objective, n_samples=c.n_z_samples, generator=self.generators["latent"]
        )
        return loss, {"loss": float(loss.detach())}


class _TimedSource:
    """``draw_batch`` as the engine's batch source, timing the draws. Checkpointed with the engine:
    the seconds spent drawing so far (so a resumed fit's ``sampling_seconds`` and ``seconds`` count
    the whole run) and, when the task source has ``state_dict`` / ``load_state_dict``, its random
    state."""

    def __init__(self, draw_batch: Callable[[], tuple[Tensor | None, ...]], state_owner: Any = None) -> None:
        self.draw_batch = draw_batch
        self.seconds = 0.0
        self.owner = state_owner if hasattr(state_owner, "state_dict") else None

    def __call__(self, step: int) -> tuple[Tensor | None, ...]:
        start = time.perf_counter()
        batch = self.draw_batch()
        self.seconds += time.perf_counter() - start
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "sampling_seconds": self.seconds,
            "source": None if self.owner is None else self.owner.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seconds = float(state["sampling_seconds"])
        if self.owner is not None and state["source"] is not None:
            self.owner.load_state_dict(state["source"])


def train_neural_process(
    module: torch.nn.Module,
    draw_batch: Callable[[], tuple[Tensor | None, ...]],
    config: NPTrainConfig,
    *,
    generator: torch.Generator | None = None,
    callback: Callable[[int, float], bool | None] | None = None,
    evaluate: Callable[[], float] | None = None,
    callbacks: Sequence[Callback] = (),
    checkpoint: TrainingCheckpoint | None = None,
    resume: dict[str, Any] | None = None,
    task_source: Any = None,
) -> NPTrainHistory:
    """Train ``module`` (a :class:`~semiparam.models.np_base.NeuralProcess`) for ``config.max_steps``
    on :class:`NPTrainer`.

    ``draw_batch()`` returns ``(context_x, context_y, context_mask, target_x, target_y, target_mask)``
    on the module's device. ``callback(step, loss)`` runs after every step; returning True stops.
    ``evaluate()``: a validation loss (lower is better), scored every ``eval_every`` steps; the best
    weights are restored at the end and ``patience`` stops a stalled run. ``checkpoint`` / ``resume``
    as :meth:`Engine.fit`; ``task_source``: the object whose ``state_dict`` is the draws' random state.
    A non-finite loss raises rather than silently continuing.
    """

    cbs: list[Callback] = list(callbacks)
    if evaluate is not None:
        cbs.append(BestCheckpoint(config.patience, smoothing=config.smoothing))
    cbs.append(_StepCallback(callback))  # always there: a resumed fit has the same callbacks
    cbs.append(ProgressBar(description="neural process"))
    trainer = NPTrainer(module, config, generator=generator, callbacks=cbs)
    source = _TimedSource(draw_batch, task_source)
    history = trainer.fit(source, evaluate, checkpoint=checkpoint, resume=resume)
    module.eval()
    return NPTrainHistory.from_engine(history, config.log_every, source.seconds, trainer.lr_drops)
