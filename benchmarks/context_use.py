#!/usr/bin/env python
"""Do fitted models read their context? The lookup check of issue 49 (item 4), for the defaults
and for training settings meant to teach reading.

    python benchmarks/context_use.py                  # every setting, 3 seeds (resumes)
    python benchmarks/context_use.py --settings npt_default,spin_default --seeds 1
    python benchmarks/context_use.py --report-only

The task: 150 rows of 5 standard-normal features, each twice in the training table with one random
label (300 rows); the queries are copies of the 150 rows. A model is fitted, then: ``r_fit``, the
correlation of its predictions for the queries with their labels; ``twin first``, the share of
queries whose first row of ``explain_rows(method="attention")`` is one of their two copies; after
``set_context`` with the same rows and new random labels, ``r_old`` and ``r_new`` (the correlations
with the old and the new labels) and the twin-first share again. A model that reads its context
follows the new labels (``r_new`` near 1); one that memorised them keeps the old (``r_old`` near 1).

Each (setting, seed) cell runs in this process on 2 threads; its record (``context_use.jsonl``
beside the report ``results/context_use/context_use.md``) is keyed on the setting, the seed, the
code and, for the prior-fitted NPT, its weights. No seconds: the scores do not depend on the load.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import devsuite as ds
import harness as h
import numpy as np
import pandas as pd

N_SOURCE, N_FEATURES = 150, 5
METRICS = ("r_fit", "twin_first", "r_old", "r_new", "twin_first_new", "steps")
SEEDS = (0, 1, 2)
LONG = {"patience": None, "lr_schedule": "flat_cosine"}  # the paper's schedule, no early stop
DOT = {"row_similarity": "dot"}  # the paper's row attention (the cpu preset: cosine)
LOOKUP_TASK = {"training_task": "duplicate_lookup", "batch_size": 64, "full_batch_rows": 0, **LONG}
# name -> (family, estimator keyword arguments beyond random_state=seed and n_estimators=1 (unless
# given), what it is)
# fmt: off
SETTINGS: dict[str, tuple[str, dict[str, Any], str]] = {
    "npt_default": ("npt", {}, "NPTRegressor at its defaults (one member)"),
    "spin_default": ("spin", {}, "SPINRegressor at its defaults (one member)"),
    "npt_default_ensemble": ("npt", {"n_estimators": None},
        "NPTRegressor at its defaults, its members too (the default ensemble, predictions averaged)"),
    "spin_default_ensemble": ("spin", {"n_estimators": None},
        "SPINRegressor at its defaults, its members too (the default ensemble, predictions averaged)"),
    "npt_no_twin_noise": ("npt", {"train_options": {"twin_noise": 0.0}},
        "NPT at its defaults (one member) but for its twins' labels, kept as they are in every step "
        "(TrainConfig.twin_noise=0, the papers' training)"),
    "npt_pretrained": ("npt", {"init": "pretrained"},
        "the prior-fitted NPT, zero-shot (NPTRegressor(init='pretrained') at its default views; "
        "nothing trained)"),
    "npt_lookup_pairs_min150": ("npt", {"train_options": {"lookup_pairs": 0.3, "min_steps": 150}},
        "NPT at its defaults with 30% of each step's rows made lookup pairs (a row and a copy of it "
        "shown whole, both given a random row's label; TrainConfig.lookup_pairs) and no plateau "
        "stop before step 150"),
    "npt_lookup_every_5": ("npt", {"train_options": {"lookup_every": 5, "min_steps": 150}},
        "NPT at its defaults with the lookup task every fifth step (TrainConfig.lookup_every: up to "
        "256 of the step's rows, labels shuffled, beside copies shown whole) and no plateau stop "
        "before step 150"),
    "spin160_lookup_task_800": ("spin", {"max_steps": 800, "train_options": LOOKUP_TASK,
                                         "model_options": {"n_inducing": 160}},
        "SPIN with 160 inducing points (more than the 150 source rows) on the paper's lookup task "
        "alone, 800 steps as npt_lookup_task_300"),
    "spin_no_row_reader": ("spin", {"model_options": {"predictor_rows": False}},
        "SPIN at its defaults (one member) but with no row reader on a table with twins "
        "(SPINConfig.predictor_rows=False; the twin noise and the 150-step floor still act)"),
    "npt_dot": ("npt", {"model_options": DOT},
        "NPT at its defaults but with the paper's dot-product row attention (two projections; "
        "the default before NPTConfig.row_similarity='cosine')"),
    "npt_lookup_task_300": ("npt", {"max_steps": 300, "train_options": LOOKUP_TASK},
        "NPT trained on the paper's lookup task alone (every row copied, labels shuffled), 300 "
        "steps flat then cosine in batches of 64 rows and their copies: what NPT can learn when "
        "only lookup predicts"),
}
# fmt: on


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


def cell(setting: str, seed: int, options: dict[str, Any], weights: str | None = None) -> dict[str, Any]:
    """One fit of ``options`` on the task of ``seed``, then the same rows with new labels."""
    import torch

    from semiparam import NPTRegressor, SPINRegressor

    torch.set_num_threads(ds.N_THREADS)
    family = SETTINGS[setting][0]
    X, y, y_new, queries = task(seed)
    cls = {"npt": NPTRegressor, "spin": SPINRegressor}[family]
    options = dict(options)  # n_estimators: one member unless the setting says (None: the default)
    n_estimators = options.pop("n_estimators", None if options.get("init") == "pretrained" else 1)
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


def report(records: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """The table (means over the seeds of each setting) and its rows."""
    rows = []
    for setting, (_, _, what) in SETTINGS.items():
        cells = [r for r in records if r["ok"] and r["settings"]["setting"] == setting]
        if cells:
            mean = {m: float(np.mean([c[m] for c in cells])) for m in METRICS}
            seeds = sorted(c["settings"]["seed"] for c in cells)
            lowest = min(c["r_new"] for c in cells)
            rows.append({"setting": setting, "what": what, "seeds": seeds, **mean, "r_new_lowest": lowest})
    share = lambda v: "n/a" if np.isnan(v) else f"{v:.0%}"  # noqa: E731 - not measured: NaN
    lines = [
        "150 rows x 5 random features, each twice in the training table with one random label; the "
        "queries are copies of the 150 rows. `twin first`: share of queries whose top row by attention "
        "is one of their two copies. After `set_context` with new random labels for the same rows: "
        "correlation of the predictions with the old and the new labels. Means over the seeds, and "
        "`r new` of the lowest seed. `steps`: the (first) member's training steps.",
        "",
        "| setting | seeds | steps | r (fit) | twin first | r old | r new | r new, lowest seed "
        "| twin first (new) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['setting']} | {len(r['seeds'])} | {r['steps']:.0f} | {r['r_fit']:.2f} | "
            f"{share(r['twin_first'])} | {r['r_old']:.2f} | {r['r_new']:.2f} | {r['r_new_lowest']:.2f} | "
            f"{share(r['twin_first_new'])} |"
        )
    lines += ["", "Settings:", ""] + [f"- `{r['setting']}`: {r['what']}" for r in rows]
    return lines, rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"of {', '.join(SETTINGS)}")
    p.add_argument("--seeds", type=int, default=len(SEEDS))
    p.add_argument("--out-dir", type=Path, default=h.RESULTS / "context_use")
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args(argv)
    records = h.Records(a.out_dir / "context_use.jsonl")
    for setting in [] if a.report_only else [s for s in a.settings.split(",") if s]:
        if setting not in SETTINGS:
            raise SystemExit(f"unknown setting {setting!r}; choose from {', '.join(SETTINGS)}")
        options = SETTINGS[setting][1]
        for seed in range(a.seeds):
            settings = {"setting": setting, "seed": seed, "options": options}
            if options.get("init") == "pretrained":  # the prior-fitted NPT: its weights too
                from semiparam.pretraining import weights_hash

                settings["weights"] = weights_hash()
            rec = records.run(settings, lambda s: cell(**s))
            print(setting, seed, {m: round(rec[m], 3) for m in METRICS}, flush=True)
    current = records.current()
    lines, rows = report(current)
    title = "Do fitted models read their context? (issue 49, item 4)"
    h.write_report(a.out_dir / "context_use", title, lines, {"rows": rows, "cells": current}, records=current)


if __name__ == "__main__":
    main()
