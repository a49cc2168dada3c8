"""Which rows each training step sees: a stratified hold-out for validation
(:func:`split_validation`), the rows of every step (:class:`RowSampler`: the whole table, or
stratified batches dealt afresh each epoch), the NPT paper's duplicate-lookup task around it
(:class:`DuplicateLookup`), alone or every few steps of masked reconstruction (:class:`LookupSteps`),
and lookup pairs mixed into masked reconstruction (:class:`LookupPairs`).
Their random state goes into training checkpoints."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from ..training.checkpoint import numpy_rng_state, set_numpy_rng_state
from ..training.trainer import Batch


def stratified_order(n: int, strata: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """A random permutation of ``range(n)`` in which consecutive chunks keep the strata's shares:
    shuffle, sort stably by stratum, then deal rows round-robin (row k goes to slot k % n_slots)."""
    perm = rng.permutation(n)
    if strata is None:
        return perm
    return perm[np.argsort(strata[perm], kind="stable")]


def split_validation(
    n: int, fraction: float, strata: np.ndarray | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(train_idx, val_idx): a stratified hold-out; no hold-out when it would be too small.

    Not scikit-learn's ``train_test_split(stratify=...)``: it refuses any class with a single row
    ("The least populated classes in y have only 1 member, which is too few"), and a user's table
    with one example of a rare class must still fit. The rows are dealt by :func:`stratified_order`,
    the same rule that deals training batches and samples the prediction context."""
    n_val = int(math.floor(n * fraction))
    if fraction <= 0 or n_val < 1 or n - n_val < 2:
        return np.arange(n), np.zeros(0, dtype=np.int64)
    order = stratified_order(n, strata, rng)
    # every (1/fraction)-th row of the stratum-sorted order: keeps class shares
    step = n / n_val
    val_pos = np.unique(np.floor(np.arange(n_val) * step + rng.uniform(0, step)).astype(np.int64))
    val_pos = val_pos[val_pos < n]
    val = order[val_pos]
    train = np.setdiff1d(np.arange(n), val)
    return train, np.sort(val)


class RowSampler:
    """The rows of each training step: the whole table when it fits in one batch, else a fresh
    stratified deal of the rows into batches every epoch. Its state (generator, the rest of the
    epoch) goes into training checkpoints."""

    def __init__(
        self,
        values: torch.Tensor,
        missing: torch.Tensor,
        labelled: torch.Tensor,
        batch_size: int,
        strata: np.ndarray | None,
        rng: np.random.Generator,
        weights: torch.Tensor | None = None,
        full_batch_rows: int = 0,
    ) -> None:
        """``weights``: the rows' sample weights (None: every row 1). ``full_batch_rows``: a table
        of at most this many rows is one full batch whatever ``batch_size``."""
        self.values, self.missing, self.labelled, self.weights = values, missing, labelled, weights
        self.n_rows = len(values)
        whole = self.n_rows <= full_batch_rows
        self.n_batches = 1 if whole else max(1, math.ceil(self.n_rows / batch_size))
        self.strata, self.rng = strata, rng
        self.epoch_batches: list[np.ndarray] = []

    def __call__(self, step: int) -> Batch:
        if self.n_batches == 1:
            return Batch(self.values, self.missing, self.labelled, weights=self.weights)
        if not self.epoch_batches:  # new epoch: a fresh stratified deal of rows into batches
            order = stratified_order(self.n_rows, self.strata, self.rng)
            self.epoch_batches.extend(order[k :: self.n_batches] for k in range(self.n_batches))
        idx = torch.as_tensor(self.epoch_batches.pop(), device=self.values.device)
        weights = None if self.weights is None else self.weights[idx]
        return Batch(self.values[idx], self.missing[idx], self.labelled[idx], weights=weights)

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": numpy_rng_state(self.rng),
            "epoch_batches": [torch.as_tensor(b) for b in self.epoch_batches],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_numpy_rng_state(self.rng, state["rng"])
        self.epoch_batches = [b.cpu().numpy() for b in state["epoch_batches"]]


def permute_targets(values: Any, missing: Any, target_j: Sequence[int], perm: Any) -> tuple[Any, Any]:
    """Copies of ``values``/``missing`` (numpy or torch, (n, d)) whose target cells are those of
    the rows ``perm``: labels reassigned at random across rows."""
    copy_of = (lambda a: a.clone()) if isinstance(values, torch.Tensor) else (lambda a: a.copy())
    values, missing = copy_of(values), copy_of(missing)
    for j in target_j:
        values[:, j] = values[perm, j]
        missing[:, j] = missing[perm, j]
    return values, missing


