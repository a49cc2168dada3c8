#!/usr/bin/env python
"""NPT, SPIN and ``auto`` at their defaults against gradient boosting (HGB, random forest, XGBoost,
LightGBM, CatBoost, and Optuna-tuned versions) on the development suite (``devsuite.py``: 32 real
tables of 234-2,500 rows), for the issue "Out of the box, NPT and SPIN beat gradient boosting on
small and medium tables".

    python benchmarks/tabular_defaults.py                                    # the whole grid, 1 split
    python benchmarks/tabular_defaults.py --splits 3 --out benchmarks/results/suite32
    python benchmarks/tabular_defaults.py --tables boston,oj --models npt,hgb --out /tmp/td
    python benchmarks/tabular_defaults.py --models npt --set npt.max_steps=800 --out /tmp/s800
    python benchmarks/tabular_defaults.py --models hgb,rf --executor ray    # cells as Ray tasks

Every model runs at its defaults with only ``random_state`` set, 2 threads each; a tuned model
runs ``--tuned-trials`` Optuna trials on an inner split of the training rows, then refits (its fit
seconds include the search). Each (table, model, split) cell runs in its own process (harness
``run_cell``, ``--timeout`` seconds at most) and appends a record to ``<out>/tabular_defaults.jsonl``,
so a stopped run resumes; a neural cell is keyed on the code in ``src/``, a baseline on its
library's version. With ``--executor ray`` the cells run as Ray tasks of 2 CPUs each (fit seconds
are then comparable only where each task had its CPUs to itself). The report
(``<out>/tabular_defaults.md`` and ``.json``) covers the grid of the command: the table list, test
scores, per-table and mean ranks (with and without the tuned models), the neural models against
the best default GBDT (ratios, wins against CatBoost, geometric means with bootstrap intervals),
``auto``'s sub-ensembles, accuracy, AUROC and calibration, fit seconds, when and why each neural
fit stopped, the tuned models' searches, and the cells not run or failed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import devsuite as ds
import harness as h
import numpy as np

from semiparam.parallel import map_tasks

TITLE = "NPT and SPIN at their defaults against gradient boosting"
BOOTSTRAP_DRAWS = 2000
Cells = Mapping[tuple[str, str, int], Mapping[str, Any]]  # (table, model, split) -> record


def run(records: h.Records, todo: list[tuple[dict, bool]], args: argparse.Namespace) -> None:
    def compute(item: tuple[dict, bool]) -> dict:
        result = h.run_cell("devsuite:cell", item[0], timeout=args.timeout, threads=ds.N_THREADS)
        return {**result, "machine": h.describe_machine()}

    def finished(i: int, result: dict) -> None:
        settings, keyed = todo[i]
        rec = records.add(settings, result, keyed)
        name = " ".join(str(settings[k]) for k in ("table", "model", "split"))
        what = f"{rec['score']:.4g}, fit {rec['fit_seconds']:.1f} s" if rec["ok"] else rec["error"]
        print(f"[{'ok' if rec['ok'] else 'fail'}] {name}: {what}", flush=True)

    threads = ds.N_THREADS
    map_tasks(compute, todo, executor=args.executor, address=args.ray_address, cpus_per_task=threads,
              threads=threads, on_result=finished)  # fmt: skip


# -- report ------------------------------------------------------------------------------------


def _mean(dicts: list[Mapping[str, Any]], key: str) -> float:
    return float(np.mean([d.get(key, math.nan) for d in dicts]))


def aggregate(cells: Cells) -> dict[str, dict[str, dict[str, Any]]]:
    """Per table and model, over its splits: mean (and spread of) the primary score, mean metrics
    and seconds, the peak RSS, and the neural histories and tuning searches."""
    by: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for (table, model, _), r in sorted(cells.items()):
        by[(table, model)].append(r)
    scores: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (table, model), rs in by.items():
        metrics = {k: _mean([r["metrics"] for r in rs], k) for k in rs[0]["metrics"]}
        scores[table][model] = {
            "primary": rs[0]["primary"], "score": _mean(rs, "score"), "n_splits": len(rs), "metrics": metrics,
            "score_std": float(np.std([r["score"] for r in rs])) if len(rs) > 1 else None,
            "fit_seconds": _mean(rs, "fit_seconds"), "fit_cpu_seconds": _mean(rs, "fit_cpu_seconds"),
            "predict_seconds": _mean(rs, "predict_seconds"),
            "fit_peak_rss_mb": float(np.max([r.get("fit_peak_rss_mb", math.nan) for r in rs])),
            "history": [r["history"] for r in rs if r.get("history")],
            "tuning": [r["tuning"] for r in rs if r.get("tuning")],
        }  # fmt: skip
    return scores


def head_to_head(cells: Cells, model: str, gbdt: list[str], seed: int = 0) -> dict[str, Any] | None:
    """``model`` against CatBoost and the best default GBDT, split by split: the (table, split)
    pairs where it beats CatBoost at its defaults (and tuned, where run); the geometric mean over
    tables of its score over the best default GBDT's (per table over the splits where all of them
    ran) with a 95% percentile interval from resampling the tables. None where nothing pairs."""
    score = {k: float(r["score"]) for k, r in cells.items() if r.get("score") is not None}
    pairs = sorted({(t, s) for (t, m, s) in score if m == model})
    out: dict[str, Any] = {"model": model}
    for ref in ("catboost", "catboost_tuned"):
        both = [(t, s) for t, s in pairs if (t, ref, s) in score]
        if both:
            wins = sum(score[(t, model, s)] < score[(t, ref, s)] for t, s in both)
            out[f"wins_vs_{ref}"] = [wins, len(both)]
    per_table: dict[str, list[float]] = defaultdict(list)
    for t, s in pairs:
        refs = [score[(t, g, s)] for g in gbdt if (t, g, s) in score]
        if len(refs) == len(gbdt) and min(refs) > 0:
            per_table[t].append(math.log(score[(t, model, s)] / min(refs)))
    if per_table:
        logs = np.array([np.mean(v) for v in per_table.values()])
        draws = np.random.default_rng(seed).choice(logs, size=(BOOTSTRAP_DRAWS, len(logs))).mean(axis=1)
        out["geomean_vs_best_gbdt"] = float(np.exp(logs.mean()))
        out["interval_95"] = [float(np.exp(np.quantile(draws, q))) for q in (0.025, 0.975)]
        out["tables"] = len(logs)
    return out if len(out) > 1 else None


def section(title: str, columns: list[str], rows: list[list[Any]], intro: str = "", after: str = "") -> list:
    """A report section: its title, an optional paragraph, the table and an optional note."""
    return [f"## {title}", "", *([intro, ""] if intro else []), *h.md_table(columns, rows), "",
            *([after, ""] if after else [])]  # fmt: skip


def head_to_head_lines(cells: Cells, models: list[str], gbdt: list[str], title: str = "", intro: str = ""):
    rows = []
    for m in models:
        if (x := head_to_head(cells, m, gbdt)) is None:
            continue
        wins = [x.get(f"wins_vs_{ref}") for ref in ("catboost", "catboost_tuned")]
        wins = [f"{w[0]}/{w[1]} ({w[0] / w[1]:.0%})" if w else None for w in wins]
        interval = "{:.3f}-{:.3f}".format(*x["interval_95"]) if "interval_95" in x else None
        rows.append([m, *wins, x.get("geomean_vs_best_gbdt"), interval, x.get("tables")])
    intro += (
        "Wins: the (table, split) pairs where the model's test score beats CatBoost's (lower is better). "
        f"Geo-mean: over tables, the model's score over the best of {', '.join(gbdt)} on that split (per "
        "table the geometric mean over its splits; < 1: the model is better), with a 95% interval from "
        f"{BOOTSTRAP_DRAWS} bootstrap resamples of the tables."
    )
    columns = ["model", "wins vs CatBoost", "wins vs tuned CatBoost", "geo-mean / best GBDT", "95% interval"]
    title = title or "Split by split: against CatBoost and the best default GBDT"
    return section(title, [*columns, "tables"], rows, intro) if rows else []


def composition_cells(cells: Cells) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The sub-ensembles of the ``auto`` records (the first ``i`` NPT and ``j`` SPIN members of
    each fit, predicting alone) as cells of pseudo-models named ``"auto i+j"``."""
    return {
        (table, f"auto {label}", split): {"score": metrics[r["primary"]]}
        for (table, model, split), r in cells.items()
        if model == "auto"
        for label, metrics in (r.get("composition_metrics") or {}).items()
    }


