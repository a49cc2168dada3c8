#!/usr/bin/env python
"""The NPT paper's corruption test (Algorithm 1, Table 2) on real tables: NPT and SPIN at their
defaults (only ``random_state`` set) fitted on a seeded 80/20 split, then every test row predicted
from the training rows as they are and from a copy whose every column is permuted across rows.
With ``--analysis lookup``, the duplicate lookup task (section 4.2) on the same split instead:
a model trained to copy labels from duplicates predicts the test rows from their duplicates.

    .venv/bin/python benchmarks/corruption.py                     # yacht, boston, breast_cancer
    .venv/bin/python benchmarks/corruption.py --tables concrete --models npt
    .venv/bin/python benchmarks/corruption.py --analysis lookup --tables concrete --models npt

Each (table, model) appends a JSON line to ``results/tmp/<analysis>.jsonl`` as it finishes (a
killed run resumes; a line is reused only when its key -- table, model, seed and semiparam's code
hash -- still holds); the report ``results/<analysis>.md`` (+ ``.json``, ``.png``) is generated
from the current lines. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch
from sklearn.model_selection import train_test_split

from semiparam import NPTClassifier, NPTRegressor, SPINClassifier, SPINRegressor, datasets
from semiparam.bench import corruption_test, lookup_test, write_analysis
from semiparam.bench.measure import code_hash

RESULTS = Path(__file__).resolve().parent / "results"
TABLES = ("yacht", "boston", "breast_cancer")
MODELS = {"npt": (NPTClassifier, NPTRegressor), "spin": (SPINClassifier, SPINRegressor)}


def run_one(
    table: str, model: str, seed: int, analysis: str = "corruption", lookup_steps: int | None = None
) -> dict:
    data = datasets.load(table)
    X_train, X_test, y_train, y_test = train_test_split(
        data.X,
        data.y,
        test_size=0.2,
        random_state=seed,
        stratify=None if data.task == "regression" else data.y,
    )
    classifier, regressor = MODELS[model]
    cls = regressor if data.task == "regression" else classifier
    estimator = cls(random_state=seed, verbose=False)
    if analysis == "lookup":  # one model, trained on the lookup task by lookup_test
        start = time.perf_counter()
        result = lookup_test(
            estimator.set_params(n_estimators=1, max_steps=lookup_steps),
            X_train.reset_index(drop=True),
            y_train.to_numpy(),
            X_test.reset_index(drop=True),
            y_test.to_numpy(),
            dataset=data.info.paper_name,
        )
        result.update(table=table, seconds=time.perf_counter() - start)
        return result
    start = time.perf_counter()
    estimator.fit(X_train, y_train)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    context = None if model == "npt" else (X_train, y_train)  # SPIN keeps only its encoding
    result = corruption_test(
        estimator, X_test, y_test, context=context, seed=seed, dataset=data.info.paper_name
    )
    result.update(table=table, fit_seconds=fit_seconds, test_seconds=time.perf_counter() - start)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--models", default="npt,spin")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--analysis", default="corruption", choices=["corruption", "lookup"])
    parser.add_argument(
        "--lookup-steps", type=int, help="lookup: training steps (default: lookup_test's LOOKUP_STEPS)"
    )
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    jsonl = args.out / "tmp" / f"{args.analysis}.jsonl"
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    code = code_hash()
    records = [json.loads(line) for line in jsonl.read_text().splitlines()] if jsonl.exists() else []
    current = {
        (r["table"], r["model"], r["seed"]): r
        for r in records
        if r.get("code_hash") == code and r.get("lookup_steps") == args.lookup_steps
    }
    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    if not args.report_only:
        for table in args.tables.split(","):
            for model in args.models.split(","):
                if (table, model, args.seed) in current:
                    print(f"[skip] {table} {model}: done at this code")
                    continue
                print(f"[run ] {table} {model} ...", flush=True)
                result = run_one(table, model, args.seed, args.analysis, args.lookup_steps)
                result.update(code_hash=code, command=command, lookup_steps=args.lookup_steps)
                with jsonl.open("a") as f:
                    f.write(json.dumps(result, default=float) + "\n")
                current[(table, model, args.seed)] = result
                if args.analysis == "lookup":
                    print(f"       duplicate first {result['attention_top1_is_duplicate']:.1%}", flush=True)
                else:
                    print(f"       change {result['change']:+.2f} {result['change_unit']}", flush=True)
    results = sorted(current.values(), key=lambda r: (r["table"], r["model"]))
    if not results:
        print("no results at the current code")
        return 1
    print(f"wrote {write_analysis(args.out, args.analysis, results, command)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
