"""The main job end to end (slow tier: python3 scripts/run.py test -m slow)."""

import pytest


@pytest.mark.slow
def test_demo_npt_competitive_on_breast_cancer(capsys):
    from semiparam.cli.demo import run_demo

    results = run_demo(max_steps=300, seed=0, quiet=True)
    npt = results["NPT (cpu preset)"]
    # measured: accuracy 0.939, AUROC 0.993 (HistGradientBoosting 0.939, 0.987) on this split
    assert npt["auroc"] > 0.98 and npt["accuracy"] > 0.92
    assert "HistGradientBoosting" in capsys.readouterr().out
