#!/usr/bin/env python
"""NPT beside scikit-learn's HistGradientBoosting on Boston Housing and Breast Cancer, with the
papers' cross-validation protocol (10-fold CV, 0.7/0.2/0.1, StratifiedKFold for classification,
seed 42; spec-npt 4.2), scaled to two shared CPU cores. Every reduction is in the report.

    .venv/bin/python benchmarks/npt_small.py            # ~15 min on 2 shared cores
    .venv/bin/python benchmarks/npt_small.py --fresh    # ignore partial results of an earlier run

Writes benchmarks/results/npt_small.json and npt_small.md (+ PNG plots); per-fold progress is
kept in benchmarks/results/tmp/npt_small.jsonl so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from semiparam.bench import get_plan, run_suite, write_results
from semiparam.bench.report import write_report

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fresh", action="store_true", help="do not resume from benchmarks/results/tmp")
    parser.add_argument("--out", default=str(RESULTS), help="directory for the JSON and markdown")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    plan = get_plan("npt_small")
    out = Path(args.out)
    results = run_suite(plan, out / "tmp", resume=not args.fresh)
    write_results(results, out / "npt_small.json")
    report = write_report(
        results,
        out / "npt_small.md",
        title="NPT on Boston Housing and Breast Cancer (small benchmark, issue 2 item 10)",
        command="nice -n 10 .venv/bin/python benchmarks/npt_small.py   (or: semiparam bench npt_small)",
        intro=[
            "NPT (this library, `NPTRegressor` / `NPTClassifier`) beside scikit-learn's "
            "`HistGradientBoosting*` on the same folds of the papers' protocol: 10-fold cross-validation "
            "with 0.7/0.2/0.1 train/val/test, `StratifiedKFold` for classification, seed 42 (spec-npt 4.2). "
            "HistGradientBoosting is tuned by a random search on each fold's validation rows "
            "(learning rate, depth, iterations from the paper's boosting space) and fitted on the training "
            "rows. It is not one of the paper's baselines, so it has no paper value.",
        ],
    )
    print(f"wrote {out / 'npt_small.json'} and {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
