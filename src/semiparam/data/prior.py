"""A prior over tables: synthetic classification and regression tasks for meta-training an NPT
that predicts in context (issue 51, the prior-fitted NPT).

Written here from the published descriptions of the priors of the prior-fitted networks (Müller et
al. 2022, Hollmann et al. 2023/2025: structural causal models with random graphs and
nonlinearities, and tree-based generators), not from their code. Each :meth:`TablePrior.sample`
draws one task:

- **random causal network** (most tasks): a few root causes drawn from a per-task distribution
  flow through 1-4 random sparse layers with random nonlinearities (tanh, ReLU, sine, absolute
  value, sigmoid, square, identity) and Gaussian noise at every node; the features and the target
  are nodes picked at random among all of the network's nodes, so that some features cause the
  target, some are its effects and some are unrelated (a random graph, as an SCM);
- **random trees**: features of random marginals (normal, uniform, log-normal, small integers) and
  a target that is the sum of 1-4 random axis-aligned trees of depth 1-5 (piecewise-constant, with
  interactions, as gradient boosting sees the world), plus noise.

Then: a classification task cuts the target at random quantiles into 2 to ``max_classes`` classes
(numbered in a random order); some tasks turn features into categories (cut at random quantiles,
codes in a random order); some hide a random share of feature cells (missing completely at
random). Rows are split into training rows (the context) and query rows at a random fraction.

:func:`encode_task` turns a task (or a user's table, through the same function) into the model's
inputs: each feature mapped through the normal quantiles of its training rows' values (as the
quantile transform of the table models; ties share a rank), placed at a position of the model's
``n_features`` slots (unused slots are hidden cells), and the target in one of the two target slots
(class or value, the value standardised on the training rows); query rows' targets are hidden.

The prior's random state is one numpy generator (:meth:`TablePrior.state_dict`), so a pretraining
run resumes its stream of tasks exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtri

from .._config import ConfigError, FrozenConfig

__all__ = ["PriorConfig", "PriorTask", "TablePrior", "encode_task", "normal_scores"]

_ACTIVATIONS = (
    np.tanh,
    lambda x: np.maximum(x, 0.0),
    np.sin,
    np.abs,
    lambda x: 1.0 / (1.0 + np.exp(-x)),
    lambda x: np.clip(x, -3, 3) ** 2,
    lambda x: x,
)


@dataclass(frozen=True)
class PriorConfig(FrozenConfig):
    """What tasks the prior draws: rows, features, classes, and the shares of each kind."""

    min_rows: int = 32
    max_rows: int = 256
    max_features: int = 16
    max_classes: int = 10
    p_regression: float = 0.3  # share of regression tasks (the rest: classification)
    p_trees: float = 0.3  # share of tasks from random trees (the rest: random causal networks)
    p_categorical: float = 0.3  # share of tasks with some categorical features
    p_missing: float = 0.2  # share of tasks with missing feature cells
    max_missing: float = 0.3  # the largest share of feature cells hidden in such a task
    min_train_fraction: float = 0.5
    max_train_fraction: float = 0.9

    def validate(self) -> None:
        if not 8 <= self.min_rows <= self.max_rows:
            raise ConfigError(f"need 8 <= min_rows <= max_rows, got {self.min_rows}, {self.max_rows}")
        if self.max_features < 1:
            raise ConfigError(f"max_features must be >= 1, got {self.max_features}")
        if self.max_classes < 2:
            raise ConfigError(f"max_classes must be >= 2, got {self.max_classes}")
        for name in ("p_regression", "p_trees", "p_categorical", "p_missing", "max_missing"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.min_train_fraction <= self.max_train_fraction < 1.0:
            raise ConfigError("need 0 < min_train_fraction <= max_train_fraction < 1")


@dataclass
class PriorTask:
    """One synthetic table: ``X`` (n, f) floats with NaN for missing cells (a categorical feature
    holds its category codes), ``y`` (n,) (class ids for classification), ``categorical`` (f,)
    bool, ``n_classes`` (0 for regression), and the first ``n_train`` rows are the training rows."""

    X: np.ndarray
    y: np.ndarray
    categorical: np.ndarray
    n_classes: int
    n_train: int

    @property
    def is_classification(self) -> bool:
        return self.n_classes > 0


class TablePrior:
    """Seeded source of :class:`PriorTask` (see the module docstring)."""

    def __init__(self, config: PriorConfig | None = None, seed: int = 0) -> None:
        self.config = config or PriorConfig()
        self.rng = np.random.default_rng(seed)

    def sample(self) -> PriorTask:
        c, rng = self.config, self.rng
        while True:  # a draw whose classes cannot be learned from its training rows is redrawn
            n = int(rng.integers(c.min_rows, c.max_rows + 1))
            f = int(rng.integers(1, c.max_features + 1))
            X, z = self._trees(n, f) if rng.random() < c.p_trees else self._network(n, f)
            task = self._finish(X, z)
            if task is not None:
                return task

    # -- generators -------------------------------------------------------------------------------
    def _network(self, n: int, f: int) -> tuple[np.ndarray, np.ndarray]:
        """A random causal network; returns (features (n, f), target (n,))."""
        rng = self.rng
        n_causes = int(rng.integers(1, max(2, f) + 1))
        kind = rng.integers(3)
        if kind == 0:
            h = rng.normal(size=(n, n_causes))
        elif kind == 1:
            h = rng.uniform(-1.7, 1.7, size=(n, n_causes))
        else:  # a mixture: clusters of rows
            centres = rng.normal(scale=2.0, size=(int(rng.integers(2, 6)), n_causes))
            h = centres[rng.integers(len(centres), size=n)] + rng.normal(scale=0.5, size=(n, n_causes))
        nodes = [h]
        noise = float(np.exp(rng.uniform(np.log(1e-3), np.log(0.3))))
        for _ in range(int(rng.integers(1, 5))):
            width = int(rng.integers(max(2, f // 2), 2 * f + 8))
            w = rng.normal(size=(h.shape[1], width)) / np.sqrt(h.shape[1])
            w *= rng.random(size=w.shape) < rng.uniform(0.3, 1.0)  # sparse edges: a random graph
            act = _ACTIVATIONS[int(rng.integers(len(_ACTIVATIONS)))]
            h = act(h @ (w * rng.uniform(0.5, 2.0)) + rng.normal(scale=0.5, size=width))
            h = h + rng.normal(scale=noise, size=h.shape)
            h = _standardise(h)
            nodes.append(h)
        every = np.concatenate(nodes[1:], axis=1)
        picked = rng.choice(every.shape[1], size=min(f + 1, every.shape[1]), replace=False)
        target = every[:, picked[0]]
        rest = picked[1:]
        if len(rest) < f:  # a narrow network: the remaining features are causes or noise
            extra = np.concatenate([nodes[0], rng.normal(size=(n, f))], axis=1)
            fill = extra[:, rng.choice(extra.shape[1], size=f - len(rest), replace=False)]
            X = np.concatenate([every[:, rest], fill], axis=1)
        else:
            X = every[:, rest]
        return X, target

    def _trees(self, n: int, f: int) -> tuple[np.ndarray, np.ndarray]:
        """Features of random marginals and a target summed from random trees."""
        rng = self.rng
        columns = []
        for _ in range(f):
            kind = rng.integers(4)
            if kind == 0:
                columns.append(rng.normal(size=n))
            elif kind == 1:
                columns.append(rng.uniform(size=n))
            elif kind == 2:
                columns.append(rng.lognormal(sigma=rng.uniform(0.3, 1.5), size=n))
            else:
                columns.append(rng.integers(0, int(rng.integers(2, 12)), size=n).astype(np.float64))
        X = np.stack(columns, axis=1)
        z = np.zeros(n)
        for _ in range(int(rng.integers(1, 5))):
            depth = int(rng.integers(1, 6))
            n_internal = 2**depth - 1
            feature = rng.integers(f, size=n_internal)
            threshold = X[rng.integers(n, size=n_internal), feature]
            leaves = rng.normal(size=2**depth)
            node = np.zeros(n, dtype=np.int64)
            for _ in range(depth):
                right = X[np.arange(n), feature[node]] > threshold[node]
                node = 2 * node + 1 + right
            z += leaves[node - n_internal]
        z += rng.normal(scale=float(np.exp(rng.uniform(np.log(1e-3), np.log(0.3)))), size=n)
        return X, z

    # -- target, categories, missing cells, split ---------------------------------------------------
    def _finish(self, X: np.ndarray, z: np.ndarray) -> PriorTask | None:
        c, rng = self.config, self.rng
        n, f = X.shape
        n_classes = 0
        if rng.random() >= c.p_regression:
            k = int(rng.integers(2, c.max_classes + 1))
            cuts = np.quantile(z, np.sort(rng.uniform(0.0, 1.0, size=k - 1)))
            y = rng.permutation(k)[np.searchsorted(cuts, z)].astype(np.float64)
            n_classes = k
        else:
            y = z.astype(np.float64)
        categorical = np.zeros(f, dtype=bool)
        if rng.random() < c.p_categorical:
            categorical = rng.random(f) < rng.uniform(0.2, 1.0)
            for j in np.flatnonzero(categorical):
                k = int(rng.integers(2, 9))
                cuts = np.quantile(X[:, j], np.sort(rng.uniform(0.0, 1.0, size=k - 1)))
                X[:, j] = rng.permutation(k)[np.searchsorted(cuts, X[:, j])]
        if rng.random() < c.p_missing:
            X = np.where(rng.random(X.shape) < rng.uniform(0.0, c.max_missing), np.nan, X)
        order = rng.permutation(n)
        X, y = X[order], y[order]
        n_train = int(round(n * rng.uniform(c.min_train_fraction, c.max_train_fraction)))
        n_train = min(max(n_train, 2), n - 1)
        if n_classes:
            seen = np.unique(y[:n_train])
            if len(seen) < 2:
                return None
            # query rows of a class absent from the training rows cannot be predicted: dropped;
            # classes renumbered 0..k-1 in order of their random numbering
            keep = np.concatenate([np.ones(n_train, dtype=bool), np.isin(y[n_train:], seen)])
            X, y = X[keep], np.searchsorted(seen, y[keep]).astype(np.float64)
            n_classes = len(seen)
            if len(y) == n_train:
                return None
        return PriorTask(X, y, categorical, n_classes, n_train)

    def state_dict(self) -> dict[str, Any]:
        return {"bit_generator": json.dumps(self.rng.bit_generator.state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = json.loads(state["bit_generator"])


def _standardise(h: np.ndarray) -> np.ndarray:
    h = np.nan_to_num(h, nan=0.0, posinf=0.0, neginf=0.0)
    return (h - h.mean(axis=0)) / (h.std(axis=0) + 1e-6)


def normal_scores(train: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` mapped through the empirical distribution of ``train`` (NaN ignored) and then the
    standard normal's quantiles: the mid-rank of a value among the training values (ties share a
    rank), as a share of them, clipped away from 0 and 1. NaN stays NaN; all-NaN ``train``: NaN."""
    seen = np.sort(train[~np.isnan(train)])
    out = np.full(values.shape, np.nan)
    ok = ~np.isnan(values)
    if not len(seen) or not ok.any():
        return out
    v = values[ok]
    below = np.searchsorted(seen, v, side="left")
    at_most = np.searchsorted(seen, v, side="right")
    share = (below + at_most) / (2.0 * len(seen))
    eps = 0.5 / len(seen)
    out[ok] = ndtri(np.clip(share, eps, 1.0 - eps))
    return out


