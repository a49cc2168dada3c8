"""benchmarks/poker_context.py's report arithmetic: when a run left the class prior, which runs
follow the protocol's label masking, and SPIN's verdict against the better NPT. No model is
trained."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import poker_context as pc  # noqa: E402


def _run(model: str, context: int, accuracy: float, p_target: float | None = None, **extra) -> dict:
    settings = {} if p_target is None else {"p_target": p_target}
    return {
        "model": model,
        "context": context,
        "accuracy": accuracy,
        "status": "ok",
        "settings": settings,
        **extra,
    }


def test_the_step_a_run_left_the_class_prior():
    plateau = [1.03, 1.02, 1.04, 1.03, 1.03]
    run = {"val_loss": [*plateau, 1.0, 0.97, 0.9], "eval_steps": [99, 199, 299, 399, 499, 599, 699, 799]}
    assert pc._left_prior_step(run) == 699  # the first under 0.95 x the median (1.03): 0.97
    assert pc._left_prior_step({**run, "val_loss": [*plateau, 1.0, 0.99, 0.98]}) is None
    assert pc._left_prior_step({"val_loss": [1.0], "eval_steps": [49]}) is None  # too short to tell


def test_runs_are_split_by_label_masking_and_spin_meets_the_better_npt():
    protocol = pc.NEURAL_SETTINGS["p_target"]
    assert pc._protocol(_run("catboost", 4000, 0.9))  # no masking: always the protocol's
    assert pc._protocol(_run("spin", 4000, 0.9, protocol))
    assert not pc._protocol(_run("spin", 4000, 0.9, 0.5))
    top = _run("spin", 16000, 0.95, protocol)
    runs = {("spin", 16000): top, ("npt", 4000): _run("npt", 4000, 0.5, protocol)}
    half = {("npt", 16000): _run("npt", 16000, 0.93, 0.5)}
    verdicts = " ".join(pc._verdicts(runs, top, "SPIN", half))
    assert "beats NPT, labels half hidden, at c = 16,000 (93.0%)" in verdicts
    # at an equal largest context the more accurate NPT is the rival, whichever its masking
    runs[("npt", 16000)] = _run("npt", 16000, 0.97, protocol)
    assert "does not beat NPT at c = 16,000 (97.0%)" in " ".join(pc._verdicts(runs, top, "SPIN", half))


def test_catboost_is_set_against_the_papers_best_spin_only_where_it_reaches_it():
    from semiparam.bench.paper import POKER_CONTEXT_ACCURACY

    best = max(POKER_CONTEXT_ACCURACY["SPIN"].values()) / 100
    below = {("catboost", 4000): _run("catboost", 4000, best - 0.01)}
    assert pc._catboost_against_paper(below) == []
    runs = {**below, ("catboost", 20008): _run("catboost", 20008, best + 0.0005)}
    (sentence,) = pc._catboost_against_paper(runs)
    assert f"reaches {best + 0.0005:.2%} from c = 20,008" in sentence
