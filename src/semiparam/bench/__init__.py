"""Benchmarks over the public API: the papers' protocols, baselines and reports.

``semiparam bench <plan>`` (or :func:`run_suite` + :func:`write_report`) runs a named plan from
:mod:`semiparam.bench.suites` and writes JSON, a markdown report and plots. Names are imported
lazily so that ``semiparam --help`` does not pay for scikit-learn. The paper's analyses of a fitted
model (:func:`corruption_test`, :func:`lookup_test`, :func:`deletion_test`) live beside the
explanations, in :mod:`semiparam.estimators.analyses`, and are re-exported here.
"""

from __future__ import annotations

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
}

__all__ = sorted(_EXPORTS)


def _module(name: str) -> Any:  # noqa: PLR0911 - one plain import per module, seen by the layering test
    """The module behind an export, imported on first use by a plain import statement."""
    if name == "protocol":
        from . import protocol

        return protocol
    if name == "runner":
        from . import runner

        return runner
    if name == "suites":
        from . import suites

        return suites
    if name == "report":
        from . import report

        return report
    if name == "baselines":
        from . import baselines

        return baselines
    if name == "analyses":  # semiparam analyze's code, beside the explanations it is built on
        from ..estimators import analyses

        return analyses
    from . import models

    return models


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'semiparam.bench' has no attribute {name!r}")
    value = getattr(_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
