#!/usr/bin/env python
"""Hyperparameter study for NPT's (or SPIN's) defaults on the development suite.

    .venv/bin/python benchmarks/tabular_study.py --trials 40                  # NPT, the small tables
    .venv/bin/python benchmarks/tabular_study.py --model spin --timeout 3600
    .venv/bin/python benchmarks/tabular_study.py --tables boston,oj,titanic --trials 20
    .venv/bin/python benchmarks/tabular_study.py --members 1 --trials 12         # single-model settings
    .venv/bin/python benchmarks/tabular_study.py --report-only               # rebuild the report
    .venv/bin/python benchmarks/tabular_study.py --members 1 --seeds 3 --trials 0 \
        --enqueue p_feature=0.05                      # every fit over 3 seeds: a study of its own
    .venv/bin/python benchmarks/tabular_study.py --members 1 --trials 0 \
        --enqueue train_options.tradeoff_start=0.5 --enqueue model_options.dropout=0.0

Optuna TPE (seeded) over estimator overrides (``SEARCH_SPACE`` below: edit it there). Each trial
fits the model on the inner 80% of each table's training rows (split 0 of ``devsuite``) and scores
it on the inner 20%: the test rows are never touched. A table's score is divided by HistGradient-
Boosting's default score on the same inner split (log loss ratio or RMSE ratio); the objective is
the mean ratio over the tables (< 1: better than HGB at its defaults). The current defaults are
scored once too (study user attribute ``defaults``) for reference. Fit seconds per table are trial
user attributes. ``--enqueue KEY=VALUE[,KEY=VALUE]`` queues a trial at the current defaults of
every search key except the ones given (one change at a time measures what each change is worth);
queued trials run before any sampled one, and TPE learns from them as from its own. The study
lives in SQLite at ``<out>/tabular_study_<model>.db`` and resumes;
``<out>/tabular_study_<model>.md`` is written from it at the end and by ``--report-only``.
Trials record the hash of src/semiparam; the report ranks those of the current code (older ones are
counted, not ranked; a study that once moved older trials to a newer hash keeps that mapping in
its ``rekeyed`` attribute). Torch runs on 2 threads.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import devsuite as ds
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"

# name -> (kind, choices | (low, high)). A dotted name goes into that options dict of the estimator
# ("model_options.d_embedding" -> model_options={"d_embedding": ...}); kinds: "categorical",
# "float", "log_float", "int". Keys missing from NPTConfig/SPINConfig/TrainConfig are skipped.
_COMMON: dict[str, tuple] = {
    "model_options.d_embedding": ("categorical", [8, 16, 32]),
    "model_options.dropout": ("float", (0.0, 0.3)),
    "model_options.n_frequencies": ("categorical", [0, 16]),
    "model_options.frequency_scale": ("log_float", (0.1, 3.0)),
    "learning_rate": ("log_float", (2e-3, 3e-2)),
    "p_feature": ("float", (0.0, 0.3)),
    "patience": ("categorical", [4, 8, 16]),
    "validation_fraction": ("categorical", [0.1, 0.2, 0.3]),  # rows that pick the checkpoint
    "train_options.tradeoff_start": ("float", (0.0, 1.0)),
    "train_options.tradeoff_steps": ("categorical", [100, 300, 1000]),
    "train_options.feature_transform": ("categorical", ["standard", "quantile"]),
}
SEARCH_SPACE: dict[str, dict[str, tuple]] = {
    "npt": {**_COMMON, "model_options.n_blocks": ("categorical", [2, 4])},
    "spin": {
        **_COMMON,
        "model_options.n_layers": ("categorical", [1, 2, 3]),
        "p_target": ("float", (0.1, 0.9)),
    },
}
ESTIMATOR_PARAMS = {"learning_rate", "p_feature", "p_target", "max_steps", "batch_size", "patience",
                    "validation_fraction"}  # fmt: skip
SEED = 0


def valid_space(model: str) -> tuple[dict[str, tuple], list[str]]:
    """The search space of ``model`` without the keys its configs lack (and those keys)."""
    import semiparam

    model_config = semiparam.NPTConfig if model == "npt" else semiparam.SPINConfig
    fields = {
        "model_options": {f.name for f in dataclasses.fields(model_config)},
        "train_options": {f.name for f in dataclasses.fields(semiparam.TrainConfig)},
    }
    space, skipped = {}, []
    for name, spec in SEARCH_SPACE[model].items():
        group, _, key = name.rpartition(".")
        ok = key in fields[group] if group else key in ESTIMATOR_PARAMS
        if ok:
            space[name] = spec
        else:
            skipped.append(name)
    return space, skipped


def sample(trial: Any, space: dict[str, tuple]) -> dict[str, Any]:
    params = {}
    for name, (kind, arg) in space.items():
        if kind == "categorical":
            params[name] = trial.suggest_categorical(name, list(arg))
        elif kind == "float":
            params[name] = trial.suggest_float(name, *arg)
        elif kind == "log_float":
            params[name] = trial.suggest_float(name, *arg, log=True)
        elif kind == "int":
            params[name] = trial.suggest_int(name, *arg)
        else:
            raise ValueError(f"unknown kind {kind!r} for {name}")
    return params


def default_params(
    model: str, space: dict[str, tuple], fixed: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The current default value of every key of ``space`` (as the estimator resolves it)."""
    est = ds.make_model(model, "regression", 0, dict(fixed or {}))
    model_config, train_config = est._configs()
    out = {}
    for name in space:
        group, _, key = name.rpartition(".")
        out[name] = getattr(model_config if group == "model_options" else train_config, key)
    return out


