"""Benchmarks over the public API: the papers' protocols, baselines and reports.

``semiparam bench <plan>`` (or :func:`run_suite` + :func:`write_report`) runs a named plan from
:mod:`semiparam.bench.suites` and writes JSON, a markdown report and plots. Names are imported
lazily so that ``semiparam --help`` does not pay for scikit-learn.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Fold": "protocol",
    "average_ranks": "protocol",
    "cv_folds": "protocol",
    "fixed_split": "protocol",
    "holdout_split": "protocol",
    "paper_folds": "protocol",
    "score_predictions": "protocol",
    "DatasetPlan": "runner",
    "SuitePlan": "runner",
    "run_suite": "runner",
    "summarize": "runner",
    "write_results": "runner",
    "SUITES": "suites",
    "get_plan": "suites",
    "write_report": "report",
    "BASELINES": "baselines",
    "corruption_test": "analyses",
    "deletion_test": "analyses",
    "lookup_test": "analyses",
    "write_analysis": "analyses",
    "TableModelSpec": "models",
    # The training pieces a step-level benchmark (benchmarks/scaling.py) drives directly, so that
    # scripts outside the package need not import semiparam's internal modules.
    "get_model": "semiparam.models.registry",
    "Batch": "semiparam.training.trainer",
    "Trainer": "semiparam.training.trainer",
    "mask_for_inference": "semiparam.training.masking",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'semiparam.bench' has no attribute {name!r}")
    module = _EXPORTS[name]
    relative = not module.startswith("semiparam.")
    return getattr(import_module(f".{module}" if relative else module, __name__), name)
