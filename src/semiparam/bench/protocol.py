"""The papers' evaluation protocol: splits, metrics and average ranks (spec-npt sections 4.2, 5.1).

Splits [spec-npt 4.2, reference code ``cv_utils.py``]:

- ``cv``: 10-fold cross-validation, 0.7/0.2/0.1 train/val/test. Test folds come from ``KFold`` or,
  for a classification target, ``StratifiedKFold`` (shuffle, seed 42); validation is carved from
  the remaining rows with fraction val / (1 - test), stratified for classification.
- ``holdout``: one 0.7/0.1/0.2 split (larger datasets without a fixed test set).
- ``fixed``: the dataset's official test set; validation carved from its training part so that it
  is 10% of all rows. Without an official split it falls back to ``holdout``.

Reductions for small machines (fewer folds, row caps) are applied *after* the paper's split, so
the rows that remain are a seeded, class-stratified subset of the paper's rows for each part.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.metrics import log_loss, mean_absolute_error, mean_squared_error, roc_auc_score
from sklearn.model_selection import KFold, StratifiedKFold, train_test_split

from ..data.datasets import Dataset

PRIMARY_METRIC = {"binary": "auroc", "multiclass": "accuracy", "regression": "rmse"}
HIGHER_IS_BETTER = {
    "auroc": True,
    "accuracy": True,
    "nll": False,
    "ece": False,
    "rmse": False,
    "mse": False,
    "mae": False,
}


@dataclass(frozen=True)
class Fold:
    """Row positions (into ``dataset.frame``) of one train/val/test split."""

    index: int
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


def _strata(dataset: Dataset) -> np.ndarray | None:
    if dataset.task == "regression":
        return None
    return dataset.y.astype(str).to_numpy()


def _carve_val(
    rest: np.ndarray, strata: np.ndarray | None, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) from the non-test rows ``rest``: ``fraction`` of them to validation."""
    stratify = strata[rest] if strata is not None else None
    if stratify is not None and np.min(np.unique(stratify, return_counts=True)[1]) < 2:
        stratify = None  # a class with one row cannot be stratified
    train, val = train_test_split(rest, test_size=fraction, random_state=seed, stratify=stratify)
    return np.sort(train), np.sort(val)


def cv_folds(dataset: Dataset, *, n_folds: int = 10, val_fraction: float = 0.2, seed: int = 42) -> list[Fold]:
    """The paper's k-fold cross-validation with a validation set carved from each training part."""
    if n_folds < 2:
        raise ValueError(f"n_folds must be >= 2, got {n_folds}")
    test_fraction = 1.0 / n_folds
    if not 0 < val_fraction < 1 - test_fraction:
        raise ValueError(f"val_fraction must be in (0, {1 - test_fraction:.2f}), got {val_fraction}")
    n = len(dataset.frame)
    strata = _strata(dataset)
    splitter = (
        StratifiedKFold(n_folds, shuffle=True, random_state=seed)
        if strata is not None
        else KFold(n_folds, shuffle=True, random_state=seed)
    )
    folds = []
    for k, (rest, test) in enumerate(splitter.split(np.zeros(n), strata)):
        train, val = _carve_val(rest, strata, val_fraction / (1 - test_fraction), seed)
        folds.append(Fold(k, train, val, np.sort(test)))
    return folds


def holdout_split(
    dataset: Dataset, *, val_fraction: float = 0.1, test_fraction: float = 0.2, seed: int = 42
) -> Fold:
    """One stratified train/val/test split (paper: 0.7/0.1/0.2)."""
    if not (0 < test_fraction < 1 and 0 < val_fraction < 1 - test_fraction):
        raise ValueError(f"bad fractions val={val_fraction}, test={test_fraction}")
    n = len(dataset.frame)
    strata = _strata(dataset)
    idx = np.arange(n)
    rest, test = train_test_split(
        idx, test_size=test_fraction, random_state=seed, stratify=strata if strata is not None else None
    )
    train, val = _carve_val(rest, strata, val_fraction / (1 - test_fraction), seed)
    return Fold(0, train, val, np.sort(test))


def fixed_split(dataset: Dataset, *, val_fraction: float = 0.1, seed: int = 42) -> Fold:
    """The official test set, validation carved from its training rows (``val_fraction`` of all
    rows). Falls back to :func:`holdout_split` when the dataset has no official split."""
    if "official" not in dataset.splits:
        return holdout_split(dataset, val_fraction=val_fraction, seed=seed)
    split = dataset.splits["official"]
    fraction = min(0.5, val_fraction * len(dataset.frame) / len(split.train))
    train, val = _carve_val(split.train, _strata(dataset), fraction, seed)
    return Fold(0, train, val, np.sort(split.test))


def paper_folds(dataset: Dataset, *, seed: int = 42) -> tuple[str, list[Fold]]:
    """The protocol the papers use for ``dataset`` and its folds: ``("cv", 10 folds)``,
    ``("holdout", [fold])`` or ``("fixed", [fold])`` (``holdout`` when no official test set)."""
    protocol = dataset.info.protocol
    if protocol == "cv":
        return "cv", cv_folds(dataset, seed=seed)
    if protocol == "fixed" and "official" in dataset.splits:
        return "fixed", [fixed_split(dataset, seed=seed)]
    return "holdout", [holdout_split(dataset, seed=seed)]


