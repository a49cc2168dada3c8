#!/usr/bin/env python
"""NPT beside scikit-learn's HistGradientBoosting on Boston Housing and Breast Cancer, with the
papers' cross-validation protocol (10-fold CV, 0.7/0.2/0.1, StratifiedKFold for classification,
seed 42; spec-npt 4.2), scaled to two shared CPU cores. Every reduction is in the report.

    nice -n 10 .venv/bin/python benchmarks/npt_small.py          # ~15-30 min on 2 shared cores
    nice -n 10 .venv/bin/python benchmarks/npt_small.py --fresh  # ignore an earlier partial run

Same as ``semiparam bench npt_small``. Writes benchmarks/results/npt_small.json and npt_small.md
(+ PNG plots); per-fold progress goes to benchmarks/results/tmp/npt_small.jsonl, from which an
interrupted run resumes. The plan (folds, steps, search budget) is
``semiparam.bench.suites.npt_small``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from semiparam.cli.main import main

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(main(["bench", "npt_small", "--out", str(RESULTS), *sys.argv[1:]]))
