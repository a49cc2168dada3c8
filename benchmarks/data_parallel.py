"""Speed of data-parallel training on this machine: seconds per training step of NPT (or SPIN) at
its cpu preset on a development-suite table, one process against two launched by torchrun.

    python benchmarks/data_parallel.py                         # NPT on adult (2,000 training rows)
    python benchmarks/data_parallel.py --model spin --table kick --steps 30
    python benchmarks/data_parallel.py --report-only

Setups, each a fresh torchrun launch training ``--steps`` steps on the same rows (fixed schedule,
no validation):

- ``1 process, 2 threads``: the whole batch per step (shards=1), as a user gets by default;
- ``1 process, 2 threads, 2 shards``: the batch dealt into two shards run one after the other
  (the computation two processes share);
- ``2 processes x 1 thread`` (gloo): one shard each, gradients averaged by DistributedDataParallel.

The speed-up of data parallelism is the third against the second (the same arithmetic). Records:
``<out>/data_parallel.jsonl``, kept per settings and code; report: ``data_parallel.md``. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import devsuite as ds
import harness as h

SETUPS: dict[str, dict[str, int]] = {
    "1 process, 2 threads": {"processes": 1, "threads": 2, "shards": 1},
    "1 process, 2 threads, 2 shards": {"processes": 1, "threads": 2, "shards": 2},
    "2 processes x 1 thread": {"processes": 2, "threads": 1, "shards": 2},
}


def worker(model: str, table: str, steps: int, threads: int, shards: int, **_: Any) -> None:
    """Train and print the seconds per step (rank 0 of the torchrun group)."""
    import torch

    import semiparam

    torch.set_num_threads(threads)
    X_train, _, y_train, _ = ds.split_table(table, 0)
    kind = "Regressor" if ds.TABLES[table].task == "regression" else "Classifier"
    options = {"lr_schedule": "flat_cosine", "shards": shards}
    options |= {"checkpoint_every_steps": None, "checkpoint_every_seconds": None}
    estimator = getattr(semiparam, f"{model.upper()}{kind}")(
        n_estimators=1,
        max_steps=steps,
        validation_fraction=0.0,
        train_options=options,
        random_state=0,
        verbose=False,
    )
    if os.environ.get("WORLD_SIZE", "1") != "1":
        torch.distributed.init_process_group("gloo")
    start = time.perf_counter()
    estimator.fit(X_train, y_train)
    seconds = time.perf_counter() - start
    history = estimator.history_
    if int(os.environ.get("RANK", "0")) == 0:
        result = {"fit_seconds": seconds, "steps": history.n_steps, "rows": len(X_train)}
        print("RESULT " + json.dumps({**result, "seconds_per_step": history.seconds / history.n_steps}))


def launch(settings: dict[str, Any]) -> dict[str, Any]:
    """One setup: ``settings["processes"]`` workers under torchrun, each on its threads."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={settings['processes']}", __file__, "--worker", json.dumps(settings)]
    env = {**os.environ, "OMP_NUM_THREADS": str(settings["threads"])}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        return {"ok": False, "error": f"exit {done.returncode}: {done.stderr[-2000:]}"}
    return json.loads(lines[-1][len("RESULT ") :])


def report(records: list[dict[str, Any]]) -> list[str]:
    by_name = {r["settings"]["setup"]: {**r["settings"], **r} for r in records if r["ok"]}  # in SETUPS' order
    lines = []
    if by_name:
        r0 = next(iter(by_name.values()))
        lines += [
            f"{r0['model'].upper()} at its cpu preset, one model, {r0['steps']} steps with a fixed "
            f"schedule on the {r0['rows']} training rows of `{r0['table']}` (no validation).",
            "",
        ]
    columns = ["setup", "processes", "threads each", "shards", "seconds per step", "fit seconds"]
    keys = ("processes", "threads", "shards")
    rows = [
        (n, *(r[k] for k in keys), f"{r['seconds_per_step']:.4f}", f"{r['fit_seconds']:.1f}")
        for n, r in by_name.items()
    ]
    lines += h.md_table(columns, rows)
    if all(n in by_name for n in SETUPS):
        one, sharded, ddp = (by_name[n]["seconds_per_step"] for n in SETUPS)
        lines += [
            "",
            f"Speed-up of two processes over one process doing the same two shards: "
            f"**{sharded / ddp:.2f}x**; over the default single process (one shard): "
            f"**{one / ddp:.2f}x**. Two shards in one process against one shard: {one / sharded:.2f}x.",
        ]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["npt", "spin"], default="npt")
    parser.add_argument("--table", default="adult", choices=sorted(ds.TABLES))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=h.RESULTS)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(**json.loads(args.worker))
    records = h.Records(args.out / "data_parallel.jsonl")
    runs = [
        {"setup": n, "model": args.model, "table": args.table, "steps": args.steps, **s}
        for n, s in SETUPS.items()
    ]
    for settings in [] if args.report_only else runs:
        rec = records.run(settings, launch)
        print(f"{settings['setup']}: {rec.get('seconds_per_step', rec.get('error'))} s/step", flush=True)
    current = [r for r in (records.get(s) for s in runs) if r is not None]
    title = "Data-parallel training on this machine"
    h.write_report(args.out / "data_parallel", title, report(current), current, records=current)


if __name__ == "__main__":
    main()
