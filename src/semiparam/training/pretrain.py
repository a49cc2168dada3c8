"""Meta-training an NPT on a prior over tables (issue 51): a model that predicts a new table's
query rows from its training rows in one forward pass.

Each step draws ``tasks_per_step`` tasks from a :class:`~semiparam.data.prior.TablePrior`; in each,
the training rows are the context, with their labels shown, and the query rows' targets are hidden.
The NPT runs over all rows at once with ``is_query``: query rows attend to the training rows and to
themselves, training rows never to queries, exactly what prediction computes from an encoded
context (:meth:`~semiparam.models.npt.NPT.forward`). The loss is on the queries' targets: cross
entropy over the task's classes, or squared error of the target standardised on the training rows.

The model's layout is fixed (:func:`prior_layout`): ``n_features`` continuous feature slots, a class
slot of ``max_classes`` categories and a value slot. A task's features take random slots (the model
learns not to care which), the unused ones hidden.

Training runs on the library's engine (:class:`~semiparam.training.engine.Engine`, as the neural
processes' :class:`~semiparam.training.np_loop.NPTrainer`): Adam, a linear warm-up then a constant
learning rate (pretraining has no planned end: each session adds steps), gradient-norm clipping,
bf16 autocast on a GPU, the loss on held-out prior tasks every ``eval_every`` steps. The state
(weights, optimiser, the prior's random state, history, seconds by device) is written to a checkpoint
every few steps and at the end, never marked finished, so the next run, on this machine or another,
continues the same stream of tasks.

The weights to ship come from a cool-down (``cooldown_steps``): a branch off the checkpoint whose
learning rate decays linearly to zero, written nowhere, so that the constant-rate run can go on
and be cooled down again at any later export (a warm-up, stable, decay schedule).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .._config import ConfigError, FrozenConfig
from ..data.columns import CATEGORICAL, CONTINUOUS, ColumnLayout
from ..data.prior import PriorTask, TablePrior, encode_task
from ..nn.columns import ColumnOutputs
from .checkpoint import TrainingCheckpoint
from .config import TrainConfig
from .device import autocast, autocast_dtype
from .distributed import ProcessGroup
from .engine import Callback, Engine, ProgressBar, TrainHistory

__all__ = [
    "PretrainConfig",
    "PriorTrainer",
    "TaskBatches",
    "draw_task",
    "prior_layout",
    "pretrain",
    "task_loss",
]


def prior_layout(n_features: int, max_classes: int) -> ColumnLayout:
    """``n_features`` continuous slots, then the class slot and the value slot."""
    kinds = (CONTINUOUS,) * n_features + (CATEGORICAL, CONTINUOUS)
    return ColumnLayout(kinds, (0,) * n_features + (max_classes, 0))


@dataclass(frozen=True)
class PretrainConfig(FrozenConfig):
    """Optimisation settings of pretraining."""

    tasks_per_step: int = 16
    learning_rate: float = 1e-3
    warmup_steps: int = 200
    clip_norm: float = 1.0
    eval_tasks: int = 256  # held-out prior tasks (their own seed) scored every eval_every steps
    eval_every: int = 250
    eval_seed: int = 1_000_003
    mixed_precision: Literal["auto", "bf16", "off"] = "auto"  # bf16 autocast on CUDA by default
    checkpoint_every_steps: int = 250
    checkpoint_every_seconds: float = 300.0

    def validate(self) -> None:
        for name in ("tasks_per_step", "eval_tasks", "eval_every", "checkpoint_every_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.learning_rate > 0 or not self.clip_norm > 0 or self.warmup_steps < 0:
            raise ConfigError("learning_rate and clip_norm must be > 0 and warmup_steps >= 0")

    def engine_config(self, max_steps: int) -> TrainConfig:
        return TrainConfig(
            max_steps=max_steps,
            learning_rate=self.learning_rate,
            lr_schedule="constant",
            clip_mode="norm",
            clip_value=self.clip_norm,
            eval_every=self.eval_every,
            validation_fraction=0.0,
        )


@dataclass
class EncodedTask:
    """One task as model inputs: ``values``/``hidden`` (n, d), ``is_query`` (n,), the queries'
    targets ``y`` (class ids, or values standardised on the training rows) and ``n_classes``."""

    values: Tensor
    hidden: Tensor
    is_query: Tensor
    y: Tensor
    n_classes: int


def encode_prior_task(
    X: np.ndarray,
    y: np.ndarray,
    n_train: int,
    n_classes: int,
    n_features: int,
    positions: np.ndarray,
    device: torch.device,
) -> EncodedTask:
    values, hidden = encode_task(X, y, n_train, n_classes, n_features, positions)
    target = y[n_train:].astype(np.float64)
    if not n_classes:
        train = y[:n_train].astype(np.float64)
        target = (target - train.mean()) / (train.std() + 1e-8)
    is_query = np.arange(len(y)) >= n_train
    return EncodedTask(
        torch.as_tensor(values, device=device),
        torch.as_tensor(hidden, device=device),
        torch.as_tensor(is_query, device=device),
        torch.as_tensor(target, dtype=torch.long if n_classes else torch.float32, device=device),
        n_classes,
    )


def draw_task(prior: TablePrior, n_features: int) -> tuple[PriorTask, np.ndarray]:
    """The prior's next task and the slots its features take (a random order of the model's
    ``n_features`` slots, drawn from the prior's generator): every stream of tasks is drawn so."""
    return prior.sample(), prior.rng.permutation(n_features)


