#!/usr/bin/env python
"""The prior-fitted NPT on the development suite (issue 51): ``NPTClassifier(init="pretrained")`` /
``NPTRegressor(init="pretrained")``, zero-shot or fine-tuned, against CatBoost and
HistGradientBoosting at their defaults and the from-scratch NPT, and the seconds a 1,000-row table
takes.

    python benchmarks/pretrained_eval.py                  # zero-shot, every table, 3 splits (resumes)
    python benchmarks/pretrained_eval.py --variants fine_tuned --splits 1 --tables boston,titanic
    python benchmarks/pretrained_eval.py --views 16 --compare catboost,hgb     # more views, two baselines
    python benchmarks/pretrained_eval.py --speed          # the 1,000-row timing; run it alone
    python benchmarks/pretrained_eval.py --report-only

Each (table, split) of the development suite runs in this process on 2 threads; a table with more
classes than the model's class slots fails and is left out. Records (``pretrained_eval.jsonl``
beside the report ``results/pretrained/pretrained_eval.md``) are keyed on the cell, the code and
the hash of the shipped weights. The other models' scores are their default records in
``--reference`` (made by ``tabular_defaults.py``; NPT's at the commit the report names).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from pathlib import Path
from typing import Any

import devsuite as ds
import harness as h
import numpy as np
import pandas as pd

REFERENCE = h.RESULTS / "suite32" / "tabular_defaults.jsonl"
COMPARED = ("catboost", "hgb", "npt")  # the default comparison (--compare)
VARIANTS = ("zero_shot", "fine_tuned")
TASKS = ("classification", "regression")  # the report's summary by kind of table (_task)
FINE_TUNE_STEPS = 300  # a ceiling: the fine-tuning stops on its held-out rows (the adaptive schedule)


def cell(table: str, split: int, variant: str, views: int | None = None, **_: Any) -> dict[str, Any]:
    """Fit (zero-shot or fine-tuned) on the split's training rows; score on its test rows."""
    import torch

    from semiparam import NPTClassifier, NPTRegressor

    torch.set_num_threads(ds.N_THREADS)
    task = ds.TABLES[table].task
    X_tr, X_te, y_tr, y_te = ds.split_table(table, split)
    n_classes = 0 if task == "regression" else int(pd.concat([y_tr, y_te]).nunique())
    steps = {"zero_shot": None, "fine_tuned": FINE_TUNE_STEPS}[variant]
    model = (NPTRegressor if task == "regression" else NPTClassifier)(
        init="pretrained", max_steps=steps, n_estimators=views, random_state=ds.split_seed(table, split)
    )
    try:
        with h.measure() as m:
            model.fit(X_tr, y_tr)
            metrics = ds.predict_and_score(model, task, X_te, y_te, n_classes)
    except ValueError as err:  # e.g. more classes than the model's slots
        return {"ok": False, "error": str(err)}
    score = metrics[ds.primary_metric(task)]
    out = {"metrics": metrics, "score": score, "seconds": m.seconds, "n_train": len(X_tr)}
    if steps:  # the steps trained, and whether one beat the pretrained weights on the held-out rows
        out |= {"steps": model.history_.n_steps, "best_step": model.history_.best_step}
    return out


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
    rest = times[1:]
    spread = {"median_s": statistics.median(rest), "max_s": max(rest)}
    return {**spread, "first_s": times[0], "threads": ds.N_THREADS}


def _task(record: dict[str, Any]) -> str:
    """A record's kind of table: "regression", else "classification"."""
    return "regression" if ds.TABLES[record["settings"]["table"]].task == "regression" else "classification"


