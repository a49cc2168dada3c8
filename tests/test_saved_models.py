"""Models saved by an earlier release load and predict identically, and its training checkpoints
resume. The files under ``fixtures/saved_models/`` were written once by
``fixtures/make_saved_models.py`` at the commit before the renames of issue 50 item 4, so they spell
the old keys (``n_layers``, ``n_inducing_points``, ``checkpoint_every``): loading them must go
through the alias map (``semiparam._config.ALIASES``) without a warning to the user."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "saved_models"
SAVED = ["npt_classifier", "spin_regressor", "table_classifier_auto", "table_imputer_spin"]
SAVED += ["spin_image_classifier", "genotype_imputer_spin", "cipnp", "tnpd"]


def _class(name: str) -> Any:
    import semiparam
    import semiparam.genomics
    import semiparam.neural_processes

    for module in (semiparam, semiparam.neural_processes, semiparam.genomics):
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"no public class {name}")


def _fixture(name: str) -> tuple[Path, dict[str, Any], dict[str, np.ndarray]]:
    root = FIXTURES / name
    with np.load(root / "expected.npz") as expected:
        return root, json.loads((root / "fixture.json").read_text()), dict(expected)


def _predict(model: Any, fixture: dict[str, Any], root: Path) -> dict[str, np.ndarray]:
    method = fixture["method"]
    if fixture["query"].endswith(".csv"):
        out = getattr(model, method)(pd.read_csv(root / fixture["query"]))
        if isinstance(out, pd.DataFrame):  # an imputer's filled table: its numeric columns
            out = out[["a", "b"]].to_numpy(dtype=np.float64)
        return {method: out}
    with np.load(root / fixture["query"]) as query:
        inputs = dict(query)
    if method == "predict" and "context_x" in inputs:  # a neural process
        prediction = model.predict(**inputs)
        return {"mean": prediction.mean, "std": prediction.std}
    return {method: getattr(model, method)(*inputs.values())}


@pytest.mark.parametrize("name", SAVED)
def test_saved_model_loads_and_predicts_identically(name: str) -> None:
    root, fixture, expected = _fixture(name)
    cls = _class(fixture["class"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an old file loads without a word to the user
        model = cls.load(root / "model", device="cpu")
    got = _predict(model, fixture, root)
    assert set(got) == set(expected)
    for key, values in expected.items():
        np.testing.assert_allclose(np.asarray(got[key], dtype=np.float64), values, rtol=1e-5, atol=1e-7)


def test_table_checkpoint_resumes(tmp_path: Path) -> None:
    """A finished table fit's checkpoint is accepted (its fingerprint matches) and the resumed fit
    predicts as the original did."""
    root, fixture, expected = _fixture("checkpoint_spin")
    shutil.copytree(root / "checkpoint", tmp_path / "checkpoint")
    train = pd.read_csv(root / "train.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the settings spell the old keys
        model = _class(fixture["class"])(**fixture["params"])
        model.fit(
            train.drop(columns="target"), train["target"], checkpoint_dir=tmp_path / "checkpoint", resume=True
        )
    got = model.predict(pd.read_csv(root / fixture["query"]))
    np.testing.assert_allclose(got, expected["predict"], rtol=1e-5, atol=1e-7)


def test_neural_process_checkpoint_resumes(tmp_path: Path) -> None:
    from semiparam.neural_processes import GPTaskSampler

    root, fixture, expected = _fixture("tnpd")
    shutil.copytree(root / "checkpoint", tmp_path / "checkpoint")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the settings spell the old keys
        model = _class(fixture["class"])(random_state=0, device="cpu", **fixture["config"])
        model.fit(
            GPTaskSampler(**fixture["sampler"]),
            checkpoint_dir=tmp_path / "checkpoint",
            **fixture["train_options"],
        )
    got = _predict(model, fixture, root)
    for key, values in expected.items():
        np.testing.assert_allclose(got[key], values, rtol=1e-5, atol=1e-7)


def test_fixtures_stay_small() -> None:
    total = sum(f.stat().st_size for f in FIXTURES.rglob("*") if f.is_file())
    assert total < 2 * 2**20, f"the saved-model fixtures take {total / 2**20:.1f} MiB"