def members_of(view: str) -> tuple[int, int]:
    """(NPT members, SPIN members) of a sub-ensemble view ``"i+j"`` or ``"I+J mean"``."""
    i, j = view.split()[0].split("+")
    return int(i), int(j)


def auto_compositions(cells: Cells) -> dict[str, tuple[int, int]]:
    """Each table's ``auto`` composition (NPT members, SPIN members), read from its fits' records
    (the ``"I+J mean"`` view names the whole fit): ``auto`` chooses it by the table's size, and the
    sub-ensembles are shown per composition."""
    found: dict[str, tuple[int, int]] = {}
    for (table, model, _), r in cells.items():
        if model != "auto":
            continue
        for view in r.get("composition_metrics") or {}:
            if view.endswith(" mean"):
                whole = members_of(view)
                found[table] = max(found.get(table, whole), whole)
    return found


def stop_rows(scores: Mapping[str, Mapping[str, Any]], neural: list[str]) -> list[list[Any]]:
    """One row per neural fit: member 0's best step, steps and stop reason, and how many members
    had their best checkpoint in the last tenth of their steps."""
    shown = {"best_step", "stop_reason", "stopped_early", "seconds", "members", "best_val_loss"}
    rows = []
    for t, by_model in scores.items():
        for m in [m for m in neural if m in by_model]:
            for fit in by_model[m]["history"]:
                members = fit.get("members") or [{}]
                late = sum((x.get("best_step") or 0) >= 0.9 * (x.get("steps") or math.inf) for x in members)
                other = [
                    f"{k}={h.fmt(v)}" for k, v in sorted(fit.items()) if k not in shown and v is not None
                ]
                first = members[0]
                rows.append([t, m, fit.get("best_step"), first.get("steps"), fit.get("stop_reason"),
                             f"{late} of {len(members)}", first.get("best_val_loss"), fit.get("seconds"),
                             ", ".join(other)])  # fmt: skip
    return rows