def encode_task(
    X: np.ndarray,
    y: np.ndarray,
    n_train: int,
    n_classes: int,
    n_features: int,
    positions: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The model's inputs for a table whose first ``n_train`` rows are training rows: ``values``
    (n, n_features + 2) float32 and ``hidden`` (n, n_features + 2) bool. Column ``positions[j]``
    holds feature j (default: the first slots); slot ``n_features`` the class id
    (classification), slot ``n_features + 1`` the target standardised on the training rows
    (regression); query rows' targets, unused slots and missing cells are hidden."""
    n, f = X.shape
    if f > n_features:
        raise ValueError(f"{f} features do not fit the model's {n_features} feature slots")
    if positions is None:
        positions = np.arange(f)
    d = n_features + 2
    values = np.zeros((n, d), dtype=np.float32)
    hidden = np.ones((n, d), dtype=bool)
    for j in range(f):
        scores = normal_scores(X[:n_train, j], X[:, j])
        seen = ~np.isnan(scores)
        values[seen, positions[j]] = scores[seen]
        hidden[seen, positions[j]] = False
    slot = n_features if n_classes else n_features + 1
    target = y[:n_train].astype(np.float64)
    if not n_classes:
        target = (target - target.mean()) / (target.std() + 1e-8)
    values[:n_train, slot] = target
    hidden[:n_train, slot] = False
    return values, hidden