def parse_change(text: str, space: dict[str, tuple]) -> dict[str, Any]:
    """``"train_options.tradeoff_start=0.5,model_options.dropout=0"`` -> params, each value
    parsed as JSON (a bare word is a string) and checked against the search space."""
    out: dict[str, Any] = {}
    for part in text.split(","):
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or name not in space:
            raise SystemExit(f"--enqueue {text!r}: {name!r} is not a search key; keys: {sorted(space)}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw.strip()
        kind, arg = space[name]
        if kind == "categorical" and value not in arg:
            raise SystemExit(f"--enqueue {text!r}: {name} must be one of {list(arg)}")
        if kind != "categorical" and not arg[0] <= value <= arg[1]:
            raise SystemExit(f"--enqueue {text!r}: {name} must be in [{arg[0]}, {arg[1]}]")
        out[name] = value
    return out


def to_overrides(params: dict[str, Any]) -> dict[str, Any]:
    """{"model_options.d_embedding": 16, "learning_rate": 0.01} -> estimator keyword arguments."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        group, _, key = name.rpartition(".")
        if group:
            out.setdefault(group, {})[key] = value
        else:
            out[key] = value
    return out


def inner_data(table: str) -> tuple:
    X_tr, _, y_tr, _ = ds.split_table(table, 0)  # the test part is never used
    spec = ds.TABLES[table]
    return ds.inner_split(X_tr, y_tr, spec.task, ds.split_seed(table, 0))


def evaluate(
    model: str, table: str, overrides: dict[str, Any], seeds: int = 1, offset: int = 0
) -> dict[str, Any]:
    """Fit ``model`` on the inner training rows of ``table`` with ``random_state`` = the split's
    seed + ``offset`` + i for i < ``seeds`` and score each fit on the inner validation rows: ``score`` is the
    mean over the seeds, ``scores`` each one, ``fit_seconds`` their sum; stopping facts are the
    first seed's. The rows are the same for every seed, so the spread of ``scores`` is the
    model's own variance (initialisation, masks, validation carve-out, minibatches)."""
    from semiparam.bench.measure import measure

    spec = ds.TABLES[table]
    Xa, Xb, ya, yb = inner_data(table)
    n_classes = len(ds.load_table(table)[2])
    scores, seconds = [], 0.0
    for i in range(seeds):
        est = ds.make_model(model, spec.task, ds.split_seed(table, 0) + offset + i, overrides)
        with measure() as m:
            est.fit(Xa, ya)
        metrics = ds.predict_and_score(est, spec.task, Xb, yb, n_classes)
        scores.append(float(metrics[ds.primary_metric(spec.task)]))
        seconds += m.seconds
        if i == 0:
            first = est
    out: dict[str, Any] = {"score": float(np.mean(scores)), "fit_seconds": seconds}
    if seeds > 1:
        out["scores"] = scores
    if model in ds.NEURAL_MODELS:
        h = ds.history_summary(first) or {}
        out["best_step"] = h.get("best_step")
        out["stop_reason"] = h.get("stop_reason")
    return out


def reference_scores(
    study: Any,
    tables: list[str],
    model: str,
    fixed: dict[str, Any] | None = None,
    seeds: int = 1,
    offset: int = 0,
) -> dict[str, Any]:
    """HGB-default inner scores (the normaliser) and the model's current defaults (with the
    study's ``fixed`` overrides, e.g. one ensemble member), computed once per table and kept in
    the study's user attributes."""
    code = ds.code_version()["src_sha256"]
    hgb = dict(study.user_attrs.get("hgb", {}))
    for t in tables:
        if t not in hgb:
            hgb[t] = evaluate("hgb", t, {})
    study.set_user_attr("hgb", hgb)
    defaults = dict(study.user_attrs.get("defaults", {}))
    if defaults.get("src_sha256") != code:
        defaults = {"src_sha256": code}
    for t in tables:
        if t not in defaults:
            r = evaluate(model, t, dict(fixed or {}), seeds, offset)
            r["ratio"] = r["score"] / hgb[t]["score"]
            if "scores" in r:
                r["ratio_sd"] = float(np.std(r["scores"]) / hgb[t]["score"])
            defaults[t] = r
    study.set_user_attr("defaults", defaults)
    return hgb


def make_objective(
    model: str,
    tables: list[str],
    hgb: dict[str, Any],
    space: dict[str, tuple],
    fixed: dict[str, Any] | None = None,
    seeds: int = 1,
    offset: int = 0,
):
    code = ds.code_version()["src_sha256"]

    def objective(trial: Any) -> float:
        params = sample(trial, space)
        overrides = {**(fixed or {}), **to_overrides(params)}
        ratios, fit_seconds, detail = {}, {}, {}
        for t in tables:
            r = evaluate(model, t, overrides, seeds, offset)
            ratios[t] = r["score"] / hgb[t]["score"]
            fit_seconds[t] = r["fit_seconds"]
            detail[t] = r
        trial.set_user_attr("ratios", ratios)
        trial.set_user_attr("fit_seconds", fit_seconds)
        trial.set_user_attr("total_fit_seconds", float(sum(fit_seconds.values())))
        trial.set_user_attr("detail", detail)
        trial.set_user_attr("src_sha256", code)
        trial.set_user_attr("overrides", overrides)
        return float(np.mean(list(ratios.values())))

    return objective


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{digits}f}"
    return str(x)


