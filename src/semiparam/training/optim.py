"""LAMB + Lookahead, as NPT trains (appendix C.5), from the maintained ``pytorch_optimizer``."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from pytorch_optimizer import Lamb, Lookahead

from .config import TrainConfig


def build_optimizer(params: Iterable[torch.nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    """``pytorch_optimizer.Lamb`` defaults match the cybertronai form the paper used: no bias
    correction, weight norm clamped to 10 in the trust ratio, eps 1e-6, no weight decay."""
    lamb = Lamb(params, lr=config.learning_rate, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0)
    return Lookahead(lamb, k=config.lookahead_k, alpha=config.lookahead_alpha)


def clip_gradients(params: list[torch.nn.Parameter], config: TrainConfig) -> None:
    if config.clip_mode == "value":
        torch.nn.utils.clip_grad_value_(params, config.clip_value)
    elif config.clip_mode == "norm":
        torch.nn.utils.clip_grad_norm_(params, config.clip_value)
