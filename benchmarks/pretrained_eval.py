#!/usr/bin/env python
"""The prior-fitted NPT on the development suite (issue 51): zero-shot
``NPTClassifier(init="pretrained")`` / ``NPTRegressor(init="pretrained")`` against CatBoost and
HistGradientBoosting at their defaults and the from-scratch NPT, and the seconds a 1,000-row table
takes.

    .venv/bin/python benchmarks/pretrained_eval.py                  # every table, 3 splits (resumes)
    .venv/bin/python benchmarks/pretrained_eval.py --tables boston,titanic --splits 1
    .venv/bin/python benchmarks/pretrained_eval.py --speed          # the 1,000-row timing; run it alone
    .venv/bin/python benchmarks/pretrained_eval.py --report-only

Scores: each (table, split) of ``benchmarks/devsuite.py`` (the same seeded splits as
``tabular_defaults.py``), zero-shot: the table's training rows are the context, nothing is trained.
A table with more classes than the model's class slots is left out. The comparison models' scores
are their records in ``--reference`` (``benchmarks/results/suite32/tabular_defaults.jsonl``, made by
``tabular_defaults.py`` at the commits they name): CatBoost and HGB records do not depend on
semiparam's code; NPT's are the defaults of the commit named in the report. Records of the zero-shot
model are keyed on the table, the split and the hash of the shipped weights and the code; a current
record is not run again. The report (``results/pretrained/pretrained_eval.md`` and ``.json``) is
generated from the records.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import devsuite as ds
import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent / "results" / "pretrained"
REFERENCE = Path(__file__).resolve().parent / "results" / "suite32" / "tabular_defaults.jsonl"
COMPARED = ("catboost", "hgb", "npt")


def weights_hash() -> str:
    from semiparam.pretraining import weights_hash

    return weights_hash()


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def cell(table: str, split: int) -> dict[str, Any]:
    import torch

    from semiparam import NPTClassifier, NPTRegressor

    torch.set_num_threads(ds.N_THREADS)
    spec = ds.TABLES[table]
    X_tr, X_te, y_tr, y_te = ds.split_table(table, split)
    reg = spec.task == "regression"
    n_classes = 0 if reg else int(pd.concat([y_tr, y_te]).nunique())
    model = (NPTRegressor if reg else NPTClassifier)(
        init="pretrained", random_state=ds.split_seed(table, split)
    )
    start = time.perf_counter()
    model.fit(X_tr, y_tr)
    metrics = ds.predict_and_score(model, spec.task, X_te, y_te, n_classes)
    seconds = time.perf_counter() - start
    primary = ds.primary_metric(spec.task)
    return {
        "metrics": metrics,
        "score": metrics[primary],
        "primary": primary,
        "seconds": seconds,
        "n_train": len(X_tr),
        "n_test": len(X_te),
    }


def speed(repeats: int = 3) -> dict[str, Any]:
    """Fit and predict a 1,000-row table (10 features, binary target) and 1,000 query rows."""
    import torch

    from semiparam import NPTClassifier

    torch.set_num_threads(ds.N_THREADS)
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(2000, 10)), columns=[f"x{i}" for i in range(10)])
    y = (X["x0"] + X["x1"] * X["x2"] > 0).astype(int).to_numpy()
    times = []
    for _ in range(repeats + 1):  # the first: warm-up (imports, weights from disk)
        start = time.perf_counter()
        NPTClassifier(init="pretrained").fit(X[:1000], y[:1000]).predict_proba(X[1000:])
        times.append(time.perf_counter() - start)
    return {
        "median_s": statistics.median(times[1:]),
        "max_s": max(times[1:]),
        "first_s": times[0],
        "rows": 1000,
        "queries": 1000,
        "threads": ds.N_THREADS,
    }


def reference_scores(path: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    out = {}
    for r in read_lines(path):
        if r.get("model") in COMPARED and r.get("tag") == "default" and r.get("score") is not None:
            out[(r["model"], r["table"], r["split"])] = r
    return out


def write_report(out: Path, command: str, reference: Path) -> None:
    key_now = {"weights": weights_hash(), "src": ds.src_hash()}
    records = [
        r
        for r in read_lines(out / "pretrained_eval.jsonl")
        if r["key"] == {**key_now, "table": r["table"], "split": r["split"]}
    ]
    refs = reference_scores(reference)
    card = json.loads(
        (Path(__file__).resolve().parent.parent / "src/semiparam/weights/npt_prior.json").read_text()
    )
    rows, ranks, wins, ratios = (
        [],
        {m: [] for m in ("prior", *COMPARED)},
        {m: [] for m in COMPARED},
        {m: [] for m in COMPARED},
    )
    ref_commits = set()
    for r in sorted(records, key=lambda r: (r["table"], r["split"])):
        if "score" not in r["result"]:
            continue
        scores = {"prior": r["result"]["score"]}
        for m in COMPARED:
            ref = refs.get((m, r["table"], r["split"]))
            if ref is not None:
                scores[m] = ref["score"]
                if m == "npt":
                    ref_commits.add(ref["code"]["git_head"][:7])
        if len(scores) < 1 + len(COMPARED):
            continue
        ranked = ds.rank_scores(scores)
        for m, v in ranked.items():
            ranks[m].append(v)
        for m in COMPARED:
            wins[m].append(scores["prior"] < scores[m])
            ratios[m].append(scores["prior"] / scores[m])
        rows.append({"table": r["table"], "split": r["split"], **scores, "seconds": r["result"]["seconds"]})
    summary = {
        "cells": len(rows),
        "mean_rank": {m: float(np.mean(v)) for m, v in ranks.items() if v},
        "win_rate": {m: float(np.mean(v)) for m, v in wins.items() if v},
        "geo_mean_ratio": {m: float(np.exp(np.mean(np.log(v)))) for m, v in ratios.items() if v},
    }
    speed_line = read_lines(out / "speed.jsonl")
    speed_now = [s for s in speed_line if s["key"] == key_now]
    report = {
        "command": command,
        "code": ds.code_version(),
        "machine": ds.machine(),
        "weights": key_now,
        "steps": card["steps"],
        "seconds_by_device": card["seconds_by_device"],
        "summary": summary,
        "rows": rows,
        "speed": speed_now[-1] if speed_now else None,
    }
    (out / "pretrained_eval.json").write_text(json.dumps(ds.jsonable(report), indent=1) + "\n")
    commands = sorted({r["command"] for r in records} | {s["command"] for s in speed_now})
    hours = ", ".join(f"{v / 3600:.2f} h on {k}" for k, v in sorted(card["seconds_by_device"].items()))
    lines = [
        "# The prior-fitted NPT, zero-shot, on the development suite (issue 51)",
        "",
        f"Measured by: {', '.join(f'`{c}`' for c in commands)}; this report: `{command}`; commit "
        f"`{ds.code_version().get('git_head')}`; weights `{key_now['weights']}` ({card['steps']:,} "
        f"pretraining steps, {hours}); machine: {ds.machine().get('cpu')}. Generated from "
        "`pretrained_eval.json`.",
        "",
        "Zero-shot: the training rows are the context, nothing is trained. CatBoost and HGB: their "
        f"default records in `{reference.relative_to(reference.parents[2])}`; NPT: the from-scratch "
        f"defaults' records there, made at commit(s) {', '.join(sorted(ref_commits)) or '-'}. Scores: "
        "RMSE (regression) or log loss (classification), lower is better. Ranks among the four models "
        "per (table, split).",
        "",
        f"Cells: {summary['cells']}.",
        "",
        "| model | mean rank | zero-shot beats it | geo-mean score ratio (zero-shot / it) |",
        "| --- | --- | --- | --- |",
        f"| zero-shot NPT | {summary['mean_rank'].get('prior', float('nan')):.2f} | - | - |",
    ]
    for m in COMPARED:
        rank, win = summary["mean_rank"].get(m, np.nan), summary["win_rate"].get(m, np.nan)
        lines.append(f"| {m} | {rank:.2f} | {win:.0%} | {summary['geo_mean_ratio'].get(m, np.nan):.3f} |")
    if report["speed"]:
        s = report["speed"]
        lines += [
            "",
            f"A 1,000-row table (10 features) fitted and 1,000 rows predicted, {s['threads']} threads: "
            f"median {s['median_s']:.2f} s, slowest {s['max_s']:.2f} s over repeats (first call, loading "
            f"the weights: {s['first_s']:.2f} s).",
        ]
    lines += [
        "",
        "| table | split | zero-shot | catboost | hgb | npt | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['table']} | {r['split']} | {r['prior']:.4g} | {r['catboost']:.4g} | {r['hgb']:.4g} | "
            f"{r['npt']:.4g} | {r['seconds']:.1f} |"
        )
    (out / "pretrained_eval.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", default=",".join(ds.TABLES))
    p.add_argument("--splits", type=int, default=3)
    p.add_argument("--speed", action="store_true", help="only the 1,000-row timing (run it alone)")
    p.add_argument("--reference", type=Path, default=REFERENCE)
    p.add_argument("--out-dir", type=Path, default=OUT)
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args(argv)
    command = "python benchmarks/pretrained_eval.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    a.out_dir.mkdir(parents=True, exist_ok=True)
    key_now = {"weights": weights_hash(), "src": ds.src_hash()}
    if a.speed:
        with (a.out_dir / "speed.jsonl").open("a") as f:
            f.write(json.dumps({"key": key_now, "command": command, **speed()}) + "\n")
    elif not a.report_only:
        jsonl = a.out_dir / "pretrained_eval.jsonl"
        done = {json.dumps(r["key"], sort_keys=True) for r in read_lines(jsonl)}
        for table in [t for t in a.tables.split(",") if t]:
            for split in range(a.splits):
                key = {**key_now, "table": table, "split": split}
                if json.dumps(key, sort_keys=True) in done:
                    continue
                try:
                    result = cell(table, split)
                except ValueError as err:  # e.g. more classes than the model's slots
                    result = {"skipped": str(err)}
                print(
                    table, split, json.dumps({k: v for k, v in result.items() if k != "metrics"}), flush=True
                )
                with jsonl.open("a") as f:
                    f.write(
                        json.dumps(
                            {
                                "key": key,
                                "table": table,
                                "split": split,
                                "command": command,
                                "result": ds.jsonable(result),
                            }
                        )
                        + "\n"
                    )
    write_report(a.out_dir, command, a.reference)


if __name__ == "__main__":
    main()
