"""The inputs of the neural-process estimators: one task (``(m,)`` or ``(m, x_dim)``), a batch of
tasks ``(B, m, x_dim)`` with optional masks, or a list of per-task arrays of different lengths,
checked and made into padded tensors (:func:`validate_tasks`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from ..data.tasks import pad_sequences

ArrayLike = Any  # a torch tensor, a numpy array, nested lists of numbers, or a list of per-task
# arrays (each a numpy array or torch tensor, lengths may differ)


class Tasks(NamedTuple):
    """Validated model inputs: padded tensors on the device, masks (None = no padding)."""

    context_x: Tensor
    context_y: Tensor
    context_mask: Tensor | None
    target_x: Tensor
    target_y: Tensor | None
    target_mask: Tensor | None
    single: bool  # the caller passed one task (no batch axis)


def returns_numpy(*inputs: ArrayLike) -> bool:
    """Whether results go back as numpy: unless an input is a torch tensor (or a list of them)."""
    for value in inputs:
        if isinstance(value, Tensor):
            return False
        if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
            return False
    return True


def validate_tasks(
    context_x: ArrayLike,
    context_y: ArrayLike,
    target_x: ArrayLike,
    target_y: ArrayLike | None,
    context_mask: ArrayLike | None,
    target_mask: ArrayLike | None,
    *,
    x_dim: int,
    y_dim: int,
    device: torch.device | str,
) -> Tasks:
    """A neural process's inputs, checked (shapes, task counts, empty contexts, NaN or inf at real
    points: a ValueError naming the argument) and made into padded float32 tensors on ``device``.
    Padded points are zeroed; an all-True mask becomes None (attention's unmasked fast path)."""
    cx, cmask_pad, single_cx = _as_batch("context_x", context_x, x_dim)
    cy, _, single_cy = _as_batch("context_y", context_y, y_dim)
    tx, tmask_pad, single_tx = _as_batch("target_x", target_x, x_dim)
    arrays = {"context_x": cx, "context_y": cy, "target_x": tx}
    singles = {"context_x": single_cx, "context_y": single_cy, "target_x": single_tx}
    ty = None
    if target_y is not None:
        ty, _, singles["target_y"] = _as_batch("target_y", target_y, y_dim)
        arrays["target_y"] = ty
    if len(set(singles.values())) != 1:
        raise ValueError(f"mix of one task and batches of tasks: {singles} (True = one task)")
    single = single_cx
    n_tasks = {name: int(a.shape[0]) for name, a in arrays.items()}
    if len(set(n_tasks.values())) != 1:
        raise ValueError(f"inputs disagree on the number of tasks: {n_tasks}")
    if cx.shape[1] != cy.shape[1]:
        raise ValueError(f"context_x has {cx.shape[1]} points per task but context_y has {cy.shape[1]}")
    if ty is not None and tx.shape[1] != ty.shape[1]:
        raise ValueError(f"target_x has {tx.shape[1]} points per task but target_y has {ty.shape[1]}")
    if cx.shape[1] == 0:
        raise ValueError("the context is empty: a neural process needs at least one context point")
    if tx.shape[1] == 0:
        raise ValueError("there are no target points to predict")
    cmask = _merge_mask("context_mask", context_mask, cmask_pad, cx, single)
    tmask = _merge_mask("target_mask", target_mask, tmask_pad, tx, single)
    if cmask is not None:
        empty = (~cmask.any(dim=1)).nonzero().flatten().tolist()
        if empty:
            raise ValueError(f"task(s) {empty[:10]} have an empty context (context_mask all False)")
    for name, values, mask in (
        ("context_x", cx, cmask),
        ("context_y", cy, cmask),
        ("target_x", tx, tmask),
        ("target_y", ty, tmask),
    ):
        if values is None:
            continue
        bad = ~torch.isfinite(values).all(dim=-1)  # (B, k)
        if mask is not None:
            bad &= mask
        if bool(bad.any()):
            task, point = (int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{name} has {int(bad.sum())} point(s) with NaN or inf values "
                f"(first: task {task}, point {point}); remove or impute them"
            )
    # padded points are never attended to, but 0 * NaN is NaN: clear whatever they hold
    if cmask is not None:
        cx, cy = (t.masked_fill(~cmask[..., None], 0.0) for t in (cx, cy))
    if tmask is not None:
        tx = tx.masked_fill(~tmask[..., None], 0.0)
        ty = None if ty is None else ty.masked_fill(~tmask[..., None], 0.0)

    def put(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.to(device)

    # an all-True mask is the same as none, and lets attention take its unmasked fast path
    cmask = None if cmask is not None and bool(cmask.all()) else cmask
    tmask = None if tmask is not None and bool(tmask.all()) else tmask
    return Tasks(put(cx), put(cy), put(cmask), put(tx), put(ty), put(tmask), single)  # type: ignore[arg-type]


def check_samples(n_samples: int) -> None:
    if not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")


def _to_tensor(name: str, value: ArrayLike) -> Tensor:
    if isinstance(value, Tensor):
        tensor = value.detach()
    else:
        try:
            array = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name} could not be read as an array of numbers: {err}") from None
        # a read-only array (a pandas column's values, a memory map) is copied: a tensor that
        # shares its memory could be written to
        tensor = torch.as_tensor(array if array.flags.writeable else array.copy())
    if tensor.is_complex() or tensor.dtype == torch.bool:
        raise ValueError(f"{name} must hold real numbers, got dtype {tensor.dtype}")
    return tensor.to(torch.float32)


def _as_batch(name: str, value: ArrayLike, dim: int) -> tuple[Tensor, Tensor | None, bool]:
    """``value`` -> ``(B, k, dim)`` float32 (on the input's device), the padding mask of a ragged list
    input (else None), and whether it was a single task."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (Tensor, np.ndarray)) for v in value):
        # a list of per-task arrays (ragged): pad them into one batch
        items = [_to_tensor(f"{name}[{i}]", v) for i, v in enumerate(value)]
        for i, t in enumerate(items):
            if t.ndim not in (1, 2):
                raise ValueError(
                    f"{name}[{i}] must be (k,) or (k, dim) for one task, got shape {tuple(t.shape)}"
                )
        items = [t[:, None] if t.ndim == 1 else t for t in items]  # (k_i,) -> (k_i, 1)
        for t in items:
            _check_dim(name, t, dim)
        padded, mask = pad_sequences(items)
        return padded, (None if bool(mask.all()) else mask), False
    tensor = _to_tensor(name, value)
    if tensor.ndim == 1:
        tensor = tensor[None, :, None]  # (k,) -> (1, k, 1)
        _check_dim(name, tensor, dim)
        return tensor, None, True
    if tensor.ndim == 2:
        _check_dim(name, tensor, dim)
        return tensor[None], None, True
    if tensor.ndim == 3:
        _check_dim(name, tensor, dim)
        return tensor, None, False
    raise ValueError(
        f"{name} must be (k,) or (k, dim) for one task or (B, k, dim) for a batch,"
        f" got shape {tuple(tensor.shape)}"
    )


def _check_dim(name: str, tensor: Tensor, dim: int) -> None:
    if tensor.shape[-1] != dim:
        raise ValueError(
            f"{name} has {tensor.shape[-1]} value(s) per point (shape {tuple(tensor.shape)}) but the model "
            f"expects {dim}"
        )


def _merge_mask(
    name: str, given: ArrayLike | None, padding: Tensor | None, points: Tensor, single: bool
) -> Tensor | None:
    """Combine a user mask with the padding mask of a ragged list input; check it fits ``points``
    ``(B, k, dim)`` and put it on their device."""
    if given is None:
        return padding
    shape = tuple(points.shape[:2])
    mask = given.detach() if isinstance(given, Tensor) else torch.as_tensor(np.asarray(given))
    mask = mask.to(points.device)
    if mask.dtype != torch.bool:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"{name} must be boolean (True = real point)")
        mask = mask.bool()
    if single and mask.ndim == 1:
        mask = mask[None]
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(mask.shape)} but the points have shape {tuple(shape)}")
    return mask if padding is None else mask & padding