STOP_NOTE = (
    '"plateau, annealed": the smoothed validation loss stopped improving, then the learning rate was '
    "annealed over a share of the steps run (the adaptive schedule's `anneal_fraction`, half at the "
    'defaults), so the best checkpoint usually falls in that anneal; "max_steps" or "time_budget" would '
    "mean the fit was cut off. Best step and steps run are member 0's; "
    '"best in last 10%" counts the members whose best checkpoint came in the last tenth of their run.'
)
TABLE_COLUMNS = {"task": "task", "target": "target", "rows": "rows", "n_train": "train",
                 "n_features": "features", "n_categorical": "categorical", "n_missing_cells": "NaN cells",
                 "provenance": "source"}  # fmt: skip


def build_report(cells: Cells, table_info: Mapping[str, Mapping] | None = None, problems=None) -> tuple:
    """The report's markdown lines and its JSON data, from the records of the grid's cells."""
    scores = aggregate(cells)
    tables = [t for t in ds.TABLES if t in scores] + sorted(t for t in scores if t not in ds.TABLES)
    present = {m for t in scores for m in scores[t]}
    models = [m for m in ds.ALL_MODELS if m in present]
    defaults = [m for m in ds.DEFAULT_MODELS if m in present]
    gbdt = [m for m in ds.GBDT_DEFAULTS if m in present]
    neural = [m for m in ds.NEURAL_MODELS if m in present]
    per_table = {t: {m: scores[t][m]["score"] for m in scores[t]} for t in tables}
    primary = {t: next(iter(scores[t].values()))["primary"] for t in tables}
    machines = "; ".join(sorted({str(r.get("machine")) for r in cells.values()}))
    md = [
        "Every model at its defaults with only `random_state` set, 2 threads each. Lower is better: RMSE "
        "(regression, target units) and log loss (classification). Ranks are per table among the models "
        "named, ties share the mean rank; the average is over the tables where all of them have a result.",
        "",
        f"Records: {len(cells)}; splits: {sorted({s for (_, _, s) in cells})}; made on: {machines}.",
        "",
    ]
    if table_info:
        rows = [[t, *[table_info[t][k] for k in TABLE_COLUMNS]] for t in tables if t in table_info]
        md += section("Tables", ["table", *TABLE_COLUMNS.values()], rows)

    def score_text(t: str, m: str) -> str | None:
        if (e := scores[t].get(m)) is None:
            return None
        text = h.fmt(e["score"]) + (f" ± {h.fmt(e['score_std'], 2)}" if e["score_std"] is not None else "")
        return f"**{text}**" if e["score"] == min(per_table[t].values()) else text

    rows = [[t, primary[t], *[score_text(t, m) for m in models]] for t in tables]
    md += section("Scores on the test split", ["table", "metric", *models], rows)
    ranks = {"default": ds.average_ranks(per_table, defaults), "all": ds.average_ranks(per_table, models)}
    sections = [("Ranks among the default models", ranks["default"], defaults)]
    if any(m in present for m in ds.TUNED_MODELS):
        sections.append(("Ranks with the tuned gradient boosting beside them", ranks["all"], models))
    for title, rank, names in sections:
        rows = [[t, *[rank["ranks"][t][m] for m in names]] for t in rank["tables"]]
        rows.append(["**average rank**", *[f"**{h.fmt(rank['mean'][m])}**" for m in names]])
        note = f"Average over {len(rank['tables'])} table(s) where all of these models have a result."
        if left_out := [t for t in tables if t not in rank["tables"]]:
            note += f" Left out (a model missing): {', '.join(left_out)}."
        md += section(title, ["table", *names], rows, after=note)

    if gbdt and neural:
        rows, ratios = [], defaultdict(list)
        for t in tables:
            if not (best := min([scores[t][m]["score"] for m in gbdt if m in scores[t]], default=0)):
                continue
            row = [t, best]
            for m in neural:
                ratios[m] += [scores[t][m]["score"] / best] if m in scores[t] else []
                row.append(h.fmt(scores[t][m]["score"] / best, 3) if m in scores[t] else None)
            rows.append(row)
        geo = [
            f"**{h.fmt(float(np.exp(np.mean(np.log(r)))), 3)}**" if (r := ratios[m]) else None for m in neural
        ]
        rows.append(["**geometric mean**", "", *geo])
        rows.append(
            ["**tables won**", "", *[f"{sum(r < 1 for r in ratios[m])}/{len(ratios[m])}" for m in neural]]
        )
        title = "Neural models against the best default gradient boosting"
        intro = f"Ratio of the model's score to the best score among {', '.join(gbdt)} on the table "
        md += section(
            title, ["table", "best GBDT", *neural], rows, intro + "(< 1: the neural model is better)."
        )
    if gbdt:
        md += head_to_head_lines(cells, [m for m in models if m != "catboost"], gbdt)
        parts = composition_cells(cells)
        names = sorted({m for (_, m, _) in parts}, key=lambda m: (members_of(m.removeprefix("auto ")), m))
        intro = "`auto i+j`: the first i NPT and j SPIN members of each `auto` fit, predicting together "
        intro += "without the others (their fit time is not measured here), their ensemble weights "
        intro += "renormalised; `auto I+J mean`: every member of the fit with the same weight (no ensemble "
        intro += "selection). A view appears on the tables whose fits have that many members of each family. "
        compositions = auto_compositions(cells)
        for whole in sorted(set(compositions.values()), reverse=True):
            chosen = {k: v for k, v in {**cells, **parts}.items() if compositions.get(k[0]) == whole}
            title = f"Sub-ensembles of auto on the tables where it trains {whole[0]} NPT + {whole[1]} SPIN "
            title += "members: i NPT + j SPIN members of the same fits"
            md += head_to_head_lines(chosen, names, gbdt, title, intro)

    if classification := [t for t in tables if primary[t] == "log_loss"]:

        def metric(t: str, m: str, *names: str) -> str | None:
            e = scores[t].get(m)
            return None if e is None else " / ".join(h.fmt(e["metrics"].get(n), 3) for n in names)

        rows = [[t, *[metric(t, m, "accuracy", "auroc") for m in models]] for t in classification]
        md += section("Classification: accuracy and AUROC", ["table (acc / AUROC)", *models], rows)
        rows = [[t, *[metric(t, m, "ece") for m in models]] for t in classification]
        intro = "Top-label ECE (15 equal-width confidence bins; 0 = the stated probability of the predicted "
        intro += "class matches its hit rate)."
        md += section("Classification: expected calibration error", ["table", *models], rows, intro)

    order = [m for m in ("npt", "hgb") if m in present] + [m for m in models if m not in ("npt", "hgb")]
    rows = [[t, *[scores[t][m]["fit_seconds"] if m in scores[t] else None for m in order]] for t in tables]
    rows.append(
        ["**total**", *[sum(scores[t][m]["fit_seconds"] for t in tables if m in scores[t]) for m in order]]
    )
    note = (
        "Tuned models: search plus refit. CPU seconds, predict seconds and the fit's peak RSS: in the JSON."
    )
    md += section("Fit seconds (wall)", ["table", *order], rows, after=note)
    if neural:
        columns = ["table", "model", "best step", "steps run", "stop reason", "best in last 10%"]
        columns += ["best val loss", "train s", "other"]
        md += section(
            "When and why each neural fit stopped", columns, stop_rows(scores, neural), after=STOP_NOTE
        )
    rows = [
        [t, m, tu["n_trials"], tu["best_inner_score"], tu["search_seconds"], json.dumps(tu["best_params"])]
        for t in tables
        for m in ds.TUNED_MODELS
        for tu in (scores[t][m]["tuning"] if m in scores[t] else [])
    ]
    if rows:
        columns = ["table", "model", "trials", "best inner score", "search s", "best params"]
        md += section("Tuned models: search", columns, rows)
    if problems:
        md += ["## Not run or failed", "", *[f"- `{k}`: {v}" for k, v in sorted(problems.items())], ""]
    data = {"tables": tables, "models": models, "scores": scores, "ranks_default": ranks["default"],
            "ranks_all": ranks["all"], "problems": dict(problems or {}),
            "table_info": dict(table_info or {})}  # fmt: skip
    return md, data


