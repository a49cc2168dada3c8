"""Run independent tasks one after another or as Ray tasks, with the same results either way.

The library's many-fits loops (ensemble members, the per-window models of genotype imputation,
benchmark cells) call :func:`map_tasks`; ``backend="ray"`` sends each item to a Ray task on the
local machine (``ray.init()``) or on the cluster at ``address``, and the results come back in the
order of the items. Each task sets PyTorch's thread count to ``threads`` (default: the caller's),
so a fit in a Ray worker computes what it would in the calling process, bit for bit on a CPU.
Ray is the optional ``distributed`` extra; the serial path needs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

BACKENDS = ("serial", "ray")


def check_backend(backend: str, ray_address: str | None = None) -> None:
    """Raise ``ValueError`` for an unknown backend, or an address given without Ray."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if ray_address is not None and backend != "ray":
        raise ValueError(
            f"ray_address={ray_address!r} is given but backend is {backend!r}; set backend='ray'"
        )


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ImportError(f"backend='ray' needs Ray ({err}): pip install 'semiparam[distributed]'") from err
    return ray


def _in_task(fn: Callable[[Any], Any], item: Any, threads: int) -> Any:
    import torch

    torch.set_num_threads(threads)
    return fn(item)


def map_tasks(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    backend: str = "serial",
    address: str | None = None,
    cpus_per_task: float = 1,
    threads: int | None = None,
    on_result: Callable[[int, R], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, serially or as Ray tasks (results in the items' order).

    With ``backend="ray"``, Ray is started here (and shut down after) unless it already runs in
    this process; ``address`` joins an existing cluster (``"auto"``, or ``ray://host:10001``).
    ``fn`` and the items are shipped with Ray's pickling, so ``fn`` should be a module-level
    function or a picklable callable. A task that raises re-raises here with Ray's traceback.
    ``on_result(index, result)`` is called here as each result arrives (with Ray, in the order the
    tasks finish): for writing results as they come, so an interrupted run keeps them.
    """
    check_backend(backend, address)
    if backend == "serial" or not items:
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
