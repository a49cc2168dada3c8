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
VARIANTS = ("zero_shot", "fine_tuned")
FINE_TUNE_STEPS = 2000  # a ceiling: the fine-tuning stops on its held-out rows (the adaptive schedule)


def weights_hash() -> str:
    from semiparam.pretraining import weights_hash

    return weights_hash()


def cell(table: str, split: int, variant: str) -> dict[str, Any]:
    import torch

    from semiparam import NPTClassifier, NPTRegressor

    torch.set_num_threads(ds.N_THREADS)
    spec = ds.TABLES[table]
    X_tr, X_te, y_tr, y_te = ds.split_table(table, split)
    reg = spec.task == "regression"
    n_classes = 0 if reg else int(pd.concat([y_tr, y_te]).nunique())
    steps = {"zero_shot": None, "fine_tuned": FINE_TUNE_STEPS}[variant]
    model = (NPTRegressor if reg else NPTClassifier)(
        init="pretrained", max_steps=steps, random_state=ds.split_seed(table, split)
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
    for r in ds.read_lines(path):
        if r.get("model") in COMPARED and r.get("tag") == "default" and r.get("score") is not None:
            out[(r["model"], r["table"], r["split"])] = r
    return out


def summarise(records: list[dict[str, Any]], refs: dict) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per (table, split) with every compared model's record: the scores, and the mean ranks
    among the four models, the share of cells where the variant wins, the geometric-mean score
    ratios, and the fit seconds beside the from-scratch NPT's."""
    rows, ranks = [], {m: [] for m in ("prior", *COMPARED)}
    wins, ratios = {m: [] for m in COMPARED}, {m: [] for m in COMPARED}
    for r in sorted(records, key=lambda r: (r["cell"]["table"], r["cell"]["split"])):
        if "score" not in r["result"]:
            continue
        table, split = r["cell"]["table"], r["cell"]["split"]
        found = {m: refs.get((m, table, split)) for m in COMPARED}
        if any(v is None for v in found.values()):
            continue
        scores = {"prior": r["result"]["score"], **{m: v["score"] for m, v in found.items()}}
        for m, v in ds.rank_scores(scores).items():
            ranks[m].append(v)
        for m in COMPARED:
            wins[m].append(scores["prior"] < scores[m])
            ratios[m].append(scores["prior"] / scores[m])
        rows.append(
            {
                "table": table,
                "split": split,
                **scores,
                "seconds": r["result"]["seconds"],
                "npt_seconds": found["npt"]["fit_seconds"] + found["npt"].get("predict_seconds", 0.0),
                "npt_commit": found["npt"]["code"]["git_head"][:7],
            }
        )
    summary = {
        "cells": len(rows),
        "mean_rank": {m: float(np.mean(v)) for m, v in ranks.items() if v},
        "win_rate": {m: float(np.mean(v)) for m, v in wins.items() if v},
        "geo_mean_ratio": {m: float(np.exp(np.mean(np.log(v)))) for m, v in ratios.items() if v},
        "seconds": float(sum(r["seconds"] for r in rows)),
        "npt_seconds": float(sum(r["npt_seconds"] for r in rows)),
    }
    return rows, summary


def write_report(out: Path, command: str, reference: Path) -> None:
    from semiparam.pretraining import weights_card

    key_now = {"weights": weights_hash(), "src": ds.src_hash()}
    current = [
        r for r in ds.read_lines(out / "pretrained_eval.jsonl") if r["key"] == {**key_now, **r["cell"]}
    ]
    refs = reference_scores(reference)
    card = weights_card()
    by_variant = {v: summarise([r for r in current if r["cell"]["variant"] == v], refs) for v in VARIANTS}
    speed_now = [s for s in ds.read_lines(out / "speed.jsonl") if s["key"] == key_now]
    report = {"command": command, "code": ds.code_version(), "machine": ds.machine(), "weights": key_now,
              "steps": card["steps"], "seconds_by_device": card["seconds_by_device"],
              "variants": {v: {"summary": s, "rows": rows} for v, (rows, s) in by_variant.items()},
              "speed": speed_now[-1] if speed_now else None}  # fmt: skip
    (out / "pretrained_eval.json").write_text(json.dumps(ds.jsonable(report), indent=1) + "\n")
    commands = sorted({r["command"] for r in current} | {s["command"] for s in speed_now})
    hours = ", ".join(f"{v / 3600:.2f} h on {k}" for k, v in sorted(card["seconds_by_device"].items()))
    commits = sorted({r["npt_commit"] for rows, _ in by_variant.values() for r in rows})
    lines = [
        "# The prior-fitted NPT on the development suite (issue 51)",
        "",
        f"Measured by: {', '.join(f'`{c}`' for c in commands)}; this report: `{command}`; commit "
        f"`{ds.code_version().get('git_head')}`; weights `{key_now['weights']}` ({card['steps']:,} "
        f"pretraining steps, {hours}); machine: {ds.machine().get('cpu')}. Generated from "
        "`pretrained_eval.json`.",
        "",
        "Zero-shot: the training rows are the context, nothing is trained. Fine-tuned: "
        f"`max_steps={FINE_TUNE_STEPS}` (a ceiling; it stops on a held-out tenth of the rows). CatBoost and "
        f"HGB: their default records in `{reference.relative_to(reference.parents[2])}`; NPT: the "
        f"from-scratch defaults' records there, made at commit(s) {', '.join(commits) or '-'}, alone on "
        "this machine. Scores: RMSE (regression) or log loss (classification), lower is better; "
        "ranks among the four models per (table, split). Seconds: fit and predict, 2 threads.",
    ]
    if report["speed"]:
        sp = report["speed"]
        lines += [
            "",
            f"A 1,000-row table (10 features) fitted zero-shot and 1,000 rows predicted, {sp['threads']} "
            f"threads, alone: median {sp['median_s']:.2f} s, slowest {sp['max_s']:.2f} s (the first "
            f"call, which loads the weights: {sp['first_s']:.2f} s).",
        ]
    for variant, (rows, summary) in by_variant.items():
        if not rows:
            continue
        name = variant.replace("_", "-")
        lines += [
            "",
            f"## {name} ({summary['cells']} cells)",
            "",
            f"Seconds, all cells: {summary['seconds']:.0f} (from-scratch NPT: {summary['npt_seconds']:.0f}).",
            "",
            "| model | mean rank | it beats the model | geo-mean score ratio (it / the model) |",
            "| --- | --- | --- | --- |",
            f"| prior-fitted NPT, {name} | {summary['mean_rank']['prior']:.2f} | - | - |",
        ]
        for m in COMPARED:
            rank, win = summary["mean_rank"][m], summary["win_rate"][m]
            lines.append(f"| {m} | {rank:.2f} | {win:.0%} | {summary['geo_mean_ratio'][m]:.3f} |")
        lines += ["", "| table | split | it | catboost | hgb | npt | seconds | npt seconds |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        for r in rows:
            scores = " | ".join(f"{r[m]:.4g}" for m in ("prior", *COMPARED))
            lines.append(
                f"| {r['table']} | {r['split']} | {scores} | {r['seconds']:.1f} | {r['npt_seconds']:.1f} |"
            )
    (out / "pretrained_eval.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", default=",".join(ds.TABLES))
    p.add_argument("--splits", type=int, default=3)
    p.add_argument(
        "--variants", default="zero_shot", help=f"of {', '.join(VARIANTS)} (fine_tuned: run it alone)"
    )
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
        done = {json.dumps(r["key"], sort_keys=True) for r in ds.read_lines(jsonl)}
        cells = [
            {"table": t, "split": k, "variant": v}
            for v in a.variants.split(",")
            for t in a.tables.split(",")
            if t
            for k in range(a.splits)
        ]
        for c in cells:
            key = {**key_now, **c}
            if json.dumps(key, sort_keys=True) in done:
                continue
            try:
                result = cell(c["table"], c["split"], c["variant"])
            except ValueError as err:  # e.g. more classes than the model's slots
                result = {"skipped": str(err)}
            print(json.dumps(c), json.dumps({k: v for k, v in result.items() if k != "metrics"}), flush=True)
            record = {"key": key, "cell": c, "command": command, "result": ds.jsonable(result)}
            with jsonl.open("a") as f:
                f.write(json.dumps(record) + "\n")
    write_report(a.out_dir, command, a.reference)


if __name__ == "__main__":
    main()