def trial_code(study: Any, trial: Any) -> str | None:
    """The src hash a trial counts for: its own, or the one the study's ``rekeyed`` mapping moved it to."""
    own = trial.user_attrs.get("src_sha256")
    return study.user_attrs.get("rekeyed", {}).get(own, {}).get("to", own)


def write_report(
    study: Any,
    model: str,
    out: Path,
    top: int = 10,
    code: str | None = None,
    seeds: int = 1,
    offset: int = 0,
) -> Path:
    """``code``: the src hash whose trials are ranked (default: the current tree's). A study of
    several seeds per fit (``seeds``, from ``offset``) has a report of its own,
    ``tabular_study_<model>_seeds<K>[_offset<N>].md``."""
    import optuna

    code = code or ds.code_version()["src_sha256"]
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    current = [t for t in complete if trial_code(study, t) == code]
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    ranked = sorted(current, key=lambda t: t.value)[:top]
    tables = sorted({k for t in current for k in t.user_attrs.get("ratios", {})}) or sorted(
        k for k in study.user_attrs.get("hgb", {})
    )
    md = [f"# {model.upper()} hyperparameter study on the development suite", ""]
    md.append(
        "Generated by `benchmarks/tabular_study.py` from the Optuna study "
        f"`{study.study_name}` (`tabular_study_{model}.db`). Objective: mean over the tables of the "
        "model's inner-validation score divided by HistGradientBoosting's default score on the same "
        "split (log loss or RMSE ratio; lower is better; < 1 beats HGB). Inner split: 80/20 of the "
        "training rows of split 0; the test rows are never used."
        + (
            f" Every fit is repeated with {seeds} seeds (random_state = the split's seed + {offset} + i, "
            "same rows) "
            "and a table's score is their mean; \"ratio sd\" is the standard deviation of one fit's "
            "ratio over the seeds, the noise a single-seed comparison carries."
            if seeds > 1
            else ""
        )
    )
    md.append("")
    md.append(
        f"Trials: {len(study.trials)} ({len(complete)} complete, {len(failed)} failed); "
        f"{len(current)} with the current code (src {code}); {len(complete) - len(current)} older ones "
        "not ranked."
    )
    moved = {k: v for k, v in study.user_attrs.get("rekeyed", {}).items() if v.get("to") == code}
    if moved:
        md.append(
            "Counted as current after a verified rekey (the current code reproduced the stored "
            "defaults' inner scores exactly on the tables named): "
            + "; ".join(f"src {k} ({', '.join(v['verified_tables'])})" for k, v in sorted(moved.items()))
            + "."
        )
    md.append("")
    md += ["Commands:", "", "```", *study.user_attrs.get("commands", []), "```", ""]
    hgb = study.user_attrs.get("hgb", {})
    defaults = study.user_attrs.get("defaults", {})
    if hgb:
        md += ["## References (inner validation)", ""]
        header = [
            "table",
            "HGB default score",
            f"{model} defaults score",
            "ratio",
            *(["ratio sd"] if seeds > 1 else []),
            "fit s",
            "best step",
            "stop",
        ]
        md.append("| " + " | ".join(header) + " |")
        md.append("|" + "---|" * len(header))
        for t in tables:
            d = defaults.get(t) if defaults.get("src_sha256") == code else None
            d = d or {}
            md.append(
                f"| {t} | {_fmt(hgb.get(t, {}).get('score'), 4)} | {_fmt(d.get('score'), 4)} | "
                f"{_fmt(d.get('ratio'))} | "
                + (f"{_fmt(d.get('ratio_sd'))} | " if seeds > 1 else "")
                + f"{_fmt(d.get('fit_seconds'))} | {_fmt(d.get('best_step'))} | "
                f"{d.get('stop_reason') or '–'} |"
            )
        if defaults.get("src_sha256") == code:
            ratios = [defaults[t]["ratio"] for t in tables if t in defaults]
            if ratios:
                pad = " |" * (len(header) - 4)  # the columns after "ratio"
                md.append(f"| **mean ratio** | | | **{_fmt(float(np.mean(ratios)))}** |{pad}")
        md.append("")
    changed = sorted((t for t in current if t.user_attrs.get("change")), key=lambda t: t.value)
    if changed:
        d0 = defaults if defaults.get("src_sha256") == code else {}
        md += ["## One change at a time (queued with --enqueue; defaults elsewhere)", ""]
        md.append(
            "Each row: the objective and per-table ratios with that change; the first row is the "
            "current defaults (the references above)."
        )
        md.append("")
        header = ["change", "trial", "objective", *tables, "fit s (all tables)"]
        md.append("| " + " | ".join(header) + " |")
        md.append("|" + "---|" * len(header))
        if all(t in d0 for t in tables):
            md.append(
                "| (defaults) | – | "
                + _fmt(float(np.mean([d0[t]["ratio"] for t in tables])), 4)
                + " | "
                + " | ".join(_fmt(d0[t]["ratio"]) for t in tables)
                + f" | {_fmt(float(sum(d0[t]['fit_seconds'] for t in tables)))} |"
            )
        for t in changed:
            ratios = t.user_attrs.get("ratios", {})
            md.append(
                f"| `{t.user_attrs['change']}` | {t.number} | {_fmt(t.value, 4)} | "
                + " | ".join(_fmt(ratios.get(tb)) for tb in tables)
                + f" | {_fmt(t.user_attrs.get('total_fit_seconds'))} |"
            )
        md.append("")
    md += [f"## Top {len(ranked)} trials", ""]
    header = ["trial", "objective", *tables, "fit s (all tables)", "params"]
    md.append("| " + " | ".join(header) + " |")
    md.append("|" + "---|" * len(header))
    for t in ranked:
        ratios = t.user_attrs.get("ratios", {})
        md.append(
            f"| {t.number} | {_fmt(t.value, 4)} | "
            + " | ".join(_fmt(ratios.get(tb)) for tb in tables)
            + f" | {_fmt(t.user_attrs.get('total_fit_seconds'))} | `{json.dumps(t.params, sort_keys=True)}` |"
        )
    md.append("")
    if ranked:
        best = ranked[0]
        md += ["## Best trial: per table", ""]
        md.append("| table | ratio | fit s | best step | stop |")
        md.append("|---|---|---|---|---|")
        for tb in tables:
            d = best.user_attrs.get("detail", {}).get(tb, {})
            ratio = best.user_attrs.get("ratios", {}).get(tb)
            md.append(
                f"| {tb} | {_fmt(ratio)} | {_fmt(d.get('fit_seconds'))} | "
                f"{_fmt(d.get('best_step'))} | {d.get('stop_reason') or '–'} |"
            )
        md.append("")
        md.append("Overrides: `" + json.dumps(best.user_attrs.get("overrides"), sort_keys=True) + "`")
        md.append("")
    stem = (
        f"tabular_study_{model}"
        + (f"_seeds{seeds}" if seeds > 1 else "")
        + (f"_offset{offset}" if offset else "")
    )
    path = out / f"{stem}.md"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(md).rstrip() + "\n")
    print(f"wrote {path}")
    return path


