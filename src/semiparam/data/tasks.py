"""Batches of regression tasks for neural processes, padded to a rectangle, and their storage.

A *task* is a context set ``(x_c, y_c)`` of m points and a target set ``(x_t, y_t)`` of n points.
A batch of B tasks whose sizes differ is padded to the largest m and n; boolean masks say which
positions are real (``True``) and which are padding (``False``). Padding never changes a
prediction: every model masks padded context points out of its attention and pooling.

Fixed evaluation sets are written as one safetensors file (tensors of every batch) plus a JSON
side file (how they were drawn), so that every model is scored on exactly the same tasks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

_TENSOR_FIELDS = ("context_x", "context_y", "target_x", "target_y", "context_mask", "target_mask")


@dataclass(frozen=True)
class TaskBatch:
    """B padded regression tasks.

    Shapes: ``context_x (B, m, x_dim)``, ``context_y (B, m, y_dim)``, ``context_mask (B, m)``;
    ``target_x (B, n, x_dim)``, ``target_y (B, n, y_dim)``, ``target_mask (B, n)``. Masks are bool,
    True at real points. Padded positions hold zeros.
    """

    context_x: Tensor
    context_y: Tensor
    target_x: Tensor
    target_y: Tensor
    context_mask: Tensor
    target_mask: Tensor
    # per-task parameters of the generating process (e.g. GP lengthscales), each (B,); None if unknown
    params: dict[str, Tensor] | None = None

    @property
    def n_tasks(self) -> int:
        return int(self.context_x.shape[0])

    @property
    def is_padded(self) -> bool:
        """True when some task is shorter than the padded width."""
        return not (bool(self.context_mask.all()) and bool(self.target_mask.all()))

    def to(self, device: str | torch.device) -> TaskBatch:
        params = None if self.params is None else {k: v.to(device) for k, v in self.params.items()}
        return TaskBatch(**{name: getattr(self, name).to(device) for name in _TENSOR_FIELDS}, params=params)

    def task(self, index: int) -> dict[str, Tensor]:
        """The unpadded arrays of task ``index``: ``context_x (m_i, x_dim)`` and so on."""
        if not -self.n_tasks <= index < self.n_tasks:
            raise IndexError(f"task index {index} out of range for a batch of {self.n_tasks} tasks")
        cmask, tmask = self.context_mask[index], self.target_mask[index]
        return {
            "context_x": self.context_x[index][cmask],
            "context_y": self.context_y[index][cmask],
            "target_x": self.target_x[index][tmask],
            "target_y": self.target_y[index][tmask],
        }

    @classmethod
    def from_tasks(cls, tasks: Sequence[dict[str, Tensor]]) -> TaskBatch:
        """Pad a list of unpadded tasks (dicts with the four arrays) into one batch."""
        if not tasks:
            raise ValueError("cannot build a TaskBatch from an empty list of tasks")
        cx, cmask = pad_sequences([t["context_x"] for t in tasks])
        cy, _ = pad_sequences([t["context_y"] for t in tasks])
        tx, tmask = pad_sequences([t["target_x"] for t in tasks])
        ty, _ = pad_sequences([t["target_y"] for t in tasks])
        return cls(cx, cy, tx, ty, cmask, tmask)


def pad_sequences(items: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Stack ``(n_i, d)`` tensors into ``(B, max n_i, d)`` with zeros, plus a ``(B, max n_i)`` mask."""
    if not items:
        raise ValueError("nothing to pad: the list is empty")
    widths = {tuple(t.shape[1:]) for t in items}
    if len(widths) != 1:
        raise ValueError(f"all items must share their trailing shape, got {sorted(widths)}")
    longest = max(int(t.shape[0]) for t in items)
    first = items[0]
    out = first.new_zeros((len(items), longest, *first.shape[1:]))
    mask = torch.zeros(len(items), longest, dtype=torch.bool, device=first.device)
    for i, t in enumerate(items):
        out[i, : t.shape[0]] = t
        mask[i, : t.shape[0]] = True
    return out, mask


def save_task_batches(path: str | Path, batches: Sequence[TaskBatch], metadata: dict[str, Any]) -> Path:
    """Write ``batches`` to ``path`` (a ``.safetensors`` file) and ``metadata`` to ``path.json``."""
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(f"task batches are stored as .safetensors, got {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Tensor] = {}
    for i, batch in enumerate(batches):
        for name in _TENSOR_FIELDS:
            tensors[f"{i:06d}.{name}"] = getattr(batch, name).detach().cpu().contiguous()
        for name, value in (batch.params or {}).items():
            tensors[f"{i:06d}.params.{name}"] = value.detach().cpu().contiguous()
    save_file(tensors, str(path))
    meta = {"n_batches": len(batches), **metadata}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2))
    return path


def load_task_batches(
    path: str | Path, *, device: str | torch.device = "cpu"
) -> tuple[list[TaskBatch], dict[str, Any]]:
    """Read what :func:`save_task_batches` wrote: the batches (in order) and the metadata."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no task batches at {path}")
    tensors = load_file(str(path), device=str(device))
    meta_file = path.with_suffix(".json")
    metadata = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    n_batches = len({key.split(".")[0] for key in tensors})
    batches = []
    for i in range(n_batches):
        prefix = f"{i:06d}.params."
        params = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        batches.append(
            TaskBatch(**{name: tensors[f"{i:06d}.{name}"] for name in _TENSOR_FIELDS}, params=params or None)
        )
    return batches, metadata