def with_copies(batch: Batch, values: torch.Tensor, missing: torch.Tensor, *, queried: bool = False) -> Batch:
    """``batch``'s rows holding ``values``/``missing`` (its cells, the targets perhaps shuffled),
    then a copy of each shown whole (``Batch.revealed``), from which the originals' hidden targets
    can be copied; ``queried``: the originals' targets are hidden and scored whatever ``p_target``
    draws (``Batch.queried``)."""
    copies = torch.arange(2 * len(values), device=values.device) >= len(values)
    return Batch(
        torch.cat([values, values]),
        torch.cat([missing, missing]),
        torch.cat([batch.labelled, batch.labelled]),
        copies,
        None if batch.weights is None else torch.cat([batch.weights, batch.weights]),
        ~copies if queried else None,
    )


class BatchSource(Protocol):
    """A training step's rows by step number, with a random state checkpointed with training."""

    def __call__(self, step: int) -> Batch: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class RowSource(BatchSource, Protocol):
    """What the batch sources below wrap: a :class:`RowSampler`, or one around it that draws from
    the row sampler's generator (``rng``, checkpointed in the row sampler's state)."""

    rng: np.random.Generator


class _AroundRows:
    """A batch source around a :class:`RowSampler` (``rows``): its random state is the row
    sampler's, checkpointed with it."""

    rows: RowSource

    def state_dict(self) -> dict[str, Any]:
        return self.rows.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows.load_state_dict(state)


class DuplicateLookup(_AroundRows):
    """The NPT paper's semi-synthetic lookup task (section 4.2, spec-npt 6.4) around a row
    sampler: each step's rows (targets hidden and scored), then a copy of them shown whole
    (:func:`with_copies`), from which the hidden targets can be copied. With ``shuffle`` the
    target cells are first permuted across the step's rows, so that copying is the only way to
    predict them. Its random state is the row sampler's generator, checkpointed with it."""

    def __init__(self, rows: RowSampler, target_j: Sequence[int], shuffle: bool) -> None:
        self.rows, self.target_j, self.shuffle = rows, list(target_j), shuffle

    def __call__(self, step: int) -> Batch:
        batch = self.rows(step)
        values, missing = batch.values, batch.missing
        if self.shuffle:
            perm = torch.as_tensor(self.rows.rng.permutation(len(values)), device=values.device)
            values, missing = permute_targets(values, missing, self.target_j, perm)
        return with_copies(batch, values, missing)


# the most rows of a lookup step of LookupSteps (and as many copies): the lookup is learnt as well
# from a sample of the step's rows, at a fraction of a full batch's row attention
LOOKUP_ROWS = 256


def _feature_columns(values: torch.Tensor, target_j: Sequence[int]) -> torch.Tensor:
    """``(d,)`` bool: the columns of ``values`` that are not targets."""
    features = torch.ones(values.shape[1], dtype=torch.bool, device=values.device)
    features[torch.as_tensor(list(target_j), dtype=torch.long, device=values.device)] = False
    return features


def same_features(
    values: torch.Tensor, missing: torch.Tensor, rows: torch.Tensor, target_j: Sequence[int]
) -> torch.Tensor:
    """``(len(rows), n)`` bool: whether row ``r`` has the features (values and missing cells, the
    targets aside) of row ``rows[k]``: a table's duplicate rows."""
    features = _feature_columns(values, target_j)
    a, b = values[:, features], missing[:, features]
    return (a[rows][:, None] == a[None]).all(-1) & (b[rows][:, None] == b[None]).all(-1)


def twin_groups(
    values: torch.Tensor, missing: torch.Tensor, labelled: torch.Tensor, target_j: Sequence[int]
) -> torch.Tensor | None:
    """``(n,)`` long: for each labelled row with a twin (another labelled row with the same
    features: values and missing cells, the targets aside), the number of its group; -1 for the
    other rows. None when no row has a twin."""
    features = _feature_columns(values, target_j)
    key = torch.cat([values[:, features], missing[:, features].to(values.dtype)], 1)
    _, group = torch.unique(key, dim=0, return_inverse=True)
    twin = labelled & (torch.bincount(group[labelled], minlength=len(values))[group] > 1)
    if not bool(twin.any()):
        return None
    return torch.where(twin, group, torch.full_like(group, -1))


