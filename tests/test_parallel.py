"""Independent fits as Ray tasks (semiparam.parallel, ``executor="ray"``): ensemble members,
per-window genotype models and benchmark cells give what the serial path gives, with the same
seeds. ``backend``, the executor's old name, still works for a release, with a FutureWarning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.base import clone

from semiparam import NPTClassifier, SPINImageClassifier, TableClassifier, TablePredictor, TableRegressor
from semiparam.genomics import GenotypeImputer, simulate_panel, split_samples
from semiparam.parallel import EXECUTORS, check_executor, map_tasks

REPO = Path(__file__).resolve().parents[1]


def _square(x: int) -> int:
    return x * x


def _fail(x: int) -> int:
    raise ValueError(f"bad item {x}")


def test_serial_map_keeps_order_and_reports_each_result() -> None:
    seen: list[tuple[int, int]] = []
    assert map_tasks(_square, [3, 1, 2], on_result=lambda i, r: seen.append((i, r))) == [9, 1, 4]
    assert seen == [(0, 9), (1, 1), (2, 4)]


def test_bad_executor_or_address_is_refused() -> None:
    with pytest.raises(ValueError, match="executor must be one of"):
        map_tasks(_square, [1], executor="dask")
    with pytest.raises(ValueError, match="set executor='ray'"):
        check_executor("serial", "auto")
    with pytest.raises(ValueError, match="executor must be one of"):
        NPTClassifier(executor="threads", max_steps=1).fit(np.zeros((4, 2)), [0, 1, 0, 1])


# -- backend=, the old name of executor -------------------------------------------------------------


def test_map_tasks_and_the_old_module_names_take_backend_with_a_warning() -> None:
    import semiparam.parallel as parallel

    with pytest.warns(FutureWarning, match="use executor='serial'"):
        assert map_tasks(_square, [2, 3], backend="serial") == [4, 9]
    with (
        pytest.warns(FutureWarning, match="use executor='dask'"),
        pytest.raises(ValueError, match="executor must"),
    ):
        map_tasks(_square, [1], backend="dask")
    with pytest.raises(ValueError, match="disagree"), pytest.warns(FutureWarning):
        map_tasks(_square, [1], executor="ray", backend="serial")
    with pytest.warns(FutureWarning, match="it is now EXECUTORS"):
        assert parallel.BACKENDS == EXECUTORS
    with pytest.warns(FutureWarning, match="it is now check_executor"):
        assert parallel.check_backend is check_executor
    with pytest.raises(AttributeError, match="no_such"):
        parallel.no_such  # noqa: B018


ESTIMATORS = [NPTClassifier, TableClassifier, TableRegressor, TablePredictor, SPINImageClassifier]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_estimators_store_executor_and_the_deprecated_backend_as_given(cls) -> None:
    """scikit-learn's contract: every ``__init__`` argument stored unchanged under its own name,
    so ``get_params`` / ``clone`` round-trip both spellings; nothing is said until fit."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = cls(backend="ray", ray_address="auto")
        params = est.get_params()
        assert params["backend"] == "ray" and params["executor"] == "serial"
        assert clone(est).get_params() == params
        assert cls(executor="ray").get_params()["executor"] == "ray"
        assert cls().get_params()["backend"] is None


def test_backend_still_chooses_the_executor_with_a_warning(tmp_path: Path, monkeypatch) -> None:
    from semiparam.estimators._ensemble import EnsembleLearner

    X, y = np.random.default_rng(0).normal(size=(30, 2)), np.arange(30) % 2
    with pytest.warns(FutureWarning, match="backend='serial' is deprecated.*use executor='serial'"):
        est = NPTClassifier(backend="serial", n_estimators=1, max_steps=2, verbose=False).fit(X, y)
    assert est.learner_.executor == "serial"
    with pytest.warns(FutureWarning, match="executor="):
        expected = est.predict(X)
    # the executor the learner is given follows backend (fit on Ray is stopped before it starts)
    chosen = []
    monkeypatch.setattr(EnsembleLearner, "fit", lambda self, *a, **k: chosen.append(self.executor) or 1 / 0)
    with pytest.warns(FutureWarning), pytest.raises(ZeroDivisionError):
        NPTClassifier(backend="ray", max_steps=2).fit(X, y)
    with pytest.raises(ZeroDivisionError):
        NPTClassifier(executor="ray", max_steps=2).fit(X, y)
    assert chosen == ["ray", "ray"]
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="disagree"):
        NPTClassifier(executor="ray", backend="serial", max_steps=2).fit(X, y)
    # saved under its name now: a model fitted with backend= loads without a word
    est.save(tmp_path / "model")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = NPTClassifier.load(tmp_path / "model")
    assert loaded.get_params()["executor"] == "serial" and loaded.get_params()["backend"] is None
    np.testing.assert_array_equal(loaded.predict(X), expected)


