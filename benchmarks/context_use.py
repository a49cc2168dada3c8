#!/usr/bin/env python
"""Do fitted models read their context? The lookup check of issue 49 (item 4), for the defaults
and for training settings meant to teach reading.

    .venv/bin/python benchmarks/context_use.py                  # every setting, 3 seeds (resumes)
    .venv/bin/python benchmarks/context_use.py --settings npt_default,spin_default --seeds 1
    .venv/bin/python benchmarks/context_use.py --report-only

The task: 150 rows of 5 standard-normal features, each appearing twice in the training table with
one random target (standard normal, unrelated to the features), 300 rows in all. The queries are
copies of the 150 rows. A model is fitted, then:

- ``r_fit``: correlation of its predictions for the queries with their training labels;
- ``twin first``: the share of queries whose first row of ``explain_rows(method="attention")`` is
  one of the two copies of the query (the source rows);
- after ``set_context`` with the same 300 rows and new random labels (each pair one new label):
  ``r_old`` and ``r_new``, the correlations with the old and the new labels, and the twin-first
  share again. A model that reads its context follows the new labels (``r_new`` near 1); one that
  memorised the labels in its weights keeps the old (``r_old`` near 1).

Each (setting, seed) cell runs in this process on 2 threads (a fit here takes seconds) and appends
a JSON line to ``results/context_use/context_use.jsonl``, keyed on the setting, the seed and the
hash of src/semiparam; a current line is not run again. The report (``context_use.md`` and
``.json``) is generated from the current lines and names the command, commit and machine. No
seconds are reported: the scores do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import devsuite as ds
import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent / "results" / "context_use"
N_SOURCE, N_FEATURES = 150, 5
SEEDS = (0, 1, 2)
LOOKUP_TASK = {
    "training_task": "duplicate_lookup",
    "lr_schedule": "flat_cosine",
    "patience": None,
    "batch_size": 64,
    "full_batch_rows": 0,
}
# name -> (family, estimator keyword arguments beyond n_estimators=1 and random_state=seed, what it is)
SETTINGS: dict[str, tuple[str, dict[str, Any], str]] = {
    "npt_default": ("npt", {}, "NPTRegressor at its defaults (one member)"),
    "spin_default": ("spin", {}, "SPINRegressor at its defaults (one member)"),
    "npt_pretrained": (
        "npt",
        {"init": "pretrained"},
        "the prior-fitted NPT, zero-shot (NPTRegressor(init='pretrained'); 4 views, nothing trained)",
    ),
    "npt_lookup_pairs": (
        "npt",
        {"train_options": {"lookup_pairs": 0.3}},
        "NPT at its defaults with 30% of each step's rows made lookup pairs (a row and a copy of it "
        "shown whole, both given a random row's label; TrainConfig.lookup_pairs)",
    ),
    "npt_long": (
        "npt",
        {"max_steps": 2000, "train_options": {"patience": None, "lr_schedule": "flat_cosine"}},
        "NPT at its defaults but 2,000 steps on the paper's flat-then-cosine schedule",
    ),
    "npt_lookup_pairs_long": (
        "npt",
        {
            "max_steps": 2000,
            "train_options": {"lookup_pairs": 0.3, "patience": None, "lr_schedule": "flat_cosine"},
        },
        "both: lookup pairs on 30% of the rows and 2,000 steps",
    ),
    "npt_lookup_task_800": (
        "npt",
        {"max_steps": 800, "train_options": LOOKUP_TASK},
        "NPT trained on the paper's lookup task alone (every row copied, labels shuffled), 800 "
        "steps flat then cosine in batches of 64 rows and their copies: what NPT can learn when "
        "only lookup predicts",
    ),
    "spin_lookup_task_800": (
        "spin",
        {"max_steps": 800, "train_options": LOOKUP_TASK},
        "SPIN (10 inducing points) trained on the lookup task alone, as NPT above",
    ),
    "spin160_lookup_task_800": (
        "spin",
        {
            "max_steps": 800,
            "train_options": LOOKUP_TASK,
            "model_options": {"n_inducing_points": 160},
        },
        "SPIN with 160 inducing points (more than the 150 source rows) on the lookup task alone",
    ),
}


def task(seed: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, pd.DataFrame]:
    """(training rows, their labels, new labels for the same rows, the queries)."""
    rng = np.random.default_rng(seed)
    names = [f"x{i}" for i in range(N_FEATURES)]
    X = pd.DataFrame(rng.normal(size=(N_SOURCE, N_FEATURES)), columns=names)
    y, y_new = rng.normal(size=N_SOURCE), rng.normal(size=N_SOURCE)
    twice = pd.concat([X, X], ignore_index=True)
    return twice, np.concatenate([y, y]), np.concatenate([y_new, y_new]), X


def twin_first(model: Any, queries: pd.DataFrame, context: tuple[pd.DataFrame, np.ndarray]) -> float:
    ranked = model.explain_rows(queries, top_k=1, context=context)
    first = ranked[ranked["rank"] == 1].sort_values("row")["context_row"].to_numpy()
    return float(np.mean(first % N_SOURCE == np.arange(N_SOURCE)))


def run_cell(setting: str, seed: int) -> dict[str, Any]:
    import torch

    from semiparam import NPTRegressor, SPINRegressor

    torch.set_num_threads(ds.N_THREADS)
    family, options, _ = SETTINGS[setting]
    X, y, y_new, queries = task(seed)
    cls = {"npt": NPTRegressor, "spin": SPINRegressor}[family]
    n_estimators = None if options.get("init") == "pretrained" else 1
    model = cls(n_estimators=n_estimators, random_state=seed, verbose=False, **options).fit(X, y)
    history = model.history_
    first = model.predict(queries)
    # the prior-fitted NPT has no explanations yet: its twin-first share is not measured
    explained = options.get("init") != "pretrained"
    before = twin_first(model, queries, (X, y)) if explained else float("nan")
    model.set_context(X, y_new)
    after = model.predict(queries)
    return {
        "steps": 0 if history is None else history.n_steps,
        "best_step": None if history is None else history.best_step,
        "stop": "" if history is None else history.stop_reason,
        "r_fit": float(np.corrcoef(first, y[:N_SOURCE])[0, 1]),
        "twin_first": before,
        "r_old": float(np.corrcoef(after, y[:N_SOURCE])[0, 1]),
        "r_new": float(np.corrcoef(after, y_new[:N_SOURCE])[0, 1]),
        "twin_first_new": twin_first(model, queries, (X, y_new)) if explained else float("nan"),
    }


def cell_key(setting: str, seed: int, src: str) -> str:
    """The record's key: the setting, the seed, the code and, for the prior-fitted NPT, its weights."""
    parts = [setting, SETTINGS[setting][1], seed, src]
    if SETTINGS[setting][1].get("init") == "pretrained":
        from semiparam.pretraining import weights_hash

        parts.append(weights_hash())
    return json.dumps(parts, sort_keys=True)


