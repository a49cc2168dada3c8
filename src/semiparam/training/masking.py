"""Which cells a model sees and which it is scored on (NPT section 2.6 and appendix C.4).

Training step (``mask_for_training``):

- missing cells are hidden (value 0, mask bit 1) and never scored;
- target cells: with ``p_target == 1`` every target is hidden and the labelled rows' targets are
  scored; with ``p_target < 1`` each labelled target is selected with probability ``p_target``,
  BERT-corrupted and scored, and the unselected ones stay *visible* as context for the others;
  rows without a label (transductive extra rows) always have their target hidden and unscored;
- feature cells (non-target, observed) are selected with probability ``p_feature``, corrupted and
  scored by the auxiliary feature loss.

``target_masking="chunk"`` (SPIN section 3.4, off by default) selects whole *rows* instead of cells:
each labelled row is picked with probability ``p_target`` and all of its target cells are
corrupted and scored together (SpanBERT-like; with a single target column it equals token masking).

BERT corruption of a selected cell is the paper's 90/10 split, not BERT's 80/10/10: with probability
``1 - randomize_fraction`` the cell is hidden; otherwise it gets a random value (a uniform category,
or N(0, 1) in standardised units) and its mask bit stays 0, so the model is not told which cells were
replaced. Either way the cell is scored. Selection is an independent Bernoulli per cell (the
reference code's count-then-pick sampler has an off-by-one in the randomised share).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from .._config import ConfigError, FrozenConfig


@dataclass(frozen=True)
class MaskingPolicy(FrozenConfig):
    p_feature: float = 0.15
    p_target: float = 1.0
    randomize_fraction: float = 0.1
    target_masking: Literal["token", "chunk"] = "token"  # "chunk": all targets of a picked row

    def validate(self) -> None:
        if not 0.0 <= self.p_feature < 1.0:
            raise ConfigError(f"p_feature must be in [0, 1), got {self.p_feature}")
        if not 0.0 < self.p_target <= 1.0:
            raise ConfigError(f"p_target must be in (0, 1], got {self.p_target}")
        if not 0.0 <= self.randomize_fraction <= 1.0:
            raise ConfigError(f"randomize_fraction must be in [0, 1], got {self.randomize_fraction}")


@dataclass
class MaskedBatch:
    """Model inputs for one step and the cells each loss is read on; all ``(n, d)``."""

    values: Tensor  # float, after corruption
    hidden: Tensor  # bool mask bit
    score_target: Tensor  # bool
    score_feature: Tensor  # bool


def _corrupt(
    values: Tensor,
    hidden: Tensor,
    selected: Tensor,
    cardinalities: Tensor,
    randomize_fraction: float,
    generator: torch.Generator | None,
) -> None:
    """In place: hide most ``selected`` cells, give the rest a random value with mask bit 0."""
    draw = torch.rand(values.shape, generator=generator, device=values.device)
    randomize = selected & (draw < randomize_fraction)
    hidden |= selected & ~randomize
    if randomize.any():
        cards = cardinalities.to(values.device).expand_as(values)
        uniform = torch.rand(values.shape, generator=generator, device=values.device)
        random_category = torch.floor(uniform * cards.clamp(min=1).to(values.dtype))
        normal = torch.randn(values.shape, generator=generator, device=values.device)
        random_value = torch.where(cards > 0, random_category, normal)
        values[randomize] = random_value[randomize]


def mask_for_training(
    values: Tensor,
    missing: Tensor,
    *,
    target_columns: Tensor,
    labelled_rows: Tensor,
    cardinalities: Tensor,
    policy: MaskingPolicy,
    generator: torch.Generator | None = None,
    revealed_rows: Tensor | None = None,
    queried_rows: Tensor | None = None,
    twin_groups: Tensor | None = None,
) -> MaskedBatch:
    """Sample one training step's masks. ``values``/``missing`` (n, d); ``target_columns`` (d,) bool;
    ``labelled_rows`` (n,) bool: rows whose targets may be shown and scored; ``cardinalities`` (d,)
    long, 0 for continuous columns; ``revealed_rows`` (n,) bool: rows shown whole, never masked
    nor scored (the copies of the duplicate-lookup task, spec-npt 6.4); ``queried_rows`` (n,) bool:
    rows whose targets are hidden and scored whatever ``p_target`` draws (lookup pairs' sources);
    ``twin_groups`` (n,) long: each row's group of rows with the same features, -1 for a row
    without such a twin: where the draw hides a target of every row of a group, the first row's
    stays shown (``TrainConfig.twin_noise``)."""
    n, d = values.shape
    values = values.clone()
    hidden = missing.clone()
    observed = ~missing
    is_target = target_columns.view(1, d).expand(n, d)
    maskable = observed
    if revealed_rows is not None:
        maskable = observed & ~revealed_rows.view(n, 1)
    scoreable_target = is_target & maskable & labelled_rows.view(n, 1)
    # rows without labels never show their targets
    hidden |= is_target & ~labelled_rows.view(n, 1)

    if policy.p_target >= 1.0:
        hidden |= is_target if revealed_rows is None else is_target & ~revealed_rows.view(n, 1)
        score_target = scoreable_target
    else:
        if policy.target_masking == "chunk":  # one draw per row, shared by its target cells
            rows = torch.rand((n, 1), generator=generator, device=values.device) < policy.p_target
            pick = rows.expand(n, d)
        else:
            pick = torch.rand((n, d), generator=generator, device=values.device) < policy.p_target
        if twin_groups is not None:
            pick = _spare_a_twin(pick, twin_groups, scoreable_target & target_columns.view(1, d))
        if queried_rows is not None:
            pick = pick | queried_rows.view(n, 1)
        score_target = scoreable_target & pick
        _corrupt(values, hidden, score_target, cardinalities, policy.randomize_fraction, generator)

    score_feature = torch.zeros_like(hidden)
    if policy.p_feature > 0:
        pick = torch.rand((n, d), generator=generator, device=values.device) < policy.p_feature
        score_feature = ~is_target & maskable & pick
        _corrupt(values, hidden, score_feature, cardinalities, policy.randomize_fraction, generator)
    values = values.masked_fill(hidden, 0.0)
    return MaskedBatch(values, hidden, score_target, score_feature)


def _spare_a_twin(pick: Tensor, groups: Tensor, candidates: Tensor) -> Tensor:
    """``pick`` (n, d) with, for each column and each group of ``groups`` (n,) with two or more
    ``candidates`` (n, d) cells in it, all of them picked, the group's first such cell unpicked."""
    n = pick.shape[0]
    rows = torch.arange(n, device=pick.device)
    twin = groups >= 0
    gid = groups.clamp(min=0)
    n_groups = int(gid.max()) + 1 if n else 0
    pick = pick.clone()  # may be an expanded view (chunk masking)
    for j in torch.nonzero(candidates.any(0)).flatten().tolist():
        cand = candidates[:, j] & twin
        counts = torch.bincount(gid[cand], minlength=n_groups)
        unpicked = torch.bincount(gid[cand & ~pick[:, j]], minlength=n_groups)
        first = torch.full((n_groups,), n, device=pick.device).scatter_reduce(
            0, gid[cand], rows[cand], "amin"
        )
        pick[first[(counts >= 2) & (unpicked == 0)], j] = False
    return pick


def mask_for_inference(values: Tensor, missing: Tensor, *, hide_columns: Tensor) -> tuple[Tensor, Tensor]:
    """Inputs at evaluation time: missing cells and every cell of ``hide_columns`` (d,) hidden."""
    hidden = missing | hide_columns.view(1, -1)
    return values.masked_fill(hidden, 0.0), hidden