class TwinNoise(_AroundRows):
    """Rows with the same features share their labels' noise (``TrainConfig.twin_noise``), around
    a row sampler: in each step whose rows hold twins (:func:`twin_groups`), each group of twins
    draws one normal shift of standard deviation ``noise``, added to the (standardised)
    continuous target of each of them, and the batch carries the groups (``Batch.twins``) so that
    the masks never hide a whole group's labels. A step without twins is the row sampler's,
    untouched, and draws nothing; a categorical target is never moved.

    NOTE[DIFF]: not in the papers. Masked reconstruction lets NPT read the labels of other rows,
    but on a small table it is cheaper to memorise each training row's label in the weights, and
    the fitted model then ignores a changed context (issue 49, item 4). A label that moves with
    every step cannot be memorised, but it can be read from a twin whose label moved with it.
    The shift has mean 0, so the squared error's best prediction from the features is the same
    as without it; a class drawn anew would move the probabilities a classifier should predict
    (it cost the development suite's titanic, whose rows are nearly all twins), so categorical
    targets are left alone. Its draws come from the row sampler's generator, checkpointed with it."""

    def __init__(
        self, rows: RowSampler, target_j: Sequence[int], cardinalities: Sequence[int], noise: float
    ) -> None:
        self.rows, self.noise = rows, float(noise)
        self.target_j = list(target_j)
        # the continuous targets to move; none when the table holds no twins, so that no step
        # looks for them (a batch holds twins only where the table does)
        self.continuous = [j for j in self.target_j if int(cardinalities[j]) == 0]
        if self.continuous and twin_groups(rows.values, rows.missing, rows.labelled, self.target_j) is None:
            self.continuous = []

    @property
    def rng(self) -> np.random.Generator:
        """The row sampler's generator, which the wrappers around this one draw from too."""
        return self.rows.rng

    def __call__(self, step: int) -> Batch:
        batch = self.rows(step)
        groups = None
        if self.continuous:
            groups = twin_groups(batch.values, batch.missing, batch.labelled, self.target_j)
        if groups is None:
            return batch
        _, local = torch.unique(groups, return_inverse=True)  # 0 is -1 (a row without twins) if any
        values = batch.values.clone()
        for j in self.continuous:  # one draw per group and target
            draw = self.rng.normal(0.0, self.noise, int(local.max()) + 1)
            shift = torch.as_tensor(draw, dtype=values.dtype, device=values.device)[local]
            moved = (groups >= 0) & ~batch.missing[:, j]
            values[:, j] = torch.where(moved, values[:, j] + shift, values[:, j])
        return dataclasses.replace(batch, values=values, twins=groups)


class LookupSteps(_AroundRows):
    """The NPT paper's lookup task (section 4.2, spec-npt 6.4) as every ``every``-th step of
    masked reconstruction, around a row sampler: up to :data:`LOOKUP_ROWS` labelled rows of the
    step, their target cells shuffled across them (rows with the same features share one label),
    hidden and scored (``Batch.queried``), then a copy of each shown whole (``Batch.revealed``).
    Only the copies predict the hidden labels. The other steps are the row sampler's, untouched.
    The lookup steps are fixed by the step number, so members trained together take them at once.

    NOTE[DIFF]: not in the papers' training of a table model. Masked reconstruction lets NPT read
    the labels of other rows but nothing makes it: on a small table it is cheaper to memorise
    each training row's label in the weights, and the fitted model then ignores a changed
    context (issue 49, item 4). The paper's lookup task shows that NPT learns to look up when only
    lookup predicts; taking it every few steps teaches that beside the usual task, with no drawn
    label among the rows of an ordinary step (:class:`LookupPairs` puts them there). Its random
    draws come from the row sampler's generator, checkpointed with it."""

    def __init__(self, rows: RowSource, target_j: Sequence[int], every: int) -> None:
        self.rows, self.target_j, self.every = rows, list(target_j), int(every)

    def __call__(self, step: int) -> Batch:
        batch = self.rows(step)
        if step % self.every != self.every - 1:
            return batch
        rng = self.rows.rng
        labelled = np.flatnonzero(batch.labelled.cpu().numpy())
        if len(labelled) < 2:
            return batch
        device = batch.values.device
        pick = torch.as_tensor(
            np.sort(rng.choice(labelled, size=min(LOOKUP_ROWS, len(labelled)), replace=False)), device=device
        )
        weights = None if batch.weights is None else batch.weights[pick]
        sample = Batch(batch.values[pick], batch.missing[pick], batch.labelled[pick], weights=weights)
        perm = torch.as_tensor(rng.permutation(len(pick)), device=device)
        # rows with the same features take the label drawn for the first of them
        everyone = torch.arange(len(pick), device=device)
        perm = perm[same_features(sample.values, sample.missing, everyone, self.target_j).int().argmax(0)]
        values, missing = permute_targets(sample.values, sample.missing, self.target_j, perm)
        return with_copies(sample, values, missing, queried=True)