def reference_scores(path: Path, compared: tuple[str, ...]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The compared models' records at their defaults (no overrides), by (model, table, split); of
    several, the last in the file."""
    out = {}
    for r in h.read_lines(path):
        s = r["settings"]
        if s["model"] in compared and not s.get("overrides") and r["ok"]:
            out[(s["model"], s["table"], s["split"])] = r
    return out


def summarise(
    records: list[dict[str, Any]], refs: dict, compared: tuple[str, ...] = COMPARED
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per (table, split) with every compared model's record: the scores, and the mean ranks
    among the prior-fitted and the compared models, the share of cells where the variant wins, the
    geometric-mean score ratios, and the fit seconds (beside the from-scratch NPT's when compared)."""
    rows, ranks = [], {m: [] for m in ("prior", *compared)}
    wins, ratios = {m: [] for m in compared}, {m: [] for m in compared}
    for r in sorted(records, key=lambda r: (r["settings"]["table"], r["settings"]["split"])):
        table, split = r["settings"]["table"], r["settings"]["split"]
        found = {m: refs.get((m, table, split)) for m in compared}
        if not r["ok"] or any(v is None for v in found.values()):
            continue
        scores = {"prior": r["score"], **{m: v["score"] for m, v in found.items()}}
        for m, v in ds.rank_scores(scores).items():
            ranks[m].append(v)
        for m in compared:
            wins[m].append(scores["prior"] < scores[m])
            ratios[m].append(scores["prior"] / scores[m])
        rows.append({"table": table, "split": split, **scores, "seconds": r["seconds"]})
        if "steps" in r:
            rows[-1] |= {"steps": r["steps"], "kept": r["best_step"] is None}
        if npt := found.get("npt"):
            rows[-1] |= {
                "npt_seconds": npt["fit_seconds"] + npt["predict_seconds"],
                "npt_commit": npt["code"]["commit"][:7],
            }
    summary = {
        "cells": len(rows),
        "mean_rank": {m: float(np.mean(v)) for m, v in ranks.items() if v},
        "win_rate": {m: float(np.mean(v)) for m, v in wins.items() if v},
        "geo_mean_ratio": {m: float(np.exp(np.mean(np.log(v)))) for m, v in ratios.items() if v},
        "seconds": float(sum(r["seconds"] for r in rows)),
        "npt_seconds": float(sum(r.get("npt_seconds", 0.0) for r in rows)),
    }
    return rows, summary


def report(
    records: list[dict[str, Any]], refs: dict, reference: str, compared: tuple[str, ...], views: int | None
) -> tuple[list[str], dict[str, Any]]:
    from semiparam.pretraining import weights_card, weights_hash

    card, weights = weights_card(), weights_hash()
    cells = [r for r in records if "variant" in r["settings"] and r["settings"].get("views") == views]

    def of(variant: str, task: str | None = None) -> list[dict[str, Any]]:
        return [r for r in cells if r["settings"]["variant"] == variant and task in (None, _task(r))]

    by_variant = {v: summarise(of(v), refs, compared) for v in VARIANTS}
    by_task = {v: {t: summarise(of(v, t), refs, compared)[1] for t in TASKS} for v in VARIANTS}
    sp = next((r for r in records if r["settings"].get("speed") and r["ok"]), None)
    commits = sorted({r["npt_commit"] for rows, _ in by_variant.values() for r in rows if "npt_commit" in r})
    hours = ", ".join(f"{v / 3600:.2f} h on {k}" for k, v in sorted(card["seconds_by_device"].items()))
    lines = [
        f"Weights `{weights}` ({card['steps']:,} pretraining steps, {hours}); "
        f"views: {views or 'the default'}.",
        "",
        "Zero-shot: the training rows are the context, nothing is trained. Fine-tuned: "
        f"`max_steps={FINE_TUNE_STEPS}` (a ceiling; it stops on a held-out tenth of the rows). "
        f"{', '.join(compared)}: their default records in `{reference}`"
        + (f" (NPT's, the from-scratch defaults, made at commit(s) {', '.join(commits)})" if commits else "")
        + ". Scores: RMSE (regression) or log loss (classification), lower is better; ranks among "
        "the prior-fitted and the compared models per (table, split). Seconds: fit and predict, 2 threads.",
    ]
    run = f"python benchmarks/pretrained_eval.py --reference {reference}" + (
        f" --views {views}" if views else ""
    )
    made = [f"`{run} --speed` (the timing)", f"`{run}` (zero-shot)"]
    if tuned := sorted({r["table"] for r in by_variant["fine_tuned"][0]}):
        splits = 1 + max(r["split"] for r in by_variant["fine_tuned"][0])
        made.append(
            f"`{run} --variants fine_tuned --splits {splits} --tables {','.join(tuned)}` (fine-tuned)"
        )
    lines += ["", "Made by " + "; ".join(made) + ", in this order, alone on the machine."]
    if sp:
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
            f"Seconds, all cells: {summary['seconds']:.0f}",
        ]
        lines[-1] += f" (from-scratch NPT: {summary['npt_seconds']:.0f})." if commits else "."
        if steps := [r["steps"] for r in rows if "steps" in r]:
            kept = sum(r["kept"] for r in rows if "steps" in r)
            lines[-1] += (
                f" Steps trained: median {statistics.median(steps):.0f}, most {max(steps)}; in {kept} "
                f"of {len(steps)} cells no step beat the pretrained weights on the held-out rows (kept)."
            )
        head = "| tables | model | mean rank | it beats the model | geo-mean score ratio (it / the model) |"
        lines += ["", head, "| --- | --- | --- | --- | --- |"]
        for label, s in {"all": summary, **by_task[variant]}.items():
            if not s["cells"]:
                continue
            label = f"{label} ({s['cells']} cells)"
            lines.append(f"| {label} | prior-fitted NPT, {name} | {s['mean_rank']['prior']:.2f} | - | - |")
            for m in compared:
                rank, win, ratio = s["mean_rank"][m], s["win_rate"][m], s["geo_mean_ratio"][m]
                lines.append(f"| {label} | {m} | {rank:.2f} | {win:.0%} | {ratio:.3f} |")
        extra = ["npt seconds"] if commits else []
        lines += ["", *h.md_table(["table", "split", "it", *compared, "seconds", *extra], [
            [r["table"], r["split"], *(r[m] for m in ("prior", *compared)), r["seconds"],
             *([r.get("npt_seconds")] if commits else [])] for r in rows
        ])]  # fmt: skip
    variants = {v: {"summary": s, "rows": rows, **by_task[v]} for v, (rows, s) in by_variant.items()}
    data = {"weights": weights, "steps": card["steps"], "seconds_by_device": card["seconds_by_device"]}
    return lines, {**data, "compared": compared, "views": views, "variants": variants, "speed": sp}