def test_genotype_imputer_takes_backend_with_a_warning() -> None:
    panel = simulate_panel(12, 30, seed=3, min_maf=0.05)
    typed = np.zeros(panel.n_sites, dtype=bool)
    typed[::3] = True
    imp = GenotypeImputer("copy", backend="serial")
    assert imp.executor == "serial" and imp.backend == "serial"
    with pytest.warns(FutureWarning, match="use executor='serial'"):
        imp.fit(panel, typed)
    with pytest.raises(ValueError, match="executor must be one of"):
        GenotypeImputer("copy", executor="threads").fit(panel, typed)


def test_ray_map_returns_in_item_order_and_raises_task_errors(ray_cluster) -> None:
    seen: dict[int, int] = {}
    out = map_tasks(_square, list(range(5)), executor="ray", on_result=lambda i, r: seen.__setitem__(i, r))
    assert out == [0, 1, 4, 9, 16]
    assert seen == {i: i * i for i in range(5)}
    with pytest.raises(Exception, match="bad item 2"):
        map_tasks(_fail, [2], executor="ray")


def _weights(learner) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in learner.module.state_dict().items()}


def _assert_same_learners(a, b) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name
    assert a.history.best_step == b.history.best_step
    assert a.history.stop_reason == b.history.stop_reason


def _table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(list("xyz"), n)})


