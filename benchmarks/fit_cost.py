#!/usr/bin/env python
"""What a default fit costs (issue 47): NPT, SPIN and ``auto`` at their defaults against CatBoost on
the development suite's core tables, fit seconds measured in the same run, the steps the neural
models ran and their seconds per step, the test scores (so a speed change is seen beside the
quality it keeps), and a profile of where a step's time goes.

    python benchmarks/fit_cost.py                            # the 14 core tables, 1 split
    python benchmarks/fit_cost.py --models npt,spin,catboost,npt-in-turn,spin-in-turn
    python benchmarks/fit_cost.py --models auto,catboost --tables all --profile-tables '' \
        --out-dir benchmarks/results/fit_cost_auto                # the whole suite, 1 split
    python benchmarks/fit_cost.py --device cuda --models npt,spin --timeout 90 \
        --out-dir benchmarks/results/fit_cost_h100             # on a GPU (benchmarks/device_check.sh)
    python benchmarks/fit_cost.py --report-only

Each (table, model, split) cell runs in its own process with 2 threads; its record in
``<out-dir>/fit_cost.jsonl`` holds while the settings and the code do, so a stopped run resumes (a
failed cell runs again). A profile cell fits one member of NPT or SPIN for ``--profile-steps`` steps
under ``torch.profiler`` and ``cProfile``. The report (``fit_cost.md``, ``.json``): totals and ratios
to CatBoost over the cells where every model ran, where the neural models' steps go, each table's
seconds, steps and scores, the profiles, and the cells that failed. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import devsuite as ds
import harness as h
import numpy as np

MODELS = ("npt", "spin", "catboost")
# the neural defaults with one setting changed, for a ratio measured in the same run (--models)
IN_TURN = "the members one after another on both threads (`concurrent_members='never'`)"
DOT = "NPT's row attention the paper's dot product (`row_similarity='dot'`; the cpu preset's: cosine)"
LONGER = (
    "a longer plateau wait, in batches of 512 rows above 512 (`patience=12`, `full_batch_rows=512`; "
    "the cpu preset's: 8 and 1,024)"
)
VARIANTS = {  # name -> (model, estimator overrides, what differs from the model's defaults)
    "npt-in-turn": ("npt", {"train_options": {"concurrent_members": "never"}}, IN_TURN),
    "spin-in-turn": ("spin", {"train_options": {"concurrent_members": "never"}}, IN_TURN),
    "npt-dot": ("npt", {"model_options": {"row_similarity": "dot"}}, DOT),
    "auto-dot": ("auto", {"model_options": {"npt": {"row_similarity": "dot"}}}, DOT),
    "auto-p12fb512": ("auto", {"train_options": {"patience": 12, "full_batch_rows": 512}}, LONGER),
}
ALL_MODELS = (*MODELS, "auto", *VARIANTS)  # auto: TableClassifier / TableRegressor, NPT and SPIN members
PROFILE_TABLES = ("boston", "adult")  # a small table and a medium one
# op-name fragments -> the category a profile reports them under (first match wins)
CATEGORIES = (
    ("attention", ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")),
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear")),
    ("random draws", ("aten::random_", "aten::bernoulli", "aten::uniform_", "aten::rand")),
)


def cell(kind: str, table: str, model: str, device: str, split: int = 0, steps: int = 0, **_: Any) -> dict:
    """A fit of ``model`` (a devsuite model or a variant) at its defaults, or a profile."""
    load = os.getloadavg()[0]  # the machine's load as the cell starts (2: both cores busy)
    if kind == "profile":
        return {**profile_cell(table, model, steps, device), "load_at_start": load}
    base, overrides, _ = VARIANTS.get(model, (model, {}, ""))
    overrides = {"device": device, **overrides} if base in ds.NEURAL_MODELS else {}
    return {**ds.run_cell(table, base, split, overrides), "load_at_start": load}


def profile_cell(table: str, model: str, steps: int, device: str) -> dict[str, Any]:
    """One member of ``model`` fitted for ``steps`` steps on ``table`` (split 0) under
    torch.profiler and cProfile: where a step's time goes."""
    import cProfile
    import pstats

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(ds.N_THREADS)
    X_tr, _, y_tr, _ = ds.split_table(table, 0)
    overrides = {"n_estimators": 1, "max_steps": steps, "device": device}
    est = ds.make_model(model, ds.TABLES[table].task, ds.split_seed(table, 0), overrides)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    python = cProfile.Profile()
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        python.enable()
        est.fit(X_tr, y_tr)
        python.disable()
    wall = time.perf_counter() - start
    events = prof.events()

    def outer_step(e: Any) -> bool:  # an optimiser step not inside another (Lookahead wraps LAMB)
        parent = e.cpu_parent
        return e.name.startswith("Optimizer.step") and not (
            parent and parent.name.startswith("Optimizer.step")
        )

    # the training steps' span: from the end of the first optimiser step to the end of the last
    # (so encoding, context encoding and calibration outside training are left out)
    marks = sorted((e for e in events if outer_step(e)), key=lambda e: e.time_range.start)
    begin, end = marks[0].time_range.end, marks[-1].time_range.end
    span_steps, span_us = len(marks) - 1, end - begin
    self_us: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    backward_us = optimizer_us = 0.0
    for ev in events:
        if ev.time_range.start < begin or ev.time_range.end > end:
            continue
        if outer_step(ev):
            optimizer_us += ev.cpu_time_total
        if ev.name.startswith(("Optimizer.", "autograd::engine", "ProfilerStep")):
            if ev.name.startswith("autograd::engine::evaluate") and ev.cpu_parent is None:
                backward_us += ev.cpu_time_total
            continue  # labels around other ops: their ops are counted
        category = next((c for c, keys in CATEGORIES if any(k in ev.name for k in keys)), "other ops")
        self_us[category] += ev.self_cpu_time_total
        by_op[ev.name] += ev.self_cpu_time_total
    ops_us = sum(self_us.values())
    functions = sorted(
        (
            (row[3], f"{Path(func[0]).name}:{func[1]}({func[2]})")
            for func, row in pstats.Stats(python).stats.items()  # type: ignore[attr-defined]
            if "semiparam" in func[0]
        ),
        reverse=True,
    )[:10]
    return {
        "steps": est.history_.n_steps,
        "fit_seconds": wall,
        "ms_per_step": 1e-3 * span_us / span_steps,
        "parameters": int(sum(p.numel() for p in est.learner_.module.parameters())),
        # shares of the training steps' wall time under the profiler (which slows a step)
        "share": {
            **{c: us / span_us for c, us in sorted(self_us.items())},
            "python and dispatch (no op running)": max(span_us - ops_us, 0.0) / span_us,
            "backward (total, overlaps the above)": backward_us / span_us,
            "optimiser step (total, overlaps the above)": optimizer_us / span_us,
        },
        "top_ops_ms_per_step": [
            (name, 1e-3 * us / span_steps) for name, us in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]
        ],
        "top_functions_cumulative_s": [(name, t) for t, name in functions],
    }


