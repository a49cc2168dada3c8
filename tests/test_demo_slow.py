"""The main job end to end (slow tier: python3 scripts/run.py test -m slow)."""

import pytest


@pytest.mark.slow
def test_demo_npt_competitive_on_breast_cancer(capsys):
    from semiparam.cli.demo import run_demo

    results = run_demo(seed=0, quiet=True)
    npt, hgb = results["NPT (defaults)"], results["HistGradientBoosting"]
    # the demo's promise: NPT at its defaults at least level with gradient boosting at its own
    assert npt["accuracy"] >= hgb["accuracy"] and npt["nll"] <= hgb["nll"]
    out = capsys.readouterr().out
    assert "HistGradientBoosting" in out and "fit" in out
