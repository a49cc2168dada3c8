"""Resumable training: a fit killed mid-way continues to the result of an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from semiparam import NPTClassifier, NPTRegressor, SPINRegressor
from semiparam.cli.main import main
from semiparam.training.checkpoint import CheckpointMismatchError, TrainingCheckpoint, set_rng_state

# dropout stays on (its RNG state must survive the restart); 4 blocks of width 8 train in seconds
MODEL = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2}
# checkpoints every 4 steps, evaluation every 5: a resumed fit restarts between evaluations
TRAIN = {"checkpoint_every_steps": 4, "checkpoint_every_seconds": None, "eval_every": 5}


def regression_table(n: int = 120, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.normal(size=n),
            "c": pd.Categorical(rng.choice(["x", "y", "z"], n)),
        }
    )
    y = 2 * X["a"].to_numpy() - X["b"].to_numpy() + (X["c"] == "x").to_numpy() + 0.1 * rng.normal(size=n)
    return X, y


def state_of(directory: Path) -> dict:
    return torch.load(directory / "state.pt", weights_only=True)["state"]


class KillAt(Exception):
    pass


def kill_after_step(monkeypatch: pytest.MonkeyPatch, at_step: int) -> None:
    """Make the training loop die (as a kill would) right after step ``at_step``'s checkpoint."""
    real = TrainingCheckpoint.write

    def write(self: TrainingCheckpoint, state: dict) -> None:
        real(self, state)
        if not state["finished"] and state["step"] >= at_step:
            raise KillAt(state["step"])

    monkeypatch.setattr(TrainingCheckpoint, "write", write)


@pytest.mark.parametrize("n_estimators", [1, 2])
def test_an_interrupted_fit_resumes_to_the_uninterrupted_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_estimators: int
) -> None:
    X, y = regression_table()
    kwargs = dict(
        max_steps=60,
        model_options=MODEL,
        train_options=TRAIN,
        n_estimators=n_estimators,
        random_state=3,
        verbose=False,
    )
    whole = NPTRegressor(**kwargs).fit(X, y)
    with monkeypatch.context() as m:
        kill_after_step(m, at_step=21)  # member 0, between two evaluations
        with pytest.raises(KillAt):
            NPTRegressor(**kwargs).fit(X, y, checkpoint_dir=tmp_path / "ckpt")
    assert state_of(tmp_path / "ckpt" / "member_0")["step"] == 23  # the step-24 checkpoint
    resumed = NPTRegressor(**kwargs).fit(X, y, checkpoint_dir=tmp_path / "ckpt", resume=True)
    np.testing.assert_array_equal(resumed.predict(X), whole.predict(X))
    for a, b in zip(resumed.history_.members, whole.history_.members, strict=True):
        assert a.steps == b.steps and a.val_loss == b.val_loss and a.best_step == b.best_step
        assert a.train_loss == b.train_loss and a.stop_reason == b.stop_reason


