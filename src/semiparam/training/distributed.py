"""Data-parallel training: row shards of each step, spread over processes and accumulated.

Every step the row sampler draws one batch (the same on every process: all draw from the same
seeded generator). The batch is dealt into ``S`` shards, shard ``s`` holding rows ``s, s + S, ...``
(the batch is in stratified order, so each shard keeps the class mix). A process handles
``S / world_size`` of them in turn: masks drawn from the shard's own generator, forward and backward
with the shard's own dropout generator, each shard's loss divided by the shards it handles; PyTorch's
DistributedDataParallel then averages the gradients across processes, so every process takes the
same optimiser step on the mean gradient of the ``S`` shard losses.

``S`` is the training setting ``shards`` (None: one per process). The shards, their generators and
so the result depend on ``S`` only, not on how many processes share them: one process with
``shards=2`` computes what two processes do with one shard each (to float rounding, since the
gradient sum is formed in another order), and a checkpoint made by two processes resumes in one
(or the other way round).

NOTE[DIFF]: attention between datapoints (NPT's ABD, SPIN's cross-attention to the training rows)
sees only the rows of the shard it is computed on, as in the paper's minibatching: two shards of
``b`` rows are two minibatches of ``b`` rows whose gradients are averaged, not one batch of ``2b``
rows. Keys and values are not gathered across processes (that would make the backward pass cross
process boundaries inside every attention layer). ``benchmarks/shard_quality.py`` measures what
this costs on real tables.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class ProcessGroup:
    """This process's place among the processes training one model (1 of 1 without
    torch.distributed)."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` (a picklable object) on every process."""
        if not self.distributed:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def gather_merged(self, part: dict[Any, Any]) -> dict[Any, Any]:
        """The union of every process's dict (keys distinct across processes), on every process."""
        if not self.distributed:
            return dict(part)
        parts: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(parts, part)
        merged: dict[Any, Any] = {}
        for p in parts:
            merged.update(p)
        return merged

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the processes."""
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return float(t.item()) / self.world_size

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()


def current_group() -> ProcessGroup:
    """The initialised default process group, or a single process."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return ProcessGroup(torch.distributed.get_rank(), torch.distributed.get_world_size())
    return ProcessGroup()


def init_from_environment(device: str = "cpu") -> tuple[ProcessGroup, str]:
    """Join the process group a launcher such as ``torchrun`` describes in the environment
    (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``, ...): gloo on the CPU, NCCL on CUDA devices, each
    process on GPU ``LOCAL_RANK``. Returns the group and the device this process trains on;
    without such an environment (or with one process) nothing is initialised."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or not torch.distributed.is_available():
        return current_group(), device
    if device.startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(torch.device(device))
    if not torch.distributed.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        torch.distributed.init_process_group(backend=backend)
    return current_group(), device


def resolve_shards(configured: int | None, group: ProcessGroup, checkpoint_shards: int | None = None) -> int:
    """The shards of every step: ``configured``, else those of the checkpoint being resumed, else
    one per process. Raises ValueError when the processes cannot share them evenly."""
    shards = configured or checkpoint_shards or group.world_size
    if checkpoint_shards is not None and shards != checkpoint_shards:
        raise ValueError(
            f"the checkpoint was trained with {checkpoint_shards} row shards per step and this fit asks "
            f"for {shards}; resume with shards={checkpoint_shards} (or leave it unset)"
        )
    if shards % group.world_size:
        raise ValueError(
            f"{shards} row shards per step cannot be shared evenly by {group.world_size} processes; "
            f"launch a number of processes that divides {shards}"
        )
    return shards


def local_shards(shards: int, group: ProcessGroup) -> range:
    """The shard numbers this process handles."""
    per = shards // group.world_size
    return range(group.rank * per, (group.rank + 1) * per)


def shard_seed(seed: int, shard: int) -> int:
    """Seed of shard ``shard``'s generators (shard 0: ``seed`` itself, so that one shard trains
    exactly as a fit without sharding)."""
    if shard == 0:
        return seed
    return int(np.random.SeedSequence([seed, shard]).generate_state(1, dtype=np.uint64)[0] % (2**63))


def shard_rows(n_rows: int, shard: int, shards: int, device: Any) -> torch.Tensor:
    """Positions of shard ``shard``'s rows in a batch of ``n_rows``."""
    return torch.arange(shard, n_rows, shards, device=device)


@dataclass
class Shard:
    """One shard's generators: masking draws and the model's dropout."""

    index: int
    generator: torch.Generator | None
    dropout_generator: torch.Generator | None


def make_shards(
    indices: Sequence[int],
    seed: int,
    device: Any,
    first: Callable[[], tuple[torch.Generator, torch.Generator | None]],
) -> list[Shard]:
    """The shards ``indices`` with their generators; shard 0 takes ``first()`` (the generators a
    fit without shards uses), the others fresh generators seeded by :func:`shard_seed`."""
    out = []
    for s in indices:
        if s == 0:
            generator, dropout = first()
        else:
            base = shard_seed(seed, s)
            generator = torch.Generator(device=device).manual_seed(base)
            dropout = torch.Generator(device=device).manual_seed((base + 1) % (2**63))
        out.append(Shard(s, generator, dropout))
    return out


__all__ = [
    "ProcessGroup",
    "Shard",
    "current_group",
    "init_from_environment",
    "local_shards",
    "make_shards",
    "resolve_shards",
    "shard_rows",
    "shard_seed",
]
