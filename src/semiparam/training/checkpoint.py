"""Resumable training: the whole state of a fit, written every few steps or minutes.

A :class:`TrainingCheckpoint` is what a killed fit leaves behind in its checkpoint directory: the
weights, the optimiser (LAMB moments and Lookahead's slow weights and counter), the schedule
(adaptive anneal window, stop reason), the callbacks' state (best weights so far, patience,
smoothed loss), every random state (the global torch RNG that drives dropout, the masking
generator, the row sampler's numpy generator and the rest of its epoch), the history, the step and
the seconds trained so far. Resuming from it continues the fit exactly: the same seed gives the
same weights as a run that was never interrupted.

A checkpoint carries a fingerprint of the data and settings it was made from (:func:`fingerprint`);
resuming with other data, settings or seed raises :class:`CheckpointMismatchError` instead of
silently continuing someone else's fit. Files are written beside their final name and renamed into
place, so a kill during a write leaves the previous checkpoint intact. They are loaded with
``torch.load(weights_only=True)``: tensors, numbers, strings and containers only, no code.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._io import ModelFileError

STATE_FILE = "state.pt"
FORMAT = "semiparam-train-checkpoint-1"


class CheckpointMismatchError(ValueError):
    """A checkpoint was made from other data, settings or seed than the fit asked to resume."""


def fingerprint(*parts: Any) -> str:
    """sha256 of the given arrays (shape, dtype and bytes) and JSON-able objects, in order."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(repr((part.shape, str(part.dtype))).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()


class TrainingCheckpoint:
    """The checkpoint of one fit in ``directory``: written every ``every_steps`` steps or
    ``every_seconds`` seconds, whichever comes first (None: never by that rule)."""

    def __init__(
        self,
        directory: str | Path,
        fingerprint: str,
        *,
        every_steps: int | None = 100,
        every_seconds: float | None = 300.0,
    ) -> None:
        self.directory = Path(directory)
        self.fingerprint = fingerprint
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self._last_write = time.monotonic()

    @property
    def path(self) -> Path:
        return self.directory / STATE_FILE

    def due(self, step: int) -> bool:
        """Is a checkpoint due after ``step`` (0-based)?"""
        if self.every_steps is not None and (step + 1) % self.every_steps == 0:
            return True
        return self.every_seconds is not None and time.monotonic() - self._last_write >= self.every_seconds

    def write(self, state: dict[str, Any]) -> None:
        """Write ``state`` (tensors, numbers, strings, containers) atomically."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{STATE_FILE}.{os.getpid()}.tmp"
        torch.save({"format": FORMAT, "fingerprint": self.fingerprint, "state": state}, tmp)
        os.replace(tmp, self.path)
        self._last_write = time.monotonic()

    def read(self, *, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
        """The saved state, or None when there is no checkpoint. Raises
        :class:`CheckpointMismatchError` when it was made from another fit, and
        :class:`ModelFileError` when the file is not a readable checkpoint."""
        if not self.path.exists():
            return None
        try:
            blob = torch.load(self.path, map_location=map_location, weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unreadable file is the same problem to a user
            raise ModelFileError(f"{self.path}: not a readable training checkpoint ({err})") from err
        if not isinstance(blob, dict) or blob.get("format") != FORMAT:
            raise ModelFileError(f"{self.path}: not a semiparam training checkpoint")
        if blob.get("fingerprint") != self.fingerprint:
            raise CheckpointMismatchError(
                f"{self.path} was made by a fit with other data, settings or seed; resume with the "
                "same inputs, or delete the checkpoint (or use another directory) to start afresh"
            )
        return blob["state"]


def rng_state(generator: torch.Generator | None, device: torch.device) -> dict[str, Any]:
    """The global torch RNG (CPU, and the CUDA device's when on one) and ``generator``'s state."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    if generator is not None:
        state["generator"] = generator.get_state()
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator | None, device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
    if generator is not None and "generator" in state:
        generator.set_state(state["generator"].cpu())


def numpy_rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy generator's bit-generator state as plain JSON text (its integers exceed 64 bits)."""
    return {"bit_generator": json.dumps(rng.bit_generator.state)}


def set_numpy_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    rng.bit_generator.state = json.loads(state["bit_generator"])
