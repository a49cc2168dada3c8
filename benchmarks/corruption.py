#!/usr/bin/env python
"""The NPT paper's corruption test (Algorithm 1, Table 2) on real tables: NPT and SPIN at their
defaults fitted on a seeded 80/20 split, every test row predicted from the training rows as they are
and from a copy whose every column is permuted across rows. ``--analysis lookup``: the duplicate
lookup task (section 4.2) on the same split: a model trained to copy labels from duplicates.

    python benchmarks/corruption.py                     # yacht, boston, breast_cancer
    python benchmarks/corruption.py --tables concrete --models npt
    python benchmarks/corruption.py --analysis lookup --tables concrete --models npt

Each (table, model) is a fresh process with 2 threads; records in ``<out>/corruption.jsonl``; the
report ``<out>/<analysis>.md`` (+ ``.json``, ``.png``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import harness as h
import numpy as np

TABLES = ("yacht", "boston", "breast_cancer")
TITLES = {
    "corruption": "Corruption test (NPT paper, Algorithm 1)",
    "lookup": "Duplicate lookup task (NPT paper, section 4.2)",
}


def cell(analysis: str, table: str, model: str, seed: int, lookup_steps: int | None = None) -> dict[str, Any]:
    import torch
    from sklearn.model_selection import train_test_split

    from semiparam import NPTClassifier, NPTRegressor, SPINClassifier, SPINRegressor, datasets
    from semiparam.bench import corruption_test, lookup_test

    torch.set_num_threads(2)
    data = datasets.load(table)
    regression, name = data.task == "regression", data.info.paper_name
    X_train, X_test, y_train, y_test = train_test_split(
        data.X, data.y, test_size=0.2, random_state=seed, stratify=None if regression else data.y
    )
    cls = {"npt": (NPTClassifier, NPTRegressor), "spin": (SPINClassifier, SPINRegressor)}[model][regression]
    estimator = cls(random_state=seed, verbose=False)
    start = time.perf_counter()
    if analysis == "lookup":  # one model, trained on the lookup task by lookup_test
        estimator.set_params(n_estimators=1, max_steps=lookup_steps)
        X_train, X_test = X_train.reset_index(drop=True), X_test.reset_index(drop=True)
        result = lookup_test(estimator, X_train, y_train.to_numpy(), X_test, y_test.to_numpy(), dataset=name)
        return {**result, "seconds": time.perf_counter() - start}
    estimator.fit(X_train, y_train)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    context = None if model == "npt" else (X_train, y_train)  # SPIN keeps only its encoding
    result = corruption_test(estimator, X_test, y_test, context=context, seed=seed, dataset=name)
    return {**result, "fit_seconds": fit_seconds, "test_seconds": time.perf_counter() - start}


def _score(s: dict[str, float]) -> str:
    if "accuracy" in s:
        return f"accuracy {h.fmt(s['accuracy'])}, log loss {h.fmt(s['log_loss'])}"
    return f"RMSE {h.fmt(s['rmse'])}"


def report_lines(analysis: str, recs: list[dict[str, Any]], figure: str) -> list[str]:
    if analysis == "lookup":
        heads = ["dataset", "model", "train rows", "test rows", "labels", "duplicates' labels visible",
                 "hidden", "chance", "duplicate ranked first by attention"]  # fmt: skip
        rows = [[r["dataset"], r["model"].upper(), r["n_train"], r["n_test"],
                 "shuffled" if r.get("shuffle_targets") else "real", _score(r["duplicate_labels_visible"]),
                 _score(r["duplicate_labels_hidden"]), _score(r["chance"]) if "chance" in r else "-",
                 f"{100 * r['attention_top1_is_duplicate']:.1f}%"] for r in recs]  # fmt: skip
        note = (
            "Paper (Protein, regression, real labels): NPT RMSE 0.44 (main text) / 0.34 (Table 3), Pearson r "
            "99.9%. Shuffled labels: permuted across each training step's rows, so that only copying the "
            "duplicate's label predicts it (chance: the training labels' prior or mean)."
        )
        return [*h.md_table(heads, rows), "", note, "", f"![lookup]({figure})"]
    heads = ["dataset", "model", "rows", "context", "clean", "corrupt", "change", "paper (NPT)"]
    rows = [[r["dataset"], f"{r['model'].upper()} x{r['n_members']}", r["n_rows"], r["n_context"],
             _score(r["clean"]), _score(r["corrupt"]), f"{r['change']:+.2f} {r['change_unit']}",
             "-" if r["paper_change"] is None else f"{r['paper_change']:+.1f}"] for r in recs]  # fmt: skip
    note = (
        "Each test row is predicted from a context whose every column (values and mask bits, the target "
        "included) is permuted across the context rows, a fresh permutation per row. Negative change: worse "
        "after corruption, i.e. the model uses the other rows."
    )
    return [note, "", *h.md_table(heads, rows), "", f"![corruption]({figure})"]


def plot(analysis: str, recs: list[dict[str, Any]], path: Path) -> None:
    """Corruption: the change beside the paper's; lookup: how often the duplicate is ranked first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    x = np.arange(len(recs))
    if analysis == "lookup":
        ax.bar(x, [100 * r["attention_top1_is_duplicate"] for r in recs])
        ax.set(ylabel="duplicate ranked first (%)", ylim=(0, 100))
    else:
        ax.bar(x - 0.2, [r["change"] for r in recs], width=0.4, label="ours")
        ax.bar(x + 0.2, [np.nan if r["paper_change"] is None else r["paper_change"] for r in recs], width=0.4,
               label="paper (NPT)")  # fmt: skip
        ax.set(ylabel="change after corruption\n(acc. points / % RMSE)")
        ax.axhline(0, color="black", lw=0.8)
        ax.legend()
    ax.set_xticks(x, [f"{r['dataset']} {r['model'].upper()}" for r in recs])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--models", default="npt,spin")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=h.RESULTS)
    parser.add_argument("--analysis", default="corruption", choices=["corruption", "lookup"])
    parser.add_argument("--lookup-steps", type=int, help="lookup: training steps (default: lookup_test's)")
    parser.add_argument("--timeout", type=float, default=7200.0, help="seconds per (table, model)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    records = h.Records(args.out / "corruption.jsonl")
    recs = []
    for table in args.tables.split(","):
        for model in args.models.split(","):
            s = {"analysis": args.analysis, "table": table, "model": model, "seed": args.seed}
            s |= {"lookup_steps": args.lookup_steps} if args.analysis == "lookup" else {}
            run = lambda s: h.run_cell("corruption:cell", s, timeout=args.timeout)  # noqa: E731
            rec = records.get(s) if args.report_only else records.run(s, run)
            print(f"{table} {model}: {rec and rec.get('change', rec.get('error'))}", flush=True)
            recs += [rec] if rec is not None and rec["ok"] else []
    if not recs:
        raise SystemExit("no results at the current code")
    stem = args.out / args.analysis
    plot(args.analysis, recs, stem.with_suffix(".png"))
    lines = report_lines(args.analysis, recs, stem.with_suffix(".png").name)
    print(f"wrote {h.write_report(stem, TITLES[args.analysis], lines, recs, records=recs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
