"""benchmarks/np_convergence.py: the report's arithmetic (paired gaps over the seeds both models ran,
the batch-by-batch head-to-head, the probes' ratios, each run's convergence by stage) on made-up
records, and one tiny training cell and probe run in this process."""

from __future__ import annotations

import argparse
import math

import np_convergence as nc
import pytest


def cell(model: str, seed: int, rbf: list[float], lo: int = 64, hi: int = 128, **extra) -> dict:
    """A finished run's record: its settings and what the report reads."""
    kernels = {"rbf": rbf, "matern52": [v - 0.1 for v in rbf], "periodic": [v - 0.2 for v in rbf]}
    curve = {"steps": [250, 500, 750, 1000], "val_ll": [1.0, 1.2, 1.25, 1.26]}
    run = {
        "n_steps": 1000,
        "best_step": 1000,
        "anneal_start": None,
        "lr_drops": [],
        "stop_reason": "max_steps",
    }
    record = {
        "settings": {"model": model, "lo": lo, "hi": hi, "seed": seed},
        "eval_ll": kernels,
        "curve": curve,
    }
    return record | run | {"n_parameters": 1000, "seconds_per_step": 0.1, "peak_rss_mb": 400.0} | extra


def probe(model: str, round_: int, seconds: float, mb: float, lo: int = 64, hi: int = 128) -> dict:
    settings = {"model": model, "lo": lo, "hi": hi, "round": round_}
    return {"settings": settings, "seconds_per_step": seconds, "peak_mb": mb}


def test_the_gap_pairs_batches_of_the_seeds_both_models_ran():
    cells = [
        cell("CIPNP", 0, [1.0, 1.2, 0.2]),
        cell("CANP", 0, [1.1, 1.1, 1.0]),
        cell("CIPNP", 1, [5.0, 5.0, 5.0]),  # CANP has no seed 1: left out
    ]
    assert nc.batch_gaps(cells, "CIPNP", 64, 128) == pytest.approx([-0.1, 0.1, -0.8])
    lines = nc.gap_table(cells, [(64, 128), (256, 512)])  # [256,512] has no cells: no row
    assert [line for line in lines if line.startswith("| [")] == [
        "| [64,128] | 3 | -0.267 | -0.100 | -0.800 | +0.100 | 1 of 3 |"
    ]
    assert nc.gap_table(cells, [(256, 512)]) == []


def test_the_paired_gap_beats_is_within_the_seed_sd_or_is_behind():
    canp = [cell("CANP", 0, [1.0]), cell("CANP", 1, [1.2])]  # seed sd 0.141
    within = canp + [cell("CIPNP", 0, [0.95]), cell("CIPNP", 1, [1.15]), cell("CIPNP", 2, [9.0])]
    assert nc.paired_gap(within, "CIPNP", 64, 128) == "-0.050 (within sd; 2 seeds)"
    behind = canp + [cell("CIPNP", 0, [0.7]), cell("CIPNP", 1, [0.9])]
    assert nc.paired_gap(behind, "CIPNP", 64, 128) == "-0.300 (behind; 2 seeds)"
    one = [cell("CANP", 0, [1.0]), cell("CIPNP", 0, [1.01])]  # one seed: no sd, any gain beats
    assert nc.paired_gap(one, "CIPNP", 64, 128) == "+0.010 (beats; 1 seed)"
    assert nc.paired_gap(one, "CIPNP", 256, 512) is None
    assert nc.score(canp, "CANP", 64, 128, "rbf") == "1.100 ± 0.141 (n=2)"
    assert nc.score(one, "CANP", 64, 128, "matern52") == "0.900 ± nan (1 seed)"


def test_the_verdict_takes_the_probe_medians_against_canp_at_the_largest_range():
    ranges = [(64, 128), (256, 512)]
    cells = [cell(m, 0, [1.0], *r) for m in ("CIPNP", "CANP", "CIPNP-paper") for r in ranges]
    cells[2], cells[4] = cell("CANP", 0, [1.1]), cell("CIPNP-paper", 0, [1.2])  # CIPNP behind at [64,128]
    probes = [probe("CANP", k, s, 100.0, 256, 512) for k, s in enumerate((1.0, 1.2, 9.0))]  # median 1.2
    probes += [probe("CIPNP", k, 0.6, mb, 256, 512) for k, mb in enumerate((50.0, 40.0, 60.0))]
    probes += [probe("CIPNP-paper", 0, 0.3, 30.0, 256, 512), probe("CIPNP-paper", 0, 9.0, 9.0)]  # other range
    assert nc.probe_of(probes, "CANP", 256, 512) == {"seconds_per_step": 1.2, "peak_mb": 100.0}
    rows = nc.verdict(cells, probes, ranges)[6:-1]  # the table's rows
    assert rows == [
        "| CIPNP | -0.100 (behind; 1 seed) | +0.000 (beats; 1 seed) | 0.50x | 0.50x | no |",
        "| CIPNP-paper | +0.100 (beats; 1 seed) | +0.000 (beats; 1 seed) | 0.25x | 0.30x | yes |",
    ]
    cost = [
        line for line in nc.cost_table(cells, probes, ranges, ["CIPNP", "CANP"]) if "| [256,512] |" in line
    ]
    assert cost[0] == "| [256,512] | CIPNP | 1,000 | 0.6 | 0.5 | 50 | 0.5 | 0.1 | 400 |"


