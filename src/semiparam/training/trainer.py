"""The table models' training: :class:`Trainer`, the :class:`~semiparam.training.engine.Engine`
whose step loss is masked reconstruction.

Each step: draw a batch, sample its masks, forward, loss on scored cells, backward, clip, optimiser
step, then set the next step's learning rate and feature-loss weight. Every ``eval_every`` steps the
``evaluate`` function (validation target loss) is called and callbacks may checkpoint or stop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..nn.columns import ColumnLayout, ColumnOutputs
from ..nn.dropout import set_dropout_generator
from .checkpoint import rng_state, set_rng_state
from .config import TrainConfig
from .device import autocast, autocast_dtype
from .distributed import ProcessGroup, Shard, current_group, shard_rows
from .engine import BatchSource, BestCheckpoint, Callback, CostWarning, Engine, ProgressBar, TrainHistory
from .losses import npt_loss
from .masking import MaskedBatch, MaskingPolicy, mask_for_training
from .schedules import cosine_tradeoff

__all__ = [
    "Batch",
    "BatchSource",
    "BestCheckpoint",
    "Callback",
    "ProgressBar",
    "CostWarning",
    "TrainHistory",
    "Trainer",
]


@dataclass
class Batch:
    """One training step's rows, encoded: ``values``/``missing`` (n, d), ``labelled`` (n,);
    ``revealed`` (n,): rows shown whole and never scored (the duplicate-lookup task's copies);
    ``weights`` (n,): the rows' sample weights in the loss (None: every row 1); ``queried`` (n,):
    labelled rows whose targets are hidden and scored whatever ``p_target`` draws (the lookup
    pairs' sources, whose label only their twin holds); ``twins`` (n,) long: each row's group of
    rows with the same features, -1 for a row without such a twin (``TrainConfig.twin_noise``:
    the masks then never hide the labels of a whole group)."""

    values: Tensor
    missing: Tensor
    labelled: Tensor
    revealed: Tensor | None = None
    weights: Tensor | None = None
    queried: Tensor | None = None
    twins: Tensor | None = None

    def row_weights(self, rows: Tensor | slice = slice(None)) -> Tensor | None:
        """The sample weights of ``rows`` (None when the rows are unweighted)."""
        return None if self.weights is None else self.weights[rows]


def mask_batch(
    batch: Batch,
    target_columns: Tensor,
    cardinalities: Tensor,
    policy: MaskingPolicy,
    generator: torch.Generator | None,
    rows: Tensor | slice = slice(None),
) -> MaskedBatch:
    """The training masks of ``batch``'s ``rows`` (all by default), drawn from ``generator``."""
    return mask_for_training(
        batch.values[rows],
        batch.missing[rows],
        target_columns=target_columns,
        labelled_rows=batch.labelled[rows],
        cardinalities=cardinalities,
        policy=policy,
        generator=generator,
        revealed_rows=None if batch.revealed is None else batch.revealed[rows],
        queried_rows=None if batch.queried is None else batch.queried[rows],
        twin_groups=None if batch.twins is None else batch.twins[rows],
    )


def feature_weight(config: TrainConfig, step: int) -> float:
    """The feature-loss weight lambda at ``step`` (the target loss weighs ``1 - lambda``)."""
    if config.p_feature == 0:
        return 0.0  # no feature loss to weigh
    if config.tradeoff == "fixed":
        return config.tradeoff_start
    return cosine_tradeoff(step, config.tradeoff_steps or config.max_steps, config.tradeoff_start)


class Trainer(Engine):
    """The table models' engine: the loss of a step is masked reconstruction (NPT appendix C.1):
    hide cells of the batch's rows by the masking policy, predict them, score the hidden and the
    target cells. A step can be split into row shards (``training.distributed``), over processes."""

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
        self.layout = layout
        self.policy = config.masking()
        self.target_columns = target_columns
        self.cardinalities = torch.tensor(layout.cardinalities, device=target_columns.device)
        self.device = target_columns.device
        # the forward pass under autocast (bf16 on CUDA by default); the loss in float32
        self.autocast_dtype = autocast_dtype(self.device, config.mixed_precision)
        self.forward = forward or (lambda m, v, h: m(v, h))
        group = group or current_group()
        if shards is None:
            shards = [Shard(0, generator, dropout_generator)]
        self.shards = list(shards)
        self.n_shards = n_shards
        if len(self.shards) * group.world_size != n_shards:
            raise ValueError(
                f"{len(self.shards)} shards on each of {group.world_size} processes is not "
                f"the {n_shards} shards of a step"
            )
        self.generator = self.shards[0].generator  # masking draws
        self.dropout_generator = self.shards[0].dropout_generator  # the model's dropout, training
        super().__init__(
            model,
            config,
            callbacks=callbacks,
            generators={"masking": self.generator, "dropout": self.dropout_generator},
            group=group,
        )
        # the module a training step runs: the model, or torch.compile's version of it (which
        # shares its parameters)
        self.step_module: nn.Module = torch.compile(model) if config.compile else model  # type: ignore[assignment]
        self.ddp: nn.Module | None = None
        if self.group.distributed:
            from torch.nn.parallel import DistributedDataParallel

            device = next(model.parameters()).device
            self.ddp = DistributedDataParallel(
                model, device_ids=[device] if device.type == "cuda" else None, broadcast_buffers=False
            )
            self.train_root = self.ddp

    def step_loss(self, batch: Batch, step: int) -> tuple[Tensor, dict[str, float]]:
        masked = mask_batch(batch, self.target_columns, self.cardinalities, self.policy, self.generator)
        with autocast(self.device, self.autocast_dtype):
            outputs = self.forward(self.step_module, masked.values, masked.hidden)
        return npt_loss(
            outputs.float(),
            batch.values,
            masked.score_target,
            masked.score_feature,
            self.layout,
            self.tradeoff(step),
            self.config.label_smoothing,
            batch.row_weights(),
        )

    def gradients(self, batch: Batch, step: int) -> tuple[dict[str, float], bool]:
        if self.n_shards > 1 or self.ddp is not None:
            return self._sharded_gradients(batch, step), True
        return super().gradients(batch, step)

    def tradeoff(self, step: int) -> float:
        return feature_weight(self.config, step)

    def _sharded_gradients(self, batch: Batch, step: int) -> dict[str, float]:
        """The gradients of this process's shards of ``batch``: the gradients of the shard losses
        accumulate (each divided by the shards here), DistributedDataParallel averages them over
        the processes, so that every process then takes the same optimiser step."""
        module = self.ddp if self.ddp is not None else self.model
        n_local = len(self.shards)
        totals: dict[str, float] = {}
        for k, shard in enumerate(self.shards):
            rows = shard_rows(len(batch.values), shard.index, self.n_shards, batch.values.device)
            set_dropout_generator(self.model, shard.dropout_generator)
            masked = mask_batch(
                batch, self.target_columns, self.cardinalities, self.policy, shard.generator, rows
            )
            with autocast(self.device, self.autocast_dtype):
                outputs = self.forward(module, masked.values, masked.hidden)
            loss, stats = npt_loss(
                outputs.float(),
                batch.values[rows],
                masked.score_target,
                masked.score_feature,
                self.layout,
                self.tradeoff(step),
                self.config.label_smoothing,
                batch.row_weights(rows),
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
        totals["loss"] = self.group.mean(totals["loss"])
        return totals

    def _rng_state(self) -> dict[str, Any]:
        state = super()._rng_state()
        if self.n_shards > 1:
            # every shard's generators, gathered from the processes that hold them
            local = {
                sh.index: rng_state({"masking": sh.generator, "dropout": sh.dropout_generator})
                for sh in self.shards
            }
            state["n_shards"] = self.n_shards
            state["shard_rng"] = self.group.gather_merged(local)
        return state

    def _set_rng_state(self, state: dict[str, Any]) -> None:
        if self.n_shards == 1:
            super()._set_rng_state(state)
            return
        if int(state.get("n_shards", 1)) != self.n_shards:
            raise ValueError(
                f"the checkpoint has {state.get('n_shards', 1)} row shards per step, this fit {self.n_shards}"
            )
        for sh in self.shards:
            set_rng_state(
                state["shard_rng"][sh.index], {"masking": sh.generator, "dropout": sh.dropout_generator}
            )

    @contextlib.contextmanager
    def fitting(self) -> Iterator[None]:
        """:meth:`Engine.fit` runs with the model's dropout drawing from ``dropout_generator``."""
        set_dropout_generator(self.model, self.dropout_generator)
        try:
            yield
        finally:
            set_dropout_generator(self.model, None)
