"""Run a benchmark suite: datasets x models x folds, with every reduction recorded.

A :class:`SuitePlan` names the datasets (each with its reductions: folds, row caps, search budget,
table-model steps) and the models. :func:`run_suite` runs it fold by fold, appends one JSON line
per (dataset, model, fold) to ``<out>/<plan>.jsonl`` as it goes (so an interrupted run resumes
where it stopped), and returns the aggregated results that :mod:`semiparam.bench.report` writes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._io import digest
from .baselines import BASELINES, FoldData
from .measure import code_hash, library_version, machine_info, measure
from .models import TableModelSpec, model_title, model_unavailable_reason, run_table_model
from .protocol import Fold, mean_se, paper_folds, reduce_fold, score_predictions


@dataclass(frozen=True)
class DatasetPlan:
    """One dataset of a suite and how far it is reduced from the paper's protocol."""

    name: str
    folds: int | None = None  # run the first k folds of the paper's CV (None: all)
    max_train: int | None = None  # row caps per part, applied after the paper's split
    max_val: int | None = None
    max_test: int | None = None
    n_configs: int = 8  # baseline settings tried per fold (random search)
    max_estimators: int = 300  # cap on n_estimators in the boosting/forest search spaces
    table: dict[str, Any] = field(default_factory=dict)  # TableModelSpec overrides (e.g. max_steps)
    skip_models: tuple[str, ...] = ()  # models not run on this dataset (reason in the plan notes)


@dataclass(frozen=True)
class SuitePlan:
    """A benchmark: datasets with their reductions, models, seed and a note on the budget."""

    name: str
    datasets: tuple[DatasetPlan, ...]
    models: tuple[str, ...]
    table_defaults: TableModelSpec = TableModelSpec()
    seed: int = 42
    threads: int = 1
    notes: str = ""
    report_stem: str = ""  # file names of the JSON / report (default: the plan's name)

    @property
    def stem(self) -> str:
        return self.report_stem or self.name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        return digest(self.to_dict(), length=12)


def _table_spec(plan: SuitePlan, dplan: DatasetPlan, model: str) -> TableModelSpec:
    overrides = dict(dplan.table.get(model, dplan.table.get("*", {})))
    return dataclasses.replace(plan.table_defaults, **overrides)


