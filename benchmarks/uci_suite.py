#!/usr/bin/env python
"""The papers' small UCI tables (Yacht, Boston, Concrete, Breast Cancer) with their cross-validation
protocol: NPT and SPIN at their defaults against HistGradientBoosting, Random Forest, Gradient
Boosting, XGBoost, CatBoost, LightGBM, an MLP and k-NN (tuned on the folds' validation rows), the
first 3 of the 10 folds, on two CPU cores. Run it alone on the machine: the report gives fit times.

    .venv/bin/python benchmarks/uci_suite.py                    # everything
    .venv/bin/python benchmarks/uci_suite.py --models npt       # one model at a time
    .venv/bin/python benchmarks/uci_suite.py --report-only                 # rebuild the report

Same as ``semiparam bench uci``. Needs the ``baselines`` extra for XGBoost, LightGBM and CatBoost
(without it they are listed as not run) and ``bench`` for the plots. Writes
benchmarks/results/uci_report.md, uci_report.json and PNG plots; per-fold progress goes to
benchmarks/results/tmp/uci.jsonl, from which an interrupted run resumes. The plan is
``semiparam.bench.suites.uci``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from semiparam.cli.main import main

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(main(["bench", "uci", "--out", str(RESULTS), *sys.argv[1:]]))
