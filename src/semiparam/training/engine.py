"""The one training engine of the library: every model, table or neural process, trains here.

An :class:`Engine` owns what is the same for every model: the optimiser (LAMB + Lookahead by
default, any ``torch.optim`` optimiser when given), the learning-rate schedule (fixed schedules or
the adaptive "flat until the validation loss stalls, then anneal"), gradient clipping, the time
budget, validation every ``eval_every`` steps, callbacks (best checkpoint and early stopping,
progress bar), resumable checkpoints of the whole state and the non-finite-loss check. What differs
between models is one method, :meth:`Engine.step_loss`: the loss of one batch. The table models'
:class:`~semiparam.training.trainer.Trainer` computes it by masked reconstruction (and splits a step
into row shards); the neural processes' :class:`~semiparam.training.np_loop.NPTrainer` by the
model's own objective on a batch of tasks. Each step (:meth:`Engine.train_step`, the one step of
every model): draw a batch, set the step's learning rate, ``step_loss`` and backward (or, over row
shards, the shards' accumulated gradients), clip, optimiser step.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from ..nn.modes import set_training
from .checkpoint import TrainingCheckpoint, rng_state, set_rng_state
from .config import TrainConfig
from .distributed import ProcessGroup, current_group
from .optim import build_optimizer, clip_gradients
from .schedules import flat_cosine, poly_warmup


@dataclass
class TrainHistory:
    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    best_step: int | None = None
    best_val_loss: float | None = None
    seconds: float = 0.0
    stopped_early: bool = False
    # why training ended: "max_steps", "plateau", "time_budget" (adaptive schedule: the reason
    # the final anneal began, then ", annealed"), or "no_validation" style notes
    stop_reason: str = ""
    anneal_start: int | None = None  # adaptive schedule: first step of the final anneal
    eval_seconds: float = 0.0  # part of ``seconds`` spent on validation

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


class Callback:
    def on_train_begin(self, trainer: Engine) -> None: ...
    def on_step_end(self, trainer: Engine, step: int, stats: dict[str, float]) -> None: ...
    def on_eval(self, trainer: Engine, step: int, val_loss: float) -> None: ...
    def on_train_end(self, trainer: Engine) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        """What a resumed fit needs to carry on as if never stopped (see ``training.checkpoint``)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class BestCheckpoint(Callback):
    """Keep the weights with the lowest validation loss, restore them at the end; after
    ``patience`` evaluations in which the validation loss, smoothed by an exponential moving
    average (weight ``smoothing`` on the past), has not improved, ask the trainer to stop
    (None: train all steps, as the paper does). With the adaptive schedule "stop" starts the
    final learning-rate anneal instead of stopping at once."""

    def __init__(
        self, patience: int | None = None, smoothing: float = 0.0, min_improvement: float = 1e-3
    ) -> None:
        self.patience = patience
        self.smoothing = smoothing
        # a smoothed loss that creeps towards a plateau improves forever by tiny amounts: only a
        # relative improvement of at least this much resets the patience
        self.min_improvement = min_improvement
        self.best_state: dict[str, Tensor] | None = None
        self.bad_evals = 0
        self.anneal_bad_evals = 0  # evaluations of the final anneal since the last new best
        self.smoothed: float | None = None
        self.best_smoothed: float | None = None

    def on_eval(self, trainer: Engine, step: int, val_loss: float) -> None:
        history = trainer.history
        improved = history.best_val_loss is None or val_loss < history.best_val_loss
        if trainer.anneal_start is not None and step >= trainer.anneal_start:
            # the final anneal ends early after anneal_patience evaluations without a new best
            self.anneal_bad_evals = 0 if improved else self.anneal_bad_evals + 1
            limit = trainer.config.anneal_patience
            if limit is not None and self.anneal_bad_evals >= limit:
                trainer.end_anneal(step)
        if improved:
            history.best_val_loss = val_loss
            history.best_step = step
            state = trainer.model.state_dict()
            if self.best_state is None or self.best_state.keys() != state.keys():
                self.best_state = {k: v.detach().clone() for k, v in state.items()}
            else:  # in place: no new tensors at every improvement
                for k, v in state.items():
                    self.best_state[k].copy_(v.detach())
        a = self.smoothing
        self.smoothed = val_loss if self.smoothed is None else a * self.smoothed + (1 - a) * val_loss
        if self.best_smoothed is None or self.smoothed < self.best_smoothed - self.min_improvement * abs(
            self.best_smoothed
        ):
            self.best_smoothed = self.smoothed
            self.bad_evals = 0
        else:
            self.bad_evals += 1
            if (
                self.patience is not None
                and self.bad_evals >= self.patience
                and step + 1 >= trainer.config.min_steps
            ):
                trainer.request_stop(step, "plateau")

    def on_train_end(self, trainer: Engine) -> None:
        if self.best_state is not None:
            trainer.model.load_state_dict(self.best_state)

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_state": self.best_state,
            "bad_evals": self.bad_evals,
            "anneal_bad_evals": self.anneal_bad_evals,
            "smoothed": self.smoothed,
            "best_smoothed": self.best_smoothed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_state = state["best_state"]
        self.bad_evals = int(state["bad_evals"])
        self.anneal_bad_evals = int(state.get("anneal_bad_evals", 0))
        self.smoothed, self.best_smoothed = state["smoothed"], state["best_smoothed"]