def test_ensemble_members_on_ray_equal_the_serial_fit(ray_cluster) -> None:
    rng = np.random.default_rng(0)
    X = pd.DataFrame(
        {"a": rng.normal(size=120), "b": rng.normal(size=120), "c": rng.choice(list("xyz"), 120)}
    )
    y = (X["a"] + 0.5 * X["b"] > 0).astype(int)
    params = dict(n_estimators=2, max_steps=30, random_state=0, verbose=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # the serial fit trains its members at once, one thread each
        serial = NPTClassifier(**params).fit(X, y)
        assert serial.learner_.concurrent_workers() == 2
        ray = NPTClassifier(**params, executor="ray").fit(X, y)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(serial.learner_.members, ray.learner_.members, strict=True):
        _assert_same_learners(a, b)
    np.testing.assert_allclose(ray.predict_proba(X), serial.predict_proba(X), rtol=0, atol=1e-6)
    assert ray.history_.n_members == 2


@pytest.mark.parametrize("model", ["npt", "spin"])
def test_sharded_prediction_on_ray_equals_one_process(ray_cluster, model: str, monkeypatch) -> None:
    from semiparam import NPTRegressor, SPINRegressor
    from semiparam.estimators._ensemble import EnsembleLearner

    rng = np.random.default_rng(1)
    X = _table(rng, 90)
    y = X["a"] * 2 + rng.normal(scale=0.1, size=90)
    cls = NPTRegressor if model == "npt" else SPINRegressor
    est = cls(n_estimators=2, max_steps=20, random_state=0, verbose=False, loss="gaussian").fit(X, y)
    queries = _table(np.random.default_rng(2), 250)
    mean, std = est.predict(queries, return_std=True)
    est.set_params(executor="ray")  # after fit: predictions follow it
    monkeypatch.setattr(EnsembleLearner, "predict_shard_rows", 60)  # 5 shards of the 250 rows
    calls = []
    real = EnsembleLearner._predict_sharded
    monkeypatch.setattr(
        EnsembleLearner,
        "_predict_sharded",
        lambda self, q, c: calls.append(len(q.values)) or real(self, q, c),
    )
    mean_ray, std_ray = est.predict(queries, return_std=True)
    assert calls == [250]
    np.testing.assert_allclose(mean_ray, mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(std_ray, std, rtol=1e-5, atol=1e-5)


def test_genotype_windows_on_ray_equal_the_serial_fit(ray_cluster) -> None:
    panel = simulate_panel(40, 80, seed=3, min_maf=0.03)
    ref_names, test_names = split_samples(panel.samples, 8, seed=0)
    ref, test = panel.subset_samples(ref_names), panel.subset_samples(test_names)
    typed = np.zeros(panel.n_sites, dtype=bool)
    typed[::4] = True
    params = dict(
        n_inputs=10,
        window_targets=20,
        overlap=5,
        kmer=5,
        max_steps=5,
        model_options={"d_embedding": 4, "n_heads": 1},
        random_state=1,
    )
    serial = GenotypeImputer("spin", **params).fit(ref, typed)
    ray = GenotypeImputer("spin", executor="ray", **params).fit(ref, typed)
    assert len(serial.learners_) == len(ray.learners_) > 1
    for a, b in zip(serial.learners_, ray.learners_, strict=True):
        _assert_same_learners(a, b)
    query = np.where(typed[:, None], test.haplotypes.astype(np.int8), -1)
    np.testing.assert_allclose(
        ray.impute_haplotypes(query), serial.impute_haplotypes(query), rtol=0, atol=1e-6
    )


@pytest.mark.skipif(not (REPO / "benchmarks" / "tabular_defaults.py").exists(), reason="no benchmarks/")
def test_benchmark_cells_on_ray_write_the_serial_records(ray_cluster, tmp_path: Path) -> None:
    data = os.environ.get("SEMIPARAM_DATA_DIR") or str(REPO.parent / "shared" / "data")
    if not Path(data).is_dir():
        pytest.skip("the development-suite tables are not on this machine")
    scores = {}
    for executor in ("serial", "ray"):
        out = tmp_path / executor
        cmd = [
            sys.executable,
            str(REPO / "benchmarks" / "tabular_defaults.py"),
            "--tables",
            "yacht,boston",  # tables of the shared data: the R ones need the devsuite extra
            "--models",
            "hgb,rf",
            "--out",
            str(out),
            "--executor",
            executor,
        ]
        if executor == "ray":  # joins this process's cluster instead of starting a second one
            cmd += ["--ray-address", ray_cluster.get_runtime_context().gcs_address]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600, cwd=REPO)
        records = [json.loads(line) for line in (out / "tabular_defaults.jsonl").read_text().splitlines()]
        assert all(r["ok"] for r in records) and len(records) == 4
        cells = {(r["settings"]["table"], r["settings"]["model"]): r["score"] for r in records}
        scores[executor] = pd.Series(cells).sort_index()
        assert (out / "tabular_defaults.md").exists()
    pd.testing.assert_series_equal(scores["serial"], scores["ray"])


def test_cli_fit_with_ray_members_predicts_as_the_serial_run(
    ray_cluster, tmp_path: Path, mixed_frame
) -> None:
    from semiparam.cli.main import main

    csv = tmp_path / "table.csv"
    mixed_frame.to_csv(csv, index=False)
    sets = [
        "--set",
        "model.d_embedding=8",
        "--set",
        "model.n_heads=2",
        "--set",
        "train.max_steps=10",
        "--quiet",
    ]
    preds = {}
    for executor in ("serial", "ray"):
        run = tmp_path / executor
        args = ["fit", str(csv), "--target", "target", "--out", str(run), "--n-estimators", "2", *sets]
        assert main([*args, "--executor", executor]) == 0
        out = tmp_path / f"{executor}.csv"
        assert main(["predict", str(run), str(csv), "--out", str(out), "--quiet"]) == 0
        preds[executor] = pd.read_csv(out)
    pd.testing.assert_frame_equal(preds["serial"], preds["ray"], check_exact=False, atol=1e-6)
    refused = ["fit", str(csv), "--target", "target", "--out", str(tmp_path / "no"), "--ray-address", "auto"]
    assert main([*refused, *sets]) == 2  # an address without --executor ray