def encode_drawn(
    task: PriorTask, positions: np.ndarray, n_features: int, device: torch.device
) -> EncodedTask:
    """A drawn task (:func:`draw_task`) as model inputs."""
    return encode_prior_task(task.X, task.y, task.n_train, task.n_classes, n_features, positions, device)


class TaskBatches:
    """The engine's batch source: ``tasks_per_step`` prior tasks per step, encoded, features in
    random slots. Its random state is the prior's (checkpointed)."""

    def __init__(self, prior: TablePrior, tasks_per_step: int, n_features: int, device: torch.device) -> None:
        self.prior, self.tasks_per_step, self.n_features, self.device = (
            prior,
            tasks_per_step,
            n_features,
            device,
        )
        self.seconds = 0.0  # spent drawing tasks

    def draw(self) -> EncodedTask:
        return encode_drawn(*draw_task(self.prior, self.n_features), self.n_features, self.device)

    def __call__(self, step: int) -> list[EncodedTask]:
        start = time.perf_counter()
        batch = [self.draw() for _ in range(self.tasks_per_step)]
        self.seconds += time.perf_counter() - start
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"prior": self.prior.state_dict(), "seconds": self.seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prior.load_state_dict(state["prior"])
        self.seconds = float(state["seconds"])


def task_loss(module: nn.Module, task: EncodedTask) -> Tensor:
    """The loss of one task's queries: cross entropy over its classes, or squared error."""
    return outputs_loss(module(task.values, task.hidden, task.is_query), task)


def outputs_loss(out: ColumnOutputs, task: EncodedTask) -> Tensor:
    """:func:`task_loss` from the model's outputs for the task's rows."""
    if task.n_classes:
        logits = out.categorical[0][task.is_query, : task.n_classes].float()
        return F.cross_entropy(logits, task.y)
    mean = out.continuous[task.is_query, -1, 0].float()  # the value slot: the last continuous column
    return F.mse_loss(mean, task.y)


