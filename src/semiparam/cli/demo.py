"""The main job: NPT beside a gradient-boosting baseline on the same split of a dataset that ships
with scikit-learn (Wisconsin breast cancer, 569 rows x 30 features)."""

from __future__ import annotations

import time

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score
from sklearn.model_selection import train_test_split


def run_demo(
    max_steps: int | None = None, seed: int = 0, device: str = "auto", quiet: bool = False
) -> dict[str, dict[str, float]]:
    """NPT at its defaults (``max_steps`` None: train until the validation loss stops improving)
    beside HistGradientBoosting at its defaults, on one stratified 80/20 split."""
    import torch

    from ..estimators.npt import NPTClassifier
    from ..training.device import resolve_device

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
    print(
        f"Breast cancer (scikit-learn): {len(X_train)} training rows, {len(X_test)} test rows, "
        f"{X.shape[1]} features; torch {torch.__version__} on {resolve_device(device)} "
        f"with {torch.get_num_threads()} threads"
    )
    results: dict[str, dict[str, float]] = {}

    def score(name: str, proba: np.ndarray, seconds: float) -> None:
        results[name] = {
            "accuracy": accuracy_score(y_test, proba.argmax(1)),
            "auroc": roc_auc_score(y_test, proba[:, 1]),
            "nll": log_loss(y_test, proba),
            "fit_seconds": seconds,
        }

    start = time.perf_counter()
    npt = NPTClassifier(
        max_steps=max_steps, device=device, random_state=seed, verbose=None if not quiet else False
    )
    npt.fit(X_train, y_train)
    score("NPT (defaults)", npt.predict_proba(X_test), time.perf_counter() - start)

    start = time.perf_counter()
    gbm = HistGradientBoostingClassifier(random_state=seed).fit(X_train, y_train)
    score("HistGradientBoosting", gbm.predict_proba(X_test), time.perf_counter() - start)
    results["NPT (defaults)"]["steps"] = npt.history_.n_steps

    print(f"\n{'model':<24}{'accuracy':>10}{'AUROC':>10}{'NLL':>10}{'fit s':>10}")
    for name, r in results.items():
        print(
            f"{name:<24}{r['accuracy']:>10.4f}{r['auroc']:>10.4f}{r['nll']:>10.4f}{r['fit_seconds']:>10.1f}"
        )
    history = npt.history_
    npt_s, hgb_s = results["NPT (defaults)"]["fit_seconds"], results["HistGradientBoosting"]["fit_seconds"]
    print(
        f"\nNPT: {history.n_members} model(s), {history.n_steps} steps (stopped: {history.stop_reason}), "
        f"best validation loss {history.best_val_loss:.4f} at step {history.best_step}; "
        f"fit {npt_s:.1f}s against HistGradientBoosting's {hgb_s:.2f}s."
        "\nPaper (10-fold CV, NPT-Small, 2,000 GPU steps): AUROC 0.997, accuracy 94.73%."
    )
    return results
