"""A short training loop; everything cross-cutting is a callback.

Each step: draw a batch, sample its masks, forward, loss on scored cells, backward, clip, optimiser
step, then set the next step's learning rate and feature-loss weight. Every ``eval_every`` steps the
``evaluate`` function (validation target loss) is called and callbacks may checkpoint or stop.
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

from ..nn.columns import ColumnLayout, ColumnOutputs
from ..nn.dropout import set_dropout_generator
from .checkpoint import TrainingCheckpoint, rng_state, set_rng_state
from .config import TrainConfig
from .distributed import ProcessGroup, Shard, current_group, shard_rows
from .losses import npt_loss
from .masking import mask_for_training
from .optim import build_optimizer, clip_gradients
from .schedules import cosine_tradeoff, flat_cosine, poly_warmup


@dataclass
class Batch:
    """One training step's rows, encoded: ``values``/``missing`` (n, d), ``labelled`` (n,);
    ``revealed`` (n,): rows shown whole and never scored (the duplicate-lookup task's copies)."""

    values: Tensor
    missing: Tensor
    labelled: Tensor
    revealed: Tensor | None = None


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


class BatchSource(Protocol):
    """``source(step) -> Batch``: the caller's batch drawing. A source with ``state_dict`` and
    ``load_state_dict`` (its random generator, the rest of its epoch) is checkpointed with the
    trainer, so a resumed fit draws the batches an uninterrupted one would."""

    def __call__(self, step: int) -> Batch: ...


class Callback:
    def on_train_begin(self, trainer: Trainer) -> None: ...
    def on_step_end(self, trainer: Trainer, step: int, stats: dict[str, float]) -> None: ...
    def on_eval(self, trainer: Trainer, step: int, val_loss: float) -> None: ...
    def on_train_end(self, trainer: Trainer) -> None: ...

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
        self.smoothed: float | None = None
        self.best_smoothed: float | None = None

    def on_eval(self, trainer: Trainer, step: int, val_loss: float) -> None:
        history = trainer.history
        if history.best_val_loss is None or val_loss < history.best_val_loss:
            history.best_val_loss = val_loss
            history.best_step = step
            self.best_state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
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

    def on_train_end(self, trainer: Trainer) -> None:
        if self.best_state is not None:
            trainer.model.load_state_dict(self.best_state)

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_state": self.best_state,
            "bad_evals": self.bad_evals,
            "smoothed": self.smoothed,
            "best_smoothed": self.best_smoothed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_state = state["best_state"]
        self.bad_evals = int(state["bad_evals"])
        self.smoothed, self.best_smoothed = state["smoothed"], state["best_smoothed"]


class ProgressBar(Callback):
    """A tqdm bar on a terminal; silent when stderr is not one (logs, CI) unless forced."""

    def __init__(self, enabled: bool | None = None, description: str = "training") -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.description = description
        self.bar = None

    def on_train_begin(self, trainer: Trainer) -> None:
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=trainer.config.max_steps,
                initial=trainer.start_step,
                desc=self.description,
                leave=False,
            )

    def on_step_end(self, trainer: Trainer, step: int, stats: dict[str, float]) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if step % 10 == 0:
                postfix = {"loss": f"{stats['loss']:.4f}"}
                if trainer.history.val_loss:
                    postfix["val"] = f"{trainer.history.val_loss[-1]:.4f}"
                self.bar.set_postfix(postfix)

    def on_train_end(self, trainer: Trainer) -> None:
        if self.bar is not None:
            self.bar.close()


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        layout: ColumnLayout,
        target_columns: Tensor,
        config: TrainConfig,
        *,
        forward: Callable[[nn.Module, Tensor, Tensor], ColumnOutputs] | None = None,
        callbacks: Sequence[Callback] = (),
        generator: torch.Generator | None = None,
        dropout_generator: torch.Generator | None = None,
        shards: Sequence[Shard] | None = None,
        n_shards: int = 1,
        group: ProcessGroup | None = None,
    ) -> None:
        """``shards``: the row shards of each step this process handles (of ``n_shards``, see
        ``training.distributed``), each with its own generators; None: one shard, drawing from
        ``generator`` (masking) and ``dropout_generator``. ``group``: the processes training
        this model together (default: torch.distributed's, or this process alone); with more
        than one the model is wrapped in DistributedDataParallel."""
        self.model = model
        self.layout = layout
        self.config = config
        self.policy = config.masking()
        self.target_columns = target_columns
        self.cardinalities = torch.tensor(layout.cardinalities, device=target_columns.device)
        self.forward = forward or (lambda m, v, h: m(v, h))
        self.callbacks = list(callbacks)
        self.group = group or current_group()
        if shards is None:
            shards = [Shard(0, generator, dropout_generator)]
        self.shards = list(shards)
        self.n_shards = n_shards
        if len(self.shards) * self.group.world_size != n_shards:
            raise ValueError(
                f"{len(self.shards)} shards on each of {self.group.world_size} processes is not "
                f"the {n_shards} shards of a step"
            )
        self.generator = self.shards[0].generator  # masking draws
        self.dropout_generator = self.shards[0].dropout_generator  # the model's dropout, training
        self.ddp: nn.Module | None = None
        if self.group.distributed:
            from torch.nn.parallel import DistributedDataParallel

            device = next(model.parameters()).device
            self.ddp = DistributedDataParallel(
                model, device_ids=[device] if device.type == "cuda" else None, broadcast_buffers=False
            )
        self.history = TrainHistory()
        self.stop = False
        self.anneal_start: int | None = None  # adaptive schedule: the final anneal's window
        self.anneal_steps = 0
        self._stop_reason = ""
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, config)
        self.start_step = 0  # > 0 when resumed from a checkpoint

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
                rng=rng_state(self._generators()),
            )
            if self.n_shards > 1:
                # every shard's generators, gathered from the processes that hold them
                local = {
                    sh.index: rng_state({"masking": sh.generator, "dropout": sh.dropout_generator})
                    for sh in self.shards
                }
                state["n_shards"] = self.n_shards
                state["shard_rng"] = self.group.gather_merged(local)
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
        if self.n_shards > 1:
            if int(state.get("n_shards", 1)) != self.n_shards:
                raise ValueError(
                    f"the checkpoint has {state.get('n_shards', 1)} row shards per step, this fit "
                    f"{self.n_shards}"
                )
            for sh in self.shards:
                set_rng_state(
                    state["shard_rng"][sh.index], {"masking": sh.generator, "dropout": sh.dropout_generator}
                )
        else:
            set_rng_state(state["rng"], self._generators())

    def _generators(self) -> dict[str, torch.Generator | None]:
        return {"masking": self.generator, "dropout": self.dropout_generator}

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

    def tradeoff(self, step: int) -> float:
        c = self.config
        if c.p_feature == 0:
            return 0.0  # no feature loss to weigh
        if c.tradeoff == "fixed":
            return c.tradeoff_start
        return cosine_tradeoff(step, c.tradeoff_steps or c.max_steps, c.tradeoff_start)

    def train_step(self, batch: Batch, step: int) -> dict[str, float]:
        if self.n_shards > 1 or self.ddp is not None:
            return self._sharded_step(batch, step)
        self.model.train()
        masked = mask_for_training(
            batch.values,
            batch.missing,
            target_columns=self.target_columns,
            labelled_rows=batch.labelled,
            cardinalities=self.cardinalities,
            policy=self.policy,
            generator=self.generator,
            revealed_rows=batch.revealed,
        )
        outputs = self.forward(self.model, masked.values, masked.hidden)
        loss, stats = npt_loss(
            outputs,
            batch.values,
            masked.score_target,
            masked.score_feature,
            self.layout,
            self.tradeoff(step),
            self.config.label_smoothing,
        )
        lr = self.learning_rate(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
            clip_gradients(self.params, self.config)
            self.optimizer.step()
        stats["lr"] = lr
        return stats

    def _sharded_step(self, batch: Batch, step: int) -> dict[str, float]:
        """One step over this process's shards of ``batch``: the gradients of the shard losses
        accumulate (each divided by the shards here), DistributedDataParallel averages them over
        the processes, then every process takes the same optimiser step."""
        module = self.ddp if self.ddp is not None else self.model
        module.train()
        lr = self.learning_rate(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        n_local = len(self.shards)
        totals: dict[str, float] = {}
        for k, shard in enumerate(self.shards):
            rows = shard_rows(len(batch.values), shard.index, self.n_shards, batch.values.device)
            set_dropout_generator(self.model, shard.dropout_generator)
            masked = mask_for_training(
                batch.values[rows],
                batch.missing[rows],
                target_columns=self.target_columns,
                labelled_rows=batch.labelled[rows],
                cardinalities=self.cardinalities,
                policy=self.policy,
                generator=shard.generator,
                revealed_rows=None if batch.revealed is None else batch.revealed[rows],
            )
            outputs = self.forward(module, masked.values, masked.hidden)
            loss, stats = npt_loss(
                outputs,
                batch.values[rows],
                masked.score_target,
                masked.score_feature,
                self.layout,
                self.tradeoff(step),
                self.config.label_smoothing,
            )
            # every parameter takes part in every backward pass, as DistributedDataParallel
            # needs, even when this shard has no cell to score (a parameter may be empty: the
            # categorical heads of a table without categorical columns)
            loss = loss + 0.0 * sum(p.reshape(-1)[:1].sum() for p in self.params)
            last = k == n_local - 1
            sync = self.ddp.no_sync() if self.ddp is not None and not last else contextlib.nullcontext()
            with sync:
                (loss / n_local).backward()
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + value / n_local
        set_dropout_generator(self.model, self.dropout_generator)
        clip_gradients(self.params, self.config)
        self.optimizer.step()
        totals["loss"] = self.group.mean(totals["loss"])
        totals["lr"] = lr
        return totals

    def fit(
        self,
        next_batch: BatchSource,
        evaluate: Callable[[], float] | None = None,
        *,
        checkpoint: TrainingCheckpoint | None = None,
        resume: dict[str, Any] | None = None,
    ) -> TrainHistory:
        """Train on ``next_batch(step)``; ``checkpoint`` is written every so often (and once more
        at the end) with the trainer's state and, when the batch source has one, the source's;
        ``resume`` is such a state to continue from. A finished state returns its history at once.
        The model's dropout draws from ``dropout_generator`` while this runs."""
        set_dropout_generator(self.model, self.dropout_generator)
        try:
            return self._fit(next_batch, evaluate, checkpoint, resume)
        finally:
            set_dropout_generator(self.model, None)

    def _fit(
        self,
        next_batch: BatchSource,
        evaluate: Callable[[], float] | None,
        checkpoint: TrainingCheckpoint | None,
        resume: dict[str, Any] | None,
    ) -> TrainHistory:
        c = self.config
        stateful = hasattr(next_batch, "state_dict") and hasattr(next_batch, "load_state_dict")
        seconds_before = 0.0
        if resume is not None:
            self.load_state_dict(resume)
            if resume["finished"]:
                return self.history
            if stateful:
                next_batch.load_state_dict(resume["sampler"])  # type: ignore[attr-defined]
            seconds_before = float(resume["seconds"])
        start = time.perf_counter() - seconds_before

        def snapshot(step: int, finished: bool = False) -> None:
            assert checkpoint is not None
            state = self.state_dict(step, time.perf_counter() - start, finished=finished)
            if not finished and stateful:
                state["sampler"] = next_batch.state_dict()  # type: ignore[attr-defined]
            if self.group.is_main:  # the processes hold the same state; the first writes it
                checkpoint.write(state)

        # the adaptive schedule anneals before the ceiling: anneal = anneal_fraction x steps run
        ceiling_anneal = int(c.max_steps / (1.0 + c.anneal_fraction)) if self.adaptive else None
        for cb in self.callbacks:
            cb.on_train_begin(self)
        step = self.start_step - 1
        for step in range(self.start_step, c.max_steps):
            if self.adaptive and self.anneal_start is None:
                elapsed = time.perf_counter() - start
                if c.time_budget is not None:
                    elapsed = self.group.broadcast(elapsed)  # every process stops together
                if step == ceiling_anneal:
                    self.request_stop(step - 1, "max_steps")
                elif c.time_budget is not None and elapsed * (1.0 + c.anneal_fraction) >= c.time_budget:
                    self.request_stop(step - 1, "time_budget")
            elif not self.adaptive and c.time_budget is not None:
                if self.group.broadcast(time.perf_counter() - start) >= c.time_budget:
                    self.request_stop(step - 1, "time_budget")
                    break
            stats = self.train_step(next_batch(step), step)
            if not torch.isfinite(torch.tensor(stats["loss"])):
                raise FloatingPointError(
                    f"training loss became {stats['loss']} at step {step}; lower learning_rate"
                )
            self.history.steps.append(step)
            self.history.train_loss.append(stats["loss"])
            for cb in self.callbacks:
                cb.on_step_end(self, step, stats)
            annealed = self.anneal_start is not None and step + 1 >= self.anneal_start + self.anneal_steps
            last = step == c.max_steps - 1 or annealed
            if evaluate is not None and ((step + 1) % c.eval_every == 0 or last):
                eval_start = time.perf_counter()
                # the first process evaluates; all act on its loss, so they stop together
                val_loss = self.group.broadcast(evaluate() if self.group.is_main else None)
                self.history.eval_seconds += time.perf_counter() - eval_start
                self.history.eval_steps.append(step)
                self.history.val_loss.append(val_loss)
                for cb in self.callbacks:
                    cb.on_eval(self, step, val_loss)
            if annealed:
                self.stop = True
            if self.stop:
                break
            if checkpoint is not None and self.group.broadcast(checkpoint.due(step)):
                snapshot(step)
        if self.anneal_start is not None:
            self.history.stop_reason = f"{self._stop_reason}, annealed"
            # a plateau ended the run (after its anneal) before the step ceiling
            self.history.stopped_early = self._stop_reason == "plateau"
        else:
            self.history.stop_reason = self._stop_reason or "max_steps"
        for cb in self.callbacks:
            cb.on_train_end(self)
        self.history.seconds = time.perf_counter() - start
        if checkpoint is not None:
            snapshot(step, finished=True)
        return self.history