class ProgressBar(Callback):
    """A tqdm bar on a terminal; silent when stderr is not one (logs, CI) unless forced."""

    def __init__(
        self, enabled: bool | None = None, description: str = "training", position: int | None = None
    ) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.description = description
        self.position = position  # the bar's line, when several train at once (tqdm's position)
        self.bar = None

    def on_train_begin(self, trainer: Engine) -> None:
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=trainer.config.max_steps,
                initial=trainer.start_step,
                desc=self.description,
                leave=False,
                position=self.position,
            )

    def on_step_end(self, trainer: Engine, step: int, stats: dict[str, float]) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if step % 10 == 0:
                postfix = {"loss": f"{stats['loss']:.4f}"}
                if trainer.history.val_loss:
                    postfix["val"] = f"{trainer.history.val_loss[-1]:.4f}"
                self.bar.set_postfix(postfix)

    def on_train_end(self, trainer: Engine) -> None:
        if self.bar is not None:
            self.bar.close()


class CostWarning(Callback):
    """Warn, once the first steps are timed, when a fixed schedule's steps will take longer than
    ``threshold`` seconds on this machine (the paper presets on a CPU: hours), with the
    projection, so that nobody waits unawares. The adaptive schedule's ``max_steps`` is only a
    ceiling, so it is not projected."""

    def __init__(self, threshold: float = 600.0, timed_steps: int = 3) -> None:
        self.threshold = threshold
        self.timed_steps = timed_steps
        self.began: float | None = None

    def on_step_end(self, trainer: Engine, step: int, stats: dict[str, float]) -> None:
        c = trainer.config
        if c.lr_schedule == "adaptive" or c.time_budget is not None:
            return
        done = step - trainer.start_step
        if done == 0:  # the first step pays one-off costs; time the next ones
            self.began = time.perf_counter()
        elif done == self.timed_steps and self.began is not None:
            per_step = (time.perf_counter() - self.began) / self.timed_steps
            projected = per_step * (c.max_steps - step - 1)
            if projected > self.threshold:
                import warnings

                warnings.warn(
                    f"this fit's {c.max_steps} steps will take about {_duration(projected)} more on "
                    f"{_device_of(trainer.model)} ({per_step:.2f} s per step so far); a GPU (device='auto'), "
                    "the cpu preset, fewer max_steps or a time_budget make it shorter",
                    UserWarning,
                    stacklevel=2,
                )


def _device_of(model: nn.Module) -> str:
    param = next(model.parameters(), None)
    return "this machine" if param is None else str(param.device)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _stateful(source: Any) -> bool:
    """Whether a batch source has a random state to checkpoint (``state_dict``/``load_state_dict``)."""
    return hasattr(source, "state_dict") and hasattr(source, "load_state_dict")


class BatchSource(Protocol):
    """``source(step) -> batch``: the caller's batch drawing. A source with ``state_dict`` and
    ``load_state_dict`` (its random generator, the rest of its epoch) is checkpointed with the
    engine, so a resumed fit draws the batches an uninterrupted one would."""

    def __call__(self, step: int) -> Any: ...


