"""Speed of data-parallel training on this machine: seconds per training step of NPT (or SPIN) at
its cpu preset on a development-suite table, one process against two launched by torchrun.

    python benchmarks/data_parallel.py                         # NPT on adult (2,000 training rows)
    python benchmarks/data_parallel.py --model spin --table kick --steps 30
    python benchmarks/data_parallel.py --report-only

Setups, each a fresh process (or process group) training ``--steps`` steps on the same rows with a
fixed schedule and no validation (so every setup runs the same steps):

- ``1 process, 2 threads``: the whole batch per step (shards=1), as a user gets by default;
- ``1 process, 2 threads, 2 shards``: the batch dealt into two shards run one after the other
  (the computation two processes share);
- ``2 processes x 1 thread`` (torchrun, gloo): one shard each, gradients averaged by
  DistributedDataParallel.

The speed-up of data parallelism on this machine is the third against the second (the same
arithmetic); the first shows what sharding itself costs or saves (attention between datapoints
over half the rows is a quarter of the work per shard). Results: ``<out>/data_parallel.jsonl``
(one line per setup, resumable: a line of the same code and settings is kept), then
``data_parallel.json`` and ``data_parallel.md`` with the command, code hash and machine. Run it
alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import devsuite as ds

from semiparam.bench.measure import code_hash, machine_info

RESULTS = Path(__file__).resolve().parent / "results"
SETUPS: dict[str, dict[str, Any]] = {
    "1 process, 2 threads": {"processes": 1, "threads": 2, "shards": 1},
    "1 process, 2 threads, 2 shards": {"processes": 1, "threads": 2, "shards": 2},
    "2 processes x 1 thread": {"processes": 2, "threads": 1, "shards": 2},
}


def worker(args: argparse.Namespace) -> None:
    """Train and print seconds per step (rank 0 of a torchrun group, or the only process)."""
    import torch

    import semiparam

    torch.set_num_threads(args.threads)
    X_train, _, y_train, _ = ds.split_table(args.table, 0)
    task = ds.TABLES[args.table].task
    if args.model == "npt":
        cls = semiparam.NPTRegressor if task == "regression" else semiparam.NPTClassifier
    else:
        cls = semiparam.SPINRegressor if task == "regression" else semiparam.SPINClassifier
    estimator = cls(
        n_estimators=1,
        max_steps=args.steps,
        validation_fraction=0.0,
        train_options={
            "lr_schedule": "flat_cosine",
            "shards": args.shards,
            "checkpoint_every_steps": None,
            "checkpoint_every_seconds": None,
        },
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
        print(
            "RESULT "
            + json.dumps(
                {
                    "fit_seconds": seconds,
                    "train_seconds": history.seconds,
                    "steps": history.n_steps,
                    "seconds_per_step": history.seconds / history.n_steps,
                    "rows": len(X_train),
                }
            )
        )


def run_setup(name: str, args: argparse.Namespace) -> dict[str, Any]:
    setup = SETUPS[name]
    here = Path(__file__).resolve()
    worker_args = [
        "--worker",
        "--model",
        args.model,
        "--table",
        args.table,
        "--steps",
        str(args.steps),
        "--threads",
        str(setup["threads"]),
        "--shards",
        str(setup["shards"]),
    ]
    if setup["processes"] == 1:
        command = [sys.executable, str(here), *worker_args]
    else:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={setup['processes']}",
            str(here),
            *worker_args,
        ]
    env = {**os.environ, "OMP_NUM_THREADS": str(setup["threads"])}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
    return {**setup, **json.loads(lines[-1][len("RESULT ") :])}


def write_report(records: list[dict[str, Any]], out: Path, command: str) -> None:
    by_name = {r["setup"]: r for r in records}
    md = ["# Data-parallel training on this machine", ""]
    if records:
        r0 = records[0]
        md.append(
            f"Command: `{command}`; semiparam code `{r0['code']}`; machine: {r0['machine'].get('cpu')}, "
            f"{r0['machine'].get('cpu_count')} cores. Generated from the JSON beside it."
        )
        md.append("")
        md.append(
            f"{r0['model'].upper()} at its cpu preset, one model, {r0['steps']} steps with a fixed "
            f"schedule on the {r0['rows']} training rows of `{r0['table']}` (no validation)."
        )
        md.append("")
    md.append("| setup | processes | threads each | shards | seconds per step | fit seconds |")
    md.append("|---|---|---|---|---|---|")
    for name in SETUPS:
        r = by_name.get(name)
        if r is None:
            continue
        md.append(
            f"| {name} | {r['processes']} | {r['threads']} | {r['shards']} | "
            f"{r['seconds_per_step']:.4f} | {r['fit_seconds']:.1f} |"
        )
    md.append("")
    names = list(SETUPS)
    if all(n in by_name for n in names):
        one, sharded, ddp = (by_name[n]["seconds_per_step"] for n in names)
        md.append(
            f"Speed-up of two processes over one process doing the same two shards: "
            f"**{sharded / ddp:.2f}x**; over the default single process (one shard): "
            f"**{one / ddp:.2f}x**. Two shards in one process against one shard: {one / sharded:.2f}x."
        )
        md.append("")
    (out / "data_parallel.md").write_text("\n".join(md).rstrip() + "\n")
    (out / "data_parallel.json").write_text(json.dumps({"command": command, "records": records}, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["npt", "spin"], default="npt")
    parser.add_argument("--table", default="adult", choices=sorted(ds.TABLES))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--shards", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    command = " ".join(
        shlex.quote(a) for a in ["python", "benchmarks/data_parallel.py", *(argv or sys.argv[1:])]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "data_parallel.jsonl"
    code = code_hash()
    key = {"model": args.model, "table": args.table, "steps": args.steps, "code": code}
    records = []
    if path.exists():
        records = [
            r
            for r in map(json.loads, path.read_text().splitlines())
            if all(r.get(k) == v for k, v in key.items())
        ]
    if not args.report_only:
        done = {r["setup"] for r in records}
        for name in SETUPS:
            if name in done:
                continue
            result = run_setup(name, args)
            record = {"setup": name, **key, **result, "machine": machine_info(), "time": time.time()}
            records.append(record)
            with path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{name}: {result['seconds_per_step']:.4f} s/step")
    write_report(records, args.out, command)
    print(f"wrote {args.out / 'data_parallel.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