def _fold_data(dataset: Any, fold: Fold) -> FoldData:
    X, y = dataset.X, dataset.y
    return FoldData(
        X.iloc[fold.train].reset_index(drop=True),
        y.iloc[fold.train].reset_index(drop=True),
        X.iloc[fold.val].reset_index(drop=True),
        y.iloc[fold.val].reset_index(drop=True),
        X.iloc[fold.test].reset_index(drop=True),
        dataset.task,
        tuple(dataset.categorical),
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _record_fingerprint(plan: SuitePlan, dplan: DatasetPlan, model: str) -> str:
    """What a (dataset, model) result depends on: its dataset plan, the model's settings, the seed
    and the version of the code that fits it: for a library model the hash of the table models'
    code (which holds the presets, so preset name + code hash fix every resolved setting), for a
    baseline its library's version and the code of its search. Results whose fingerprint matches
    are reused, so models can be run in separate calls; a change to that code makes them stale."""
    dataset = dataclasses.asdict(dplan)
    dataset.pop("folds")  # how many folds run does not change any one fold's result
    setting: dict[str, Any] = {"dataset": dataset, "model": model, "seed": plan.seed}
    if model not in BASELINES:
        setting["table"] = dataclasses.asdict(_table_spec(plan, dplan, model))
        setting["dataset"].pop("table")
        setting["code"] = code_hash()
    else:
        setting["library_version"] = library_version(BASELINES[model].requires or "sklearn")
        # the search (spaces, sampler, preprocessing) is semiparam's code: its changes make it stale
        setting["search_code"] = code_hash(modules=("semiparam.bench.baselines",))
    return digest(setting, length=12)


def _read_records(path: Path) -> dict[tuple[str, str, int, str], dict[str, Any]]:
    records: dict[tuple[str, str, int, str], dict[str, Any]] = {}
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("status") == "ok":
            records[(rec["dataset"], rec["model"], rec["fold"], rec.get("fingerprint", ""))] = rec
    return records


def run_suite(
    plan: SuitePlan,
    out_dir: str | Path,
    *,
    resume: bool = True,
    only_datasets: Sequence[str] | None = None,
    only_models: Sequence[str] | None = None,
    compute: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run ``plan``; write ``<out_dir>/<plan.name>.jsonl`` as it goes; return the results.

    With ``resume`` (default) results already in the ``.jsonl`` with the same settings are reused.
    ``only_datasets`` / ``only_models`` compute just those; the results still cover every
    (dataset, model) of the plan found in the ``.jsonl``, so a plan can be run model by model.
    ``compute=False`` only collects what the ``.jsonl`` holds (to rebuild a report)."""
    import torch

    from .. import datasets as registry

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(plan.threads)
    for label, names, known in (
        ("dataset", only_datasets, [d.name for d in plan.datasets]),
        ("model", only_models, list(plan.models)),
    ):
        unknown = sorted(set(names or ()) - set(known))
        if unknown:
            raise ValueError(f"{label}(s) {unknown} not in plan {plan.name!r}; it has {known}")
    jsonl = out / f"{plan.name}.jsonl"
    done = _read_records(jsonl) if resume else {}
    if not resume and jsonl.exists():
        jsonl.unlink()
    machine = machine_info()
    record_machine = _without_load(machine)  # its load is in each record's own load_average
    started = time.time()
    records: list[dict[str, Any]] = []
    unavailable = {m: model_unavailable_reason(m) for m in plan.models}
    for m, reason in unavailable.items():
        if reason:
            log(f"[bench] {model_title(m)} skipped: {reason}")
    dataset_meta: dict[str, Any] = {}
    for dplan in plan.datasets:
        dataset = registry.load(dplan.name)
        protocol, folds = paper_folds(dataset, seed=plan.seed)
        n_paper_folds = len(folds)
        folds = folds[: dplan.folds] if dplan.folds else folds
        reduced = [
            reduce_fold(
                dataset,
                f,
                max_train=dplan.max_train,
                max_val=dplan.max_val,
                max_test=dplan.max_test,
                seed=plan.seed,
            )
            for f in folds
        ]
        dataset_meta[dplan.name] = {
            "title": dataset.info.title,
            "paper_name": dataset.info.paper_name,
            "task": dataset.task,
            "rows": len(dataset.frame),
            "official_rows": dataset.info.official_rows,
            "features": len(dataset.features),
            "categorical": len(dataset.categorical),
            "protocol": protocol,
            "paper_folds": n_paper_folds,
            "folds_run": len(reduced),
            "paper_sizes": folds[0].sizes(),
            "sizes": reduced[0].sizes(),
            "notes": dataset.info.notes,
            "plan": dataclasses.asdict(dplan),
            "table_specs": {
                m: dataclasses.asdict(_table_spec(plan, dplan, m)) for m in plan.models if m not in BASELINES
            },
        }
        log(
            f"[bench] {dplan.name}: {protocol}, {len(reduced)}/{n_paper_folds} fold(s), "
            f"rows per fold {reduced[0].sizes()} (before caps {folds[0].sizes()})"
        )
        for fold in reduced:
            data = _fold_data(dataset, fold)
            y_test = dataset.y.iloc[fold.test].to_numpy()
            for model in plan.models:
                fingerprint = _record_fingerprint(plan, dplan, model)
                key = (dplan.name, model, fold.index, fingerprint)
                if unavailable[model] or model in dplan.skip_models:
                    continue
                if key in done:
                    records.append(done[key])
                    continue
                if (
                    not compute
                    or (only_datasets and dplan.name not in only_datasets)
                    or (only_models and model not in only_models)
                ):
                    continue
                record: dict[str, Any] = {
                    "plan": plan.name,
                    "fingerprint": fingerprint,
                    "dataset": dplan.name,
                    "model": model,
                    "fold": fold.index,
                    "sizes": fold.sizes(),
                    "machine": record_machine,
                }
                try:
                    with measure() as m:
                        if model in BASELINES:
                            output = BASELINES[model].run(
                                data,
                                n_configs=dplan.n_configs,
                                max_estimators=dplan.max_estimators,
                                small=protocol == "cv",
                                seed=plan.seed + fold.index,
                                threads=plan.threads,
                            )
                        else:
                            output = run_table_model(
                                model, _table_spec(plan, dplan, model), data, seed=plan.seed + fold.index
                            )
                    metrics = score_predictions(dataset.task, y_test, output.prediction, output.classes)
                    record.update(status="ok", metrics=metrics, details=output.details, **m.to_dict())
                    shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
                    log(
                        f"[bench]   {dplan.name} fold {fold.index} {model_title(model)}: {shown} "
                        f"({m.seconds:.1f}s, peak {m.peak_rss_mb:.0f} MB)"
                    )
                except Exception as err:  # noqa: BLE001 - one failing model must not stop the suite
                    record.update(
                        status="error", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc()
                    )
                    log(
                        f"[bench]   {dplan.name} fold {fold.index} {model_title(model)}: "
                        f"FAILED {type(err).__name__}: {err}"
                    )
                record["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
                record["load_average"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
                record = _jsonable(record)
                with jsonl.open("a") as fh:
                    fh.write(json.dumps(record) + "\n")
                records.append(record)
    return {
        "plan": _jsonable(plan.to_dict()),
        "plan_fingerprint": plan.fingerprint(),
        **_run_context(records, machine, started, computed=compute),
        "unavailable": {m: r for m, r in unavailable.items() if r},
        "datasets": _jsonable(dataset_meta),
        "records": records,
        "summary": summarize(records),
    }


def _without_load(machine: dict[str, Any]) -> dict[str, Any]:
    """``machine_info()`` less the load at the moment it was read: what a record made on it, or a
    report rebuilt from such records, can state about the machine."""
    return {k: v for k, v in machine.items() if k != "load_average_at_start"}


def _run_context(
    records: Sequence[dict[str, Any]], machine: dict[str, Any], started: float, *, computed: bool
) -> dict[str, Any]:
    """The machine and times a results file states. A run that computed describes itself. A
    report rebuilt from the records (``computed=False``) describes the machine the records name
    (every record since they carry one), never the machine or load of the rebuild, and no run
    time, so rebuilding twice writes the same file."""
    if computed:
        return {
            "machine": machine,
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
            "wall_seconds": time.time() - started,
        }
    named = {json.dumps(r["machine"], sort_keys=True): r["machine"] for r in records if r.get("machine")}
    context: dict[str, Any] = {"started": None, "wall_seconds": None, "report_only": True}
    if len(named) == 1 and all(r.get("machine") for r in records):
        return {**context, "machine": next(iter(named.values()))}
    # records from several machines, or older ones that do not name theirs: the rebuilding
    # machine stands in, and the report says so
    return {
        **context,
        "machine": _without_load(machine),
        "machines": list(named.values()),
        "records_without_machine": sum(1 for r in records if not r.get("machine")),
    }


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per dataset and model: mean and s.e. over folds of every metric, time and memory."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in records:
        if rec.get("status") == "ok":
            grouped.setdefault((rec["dataset"], rec["model"]), []).append(rec)
    summary: dict[str, dict[str, Any]] = {}
    for (dataset, model), recs in grouped.items():
        entry: dict[str, Any] = {"folds": len(recs)}
        for metric in recs[0]["metrics"]:
            mean, se = mean_se([r["metrics"][metric] for r in recs])
            entry[metric] = {"mean": mean, "se": se}
        entry["seconds_per_fold"] = float(np.mean([r["seconds"] for r in recs]))
        if all("cpu_seconds" in r for r in recs):
            entry["cpu_seconds_per_fold"] = float(np.mean([r["cpu_seconds"] for r in recs]))
        entry["peak_rss_mb"] = float(np.max([r["peak_rss_mb"] for r in recs]))
        entry["peak_above_start_mb"] = float(np.max([r["peak_above_start_mb"] for r in recs]))
        sps = [r["details"].get("seconds_per_step") for r in recs if r["details"].get("seconds_per_step")]
        if sps:
            entry["seconds_per_step"] = float(np.mean(sps))
            entry["steps"] = float(np.mean([r["details"]["steps"] for r in recs]))
        summary.setdefault(dataset, {})[model] = entry
    return summary


def write_results(results: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    slim = dict(results)
    # the per-setting search logs stay in the .jsonl; the JSON keeps the chosen settings
    slim["records"] = [
        {**r, "details": {k: v for k, v in r.get("details", {}).items() if k != "search"}, "traceback": None}
        for r in results["records"]
    ]
    path.write_text(json.dumps(_jsonable(slim), indent=1))
    return path