METRICS = ("r_fit", "twin_first", "r_old", "r_new", "twin_first_new", "steps")


def share(value: float) -> str:
    """A share as a percentage; "n/a" where it was not measured (NaN)."""
    return "n/a" if np.isnan(value) else f"{value:.0%}"


def write_report(out: Path, command: str) -> None:
    src = ds.src_hash()
    current = [
        r
        for r in ds.read_lines(out / "context_use.jsonl")
        if r["key"] == cell_key(r["setting"], r["seed"], src)
    ]
    rows = []
    for setting, (_, _, what) in SETTINGS.items():
        cells = [r for r in current if r["setting"] == setting]
        if not cells:
            continue
        mean = {m: float(np.mean([c["result"][m] for c in cells])) for m in METRICS}
        rows.append({"setting": setting, "what": what, "seeds": sorted(c["seed"] for c in cells), **mean})
    version = ds.code_version()
    report = {"command": command, "code": version, "machine": ds.machine(), "rows": rows, "cells": current}
    (out / "context_use.json").write_text(json.dumps(ds.jsonable(report), indent=1) + "\n")
    measured = ", ".join(sorted({f"`{r['command']}`" for r in current}))
    lines = [
        "# Do fitted models read their context? (issue 49, item 4)",
        "",
        f"Cells measured by: {measured}; this report: "
        f"`{command}`; commit `{version.get('git_head')}`, src `{src}`; machine: "
        f"{ds.machine().get('cpu', 'unknown')}. Generated from `context_use.json`.",
        "",
        "150 rows x 5 random features, each twice in the training table with one random label; the "
        "queries are copies of the 150 rows. `twin first`: share of queries whose top row by attention "
        "is one of their two copies. After `set_context` with new random labels for the same rows: "
        "correlation of the predictions with the old and the new labels. Means over the seeds.",
        "",
        "| setting | seeds | steps | r (fit) | twin first | r old | r new | twin first (new) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['setting']} | {len(r['seeds'])} | {r['steps']:.0f} | {r['r_fit']:.2f} | "
            f"{share(r['twin_first'])} | {r['r_old']:.2f} | {r['r_new']:.2f} | {share(r['twin_first_new'])} |"
        )
    lines += ["", "Settings:", ""] + [f"- `{r['setting']}`: {r['what']}" for r in rows]
    (out / "context_use.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"of {', '.join(SETTINGS)}")
    p.add_argument("--seeds", type=int, default=len(SEEDS))
    p.add_argument("--out-dir", type=Path, default=OUT)
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args(argv)
    command = "python benchmarks/context_use.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    a.out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = a.out_dir / "context_use.jsonl"
    if not a.report_only:
        src = ds.src_hash()
        done = {r["key"] for r in ds.read_lines(jsonl)}
        for setting in [s for s in a.settings.split(",") if s]:
            if setting not in SETTINGS:
                raise SystemExit(f"unknown setting {setting!r}; choose from {', '.join(SETTINGS)}")
            for seed in range(a.seeds):
                key = cell_key(setting, seed, src)
                if key in done:
                    continue
                result = run_cell(setting, seed)
                print(
                    setting,
                    seed,
                    json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}),
                    flush=True,
                )
                with jsonl.open("a") as f:
                    record = {
                        "key": key,
                        "setting": setting,
                        "seed": seed,
                        "command": command,
                        "result": result,
                    }
                    f.write(json.dumps(record) + "\n")
    write_report(a.out_dir, command)


if __name__ == "__main__":
    main()