def pick(text: str | None, allowed: Mapping | tuple, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()] if text else list(allowed)
    if unknown := [t for t in items if t not in allowed]:
        raise SystemExit(f"unknown {what} {unknown}; choose from {list(allowed)}")
    return items


def parse_sets(items: list[str], models: list[str]) -> dict[str, dict[str, Any]]:
    """``--set npt.max_steps=800 --set auto.train_options.patience=8``: per model, estimator
    parameters (a dotted rest nests into a dict parameter; values read as JSON, else text)."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for item in items:
        path, sep, text = item.partition("=")
        model, *keys = path.split(".")
        if not sep or not keys or model not in models:
            raise SystemExit(f"--set {item!r}: expected <model>.<parameter>=<value> for one of {models}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        node = out[model]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", help=f"comma list (default all): {','.join(ds.TABLES)}")
    parser.add_argument("--models", help=f"comma list (default all): {','.join(ds.ALL_MODELS)}")
    parser.add_argument("--splits", type=int, default=1, help="seeded 80/20 splits per table")
    parser.add_argument("--tuned-trials", type=int, default=20, help="Optuna trials of the tuned models")
    parser.add_argument(
        "--set", action="append", default=[], metavar="MODEL.PARAM=VALUE", help="a setting to compare"
    )
    parser.add_argument("--out", type=Path, default=h.RESULTS, help="folder of the records and the report")
    parser.add_argument("--force", action="store_true", help="rerun the cells that have a record")
    parser.add_argument("--report-only", action="store_true", help="run nothing: the report of the records")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one cell may take")
    parser.add_argument(
        "--executor", choices=["serial", "ray"], default="serial", help="or the cells as Ray tasks"
    )
    # the old name of --executor, hidden (the library's command line keeps it for one release too)
    parser.add_argument("--backend", choices=["serial", "ray"], dest="executor", help=argparse.SUPPRESS)
    parser.add_argument("--ray-address", help="with --executor ray: a cluster to join (default: start one)")
    args = parser.parse_args(argv)
    tables, models = pick(args.tables, ds.TABLES, "tables"), pick(args.models, ds.ALL_MODELS, "models")
    problems = {f"*/{m}": reason for m in models if (reason := ds.library_available(m))}
    sets = parse_sets(args.set, models)
    grid = {
        (t, m, s): ds.cell_settings(t, m, s, sets.get(m), tuned_trials=args.tuned_trials)
        for t in tables for s in range(args.splits) for m in models if f"*/{m}" not in problems
    }  # fmt: skip
    records = h.Records(args.out / "tabular_defaults.jsonl")
    if not args.report_only:
        todo = [c for c in grid.values() if args.force or not (r := records.get(*c)) or not r["ok"]]
        run(records, todo, args)
    found = {k: records.get(*c) for k, c in grid.items()}
    cells = {k: r for k, r in found.items() if r and r["ok"]}
    problems |= {
        "/".join(map(str, k)): r["error"] if r else "not run" for k, r in found.items() if k not in cells
    }
    info = {t: {k: v for k, v in ds.describe_table(t).items() if k != "kinds"} for t in tables}
    md, data = build_report(cells, info, problems)
    argv = sys.argv if argv is None else ["benchmarks/tabular_defaults.py", *argv]
    command = h.command_line([a for a in argv if a != "--report-only"])  # the command that makes it
    stem = args.out / "tabular_defaults"
    print(h.write_report(stem, TITLE, md, data, command=command, records=cells.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
