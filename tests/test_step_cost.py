"""benchmarks/step_cost.py's arithmetic: each step against the matmul rate around it, the official
SPIN harness's output as a row, and the comparison with it at equal machine speed. No model is
trained."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import step_cost as sc  # noqa: E402


def test_each_step_is_set_against_the_rate_around_it():
    # 1e12 FLOPs: 10 s at 100 GFLOP/s is 100%; 20 s while the machine ran at 100 then 150 -> 40%
    fields = sc.rate_fields(10**12, [10.0, 20.0], [100.0, 100.0, 150.0])
    assert fields["fraction_per_step"] == pytest.approx([1.0, 1.0 / (20 * 125 / 1000)])
    assert fields["fraction_of_matmul_rate"] == pytest.approx(1.0)  # the upper median of two
    # at 1 TFLOP/s the two steps would take 1 s and 2.5 s
    assert fields["step_seconds_at_unit_rate"] == pytest.approx(2.5)


def _harness_output(seconds: list[float], rates: list[float], rise_mib: float) -> dict:
    return {
        "step_seconds": seconds,
        "matmul_gflops_around_steps": rates,
        "flops_per_step": 10**12,
        "peak_rss_mib": rise_mib + 500.0,
        "peak_rss_rise_mib": rise_mib,
        "parameters": 108_000_000,
        "official_commit": "3f4579f8de",
        "torch": "2.13.0",
        "loss": "their loss",
        "optimizer": "their optimizer",
        "gradient_clipping": "their clamp",
        "not_in_step": ["the lr scheduler"],
        "settings": {"model_dim_hidden": 128},
    }


def test_official_rows_compare_at_equal_machine_speed():
    identity = {"model": "spin", "backend": "official code", "n": 8192}
    theirs = sc.official_row(_harness_output([10.0, 10.0], [100.0] * 3, 2048.0), identity)
    assert theirs["status"] == "ok" and theirs["step_rss_gib"] == 2.0
    assert theirs["official"]["optimizer"] == "their optimizer"
    # ours: half the wall time, but on a machine running at twice the rate: equal time at equal speed
    ours = {
        "model": "spin",
        "backend": "sdpa+dropout",
        "n": 8192,
        "status": "ok",
        "step_seconds_median": 5.0,
        "step_rss_gib": 1.0,
        "n_params": 100_000_000,
        **sc.rate_fields(10**12, [5.0, 5.0], [200.0] * 3),
    }
    lines = sc.official_lines([ours, theirs])
    row = next(line for line in lines if line.startswith("| 8,192 | sdpa+dropout"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4:] == ["1.00x", "0.50x", "0.50x"]
    assert any("3f4579f8de" in line for line in lines)
    # a failed official run stays a failure record, and nothing is compared with it
    failed = sc.official_row({**identity, "status": "timeout"}, identity)
    assert failed["status"] == "timeout" and sc.official_lines([ours, failed]) == []
