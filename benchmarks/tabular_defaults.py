#!/usr/bin/env python
"""NPT and SPIN at their defaults against gradient boosting on the development suite
(``benchmarks/devsuite.py``: 32 real tables of 234-2,500 rows), for the issue "Out of the box, NPT
and SPIN beat gradient boosting on small and medium tables".

    .venv/bin/python benchmarks/tabular_defaults.py                          # the whole grid
    .venv/bin/python benchmarks/tabular_defaults.py --tables boston,oj --models npt,hgb
    .venv/bin/python benchmarks/tabular_defaults.py --models npt --set npt.max_steps=800 --tag steps800
    .venv/bin/python benchmarks/tabular_defaults.py --report-only            # rebuild the report
    .venv/bin/python benchmarks/tabular_defaults.py --report-only --prune    # drop stale lines too

Every model runs at its defaults with only ``random_state`` set (``--set MODEL.KEY=VALUE`` changes
one setting; dotted keys reach into ``model_options``/``train_options``; values are JSON or text).
Threads: 2 for every model (``torch.set_num_threads(2)`` for NPT/SPIN, ``n_jobs``/``thread_count``
2 and a threadpoolctl limit of 2 for the rest), the whole of the 2-core machine the suite targets.
The tuned models (``hgb_tuned`` ...) run ``--tuned-trials`` Optuna TPE trials on an inner 80/20
split of the training rows, then refit on all of them; their fit seconds include the search.

Each (table, model, split) appends one JSON line to ``<out>/tabular_defaults.jsonl`` as soon as it
finishes, so a killed run resumes where it stopped. A line is reused only when its ``key`` matches:
a hash of the table (rows, columns, seeds, data), the model's resolved settings (``get_params()``
plus overrides; library parameters for the baselines), the library's version, ``DEVSUITE_VERSION``
and the hash of the table models' code in src/semiparam (the modules ``import semiparam`` runs).
git HEAD and the dirty flag are recorded in every line; ``--key-git`` also puts them in the key
(then committing the results file makes them stale).
The report (``tabular_defaults.md`` and ``.json``, or ``tabular_defaults_<tag>.*``) is generated
from the lines of the tag whose key is current; nothing measured is typed into source.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shlex
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import devsuite as ds
import numpy as np

from semiparam.parallel import map_tasks

RESULTS = Path(__file__).resolve().parent / "results"
JSONL_NAME = "tabular_defaults.jsonl"
OK_STATUSES = ("ok", "unavailable")


# -- command line ------------------------------------------------------------------------------------


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"none": None, "true": True, "false": False}.get(text.lower(), text)


def parse_sets(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``["npt.max_steps=30", "npt.train_options.patience=5"]`` -> ``{"npt": {"max_steps": 30,
    "train_options": {"patience": 5}}}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise SystemExit(f"--set wants MODEL.KEY=VALUE, got {item!r}")
        path, value = item.split("=", 1)
        model, *keys = path.split(".")
        if model not in ds.ALL_MODELS:
            raise SystemExit(f"--set: unknown model {model!r}")
        node = out.setdefault(model, {})
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = parse_value(value)
    return out


def split_list(text: str | None, allowed: Iterable[str], what: str) -> list[str]:
    allowed = list(allowed)
    if not text:
        return allowed
    items = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in items if t not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; choose from {allowed}")
    return items


# -- records ------------------------------------------------------------------------------------------


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill: ignore it
            continue
    return records


def rewrite_records(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Replace the JSONL with ``records``: written beside it, then renamed over it."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
    tmp.replace(path)


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(json.dumps(record, default=str, allow_nan=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class KeyMaker:
    """Current cache keys of cells, given the per-model overrides and the tuned trial count."""

    def __init__(self, include_git: bool = False):
        self.include_git = include_git
        self.code = ds.code_version()
        self._fingerprints: dict[str, dict] = {}

    def fingerprint(self, table: str) -> dict[str, Any]:
        if table not in self._fingerprints:
            self._fingerprints[table] = ds.TABLES[table].fingerprint()
        return self._fingerprints[table]

    def settings(self, table: str, model: str, split: int, overrides: Mapping, tuned_trials: int) -> dict:
        reason = ds.library_available(model)
        if reason is not None:
            return {"unavailable": reason}
        task = ds.TABLES[table].task
        est = ds.make_model(model, task, ds.split_seed(table, split), overrides, tuned_trials=tuned_trials)
        return ds.model_settings(model, est, overrides)

    def key(
        self,
        table: str,
        model: str,
        split: int,
        settings: Mapping,
        code: Mapping | None = None,
        src_keyed: bool | None = None,
    ) -> str:
        return ds.cell_key(
            self.fingerprint(table),
            model,
            split,
            settings,
            self.code if code is None else code,
            ds.library_version(model),
            include_git=self.include_git,
            src_keyed=src_keyed,
        )

    def record_is_current(self, record: Mapping[str, Any]) -> bool:
        """Would running the record's cell now, with its overrides, give the same key?"""
        try:
            table, model, split = record["table"], record["model"], int(record["split"])
            if table not in ds.TABLES or model not in ds.ALL_MODELS:
                return False
            settings = self.settings(
                table, model, split, record.get("overrides") or {}, int(record.get("tuned_trials", 20))
            )
            return self.key(table, model, split, settings) == record.get("key")
        except Exception:  # noqa: BLE001 - a record we cannot re-key is stale
            return False