def member_steps(r: dict[str, Any]) -> list[int]:
    return [int(m["steps"]) for m in (r.get("history") or {}).get("members") or []]


def stopping_lines(fits: list[dict[str, Any]], models: list[str]) -> list[str]:
    """Where the neural models' steps went, over every member of their fits: the steps after the
    member's best checkpoint (which its prediction does not use), those of the anneal, the members
    whose best checkpoint came in the anneal, and the share of a member's seconds spent validating."""
    lines = [
        "",
        "## Where the steps go (every member of the fits above)",
        "",
        "| model | members | steps | after the best checkpoint | in the anneal "
        "| best checkpoint in the anneal | validation share of the seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in models:
        members = [x for r in fits if r["model"] == m for x in (r.get("history") or {}).get("members") or []]
        if not members or "best_step" not in members[0]:
            continue
        steps = sum(x["steps"] for x in members)
        after = sum(x["steps"] - 1 - x["best_step"] for x in members)
        annealed = [x for x in members if x.get("anneal_start") is not None]
        anneal = sum(x["steps"] - x["anneal_start"] for x in annealed)
        best_in = sum(x["best_step"] >= x["anneal_start"] for x in annealed)
        seconds = sum(x.get("seconds") or 0.0 for x in members)
        validating = sum(x.get("eval_seconds") or 0.0 for x in members)
        lines.append(
            f"| {m} | {len(members)} | {steps:,} | {after / steps:.1%} | {anneal / steps:.1%} "
            f"| {best_in} of {len(annealed)} | {validating / seconds if seconds else math.nan:.1%} |"
        )
    return lines


def profile_lines(profiles: list[dict[str, Any]]) -> list[str]:
    lines = [
        "",
        "## Where a step's time goes (torch.profiler + cProfile; one member, split 0)",
        "",
        "Shares are of the training steps' wall time under the profiler (which slows a step; the",
        "steps' span runs from the first optimiser step's end to the last's, validation included).",
        "'python and dispatch' is the time no op accounts for; backward and the optimiser step are",
        "totals that overlap the op categories.",
    ]
    for r in sorted(profiles, key=lambda r: (r["table"], r["model"])):
        lines += [
            "",
            f"### {r['model']} on {r['table']} ({r['device']}): {r['steps']} steps, "
            f"{r['ms_per_step']:.1f} ms/step profiled, {r['parameters']:,} parameters",
            "",
            "| part | share |",
            "|---|---|",
            *(f"| {k} | {v:.1%} |" for k, v in r["share"].items()),
            "",
            "Top ops (self ms per step): "
            + "; ".join(f"`{n}` {ms:.2f}" for n, ms in r["top_ops_ms_per_step"]),
            "",
            "Library functions, cumulative seconds of the whole fit: "
            + "; ".join(f"`{n}` {t:.2f}" for n, t in r["top_functions_cumulative_s"]),
        ]
    return lines


def report(records: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """The report's lines and data from harness records (their cell in ``settings``)."""
    rows = [{**r["settings"], **r} for r in records]
    fits = [r for r in rows if r["ok"] and r["kind"] == "fit"]
    profiles = [r for r in rows if r["ok"] and r["kind"] == "profile"]
    by_cell = {(r["table"], r["model"], r["split"]): r for r in fits}
    tables = [t for t in ds.TABLES if any(k[0] == t for k in by_cell)]
    splits = sorted({k[2] for k in by_cell})
    models = [m for m in ALL_MODELS if any(k[1] == m for k in by_cell)]
    complete = [(t, s) for t in tables for s in splits if all((t, m, s) in by_cell for m in models)]
    totals = {m: sum(by_cell[(t, m, s)]["fit_seconds"] for t, s in complete) for m in models}
    ratio = {m: totals[m] / totals["catboost"] for m in models if totals.get("catboost")}
    ranks, log_ratios = defaultdict(list), defaultdict(list)
    for t, s in complete:
        scores = {m: by_cell[(t, m, s)]["score"] for m in models}
        for m, rank in ds.rank_scores(scores).items():
            ranks[m].append(rank)
        for m in models if "catboost" in scores else ():
            log_ratios[m].append(math.log(scores[m] / scores["catboost"]))
    summary = {
        "cells": len(complete),
        "tables": len({t for t, _ in complete}),
        "splits": splits,
        "fit_seconds": totals,
        "ratio_to_catboost": ratio,
        "mean_rank": {m: float(np.mean(v)) for m, v in ranks.items()},
        "geomean_score_ratio_to_catboost": {m: float(np.exp(np.mean(v))) for m, v in log_ratios.items()},
    }
    loads = [r["load_at_start"] for r in rows if r.get("load_at_start") is not None] or [math.nan]
    variants = [m for m in models if m in VARIANTS]
    lines = [
        "Each cell ran in its own process with 2 threads; devices are named per cell. Lower scores are",
        "better (RMSE for regression, log loss for classification).",
        "",
        f"One-minute load average at the cells' starts: {min(loads):.2f} to {max(loads):.2f} "
        "(2 means both cores busy with the cell before).",
        "",
        "Devices of the neural models' cells: " + ", ".join(sorted({r["device"] for r in rows})) + ".",
        "",
        "## Totals over the cells where every model ran",
        "",
        f"{summary['cells']} cells ({summary['tables']} tables x splits {splits}).",
        "",
    ]
    if variants:
        lines += [
            "NPT and SPIN fit their members at once, in threads of one PyTorch thread each "
            "(`concurrent_members`). Variants, in the same run, each its model's defaults but: "
            + "; ".join(f"`{m}`: {VARIANTS[m][2]}" for m in variants)
            + ".",
            "",
        ]
    lines += [
        "| model | fit seconds | x CatBoost | mean rank | geo-mean score / CatBoost |",
        "|---|---|---|---|---|",
    ]
    for m in models:
        rank, geo = summary["mean_rank"].get(m, math.nan), summary["geomean_score_ratio_to_catboost"].get(m)
        lines.append(
            f"| {m} | {totals[m]:.1f} | {ratio.get(m, math.nan):.1f} | {rank:.2f} | {geo or math.nan:.4f} |"
        )
    lines += stopping_lines(fits, models)
    lines += [
        "",
        "## Per table and split",
        "",
        "Steps: per ensemble member. ms/step: the fit's seconds over all members' steps together "
        "(encoding, validation and context encoding included).",
        "",
        "| table | split | device | "
        + " | ".join(f"{m} s" for m in models)
        + " | npt steps | npt ms/step | spin steps | spin ms/step | "
        + " | ".join(f"{m} score" for m in models)
        + " |",
        "|" + "---|" * (3 + 2 * len(models) + 4),
    ]
    for t in tables:
        for s in splits:
            cells = {m: by_cell.get((t, m, s)) for m in models}
            device = next((c["device"] for m, c in cells.items() if c and m in ds.NEURAL_MODELS), "cpu")
            row = [t, str(s), device, *(f"{c['fit_seconds']:.1f}" if c else "" for c in cells.values())]
            for m in ("npt", "spin"):
                steps = member_steps(cells[m]) if cells.get(m) else []
                per_step = f"{1e3 * cells[m]['fit_seconds'] / sum(steps):.1f}" if steps else ""
                row += [",".join(map(str, steps)), per_step]
            row += [f"{c['score']:.4g}" if c else "" for c in cells.values()]
            lines.append("| " + " | ".join(row) + " |")
    if profiles:
        lines += profile_lines(profiles)
    failed = [r for r in rows if not r["ok"]]
    if failed:  # cells whose last run failed: said, not left out
        lines += ["", "## Cells whose last run failed", ""]
        lines += h.md_table(
            ["cell", "device", "error (last line)"],
            [
                (f"{r['kind']} {r['table']} {r['model']} split {r.get('split', 0)}", r["device"],
                 str(r.get("error")).split(" | ")[-1][:200].replace("|", "/"))
                for r in failed
            ],
        )  # fmt: skip
    internal = ("key", "code", "time", "settings", "history", "resolved")
    data = {
        "summary": summary,
        "fits": [
            {k: v for k, v in r.items() if k not in internal} | {"member_steps": member_steps(r)}
            for r in fits
        ],
        "profiles": [{k: v for k, v in r.items() if k not in internal} for r in profiles],
        "failed": [{**r["settings"], "error": r.get("error")} for r in failed],
    }
    return lines, data


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", default=",".join(ds.CORE_TABLES), help="default: the 14 core tables; all: 32")
    p.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(ALL_MODELS)}")
    p.add_argument("--splits", type=int, default=1)
    p.add_argument("--device", default="cpu", help="where NPT and SPIN train (CatBoost: the CPU)")
    p.add_argument("--profile-tables", default=",".join(PROFILE_TABLES), help="'' for none")
    p.add_argument("--profile-steps", type=int, default=60)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per cell")
    p.add_argument("--out-dir", type=Path, default=h.RESULTS)
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    if unknown := [m for m in models if m not in ALL_MODELS]:
        raise SystemExit(f"--models: unknown {unknown}; choose from {', '.join(ALL_MODELS)}")
    records = h.Records(a.out_dir / "fit_cost.jsonl")
    run = partial(h.run_cell, "fit_cost:cell", timeout=a.timeout, threads=ds.N_THREADS)
    # the profiles first (short), then table by table, so that a run cut short still has whole rows
    cells = [("profile", t, m, 0) for t in a.profile_tables.split(",") if t for m in ds.FAMILIES]
    tables = list(ds.TABLES) if a.tables == "all" else a.tables.split(",")
    cells += [("fit", t, m, s) for s in range(a.splits) for t in tables if t for m in models]
    for kind, table, model, split in [] if a.report_only else cells:
        settings = {"kind": kind, "table": table, "model": model, "device": a.device}
        settings |= {"steps": a.profile_steps} if kind == "profile" else {"split": split}
        base = VARIANTS.get(model, (model,))[0]
        if base not in ds.NEURAL_MODELS:  # a baseline's record holds while its library's version does
            settings["version"] = ds.library_version(base)
        rec = records.run(settings, run, code_dependent="version" not in settings, retry_errors=True)
        print(
            f"[{kind}] {table} {model} split {split}: ok {rec['ok']}, {rec.get('fit_seconds', 0):.1f} s",
            flush=True,
        )
    current = records.current()
    lines, data = report(current)
    title = "What a default fit costs (NPT, SPIN, CatBoost)"
    print(f"wrote {h.write_report(a.out_dir / 'fit_cost', title, lines, data, records=current)}")


if __name__ == "__main__":
    main()
