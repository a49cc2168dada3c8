"""Safe saves (nothing lost) and errors a user can act on (nothing misleading)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from semiparam import ModelFileError, NPTClassifier
from semiparam._io import atomic_directory, atomic_file, available_device
from semiparam.cli.main import main

from .test_cli import ONE, TINY_SETS

FAST = {
    "max_steps": 5,
    "model_options": {"d_embedding": 8, "n_heads": 2, "n_blocks": 2},
    "n_estimators": 1,  # one model's file layout
    "verbose": False,
}


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


# -- atomic_directory / atomic_file ------------------------------------------------------------


def test_atomic_directory_refuses_an_existing_directory_and_leaves_it(tmp_path: Path) -> None:
    old = tmp_path / "model"
    old.mkdir()
    (old / "weights").write_text("old")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        with atomic_directory(old, overwrite=False) as tmp:
            (tmp / "weights").write_text("new")
    assert (old / "weights").read_text() == "old" and siblings(old) == ["model"]


def test_atomic_directory_replaces_only_when_complete(tmp_path: Path) -> None:
    old = tmp_path / "model"
    old.mkdir()
    (old / "weights").write_text("old")
    with pytest.raises(RuntimeError, match="midway"):
        with atomic_directory(old, overwrite=True) as tmp:
            assert tmp.parent == tmp_path and tmp.name.startswith(".")
            (tmp / "weights").write_text("half")
            raise RuntimeError("midway")
    assert (old / "weights").read_text() == "old" and siblings(old) == ["model"]
    with atomic_directory(old, overwrite=True) as tmp:
        (tmp / "weights").write_text("new")
    assert (old / "weights").read_text() == "new" and siblings(old) == ["model"]


def test_atomic_directory_new_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(tmp_path / "a" / "b", overwrite=False) as tmp:
            (tmp / "x").write_text("1")
            raise KeyboardInterrupt
    assert not (tmp_path / "a" / "b").exists() and list((tmp_path / "a").iterdir()) == []
    (tmp_path / "empty").mkdir()  # an empty directory holds nothing to lose
    with atomic_directory(tmp_path / "empty", overwrite=False) as tmp:
        (tmp / "x").write_text("1")
    assert (tmp_path / "empty" / "x").read_text() == "1"


def test_atomic_file(tmp_path: Path) -> None:
    out = tmp_path / "pred.csv.gz"
    with atomic_file(out, overwrite=False) as tmp:
        assert tmp.name.endswith(".csv.gz") and tmp.name.startswith(".")
        tmp.write_text("a")
    with pytest.raises(FileExistsError, match="--force"):
        with atomic_file(out, overwrite=False) as tmp:
            tmp.write_text("b")
    with pytest.raises(ValueError):
        with atomic_file(out, overwrite=True) as tmp:
            tmp.write_text("c")
            raise ValueError("failed")
    assert out.read_text() == "a" and siblings(out) == ["pred.csv.gz"]


def test_available_device() -> None:
    assert available_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        assert available_device("cuda") == "cpu" and available_device("cuda:3") == "cpu"


# -- estimators --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted_clf() -> tuple[NPTClassifier, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = np.where(X[:, 0] > 0, "a", "b")
    return NPTClassifier(random_state=0, **FAST).fit(X, y), X


def test_estimator_save_refuses_overwrite_and_failed_save_leaves_nothing(
    fitted_clf: tuple[NPTClassifier, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clf, X = fitted_clf
    path = clf.save(tmp_path / "model")
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    with pytest.raises(FileExistsError, match="overwrite=True"):
        clf.save(path)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before

    import semiparam.estimators.model_dir as model_dir  # writes the tensor files of every saved model

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(model_dir, "save_file", fail)
    with pytest.raises(OSError, match="disk full"):
        clf.save(path, overwrite=True)
    with pytest.raises(OSError, match="disk full"):
        clf.save(tmp_path / "new")
    assert siblings(path) == ["model"]  # no half-written model, no temporary left
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    monkeypatch.undo()
    clf.save(path, overwrite=True)
    np.testing.assert_array_equal(NPTClassifier.load(path).predict_proba(X), clf.predict_proba(X))


def test_model_saved_on_a_gpu_loads_on_a_cpu_machine(
    fitted_clf: tuple[NPTClassifier, np.ndarray], tmp_path: Path
) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    clf, X = fitted_clf
    path = clf.save(tmp_path / "model")
    meta = json.loads((path / "semiparam.json").read_text())
    meta["device"] = "cuda:0"  # as if saved on a GPU
    meta["estimator"]["params"]["device"] = "cuda"
    (path / "semiparam.json").write_text(json.dumps(meta))
    loaded = NPTClassifier.load(path)
    assert loaded.learner_.device.type == "cpu" and loaded.device == "cpu"
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))


def test_corrupt_model_files_name_the_file(
    fitted_clf: tuple[NPTClassifier, np.ndarray], tmp_path: Path
) -> None:
    clf, _ = fitted_clf
    path = clf.save(tmp_path / "model")
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ModelFileError, match="model.safetensors: fails its integrity check"):
        NPTClassifier.load(path)
    path = clf.save(tmp_path / "model2")
    (path / "semiparam.json").write_text((path / "semiparam.json").read_text()[:50])
    with pytest.raises(ModelFileError, match="semiparam.json: not valid JSON"):
        NPTClassifier.load(path)


# -- command line --------------------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path: Path, mixed_frame: pd.DataFrame) -> tuple[Path, Path]:
    csv = tmp_path / "table.csv"
    mixed_frame.to_csv(csv, index=False)
    run = tmp_path / "run"
    assert main(["fit", str(csv), "--target", "target", "--out", str(run), *ONE, *TINY_SETS]) == 0
    return run, csv


def test_cli_refuses_to_overwrite_without_force(
    run_dir: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, csv = run_dir
    (run / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["fit", str(csv), "--target", "target", "--out", str(run), *TINY_SETS]) == 2
    err = capsys.readouterr().err
    assert err.startswith("semiparam: error: ") and "--force" in err and err.count("\n") == 1
    assert (run / "notes.txt").read_text() == "mine"
    assert main(["fit", str(csv), "--target", "target", "--out", str(run), "--force", *ONE, *TINY_SETS]) == 0
    assert not (run / "notes.txt").exists() and (run / "model" / "model.safetensors").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    out = tmp_path / "pred.csv"
    out.write_text("keep me\n")
    assert main(["predict", str(run), str(csv), "--out", str(out), "--quiet"]) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "keep me\n"
    assert main(["predict", str(run), str(csv), "--out", str(out), "--quiet", "--force"]) == 0
    assert len(pd.read_csv(out)) == 60
    filled = tmp_path / "filled.csv"
    filled.write_text("keep me\n")
    assert main(["impute", str(csv), "--out", str(filled), *TINY_SETS]) == 2
    assert filled.read_text() == "keep me\n"


def test_cli_truncated_weights_one_line_error(
    run_dir: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, csv = run_dir
    weights = run / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    capsys.readouterr()
    assert main(["predict", str(run), str(csv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("semiparam: error: ") and str(weights) in err
    assert err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(ModelFileError):  # --debug: the exception (and its traceback) comes through
        main(["--debug", "predict", str(run), str(csv)])
    with pytest.raises(ModelFileError):
        main(["predict", str(run), str(csv), "--debug"])


def test_cli_other_user_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad_json = tmp_path / "model"
    bad_json.mkdir()
    (bad_json / "semiparam.json").write_text("{not json")
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n1,2\n")
    assert main(["predict", str(bad_json), str(csv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("semiparam: error: ") and "semiparam.json: not valid JSON" in err
    assert main(["predict", str(tmp_path / "nowhere"), str(csv)]) == 2
    assert "nowhere" in capsys.readouterr().err
    toml = tmp_path / "c.toml"
    toml.write_text("[model\n")
    assert main(["fit", str(csv), "--target", "a", "--config", str(toml), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "c.toml: not valid TOML" in err and err.count("\n") == 1


def test_cli_subprocess_exit_status_and_debug_traceback(run_dir: tuple[Path, Path]) -> None:
    run, csv = run_dir
    weights = run / "model" / "model.safetensors"
    weights.write_bytes(b"\x00" * 3)
    cmd = [sys.executable, "-m", "semiparam.cli.main", "predict", str(run), str(csv)]
    quiet = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 2
    lines = quiet.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("semiparam: error: ")
    assert str(weights) in quiet.stderr and "Traceback" not in quiet.stderr
    loud = subprocess.run([*cmd, "--debug"], capture_output=True, text=True, timeout=120)
    assert loud.returncode == 1 and "Traceback" in loud.stderr and "ModelFileError" in loud.stderr
