"""LAMB + Lookahead, as NPT trains (appendix C.5), as one optimiser over foreach kernels.

LAMB (You et al. 2020): Adam moments, the second one not bias-corrected (as cybertronai's LAMB,
which the NPT reference code used), then each parameter tensor's step scaled by its trust ratio
``min(||w||, 10) / (||adam step|| + eps)``; no weight decay. The step size is
``lr / (1 - beta1^t)``, the first moment's bias correction, as ``pytorch_optimizer.Lamb`` applies
it: the library trained with that optimiser before this one, and its settings were chosen with it.
NOTE[DIFF]: cybertronai's LAMB has no bias correction at all; with the trust ratio the correction
only enlarges the first few steps (10x at step 1, 1.5x by step 10). Lookahead (Zhang et al. 2019) around
it: every ``k`` steps the weights move ``1 - alpha`` of the way back to the slow weights, which
then take their place.

It is written here rather than taken from ``pytorch_optimizer`` (whose ``Lamb`` and ``Lookahead``
it matches to float rounding, ``tests/test_optim.py``): that pair keeps per-tensor Python state
and cost up to a third of a training step on a small table (``benchmarks/fit_cost.py`` profiles a
step). Here every update of a step is a handful of foreach kernels over all tensors, with no
per-tensor Python work and no host synchronisation, so it stays cheap on a GPU too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from .config import TrainConfig


class LambLookahead(torch.optim.Optimizer):
    """LAMB wrapped in Lookahead (see the module docstring). ``clamp``: the cap on a weight norm
    in the trust ratio; ``k``, ``alpha``: Lookahead's period and slow-weight step.

    ``members``: the parameters hold that many models stacked on a leading dimension (ensemble
    members trained together, ``training.members``): the trust ratio is then taken per member
    (the norms of each member's slice), and ``lr`` may be a tensor of one rate per member. Each
    member's update is the one it would get alone."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        *,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        clamp: float = 10.0,
        k: int = 6,
        alpha: float = 0.5,
        members: int | None = None,
    ) -> None:
        if lr < 0 or eps < 0 or clamp <= 0 or k < 1 or not 0.0 <= alpha <= 1.0:
            raise ValueError(
                f"bad LAMB/Lookahead settings: lr={lr} eps={eps} clamp={clamp} k={k} alpha={alpha}"
            )
        defaults = {"lr": lr, "betas": betas, "eps": eps, "clamp": clamp, "k": k, "alpha": alpha}
        super().__init__(params, defaults)
        self.members = members
        for group in self.param_groups:
            group.setdefault("counter", 0)  # steps since the last Lookahead synchronisation
            group.setdefault("step", 0)  # LAMB steps taken (the bias correction's t)
            for p in group["params"]:  # slow weights start as the weights (Lookahead's rule)
                self.state[p]["slow"] = p.detach().clone()

    # torch.optim.Optimizer wraps these two in torch._disable_dynamo, whose first call imports
    # torch._dynamo: over a second, paid by every process's first fit (and a CLI command), for a
    # guard against compiling an optimiser step that nothing here compiles. The wrapped
    # functions themselves run unchanged.
    def add_param_group(self, param_group: dict[str, Any]) -> None:  # noqa: D102
        _undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:  # noqa: D102
        _undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # noqa: D102
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._lamb(group, params)
            group["counter"] += 1
            if group["counter"] >= group["k"]:
                group["counter"] = 0
                fast = list(group["params"])
                slow = [self.state[p]["slow"] for p in fast]
                torch._foreach_lerp_(fast, slow, 1.0 - group["alpha"])  # fast += (1-a)(slow - fast)
                torch._foreach_copy_(slow, fast)
        return loss

    def _lamb(self, group: dict[str, Any], params: list[Tensor]) -> None:
        beta1, beta2 = group["betas"]
        eps = group["eps"]
        grads = [p.grad for p in params if p.grad is not None]  # params: those with a gradient
        states = [self.state[p] for p in params]
        for p, state in zip(params, states):
            if "exp_avg" not in state:
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)  # m = b1 m + (1 - b1) g
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)  # v = b2 v + (1 - b2) g^2
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denominators, eps)
        updates = torch._foreach_div(exp_avgs, denominators)  # Adam's step, no bias correction
        weight_norms = self._norms(params).clamp_(max=group["clamp"])  # (n_tensors,) or (n_tensors, M)
        update_norms = self._norms(updates)
        trust = torch.where(
            (weight_norms > 0) & (update_norms > 0),
            weight_norms / (update_norms + eps),
            torch.ones_like(weight_norms),
        )
        group["step"] += 1
        step_size = group["lr"] / (1.0 - beta1 ** group["step"])  # a float, or (M,) per member
        scales = (trust * -step_size).unbind()
        if self.members is not None:  # (M,) -> broadcast over each member's slice
            scales = tuple(sc.view(-1, *([1] * (u.dim() - 1))) for sc, u in zip(scales, updates))
        torch._foreach_mul_(updates, list(scales))
        torch._foreach_add_(params, updates)

    def restricted(self, old: Sequence[Tensor], new: Sequence[Tensor], index: Tensor) -> LambLookahead:
        """The optimiser over ``new`` stacked parameters, each holding the members ``index`` of
        the matching tensor of ``old`` (members that finished have left the stack), with their
        moments, slow weights and counters."""
        group = self.param_groups[0]
        settings = {k: group[k] for k in ("betas", "eps", "clamp", "k", "alpha")}
        out = LambLookahead(new, lr=0.0, members=len(index), **settings)
        out.param_groups[0].update(counter=group["counter"], step=group["step"])
        for p_old, p_new in zip(old, new, strict=True):
            out.state[p_new] = {key: v.index_select(0, index).clone() for key, v in self.state[p_old].items()}
        return out

    def _norms(self, tensors: Sequence[Tensor]) -> Tensor:
        """The L2 norm of each tensor, or with ``members`` of each member's slice: (n, M)."""
        if self.members is None:
            return torch.stack(torch._foreach_norm(list(tensors)))
        return torch.stack([t.reshape(t.shape[0], -1).norm(dim=1) for t in tensors])


def _undecorated(method: Any) -> Any:
    """``method`` without torch's ``_disable_dynamo`` wrapper (``functools.wraps`` keeps it in
    ``__wrapped__``), or ``method`` itself where a torch version does not wrap it."""
    return getattr(method, "__wrapped__", method)


def build_optimizer(params: Iterable[torch.nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    """LAMB + Lookahead at the paper's settings: betas (0.9, 0.999), eps 1e-6, no weight decay."""
    return LambLookahead(params, lr=config.learning_rate, k=config.lookahead_k, alpha=config.lookahead_alpha)


def clip_gradients(params: list[torch.nn.Parameter], config: TrainConfig) -> None:
    if config.clip_mode == "value":
        torch.nn.utils.clip_grad_value_(params, config.clip_value, foreach=True)
    elif config.clip_mode == "norm":
        torch.nn.utils.clip_grad_norm_(params, config.clip_value, foreach=True)