class Engine:
    """Trains ``model`` under ``config`` (a :class:`TrainConfig`: steps, learning rate and
    schedule, clipping, time budget, ``eval_every``); subclasses define :meth:`step_loss`.

    ``optimizer``: None builds LAMB + Lookahead (the papers' table optimiser) over the model's
    trainable parameters; neural processes pass Adam. ``generators``: the named random generators
    the loss draws from, saved in checkpoints so a resumed fit continues exactly. ``group``: the
    processes training this model together (default: torch.distributed's, or this process alone).
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        *,
        callbacks: Sequence[Callback] = (),
        optimizer: torch.optim.Optimizer | None = None,
        generators: dict[str, torch.Generator | None] | None = None,
        group: ProcessGroup | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.callbacks = list(callbacks)
        self.group = group or current_group()
        self.generators = dict(generators or {})
        self.history = TrainHistory()
        self.stop = False
        self.anneal_start: int | None = None  # adaptive schedule: the final anneal's window
        self.anneal_steps = 0
        self.anneal_ended_at: int | None = None  # the step after which anneal_patience ended it
        self._stop_reason = ""
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = optimizer if optimizer is not None else build_optimizer(self.params, config)
        self.start_step = 0  # > 0 when resumed from a checkpoint
        # the module a step switches to training mode (the table models' DistributedDataParallel
        # wrapper when there is one)
        self.train_root: nn.Module = model

    def step_loss(self, batch: Any, step: int) -> tuple[Tensor, dict[str, float]]:
        """The loss of ``batch`` at ``step`` (the model in training mode) and its statistics, at
        least ``{"loss": float}``. Defined by each kind of model."""
        raise NotImplementedError

    def train_step(self, batch: Any, step: int) -> dict[str, float]:
        """One optimiser step on ``batch``, the one training step of every model: set the step's
        learning rate, form the gradients (:meth:`gradients`), clip, step; returns the step's
        statistics (``loss``, ``lr``, ...)."""
        set_training(self.train_root)
        # evaluation switches the model itself, not a wrapper around it (DDP): switch it back
        # too, or a wrapper still flagged as training would leave it in evaluation mode (dropout off)
        set_training(self.model)
        lr = self.set_learning_rate(step)
        self.optimizer.zero_grad(set_to_none=True)
        stats, stepped = self.gradients(batch, step)
        if stepped:
            clip_gradients(self.params, self.config)
            self.optimizer.step()
        stats["lr"] = lr
        return stats

    def gradients(self, batch: Any, step: int) -> tuple[dict[str, float], bool]:
        """Accumulate the gradients of ``batch``'s loss (:meth:`step_loss`, backward); returns the
        step's statistics and whether there are gradients to step on (a loss of no parameter,
        e.g. a batch with nothing to score, has none). The table models' row shards override it."""
        loss, stats = self.step_loss(batch, step)
        if not loss.requires_grad:
            return stats, False
        loss.backward()
        return stats, True

    def set_learning_rate(self, step: int) -> float:
        lr = self.learning_rate(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    # -- resumable state ------------------------------------------------------------------------
    def state_dict(self, step: int, seconds: float, *, finished: bool = False) -> dict[str, Any]:
        """Everything needed to continue after ``step`` exactly as an uninterrupted fit would;
        ``finished``: training is over and the model holds its final (best) weights."""
        state: dict[str, Any] = {
            "step": step,
            "finished": finished,
            "seconds": seconds,
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "history": self.history.to_dict(),
        }
        if not finished:
            state.update(
                optimizer=self.optimizer.state_dict(),
                anneal_start=self.anneal_start,
                anneal_steps=self.anneal_steps,
                stop_reason=self._stop_reason,
                callbacks=[cb.state_dict() for cb in self.callbacks],
            )
            state.update(self._rng_state())
        return state

    def checkpoint_state(
        self, step: int, seconds: float, source: Any = None, *, finished: bool = False
    ) -> dict[str, Any]:
        """What a training checkpoint holds after ``step`` (the one writer of it: :meth:`fit`,
        and pretraining's checkpoints): :meth:`state_dict` and, unless ``finished``, the batch
        source's state when it has one (``sampler``), which :meth:`fit` puts back on resuming."""
        state = self.state_dict(step, seconds, finished=finished)
        if not finished and _stateful(source):
            state["sampler"] = source.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.history = TrainHistory(**state["history"])
        self.start_step = int(state["step"]) + 1
        if state["finished"]:
            return
        self.optimizer.load_state_dict(state["optimizer"])
        self.anneal_start = state["anneal_start"]
        self.anneal_steps = int(state["anneal_steps"])
        self._stop_reason = state["stop_reason"]
        if len(state["callbacks"]) != len(self.callbacks):
            raise ValueError("the checkpoint's callbacks do not match this trainer's")
        for cb, cb_state in zip(self.callbacks, state["callbacks"], strict=True):
            cb.load_state_dict(cb_state)
        self._set_rng_state(state)

    def _rng_state(self) -> dict[str, Any]:
        return {"rng": rng_state(self.generators)}

    def _set_rng_state(self, state: dict[str, Any]) -> None:
        set_rng_state(state["rng"], self.generators)

    @property
    def adaptive(self) -> bool:
        return self.config.lr_schedule == "adaptive"

    def request_stop(self, step: int, reason: str) -> None:
        """Stop training after ``step``; with the adaptive schedule, first anneal the learning rate
        over ``anneal_fraction`` of the steps run so far; requests during the anneal are ignored
        (it ends by itself)."""
        if self.adaptive and self.anneal_start is not None:
            return
        if self.adaptive:
            c = self.config
            self.anneal_start = step + 1
            self.anneal_steps = max(c.min_anneal_steps, round(c.anneal_fraction * (step + 1)))
            self.anneal_steps = min(self.anneal_steps, max(c.max_steps - step - 1, 1))
            self.history.anneal_start = self.anneal_start
            self._stop_reason = reason
            return
        self.stop = True
        self._stop_reason = self._stop_reason or reason
        if reason == "plateau":
            self.history.stopped_early = True

    def learning_rate(self, step: int) -> float:
        c = self.config
        if c.lr_schedule == "adaptive":
            warmup = int(c.warmup_fraction * c.max_steps)
            if self.anneal_start is None or step < self.anneal_start:
                return c.learning_rate * min(1.0, (step + 1) / max(warmup, 1))
            progress = min((step - self.anneal_start + 1) / max(self.anneal_steps, 1), 1.0)
            return c.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress))
        if c.lr_schedule == "flat_cosine":
            factor = flat_cosine(step, c.max_steps, c.flat_fraction)
        elif c.lr_schedule == "poly_warmup":
            factor = poly_warmup(step, c.max_steps, c.warmup_fraction)
        else:
            factor = 1.0
        return c.learning_rate * factor

    # -- the pieces of a step that do not depend on how the loss is computed (also used by
    # training.members, which steps several models as one)
    def check_limits(self, step: int, elapsed: Callable[[], float]) -> bool:
        """Before ``step``: start the adaptive anneal when the step ceiling or the time budget
        (``elapsed()`` seconds so far) comes near; True when a fixed schedule's budget is spent
        and training stops now."""
        c = self.config
        if self.adaptive and self.anneal_start is None:
            spent = 0.0
            if c.time_budget is not None:
                spent = self.group.broadcast(elapsed())  # every process stops together
            # the adaptive schedule anneals before the ceiling: anneal = anneal_fraction x steps run
            if step == int(c.max_steps / (1.0 + c.anneal_fraction)):
                self.request_stop(step - 1, "max_steps")
            elif c.time_budget is not None and spent * (1.0 + c.anneal_fraction) >= c.time_budget:
                self.request_stop(step - 1, "time_budget")
                # the anneal gets the steps that fit in the time left at the pace so far, however
                # short (min_anneal_steps would run past a small budget)
                if step > 0 and self.anneal_start is not None:
                    fit = int(max(c.time_budget - spent, 0.0) / (spent / step))
                    self.anneal_steps = max(1, min(self.anneal_steps, fit))
        elif not self.adaptive and c.time_budget is not None:
            if self.group.broadcast(elapsed()) >= c.time_budget:
                self.request_stop(step - 1, "time_budget")
                return True
        return False

    def record_step(self, step: int, stats: dict[str, float]) -> None:
        """After a step: check its loss is finite, log it, tell the callbacks."""
        if not math.isfinite(stats["loss"]):
            raise FloatingPointError(
                f"training loss became {stats['loss']} at step {step}; lower learning_rate"
            )
        self.history.steps.append(step)
        self.history.train_loss.append(stats["loss"])
        for cb in self.callbacks:
            cb.on_step_end(self, step, stats)

    def end_anneal(self, step: int) -> None:
        """End the adaptive schedule's final anneal after ``step``, before its planned length
        (``anneal_patience``); the best weights are restored as at any end."""
        self.stop = True
        self.anneal_ended_at = step

    def annealed(self, step: int) -> bool:
        """Whether the adaptive schedule's final anneal ends with ``step``."""
        return self.anneal_start is not None and step + 1 >= self.anneal_start + self.anneal_steps

    def evaluates_at(self, step: int) -> bool:
        """Validation runs every ``eval_every`` steps and after the last one."""
        last = step == self.config.max_steps - 1 or self.annealed(step)
        return (step + 1) % self.config.eval_every == 0 or last

    def record_eval(self, step: int, val_loss: float, seconds: float) -> None:
        self.history.eval_seconds += seconds
        self.history.eval_steps.append(step)
        self.history.val_loss.append(val_loss)
        for cb in self.callbacks:
            cb.on_eval(self, step, val_loss)

    def finish(self, seconds: float) -> None:
        """Training is over: say why in the history, let the callbacks restore their weights."""
        if self.anneal_start is not None:
            cut = self.anneal_ended_at
            ended = "" if cut is None else f" (ended early at step {cut + 1})"
            self.history.stop_reason = f"{self._stop_reason}, annealed{ended}"
            # a plateau ended the run (after its anneal) before the step ceiling
            self.history.stopped_early = self._stop_reason == "plateau"
        else:
            self.history.stop_reason = self._stop_reason or "max_steps"
        for cb in self.callbacks:
            cb.on_train_end(self)
        self.history.seconds = seconds

    def fit(
        self,
        next_batch: BatchSource,
        evaluate: Callable[[], float] | None = None,
        *,
        checkpoint: TrainingCheckpoint | None = None,
        resume: dict[str, Any] | None = None,
    ) -> TrainHistory:
        """Train on ``next_batch(step)``; ``evaluate()`` (a validation loss, lower is better) runs
        every ``eval_every`` steps and at the end; ``checkpoint`` is written every so often (and
        once more at the end) with the engine's state and, when the batch source has one, the
        source's; ``resume`` is such a state to continue from. A finished state returns its
        history at once."""
        with self.fitting():
            return self._fit(next_batch, evaluate, checkpoint, resume)

    def fitting(self) -> contextlib.AbstractContextManager:
        """What holds while :meth:`fit` runs (the table models: the model's dropout drawing from
        the fit's own generator); nothing here."""
        return contextlib.nullcontext()

    def _fit(
        self,
        next_batch: BatchSource,
        evaluate: Callable[[], float] | None,
        checkpoint: TrainingCheckpoint | None,
        resume: dict[str, Any] | None,
    ) -> TrainHistory:
        c = self.config
        seconds_before = 0.0
        if resume is not None:
            self.load_state_dict(resume)
            if resume["finished"]:
                return self.history
            if _stateful(next_batch):
                next_batch.load_state_dict(resume["sampler"])  # type: ignore[attr-defined]
            seconds_before = float(resume["seconds"])
        start = time.perf_counter() - seconds_before

        def snapshot(step: int, finished: bool = False) -> None:
            assert checkpoint is not None
            state = self.checkpoint_state(step, time.perf_counter() - start, next_batch, finished=finished)
            if self.group.is_main:  # the processes hold the same state; the first writes it
                checkpoint.write(state)

        for cb in self.callbacks:
            cb.on_train_begin(self)
        step = self.start_step - 1
        for step in range(self.start_step, c.max_steps):
            if self.check_limits(step, lambda: time.perf_counter() - start):
                break
            stats = self.train_step(next_batch(step), step)
            self.record_step(step, stats)
            annealed = self.annealed(step)
            if evaluate is not None and self.evaluates_at(step):
                eval_start = time.perf_counter()
                # the first process evaluates; all act on its loss, so they stop together
                val_loss = self.group.broadcast(evaluate() if self.group.is_main else None)
                self.record_eval(step, val_loss, time.perf_counter() - eval_start)
            if annealed:
                self.stop = True
            if self.stop:
                break
            if checkpoint is not None and self.group.broadcast(checkpoint.due(step)):
                snapshot(step)
        self.finish(time.perf_counter() - start)
        if checkpoint is not None:
            snapshot(step, finished=True)
        return self.history
