#!/usr/bin/env python
"""Refit on all rows, or keep the ensemble of members that each hold out a different validation
split? (issue 10, "What must work" item 1.)

    .venv/bin/python benchmarks/refit_ablation.py                        # yacht,carseats,titanic,boston,oj
    .venv/bin/python benchmarks/refit_ablation.py --tables boston --model spin
    .venv/bin/python benchmarks/refit_ablation.py --report-only

For each table (split 0 of ``devsuite``) the default estimator (only ``random_state`` set) is fitted
and scored on the test rows: the ``default`` arm. Then each of its members is refitted as a
one-member model on every training row (``validation_fraction=0``, the member's seed), and the
refitted members are averaged as the ensemble averages its own (probabilities; means):

- ``refit_run``: as many steps as the member ran, with the same schedule shape (the adaptive
  schedule without validation rows anneals over the last third of ``max_steps``, which is the shape
  of a run that stopped on a plateau: anneal = half of the steps before it); the final weights.
- ``refit_best``: up to the member's chosen checkpoint (``best_step + 1`` steps): a constant
  learning rate when the checkpoint came before the anneal, else flat then cosine with the anneal
  starting where the member's did (the cosine then runs to zero by the checkpoint, where the
  member's had only partly annealed). No warm-up (the member's was 1% of the step ceiling).

Classification: a refitted member has no validation rows to temperature-scale on, so it takes its
member's fitted temperature. Threads: 2 (the whole machine); run it alone. Each (table, arm) appends
one line to ``<out>/refit_ablation.jsonl`` when done (the run resumes); lines of other code (hash of
the table models' code) are ignored. ``refit_ablation.md`` is generated from the lines.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import devsuite  # noqa: E402

DEFAULT_TABLES = ("yacht", "carseats", "titanic", "boston", "oj")
ARMS = ("default", "refit_run", "refit_best")


def _member_overrides(history: Any, arm: str) -> dict[str, Any]:
    steps, best, anneal = history.n_steps, history.best_step, history.anneal_start
    base: dict[str, Any] = {"n_estimators": 1, "validation_fraction": 0.0}
    if arm == "refit_run":
        return {**base, "max_steps": steps}
    last = (best if best is not None else steps - 1) + 1
    if anneal is None or last <= anneal:
        return {**base, "max_steps": last, "train_options": {"lr_schedule": "constant"}}
    return {
        **base,
        "max_steps": last,
        "train_options": {"lr_schedule": "flat_cosine", "flat_fraction": anneal / last},
    }


def _predict(models: list[Any], task: str, X: Any, n_classes: int) -> np.ndarray:
    if task == "regression":
        return np.mean([m.predict(X) for m in models], axis=0)
    return np.mean(
        [devsuite.aligned_proba(m.predict_proba(X), m.classes_, n_classes) for m in models], axis=0
    )


def run_table(table: str, model_name: str, arms: list[str], done: set, log=print) -> list[dict[str, Any]]:
    import torch
    from threadpoolctl import threadpool_limits

    from semiparam.bench.measure import measure

    torch.set_num_threads(devsuite.N_THREADS)
    spec = devsuite.TABLES[table]
    X_tr, X_te, y_tr, y_te = devsuite.split_table(table, 0)
    _, _, classes = devsuite._load_cached(table)
    seed = devsuite.split_seed(table, 0)
    out = []
    with threadpool_limits(limits=devsuite.N_THREADS):
        with measure() as m_fit:
            base = devsuite.make_model(model_name, spec.task, seed)
            base.fit(X_tr, y_tr)
        members = base.learner_.members
        histories = base.history_.members
        pred = _predict([base], spec.task, X_te, len(classes))
        rows = {"default": (pred, m_fit.seconds, [h.n_steps for h in histories])}
        for arm in arms:
            if arm == "default" or (table, model_name, arm) in done:
                continue
            start = time.perf_counter()
            refits, steps = [], []
            for member, history in zip(members, histories):
                overrides = _member_overrides(history, arm)
                refit = devsuite.make_model(model_name, spec.task, int(member.seed), overrides)
                refit.fit(X_tr, y_tr)
                refit.learner_.members[0].temperatures = dict(member.temperatures)
                refits.append(refit)
                steps.append(overrides["max_steps"])
            pred = _predict(refits, spec.task, X_te, len(classes))
            rows[arm] = (pred, time.perf_counter() - start, steps)
    for arm, (pred, seconds, steps) in rows.items():
        if (table, model_name, arm) in done:
            continue
        metrics = devsuite.score(spec.task, y_te.to_numpy(), pred)
        primary = devsuite.primary_metric(spec.task)
        log(f"{table} {model_name} {arm}: {primary} {metrics[primary]:.4f}, {seconds:.1f} s, steps {steps}")
        out.append(
            {
                "table": table,
                "model": model_name,
                "arm": arm,
                "metrics": metrics,
                "primary": primary,
                "score": metrics[primary],
                "seconds": seconds,
                "steps": steps,
                "best_steps": [h.best_step for h in histories],
                "anneal_starts": [h.anneal_start for h in histories],
            }
        )
    return out


def _current(record: dict[str, Any], code: str) -> bool:
    return record.get("code", {}).get("table_models") == code


def write_report(path: Path, records: list[dict[str, Any]], code: str) -> None:
    current = [r for r in records if _current(r, code)]
    lines = [
        "# Refit on all rows vs the ensemble of held-out validation splits",
        "",
        "Generated by `benchmarks/refit_ablation.py` from `refit_ablation.jsonl` (issue 10, item 1).",
        f"Table models' code: `{code}`; {len(records) - len(current)} line(s) of other code left out.",
        "",
    ]
    if current:
        commands = sorted({r["command"] for r in current})
        heads = sorted(
            {
                f"{str(r['code'].get('git_head'))[:10]}{' (dirty)' if r['code'].get('git_dirty') else ''}"
                for r in current
            }
        )
        machines = sorted(
            {f"{r['machine'].get('cpu')}, {r['machine'].get('cpu_count')} cores" for r in current}
        )
        lines += [
            "Commands: " + "; ".join(f"`{c}`" for c in commands),
            f"Machine: {'; '.join(machines)}; git {', '.join(heads)}.",
            "",
            "`default`: the estimator at its defaults (members hold out different validation splits; "
            "best checkpoint). `refit_run`: each member refitted on all training rows for the steps "
            "it ran (same schedule shape, final weights). `refit_best`: refitted up to its chosen "
            "checkpoint. Seconds: the default fit; for the refits, the refits alone (their total "
            "cost is that plus the default fit that chose the steps). Primary metric: RMSE or log "
            "loss, lower is better.",
            "",
            "| table | model | arm | primary | score | vs default | seconds | steps per member |",
            "|---|---|---|---|---|---|---|---|",
        ]
        by_cell = {(r["table"], r["model"], r["arm"]): r for r in current}
        wins = {arm: 0 for arm in ARMS[1:]}
        cells = sorted({(r["table"], r["model"]) for r in current})
        for table, model in cells:
            ref = by_cell.get((table, model, "default"))
            for arm in ARMS:
                r = by_cell.get((table, model, arm))
                if r is None:
                    continue
                ratio = r["score"] / ref["score"] if ref and ref["score"] else float("nan")
                if arm != "default" and ref is not None and r["score"] < ref["score"]:
                    wins[arm] += 1
                lines.append(
                    f"| {table} | {model} | {arm} | {r['primary']} | {r['score']:.4f} | "
                    f"{ratio:.3f} | {r['seconds']:.1f} | {r['steps']} |"
                )
        lines += [""]
        for arm, n in wins.items():
            lines.append(f"- `{arm}` better than `default` on {n} of {len(cells)} (table, model) cells.")
        for model in sorted({m for _, m in cells}):
            for arm in ARMS[1:]:
                ratios = [
                    by_cell[(t, m, arm)]["score"] / by_cell[(t, m, "default")]["score"]
                    for t, m in cells
                    if m == model and (t, m, arm) in by_cell and (t, m, "default") in by_cell
                ]
                if ratios:
                    mean = float(np.exp(np.mean(np.log(ratios))))
                    lines.append(
                        f"- {model} `{arm}`: geometric mean score ratio to `default` {mean:.3f} "
                        f"over {len(ratios)} table(s)."
                    )
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps({"code": code, "records": current}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tables", default=",".join(DEFAULT_TABLES))
    parser.add_argument("--model", default="npt", choices=devsuite.FAMILIES)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "ablations"))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    from semiparam.bench.measure import code_hash, machine_info

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "refit_ablation.jsonl"
    text = jsonl.read_text() if jsonl.exists() else ""
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    code = code_hash()
    if not args.report_only:
        done = {(r["table"], r["model"], r["arm"]) for r in records if _current(r, code)}
        context = {
            "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
            "code": {**devsuite.code_version(), "table_models": code},
            "machine": {k: v for k, v in machine_info().items() if not k.startswith("load")},
        }
        for table in args.tables.split(","):
            if all((table, args.model, arm) in done for arm in ARMS):
                continue
            for row in run_table(table, args.model, list(ARMS), done):
                record = {**row, **context}
                records.append(record)
                with jsonl.open("a") as fh:
                    fh.write(json.dumps(devsuite.jsonable(record)) + "\n")
    write_report(out / "refit_ablation.md", records, code)
    print(f"wrote {out / 'refit_ablation.md'}")


if __name__ == "__main__":
    main()
