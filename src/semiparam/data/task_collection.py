"""A user's own tasks as a task sampler: :class:`TaskCollection`.

A neural process meta-learns from many related tasks. Beside the synthetic GP sampler, a user has
tasks of their own: many short series (one per sensor, patient, product...), each a set of points
``x -> y``. A collection holds them, and every batch it hands out draws tasks at random and splits
each task's points at random into a context (what the model conditions on) and targets (what it is
scored on), as the GP sampler does for its functions::

    tasks = TaskCollection([(t1, y1), (t2, y2), ...], min_ctx=3, random_state=0)
    tasks = TaskCollection.from_frame(df, task="series", x="time", y="value")
    CIPNP(random_state=0).fit(tasks, max_steps=2000)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from .tasks import TaskBatch, pad_sequences


def _points(name: str, value: Any) -> np.ndarray:
    """``(k,)`` or ``(k, dim)`` numbers -> ``(k, dim)`` float32, finite."""
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} could not be read as numbers: {err}") from None
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise ValueError(f"{name} must be (k,) or (k, dim), got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} holds NaN or inf values; remove or impute them")
    return array


class TaskCollection:
    """Tasks ``[(x, y), ...]`` (each ``x (k,)`` or ``(k, x_dim)``, ``y (k,)`` or ``(k, y_dim)``,
    k >= 2 points) handed out as :class:`TaskBatch` es. Each task of a batch keeps a random
    ``m`` of its points as context, ``min_ctx <= m <= max_ctx`` (at most all but one point), and
    up to ``max_tgt`` of the others as targets. ``names``: a label per task (``from_frame`` uses
    the task ids)."""

    def __init__(
        self,
        tasks: Sequence[tuple[Any, Any]],
        *,
        min_ctx: int = 3,
        max_ctx: int | None = None,
        max_tgt: int | None = None,
        names: Sequence[Any] | None = None,
        random_state: int | None = None,
    ) -> None:
        if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence) or len(tasks) == 0:
            raise ValueError("tasks must be a non-empty list of (x, y) pairs")
        self.names = list(names) if names is not None else list(range(len(tasks)))
        if len(self.names) != len(tasks):
            raise ValueError(f"{len(self.names)} names for {len(tasks)} tasks")
        self.x: list[np.ndarray] = []
        self.y: list[np.ndarray] = []
        for i, task in enumerate(tasks):
            if not isinstance(task, (tuple, list)) or len(task) != 2:
                raise ValueError(f"task {self.names[i]!r} must be an (x, y) pair, got {type(task).__name__}")
            x, y = (
                _points(f"x of task {self.names[i]!r}", task[0]),
                _points(f"y of task {self.names[i]!r}", task[1]),
            )
            if len(x) != len(y):
                raise ValueError(f"task {self.names[i]!r}: {len(x)} x values but {len(y)} y values")
            if len(x) < 2:
                raise ValueError(f"task {self.names[i]!r} has {len(x)} point(s); a task needs at least 2")
            self.x.append(x)
            self.y.append(y)
        x_dims, y_dims = {a.shape[1] for a in self.x}, {a.shape[1] for a in self.y}
        if len(x_dims) != 1 or len(y_dims) != 1:
            raise ValueError(f"tasks disagree on their dimensions: x {sorted(x_dims)}, y {sorted(y_dims)}")
        self.x_dim, self.y_dim = x_dims.pop(), y_dims.pop()
        longest = max(len(a) for a in self.x)
        if min_ctx < 1:
            raise ValueError(f"min_ctx must be >= 1, got {min_ctx}")
        self.min_ctx = int(min_ctx)
        self.max_ctx = int(max_ctx) if max_ctx is not None else longest - 1
        if self.max_ctx < self.min_ctx:
            raise ValueError(f"max_ctx ({self.max_ctx}) is below min_ctx ({self.min_ctx})")
        if max_tgt is not None and max_tgt < 1:
            raise ValueError(f"max_tgt must be >= 1, got {max_tgt}")
        self.max_tgt = max_tgt
        self.rng = np.random.default_rng(random_state)

    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        *,
        task: str,
        x: str | Sequence[str],
        y: str | Sequence[str],
        **options: Any,
    ) -> TaskCollection:
        """One task per value of column ``task``; ``x`` and ``y`` name its input and output
        column(s). Rows keep their order within a task. ``options``: as for the constructor."""
        x_cols = [x] if isinstance(x, str) else list(x)
        y_cols = [y] if isinstance(y, str) else list(y)
        missing = [c for c in [task, *x_cols, *y_cols] if c not in frame.columns]
        if missing:
            raise KeyError(f"column(s) {missing} not in the table (columns: {list(frame.columns)})")
        groups = list(frame.groupby(task, sort=True))
        tasks = [(part[x_cols].to_numpy(), part[y_cols].to_numpy()) for _, part in groups]
        return cls(tasks, names=[name for name, _ in groups], **options)

    def __len__(self) -> int:
        return len(self.x)

    def state_dict(self) -> dict[str, Any]:
        """The random state of the draws, so a resumed training run draws the same tasks."""
        return {"bit_generator": json.dumps(self.rng.bit_generator.state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = json.loads(state["bit_generator"])

    def sample(self, batch_size: int) -> TaskBatch:
        """``batch_size`` tasks drawn at random (with replacement), each split at random into
        context and target points."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        parts: dict[str, list[torch.Tensor]] = {"cx": [], "cy": [], "tx": [], "ty": []}
        for index in self.rng.integers(len(self.x), size=batch_size):
            x, y = self.x[index], self.y[index]
            k = len(x)
            high = min(self.max_ctx, k - 1)
            m = int(self.rng.integers(min(self.min_ctx, high), high + 1))
            order = self.rng.permutation(k)
            ctx, tgt = order[:m], order[m:]
            if self.max_tgt is not None:
                tgt = tgt[: self.max_tgt]
            parts["cx"].append(torch.from_numpy(x[ctx]))
            parts["cy"].append(torch.from_numpy(y[ctx]))
            parts["tx"].append(torch.from_numpy(x[tgt]))
            parts["ty"].append(torch.from_numpy(y[tgt]))
        (cx, cmask), (cy, _) = pad_sequences(parts["cx"]), pad_sequences(parts["cy"])
        (tx, tmask), (ty, _) = pad_sequences(parts["tx"]), pad_sequences(parts["ty"])
        return TaskBatch(cx, cy, tx, ty, cmask, tmask)

    def __repr__(self) -> str:
        sizes = [len(a) for a in self.x]
        return (
            f"TaskCollection({len(self)} tasks of {min(sizes)}-{max(sizes)} points, x_dim={self.x_dim}, "
            f"y_dim={self.y_dim}, context {self.min_ctx}-{self.max_ctx})"
        )


__all__ = ["TaskCollection"]
