"""Benchmark machinery: the papers' splits, metrics and ranks, tuned baselines, the runner's
resume logic, the report and the ``semiparam bench`` command. Synthetic data, so no shared data
directory is needed; the end-to-end run on real data is marked slow."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from semiparam.bench import paper
from semiparam.bench.baselines import BASELINES, FoldData
from semiparam.bench.models import model_unavailable_reason, table_model_names
from semiparam.bench.protocol import (
    average_ranks,
    cv_folds,
    fixed_split,
    holdout_split,
    mean_se,
    score_predictions,
    stratified_subset,
)
from semiparam.bench.report import write_report
from semiparam.bench.runner import DatasetPlan, SuitePlan, run_suite, write_results
from semiparam.cli.main import main
from semiparam.data.datasets import Dataset, DatasetInfo, Split, register_dataset


def _synthetic(
    task: str = "binary", n: int = 200, name: str = "synthetic", splits: dict | None = None
) -> Dataset:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n)})
    frame["c"] = pd.Categorical(rng.choice(["x", "y", "z"], n))
    signal = frame["a"] + (frame["c"] == "x") * 1.5
    if task == "regression":
        frame["target"] = signal + 0.1 * rng.normal(size=n)
    elif task == "binary":
        frame["target"] = np.where(signal > 0.4, "pos", "neg")
    else:
        frame["target"] = np.digitize(signal, [-0.5, 0.5, 1.5]).astype(np.int64)
    protocol = "fixed" if splits else "cv"
    info = DatasetInfo(name, "synthetic", task, n, n, protocol, None, (), "", lambda path, info: None)  # type: ignore[arg-type,return-value]
    return Dataset(name, frame, ("target",), task, ("c",), splits or {}, info, ())


# -- protocol -------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_cv_folds_follow_the_papers_fractions(task: str) -> None:
    ds = _synthetic(task, n=300)
    folds = cv_folds(ds)
    assert len(folds) == 10
    tests = np.concatenate([f.test for f in folds])
    assert sorted(tests.tolist()) == list(range(300))  # the test folds partition the rows
    for f in folds:
        assert (
            not set(f.train) & set(f.val) and not set(f.train) & set(f.test) and not set(f.val) & set(f.test)
        )
        assert len(f.train) + len(f.val) + len(f.test) == 300
        assert len(f.test) == 30 and len(f.val) in (60, 61)  # 0.7 / 0.2 / 0.1 (sklearn rounds up)
    again = cv_folds(ds)
    # seed 42: reproducible
    assert all(np.array_equal(a.val, b.val) for a, b in zip(folds, again, strict=True))


def test_cv_folds_are_stratified_for_classification() -> None:
    ds = _synthetic("binary", n=400)
    share = (ds.y == "pos").mean()
    for f in cv_folds(ds):
        assert abs((ds.y.iloc[f.test] == "pos").mean() - share) < 0.03
        assert abs((ds.y.iloc[f.val] == "pos").mean() - share) < 0.03


def test_holdout_and_fixed_splits() -> None:
    ds = _synthetic("regression", n=1000)
    fold = holdout_split(ds)
    assert fold.sizes() == {"train": 700, "val": 100, "test": 200}
    official = Split(train=np.arange(800), test=np.arange(800, 1000))
    fixed = fixed_split(_synthetic("regression", n=1000, splits={"official": official}))
    assert np.array_equal(fixed.test, np.arange(800, 1000))
    assert len(fixed.val) == 100 and set(fixed.train) | set(fixed.val) == set(range(800))


def test_stratified_subset_keeps_class_shares() -> None:
    strata = np.array(["a"] * 900 + ["b"] * 90 + ["c"] * 10)
    idx = np.arange(1000)
    sub = stratified_subset(idx, strata, 100, seed=0)
    assert len(sub) == 100 and len(set(sub)) == 100
    counts = pd.Series(strata[sub]).value_counts().to_dict()
    assert counts == {"a": 90, "b": 9, "c": 1}
    assert stratified_subset(idx, strata, None, seed=0) is idx
    with pytest.raises(ValueError, match="row cap"):
        stratified_subset(idx, strata, 0, seed=0)


def test_metrics_match_their_definitions() -> None:
    y = np.array([3.0, 1.0, 2.0])
    out = score_predictions("regression", y, np.array([2.0, 1.0, 2.0]))
    assert out["rmse"] == pytest.approx(math.sqrt(1 / 3)) and out["mse"] == pytest.approx(1 / 3)
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    out = score_predictions("binary", np.array(["n", "p", "p"]), proba, ["n", "p"])
    assert out["accuracy"] == pytest.approx(2 / 3)
    assert out["auroc"] == pytest.approx(1.0)
    assert out["nll"] == pytest.approx(-(math.log(0.9) + math.log(0.8) + math.log(0.4)) / 3)
    two_class = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    unseen = score_predictions("multiclass", np.array([0, 1, 2]), two_class, [0, 1])
    assert unseen["accuracy"] == pytest.approx(2 / 3) and unseen["nll"] > 10  # class 2: no mass
    with pytest.raises(ValueError, match="expected \\(3, 3\\)"):
        score_predictions("multiclass", np.array([0, 1, 2]), proba, [0, 1, 2])
    assert mean_se([1.0, 3.0]) == (2.0, 1.0) and mean_se([2.0]) == (2.0, None)


def test_average_ranks_reproduce_paper_table_1() -> None:
    """Paper Table 1 from its Tables 8, 10, 11, with the printed ties resolved as spec-npt 5.1 says."""
    eps = 1e-9
    nudges = {  # (metric, dataset, method): nudge that reproduces the paper's tie order
        ("auroc", "Income", "CatBoost"): eps,
        ("auroc", "Breast Cancer", "CatBoost"): eps,
        ("auroc", "Breast Cancer", "Random Forest"): eps,
        ("accuracy", "Forest Cover", "Gradient Boosting"): eps,
        ("rmse", "Boston", "CatBoost"): -eps,
        ("rmse", "Yacht", "Random Forest"): -eps,
    }
    groups = {
        "auroc": (paper.AUROC, True),
        "accuracy": ({k: paper.ACCURACY[k] for k in ("Poker Hand", "Forest Cover")}, True),
        "rmse": (paper.RMSE, False),
    }
    for metric, (table, higher) in groups.items():
        values = {
            d: {m: (e[0] + nudges.get((metric, d, m), 0.0) if e else None) for m, e in row.items()}
            for d, row in table.items()
        }
        ranks = average_ranks(values, higher_is_better=higher, methods=paper.METHODS)
        for method, (mean, se) in paper.RANKS[metric].items():
            assert round(ranks[method][0], 2) == mean, (metric, method)
            assert round(ranks[method][1], 2) == se, (metric, method)


# -- baselines ------------------------------------------------------------------------------------


def _fold_data(task: str) -> FoldData:
    ds = _synthetic(task, n=240)
    f = cv_folds(ds)[0]
    X, y = ds.X, ds.y
    part = lambda idx: (X.iloc[idx].reset_index(drop=True), y.iloc[idx].reset_index(drop=True))  # noqa: E731
    (Xtr, ytr), (Xva, yva), (Xte, _) = part(f.train), part(f.val), part(f.test)
    return FoldData(Xtr, ytr, Xva, yva, Xte, task, ("c",))


@pytest.mark.parametrize(
    "key", ["random_forest", "knn", "mlp", "hist_gradient_boosting", "gradient_boosting"]
)
@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_sklearn_baselines_tune_on_validation(key: str, task: str) -> None:
    data = _fold_data(task)
    out = BASELINES[key].run(data, n_configs=2, max_estimators=60, small=True, seed=0)
    n_test = len(data.X_test)
    if task == "regression":
        assert out.prediction.shape == (n_test,)
    else:
        assert out.prediction.shape == (n_test, len(out.classes))
        np.testing.assert_allclose(out.prediction.sum(axis=1), 1.0, atol=1e-6)
    assert out.details["n_configs"] == 2 and len(out.details["search"]) == 2
    metric = "rmse" if task == "regression" else "auroc" if task == "binary" else "accuracy"
    best = out.details[f"best_val_{metric}"]
    scores = [s[f"val_{metric}"] for s in out.details["search"]]
    assert best == (min(scores) if metric == "rmse" else max(scores))


@pytest.mark.parametrize("package", ["xgboost", "lightgbm", "catboost"])
def test_optional_boosting_baselines(package: str) -> None:
    pytest.importorskip(package)
    data = _fold_data("binary")
    out = BASELINES[package].run(data, n_configs=1, max_estimators=50, small=True, seed=0)
    assert out.prediction.shape == (len(data.X_test), 2)


def test_missing_extra_is_reported_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "xgboost" else real(name, *a)
    )
    reason = model_unavailable_reason("xgboost")
    assert reason is not None and "semiparam[baselines]" in reason
    with pytest.raises(ImportError, match="semiparam\\[baselines\\]"):
        BASELINES["xgboost"].run(_fold_data("binary"), n_configs=1, max_estimators=50, small=True, seed=0)


def test_table_models_are_found_by_name() -> None:
    assert "npt" in table_model_names()
    assert model_unavailable_reason("npt") is None
    assert "not exported" in (model_unavailable_reason("nosuchmodel") or "")


# -- runner, report, command line ------------------------------------------------------------------

TINY = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2, "dropout": 0.0}


@pytest.fixture
def tiny_plan() -> SuitePlan:
    ds = _synthetic("binary", n=160, name="tiny_bench")
    register_dataset(
        DatasetInfo("tiny_bench", "tiny synthetic", "binary", 160, 160, "cv", None, (), "", lambda p, i: ds)
    )
    return SuitePlan(
        name="tiny",
        datasets=(
            DatasetPlan(
                "tiny_bench",
                folds=2,
                n_configs=1,
                max_estimators=50,
                table={
                    "npt": {
                        "max_steps": 4,
                        "n_estimators": 2,
                        "model_options": TINY,
                        "train_options": {"eval_every": 2},
                    }
                },
            ),
        ),
        models=("npt", "knn"),
    )


def test_run_suite_writes_resumes_and_reports(tiny_plan: SuitePlan, tmp_path: Path) -> None:
    logs: list[str] = []
    results = run_suite(tiny_plan, tmp_path / "tmp", log=logs.append)
    ok = [r for r in results["records"] if r["status"] == "ok"]
    assert len(ok) == 4, [r.get("error") for r in results["records"]]
    npt = results["summary"]["tiny_bench"]["npt"]
    assert npt["folds"] == 2 and npt["steps"] == 4 and npt["seconds_per_step"] > 0
    # the summary is the mean and standard error of the per-fold scores
    fold_auroc = [r["metrics"]["auroc"] for r in ok if r["model"] == "npt"]
    assert len(fold_auroc) == 2
    assert npt["auroc"]["mean"] == pytest.approx(np.mean(fold_auroc))
    assert npt["auroc"]["se"] == pytest.approx(np.std(fold_auroc, ddof=1) / np.sqrt(2))
    assert results["summary"]["tiny_bench"]["knn"]["peak_rss_mb"] > 0
    assert results["datasets"]["tiny_bench"]["sizes"] == {"train": 112, "val": 32, "test": 16}

    logs.clear()  # a second run reuses every result
    again = run_suite(tiny_plan, tmp_path / "tmp", log=logs.append)
    assert not any("fold 0" in line for line in logs)
    assert again["summary"]["tiny_bench"]["npt"]["auroc"] == npt["auroc"]

    json_path = write_results(again, tmp_path / "tiny.json")
    assert json.loads(json_path.read_text())["summary"]["tiny_bench"]["knn"]["folds"] == 2
    report = write_report(
        again, tmp_path / "tiny.md", title="tiny", command="semiparam bench tiny", with_plots=False
    )
    text = report.read_text()
    for section in (
        "## Machine and run",
        "## Reductions from the paper's protocol",
        "## Test metrics",
        "| NPT |",
    ):
        assert section in text
    # one row per NPT fold with the steps each member ran (at most max_steps=4) and its best step;
    # the k-NN baseline trains no network and has none
    stopped = text.split("## When each neural fit stopped")[1].split("\n## ")[0]
    npt_rows = [line.split(" | ") for line in stopped.splitlines() if line.startswith("| tiny_bench | NPT |")]
    assert sorted(row[2] for row in npt_rows) == ["0", "1"]
    for row in npt_rows:
        steps = [int(x) for x in row[3].split(", ")]
        best = [int(x) for x in row[4].split(", ")]
        # n_estimators of the plan reaches the estimator: two members per fold
        assert len(steps) == len(best) == 2 and all(0 <= b < s <= 4 for b, s in zip(best, steps, strict=True))
    assert "k-NN" not in stopped


def test_run_suite_can_compute_one_model_at_a_time(tiny_plan: SuitePlan, tmp_path: Path) -> None:
    first = run_suite(tiny_plan, tmp_path, only_models=["knn"], log=lambda s: None)
    assert set(first["summary"]["tiny_bench"]) == {"knn"}
    collected = run_suite(tiny_plan, tmp_path, compute=False, log=lambda s: None)
    assert set(collected["summary"]["tiny_bench"]) == {"knn"}
    # a rebuilt report names the machine the records were made on, not the rebuild's load or time,
    # so rebuilding it again writes the same file
    assert collected["machine"] == first["records"][0]["machine"]
    assert "load_average_at_start" not in collected["machine"] and collected["wall_seconds"] is None
    again = run_suite(tiny_plan, tmp_path, compute=False, log=lambda s: None)
    a, b = write_results(collected, tmp_path / "a.json"), write_results(again, tmp_path / "b.json")
    assert a.read_text() == b.read_text()
    with pytest.raises(ValueError, match="not in plan"):
        run_suite(tiny_plan, tmp_path, only_models=["xgb"], log=lambda s: None)


def test_large_tables_plan_and_the_spin_papers_numbers() -> None:
    from semiparam.bench.report import paper_entry, paper_method
    from semiparam.bench.suites import LARGE_TRAIN_ROWS, get_plan

    plan = get_plan("uci_large")
    assert [d.name for d in plan.datasets] == ["adult", "kick", "covertype", "higgs", "protein"]
    assert all(d.folds == 1 and d.max_train == LARGE_TRAIN_ROWS for d in plan.datasets)
    assert plan.table_defaults.n_estimators == 1 and not plan.table_defaults.transductive
    assert {"npt", "spin", "catboost", "hist_gradient_boosting"} <= set(plan.models)
    # SPIN's published numbers sit beside SPIN, the NPT paper's beside NPT and the baselines
    assert paper_entry("accuracy", "Kick", "spin") == (90.06, None)
    assert paper_entry("rmse", "Protein", "spin") == (3.31, None)
    assert paper_entry("accuracy", "Kick", "npt") == paper.ACCURACY["Kick"]["NPT"]
    assert paper_entry("auroc", "Kick", "spin") is None  # the SPIN paper reports accuracy only
    assert paper_entry("accuracy", None, "spin") is None
    # the rank tables compare the methods of the NPT paper only
    assert paper_method("spin") is None and paper_method("npt") == "NPT"


def test_bench_command_lists_plans(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert "smoke" in out and "uci" in out and "boston" in out
    assert main(["bench", "no_such_plan"]) == 2
    assert "unknown benchmark plan" in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_plan_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from semiparam.datasets import DatasetError, data_dir

    try:
        data_dir()
    except DatasetError:
        pytest.skip("shared data directory not available")
    assert main(["bench", "smoke", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "smoke.md").read_text()
    assert "Yacht" in text and (tmp_path / "smoke_metrics.png").exists()


def test_expected_calibration_error():
    from semiparam.bench.protocol import expected_calibration_error, score_predictions

    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.5, 1.0, 200_000)
    hits = rng.uniform(size=confidence.size) < confidence  # right as often as it says
    assert expected_calibration_error(confidence, hits) < 0.01
    # always 90% sure, right half the time: off by 0.4 in its one bin
    assert expected_calibration_error(np.full(10, 0.9), np.arange(10) % 2 == 0) == pytest.approx(0.4)
    # two bins: 0.6 sure and always right (0.4 off), 1.0 sure and always right (0 off), equal sizes
    assert expected_calibration_error(np.array([0.6, 0.6, 1.0, 1.0]), np.ones(4, bool)) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="same"):
        expected_calibration_error(np.ones(3), np.ones(2, bool))
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    scores = score_predictions("binary", np.array(["a", "b", "b"]), proba, classes=["a", "b"])
    assert scores["ece"] == pytest.approx((0.1 + 0.2 + 0.6) / 3)


def test_code_hash_follows_the_table_models_imports(tmp_path: Path) -> None:
    import shutil

    from semiparam._provenance import _package_root
    from semiparam.bench.measure import PRESENTATION_ONLY, code_hash, import_closure

    root = tmp_path / "semiparam"
    shutil.copytree(_package_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    closure = {p.relative_to(root).as_posix() for p in import_closure(root, ("semiparam",))}
    table_files = {"__init__.py", "models/npt.py", "models/spin.py", "nn/attention.py", "training/trainer.py"}
    assert table_files <= closure
    assert not any(p.startswith(("genomics/", "cli/", "bench/")) for p in closure)
    assert "estimators/neural_process.py" not in closure
    # a package's __init__ runs on import, but what semiparam/__init__ imports computes nothing here
    search = {p.relative_to(root).as_posix() for p in import_closure(root, ("semiparam.bench.baselines",))}
    assert {"__init__.py", "bench/baselines.py", "bench/protocol.py"} <= search
    assert "models/npt.py" not in search
    table, whole = code_hash(root), code_hash(root, modules=None)

    def edit(rel: str, text: str) -> None:
        path = root / rel
        path.write_text(path.read_text() + text)

    edit("genomics/metrics.py", "\n\nGENOMICS_ONLY = 1\n")
    assert code_hash(root) == table and code_hash(root, modules=None) != whole
    # the image classifiers are imported by semiparam but run by no table fit
    assert {"estimators/image.py", "data/images.py", "nn/patches.py"} <= closure
    edit("estimators/image.py", "\n\nIMAGES_ONLY = 1\n")
    assert code_hash(root) == table
    assert code_hash(root, exclude=PRESENTATION_ONLY) != code_hash(_package_root(), exclude=PRESENTATION_ONLY)
    edit("models/npt.py", '\n\ndef _documented():\n    """Only a docstring."""\n')
    documented = code_hash(root)
    assert documented != table  # a new function is code
    edit("models/npt.py", "\n# a comment\n")
    assert code_hash(root) == documented  # comments are not
    edit("nn/attention.py", "\n\nSCALE = 2\n")
    assert code_hash(root) != documented
    with pytest.raises(ValueError, match="no semiparam module"):
        import_closure(root, ("semiparam.nowhere",))