def stratified_subset(idx: np.ndarray, strata: np.ndarray | None, cap: int | None, seed: int) -> np.ndarray:
    """At most ``cap`` of the rows ``idx``: evenly spaced picks from a seeded permutation sorted by
    class, so every class keeps its share (a class with a share of at least 1/cap stays in)."""
    if cap is None or len(idx) <= cap:
        return idx
    if cap < 1:
        raise ValueError(f"row cap must be >= 1, got {cap}")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(idx))
    if strata is not None:
        perm = perm[np.argsort(strata[idx[perm]], kind="stable")]
    picks = np.floor((np.arange(cap) + rng.uniform()) * len(idx) / cap).astype(np.int64)
    return np.sort(idx[perm[np.clip(picks, 0, len(idx) - 1)]])


def reduce_fold(
    dataset: Dataset,
    fold: Fold,
    *,
    max_train: int | None,
    max_val: int | None,
    max_test: int | None,
    seed: int = 42,
) -> Fold:
    """Cap each part of ``fold`` (class-stratified, seeded)."""
    strata = _strata(dataset)
    return Fold(
        fold.index,
        stratified_subset(fold.train, strata, max_train, seed),
        stratified_subset(fold.val, strata, max_val, seed + 1),
        stratified_subset(fold.test, strata, max_test, seed + 2),
    )


# -- metrics --------------------------------------------------------------------------------------


def score_predictions(
    task: str, y_true: np.ndarray, prediction: np.ndarray, classes: Sequence[object] | None = None
) -> dict[str, float]:
    """Test metrics of one fold. ``prediction``: values (regression) or class probabilities
    ``(n, n_classes)`` in the order of ``classes``."""
    if task == "regression":
        y = np.asarray(y_true, dtype=np.float64)
        pred = np.asarray(prediction, dtype=np.float64)
        if pred.shape != y.shape:
            raise ValueError(f"prediction shape {pred.shape} does not match targets {y.shape}")
        mse = float(mean_squared_error(y, pred))
        return {"rmse": math.sqrt(mse), "mse": mse, "mae": float(mean_absolute_error(y, pred))}
    if classes is None:
        raise ValueError("classification scores need the class order of the probability columns")
    proba = np.asarray(prediction, dtype=np.float64)
    labels = list(classes)
    if proba.ndim != 2 or proba.shape != (len(y_true), len(labels)):
        raise ValueError(f"probabilities have shape {proba.shape}, expected ({len(y_true)}, {len(labels)})")
    y = np.asarray(y_true, dtype=object)
    unseen = sorted(set(y.astype(str).tolist()) - {str(c) for c in labels})
    if unseen:  # a class no training row had (rare classes after row caps): it got no mass
        labels = labels + unseen
        proba = np.hstack([proba, np.zeros((len(proba), len(unseen)))])
    proba = np.clip(proba, 1e-15, 1.0)
    proba = proba / proba.sum(axis=1, keepdims=True)
    predicted = np.asarray(labels, dtype=object)[proba.argmax(axis=1)]
    correct = predicted.astype(str) == y.astype(str)
    out = {
        "accuracy": float(correct.mean()),
        "nll": float(log_loss([str(v) for v in y], proba, labels=[str(c) for c in labels])),
        "ece": expected_calibration_error(proba.max(axis=1), correct),
    }
    if task == "binary":
        positive = (y.astype(str) == str(labels[1])).astype(int)
        out["auroc"] = (
            float(roc_auc_score(positive, proba[:, 1])) if 0 < positive.sum() < len(y) else float("nan")
        )
    return out


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 15) -> float:
    """Top-label expected calibration error (Guo et al. 2017): rows binned by the probability of
    their predicted class into ``n_bins`` equal-width bins on [0, 1]; the mean over rows of
    |accuracy - mean confidence| of their bin. 0 = the stated probabilities match the hit rate."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if confidence.shape != correct.shape or confidence.ndim != 1 or not len(confidence):
        raise ValueError("confidence and correct must be 1-D arrays of the same, non-zero length")
    bins = np.minimum((confidence * n_bins).astype(np.int64), n_bins - 1)
    count = np.bincount(bins, minlength=n_bins)
    gap = np.bincount(bins, weights=correct - confidence, minlength=n_bins)
    return float(np.abs(gap).sum() / count.sum())


def mean_se(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and standard error (sample std / sqrt(k)); s.e. is None for a single value."""
    arr = np.asarray([v for v in values if v is not None and not np.isnan(v)], dtype=np.float64)
    if arr.size == 0:
        return float("nan"), None
    if arr.size == 1:
        return float(arr[0]), None
    return float(arr.mean()), float(arr.std(ddof=1) / math.sqrt(arr.size))


def average_ranks(
    table: Mapping[str, Mapping[str, float | None]],
    *,
    higher_is_better: bool,
    methods: Sequence[str] | None = None,
) -> dict[str, tuple[float, float | None]]:
    """Average rank ± s.e. over datasets, as paper Table 1: within each dataset rank the methods
    (1 = best, ties share the mean rank, a missing entry ranks last), then mean and
    sample std / sqrt(#datasets). ``table[dataset][method] = value``."""
    from scipy.stats import rankdata

    names = list(methods) if methods is not None else sorted({m for row in table.values() for m in row})
    per_method: dict[str, list[float]] = {m: [] for m in names}
    for row in table.values():
        present = [m for m in names if row.get(m) is not None and not np.isnan(row[m])]  # type: ignore[arg-type]
        if not present:
            continue
        values = np.array([row[m] for m in present], dtype=np.float64)
        ranks = rankdata(-values if higher_is_better else values, method="average")
        for m, r in zip(present, ranks, strict=True):
            per_method[m].append(float(r))
        for m in names:
            if m not in present:
                per_method[m].append(float(len(names)))  # missing entry: last rank (paper: k-NN on Higgs)
    return {m: mean_se(r) for m, r in per_method.items() if r}
