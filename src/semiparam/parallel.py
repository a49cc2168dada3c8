"""Run independent tasks one after another or as Ray tasks, with the same results either way.

The library's many-fits loops (ensemble members, the per-window models of genotype imputation,
benchmark cells) call :func:`map_tasks`; ``executor="ray"`` sends each item to a Ray task on the
local machine (``ray.init()``) or on the cluster at ``address``, and the results come back in the
order of the items. Each task sets PyTorch's thread count to ``threads`` (default: the caller's),
so a fit in a Ray worker computes what it would in the calling process, bit for bit on a CPU.
Ray is the optional ``distributed`` extra; the serial path needs nothing.

"Executor" is where independent work runs (:data:`EXECUTORS`); it was called "backend" until
issue 50 gave that word to the attention backends alone (``semiparam.nn.backends``). The old
spelling still works for one release, with a FutureWarning: ``backend=`` of :func:`map_tasks`,
of the estimators, of ``GenotypeImputer`` and of ``tune`` (:func:`resolve_executor`), ``--backend``
on the command line, and the names ``BACKENDS`` and ``check_backend`` here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS = ("serial", "ray")


def check_executor(executor: str, ray_address: str | None = None) -> None:
    """Raise ``ValueError`` for an unknown executor, or an address given without Ray."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
    if ray_address is not None and executor != "ray":
        raise ValueError(
            f"ray_address={ray_address!r} is given but executor is {executor!r}; set executor='ray'"
        )


def resolve_executor(executor: str, backend: str | None, *, stacklevel: int = 2) -> str:
    """``executor``, or ``backend`` (its old name, deprecated) when that is given, with a
    FutureWarning that names ``executor=`` (``stacklevel`` as ``warnings.warn``'s, counted from
    the caller). The two given at odds (``executor`` other than its default ``"serial"``) raise
    ``ValueError``."""
    if backend is None:
        return executor
    warnings.warn(
        f"backend={backend!r} is deprecated: where independent fits run is now executor=; "
        f"use executor={backend!r} (backend names the attention backends only)",
        FutureWarning,
        stacklevel=stacklevel + 1,
    )
    if executor not in ("serial", backend):
        raise ValueError(
            f"executor={executor!r} and backend={backend!r} (its deprecated old name) disagree; "
            "give executor= only"
        )
    return backend


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ImportError(f"executor='ray' needs Ray ({err}): pip install 'semiparam[distributed]'") from err
    return ray


def _in_task(fn: Callable[[Any], Any], item: Any, threads: int) -> Any:
    import torch

    torch.set_num_threads(threads)
    return fn(item)


def map_tasks(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    executor: str = "serial",
    address: str | None = None,
    cpus_per_task: float = 1,
    threads: int | None = None,
    on_result: Callable[[int, R], None] | None = None,
    backend: str | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, serially or as Ray tasks (results in the items' order).

    With ``executor="ray"``, Ray is started here (and shut down after) unless it already runs in
    this process; ``address`` joins an existing cluster (``"auto"``, or ``ray://host:10001``).
    ``fn`` and the items are shipped with Ray's pickling, so ``fn`` should be a module-level
    function or a picklable callable. A task that raises re-raises here with Ray's traceback.
    ``on_result(index, result)`` is called here as each result arrives (with Ray, in the order the
    tasks finish): for writing results as they come, so an interrupted run keeps them.
    ``backend``: the old name of ``executor`` (deprecated).
    """
    executor = resolve_executor(executor, backend)
    check_executor(executor, address)
    if executor == "serial" or not items:
        results = []
        for i, item in enumerate(items):
            results.append(fn(item))
            if on_result is not None:
                on_result(i, results[-1])
        return results
    import torch

    ray = import_ray()
    n_threads = threads if threads is not None else torch.get_num_threads()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        task = ray.remote(num_cpus=cpus_per_task)(_in_task)
        fn_ref = ray.put(fn)
        refs = [task.remote(fn_ref, item, n_threads) for item in items]
        index = {ref: i for i, ref in enumerate(refs)}
        results: dict[int, Any] = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = index[done[0]]
            results[i] = ray.get(done[0])
            if on_result is not None:
                on_result(i, results[i])
        return [results[i] for i in range(len(refs))]
    finally:
        if started_here:
            ray.shutdown()


# names of this module before "backend" became "executor" (issue 50), kept for one release
_RENAMED = {"BACKENDS": "EXECUTORS", "check_backend": "check_executor"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        warnings.warn(
            f"semiparam.parallel.{name} is deprecated; it is now {_RENAMED[name]}",
            FutureWarning,
            stacklevel=2,
        )
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