# -- the grid -----------------------------------------------------------------------------------------


def run_grid(args: argparse.Namespace, sets: dict[str, dict[str, Any]], jsonl: Path, log=print) -> int:
    import torch

    torch.set_num_threads(ds.N_THREADS)
    keys = KeyMaker(include_git=args.key_git)
    done = set()
    if not args.force:
        done = {r.get("key") for r in read_records(jsonl) if r.get("status") in OK_STATUSES}
    tables = split_list(args.tables, ds.TABLES, "tables")
    models = split_list(args.models, ds.ALL_MODELS, "models")
    pending: list[tuple[str, str, int, dict[str, Any], dict[str, Any]]] = []
    for table in tables:
        for split in range(args.splits):
            for model in models:
                overrides = sets.get(model, {})
                settings = keys.settings(table, model, split, overrides, args.tuned_trials)
                key = keys.key(table, model, split, settings)
                if key in done:
                    log(f"[skip] {table} {model} split {split}: cached")
                    continue
                pending.append((table, model, split, overrides, settings))

    def finished(_: int, record: dict[str, Any]) -> None:
        append_record(jsonl, record)
        if args.backend != "serial":  # the task's own lines stayed on its worker
            outcome = record.get("error") or f"{record.get('primary')}={record.get('score')}"
            log(
                f"[{record['status']}] {record['table']} {record['model']} split {record['split']}: {outcome}"
            )

    cell = functools.partial(_run_pending, keys, args.tuned_trials, args.tag, log)
    if args.backend == "ray":
        # Ray workers on this machine inherit the environment: let them import devsuite too
        here = str(Path(__file__).resolve().parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    map_tasks(
        cell,
        pending,
        backend=args.backend,
        address=args.ray_address,
        cpus_per_task=ds.N_THREADS,
        threads=ds.N_THREADS,
        on_result=finished,
    )
    return len(pending)


def _run_pending(
    keys: KeyMaker, tuned_trials: int, tag: str, log: Any, cell: tuple[str, str, int, dict, dict]
) -> dict[str, Any]:
    table, model, split, overrides, settings = cell
    return run_cell_record(keys, table, model, split, overrides, tuned_trials, tag, settings, log)


def run_cell_record(
    keys: KeyMaker,
    table: str,
    model: str,
    split: int,
    overrides: Mapping[str, Any],
    tuned_trials: int,
    tag: str,
    settings: Mapping[str, Any] | None = None,
    log=print,
) -> dict[str, Any]:
    """Run one cell now and return its JSONL record (status ok, unavailable or error)."""
    import torch

    if settings is None:
        settings = keys.settings(table, model, split, overrides, tuned_trials)
    record: dict[str, Any] = {
        "table": table,
        "model": model,
        "split": split,
        "tag": tag,
        "key": keys.key(table, model, split, settings),
        "overrides": dict(overrides),
        "tuned_trials": tuned_trials,
        "settings": settings,
        "code": keys.code,
        "library_version": ds.library_version(model),
        "machine": {**ds.machine(), "torch_threads": torch.get_num_threads()},
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if "unavailable" in settings:
        record["status"] = "unavailable"
        record["error"] = settings["unavailable"]
        log(f"[n/a ] {table} {model}: {settings['unavailable']}")
    else:
        log(f"[run ] {table} {model} split {split} ...")
        try:
            record.update(ds.run_cell(table, model, split, overrides, tuned_trials))
            record["status"] = "ok"
            log(f"       {record['primary']}={record['score']:.4f} fit {record['fit_seconds']:.1f}s")
        except Exception as exc:  # noqa: BLE001 - one failing cell must not stop the grid
            record["status"] = "error"
            record["error"] = ds.describe_error(exc)
            log(f"[fail] {table} {model}: {record['error'].splitlines()[-1]}")
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return record


def prune(jsonl: Path, keys: KeyMaker) -> tuple[int, int]:
    """Rewrite the JSONL keeping only the records that are current; (kept, dropped)."""
    records = read_records(jsonl)
    keep = [r for r in records if keys.record_is_current(r)]
    rewrite_records(jsonl, keep)
    return len(keep), len(records) - len(keep)


def latest_per_cell(records: Iterable[Mapping[str, Any]]) -> dict[tuple, Mapping[str, Any]]:
    """The last record of each (table, model, split): a later line wins, except that a
    ``verification_rerun`` (a rerun an earlier version of this script appended as evidence, made
    on another machine than the record it checked; the results files still hold some) only fills
    a cell that has no other record: a table's scores and times then come from one machine."""
    out: dict[tuple, Mapping[str, Any]] = {}
    for r in records:
        cell = (r["table"], r["model"], int(r["split"]))
        if r.get("verification_rerun") and cell in out and not out[cell].get("verification_rerun"):
            continue
        out[cell] = r
    return out


def _best_in_last_tenth(best_step: int | None, n_steps: int | None) -> bool:
    """Whether a fit's best checkpoint came in the last tenth of its steps (it was cut short)."""
    return bool(n_steps) and best_step is not None and best_step >= 0.9 * n_steps


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return str(x)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def aggregate(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean over splits of each (table, model): primary score, other metrics, seconds, stopping."""
    cells = latest_per_cell(records)
    by: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    status: dict[tuple[str, str], str] = {}
    for (table, model, _split), r in sorted(cells.items()):
        if r.get("status") == "ok":
            by[(table, model)].append(r)
        else:
            status[(table, model)] = f"{r.get('status')}: {str(r.get('error', ''))[-200:]}"
    scores: dict[str, dict[str, Any]] = defaultdict(dict)
    for (table, model), rs in by.items():
        metrics: dict[str, list[float]] = defaultdict(list)
        for r in rs:
            for k, v in (r.get("metrics") or {}).items():
                metrics[k].append(float(v) if v is not None else float("nan"))
        entry = {
            "primary": rs[0].get("primary"),
            "score": float(np.mean([float(r["score"]) for r in rs])),
            "score_std": float(np.std([float(r["score"]) for r in rs])) if len(rs) > 1 else None,
            "n_splits": len(rs),
            "metrics": {k: float(np.mean(v)) for k, v in metrics.items()},
            "fit_seconds": float(np.mean([r["fit_seconds"] for r in rs])),
            "fit_cpu_seconds": float(np.mean([r.get("fit_cpu_seconds", float("nan")) for r in rs])),
            "predict_seconds": float(np.mean([r.get("predict_seconds", float("nan")) for r in rs])),
            "fit_peak_rss_mb": float(np.max([r.get("fit_peak_rss_mb", float("nan")) for r in rs])),
        }
        if rs[0].get("history") is not None:
            entry["history"] = [r.get("history") for r in rs]
        if rs[0].get("tuning") is not None:
            entry["tuning"] = [r.get("tuning") for r in rs]
        scores[table][model] = entry
    return {"scores": scores, "status": {f"{t}/{m}": s for (t, m), s in status.items()}}


BOOTSTRAP_DRAWS = 2000


def head_to_head(
    cells: Mapping[tuple, Mapping[str, Any]], model: str, gbdt: list[str], seed: int = 0
) -> dict[str, Any] | None:
    """``model`` against CatBoost and the best default GBDT, split by split: the share of the
    (table, split) pairs where it beats CatBoost at its defaults (and the tuned CatBoost, where
    run); the geometric mean over tables of its score over the best default GBDT's (per table, the
    geometric mean over the splits where all of them ran) with a 95% percentile interval from
    ``BOOTSTRAP_DRAWS`` resamples of the tables. None where no pair has both."""
    score = {
        k: float(r["score"])
        for k, r in cells.items()
        if r.get("status") == "ok" and r.get("score") is not None
    }
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
        rng = np.random.default_rng(seed)
        draws = rng.choice(logs, size=(BOOTSTRAP_DRAWS, len(logs)), replace=True).mean(axis=1)
        out["geomean_vs_best_gbdt"] = float(np.exp(logs.mean()))
        out["interval_95"] = [
            float(np.exp(np.quantile(draws, 0.025))),
            float(np.exp(np.quantile(draws, 0.975))),
        ]
        out["tables"] = len(logs)
    return out if len(out) > 1 else None


def head_to_head_lines(
    cells: Mapping[tuple, Mapping[str, Any]],
    models: list[str],
    gbdt: list[str],
    *,
    title: str = "Split by split: against CatBoost and the best default GBDT",
    intro: str = "",
) -> list[str]:
    rows = []
    for m in models:
        h = head_to_head(cells, m, gbdt)
        if h is None:
            continue

        def wins(ref: str, h: dict[str, Any] = h) -> str:
            w = h.get(f"wins_vs_{ref}")
            return f"{w[0]}/{w[1]} ({w[0] / w[1]:.0%})" if w else "–"

        interval = h.get("interval_95")
        rows.append(
            [
                m,
                wins("catboost"),
                wins("catboost_tuned"),
                _fmt(h.get("geomean_vs_best_gbdt"), 3),
                f"{interval[0]:.3f}-{interval[1]:.3f}" if interval else "–",
                h.get("tables", "–"),
            ]
        )
    if not rows:
        return []
    return [
        f"## {title}",
        "",
        intro + "Wins: the (table, split) pairs where the model's test score beats CatBoost's (lower is "
        "better). Geo-mean: over tables, the model's score over the best of "
        + ", ".join(gbdt)
        + f" on that split (per table the geometric mean over its splits; < 1: the model is better), "
        f"with a 95% interval from {BOOTSTRAP_DRAWS} bootstrap resamples of the tables.",
        "",
        _table(
            [
                "model",
                "wins vs CatBoost",
                "wins vs tuned CatBoost",
                "geo-mean / best GBDT",
                "95% interval",
                "tables",
            ],
            rows,
        ),
        "",
    ]


def composition_cells(cells: Mapping[tuple, Mapping[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """The sub-ensembles of the ``auto`` records (``composition_metrics``: the first ``i`` NPT and
    ``j`` SPIN members of each fit, predicting alone) as cells of pseudo-models named
    ``"auto i+j"``."""
    out: dict[tuple, dict[str, Any]] = {}
    for (table, model, split), r in cells.items():
        if model != "auto" or r.get("status") != "ok":
            continue
        for label, metrics in (r.get("composition_metrics") or {}).items():
            out[(table, f"auto {label}", split)] = {"status": "ok", "score": metrics[r["primary"]]}
    return out


def build_report(
    records: list[Mapping[str, Any]],
    *,
    title_tag: str = "default",
    table_info: Mapping[str, Mapping[str, Any]] | None = None,
    stale: int = 0,
) -> tuple[str, dict[str, Any]]:
    """Markdown and JSON aggregate of current records (already filtered)."""
    agg = aggregate(records)
    scores = agg["scores"]
    tables = [t for t in ds.TABLES if t in scores] + sorted(t for t in scores if t not in ds.TABLES)
    present = {m for t in scores for m in scores[t]}
    models = [m for m in ds.ALL_MODELS if m in present]
    defaults = [m for m in ds.DEFAULT_MODELS if m in present]
    per_table = {t: {m: scores[t][m]["score"] for m in scores[t]} for t in tables}
    rank_default = ds.average_ranks(per_table, defaults)
    rank_all = ds.average_ranks(per_table, models)

    cells = latest_per_cell(records)
    commands = sorted({r.get("command", "") for r in cells.values() if r.get("command")})
    codes = {json.dumps(r.get("code"), sort_keys=True) for r in cells.values() if r.get("code")}
    machines = {
        json.dumps({k: (r.get("machine") or {}).get(k) for k in ("cpu", "cpu_count", "torch_threads")})
        for r in cells.values()
    }
    splits = sorted({int(r["split"]) for r in cells.values()})

    md: list[str] = [f"# NPT and SPIN at their defaults against gradient boosting (tag `{title_tag}`)", ""]
    md.append(
        "Generated by `benchmarks/tabular_defaults.py` from `tabular_defaults.jsonl` (only lines whose "
        "cache key matches the current code and settings). Development suite: `benchmarks/devsuite.py`."
        " Every model at its defaults with only `random_state` set; 2 threads each. Lower is better: "
        "RMSE (regression, target units) and log loss (classification). Ranks are per table among "
        "the models named, ties share the mean rank; the average is over the tables where all of "
        "them have a result."
    )
    md.append("")
    md.append(f"Records used: {len(cells)}; splits: {splits}; stale records ignored: {stale}.")
    md.append("")
    md.append("Reproduce:")
    md.append("")
    md.append("```")
    md.extend(commands or ["(no command recorded)"])
    md.append("```")
    md.append("")
    overrides = sorted(
        {
            f"{r['model']}: {json.dumps(r['overrides'], sort_keys=True)}"
            for r in cells.values()
            if r.get("overrides")
        }
    )
    if overrides:
        md.append(
            "**Not defaults**: these settings were overridden: " + "; ".join(f"`{o}`" for o in overrides)
        )
        md.append("")
    md.append("Code: " + "; ".join(f"`{c}`" for c in sorted(codes)))
    md.append("")
    md.append("Machine: " + "; ".join(f"`{m}`" for m in sorted(machines)))
    md.append("")

    if table_info:
        md += ["## Tables", ""]
        rows = []
        for t in tables:
            info = table_info.get(t)
            if not info:
                continue
            rows.append(
                [
                    t,
                    info["task"],
                    info["target"],
                    info["rows"],
                    info["n_train"],
                    info["n_features"],
                    info["n_categorical"],
                    info["n_missing_cells"],
                    info["provenance"],
                ]
            )
        md.append(
            _table(
                ["table", "task", "target", "rows", "train", "features", "categorical", "NaN cells",
                 "source"],
                rows,
            )
        )  # fmt: skip
        md.append("")

    def score_rows(model_list: list[str]) -> list[list[Any]]:
        rows = []
        for t in tables:
            row: list[Any] = [t, next(iter(scores[t].values()))["primary"]]
            vals = {m: scores[t][m]["score"] for m in model_list if m in scores[t]}
            best = min(vals.values()) if vals else None
            for m in model_list:
                if m not in scores[t]:
                    row.append("–")
                    continue
                e = scores[t][m]
                text = _fmt(e["score"])
                if e.get("score_std") is not None:
                    text += f" ± {_fmt(e['score_std'], 2)}"
                row.append(f"**{text}**" if e["score"] == best else text)
            rows.append(row)
        return rows

    md += ["## Scores on the test split", ""]
    md.append(_table(["table", "metric", *models], score_rows(models)))
    md.append("")

    def rank_section(title: str, rank: Mapping[str, Any], model_list: list[str]) -> None:
        nonlocal md
        md += [f"## {title}", ""]
        if not model_list:
            md += ["(no models)", ""]
            return
        rows = [[t, *[_fmt(rank["ranks"][t][m], 3) for m in model_list]] for t in rank["tables"]]
        rows.append(["**average rank**", *[f"**{_fmt(rank['mean'][m], 3)}**" for m in model_list]])
        md.append(_table(["table", *model_list], rows))
        md.append("")
        md.append(f"Average over {len(rank['tables'])} table(s) where all of these models have a result.")
        missing = [t for t in tables if t not in rank["tables"]]
        if missing:
            md.append(f" Left out (a model missing): {', '.join(missing)}.")
        md.append("")

    rank_section("Ranks among the default models", rank_default, defaults)
    if any(m in present for m in ds.TUNED_MODELS):
        rank_section("Ranks with the tuned gradient boosting beside them", rank_all, models)

    gbdt = [m for m in ds.GBDT_DEFAULTS if m in present]
    neural = [m for m in ds.NEURAL_MODELS if m in present]
    if gbdt and neural:
        md += ["## Neural models against the best default gradient boosting", ""]
        md.append(
            "Ratio of the model's score to the best score among "
            + ", ".join(gbdt)
            + " on the table (< 1: the neural model is better)."
        )
        md.append("")
        rows = []
        ratios: dict[str, list[float]] = defaultdict(list)
        for t in tables:
            ref = [scores[t][m]["score"] for m in gbdt if m in scores[t]]
            if not ref:
                continue
            best = min(ref)
            row: list[Any] = [t, _fmt(best)]
            for m in neural:
                if m in scores[t] and best > 0:
                    r = scores[t][m]["score"] / best
                    ratios[m].append(r)
                    row.append(_fmt(r, 3))
                else:
                    row.append("–")
            rows.append(row)
        rows.append(
            [
                "**geometric mean**",
                "",
                *[
                    f"**{_fmt(float(np.exp(np.mean(np.log(ratios[m])))), 3)}**" if ratios[m] else "–"
                    for m in neural
                ],
            ]
        )
        rows.append(
            ["**tables won**", "", *[f"{sum(r < 1 for r in ratios[m])}/{len(ratios[m])}" for m in neural]]
        )
        md.append(_table(["table", "best GBDT", *neural], rows))
        md.append("")

    if gbdt:
        md += head_to_head_lines(cells, [m for m in models if m != "catboost"], gbdt)
    parts = composition_cells(cells)
    if parts and gbdt:
        names = sorted({m for (_, m, _) in parts}, key=lambda m: tuple(map(int, m.split()[1].split("+"))))
        md += head_to_head_lines(
            {**cells, **parts},
            names,
            gbdt,
            title="Sub-ensembles of auto: i NPT + j SPIN members of the same fits",
            intro="`auto i+j`: the first i NPT and j SPIN members of each `auto` fit, predicting "
            "together without the others (their fit time is not measured here). ",
        )

    cls_tables = [t for t in tables if next(iter(scores[t].values()))["primary"] == "log_loss"]
    if cls_tables:
        md += ["## Classification: accuracy and AUROC", ""]
        rows = []
        for t in cls_tables:
            row = [t]
            for m in models:
                e = scores[t].get(m)
                row.append(
                    "–"
                    if e is None
                    else f"{_fmt(e['metrics'].get('accuracy'), 3)} / {_fmt(e['metrics'].get('auroc'), 3)}"
                )
            rows.append(row)
        md.append(_table(["table (acc / AUROC)", *models], rows))
        md.append("")
        md += [
            "## Classification: expected calibration error",
            "",
            "Top-label ECE (15 equal-width confidence bins; 0 = the stated probability of the "
            "predicted class matches its hit rate). – where the record predates the metric.",
            "",
        ]

        def ece(t: str, m: str) -> str:
            return "–" if scores[t].get(m) is None else _fmt(scores[t][m]["metrics"].get("ece"), 3)

        rows = [[t, *[ece(t, m) for m in models]] for t in cls_tables]
        md.append(_table(["table", *models], rows))
        md.append("")

    md += ["## Fit seconds (wall)", ""]
    first = [m for m in ("npt", "hgb") if m in present]
    order = first + [m for m in models if m not in first]
    rows = [
        [t, *[_fmt(scores[t][m]["fit_seconds"], 3) if m in scores[t] else "–" for m in order]] for t in tables
    ]
    rows.append(
        [
            "**total**",
            *[
                _fmt(float(sum(scores[t][m]["fit_seconds"] for t in tables if m in scores[t])), 3)
                for m in order
            ],
        ]
    )
    md.append(_table(["table", *order], rows))
    md.append("")
    md.append(
        "Tuned models: search plus refit. CPU seconds, predict seconds and the fit's peak RSS are in "
        "the JSON aggregate."
    )
    md.append("")

    if neural:
        md += ["## When and why each neural fit stopped", ""]
        rows = []
        for t in tables:
            for m in neural:
                for h in (scores[t].get(m) or {}).get("history") or []:
                    if not h:
                        continue
                    members = h.get("members") or [{}]
                    n_steps = h.get("n_steps", h.get("len_steps", members[0].get("steps")))
                    # an ensemble's history: member 0 speaks for the fit; the others are in the JSON
                    h = {**h, "best_val_loss": h.get("best_val_loss", members[0].get("best_val_loss"))}
                    last_10 = "yes" if _best_in_last_tenth(h.get("best_step"), n_steps) else "no"
                    if len(members) > 1:  # count every member, not member 0 alone
                        late = sum(_best_in_last_tenth(x.get("best_step"), x.get("steps")) for x in members)
                        last_10 = f"{late} of {len(members)}"
                    extra = {
                        k: v
                        for k, v in h.items()
                        if k not in ("best_step", "n_steps", "len_steps", "stop_reason", "seconds",
                                     "stopped_early", "best_val_loss")
                        and not k.startswith("len_")
                        and not isinstance(v, (list, dict))
                        and v is not None
                    }  # fmt: skip
                    rows.append(
                        [
                            t,
                            m,
                            _fmt(h.get("best_step")),
                            _fmt(n_steps),
                            h.get("stop_reason") or "–",
                            last_10,
                            _fmt(h.get("best_val_loss")),
                            _fmt(h.get("seconds"), 3),
                            ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(extra.items())) or "",
                        ]
                    )
        md.append(
            _table(
                ["table", "model", "best step", "steps run", "stop reason", "best in last 10%",
                 "best val loss", "train s", "other"],
                rows,
            )
        )  # fmt: skip
        md += [
            "",
            '"plateau, annealed": the smoothed validation loss stopped improving, then the learning '
            "rate was annealed over a share of the steps run (the adaptive schedule's "
            "`anneal_fraction`, half at the defaults), so the best checkpoint usually "
            'falls in that anneal; "max_steps" or "time_budget" would mean the fit was cut off. '
            'Best step and steps run are member 0\'s; "best in last 10%" counts the members whose '
            "best checkpoint came in the last tenth of their run.",
            "",
        ]

    tuned = [m for m in ds.TUNED_MODELS if m in present]
    if tuned:
        md += ["## Tuned models: search", ""]
        rows = []
        for t in tables:
            for m in tuned:
                for tu in (scores[t].get(m) or {}).get("tuning") or []:
                    if tu:
                        rows.append(
                            [t, m, tu.get("n_trials"), _fmt(tu.get("best_inner_score")),
                             _fmt(tu.get("search_seconds"), 3),
                             json.dumps(tu.get("best_params"), sort_keys=True)]
                        )  # fmt: skip
        md.append(_table(["table", "model", "trials", "best inner score", "search s", "best params"], rows))
        md.append("")

    if agg["status"]:
        md += ["## Not run or failed", ""]
        for cell, s in sorted(agg["status"].items()):
            md.append(f"- `{cell}`: {s}")
        md.append("")

    out = {
        "tag": title_tag,
        "records": len(cells),
        "stale_ignored": stale,
        "commands": commands,
        "code": [json.loads(c) for c in sorted(codes)],
        "machines": [json.loads(m) for m in sorted(machines)],
        "tables": tables,
        "models": models,
        "scores": scores,
        "ranks_default": rank_default,
        "ranks_all": rank_all,
        "status": agg["status"],
        "table_info": dict(table_info or {}),
    }
    return "\n".join(md).rstrip() + "\n", out


def write_report(out_dir: Path, tag: str, include_git: bool = False, log=print) -> Path:
    jsonl = out_dir / JSONL_NAME
    records = [r for r in read_records(jsonl) if r.get("tag", "default") == tag]
    keys = KeyMaker(include_git=include_git)
    current = [r for r in records if keys.record_is_current(r)]
    tables = sorted({r["table"] for r in current if r["table"] in ds.TABLES})
    info = {}
    for t in tables:
        try:
            info[t] = {k: v for k, v in ds.describe_table(t).items() if k != "kinds"}
        except Exception:  # noqa: BLE001 - the report should not fail on a table it cannot load
            pass
    md, agg = build_report(current, title_tag=tag, table_info=info, stale=len(records) - len(current))
    stem = "tabular_defaults" if tag == "default" else f"tabular_defaults_{tag}"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.md").write_text(md)
    (out_dir / f"{stem}.json").write_text(json.dumps(agg, indent=1, default=str, allow_nan=True) + "\n")
    n_stale = len(records) - len(current)
    log(f"wrote {out_dir / (stem + '.md')} ({len(current)} current records, {n_stale} stale)")
    return out_dir / f"{stem}.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", help=f"comma list (default all): {','.join(ds.TABLES)}")
    parser.add_argument("--models", help=f"comma list (default all): {','.join(ds.ALL_MODELS)}")
    parser.add_argument("--splits", type=int, default=1, help="seeded 80/20 splits per table")
    parser.add_argument("--tuned-trials", type=int, default=20, help="Optuna trials of the tuned models")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--tag", default="default", help="names the report; records carry it")
    parser.add_argument("--set", action="append", default=[], metavar="MODEL.KEY=VALUE")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--force",
        action="store_true",
        help="rerun cells that have a current record (the newer line wins; e.g. to add a metric "
        "the harness did not compute when the record was made)",
    )
    parser.add_argument(
        "--backend",
        choices=["serial", "ray"],
        default="serial",
        help="run the cells one after another (default) or as Ray tasks of 2 CPUs each (their fit "
        "times are then only comparable when each task had its CPUs to itself)",
    )
    parser.add_argument(
        "--ray-address", help="with --backend ray: an existing cluster (default: start one here)"
    )
    parser.add_argument("--prune", action="store_true", help="delete stale lines from the JSONL")
    parser.add_argument("--key-git", action="store_true", help="put git HEAD + dirty flag in the keys")
    args = parser.parse_args(argv)
    sets = parse_sets(args.set)
    jsonl = args.out / JSONL_NAME
    if not args.report_only:
        run_grid(args, sets, jsonl)
    if args.prune and jsonl.exists():
        kept, dropped = prune(jsonl, KeyMaker(include_git=args.key_git))
        print(f"pruned {jsonl}: kept {kept}, dropped {dropped}")
    write_report(args.out, args.tag, include_git=args.key_git)
    return 0


if __name__ == "__main__":
    sys.exit(main())
