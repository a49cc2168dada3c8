"""Models a benchmark can run, by name: the library's table models and the baselines.

A table model is found by name in the public API: ``"npt"`` -> ``semiparam.NPTClassifier`` /
``NPTRegressor``, ``"spin"`` -> ``SPINClassifier`` / ``SPINRegressor``; any model ``X`` whose
``XClassifier`` / ``XRegressor`` the package exports plugs in the same way. A model the installed
package does not export is reported as unavailable, not as a failure.

Protocol for table models (spec-npt 4.2, 2.5; NOTE[DIFF] where the estimator API forces it):

- they are fitted on the fold's train + validation rows with ``validation_fraction`` equal to the
  fold's validation share, so the estimator selects its checkpoint on its own class-stratified
  hold-out of the same size (the estimators take no explicit validation set); the baselines use
  the fold's validation rows themselves;
- at prediction they attend to all labelled rows (train + validation), as the paper's test mode;
- ``transductive=True`` (the paper's default) passes the test rows' features as unlabelled rows
  during training (``X_unlabeled``); their labels are never seen.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .baselines import BASELINES, FoldData, ModelOutput


@dataclass(frozen=True)
class TableModelSpec:
    """Settings of a library model in a benchmark (estimator arguments, plus the protocol)."""

    preset: str = "cpu"
    max_steps: int | None = None
    batch_size: int | None = None
    p_target: float | None = None
    p_feature: float | None = None
    learning_rate: float | None = None
    n_estimators: int | None = None  # ensemble members (None: the preset's)
    transductive: bool = True
    train_options: dict[str, Any] = field(default_factory=dict)
    model_options: dict[str, Any] = field(default_factory=dict)


def table_estimator_classes(name: str) -> tuple[type[Any], type[Any]] | None:
    """``(Classifier, Regressor)`` of library model ``name`` from the public API, or None."""
    import semiparam

    prefix = name.upper()
    clf = getattr(semiparam, f"{prefix}Classifier", None)
    reg = getattr(semiparam, f"{prefix}Regressor", None)
    if clf is None or reg is None:
        return None
    return clf, reg


def table_model_names() -> list[str]:
    """Library models the installed package exports (e.g. ``["npt", "spin"]``)."""
    import semiparam

    return sorted(
        n[: -len("Classifier")].lower()
        for n in dir(semiparam)
        if n.endswith("Classifier")
        and n != "TableClassifier"
        and hasattr(semiparam, n[: -len("Classifier")] + "Regressor")
    )


def run_table_model(name: str, spec: TableModelSpec, data: FoldData, *, seed: int) -> ModelOutput:
    """Fit library model ``name`` on one fold and predict its test rows."""
    classes_pair = table_estimator_classes(name)
    if classes_pair is None:
        raise ImportError(
            f"model {name!r} is not exported by this semiparam ({name.upper()}Classifier / "
            f"{name.upper()}Regressor missing); available: {table_model_names()}"
        )
    clf_cls, reg_cls = classes_pair
    X_fit = pd.concat([data.X_train, data.X_val], ignore_index=True)
    y_fit = pd.concat([data.y_train, data.y_val], ignore_index=True)
    val_fraction = len(data.X_val) / len(X_fit)
    kwargs: dict[str, Any] = {
        "max_steps": spec.max_steps,
        "batch_size": spec.batch_size,
        "p_target": spec.p_target,
        "p_feature": spec.p_feature,
        "learning_rate": spec.learning_rate,
        "n_estimators": spec.n_estimators,
        "validation_fraction": val_fraction,
        "train_options": dict(spec.train_options) or None,
        "model_options": dict(spec.model_options) or None,
        "random_state": seed,
        "verbose": False,
    }
    is_regression = data.task == "regression"
    estimator = (reg_cls if is_regression else clf_cls)(spec.preset, **kwargs)
    unlabeled = data.X_test if spec.transductive else None
    if not is_regression:
        y_fit = y_fit.astype(str)  # labels as text, so class order matches the baselines'
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*categories not seen at fit time.*")
        estimator.fit(X_fit, y_fit, X_unlabeled=unlabeled)
        if is_regression:
            prediction = np.asarray(estimator.predict(data.X_test), dtype=np.float64)
            classes = None
        else:
            prediction = np.asarray(estimator.predict_proba(data.X_test), dtype=np.float64)
            classes = list(estimator.classes_)
    history = estimator.history_
    members = getattr(history, "members", None) or [history]  # an ensemble's, or the one model's
    n_steps = len(history.steps)
    member_steps = sum(len(m.steps) for m in members)
    details = {
        "steps": n_steps,  # member 0's, as best_step below
        "train_seconds": history.seconds,
        "seconds_per_step": sum(m.seconds for m in members) / member_steps if member_steps else None,
        "members": [
            {
                "steps": len(m.steps),
                "best_step": m.best_step,
                "stop_reason": m.stop_reason,
                "seconds": m.seconds,
            }
            for m in members
        ],
        "best_step": history.best_step,
        "best_val_loss": history.best_val_loss,
        "stopped_early": history.stopped_early,
        "stop_reason": history.stop_reason,
        "rows_in_training": len(X_fit) + (len(data.X_test) if spec.transductive else 0),
        "validation_fraction": val_fraction,
        # every setting the fit ran with, whatever the preset said
        "resolved": {
            "model_config": estimator.learner_.model_config.to_dict(),
            "train_config": estimator.learner_.train_config.to_dict(),
        },
    }
    return ModelOutput(prediction, classes, details)


def model_title(key: str) -> str:
    """Display name: the baseline's title, or the library model's name in capitals."""
    if key in BASELINES:
        return BASELINES[key].title
    return key.upper()


def model_unavailable_reason(key: str) -> str | None:
    """Why ``key`` cannot run here (missing extra, model not in this build), or None."""
    if key in BASELINES:
        return BASELINES[key].unavailable_reason()
    if table_estimator_classes(key) is None:
        return (
            f"{key.upper()}Classifier/{key.upper()}Regressor are not exported by this semiparam build "
            f"(table models available: {table_model_names()})"
        )
    return None
