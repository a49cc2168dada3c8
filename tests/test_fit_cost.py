"""benchmarks/fit_cost.py: its profile of a real fit, and its report from records."""

from __future__ import annotations

import devsuite as ds
import fit_cost as fc
import pytest


def _have_table(name: str) -> bool:
    try:
        ds.split_table(name, 0)
    except Exception:  # noqa: BLE001 - the data folder is not on this machine
        return False
    return True


@pytest.mark.skipif(not _have_table("yacht"), reason="needs shared/data (SEMIPARAM_DATA_DIR)")
def test_profile_of_a_real_fit_splits_the_steps_time() -> None:
    r = fc.profile_cell("yacht", "npt", 12, "cpu")
    assert r["steps"] == 12 and r["ms_per_step"] > 0 and r["parameters"] > 0
    share = r["share"]
    assert share["matrix products"] > 0 and share["attention"] > 0
    # the op categories and the untimed rest make up the whole span
    parts = [v for k, v in share.items() if "total" not in k]
    assert sum(parts) == pytest.approx(1.0, abs=0.05)
    assert any(name.startswith("aten::") for name, _ in r["top_ops_ms_per_step"])


def _fit(table: str, model: str, seconds: float, score: float, members: list[dict] | None = None) -> dict:
    """A record as the harness stores it: the cell in ``settings``, the result beside it."""
    settings = {"kind": "fit", "table": table, "model": model, "split": 0, "device": "cpu"}
    history = {"members": members} if members else None
    return {"settings": settings, "ok": True, "fit_seconds": seconds, "score": score, "history": history}


def _members(*steps: int) -> list[dict]:
    # best at 3/4 of the steps, the anneal over the last fifth, a tenth of the seconds validating
    return [
        {"steps": s, "best_step": 3 * s // 4, "anneal_start": 4 * s // 5, "seconds": 1.0, "eval_seconds": 0.1}
        for s in steps
    ]


def test_report_totals_ratios_ranks_steps_and_failures() -> None:
    records = [
        _fit("yacht", "npt", 20.0, 0.8, _members(100, 100)),
        _fit("yacht", "spin", 10.0, 1.0, _members(50, 50)),
        _fit("yacht", "catboost", 1.0, 1.0),
        _fit("boston", "npt", 40.0, 3.0, _members(200)),
        _fit("boston", "spin", 30.0, 4.0, _members(100)),
        _fit("boston", "catboost", 4.0, 3.5),
        _fit("wage", "npt", 5.0, 1.0, _members(10)),  # no other model on wage: not in the totals
        {**_fit("wage", "catboost", 0, 0), "ok": False, "error": "exit 1: Traceback | ValueError: bad"},
    ]
    lines, data = fc.report(records)
    summary = data["summary"]
    assert summary["cells"] == 2
    assert summary["fit_seconds"] == {"npt": 60.0, "spin": 40.0, "catboost": 5.0}
    assert summary["ratio_to_catboost"]["npt"] == pytest.approx(12.0)
    assert summary["mean_rank"]["npt"] == pytest.approx(1.0)  # best on both tables
    assert summary["geomean_score_ratio_to_catboost"]["npt"] == pytest.approx((0.8 * 3.0 / 3.5) ** 0.5)
    text = "\n".join(lines)
    assert "| npt | 60.0 | 12.0 | 1.00 | " in text
    assert "| yacht | 0 | cpu | 20.0 | 10.0 | 1.0 | 100,100 | 100.0 |" in text
    # npt's 4 members: 410 steps, 99 after the best checkpoint, 82 in the anneal, none best in it
    assert "| npt | 4 | 410 | 24.1% | 20.0% | 0 of 4 | 10.0% |" in text
    assert "| fit wage catboost split 0 | cpu | ValueError: bad |" in text
    assert data["failed"] == [{**records[-1]["settings"], "error": records[-1]["error"]}]