def enqueue(
    study: Any, model: str, space: dict[str, tuple], fixed: dict[str, Any], changes: list[str]
) -> int:
    """Queue one trial per ``--enqueue`` change (defaults elsewhere), skipping one the study has
    already run or queued with the current code; returns how many were queued."""
    if not changes:
        return 0
    base = default_params(model, space, fixed)
    outside = [k for k, (kind, arg) in space.items() if kind == "categorical" and base[k] not in arg]
    outside += [
        k for k, (kind, arg) in space.items() if kind != "categorical" and not arg[0] <= base[k] <= arg[1]
    ]
    if outside:
        raise SystemExit(f"the defaults of {outside} lie outside the search space; widen it first")
    code = ds.code_version()["src_sha256"]
    seen = [
        t.system_attrs.get("fixed_params", {}) if t.state.name == "WAITING" else t.params
        for t in study.trials
        if t.state.name == "WAITING" or trial_code(study, t) == code
    ]
    queued = 0
    for text in changes:
        params = {**base, **parse_change(text, space)}
        if any(all(p.get(k) == v for k, v in params.items()) for p in seen):
            print(f"--enqueue {text}: already in the study with the current code; not queued again")
            continue
        study.enqueue_trial(params, user_attrs={"change": text})
        seen.append(params)
        queued += 1
    return queued


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(ds.FAMILIES), default="npt")
    parser.add_argument("--tables", help=f"comma list (default {','.join(ds.SMALL_TABLES)})")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=None, help="seconds for this invocation")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--code", help="rank the trials made with this src hash (default: the current tree)")
    parser.add_argument(
        "--members",
        type=int,
        help="ensemble members of every fit (default: the estimator's); a study of single-model "
        "settings with --members 1 costs a third of one at the default three",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="fit every table with this many seeds (random_state = the split's seed + i) and score "
        "their mean: one fit's spread over seeds is as large as most single changes, so a "
        "comparison of settings needs several (a study of its own, with its own report)",
    )
    parser.add_argument(
        "--seed-offset",
        type=int,
        default=0,
        help="with --seeds: start the seeds here (random_state = the split's seed + offset + i), to "
        "repeat a study on other seeds; a study and report of its own",
    )
    parser.add_argument(
        "--enqueue",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="queue a trial at the defaults with these search keys changed (repeatable); it runs "
        "once, in addition to --trials sampled ones",
    )
    args = parser.parse_args(argv)

    import optuna
    import torch

    torch.set_num_threads(ds.N_THREADS)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{(args.out / f'tabular_study_{args.model}.db').resolve()}"
    tables = (
        [t.strip() for t in args.tables.split(",") if t.strip()] if args.tables else list(ds.SMALL_TABLES)
    )
    unknown = [t for t in tables if t not in ds.TABLES]
    if unknown:
        raise SystemExit(f"unknown tables {unknown}; choose from {list(ds.TABLES)}")
    fixed = {"n_estimators": args.members} if args.members is not None else {}
    study_name = f"{args.model}:{','.join(sorted(tables))}"
    if fixed:
        study_name += f":members={args.members}"
    if args.seeds < 1:
        raise SystemExit(f"--seeds must be >= 1, got {args.seeds}")
    if args.seeds > 1:
        study_name += f":seeds={args.seeds}"
    if args.seed_offset:
        study_name += f":offset={args.seed_offset}"
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        load_if_exists=True,
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=args.seed),
    )
    if not args.report_only:
        # a trial left RUNNING was killed with its process (the study runs in one process at a time):
        # mark it failed so that the report and TPE see only finished trials
        for stale in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            study.tell(stale.number, state=optuna.trial.TrialState.FAIL)
            print(f"trial {stale.number} was interrupted before it finished: marked failed")
        space, skipped = valid_space(args.model)
        if skipped:
            print(f"search space: skipping keys the configs lack: {skipped}")
        command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
        commands = list(study.user_attrs.get("commands", []))
        if command not in commands:
            study.set_user_attr("commands", [*commands, command])
        study.set_user_attr("space", {k: list(v) for k, v in space.items()})
        study.set_user_attr("machine", ds.machine())
        start = time.perf_counter()
        hgb = reference_scores(study, tables, args.model, fixed, args.seeds, args.seed_offset)
        print(f"references done in {time.perf_counter() - start:.0f}s")
        queued = enqueue(study, args.model, space, fixed, args.enqueue)
        study.optimize(
            make_objective(args.model, tables, hgb, space, fixed, args.seeds, args.seed_offset),
            n_trials=args.trials + queued,
            timeout=args.timeout,
            catch=(Exception,),
        )
    write_report(study, args.model, args.out, code=args.code, seeds=args.seeds, offset=args.seed_offset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
