"""benchmarks/pretrained_eval.py's arithmetic: ranks, wins and score ratios against the reference."""

from __future__ import annotations

import pretrained_eval as pe
import pytest


def _rec(table: str, split: int, score: float, **extra) -> dict:
    return {"settings": {"table": table, "split": split, "variant": "zero_shot"}, "ok": True,
            "score": score, "seconds": 1.0, **extra}  # fmt: skip


def _ref(model: str, table: str, split: int, score: float) -> dict:
    return {"settings": {"model": model, "table": table, "split": split}, "ok": True, "score": score,
            "fit_seconds": 4.0, "predict_seconds": 1.0, "code": {"commit": "abcdef123"}}  # fmt: skip


def test_summary_ranks_wins_and_ratios_over_the_cells_every_compared_model_has():
    refs = {("catboost", t, 0): _ref("catboost", t, 0, s) for t, s in (("a", 2.0), ("b", 1.0), ("c", 1.0))}
    refs |= {("hgb", t, 0): _ref("hgb", t, 0, s) for t, s in (("a", 4.0), ("b", 0.5))}  # no hgb on c
    records = [_rec("a", 0, 1.0), _rec("b", 0, 2.0), _rec("c", 0, 0.1), {**_rec("d", 0, 1.0), "ok": False}]
    rows, summary = pe.summarise(records, refs, ("catboost", "hgb"))
    assert [r["table"] for r in rows] == ["a", "b"] and summary["cells"] == 2
    assert summary["mean_rank"] == {"prior": 2.0, "catboost": 2.0, "hgb": 2.0}  # 1st on a, 3rd on b
    assert summary["win_rate"] == {"catboost": 0.5, "hgb": 0.5}
    assert summary["geo_mean_ratio"]["catboost"] == pytest.approx((0.5 * 2.0) ** 0.5)
    assert summary["geo_mean_ratio"]["hgb"] == pytest.approx((0.25 * 4.0) ** 0.5)
    assert "npt_seconds" not in rows[0] and summary["npt_seconds"] == 0.0
    refs |= {("npt", t, 0): _ref("npt", t, 0, 1.5) for t in ("a", "b")}
    rows, summary = pe.summarise(records, refs, ("catboost", "hgb", "npt"))
    assert (
        rows[0]["npt_seconds"] == 5.0
        and rows[0]["npt_commit"] == "abcdef1"
        and summary["npt_seconds"] == 10.0
    )


def test_report_splits_the_summary_by_task_and_counts_fine_tuning_steps():
    refs = {(m, t, 0): _ref(m, t, 0, 1.0) for m in ("catboost", "hgb") for t in ("boston", "titanic")}
    tuned = {"variant": "fine_tuned"}
    records = [
        _rec("boston", 0, 0.5),  # regression: wins
        _rec("titanic", 0, 2.0),  # classification: loses
        {
            **_rec("boston", 0, 2.0, steps=40, best_step=None),
            "settings": {"table": "boston", "split": 0, **tuned},
        },
        {
            **_rec("titanic", 0, 0.5, steps=90, best_step=70),
            "settings": {"table": "titanic", "split": 0, **tuned},
        },
    ]
    lines, data = pe.report(records, refs, "ref.jsonl", ("catboost", "hgb"), None)
    zero = data["variants"]["zero_shot"]
    assert zero["regression"]["win_rate"] == {"catboost": 1.0, "hgb": 1.0}
    assert zero["classification"]["win_rate"] == {"catboost": 0.0, "hgb": 0.0}
    assert data["variants"]["fine_tuned"]["regression"]["win_rate"]["hgb"] == 0.0
    text = "\n".join(lines)
    assert "Steps trained: median 65, most 90; in 1 of 2 cells" in text
    assert "| regression (1 cells) | hgb | " in text