def main(argv: list[str] | None = None) -> None:
    from semiparam.pretraining import weights_hash

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", default=",".join(ds.TABLES))
    p.add_argument("--splits", type=int, default=3)
    p.add_argument(
        "--variants", default="zero_shot", help=f"of {', '.join(VARIANTS)} (fine_tuned: run it alone)"
    )
    p.add_argument("--speed", action="store_true", help="only the 1,000-row timing (run it alone)")
    p.add_argument("--reference", type=Path, default=REFERENCE)
    p.add_argument("--compare", default=",".join(COMPARED), help="models of --reference to compare with")
    p.add_argument("--views", type=int, help="n_estimators: the views averaged (default: the estimator's)")
    p.add_argument("--out-dir", type=Path, default=h.RESULTS / "pretrained")
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args(argv)
    records = h.Records(a.out_dir / "pretrained_eval.jsonl")
    weights = weights_hash()
    if a.speed:  # measured again at every call: the last one is reported
        records.add({"speed": True, "weights": weights}, speed())
    elif not a.report_only:
        tables = [t for t in a.tables.split(",") if t]
        for variant, table, split in itertools.product(a.variants.split(","), tables, range(a.splits)):
            settings = {"table": table, "split": split, "variant": variant, "weights": weights}
            if a.views is not None:
                settings["views"] = a.views
            rec = records.run(settings, lambda s: cell(**s))
            print(table, split, variant, rec.get("score", rec.get("error")), flush=True)
    current = [r for r in records.current() if r["settings"]["weights"] == weights]
    compared = tuple(m for m in a.compare.split(",") if m)
    refs = reference_scores(a.reference, compared)
    lines, data = report(current, refs, os.path.relpath(a.reference, h.ROOT), compared, a.views)
    title = "The prior-fitted NPT on the development suite (issue 51)"
    h.write_report(a.out_dir / "pretrained_eval", title, lines, data, records=current)


if __name__ == "__main__":
    main()