class PriorTrainer(Engine):
    """The engine for pretraining (see the module docstring)."""

    def __init__(
        self,
        module: nn.Module,
        config: PretrainConfig,
        max_steps: int,
        callbacks: Sequence[Callback] = (),
        engine_config: TrainConfig | None = None,
        cooldown: tuple[int, int] | None = None,
    ) -> None:
        """``engine_config``: the engine's schedule, stopping and clipping in place of
        pretraining's (fine-tuning on one table: the adaptive schedule, stopped on its validation
        loss); the learning rate stays ``config.learning_rate``. ``cooldown``: (first step, steps)
        over which the learning rate decays linearly towards zero."""
        params = [p for p in module.parameters() if p.requires_grad]
        super().__init__(
            module,
            engine_config or config.engine_config(max_steps),
            callbacks=callbacks,
            optimizer=torch.optim.Adam(params, lr=config.learning_rate),
            group=ProcessGroup(),
        )
        self.pretrain_config = config
        self.device = next(module.parameters()).device
        self.dtype = autocast_dtype(self.device, config.mixed_precision)
        self.cooldown = cooldown

    def learning_rate(self, step: int) -> float:
        if self.adaptive:
            return super().learning_rate(step)
        c = self.pretrain_config
        rate = c.learning_rate * min(1.0, (step + 1) / max(c.warmup_steps, 1))
        if self.cooldown is not None and step >= self.cooldown[0]:
            first, steps = self.cooldown
            rate *= max(0.0, 1.0 - (step - first) / steps)
        return rate

    def step_loss(self, batch: list[EncodedTask], step: int) -> tuple[Tensor, dict[str, float]]:
        losses = {"classification": [], "regression": []}
        total: Tensor | None = None
        with autocast(self.device, self.dtype):
            for task in batch:
                loss = task_loss(self.model, task)
                losses["classification" if task.n_classes else "regression"].append(float(loss.detach()))
                total = loss if total is None else total + loss
        assert total is not None
        total = total / len(batch)
        stats = {"loss": float(total.detach())}
        stats.update({k: float(np.mean(v)) for k, v in losses.items() if v})
        return total, stats


@torch.no_grad()
def held_out_loss(module: nn.Module, tasks: Sequence[EncodedTask]) -> dict[str, float]:
    """Mean query loss of ``tasks`` by kind, and the classification accuracy."""
    was_training = module.training
    module.eval()
    cls, reg, correct, count = [], [], 0, 0
    for task in tasks:
        out = module(task.values, task.hidden, task.is_query)
        loss = float(outputs_loss(out, task))
        if task.n_classes:
            cls.append(loss)
            logits = out.categorical[0][task.is_query]
            correct += int((logits[:, : task.n_classes].argmax(1) == task.y).sum())
            count += len(task.y)
        else:
            reg.append(loss)
    module.train(was_training)
    out = {"loss": float(np.mean(cls + reg))}
    if cls:
        out.update(classification=float(np.mean(cls)), accuracy=correct / max(count, 1))
    if reg:
        out["regression"] = float(np.mean(reg))
    return out


