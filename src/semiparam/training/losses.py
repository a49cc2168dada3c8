"""Losses on scored cells (NPT section 2.6, appendix C.5).

Per cell: cross-entropy on a categorical column's logits; squared error in standardised units on a
continuous column (or, with a Gaussian head, the Gaussian negative log-likelihood). Each group
(targets, features) is a sum over its scored cells divided by their count, categorical and
continuous cells pooled; the total is ``(1 - lam) * targets + lam * features``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.distributions import Normal

from ..nn.columns import ColumnLayout, ColumnOutputs

MIN_STD = 1e-3


def gaussian_std(raw_scale: Tensor) -> Tensor:
    """Predictive std of a Gaussian head from its raw output (softplus, floored)."""
    return F.softplus(raw_scale) + MIN_STD


def cell_losses(
    outputs: ColumnOutputs, true_values: Tensor, layout: ColumnLayout, label_smoothing: float = 0.0
) -> Tensor:
    """Loss of every cell ``(n, d)`` against ``true_values`` (uncorrupted, encoded).
    ``label_smoothing``: of categorical cells (training only; validation scores the plain loss)."""
    n, d = true_values.shape
    losses = true_values.new_zeros(n, d)
    cont = layout.continuous
    if cont:
        y = true_values[:, cont]
        mean = outputs.continuous[..., 0]
        if outputs.continuous.shape[-1] == 2:
            std = gaussian_std(outputs.continuous[..., 1])
            losses[:, cont] = -Normal(mean, std, validate_args=False).log_prob(y)
        else:
            losses[:, cont] = (mean - y) ** 2
    cat = layout.categorical
    if cat:
        # one conversion and one write for all categorical columns (a write per column costs a
        # zero-filled copy of the losses per column in the backward pass)
        labels = true_values[:, cat].long()
        per_column = [
            F.cross_entropy(logits, labels[:, k], reduction="none", label_smoothing=label_smoothing)
            for k, logits in enumerate(outputs.categorical)
        ]
        losses[:, cat] = torch.stack(per_column, dim=1)
    return losses


def masked_mean(losses: Tensor, scored: Tensor, row_weights: Tensor | None = None) -> tuple[Tensor, int]:
    """Mean of ``losses`` over ``scored`` cells (0 when none are scored) and the count. With
    ``row_weights`` (n,) the mean is weighted by the cells' rows (a row of weight 2 counts as
    that row twice); a scored cell of weight 0 counts for nothing."""
    count = int(scored.sum())
    if count == 0:
        return losses.new_zeros(()), 0
    if row_weights is None:
        return (losses * scored).sum() / count, count
    weights = scored * row_weights.to(losses.dtype)[:, None]
    total = weights.sum()
    if not total > 0:  # only rows of weight 0 scored
        return losses.new_zeros(()), 0
    return (losses * weights).sum() / total, count


def npt_loss(
    outputs: ColumnOutputs,
    true_values: Tensor,
    score_target: Tensor,
    score_feature: Tensor,
    layout: ColumnLayout,
    lam: float,
    label_smoothing: float = 0.0,
    row_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """``row_weights`` (n,): the rows' sample weights (None: every row 1), which weigh both
    groups' cells (a row's weight is how many times it counts)."""
    losses = cell_losses(outputs, true_values, layout, label_smoothing)
    target_loss, n_target = masked_mean(losses, score_target, row_weights)
    feature_loss, n_feature = masked_mean(losses, score_feature, row_weights)
    if n_target == 0:  # pure self-supervision (imputation) or a batch without scored targets
        total = feature_loss if n_feature else target_loss
    elif n_feature == 0:
        total = target_loss
    else:
        total = (1.0 - lam) * target_loss + lam * feature_loss
    stats = {
        "loss": float(total.detach()),
        "target_loss": float(target_loss.detach()),
        "feature_loss": float(feature_loss.detach()),
    }
    return total, stats
