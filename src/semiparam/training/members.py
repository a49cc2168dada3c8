"""Ensemble members trained together: several table models of one architecture stepped as one.

Each member keeps what makes it a member: its own initial weights (its seed), validation split,
minibatches, masks, learning-rate schedule, validation losses, best checkpoint and stopping point.
What they share is the step itself: their weights are stacked on a leading member dimension
(:class:`MemberStack`, ``torch.func.stack_module_state``) and one forward pass runs every member
at once through ``torch.func.vmap``, one backward pass and one optimiser step update them all
(:class:`~semiparam.training.optim.LambLookahead` with ``members``: trust ratios and learning
rates per member). A member whose schedule has ended leaves the stack, so no step is spent on it.

Every member's bookkeeping is an :class:`~semiparam.training.engine.Engine` of its own (schedule,
history, callbacks: best checkpoint, progress bar) over its own module, which receives the
member's slice of the stack whenever it is evaluated and at the end.

NOTE[DIFF]: the papers train one model. Dropout masks come from one generator for the stack, so a
member's masks depend on which members share its steps; everything else a member draws (weights,
validation split, batches, masks of cells) is its own, as when members train one after another.
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from ..nn.columns import ColumnLayout, ColumnOutputs
from ..nn.dropout import set_dropout_generator
from ..nn.modes import set_training
from .config import TrainConfig
from .device import autocast, autocast_dtype
from .engine import Callback, Engine, TrainHistory
from .losses import npt_loss
from .optim import LambLookahead, clip_gradients
from .trainer import Batch, feature_weight, mask_batch


def stacked_attention_kernels(
    device: torch.device, *, math: bool | None = None
) -> contextlib.AbstractContextManager:
    """The attention kernels the stacked forward pass may use: on CUDA (``math`` None) or where
    ``math`` is True, only PyTorch's math kernel of ``scaled_dot_product_attention`` (products
    and a softmax, which vmap batches like any other ops); elsewhere any. On the device machine's
    PyTorch 2.11 the backward pass of the fused CUDA kernels under vmap failed ("LSE is not
    correctly aligned (strideB)"): the batching rule hands them a log-sum-exp whose batch stride
    the kernel refuses. A stacked step is a small table's step, whose attention matrices are
    small, so the math kernel costs little there."""
    if math is None:
        math = device.type == "cuda"
    if not math:
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # PyTorch 2.2
        return torch.backends.cuda.sdp_kernel(
            enable_flash=False, enable_mem_efficient=False, enable_math=True
        )
    return sdpa_kernel(SDPBackend.MATH)


class MemberStack(nn.Module):
    """``M`` modules of one architecture as one: every parameter and buffer stacked on a leading
    member dimension; ``forward(values (M, n, d), hidden (M, n, d))`` runs each member on its own
    rows and returns :class:`ColumnOutputs` with a leading member dimension."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        super().__init__()
        params, buffers = stack_module_state(list(modules))
        self.names = list(params)
        self.stacked = nn.ParameterList(nn.Parameter(params[n].detach().clone()) for n in self.names)
        self.buffer_values = buffers
        # the architecture without weights (functional_call supplies each member's); kept out of
        # the module tree, so that .to(), state_dict() and parameters() see the stack only
        self.__dict__["_base"] = copy.deepcopy(modules[0]).to("meta")

    @property
    def base(self) -> nn.Module:
        """The members' architecture, on the meta device (no weights of its own)."""
        return self.__dict__["_base"]

    def set_dropout_generator(self, generator: torch.Generator | None) -> None:
        set_dropout_generator(self.base, generator)

    def train(self, mode: bool = True) -> MemberStack:
        self.base.train(mode)
        return super().train(mode)

    def forward(self, values: Tensor, hidden: Tensor) -> ColumnOutputs:
        def one(params: dict[str, Tensor], buffers: dict[str, Tensor], v: Tensor, h: Tensor) -> tuple:
            out = functional_call(self.base, (params, buffers), (v, h))
            return (out.continuous, *out.categorical)

        params = dict(zip(self.names, self.stacked, strict=True))
        with warnings.catch_warnings():
            # vmap runs PyTorch's CPU flash attention once per member (it has no batching rule
            # for it); said once here rather than at every step
            warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet")
            with stacked_attention_kernels(values.device):
                outs = vmap(one, randomness="different")(params, self.buffer_values, values, hidden)
        return ColumnOutputs(outs[0], list(outs[1:]))

    @torch.no_grad()
    def copy_member(self, k: int, module: nn.Module) -> None:
        """Write member ``k``'s weights into ``module`` (in place)."""
        own = dict(module.named_parameters())
        for name, stacked in zip(self.names, self.stacked, strict=True):
            own[name].copy_(stacked[k])

    def keep(self, rows: Sequence[int], optimizer: LambLookahead) -> LambLookahead:
        """Keep the members at positions ``rows`` of the stack (the others have finished): the
        stacked tensors and the optimiser's state are cut down to them; returns the optimiser
        over the new tensors."""
        index = torch.as_tensor(list(rows), device=self.stacked[0].device)
        old = list(self.stacked)
        new = [nn.Parameter(p.detach().index_select(0, index).clone()) for p in old]
        self.stacked = nn.ParameterList(new)
        self.buffer_values = {k: v.index_select(0, index) for k, v in self.buffer_values.items()}
        return optimizer.restricted(old, new, index)


@dataclass
class MemberPlan:
    """What one member trains on: ``module`` (its initial weights), ``next_batch(step)`` (its
    rows), ``generator`` (its masks), ``evaluate()`` (its validation loss, read from ``module``;
    None: no validation), ``callbacks`` (best checkpoint, progress bar)."""

    module: nn.Module
    next_batch: Callable[[int], Batch]
    generator: torch.Generator
    evaluate: Callable[[], float] | None
    callbacks: list[Callback]


class _Schedule(Engine):
    """A member's learning-rate schedule, history and callbacks; it has no optimiser of its own."""

    def __init__(self, plan: MemberPlan, config: TrainConfig) -> None:
        super().__init__(plan.module, config, callbacks=plan.callbacks, optimizer=_NoOptimizer())


class _NoOptimizer(torch.optim.Optimizer):
    """Stands in for the optimiser a :class:`_Schedule` never steps (the stack's steps them all)."""

    def __init__(self) -> None:
        super().__init__([torch.zeros(1, requires_grad=True)], {})


def train_members(
    plans: Sequence[MemberPlan],
    layout: ColumnLayout,
    target_columns: Tensor,
    config: TrainConfig,
    dropout_generator: torch.Generator,
) -> list[TrainHistory]:
    """Train the members of ``plans`` together (see the module docstring); each plan's module
    ends with that member's final (best) weights. Returns each member's history."""
    device = target_columns.device
    policy = config.masking()
    cardinalities = torch.tensor(layout.cardinalities, device=device)
    precision = autocast_dtype(device, config.mixed_precision)
    schedules = [_Schedule(plan, config) for plan in plans]
    stack = MemberStack([plan.module for plan in plans])
    stack.set_dropout_generator(dropout_generator)
    optimizer = LambLookahead(
        stack.parameters(),
        lr=config.learning_rate,
        k=config.lookahead_k,
        alpha=config.lookahead_alpha,
        members=len(plans),
    )
    active = list(range(len(plans)))  # members still training, in stack order
    start = time.perf_counter()
    for schedule in schedules:
        for cb in schedule.callbacks:
            cb.on_train_begin(schedule)
    for step in range(config.max_steps):
        for k in active:
            if schedules[k].check_limits(step, lambda: time.perf_counter() - start):
                schedules[k].stop = True
        done = [k for k in active if schedules[k].stop]
        if done:
            active, optimizer = _retire(done, active, stack, optimizer, plans, schedules, start)
            if not active:
                break
        set_training(stack)
        batches = [plans[k].next_batch(step) for k in active]
        n_rows = min(len(b.values) for b in batches)  # equal but for a minibatch's last row
        masked = [
            mask_batch(b, target_columns, cardinalities, policy, plans[k].generator, slice(n_rows))
            for k, b in zip(active, batches, strict=True)
        ]
        with autocast(device, precision):
            outputs = stack(torch.stack([m.values for m in masked]), torch.stack([m.hidden for m in masked]))
        outputs = outputs.float()
        lam = feature_weight(config, step)
        total: Tensor | None = None
        member_stats = []
        for i, (b, m) in enumerate(zip(batches, masked, strict=True)):
            own = ColumnOutputs(outputs.continuous[i], [c[i] for c in outputs.categorical])
            loss, stats = npt_loss(
                own,
                b.values[:n_rows],
                m.score_target,
                m.score_feature,
                layout,
                lam,
                config.label_smoothing,
                b.row_weights(slice(n_rows)),
            )
            total = loss if total is None else total + loss  # each member's gradient is its own
            member_stats.append(stats)
        rates = [schedules[k].learning_rate(step) for k in active]
        for group in optimizer.param_groups:
            group["lr"] = torch.tensor(rates, device=device)
        optimizer.zero_grad(set_to_none=True)
        assert total is not None
        if total.requires_grad:
            total.backward()
            clip_gradients(list(stack.parameters()), config)
            optimizer.step()
        for k, stats, rate in zip(active, member_stats, rates, strict=True):
            schedule = schedules[k]
            schedule.record_step(step, {**stats, "lr": rate})
            evaluate = plans[k].evaluate
            if evaluate is not None and schedule.evaluates_at(step):
                eval_start = time.perf_counter()
                stack.copy_member(active.index(k), plans[k].module)
                val_loss = evaluate()
                schedule.record_eval(step, val_loss, time.perf_counter() - eval_start)
            if schedule.annealed(step):
                schedule.stop = True
    if active:  # the step ceiling
        _retire(list(active), active, stack, optimizer, plans, schedules, start)
    return [s.history for s in schedules]


def _retire(
    done: list[int],
    active: list[int],
    stack: MemberStack,
    optimizer: LambLookahead,
    plans: Sequence[MemberPlan],
    schedules: Sequence[_Schedule],
    start: float,
) -> tuple[list[int], LambLookahead]:
    """Members ``done`` leave the stack: each module gets its last weights, then its callbacks
    restore the best ones; the stack keeps the rest."""
    for k in done:
        stack.copy_member(active.index(k), plans[k].module)
        schedules[k].finish(time.perf_counter() - start)
    remaining = [k for k in active if k not in done]
    if remaining:
        optimizer = stack.keep([active.index(k) for k in remaining], optimizer)
    return remaining, optimizer


__all__ = ["MemberPlan", "MemberStack", "train_members"]
