"""benchmarks/fit_cost.py: its profile of a real fit, and its report from records."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import devsuite as ds  # noqa: E402
import fit_cost as fc  # noqa: E402


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


def _fit(table: str, model: str, split: int, seconds: float, score: float, steps: list[int]) -> dict:
    history = {"members": [{"steps": s} for s in steps]} if steps else None
    return {
        "kind": "fit",
        "table": table,
        "model": model,
        "split": split,
        "device": "cpu",
        "status": "ok",
        "key": f"{table}/{model}/{split}",
        "code": {"git_head": "abc"},
        "machine": {"cpu": "test"},
        "command": "python benchmarks/fit_cost.py",
        "fit_seconds": seconds,
        "score": score,
        "history": history,
    }


def test_report_totals_ratios_ranks_and_steps(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(fc, "cell_key", lambda t, m, s, d: f"{t}/{m}/{s}")
    records = [
        _fit("yacht", "npt", 0, 20.0, 0.8, [100, 100]),
        _fit("yacht", "spin", 0, 10.0, 1.0, [50, 50]),
        _fit("yacht", "catboost", 0, 1.0, 1.0, []),
        _fit("boston", "npt", 0, 40.0, 3.0, [200]),
        _fit("boston", "spin", 0, 30.0, 4.0, [100]),
        _fit("boston", "catboost", 0, 4.0, 3.5, []),
        {**_fit("boston", "npt", 0, 1.0, 9.9, [1]), "key": "stale"},  # another code's record
    ]
    fc.write_report(records, tmp_path)
    text = (tmp_path / "fit_cost.md").read_text()
    summary = __import__("json").loads((tmp_path / "fit_cost.json").read_text())["summary"]
    assert summary["fit_seconds"] == {"npt": 60.0, "spin": 40.0, "catboost": 5.0}
    assert summary["ratio_to_catboost"]["npt"] == pytest.approx(12.0)
    assert summary["mean_rank"]["npt"] == pytest.approx(1.0)  # best on both tables
    assert summary["geomean_score_ratio_to_catboost"]["npt"] == pytest.approx((0.8 * 3.0 / 3.5) ** 0.5)
    assert "| yacht | 0 | cpu | 20.0 | 10.0 | 1.0 | 100,100 | 100.0 |" in text


def test_quality_sections_join_selections_and_pair_the_splits(tmp_path) -> None:
    import json

    def rec(table: str, model: str, split: int, score: float, tag: str = "default", src: str = "a") -> str:
        code = {"src_sha256": src}
        return json.dumps(
            {"table": table, "model": model, "split": split, "score": score, "tag": tag, "code": code}
        )

    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text(
        "\n".join(
            [rec("yacht", "npt", s, 1.0) for s in (0, 1)]
            + [rec("yacht", m, s, 2.0) for m in ("catboost", "hgb") for s in (0, 1)]
            + [rec("yacht", "npt", 0, 9.0, src="other")]  # another code: not selected
        )
    )
    two.write_text(
        "\n".join(
            [rec("boston", "npt", 0, 3.0, tag="full"), rec("boston", "npt", 0, 2.0, tag="fast")]
            + [rec("boston", m, 0, 2.5) for m in ("catboost", "hgb")]
            + [rec("yacht", "npt", s, 0.5, tag="fast") for s in (0, 1)]
        )
    )
    q = fc.quality_held("npt", "test", f"{one}:default:a+{two}:full:a", f"{two}:fast:a")
    # yacht's references are only in one.jsonl: a bare path brings them in
    assert fc.quality_held("npt", "refs", f"{two}:fast:a", f"{two}:fast:a")["cells"] == 1
    assert fc.quality_held("npt", "refs", f"{two}:fast:a+{one}", f"{two}:fast:a")["cells"] == 3
    assert fc.quality_held("npt", "refs", f"{two}:fast:a:yacht+{one}", f"{two}:fast:a")["cells"] == 2
    assert q["cells"] == 3 and [t["table"] for t in q["per_table"]] == ["boston", "yacht"]
    assert q["per_table"][1]["change_mean"] == pytest.approx(-0.5)
    assert q["mean_rank"] == {"before": pytest.approx(5 / 3), "after": 1.0}
    assert fc.quality_lines(q)[1] == "## Quality held: test"
    assert fc.quality_lines(q)[3].startswith("NPT before")
    # the same cells as SPIN records are another model's: none selected for NPT, all for SPIN
    spin = tmp_path / "spin.jsonl"
    spin.write_text(one.read_text().replace('"model": "npt"', '"model": "spin"'))
    with pytest.raises(SystemExit, match="no npt cell"):
        fc.quality_held("npt", "none", f"{spin}:default:a", f"{spin}:default:a")
    s = fc.quality_held("spin", "spin", f"{spin}:default:a", f"{spin}:default:a")
    assert s["cells"] == 2 and fc.quality_lines(s)[3].startswith("SPIN before")
    with pytest.raises(SystemExit, match="catboost"):
        fc.quality_held("catboost", "x", f"{one}:default:a", f"{one}:default:a")
