"""Meta-training of neural processes on the library's one training engine.

SPIN paper appendix A.6: Adam, learning rate 5e-4, cosine annealing to 0 over the run, 16 tasks
per step, the same for every model. Each step draws a batch of tasks from the task source, computes
the model's loss (negative log-likelihood or negative ELBO per target point) and takes one step.

:class:`NPTrainer` is the :class:`~semiparam.training.engine.Engine` whose step loss is the neural
process's own objective; schedule, clipping, validation and early stopping, checkpoints and resume,
progress bar and the non-finite-loss check are the engine's, shared with the table models. Its
settings are the table models' :class:`~semiparam.training.config.TrainConfig` (one vocabulary for
every model); :meth:`TrainConfig.neural_process` is the paper's preset.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from .._config import ALIASES
from .checkpoint import TrainingCheckpoint
from .config import TrainConfig
from .distributed import ProcessGroup
from .engine import BestCheckpoint, Callback, Engine, ProgressBar, TrainHistory

# NPTrainConfig's settings that entered a fit's checkpoint fingerprint only when set away from their
# defaults (added after fits were first checkpointed)
_LATER_FIELDS = ("smoothing", "min_steps", "anneal_fraction", "lr_drops", "drop_factor")
# how often checkpoints are written by the clock: not a setting that decides the fit
_CADENCE = ("checkpoint_every_seconds",)


def fingerprint_settings(config: TrainConfig) -> dict[str, Any]:
    """The settings that decide a neural process's fit, for its checkpoint's fingerprint, spelt as
    the neural processes' own config (``NPTrainConfig``) spelt them before it was merged into
    :class:`TrainConfig`, so that a fit checkpointed before the merge still resumes: its keys
    (``clip_norm``, ``checkpoint_every``, ``lr_schedule="cosine"``), its later fields only when
    away from their defaults, and any other setting only when away from
    :meth:`TrainConfig.neural_process`'s value."""
    preset = TrainConfig.neural_process().to_dict()
    values = config.to_dict()
    cosine = config.lr_schedule == "flat_cosine"
    old: dict[str, Any] = {
        "max_steps": config.max_steps,
        "batch_size": config.batch_size,
        "learning_rate": config.learning_rate,
        "lr_schedule": "cosine" if cosine else config.lr_schedule,
        "objective": config.objective,
        "n_z_samples": config.n_z_samples,
        "log_every": config.log_every,
        "eval_every": config.eval_every,
        "patience": config.patience,
        "time_budget": config.time_budget,
        "checkpoint_every": config.checkpoint_every_steps,
    }
    said = {*old, "checkpoint_every_steps", *_LATER_FIELDS, *_CADENCE}
    if config.clip_mode != "value":  # said by clip_norm
        old["clip_norm"] = ALIASES["clip_norm"].to_old(config)
        said |= {"clip_mode", "clip_value"}
    old |= {k: values[k] for k in _LATER_FIELDS if values[k] != preset[k]}
    return old | {k: v for k, v in values.items() if k not in said and v != preset[k]}


def _deprecated(stacklevel: int) -> None:
    warnings.warn(
        "NPTrainConfig is deprecated and will be removed in the next release; use "
        "TrainConfig.neural_process() (semiparam.training.config.TrainConfig), the one training config "
        "of every model: e.g. TrainConfig.neural_process().replace(max_steps=2000). Old keys still "
        "work: clip_norm is clip_mode/clip_value, checkpoint_every is checkpoint_every_steps",
        FutureWarning,
        stacklevel=stacklevel + 1,
    )


class _DeprecatedConfig(type):
    """Calling the class gives a :class:`TrainConfig`; any TrainConfig is an instance of it."""

    def __call__(cls, **options: Any) -> TrainConfig:
        _deprecated(stacklevel=2)
        # old keys (clip_norm, checkpoint_every, "cosine") through the alias map: TrainConfig.MERGED
        return TrainConfig.neural_process().replace(**options)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, TrainConfig)


class NPTrainConfig(metaclass=_DeprecatedConfig):
    """Deprecated for one release: the neural processes train on :class:`TrainConfig`, whose
    :meth:`TrainConfig.neural_process` preset holds this config's defaults (paper A.6).
    ``NPTrainConfig(**options)`` warns and returns ``TrainConfig.neural_process().replace(**options)``;
    its old keys map through the alias map (``semiparam._config.ALIASES``)."""

    @classmethod
    def from_dict(
        cls, values: Mapping[str, Any], *, base: TrainConfig | None = None, warn: bool = True
    ) -> TrainConfig:
        if warn:
            _deprecated(stacklevel=2)
        return TrainConfig.from_dict(values, base=base or TrainConfig.neural_process(), warn=warn)

    @staticmethod
    def field_names() -> list[str]:
        return TrainConfig.field_names()


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
        config: TrainConfig,
        *,
        generator: torch.Generator | None = None,
        callbacks: Sequence[Callback] = (),
    ) -> None:
        config.check_for("neural_process")
        params = [p for p in module.parameters() if p.requires_grad]
        super().__init__(
            module,
            config,
            callbacks=callbacks,
            optimizer=torch.optim.Adam(params, lr=config.learning_rate),
            generators={"latent": generator},
            group=ProcessGroup(),
        )
        self.lr_drops: list[int] = []  # 0-based first steps at each lower learning rate

    def request_stop(self, step: int, reason: str) -> None:
        """A plateau while steps down are left (``lr_drops``) lowers the learning rate from the next
        step and starts the plateau rule afresh (its smoothed score, best and patience count are
        the lower rate's own: a best reached by a lucky spike at the higher rate does not count
        against it); otherwise as the engine (stop, or start the anneal)."""
        c = self.config
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
        return super().learning_rate(step) * self.config.drop_factor**drops

    def state_dict(self, step: int, seconds: float, *, finished: bool = False) -> dict[str, Any]:
        return {**super().state_dict(step, seconds, finished=finished), "lr_drops": list(self.lr_drops)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.lr_drops = list(state.get("lr_drops", []))  # checkpoints from before the option: none

    def step_loss(self, batch: tuple[Tensor | None, ...], step: int) -> tuple[Tensor, dict[str, float]]:
        c = self.config
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
    config: TrainConfig,
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
