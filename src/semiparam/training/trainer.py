"""A short training loop; everything cross-cutting is a callback.

Each step: draw a batch, sample its masks, forward, loss on scored cells, backward, clip, optimiser
step, then set the next step's learning rate and feature-loss weight. Every ``eval_every`` steps the
``evaluate`` function (validation target loss) is called and callbacks may checkpoint or stop.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..nn.columns import ColumnLayout, ColumnOutputs
from .config import TrainConfig
from .losses import npt_loss
from .masking import mask_for_training
from .optim import build_optimizer, clip_gradients
from .schedules import cosine_tradeoff, flat_cosine, poly_warmup


@dataclass
class Batch:
    """One training step's rows, encoded: ``values``/``missing`` (n, d), ``labelled`` (n,)."""

    values: Tensor
    missing: Tensor
    labelled: Tensor


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

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


class Callback:
    def on_train_begin(self, trainer: Trainer) -> None: ...
    def on_step_end(self, trainer: Trainer, step: int, stats: dict[str, float]) -> None: ...
    def on_eval(self, trainer: Trainer, step: int, val_loss: float) -> None: ...
    def on_train_end(self, trainer: Trainer) -> None: ...


class BestCheckpoint(Callback):
    """Keep the weights with the lowest validation loss, restore them at the end; stop after
    ``patience`` evaluations without improvement (None: train all steps, as the paper does)."""

    def __init__(self, patience: int | None = None) -> None:
        self.patience = patience
        self.best_state: dict[str, Tensor] | None = None
        self.bad_evals = 0

    def on_eval(self, trainer: Trainer, step: int, val_loss: float) -> None:
        history = trainer.history
        if history.best_val_loss is None or val_loss < history.best_val_loss:
            history.best_val_loss = val_loss
            history.best_step = step
            self.best_state = copy.deepcopy(trainer.model.state_dict())
            self.bad_evals = 0
        else:
            self.bad_evals += 1
            if self.patience is not None and self.bad_evals >= self.patience:
                trainer.stop = True
                history.stopped_early = True

    def on_train_end(self, trainer: Trainer) -> None:
        if self.best_state is not None:
            trainer.model.load_state_dict(self.best_state)


class ProgressBar(Callback):
    """A tqdm bar on a terminal; silent when stderr is not one (logs, CI) unless forced."""

    def __init__(self, enabled: bool | None = None, description: str = "training") -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.description = description
        self.bar = None

    def on_train_begin(self, trainer: Trainer) -> None:
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=trainer.config.max_steps, desc=self.description, leave=False)

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
    ) -> None:
        self.model = model
        self.layout = layout
        self.config = config
        self.policy = config.masking()
        self.target_columns = target_columns
        self.cardinalities = torch.tensor(layout.cardinalities, device=target_columns.device)
        self.forward = forward or (lambda m, v, h: m(v, h))
        self.callbacks = list(callbacks)
        self.generator = generator
        self.history = TrainHistory()
        self.stop = False
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, config)

    def learning_rate(self, step: int) -> float:
        c = self.config
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
        return cosine_tradeoff(step, c.max_steps, c.tradeoff_start)

    def train_step(self, batch: Batch, step: int) -> dict[str, float]:
        self.model.train()
        masked = mask_for_training(
            batch.values,
            batch.missing,
            target_columns=self.target_columns,
            labelled_rows=batch.labelled,
            cardinalities=self.cardinalities,
            policy=self.policy,
            generator=self.generator,
        )
        outputs = self.forward(self.model, masked.values, masked.hidden)
        loss, stats = npt_loss(
            outputs,
            batch.values,
            masked.score_target,
            masked.score_feature,
            self.layout,
            self.tradeoff(step),
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

    def fit(
        self,
        next_batch: Callable[[int], Batch],
        evaluate: Callable[[], float] | None = None,
    ) -> TrainHistory:
        start = time.perf_counter()
        for cb in self.callbacks:
            cb.on_train_begin(self)
        for step in range(self.config.max_steps):
            stats = self.train_step(next_batch(step), step)
            if not torch.isfinite(torch.tensor(stats["loss"])):
                raise FloatingPointError(
                    f"training loss became {stats['loss']} at step {step}; lower learning_rate"
                )
            self.history.steps.append(step)
            self.history.train_loss.append(stats["loss"])
            for cb in self.callbacks:
                cb.on_step_end(self, step, stats)
            last = step == self.config.max_steps - 1
            if evaluate is not None and ((step + 1) % self.config.eval_every == 0 or last):
                val_loss = evaluate()
                self.history.eval_steps.append(step)
                self.history.val_loss.append(val_loss)
                for cb in self.callbacks:
                    cb.on_eval(self, step, val_loss)
            if self.stop:
                break
        for cb in self.callbacks:
            cb.on_train_end(self)
        self.history.seconds = time.perf_counter() - start
        return self.history
