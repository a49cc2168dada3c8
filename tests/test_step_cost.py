"""benchmarks/step_cost.py and scaling.py: each step against the matmul rate around it, how a failed
cell is read, a series that stops after a failure and resumes from its records, and the reports'
arithmetic. No model is trained (the cells are stand-ins)."""

from __future__ import annotations

import argparse

import harness as h
import pytest
import scaling
import step_cost as sc


def test_each_step_is_set_against_the_rate_around_it():
    # 1e12 FLOPs: 10 s at 100 GFLOP/s is 100%; 20 s while the machine ran at 100 then 150 -> 40%
    fields = sc.rate_fields(10**12, [10.0, 20.0], [100.0, 100.0, 150.0])
    assert fields["fraction_per_step"] == pytest.approx([1.0, 1.0 / (20 * 125 / 1000)])
    assert fields["fraction_of_matmul_rate"] == pytest.approx(1.0)  # the upper median of two
    # at 1 TFLOP/s the two steps would take 1 s and 2.5 s
    assert fields["step_seconds_at_unit_rate"] == pytest.approx(2.5)


def test_a_failed_cell_is_read_as_timeout_oom_or_error():
    assert sc.status({"ok": True}) == "ok"
    assert sc.status({"ok": False, "error": "timed out after 5 s", "timed_out": True}) == "timeout"
    assert sc.status({"ok": False, "error": "exit 1: ... | MemoryError"}) == "oom"
    assert sc.status({"ok": False, "error": "exit 1: RuntimeError: CUDA out of memory."}) == "oom"
    assert sc.status({"ok": False, "error": "exit 1: ValueError: bad"}) == "error"


def test_a_series_stops_after_a_failure_and_resumes_from_its_records(tmp_path, monkeypatch):
    ran = []

    def fake_cell(target, settings, timeout, threads):
        assert target == "step_cost:cell" and threads == settings["threads"]
        ran.append(settings["n"])
        if settings["n"] >= 4000:
            return {"ok": False, "error": "timed out after 9 s", "timed_out": True}
        return {"ok": True, "step_seconds_median": settings["n"] / 1000, "step_rss_gib": 0.5}

    monkeypatch.setattr(h, "run_cell", fake_cell)
    records = h.Records(tmp_path / "step_cost.jsonl")
    grid = [{"model": "npt", "backend": "sdpa", "n": n, "threads": 1} for n in (1000, 2000, 4000, 8000)]
    rows = sc.series(records, grid, timeout=9, run=True)
    assert ran == [1000, 2000, 4000]  # 8000 is not run after the failure at 4000
    assert [r["status"] for r in rows] == ["ok", "ok", "timeout"]
    again = sc.series(h.Records(tmp_path / "step_cost.jsonl"), grid, timeout=9, run=True)
    assert ran == [1000, 2000, 4000] and again == rows  # all from the records
    sc.series(h.Records(tmp_path / "step_cost.jsonl"), grid, timeout=9, run=True, retry=True)
    assert ran == [1000, 2000, 4000, 4000]  # the failure is rerun, the successes are not
    assert sc.series(h.Records(tmp_path / "other.jsonl"), grid, timeout=9, run=False) == []


def test_growth_exponent_fits_sizes_from_4000():
    ns = [1000, 2000, 4000, 8000, 16000]
    assert sc.fitted_exponent(ns, [n**2 for n in ns]) == pytest.approx(2.0)
    # a flat tail from 4,000 on: the small sizes do not count
    assert sc.fitted_exponent(ns, [1.0, 2.0, 5.0, 5.0, 5.0]) == pytest.approx(0.0, abs=1e-9)


def _row(model, backend, n, seconds, gib, fraction, status="ok"):
    row = {"model": model, "backend": backend, "n": n, "status": status, "code": {}}
    if status != "ok":
        return {**row, "error": "timed out after 400 s"}
    return {**row, "step_seconds_median": seconds, "step_rss_gib": gib, "rate_dtype": "float32",
            "fraction_of_matmul_rate": fraction, "matmul_gflops_around_steps": [90.0, 110.0]}  # fmt: skip


def test_step_cost_report_compares_dropout_at_equal_machine_speed():
    rows = [
        _row("npt", "sdpa", 4000, 1.0, 1.0, 0.5),
        _row("npt", "sdpa", 8000, 3.0, 2.0, 0.6),
        _row("npt", "sdpa", 16000, 0, 0, 0, status="timeout"),
        _row("npt", "sdpa+dropout", 4000, 2.0, 1.5, 0.25),
    ]
    args = argparse.Namespace(widths="cpu", threads=2, steps=2, device="cpu", mem_cap_gib=16.0)
    lines = sc.report_lines(rows, args)
    assert "| 4,000 | 1.00 s, 1.00 GiB, 50% | 2.00 s, 1.50 GiB, 25% |" in lines
    assert "| 16,000 | timeout | – |" in lines
    assert any("90.0-110.0 GFLOP/s" in line for line in lines)
    # the largest n trained, what stopped the next one, memory ~ n^1 between 4,000 and 8,000
    assert "| npt | sdpa | 8,000 | timeout at 16,000 (timed out after 400 s, not memory) | 1.00 |" in lines
    # half the share of the matmul rate with dropout: twice the time at equal speed, 1.5x memory
    assert "| npt | 4,000 | 50% | 25% | 2.00x | 1.50x |" in lines
    assert not any(line.startswith("| npt | 8,000 | 60%") for line in lines)  # no dropout run there


def test_scaling_report_shows_the_best_step_and_the_fitted_growth():
    def row(model, n, cpu, status="ok"):
        base = {"model": model, "n": n, "status": status}
        return base if status != "ok" else {
            **base, "step_cpu_seconds": [cpu * 1.5, cpu], "step_seconds": [cpu * 3, cpu * 2],
            "step_rss_gib": n / 4000, "predict_ms_per_row": 0.03 * (n / 4000) ** 0.5, "baseline_rss_gib": 0.5,
        }  # fmt: skip

    rows = [row("spin", 4000, 1.0), row("spin", 8000, 2.0), row("npt", 4000, 2.0), row("npt", 8000, 0, "oom")]
    fits = scaling.exponents(rows)
    assert fits["spin"] == pytest.approx(
        {"step_rss_gib": 1.0, "step_cpu_seconds_min": 1.0, "predict_ms_per_row": 0.5}
    )
    assert "npt" in fits and set(fits) == {"npt", "spin"}
    lines = scaling.report_lines(rows, argparse.Namespace(mem_cap_gib=14.0, timeout=180.0))
    assert "| 4,000 | 1.00 | 2.00 | 1.00 | 0.030 | 2.00 | 4.00 | 1.00 | 0.030 |" in lines
    assert any(line.startswith("| 8,000 | 2.00 | 4.00 | 2.00 | 0.042 | oom |") for line in lines)
    assert "- SPIN: step memory n^1.00, step time n^1.00, predict latency n^0.50" in lines
