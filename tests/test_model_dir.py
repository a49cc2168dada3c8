"""The saved-model directory format (``semiparam.estimators.model_dir``): written atomically with
its version, kind and checksums, read back with errors that name the file, and older formats
upgraded through the one chain."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from semiparam._io import ModelFileError
from semiparam.estimators import model_dir
from semiparam.estimators.model_dir import (
    FORMAT_VERSION,
    UPGRADES,
    read_model_dir,
    save_model_dir,
    upgraded,
)
from semiparam.models.spin import SPINConfig

from .test_pretrained import tiny_weights  # noqa: F401 - the fixture: tiny prior-fitted weights


def _save(path: Path, **kwargs: Any) -> Path:
    tensors = {
        "model.safetensors": {"w": torch.arange(6.0).reshape(2, 3)},
        "reference.safetensors": {"h": np.arange(4, dtype=np.int8)},
    }
    return save_model_dir(path, "table", {"seed": 3, "note": np.int64(7)}, tensors=tensors, **kwargs)


def _meta(path: Path, name: str = "semiparam.json") -> dict[str, Any]:
    return json.loads((path / name).read_text())


def test_round_trip(tmp_path: Path) -> None:
    parts = {"member_0": lambda d: _save(d)}
    path = _save(tmp_path / "model")
    save_model_dir(tmp_path / "outer", "ensemble", {"n_members": 1}, parts=parts)
    meta = _meta(path)
    assert meta["format_version"] == FORMAT_VERSION and meta["kind"] == "table"
    assert meta["library_version"] == model_dir.library_version() and meta["note"] == 7
    assert sorted(meta["sha256"]) == ["model.safetensors", "reference.safetensors"]
    saved = read_model_dir(path, "table", "ensemble")
    assert saved.kind == "table" and saved.version_read == FORMAT_VERSION and saved.meta["seed"] == 3
    assert "sha256" not in saved.meta  # checked, not handed on
    torch.testing.assert_close(saved.tensors("model.safetensors")["w"], torch.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(saved.arrays("reference.safetensors")["h"], np.arange(4))
    outer = read_model_dir(tmp_path / "outer", "ensemble")
    assert outer.kind == "ensemble" and read_model_dir(outer.path / "member_0", "table").meta["seed"] == 3
    with pytest.raises(FileExistsError, match="overwrite=True"):
        _save(path)
    with pytest.raises(ValueError, match="written by the model-directory format"):
        save_model_dir(tmp_path / "x", "table", {"sha256": {}})
    assert not (tmp_path / "x").exists()


def test_weights_and_configs_load_through_the_saved_model(tmp_path: Path) -> None:
    module = torch.nn.Linear(3, 2)
    config = {"n_layers": 3, "d_embedding": 16}  # n_layers: SPIN's old name of n_blocks
    path = save_model_dir(
        tmp_path / "m",
        "table",
        {"model_config": config},
        tensors={"model.safetensors": model_dir.module_tensors(module)},
    )
    saved = read_model_dir(path, "table")
    other = saved.load_weights(torch.nn.Linear(3, 2))
    torch.testing.assert_close(other.weight, module.weight)
    with pytest.raises(ModelFileError, match="model.safetensors: weights do not match"):
        saved.load_weights(torch.nn.Linear(4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an old spelling in a saved file loads without a word
        spin = saved.config(SPINConfig, "model_config")
    assert spin.n_blocks == 3 and spin.d_embedding == 16
    assert saved.config(SPINConfig, "model_config", missing={"n_heads": 2}).n_heads == 2
    with pytest.raises(ModelFileError, match="'train_config' is not a mapping"):
        saved.config(SPINConfig, "train_config")


def test_a_changed_file_fails_its_checksum(tmp_path: Path) -> None:
    path = _save(tmp_path / "model")
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match=r"model.safetensors: fails its integrity check"):
        read_model_dir(path, "table")
    weights.unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors: missing"):
        read_model_dir(path, "table")
    meta = _meta(path)
    del meta["sha256"]
    (path / "semiparam.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="checksums of the model's files are missing"):
        read_model_dir(path, "table")


def test_a_newer_format_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = _save(tmp_path / "model")
    meta = _meta(path)
    meta.update(format_version=FORMAT_VERSION + 1, library_version="9.0")
    (path / "semiparam.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match=r"semiparam.json: model format \d+ \(written by semiparam 9.0"):
        read_model_dir(path, "table")
    with pytest.raises(ModelFileError, match="upgrade semiparam"):
        read_model_dir(path, "table")
    for bad in ("2", None, 0, True):
        with pytest.raises(ModelFileError, match="unsupported model format"):
            upgraded({"format_version": bad}, path / "semiparam.json")


def test_missing_corrupt_and_other_kinds_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a saved neural process .no neural_process.json"):
        read_model_dir(tmp_path, "neural-process")
    path = _save(tmp_path / "model")
    with pytest.raises(ModelFileError, match="holds a model of kind 'table', not ensemble"):
        read_model_dir(path, "ensemble")
    (path / "semiparam.json").write_text("[1, 2]")
    with pytest.raises(ModelFileError, match="semiparam.json: expected a JSON object"):
        read_model_dir(path, "table")
    (path / "semiparam.json").write_text('{"format_version": ')
    with pytest.raises(ModelFileError, match="semiparam.json: not valid JSON"):
        read_model_dir(path, "table")


@pytest.mark.parametrize(
    ("meta_file", "meta", "kind"),
    [
        ("semiparam.json", {"model_name": "npt"}, "table"),
        ("semiparam.json", {"layout": "ensemble-1", "n_members": 2}, "ensemble"),
        ("semiparam.json", {"layout": "prior-fitted-1"}, "prior-fitted"),
        ("neural_process.json", {"model": "CIPNP"}, "neural-process"),
        ("imputer.json", {"params": {}}, "genotype-imputer"),
    ],
)
def test_format_1_is_upgraded(tmp_path: Path, meta_file: str, meta: dict[str, Any], kind: str) -> None:
    """Each kind as the code before this format wrote it (the layout in ``semiparam.json``, or
    the metadata file's name; no checksums but a single table model's)."""
    (tmp_path / meta_file).write_text(json.dumps({"format_version": 1, **meta}))
    saved = read_model_dir(tmp_path, kind)
    assert saved.kind == kind and saved.version_read == 1
    assert saved.meta["format_version"] == FORMAT_VERSION and "layout" not in saved.meta
    (tmp_path / meta_file).write_text(json.dumps({"format_version": 1, "layout": "mystery-1"}))
    if meta_file == "semiparam.json":
        with pytest.raises(ModelFileError, match="unknown model layout 'mystery-1'"):
            read_model_dir(tmp_path, kind)


def test_the_upgrade_chain_runs_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A format 3 that renames a key: files of format 1 and 2 both reach it through the chain,
    one step at a time, and a second upgrade of one version is refused."""
    monkeypatch.setattr(model_dir, "FORMAT_VERSION", FORMAT_VERSION + 1)
    steps: list[int] = []

    def rename(meta: dict[str, Any], meta_file: str) -> dict[str, Any]:
        steps.append(meta["format_version"])
        out = dict(meta)
        out["seed"] = out.pop("random_seed")
        return out

    monkeypatch.setitem(UPGRADES, FORMAT_VERSION, rename)
    (tmp_path / "semiparam.json").write_text(json.dumps({"format_version": 1, "random_seed": 5}))
    saved = read_model_dir(tmp_path, "table")
    assert steps == [FORMAT_VERSION] and saved.meta["seed"] == 5 and saved.kind == "table"
    assert saved.meta["format_version"] == FORMAT_VERSION + 1
    current = {"format_version": FORMAT_VERSION, "kind": "table", "random_seed": 6, "sha256": {}}
    (tmp_path / "semiparam.json").write_text(json.dumps(current))
    assert read_model_dir(tmp_path, "table").meta["seed"] == 6 and steps == [FORMAT_VERSION] * 2
    with pytest.raises(ValueError, match="already has an upgrade"):
        model_dir.upgrade(FORMAT_VERSION)(rename)


