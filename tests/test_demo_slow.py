"""The main job end to end (slow tier: python3 scripts/run.py test -m slow)."""

import pytest


@pytest.mark.slow
def test_demo_recommended_estimator_competitive_on_breast_cancer(capsys):
    from semiparam.cli.demo import RECOMMENDED, run_demo

    results = run_demo(seed=0, quiet=True)
    ours, hgb = results[RECOMMENDED], results["HistGradientBoosting"]
    # the demo's promise: the recommended estimator at its defaults at least level with gradient
    # boosting at its own
    assert ours["accuracy"] >= hgb["accuracy"] and ours["nll"] <= hgb["nll"]
    out = capsys.readouterr().out
    assert "HistGradientBoosting" in out and "fit" in out