def test_convergence_is_the_best_score_per_stage_and_what_the_last_stage_gained():
    steps, val = [5, 10, 15, 20, 25, 30], [0.1, 0.5, 0.6, 0.65, 0.7, 0.71]
    adaptive = cell("CIPNP", 0, [1.0], curve={"steps": steps, "val_ll": val}, n_steps=30, best_step=30)
    adaptive |= {"lr_drops": [11, 21], "anneal_start": 26, "stop_reason": "plateau, annealed"}
    assert nc.stage_bests(adaptive) == pytest.approx([0.5, 0.65, 0.7, 0.71])  # [0,11) [11,21) [21,26) [26,)
    cosine = cell("CANP", 0, [1.0], curve={"steps": steps, "val_ll": val}, n_steps=30, best_step=30)
    assert nc.stage_bests(cosine) == pytest.approx([0.6, 0.71])  # steps up to 15, after 15
    short = cell("CANP", 1, [1.0], curve={"steps": [5], "val_ll": [0.2]}, n_steps=6, best_step=5)
    assert math.isnan(nc.stage_bests(short)[0])  # no score in the first half
    lines = nc.convergence_table([adaptive], ["CIPNP"], [(64, 128)], adaptive=True)
    row = (
        "| CIPNP | [64,128] | 0 | plateau | 11, 21 | 26 | 0.500 / 0.650 / 0.700 / 0.710 | +0.010 | 30 / 30 |"
    )
    assert lines[-2] == row


def test_the_report_names_the_cells_without_a_result(tmp_path):
    args = argparse.Namespace(**nc.OPTIONS, **nc.SCHEDULE, models=["CIPNP", "CANP"], ranges=[(64, 128)])
    args.__dict__.update(seeds=[0], schedule="cosine", device="cpu", out_dir=tmp_path)
    cells = [cell("CIPNP", 0, [1.0, 1.1]), cell("CANP", 0, [1.05, 1.0])]
    missing = [
        {"settings": {"model": "CANP", "lo": 64, "hi": 128, "seed": 1}, "error": "timed out after 9 s"}
    ]
    nc.report(args, cells, [], missing, {"64_128": {k: 2.0 for k in nc.KERNELS}})
    text = (tmp_path / "np_convergence.md").read_text()
    assert "| CIPNP | 1.050 ± 0.050 (1 seed) |" in text and "| GP oracle | 2.000 |" in text
    assert "- CANP [64,128] seed 1: timed out after 9 s" in text
    assert (tmp_path / "np_convergence.json").exists() and (tmp_path / "np_convergence.png").exists()


def test_a_cell_trains_checkpointed_and_scores_every_held_out_batch(tmp_path):
    settings = {"model": "CIPNP", "lo": 8, "hi": 10, "seed": 0, "device": "cpu", "d_model": 16, "n_heads": 2}
    settings |= {"max_steps": 6, "learning_rate": 1e-3, "lr_schedule": "cosine", "eval_every": 3}
    settings |= {"validation_batches": 1, "eval_batches": 2, "kind": "train", "threads": 1}
    result = nc.train(checkpoint=str(tmp_path / "cell"), **settings)
    assert result["n_steps"] == 6 and result["curve"]["steps"] == [3, 6]
    assert {k: len(v) for k, v in result["eval_ll"].items()} == {"rbf": 2, "matern52": 2, "periodic": 2}
    assert any((tmp_path / "cell").iterdir())  # a stopped cell resumes from here
    assert nc.train(checkpoint=str(tmp_path / "cell"), **settings)["eval_ll"] == result["eval_ll"]
    timed = nc.probe(model="CANP", lo=8, hi=10, probe_steps=4, d_model=16, n_heads=2, kind="probe")
    assert timed["seconds_per_step"] > 0 and timed["peak_mb"] >= 0