class LookupPairs(_AroundRows):
    """Lookup pairs mixed into masked reconstruction, around a row sampler: in each step, a share
    of the step's rows is overwritten by copies ("twins") of other labelled rows of the step,
    shown whole (``Batch.revealed``: never masked nor scored); each pair (a source row and its
    twin) gets the target cells of a row of the step drawn at random. The source's target is
    hidden and scored (``Batch.queried``, whatever ``p_target`` draws), and only its twin's label
    predicts it: neither its features nor the weights' memory of the table do. The step's other
    labelled rows whose features equal a source's (a table's duplicate rows) take the pair's label
    too, so that no row of the step contradicts the twin. The rest of the step is the usual masked
    reconstruction.

    NOTE[DIFF]: not in the papers. NPT's masked reconstruction lets a model read the labels of
    other rows, but nothing makes it: on a small table it is cheaper to memorise each training
    row's label in the weights, and the fitted model then ignores a changed context (issue 49,
    item 4). The NPT paper's lookup task (section 4.2) shows that NPT learns to look up when only
    lookup predicts; mixing a few such pairs into every step teaches it beside the usual task.
    Its random draws come from the row sampler's generator, checkpointed with it."""

    def __init__(self, rows: RowSource, target_j: Sequence[int], share: float) -> None:
        self.rows, self.target_j, self.share = rows, list(target_j), float(share)

    def __call__(self, step: int) -> Batch:
        batch = self.rows(step)
        n = len(batch.values)
        labelled = np.flatnonzero(batch.labelled.cpu().numpy())
        n_pairs = min(int(round(self.share * n / 2)), len(labelled), n // 2)
        if n_pairs < 1 or not self.target_j:
            return batch
        rng = self.rows.rng
        sources = rng.choice(labelled, size=n_pairs, replace=False)
        slots = rng.choice(np.setdiff1d(np.arange(n), sources), size=n_pairs, replace=False)
        donors = rng.choice(labelled, size=n_pairs)
        device = batch.values.device
        src, slot, donor = (torch.as_tensor(a, device=device) for a in (sources, slots, donors))
        j = torch.as_tensor(self.target_j, device=device)
        same = same_features(batch.values, batch.missing, src, self.target_j)  # [k, r]: r is k's
        # sources that duplicate an earlier source take its donor; rows duplicating a source its
        # label (slots are overwritten below, unlabelled rows never show a label)
        donor = donor[same[:, src].int().argmax(0)]
        relabel = same.any(0) & batch.labelled
        relabel[slot] = False
        rows = torch.cat([torch.nonzero(relabel).flatten(), slot])
        row_donor = torch.cat([donor[same[:, relabel].int().argmax(0)], donor])
        values, missing = batch.values.clone(), batch.missing.clone()
        values[slot], missing[slot] = batch.values[src], batch.missing[src]
        values[rows[:, None], j] = batch.values[row_donor[:, None], j]
        missing[rows[:, None], j] = batch.missing[row_donor[:, None], j]
        labelled_rows = batch.labelled.clone()
        labelled_rows[slot] = True
        revealed = torch.zeros(n, dtype=torch.bool, device=device)
        if batch.revealed is not None:
            revealed |= batch.revealed
        revealed[slot] = True
        queried = torch.zeros(n, dtype=torch.bool, device=device)
        queried[src] = True
        weights = None
        if batch.weights is not None:
            weights = batch.weights.clone()
            weights[slot] = batch.weights[src]
        return Batch(values, missing, labelled_rows, revealed, weights, queried)
