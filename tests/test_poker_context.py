"""benchmarks/poker_context.py: the scores of a run, the settings that key its record, and the report
computed from records (the tables and SPIN's verdicts). No model is trained."""

from __future__ import annotations

import argparse

import numpy as np
import poker_context as pc


def _rec(model: str, context: int, accuracy: float, ok: bool = True, **extra) -> dict:
    result = {
        "accuracy": accuracy, "log_loss": 1 - accuracy, "accuracy_pair_or_better": accuracy / 2,
        "fit_seconds": 10.0, "predict_seconds": 0.5, "fit_peak_rss_mb": 1024.0, "predict_peak_rss_mb": 512.0,
        "majority_accuracy": 0.5, "machine": "test machine", "iterations": 100,
    }  # fmt: skip
    if model in pc.NEURAL:
        result.update(steps=4000, best_step=3099, stop_reason="plateau, annealed", n_params=1_090_148)
    base = {"settings": {"model": model, "context": context, "seed": 0}, "time": f"t{context}", "ok": ok}
    return {**base, **(result if ok else {}), **extra}


def test_scores_give_absent_classes_no_mass_and_keep_the_log_loss_finite() -> None:
    y_test = np.array([0, 1, 2, 0])
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [1.0, 0.0], [0.6, 0.4]])  # class 2 never seen
    s = pc._scores(proba, np.array([0, 1]), y_test)
    assert s["accuracy"] == 0.75
    assert s["accuracy_pair_or_better"] == 0.5  # of the hands 1 and 2, hand 1 is right
    assert s["predicted_majority_share"] == 0.75
    assert 3 < s["log_loss"] < np.inf  # the hand of the unseen class costs -log(1e-6) / 4, not infinity


def test_baselines_are_keyed_on_their_library_and_neural_runs_on_their_arguments() -> None:
    args = argparse.Namespace(seed=0, max_steps=500, device="cpu", time_budget=None)
    hgb = pc.settings_of("hgb", 4000, args)  # scikit-learn is a core requirement; catboost an extra
    assert set(hgb) == {"model", "context", "seed", "sklearn"}
    spin = pc.settings_of("spin", 4000, args)["estimator"]
    assert spin["train_options"]["max_context_rows"] == 4000 and spin["max_steps"] == 500
    assert spin["model_options"]["predictor_aba"] == 1
    assert "predictor_aba" not in pc.settings_of("npt", 4000, args)["estimator"]["model_options"]
    assert "max_context_rows" not in pc.NEURAL_SETTINGS["train_options"]  # the shared settings untouched


def test_spin_meets_the_boosting_models_at_its_context_and_npt_at_its_largest() -> None:
    top = _rec("spin", 16000, 0.95)
    others = [_rec("hgb", 16000, 0.6), _rec("catboost", 16000, 0.99), _rec("npt", 1000, 0.5),
              _rec("npt", 4000, 0.96), _rec("npt", 16000, 0, ok=False)]  # fmt: skip
    runs = {(r["settings"]["model"], r["settings"]["context"]): r for r in [top, *others]}
    verdicts = " ".join(pc._verdicts(runs, top, "SPIN"))
    assert "SPIN beats HistGradientBoosting at c = 16,000 (60.0%)." in verdicts
    assert "SPIN does not beat CatBoost at c = 16,000 (99.0%)." in verdicts
    assert "SPIN does not beat NPT at c = 4,000 (96.0%)." in verdicts  # the failed larger NPT is skipped
    assert "c = 1,000" not in verdicts


def test_catboost_is_set_against_the_papers_best_spin_only_where_it_reaches_it() -> None:
    from semiparam.bench.paper import POKER_CONTEXT_ACCURACY

    best = max(POKER_CONTEXT_ACCURACY["SPIN"].values()) / 100
    below = {("catboost", 4000): _rec("catboost", 4000, best - 0.01)}
    assert pc._catboost_against_paper(below) == []
    runs = {**below, ("catboost", 20008): _rec("catboost", 20008, best + 0.0005)}
    (sentence,) = pc._catboost_against_paper(runs)
    assert f"reaches {best + 0.0005:.2%} from c = 20,008" in sentence


def test_the_report_tables_and_reading_come_from_the_records() -> None:
    recs = [
        _rec("spin", 1000, 0.47), _rec("spin", 4000, 0.56), _rec("hgb", 4000, 0.535),
        _rec("npt", 4000, 0, ok=False, error="exit -9: killed"),
        _rec("catboost", 4000, 0, ok=False, error="timed out after 5400 s", timed_out=True),
    ]  # fmt: skip
    text = "\n".join(pc.report_lines(recs))
    assert "| model | c = 1,000 | c = 4,000 |" in text
    assert "| SPIN | 47.0 / 0.530 | 56.0 / 0.440 |" in text
    assert "| NPT | - | out of memory |" in text and "| CatBoost | - | timed out |" in text
    assert "| HistGradientBoosting | 1,000" not in text and "100 trees/iterations" in text
    assert (
        "| SPIN | 4,000 | 0.56 | 0.28 | 10 | 0.5 | 1 | 0.5 | 1.1M | 4,000 (3,099) | plateau, annealed |"
        in text
    )
    assert "SPIN's test accuracy rises with the context (47.0%, 56.0% at c = 1,000, 4,000)" in text
    assert "At c = 4,000 SPIN (56.0%) beats HistGradientBoosting at c = 4,000 (53.5%)." in text
    assert "majority class, nothing in hand: 50.0%" in text
    assert "Runs on test machine:" in text
