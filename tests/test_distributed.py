"""Data-parallel training (training.distributed): two gloo processes launched by torchrun train what
one process does with the same row shards, a killed worker ends the job with a clear message, and
its checkpoint resumes in another number of processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import torch

from semiparam import NPTRegressor, SPINClassifier
from semiparam.training.distributed import (
    ProcessGroup,
    local_shards,
    resolve_shards,
    shard_rows,
    shard_seed,
)

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")

MODEL = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2}
# a fixed schedule (no early stop), so a run's length does not depend on float rounding
TRAIN = {"lr_schedule": "flat_cosine", "eval_every": 5, "checkpoint_every_seconds": None}
SETS = [f"--set=model.{k}={v}" for k, v in MODEL.items()] + [
    "--set=train.lr_schedule='flat_cosine'",
    "--set=train.eval_every=5",
    "--set=train.checkpoint_every_seconds=none",
    "--set=train.patience=none",
]


def table(n: int = 90, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(["x", "y"], n)})
    frame["y"] = 2 * frame["a"] - frame["b"] + (frame["c"] == "x") + 0.1 * rng.normal(size=n)
    return frame


def env() -> dict[str, str]:
    # one thread per process in both runs, so that they round alike
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def fit_command(data: Path, out: Path, steps: int, extra: list[str], processes: int | None) -> list[str]:
    launcher = [sys.executable]
    if processes is not None:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    return [
        *launcher,
        "-m",
        "semiparam.cli.main",
        "fit",
        str(data),
        "--target",
        "y",
        "--out",
        str(out),
        "--quiet",
        "--model",
        "npt",
        "--n-estimators",
        "1",
        "--seed",
        "3",
        f"--set=train.max_steps={steps}",
        *SETS,
        *extra,
    ]


def predictions(run: Path, data: Path) -> np.ndarray:
    out = run.parent / f"{run.name}.csv"
    subprocess.run(
        [sys.executable, "-m", "semiparam.cli.main", "predict", str(run), str(data), "--out", str(out)],
        check=True,
        env=env(),
    )
    return pd.read_csv(out)["y"].to_numpy()


def test_shards_are_dealt_evenly_and_checked() -> None:
    assert shard_rows(7, 1, 3, "cpu").tolist() == [1, 4]
    assert list(local_shards(4, ProcessGroup(1, 2))) == [2, 3]
    assert resolve_shards(None, ProcessGroup(0, 2)) == 2
    assert resolve_shards(None, ProcessGroup(0, 1), checkpoint_shards=2) == 2
    with pytest.raises(ValueError, match="cannot be shared evenly by 2 processes"):
        resolve_shards(3, ProcessGroup(0, 2))
    with pytest.raises(ValueError, match="resume with shards=2"):
        resolve_shards(4, ProcessGroup(0, 1), checkpoint_shards=2)
    assert shard_seed(5, 0) == 5 and shard_seed(5, 1) != shard_seed(5, 2)


def test_one_shard_trains_as_before_and_two_shards_differ() -> None:
    frame = table()
    X, y = frame.drop(columns="y"), frame["y"].to_numpy()
    kwargs = dict(n_estimators=1, model_options=MODEL, max_steps=10, random_state=0, verbose=False)
    plain = NPTRegressor(train_options=TRAIN, **kwargs).fit(X, y)
    one = NPTRegressor(train_options={**TRAIN, "shards": 1}, **kwargs).fit(X, y)
    two = NPTRegressor(train_options={**TRAIN, "shards": 2}, **kwargs).fit(X, y)
    np.testing.assert_array_equal(plain.predict(X), one.predict(X))
    assert not np.allclose(plain.predict(X), two.predict(X))
    assert two.history_.n_steps == 10


def test_shards_train_a_table_without_categorical_columns() -> None:
    # the model's categorical heads are then empty parameters, which the sharded step must handle
    frame = table().drop(columns="c")
    X, y = frame.drop(columns="y"), frame["y"].to_numpy()
    est = NPTRegressor(
        n_estimators=1, model_options=MODEL, max_steps=6, train_options={**TRAIN, "shards": 2}, random_state=0
    )
    assert any(p.numel() == 0 for p in est.set_params(verbose=False).fit(X, y).learner_.module.parameters())
    assert np.isfinite(est.predict(X)).all() and est.history_.n_steps == 6


def test_sharded_classifier_trains_and_resumes(tmp_path: Path) -> None:
    frame = table()
    X, y = frame.drop(columns="y"), np.where(frame["y"] > 0, "up", "down")
    kwargs = dict(
        n_estimators=1,
        model_options={"d_embedding": 8, "n_blocks": 1},
        max_steps=12,
        train_options={**TRAIN, "shards": 3, "checkpoint_every_steps": 4},
        random_state=0,
        verbose=False,
    )
    whole = SPINClassifier(**kwargs).fit(X, y)
    from semiparam.training import trainer as trainer_module

    real, calls = trainer_module.Trainer.train_step, []

    def dies_after_six(self, batch, step):  # noqa: ANN001, ANN202
        if step == 6:
            raise KeyboardInterrupt
        calls.append(step)
        return real(self, batch, step)

    trainer_module.Trainer.train_step = dies_after_six
    try:
        with pytest.raises(KeyboardInterrupt):
            SPINClassifier(**kwargs).fit(X, y, checkpoint_dir=tmp_path)
    finally:
        trainer_module.Trainer.train_step = real
    resumed = SPINClassifier(**kwargs).fit(X, y, checkpoint_dir=tmp_path, resume=True)
    np.testing.assert_array_equal(resumed.predict_proba(X), whole.predict_proba(X))


def test_two_processes_match_one_process_with_two_shards(tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    table().to_csv(data, index=False)
    two = tmp_path / "two"
    one = tmp_path / "one"
    done = subprocess.run(
        fit_command(data, two, 20, [], processes=2), env=env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    subprocess.run(
        fit_command(data, one, 20, ["--set=train.shards=2"], None), env=env(), check=True, timeout=300
    )
    config = json.loads((two / "config.json").read_text())
    assert config["world_size"] == 2
    assert json.loads((one / "config.json").read_text())["world_size"] == 1
    a = json.loads((two / "metrics.json").read_text())["history"]["members"][0]
    b = json.loads((one / "metrics.json").read_text())["history"]["members"][0]
    assert a["steps"] == b["steps"]
    np.testing.assert_allclose(a["train_loss"], b["train_loss"], rtol=1e-4)
    np.testing.assert_allclose(a["val_loss"], b["val_loss"], rtol=1e-4)
    np.testing.assert_allclose(predictions(two, data), predictions(one, data), rtol=1e-4, atol=1e-5)


def test_a_killed_worker_ends_the_job_and_its_checkpoint_resumes_in_one_process(tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    table(n=120).to_csv(data, index=False)
    run = tmp_path / "run"
    steps = 200
    command = fit_command(data, run, steps, ["--set=train.checkpoint_every_steps=5"], processes=2)
    launcher = subprocess.Popen(command, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        state = run / "checkpoint" / "member_0" / "state.pt"
        deadline = time.monotonic() + 180
        while not state.exists():
            assert launcher.poll() is None, "the job ended before writing a checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 180 s"
            time.sleep(0.05)
        time.sleep(0.3)
        workers = [
            p
            for p in psutil.Process(launcher.pid).children(recursive=True)
            if "semiparam" in " ".join(p.cmdline())
        ]
        assert len(workers) == 2, [p.cmdline() for p in workers]
        workers[1].send_signal(signal.SIGKILL)
        _, stderr = launcher.communicate(timeout=180)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0
    assert "SIGKILL" in stderr or "Signal 9" in stderr, stderr[-3000:]
    killed_at = torch.load(state, weights_only=True)["state"]
    assert not killed_at["finished"] and killed_at["step"] < steps - 1 and killed_at["n_shards"] == 2
    # resumed in one process: the checkpoint's two shards are now both this process's
    subprocess.run(
        [*fit_command(data, run, steps, ["--set=train.checkpoint_every_steps=5"], None), "--resume"],
        env=env(),
        check=True,
        timeout=600,
    )
    whole = tmp_path / "whole"
    subprocess.run(
        fit_command(data, whole, steps, ["--set=train.shards=2"], None), env=env(), check=True, timeout=600
    )
    np.testing.assert_allclose(predictions(run, data), predictions(whole, data), rtol=1e-3, atol=1e-4)