def device_label(device: torch.device) -> str:
    """How the ledger names a device: ``cpu``, or the card (``cuda: NVIDIA H200``)."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type


@dataclass
class _Ledger:
    """What the checkpoint carries beside the engine's state: the held-out scores so far and the
    seconds spent by each kind of device (before this run, plus this run's)."""

    evaluations: list[dict[str, float]]
    seconds_by_device: dict[str, float]
    seconds_before: float  # the engine's seconds before this run
    device: str
    began: float

    def extra(self) -> dict[str, Any]:
        by_device = dict(self.seconds_by_device)
        by_device[self.device] = by_device.get(self.device, 0.0) + time.perf_counter() - self.began
        return {"evaluations": list(self.evaluations), "seconds_by_device": by_device}

    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.began


class _Checkpointing(Callback):
    """Writes the engine's state, the task source's and the ledger every so often (and, through
    :meth:`write`, at the end of each run), never marked finished."""

    def __init__(self, checkpoint: TrainingCheckpoint, source: TaskBatches, ledger: _Ledger) -> None:
        self.checkpoint, self.source, self.ledger = checkpoint, source, ledger

    def write(self, trainer: Engine, step: int) -> None:
        state = trainer.checkpoint_state(step, self.ledger.seconds(), self.source)
        state["extra"] = self.ledger.extra()
        self.checkpoint.write(state)

    def on_step_end(self, trainer: Engine, step: int, stats: dict[str, float]) -> None:
        if self.checkpoint.due(step):
            self.write(trainer, step)


class _SessionLimit(Callback):
    """Stops this run after ``seconds`` of its own (not the whole pretraining's)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds, self.began = seconds, time.perf_counter()

    def on_step_end(self, trainer: Engine, step: int, stats: dict[str, float]) -> None:
        if self.seconds is not None and time.perf_counter() - self.began >= self.seconds:
            trainer.request_stop(step, "session time")


@dataclass
class PretrainRun:
    """What :func:`pretrain` returns: the history of the whole pretraining (losses per step, held-out
    losses), its held-out scores at each evaluation, seconds by device, tasks drawn."""

    history: TrainHistory
    evaluations: list[dict[str, float]]
    seconds_by_device: dict[str, float]
    steps: int


def pretrain(
    module: nn.Module,
    prior: TablePrior,
    config: PretrainConfig,
    *,
    n_features: int,
    max_steps: int,
    checkpoint: TrainingCheckpoint | None = None,
    seconds: float | None = None,
    progress: bool | None = None,
    cooldown_steps: int = 0,
) -> PretrainRun:
    """Pretrain ``module`` (an NPT of :func:`prior_layout`) on ``prior`` until step ``max_steps`` of
    the whole pretraining, or ``seconds`` of this run; resumes from ``checkpoint`` when it holds a
    state (see the module docstring). With ``cooldown_steps``, instead: that many steps more from
    the checkpoint's state, the learning rate decaying linearly to zero, and the checkpoint left as
    it was (``max_steps`` is then ignored)."""
    device = next(module.parameters()).device
    source = TaskBatches(prior, config.tasks_per_step, n_features, device)
    eval_prior = TablePrior(prior.config, seed=config.eval_seed)
    eval_tasks = [
        encode_drawn(*draw_task(eval_prior, n_features), n_features, device) for _ in range(config.eval_tasks)
    ]
    state = checkpoint.read(map_location=device) if checkpoint is not None else None
    cooldown = None
    if cooldown_steps:
        if state is None:
            raise ValueError("a cool-down branches off a pretraining checkpoint, and there is none")
        cooldown = (int(state["step"]) + 1, int(cooldown_steps))
        max_steps = sum(cooldown)
    extra = state["extra"] if state is not None else {"evaluations": [], "seconds_by_device": {}}
    ledger = _Ledger(
        list(extra["evaluations"]),
        dict(extra["seconds_by_device"]),
        float(state["seconds"]) if state is not None else 0.0,
        device_label(device),
        time.perf_counter(),
    )

    def evaluate() -> float:
        scores = held_out_loss(module, eval_tasks)
        scores["step"] = len(trainer.history.train_loss)
        ledger.evaluations.append(scores)
        return scores["loss"]

    callbacks: list[Callback] = [ProgressBar(progress, "pretraining"), _SessionLimit(seconds)]
    keeper = _Checkpointing(checkpoint, source, ledger) if checkpoint and not cooldown else None
    if keeper is not None:
        callbacks.append(keeper)
    elif cooldown:
        callbacks.append(Callback())  # the checkpoint's place among the callbacks: a cool-down writes none
    trainer = PriorTrainer(module, config, max_steps, callbacks, cooldown=cooldown)
    if state is not None:
        state["finished"] = False  # pretraining never finishes: the next run adds steps
    history = trainer.fit(source, evaluate, resume=state)
    if keeper is not None:
        keeper.write(trainer, len(history.train_loss) - 1)
    if cooldown and (not ledger.evaluations or ledger.evaluations[-1]["step"] != len(history.train_loss)):
        evaluate()  # the cooled-down weights' own score
    module.eval()
    return PretrainRun(
        history, ledger.evaluations, ledger.extra()["seconds_by_device"], len(history.train_loss)
    )
