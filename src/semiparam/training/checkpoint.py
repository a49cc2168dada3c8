"""Resumable training: the whole state of a fit, written every few steps or minutes.

A :class:`TrainingCheckpoint` is what a killed fit leaves behind in its checkpoint directory: the
weights, the optimiser (LAMB moments and Lookahead's slow weights and counter), the schedule
(adaptive anneal window, stop reason), the callbacks' state (best weights so far, patience,
smoothed loss), every random state (the dropout and masking generators, the row sampler's numpy
generator and the rest of its epoch), the history, the step and the seconds trained so far.
Resuming from it continues the fit exactly: the same seed gives the same weights as a run that was
never interrupted. A fit may also resume on another kind of device (begun on a GPU, finished on the
CPU): its weights, optimiser and schedule carry over, while a generator whose state cannot (the
devices' generators differ) is seeded from the saved state, with a warning.

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
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._io import ModelFileError, digest

STATE_FILE = "state.pt"
FORMAT = "semiparam-train-checkpoint-1"


class CheckpointMismatchError(ValueError):
    """A checkpoint was made from other data, settings or seed than the fit asked to resume."""


def fingerprint(*parts: Any) -> str:
    """sha256 of the given arrays (shape, dtype and bytes) and JSON-able objects, in order
    (:func:`semiparam._io.digest` of each part, an array's shape and dtype before it, each part
    ended by a zero byte)."""
    chunks: list[Any] = []
    for part in parts:
        if isinstance(part, np.ndarray):
            chunks += [repr((part.shape, str(part.dtype))), part]
        else:  # as JSON even when a string (digest would take a str's bytes as they are)
            chunks.append(json.dumps(part, sort_keys=True, default=str))
        chunks.append(b"\0")
    return digest(*chunks)


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


def rng_state(generators: Mapping[str, torch.Generator | None]) -> dict[str, Any]:
    """The states of a fit's own generators (``{"masking": ..., "dropout": ...}``); training never
    draws from PyTorch's global generator (see ``training.seeding``), so it is not saved."""
    return {name: g.get_state() for name, g in generators.items() if g is not None}


def set_rng_state(state: dict[str, Any], generators: Mapping[str, torch.Generator | None]) -> None:
    """Put the generators back in the states :func:`rng_state` saved (a state saved on another kind
    of device: the generator seeded from it, with a warning)."""
    for name, g in generators.items():
        if g is None:
            continue
        if name not in state:
            raise CheckpointMismatchError(
                f"the checkpoint holds no state of the {name} generator (made by an older semiparam); "
                "delete it to start afresh"
            )
        saved = state[name].cpu()
        if saved.numel() == g.get_state().numel():
            g.set_state(saved)
            continue
        # a fit checkpointed on one kind of device (a CUDA generator's state is a seed and an
        # offset) and resumed on another (the CPU's is a Mersenne-Twister state) cannot carry its
        # random state over; the generator is seeded from the saved state instead, so the resumed
        # fit is still determined by the checkpoint, but its draws from here on are not those the
        # uninterrupted fit would have made.
        seed = int.from_bytes(hashlib.sha256(saved.numpy().tobytes()).digest()[:8], "little")
        g.manual_seed(seed)
        warnings.warn(
            f"the checkpoint's {name} generator was saved on another kind of device than "
            f"{g.device}; it is seeded from the saved state, so the resumed fit's random draws "
            "differ from those of a fit never interrupted",
            stacklevel=2,
        )


def numpy_rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy generator's bit-generator state as plain JSON text (its integers exceed 64 bits)."""
    return {"bit_generator": json.dumps(rng.bit_generator.state)}


def set_numpy_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    rng.bit_generator.state = json.loads(state["bit_generator"])
