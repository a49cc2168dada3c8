"""Where a model trains and predicts, and in which precision.

``device="auto"`` (the default of every estimator and command) picks CUDA when PyTorch sees a GPU,
then Apple's MPS, else the CPU. On CUDA training runs its forward pass under bf16 autocast by
default (``TrainConfig.mixed_precision``); predictions run in float64 on the CPU, where that makes
a row's prediction independent of its batch mates to ~1e-12, and in float32 on a GPU, where
float64 arithmetic is many times slower (``TrainConfig.predict_dtype``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

AUTO = "auto"


def mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(device: str | torch.device = AUTO) -> torch.device:
    """``"auto"``: ``cuda`` when available, then ``mps``, else ``cpu``; any other name as given,
    with a clear error when this machine lacks it."""
    if isinstance(device, str) and device == AUTO:
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if mps_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda', 'cuda:1', 'mps', ...; got {device!r}"
        ) from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available (device='auto' picks one)")
    if dev.type == "mps" and not mps_available():
        raise ValueError(f"device {device!r} requested but MPS is not available (device='auto' picks one)")
    return dev


def autocast_dtype(device: torch.device, mixed_precision: str) -> torch.dtype | None:
    """The autocast dtype of training's forward pass: ``"auto"`` is bf16 on CUDA and none
    elsewhere (a CPU's bf16 matrix products are rarely faster than float32), ``"bf16"`` bf16 on
    any device, ``"off"`` none."""
    if mixed_precision == "off":
        return None
    if mixed_precision == "bf16" or (mixed_precision == AUTO and device.type == "cuda"):
        return torch.bfloat16
    return None


@contextlib.contextmanager
def autocast(device: torch.device, dtype: torch.dtype | None) -> Iterator[None]:
    """``torch.autocast`` on ``device`` in ``dtype``; nothing when ``dtype`` is None."""
    if dtype is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


def predict_dtype(device: torch.device, setting: str) -> torch.dtype:
    """The dtype predictions run in: ``"auto"`` is float64 on the CPU and float32 on a GPU (MPS
    has no float64 at all)."""
    if device.type == "mps" or setting == "float32" or (setting == AUTO and device.type != "cpu"):
        return torch.float32
    return torch.float64


__all__ = ["AUTO", "autocast", "autocast_dtype", "predict_dtype", "resolve_device"]
