"""benchmarks/np_convergence.py: ``--adopt`` takes in cells made on another machine only where their
commit's neural-process sources are this checkout's, restamped with this checkout's hash (the
device's kept), without overwriting a local cell, and unfinished cells bring their checkpoints to
resume here; the report's batch-by-batch gap pairs the same held-out batches of the same seeds. No
model is trained."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import np_convergence as nc  # noqa: E402


def _head() -> str | None:
    """A commit holding this checkout's sources as they are now: HEAD, or, with uncommitted changes,
    a commit of the working tree that ``git stash create`` makes without touching it."""
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return None
    work = subprocess.run(["git", "stash", "create"], cwd=ROOT, capture_output=True, text=True)
    return (work.returncode == 0 and work.stdout.strip()) or done.stdout.strip()


def _cell(model: str, seed: int, commit: str) -> dict:
    return {"model": model, "range": [64, 128], "seed": seed, "git_commit": commit, "np_code_hash": "device"}


def test_adopt_restamps_matching_cells_keeps_local_ones_and_copies_unfinished_checkpoints(
    tmp_path, monkeypatch
):
    head = _head()
    if head is None:
        pytest.skip("no git checkout to compare sources against")
    source, local = tmp_path / "device", tmp_path / "local"
    (source / "checkpoints" / "CANP_64_128_s2").mkdir(parents=True)
    (source / "checkpoints" / "CANP_64_128_s2" / "state.pt").write_bytes(b"resume me")
    (source / "checkpoints" / "CIPNP_64_128_s1").mkdir()  # finished: its checkpoints stay behind
    cells = {
        "CIPNP_64_128_s1": _cell("CIPNP", 1, head),
        "CANP_64_128_s1": _cell("CANP", 1, "0" * 40),  # a commit this checkout cannot match
        # a commit unknown here (the device's stale git), but the sources' digest is this checkout's
        "CANP_64_128_s0": _cell("CANP", 0, "1" * 40) | {"np_source_digest": "digest here"},
        "CIPNP_64_128_s0": _cell("CIPNP", 0, head),  # the local folder has it already
    }
    for name, cell in cells.items():
        (source / f"worker_{name}.json").write_text(json.dumps(cell))
    (local / "checkpoints" / "CIPNP_64_128_s1").mkdir(parents=True)  # a local start, superseded
    (local / "worker_CIPNP_64_128_s0.json").write_text(json.dumps({"mine": True}))
    monkeypatch.setattr(nc, "TMP", local)

    nc.adopt(argparse.Namespace(np_code_hash="here", np_source_digest="digest here"), source)

    adopted = json.loads((local / "worker_CIPNP_64_128_s1.json").read_text())
    assert adopted["np_code_hash"] == "here"
    assert adopted["restamped"]["np_code_hash_on_device"] == "device"
    assert adopted["restamped"]["git_commit_on_device"] == head
    assert not (local / "checkpoints" / "CIPNP_64_128_s1").exists()
    assert not (local / "worker_CANP_64_128_s1.json").exists()
    assert json.loads((local / "worker_CANP_64_128_s0.json").read_text())["np_code_hash"] == "here"
    assert json.loads((local / "worker_CIPNP_64_128_s0.json").read_text()) == {"mine": True}
    assert (local / "checkpoints" / "CANP_64_128_s2" / "state.pt").read_bytes() == b"resume me"


def _scored(model: str, seed: int, rbf: list[float]) -> dict:
    return {"model": model, "range": [64, 128], "seed": seed, "eval_ll_per_batch": {"rbf": rbf}}


def test_the_gap_pairs_batches_of_the_seeds_both_models_ran():
    cells = [
        _scored("CIPNP", 0, [1.0, 1.2, 0.2]),
        _scored("CANP", 0, [1.1, 1.1, 1.0]),
        _scored("CIPNP", 1, [5.0, 5.0, 5.0]),  # CANP has no seed 1: left out
    ]
    gaps = nc.batch_gaps(cells, "CIPNP", 64, 128)
    assert gaps == pytest.approx([-0.1, 0.1, -0.8])
    row = nc.gap_table(cells, [(64, 128), (256, 512)])[-2]  # [256,512] has no cells: no row
    assert row == "| [64,128] | 3 | -0.267 | -0.100 | -0.800 | +0.100 | 1 of 3 |"


def test_progress_shows_finished_training_and_unbegun_cells_of_the_plan(tmp_path, monkeypatch):
    from semiparam.neural_processes import CIPNP, GPTaskSampler

    monkeypatch.setattr(nc, "TMP", tmp_path)
    settings = {"patience": 2, "anneal_fraction": 0.1, "smoothing": 0.0, "min_steps": 0}
    settings |= {"lr_drops": 2, "drop_factor": 0.3}
    args = argparse.Namespace(
        models=["CIPNP", "CANP"], ranges="64:128,256:512", seeds=[0], screened=[], first=["CIPNP", "CANP"],
        np_code_hash="here", np_source_digest="digest here", steps=4000, lr=1e-2, eval_every=5,
        d_model=16, n_heads=2, schedule="adaptive", **settings,
    )  # fmt: skip
    # CIPNP [64,128]: a real fit killed after its first step down leaves its checkpoint
    options = dict(max_steps=4000, lr_schedule="adaptive", validation=None, eval_every=5, learning_rate=1e-2)
    options |= settings | {"checkpoint_every": 4}

    def fit(**extra):
        sampler = GPTaskSampler(min_ctx=8, max_ctx=9, random_state=0)
        options["validation"] = GPTaskSampler(min_ctx=8, max_ctx=9, random_state=5).eval_set(2, 4)
        return CIPNP(random_state=0, d_model=16, n_heads=2).fit(sampler, **options, **extra)

    first_drop = fit().history_.lr_drops[0]

    def die(step, loss):
        if step == first_drop + 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(checkpoint_dir=tmp_path / "checkpoints" / "CIPNP_64_128_s0", callback=die)
    # CANP [64,128]: a finished cell of these settings; CANP [256,512]: one of other code (stale)
    train = {"max_steps": 4000, "learning_rate": 1e-2, "eval_every": 5, "lr_schedule": "adaptive", **settings}
    cell = {
        "np_code_hash": "here", "train_config": train, "config": {"d_model": 16, "n_heads": 2},
        "curve": {"steps": [5, 10], "val_ll": [0.5, 0.75]}, "steps": 12, "best_step": 10,
        "lr_drops": [6], "anneal_start": 11, "stop_reason": "plateau, annealed",
    }  # fmt: skip
    (tmp_path / "worker_CANP_64_128_s0.json").write_text(json.dumps(cell))
    (tmp_path / "worker_CANP_256_512_s0.json").write_text(json.dumps(cell | {"np_code_hash": "old"}))

    rows = {tuple(r.split(" | ")[:3]): r.split(" | ")[3:] for r in nc.progress_table(args)[2:]}
    training = rows[("| CIPNP", "[64,128]", "0")]
    assert training[0] == "training" and training[2] == str(first_drop) and training[3] == "–"
    assert first_drop < int(training[1]) <= first_drop + 6 and training[5].endswith("of 2 |")
    finished = ["finished (plateau, annealed)", "12", "6", "11", "0.750 (10)"]
    assert rows[("| CANP", "[64,128]", "0")][:5] == finished
    assert rows[("| CIPNP", "[256,512]", "0")][0] == rows[("| CANP", "[256,512]", "0")][0] == "not begun"
    # the report names each cell without a result and how far its checkpoint got
    monkeypatch.setattr(nc, "RESULTS", tmp_path / "beside the report")
    finished_cell = {"model": "CANP", "range": [64, 128], "seed": 0}
    pending = nc.pending_lines({"settings": vars(args), "cells": [finished_cell]})
    assert pending[1].startswith("**3 cells of the plan have not finished**")
    one = nc.pending_lines({"settings": vars(args) | {"ranges": "64:128"}, "cells": [finished_cell]})
    assert one[1].startswith("**1 cell of the plan has not finished**") and len(one) == 5
    assert pending[3:6] == [
        f"- CIPNP [64,128] seed 0: trained {training[1]} steps so far, checkpointed",
        "- CIPNP [256,512] seed 0: not begun",
        "- CANP [256,512] seed 0: not begun",
    ]


def test_progress_reads_the_checkpoint_file_the_library_writes():
    """The benchmark names the checkpoint's state file itself (it imports only the public API); it must
    be the file :class:`TrainingCheckpoint` writes, or ``progress`` would show every cell as not begun."""
    from semiparam.training.checkpoint import STATE_FILE

    assert nc.STATE_FILE == STATE_FILE


def test_keep_carries_an_unfinished_cell_to_a_fresh_checkout_which_resumes_it(tmp_path, monkeypatch):
    """A session stops mid-run: ``keep`` copies the unfinished cell's checkpoint beside the report
    (committed) and drops the kept copy of a finished one; a fresh checkout (empty cell folder)
    restores it, and the fit goes on from the kept step to the same weights as an unbroken fit. A
    stale result of the kept cell there (other code) is set aside, not taken for the cell's end."""
    import torch

    from semiparam.neural_processes import CIPNP, GPTaskSampler

    results, session = tmp_path / "results", tmp_path / "session"
    monkeypatch.setattr(nc, "RESULTS", results)
    monkeypatch.setattr(nc, "TMP", session)
    args = argparse.Namespace(
        models=["CIPNP", "CANP"], ranges="64:128", seeds=[0], screened=[], first=["CIPNP", "CANP"],
        np_code_hash="here", np_source_digest="digest here", steps=24, lr=1e-2, eval_every=5, d_model=16,
        n_heads=2, schedule="cosine", **dict.fromkeys(nc.ADAPTIVE_SETTINGS),
    )  # fmt: skip

    def fit(**extra):
        sampler = GPTaskSampler(min_ctx=8, max_ctx=9, random_state=0)
        options = dict(max_steps=24, learning_rate=1e-2, checkpoint_every=4, batch_size=4)
        return CIPNP(random_state=0, d_model=16, n_heads=2).fit(sampler, **options, **extra)

    def die(step, loss):
        if step == 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(checkpoint_dir=session / "checkpoints" / "CIPNP_64_128_s0", callback=die)
    # CANP finished this session, but an earlier session had kept its checkpoint
    (session / "worker_CANP_64_128_s0.json").write_text(
        json.dumps({"np_code_hash": "here", "config": {"d_model": 16, "n_heads": 2},
                    "train_config": {"max_steps": 24, "learning_rate": 1e-2, "eval_every": 5}})
    )  # fmt: skip
    (results / "checkpoints" / "CANP_64_128_s0").mkdir(parents=True)

    lines = nc.keep(args)

    kept = results / "checkpoints" / "CIPNP_64_128_s0" / nc.STATE_FILE
    step = nc.saved_step(kept.parent)
    assert lines == [
        f"CIPNP_64_128_s0: kept at step {step + 1}",
        "CANP_64_128_s0: finished; its kept checkpoint removed",
    ]
    assert 4 <= step + 1 <= 10 and not (results / "checkpoints" / "CANP_64_128_s0").exists()
    assert nc.keep(args) == []  # nothing newer to keep

    fresh = tmp_path / "fresh"  # the next session's checkout: the committed results, no cell folder
    monkeypatch.setattr(nc, "TMP", fresh)
    stale = fresh / "worker_CIPNP_64_128_s0.json"  # the cell finished once, under other code
    fresh.mkdir()
    stale.write_text(json.dumps({"np_code_hash": "old"}))
    nc.restore_cells(results / "np_convergence.json", args)
    restored = fresh / "checkpoints" / "CIPNP_64_128_s0"
    assert (restored / nc.STATE_FILE).read_bytes() == kept.read_bytes()
    assert not stale.exists() and stale.with_suffix(".stale.json").exists()
    assert not list(fresh.glob("checkpoints/.*"))  # no staging copy left behind
    seen: list[int] = []
    resumed, unbroken = fit(checkpoint_dir=restored, callback=lambda step, loss: seen.append(step)), fit()
    assert seen[0] == step + 2  # the step after the kept one (callbacks count from 1), not the first
    assert resumed.history_.steps == unbroken.history_.steps
    for (name, a), b in zip(resumed.module_.state_dict().items(), unbroken.module_.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("python", ["this", "another"])
def test_the_driver_reports_every_finished_cell_before_training_the_rest(tmp_path, monkeypatch, python):
    """A run resumed mid-plan: the report it writes before any cell trains holds every finished cell,
    not only those a pool thread has reached behind the cells in training; a session that stops and
    commits it mid-run loses none (restore_cells takes them back from it). Under another Python (a
    device machine's copy of this tree) the code hash differs, and the finished cells are known by
    their sources' digest: they are neither set aside nor trained again."""
    committed = json.loads((ROOT / "benchmarks/results/np_converged/np_convergence.json").read_text())
    out = tmp_path / "results"
    cells = out / "tmp" / "np_convergence"
    cells.mkdir(parents=True)
    if python == "this":
        code = {"np_code_hash": nc.code_hash(modules=nc.NP_MODULES)}
    else:
        code = {"np_code_hash": "another Python's", "np_source_digest": nc.np_source_digest()}
    finished = [c for c in committed["cells"] if c["range"] == [64, 128]]
    assert len(finished) == 6
    for cell in finished:  # restamped: the test is about the driver, not about this code's results
        name = nc.cell_name(cell["model"], *cell["range"], cell["seed"])
        cell = {k: v for k, v in cell.items() if k != "np_source_digest"} | code
        (cells / f"worker_{name}.json").write_text(json.dumps(cell))
    seen = []

    def run_cell(args, kind, model, lo, hi, seed):
        report = out / "np_convergence.json"
        reported = len(json.loads(report.read_text())["cells"]) if report.exists() else None
        seen.append((kind, model, lo, seed, reported))
        return {"model": model, "range": [lo, hi], "seed": seed, "failed": True, "returncode": 1}

    monkeypatch.setattr(nc, "run_cell", run_cell)
    for name in ("RESULTS", "TMP"):  # main() sets them from --out-dir; put back after the test
        monkeypatch.setattr(nc, name, getattr(nc, name))
    command = committed["command"].split()[2:]  # the committed run's own settings
    command[command.index("--out-dir") + 1] = str(out)
    command[command.index("--ranges") + 1] = "64:128,256:512"
    command[command.index("--probe-rounds") + 1] = "1"  # the cost probes run first, one at a time
    command += ["--jobs", "1", "--eval-batches", "1"]
    monkeypatch.setattr(sys, "argv", ["np_convergence.py", *command])
    nc.main()
    report = out / "np_convergence.json"

    trained = sorted(s[1:4] for s in seen if s[0] == "worker")
    assert trained == [(m, 256, s) for m in ("CANP", "CIPNP") for s in (0, 1, 2)]
    assert [s[0] for s in seen[:4]] == ["probe"] * 4
    # the finished cells were in every report, from the first (written after the first probe)
    assert seen[0][4] is None and all(s[4] >= 6 for s in seen[1:])
    assert not list(cells.glob("*.stale.json"))
    # the finished cells of this code now carry the digest (stamp_source_digest), and so the report
    reported = [c for c in json.loads(report.read_text())["cells"] if not c.get("failed")]
    assert len(reported) == 6 and all(c["np_source_digest"] == nc.np_source_digest() for c in reported)


def test_what_was_tried_lists_every_run_shortest_first_with_its_code_and_this_run_last(tmp_path, monkeypatch):
    """The report's history table: each other run of the benchmark in the results folder (its root
    report and those of --out-dir folders), every CIPNP form it trained against CANP per range, the
    shortest training first, the code it ran named, this run's own rows last."""
    results = tmp_path / "benchmarks" / "results"
    monkeypatch.setattr(nc, "HERE", tmp_path / "benchmarks")

    def run(steps, code, forms, ranges, schedule="cosine"):
        cells = [
            _scored(model, seed, [base + 0.1 * seed] * 2) | {"range": list(r)}
            for model, base in (("CANP", 1.0), *forms)
            for r in ranges
            for seed in (0, 1)
        ]
        spans = ",".join(f"{lo}:{hi}" for lo, hi in ranges)
        settings = {"ranges": spans, "steps": steps, "schedule": schedule}
        return {"np_code_hash": code, "settings": settings, "cells": cells}

    both = [(64, 128), (256, 512)]
    runs = {
        "np_convergence.json": run(3000, "old", [("CIPNP", 1.01), ("CIPNP-paper", 0.9)], both),
        "np_50k/np_convergence.json": run(50000, "new", [("CIPNP", 0.95)], [(64, 128)]),
        "np_converged/np_convergence.json": run(150000, "new", [("CIPNP", 0.96)], [(64, 128)], "adaptive"),
    }
    for name, content in runs.items():
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(json.dumps(content))
    this = results / "np_converged" / "np_convergence.json"

    lines = nc.tried_table(runs["np_converged/np_convergence.json"], this)

    rows = [line.split(" | ") for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("| `benchmarks/results/np_convergence.json`", "old", "3000 steps", "CIPNP"),
        ("| `benchmarks/results/np_convergence.json`", "old", "3000 steps", "CIPNP-paper"),
        ("| `benchmarks/results/np_50k/np_convergence.json`", "new (this code)", "50000 steps", "CIPNP"),
        ("| this report", "new (this code)", "plateau (<= 150000)", "CIPNP"),
    ]
    assert rows[0][4:] == ["+0.010 (beats; 2 seeds)", "+0.010 (beats; 2 seeds) |"]
    assert rows[1][4:] == ["-0.100 (behind; 2 seeds)", "-0.100 (behind; 2 seeds) |"]  # seed sd 0.071
    assert rows[2][4:] == ["-0.050 (within sd; 2 seeds)", "– |"]  # not run at [256,512]
