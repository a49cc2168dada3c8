#!/usr/bin/env python
"""What a default fit costs: NPT, SPIN and CatBoost at their defaults on the development suite
(``benchmarks/devsuite.py``), fit seconds measured in the same run, the steps the neural models
ran and their seconds per step, the test scores (so a speed change is seen beside the quality it
keeps), and a profile of where a fit's time goes. For the issue "A fit in seconds".

    .venv/bin/python benchmarks/fit_cost.py                                  # every table, 1 split
    .venv/bin/python benchmarks/fit_cost.py --tables yacht,boston --splits 3
    .venv/bin/python benchmarks/fit_cost.py --device cuda --out-dir benchmarks/results/fit_cost_h100
    .venv/bin/python benchmarks/fit_cost.py --report-only

Each (table, model, split) cell runs in its own Python process with 2 threads (the machine the
suite targets) and appends one JSON line to ``<out-dir>/fit_cost.jsonl`` as it finishes; a line is
reused while its key (the devsuite cell key: table data, settings, library version and, for NPT and
SPIN, the hash of src/semiparam; plus the device) is current, so a killed run resumes. The profile
cells fit one member of NPT and of SPIN for ``--profile-steps`` steps under ``torch.profiler`` and
``cProfile``. The report (``fit_cost.md`` and ``fit_cost.json``) is generated from the lines; no
figure is typed into it. Run it with nothing else heavy on the machine: the seconds are the point.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import devsuite as ds
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("npt", "spin", "catboost")
MORE_MODELS = ("auto",)  # TableClassifier / TableRegressor at their defaults: NPT and SPIN members together
# the neural defaults with one setting changed, for a ratio measured in the same run (--models)
VARIANTS = {
    "npt-in-turn": ("npt", {"train_options": {"concurrent_members": "never"}}),
    "spin-in-turn": ("spin", {"train_options": {"concurrent_members": "never"}}),
}
PROFILE_TABLES = ("boston", "adult")  # a small table and a medium one
# op-name fragments -> the category a profile reports them under (first match wins)
CATEGORIES = (
    ("attention", ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")),
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear")),
    ("random draws", ("aten::random_", "aten::bernoulli", "aten::uniform_", "aten::rand")),
)


# -- cells (each in its own process) ------------------------------------------------------------------


def model_and_overrides(model: str, device: str) -> tuple[str, dict[str, Any]]:
    """The devsuite model a cell of ``model`` (a model or a variant) fits, and its overrides."""
    base, overrides = VARIANTS.get(model, (model, {}))
    return base, ({"device": device, **overrides} if base in ds.NEURAL_MODELS else {})


def fit_cell(table: str, model: str, split: int, device: str) -> dict[str, Any]:
    base, overrides = model_and_overrides(model, device)
    return ds.run_cell(table, base, split, overrides)


def profile_cell(table: str, model: str, steps: int, device: str) -> dict[str, Any]:
    """One member of ``model`` fitted for ``steps`` steps on ``table`` (split 0) under
    torch.profiler and cProfile: where a step's time goes."""
    import cProfile
    import pstats

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(ds.N_THREADS)
    spec = ds.TABLES[table]
    X_tr, _, y_tr, _ = ds.split_table(table, 0)
    overrides = {"n_estimators": 1, "max_steps": steps, "device": device}
    est = ds.make_model(model, spec.task, ds.split_seed(table, 0), overrides)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    python = cProfile.Profile()
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        python.enable()
        est.fit(X_tr, y_tr)
        python.disable()
    wall = time.perf_counter() - start
    n_steps = est.history_.n_steps
    # the training steps' span: from the end of the first optimiser step to the end of the last
    # (so encoding, context encoding and calibration outside training are left out)
    events = prof.events()

    def outer_step(e: Any) -> bool:  # an optimiser step not inside another (Lookahead wraps LAMB)
        parent = e.cpu_parent
        return e.name.startswith("Optimizer.step") and not (
            parent and parent.name.startswith("Optimizer.step")
        )

    marks = sorted((e for e in events if outer_step(e)), key=lambda e: e.time_range.start)
    begin, end = marks[0].time_range.end, marks[-1].time_range.end
    span_steps = len(marks) - 1
    span_us = end - begin
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
    stats = pstats.Stats(python)
    functions = sorted(
        (
            (row[3], f"{Path(func[0]).name}:{func[1]}({func[2]})")
            for func, row in stats.stats.items()  # type: ignore[attr-defined]
            if "semiparam" in func[0]
        ),
        reverse=True,
    )[:10]
    return {
        "table": table,
        "model": model,
        "device": device,
        "steps": n_steps,
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


# -- driver ---------------------------------------------------------------------------------------------


def run_in_subprocess(args: list[str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        return {"status": "error", "error": res.stderr.strip()[-2000:]}
    return {"status": "ok", **json.loads(lines[-1])}


def cell_key(table: str, model: str, split: int, device: str) -> str:
    base, overrides = model_and_overrides(model, device)
    est = ds.make_model(base, ds.TABLES[table].task, ds.split_seed(table, split), overrides)
    settings = ds.model_settings(base, est, overrides)
    version = ds.library_version(base)
    fingerprint = {"data": ds.data_hash(table), "seed": ds.split_seed(table, split)}
    return ds.cell_key(fingerprint, base, split, settings, ds.code_version(), version) + f"/{device}"


def machine() -> dict[str, Any]:
    """The devsuite's machine facts, and the GPU when PyTorch sees one."""
    import torch

    info = ds.machine()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", default=",".join(ds.CORE_TABLES), help="default: the 14 core tables")
    p.add_argument(
        "--models",
        default=",".join(MODELS),
        help=f"of {', '.join((*MODELS, *MORE_MODELS, *VARIANTS))}; the variants: the defaults with "
        "the members fitted one after another (concurrent_members='never'), beside them in the same run",
    )
    p.add_argument("--splits", type=int, default=1)
    p.add_argument("--device", default="cpu", help="where NPT and SPIN train (CatBoost: the CPU)")
    p.add_argument("--profile-tables", default=",".join(PROFILE_TABLES), help="'' for none")
    p.add_argument("--profile-steps", type=int, default=60)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per cell")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--report-only", action="store_true")
    p.add_argument(
        "--quality",
        nargs=4,
        action="append",
        metavar=("MODEL", "TITLE", "BEFORE", "AFTER"),
        help="a 'quality held' section (repeatable) of MODEL (npt or spin): two tabular_defaults "
        "JSONL selections, each PATH:TAG:SRC_SHA256[:TABLES] or several joined by '+' (MODEL's "
        "records of that tag and code, "
        "a later selection's record winning a cell; CatBoost and HGB from the selections' files, a "
        "bare PATH adding only those), compared split by split",
    )
    p.add_argument("--cell", nargs=4, metavar=("TABLE", "MODEL", "SPLIT", "DEVICE"), help=argparse.SUPPRESS)
    p.add_argument("--profile", nargs=3, metavar=("TABLE", "MODEL", "DEVICE"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.cell:
        table, model, split, device = a.cell
        print(json.dumps(ds.jsonable(fit_cell(table, model, int(split), device))))
        return
    if a.profile:
        table, model, device = a.profile
        print(json.dumps(ds.jsonable(profile_cell(table, model, a.profile_steps, device))))
        return
    a.out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = a.out_dir / "fit_cost.jsonl"
    command = "python benchmarks/fit_cost.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    if not a.report_only:
        done = {r["key"] for r in ds.read_lines(jsonl) if r.get("status") == "ok"}
        tables = [t for t in a.tables.split(",") if t]
        # the profiles first (short), then table by table, so that a run cut short still has whole rows
        cells = [("profile", t, m, 0) for t in a.profile_tables.split(",") if t for m in ds.FAMILIES]
        models = [m for m in a.models.split(",") if m]
        known = (*MODELS, *MORE_MODELS, *VARIANTS)
        if unknown := [m for m in models if m not in known]:
            raise SystemExit(f"--models: unknown {unknown}; choose from {', '.join(known)}")
        cells += [("fit", t, m, s) for s in range(a.splits) for t in tables for m in models]
        for kind, table, model, split in cells:
            key = cell_key(table, model, split, a.device) + ("/profile" if kind == "profile" else "")
            if key in done:
                continue
            print(f"[{kind}] {table} {model} split {split} ...", flush=True)
            if kind == "fit":
                out = run_in_subprocess(["--cell", table, model, str(split), a.device], a.timeout)
            else:
                out = run_in_subprocess(
                    ["--profile", table, model, a.device, "--profile-steps", str(a.profile_steps)], a.timeout
                )
            record = {"kind": kind, "table": table, "model": model, "split": split, "device": a.device}
            record.update(key=key, code=ds.code_version(), machine=machine(), command=command, **out)
            with jsonl.open("a") as f:
                f.write(json.dumps(ds.jsonable(record)) + "\n")
            print(f"       {out.get('status')} fit {out.get('fit_seconds', 0):.1f}s", flush=True)
    quality = None
    if a.quality:
        quality = [quality_held(*q) for q in a.quality]
        (a.out_dir / "fit_cost_quality.json").write_text(json.dumps(ds.jsonable(quality), indent=1))
    elif (a.out_dir / "fit_cost_quality.json").exists():
        quality = json.loads((a.out_dir / "fit_cost_quality.json").read_text())
    write_report(ds.read_lines(jsonl), a.out_dir, quality, command)


# -- quality held: the development suite's scores before and after a change, from tabular_defaults ----

REFERENCES = ("catboost", "hgb")  # the default GBDTs the neural model is ranked against


def _selection(model: str, spec: str) -> tuple[list[dict[str, Any]], list[str]]:
    """``PATH:TAG:SRC_SHA256[:TABLES]`` (or several joined by ``+``) -> the ok ``model`` records of that
    tag and code (of those tables, a comma list, when given; newest per cell; a later selection's
    record wins a cell), and the paths (whose reference models' records are read too; a bare
    ``PATH`` adds only those)."""
    chosen: dict[tuple, dict[str, Any]] = {}
    paths = []
    for part in spec.split("+"):
        path, tag, src, tables = (part.split(":") + ["", "", ""])[:4]
        paths.append(path)
        if not tag:  # a bare PATH: its reference models' records only
            continue
        only = set(tables.split(",")) if tables else None
        for r in ds.read_lines(Path(path)):
            if r.get("model") != model or r.get("tag") != tag or r.get("score") is None:
                continue
            if only is not None and r["table"] not in only:
                continue
            if src and (r.get("code") or {}).get("src_sha256") != src:
                continue
            chosen[(r["table"], r["split"])] = r
    return list(chosen.values()), paths


def quality_held(model: str, title: str, before_spec: str, after_spec: str) -> dict[str, Any]:
    """Per (table, split) where before, after and the references all have a score: the scores,
    the ranks among ``model`` and the default GBDTs, the geometric-mean ratio to CatBoost, and the
    paired change after/before with its spread over splits (the noise a change is judged by)."""
    if model not in ds.NEURAL_MODELS:
        raise SystemExit(f"--quality: the model is one of {', '.join(ds.NEURAL_MODELS)}, not {model!r}")
    before, paths = _selection(model, before_spec)
    after, more = _selection(model, after_spec)
    refs: dict[tuple, float] = {}
    for path in dict.fromkeys(paths + more):
        for r in ds.read_lines(Path(path)):
            if r.get("model") in REFERENCES and r.get("tag") == "default" and r.get("score") is not None:
                refs[(r["table"], r["model"], r["split"])] = r["score"]
    b = {(r["table"], r["split"]): r["score"] for r in before}
    a = {(r["table"], r["split"]): r["score"] for r in after}
    # training steps of all members: a count, which unlike the studies' seconds the load leaves alone
    steps = {
        side: {(r["table"], r["split"]): sum(member_steps(r)) for r in records}
        for side, records in (("before", before), ("after", after))
    }
    cells = sorted(k for k in set(b) & set(a) if all((k[0], m, k[1]) in refs for m in REFERENCES))
    if not cells:
        raise SystemExit(f"--quality {title!r}: no {model} cell has before, after and reference scores")
    per_cell = []
    for t, s in cells:
        scores = {"before": b[(t, s)], "after": a[(t, s)], **{m: refs[(t, m, s)] for m in REFERENCES}}
        rank_before = ds.rank_scores({k: v for k, v in scores.items() if k != "after"})["before"]
        rank_after = ds.rank_scores({k: v for k, v in scores.items() if k != "before"})["after"]
        per_cell.append(
            {"table": t, "split": s, **scores, "rank_before": rank_before, "rank_after": rank_after}
        )
    changes = [math.log(c["after"] / c["before"]) for c in per_cell]
    tables = sorted({c["table"] for c in per_cell}, key=list(ds.TABLES).index)
    per_table = []
    for t in tables:
        rows = [c for c in per_cell if c["table"] == t]
        logs = [math.log(c["after"] / c["before"]) for c in rows]
        per_table.append(
            {
                "table": t,
                "splits": [c["split"] for c in rows],
                **{k: float(np.mean([c[k] for c in rows])) for k in ("before", "after", *REFERENCES)},
                "change_mean": float(np.expm1(np.mean(logs))),
                "change_sd": float(np.std(logs, ddof=1)) if len(logs) > 1 else None,
            }
        )
    return {
        "model": model,
        "title": title,
        "before": before_spec,
        "after": after_spec,
        "cells": len(per_cell),
        "per_table": per_table,
        "per_cell": per_cell,
        "mean_rank": {
            "before": float(np.mean([c["rank_before"] for c in per_cell])),
            "after": float(np.mean([c["rank_after"] for c in per_cell])),
        },
        "geomean_ratio_to_catboost": {
            k: float(np.exp(np.mean([math.log(c[k] / c["catboost"]) for c in per_cell])))
            for k in ("before", "after")
        },
        # only where every cell's records name their members' steps
        "member_steps": (
            {side: int(sum(steps[side][k] for k in cells)) for side in ("before", "after")}
            if all(steps[side][k] > 0 for side in ("before", "after") for k in cells)
            else {}
        ),
        "change": {
            "geomean": float(np.expm1(np.mean(changes))),
            "sd_per_cell": float(np.std(changes, ddof=1)),
            "se": float(np.std(changes, ddof=1) / math.sqrt(len(changes))),
        },
    }


def quality_lines(q: dict[str, Any]) -> list[str]:
    name = q.get("model", "npt").upper()
    lines = [
        "",
        f"## Quality held: {q.get('title', 'the development suite before and after')}",
        "",
        f"{name} before (`{q['before']}`) and after (`{q['after']}`), beside CatBoost and",
        "HGB at their defaults, on the same splits (records of `benchmarks/tabular_defaults.py`; a",
        "score there does not depend on the machine's load, the seconds do, so fit times come from",
        f"the table above). Lower is better. Rank among {name}, CatBoost and HGB per table and split.",
        "",
        f"{q['cells']} cells. Mean rank: before {q['mean_rank']['before']:.2f}, after "
        f"{q['mean_rank']['after']:.2f}. Geo-mean score / CatBoost: before "
        f"{q['geomean_ratio_to_catboost']['before']:.4f}, "
        f"after {q['geomean_ratio_to_catboost']['after']:.4f}. "
        f"Paired change after/before: {q['change']['geomean']:+.2%} (geo-mean over cells; the "
        f"cells' log changes spread {q['change']['sd_per_cell']:.3f}, standard error of the mean "
        f"{q['change']['se']:.3f}).",
        *(
            [
                f"Training steps of all members over these cells: before {q['member_steps']['before']:,}, "
                f"after {q['member_steps']['after']:,} "
                f"({q['member_steps']['after'] / q['member_steps']['before']:.3f}x).",
            ]
            if q.get("member_steps", {}).get("before")
            else []
        ),
        "",
        "| table | splits | before | after | catboost | hgb | change (geo-mean) | log-change sd |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in q["per_table"]:
        sd = "" if r["change_sd"] is None else f"{r['change_sd']:.3f}"
        lines.append(
            f"| {r['table']} | {','.join(map(str, r['splits']))} | {r['before']:.4g} | {r['after']:.4g} | "
            f"{r['catboost']:.4g} | {r['hgb']:.4g} | {r['change_mean']:+.1%} | {sd} |"
        )
    return lines


# -- report ---------------------------------------------------------------------------------------------


def current(records: list[dict[str, Any]], ok: bool = True) -> list[dict[str, Any]]:
    """The newest ok record (``ok`` False: the newest record, ok or not) of each cell whose key is
    still current (this code and settings)."""
    latest: dict[tuple, dict[str, Any]] = {}
    keys: dict[tuple, str] = {}
    for r in records:
        if ok and r.get("status") != "ok":
            continue
        cell = (r["kind"], r["table"], r["model"], r["split"], r["device"])
        if cell not in keys:
            keys[cell] = cell_key(r["table"], r["model"], r["split"], r["device"]) + (
                "/profile" if r["kind"] == "profile" else ""
            )
        if r["key"] == keys[cell]:
            latest[cell] = r
    return list(latest.values())


def member_steps(r: dict[str, Any]) -> list[int]:
    members = (r.get("history") or {}).get("members") or []
    return [int(m["steps"]) for m in members]


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


def write_report(
    records: list[dict[str, Any]],
    out_dir: Path,
    quality: dict[str, Any] | list[dict[str, Any]] | None = None,
    command: str | None = None,
) -> None:
    rows = current(records)
    fits = [r for r in rows if r["kind"] == "fit"]
    profiles = [r for r in rows if r["kind"] == "profile"]
    by_cell = {(r["table"], r["model"], r["split"]): r for r in fits}
    tables = [t for t in ds.TABLES if any(k[0] == t for k in by_cell)]
    splits = sorted({k[2] for k in by_cell})
    models = [m for m in (*MODELS, *MORE_MODELS, *VARIANTS) if any(k[1] == m for k in by_cell)]
    complete = [(t, s) for t in tables for s in splits if all((t, m, s) in by_cell for m in models)]
    totals = {m: sum(by_cell[(t, m, s)]["fit_seconds"] for t, s in complete) for m in models}
    ratio = {m: totals[m] / totals["catboost"] for m in models if "catboost" in totals and totals["catboost"]}
    ranks = defaultdict(list)
    log_ratios = defaultdict(list)
    for t, s in complete:
        scores = {m: by_cell[(t, m, s)]["score"] for m in models}
        for m, rank in ds.rank_scores(scores).items():
            ranks[m].append(rank)
        if "catboost" in scores:
            for m in models:
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
    codes = sorted({json.dumps(r["code"], sort_keys=True) for r in rows})
    # the machine once (its load at each cell's start aside: the range is shown)
    machines = sorted(
        {
            json.dumps(
                {k: v for k, v in r["machine"].items() if k != "load_average_at_start"}, sort_keys=True
            )
            for r in rows
        }
    )
    loads = [r["machine"].get("load_average_at_start", [math.nan])[0] for r in rows] or [math.nan]
    commands = sorted({r["command"] for r in rows})
    lines = [
        "# What a default fit costs (NPT, SPIN, CatBoost)",
        "",
        "Generated by `benchmarks/fit_cost.py` from `fit_cost.jsonl` (current records only). Each cell ran",
        "in its own process with 2 threads; devices are named per cell. Lower scores are better",
        "(RMSE for regression, log loss for classification).",
        "",
        *([f"This report: `{command}`", ""] if command is not None else []),
        "The cells were measured by: " + "; ".join(f"`{c}`" for c in commands),
        "",
        "Code: " + "; ".join(f"`{c}`" for c in codes),
        "",
        "Machine: " + "; ".join(f"`{m}`" for m in machines),
        "",
        f"One-minute load average at the cells' starts: {min(loads):.2f} to {max(loads):.2f} "
        "(2 means both cores busy with the cell before).",
        "",
        "Devices of the neural models' cells: "
        + ", ".join(sorted({r["device"] for r in rows}))
        + ". A GPU's figures come from a run with `--device cuda`, on the card its machine line names.",
        "",
        "## Totals over the cells where every model ran",
        "",
        f"{summary['cells']} cells ({summary['tables']} tables x splits {splits}).",
        "",
        *(
            [
                "NPT and SPIN fit their members at once, in threads of one PyTorch thread each "
                "(`concurrent_members`); "
                + ", ".join(f"`{m}`" for m in models if m in VARIANTS)
                + ": the same defaults with the members one after another on both threads "
                "(`concurrent_members='never'`), in the same run.",
                "",
            ]
            if any(m in VARIANTS for m in models)
            else []
        ),
        "| model | fit seconds | x CatBoost | mean rank | geo-mean score / CatBoost |",
        "|---|---|---|---|---|",
    ]
    for m in models:
        lines.append(
            f"| {m} | {totals[m]:.1f} | {ratio.get(m, float('nan')):.1f} | "
            f"{summary['mean_rank'].get(m, float('nan')):.2f} | "
            f"{summary['geomean_score_ratio_to_catboost'].get(m, float('nan')):.4f} |"
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
            row = [t, str(s), device]
            row += [f"{c['fit_seconds']:.1f}" if c else "" for c in cells.values()]
            for m in ("npt", "spin"):
                c = cells.get(m)
                steps = member_steps(c) if c else []
                row += [
                    ",".join(map(str, steps)),
                    f"{1e3 * c['fit_seconds'] / sum(steps):.1f}" if steps else "",
                ]
            row += [f"{c['score']:.4g}" if c else "" for c in cells.values()]
            lines.append("| " + " | ".join(row) + " |")
    for section in [quality] if isinstance(quality, dict) else quality or []:
        lines += quality_lines(section)
    if profiles:
        lines += [
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
            ]
            lines += [f"| {k} | {v:.1%} |" for k, v in r["share"].items()]
            lines += [
                "",
                "Top ops (self ms per step): "
                + "; ".join(f"`{n}` {ms:.2f}" for n, ms in r["top_ops_ms_per_step"]),
            ]
            lines += [
                "",
                "Library functions, cumulative seconds of the whole fit: "
                + "; ".join(f"`{n}` {t:.2f}" for n, t in r["top_functions_cumulative_s"]),
            ]
    failed = [r for r in current(records, ok=False) if r.get("status") != "ok"]
    if failed:  # cells whose last run failed: said, not left out
        lines += ["", "## Cells whose last run failed", "", "| cell | device | status | error (last line) |"]
        lines += ["|---|---|---|---|"]
        for r in failed:
            error = (str(r.get("error") or "").strip().splitlines() or [""])[-1][:200]
            cell = f"{r['kind']} {r['table']} {r['model']} split {r['split']}"
            lines.append(f"| {cell} | {r['device']} | {r.get('status')} | {error.replace('|', '/')} |")
    (out_dir / "fit_cost.md").write_text("\n".join(lines) + "\n")
    # the report's numbers; the full records (histories, settings, machine) stay in the JSONL
    cells = [
        {k: r[k] for k in ("table", "model", "split", "device", "fit_seconds", "score")}
        | {"member_steps": member_steps(r)}
        for r in fits
    ]
    payload = {"summary": summary, "fits": cells, "profiles": profiles}
    (out_dir / "fit_cost.json").write_text(json.dumps(ds.jsonable(payload), indent=1))
    print(f"wrote {out_dir / 'fit_cost.md'}")


if __name__ == "__main__":
    main()