@pytest.mark.parametrize("kind", ["table", "ensemble", "prior-fitted"])
def test_format_2_saved_the_executor_as_backend(tmp_path: Path, kind: str) -> None:
    """Format 2 stored the estimators' ``executor`` parameter under its old name ``backend``
    (issue 50: "backend" names the attention backends only); it reads back as ``executor``."""
    params = {"backend": "ray", "ray_address": None, "max_steps": 3}
    meta = {"format_version": 2, "kind": kind, "sha256": {}, "estimator": {"class": "X", "params": params}}
    (tmp_path / "semiparam.json").write_text(json.dumps(meta))
    saved = read_model_dir(tmp_path, kind)
    assert saved.version_read == 2
    now = {"executor": "ray", "ray_address": None, "max_steps": 3}
    assert saved.meta["estimator"] == {"class": "X", "params": now}
    member = {"format_version": 2, "kind": "table", "sha256": {}, "estimator": {}}  # an ensemble's member
    (tmp_path / "semiparam.json").write_text(json.dumps(member))
    assert read_model_dir(tmp_path, "table").meta["estimator"] == {}


# -- the loaders of each kind read format 1 through the chain -----------------------------------------


def _as_format_1(path: Path) -> None:
    """Rewrite the metadata of a saved table model (and its members) as format 1 spelt it."""
    for meta_file in path.rglob("semiparam.json"):
        meta = json.loads(meta_file.read_text())
        kind = meta.pop("kind")
        del meta["library_version"]
        if kind != "table":
            meta = {"layout": f"{kind}-1", **meta}
        if kind == "ensemble":
            del meta["sha256"]  # format 1 stored checksums only with a single model's files
        meta_file.write_text(json.dumps({**meta, "format_version": 1}))


@pytest.mark.parametrize("n_estimators", [1, 2])
def test_a_table_model_in_format_1_loads(tmp_path: Path, n_estimators: int) -> None:
    from semiparam import NPTClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = np.where(X[:, 0] > 0, "a", "b")
    options = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a fit this short is warned about
        clf = NPTClassifier(max_steps=3, model_options=options, n_estimators=n_estimators, verbose=False)
        path = clf.fit(X, y).save(tmp_path / "model")
    _as_format_1(path)
    np.testing.assert_array_equal(NPTClassifier.load(path).predict_proba(X), clf.predict_proba(X))


@pytest.mark.usefixtures("tiny_weights")
def test_a_prior_fitted_model_in_format_1_loads(tmp_path: Path) -> None:
    from semiparam import NPTClassifier

    from .test_pretrained import _table

    X, y = _table()
    clf = NPTClassifier(init="pretrained", n_estimators=2).fit(X[:40], y[:40])
    path = clf.save(tmp_path / "zero")
    _as_format_1(path)
    assert json.loads((path / "semiparam.json").read_text())["layout"] == "prior-fitted-1"
    np.testing.assert_array_equal(NPTClassifier.load(path).predict_proba(X[40:]), clf.predict_proba(X[40:]))