def test_a_killed_subprocess_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    """A real training process killed with SIGKILL once it has written a checkpoint."""
    X, y = regression_table(n=150, seed=1)
    X.assign(y=y).to_csv(tmp_path / "data.csv", index=False)
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, pandas as pd, torch
        torch.set_num_threads(1)
        from semiparam import NPTRegressor
        frame = pd.read_csv({str(tmp_path / "data.csv")!r})
        frame["c"] = pd.Categorical(frame["c"])
        X, y = frame.drop(columns="y"), frame["y"].to_numpy()
        model = NPTRegressor(
            max_steps=200, patience=None, model_options={MODEL!r}, train_options={TRAIN!r},
            random_state=5, verbose=False,
        )
        ckpt = sys.argv[1] if sys.argv[1] != "-" else None
        model.fit(X, y, checkpoint_dir=ckpt, resume=len(sys.argv) > 2)
        np.save(sys.argv[-1] if len(sys.argv) > 2 else {str(tmp_path / "whole.npy")!r}, model.predict(X))
        """
    )
    (tmp_path / "fit.py").write_text(script)
    run = [sys.executable, str(tmp_path / "fit.py")]
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([*run, str(ckpt)])
    try:
        deadline = time.monotonic() + 120
        while not (ckpt / "member_0" / "state.pt").exists():
            assert proc.poll() is None, "the fit ended before writing a checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = state_of(ckpt / "member_0")
    assert not killed_at["finished"] and killed_at["step"] < 199
    subprocess.run([*run, str(ckpt), "resume", str(tmp_path / "resumed.npy")], check=True)
    subprocess.run([*run, "-"], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "resumed.npy"), np.load(tmp_path / "whole.npy"))


def test_fingerprints_keep_their_values() -> None:
    """Work stored by an earlier version (a training checkpoint, a genotype run's windows, benchmark
    records) is reused only while the same inputs give the same fingerprint: the values from before
    every fingerprint went through ``_io.digest``."""
    from semiparam._io import digest
    from semiparam.training.checkpoint import fingerprint

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = fingerprint(a, a[:, ::2], {"b": 1, "a": [1, 2]}, "text", None)
    assert got == "dd36443007b0092e4e080452d59bb480264a74071ea14585094e01f168f3eaf5"
    assert digest({"b": 1, "a": (1, 2)}, length=12) == "3813f9409eb0"


def test_resume_refuses_a_checkpoint_of_other_data_settings_or_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y = regression_table()
    kwargs = dict(max_steps=40, model_options=MODEL, train_options=TRAIN, random_state=0, verbose=False)
    with monkeypatch.context() as m:
        kill_after_step(m, at_step=5)
        with pytest.raises(KillAt):
            NPTRegressor(**kwargs).fit(X, y, checkpoint_dir=tmp_path)
    other_y = y.copy()
    other_y[0] += 1.0
    for model, target in [
        (NPTRegressor(**kwargs), other_y),
        (NPTRegressor(**{**kwargs, "learning_rate": 1e-3}), y),
        (NPTRegressor(**{**kwargs, "random_state": 1}), y),
    ]:
        with pytest.raises(CheckpointMismatchError, match="other data, settings or seed"):
            model.fit(X, target, checkpoint_dir=tmp_path, resume=True)
    # how often checkpoints are written is not a setting of the fit
    cadence = {**TRAIN, "checkpoint_every_steps": 7}
    NPTRegressor(**{**kwargs, "train_options": cadence}).fit(X, y, checkpoint_dir=tmp_path, resume=True)


def test_an_existing_checkpoint_is_not_overwritten_without_resume(tmp_path: Path) -> None:
    X, y = regression_table(n=60)
    model = NPTRegressor(max_steps=8, model_options=MODEL, train_options=TRAIN, verbose=False)
    model.fit(X, y, checkpoint_dir=tmp_path)
    before = (tmp_path / "member_0" / "state.pt").read_bytes()
    with pytest.raises(FileExistsError, match="resume=True"):
        model.fit(X, y, checkpoint_dir=tmp_path)
    assert (tmp_path / "member_0" / "state.pt").read_bytes() == before


def test_resume_of_a_finished_fit_trains_nothing_and_predicts_the_same(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=80), "b": rng.normal(size=80)})
    y = np.where(X["a"] > 0, "p", "q")
    kwargs = dict(max_steps=20, model_options=MODEL, train_options=TRAIN, random_state=2, verbose=False)
    first = NPTClassifier(**kwargs).fit(X, y, checkpoint_dir=tmp_path)
    assert state_of(tmp_path / "member_0")["finished"]
    again = NPTClassifier(**kwargs).fit(X, y, checkpoint_dir=tmp_path, resume=True)
    np.testing.assert_array_equal(again.predict_proba(X), first.predict_proba(X))
    assert again.history_.steps == first.history_.steps


def test_resume_without_a_checkpoint_starts_afresh(tmp_path: Path) -> None:
    X, y = regression_table(n=60)
    kwargs = dict(max_steps=8, model_options=MODEL, random_state=0, verbose=False)
    plain = NPTRegressor(**kwargs).fit(X, y)
    fresh = NPTRegressor(**kwargs).fit(X, y, checkpoint_dir=tmp_path / "new", resume=True)
    np.testing.assert_array_equal(fresh.predict(X), plain.predict(X))


def test_spin_resumes_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = regression_table()
    kwargs = dict(
        max_steps=30,
        model_options={"d_embedding": 8, "n_heads": 2},
        train_options=TRAIN,
        random_state=4,
        verbose=False,
    )
    whole = SPINRegressor(**kwargs).fit(X, y)
    with monkeypatch.context() as m:
        kill_after_step(m, at_step=10)
        with pytest.raises(KillAt):
            SPINRegressor(**kwargs).fit(X, y, checkpoint_dir=tmp_path)
    resumed = SPINRegressor(**kwargs).fit(X, y, checkpoint_dir=tmp_path, resume=True)
    np.testing.assert_array_equal(resumed.predict(X), whole.predict(X))


def test_cli_fit_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    X, y = regression_table(n=60)
    X.assign(y=y).to_csv(tmp_path / "data.csv", index=False)
    run = tmp_path / "run"
    sets = ["--set", "model.d_embedding=8", "--set", "model.n_blocks=2", "--set", "train.max_steps=8"]
    base = [
        "fit",
        str(tmp_path / "data.csv"),
        "--target",
        "y",
        "--model",
        "npt",
        "--out",
        str(run),
        "--quiet",
        *sets,
    ]
    assert main([*base, "--resume"]) == 2  # nothing to resume yet
    assert "no training checkpoint to resume" in capsys.readouterr().err
    assert main(base) == 0
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint", "config.json", "metrics.json", "model"]
    members = json.loads((run / "metrics.json").read_text())["history"]["members"]
    assert main([*base, "--resume"]) == 0  # a finished fit: nothing retrained, same result
    assert json.loads((run / "metrics.json").read_text())["history"]["members"] == members
    assert main(base) == 2  # an existing run needs --force
    assert main([*base, "--force"]) == 0


def test_two_fits_in_two_threads_match_each_fitted_alone() -> None:
    # weights come from the global generator under a lock, dropout and masking from each fit's own
    # generators: a fit running beside another draws what it draws alone, and the caller's global
    # random state is left as it was
    from concurrent.futures import ThreadPoolExecutor

    X, y = regression_table()

    def fit(seed: int) -> np.ndarray:
        model = NPTRegressor(
            max_steps=40, model_options=MODEL, n_estimators=1, random_state=seed, verbose=False
        )
        return model.fit(X, y).predict(X)

    torch.manual_seed(123)
    before = torch.get_rng_state()
    alone = [fit(0), fit(1)]
    assert torch.equal(torch.get_rng_state(), before)
    with ThreadPoolExecutor(max_workers=2) as pool:
        together = list(pool.map(fit, [0, 1, 0, 1]))
    for k, preds in enumerate(together):
        np.testing.assert_array_equal(preds, alone[k % 2])


def test_a_generator_state_from_another_kind_of_device_seeds_the_generator_with_a_warning() -> None:
    """A CUDA generator's state (16 bytes: seed and offset) cannot be put into a CPU generator: a
    fit begun on a GPU and resumed on the CPU gets its generator seeded from the saved state, the
    same seed for the same state, and a warning saying its draws now differ."""
    cuda_like = torch.arange(16, dtype=torch.uint8)  # the size of a CUDA (Philox) generator state
    draws = []
    for _ in range(2):
        generator = torch.Generator()
        with pytest.warns(UserWarning, match="another kind of device"):
            set_rng_state({"masking": cuda_like}, {"masking": generator})
        draws.append(torch.rand(4, generator=generator))
    torch.testing.assert_close(draws[0], draws[1])
    other = torch.Generator()
    with pytest.warns(UserWarning):
        set_rng_state({"masking": cuda_like + 1}, {"masking": other})
    assert not torch.equal(torch.rand(4, generator=other), draws[0])
    same_kind = torch.Generator().manual_seed(3)
    saved = same_kind.get_state()
    expected = torch.rand(4, generator=same_kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same kind: restored exactly, no warning
        set_rng_state({"masking": saved}, {"masking": same_kind})
    torch.testing.assert_close(torch.rand(4, generator=same_kind), expected)
