"""What a new user meets in the first hour (issue 48): their columns read as they mean them,
no silent bad input, a command line that answers every mistake in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from semiparam import DataValidationError, ModelFileError, NPTClassifier, NPTRegressor, TablePredictor
from semiparam.cli.main import main

from .conftest import TINY_MODEL

FAST = {"max_steps": 3, "model_options": TINY_MODEL, "n_estimators": 1, "verbose": False}
ROOT = Path(__file__).resolve().parents[1]


def labelled(n: int = 60, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(["x", "y"], n)})
    frame["label"] = (frame["a"] + frame["b"] > 0).astype(int)
    return frame


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "semiparam", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


# -- 1. integer class labels -----------------------------------------------------------------------


def test_integer_labels_are_classes_for_the_generic_predictor() -> None:
    frame = labelled()
    model = TablePredictor(targets=["label"], random_state=0, **FAST).fit(frame)
    spec = next(c for c in model.learner_.schema.columns if c.name == "label")
    assert spec.kind == "categorical" and spec.categories == (0, 1)
    out = model.predict(frame.head(5))
    assert set(out["label"]) <= {0, 1}
    assert {"label_proba_0", "label_proba_1"} <= set(out.columns)


def test_continuous_features_keeps_an_integer_target_a_number() -> None:
    frame = labelled()
    model = TablePredictor(targets=["label"], continuous_features=["label"], random_state=0, **FAST)
    model.fit(frame)
    spec = next(c for c in model.learner_.schema.columns if c.name == "label")
    assert spec.kind == "continuous"
    assert "label_std" not in model.predict(frame.head(3))


def test_many_integer_values_are_a_number() -> None:
    frame = labelled(n=80)
    frame["label"] = np.arange(80) % 40
    model = TablePredictor(targets=["label"], random_state=0, **FAST).fit(frame)
    assert next(c for c in model.learner_.schema.columns if c.name == "label").kind == "continuous"


def test_cli_categorical_accepts_the_target_and_fit_says_how_targets_were_read(tmp_path: Path) -> None:
    labelled().to_csv(tmp_path / "t.csv", index=False)
    code = main(
        [
            "fit", str(tmp_path / "t.csv"), "--target", "label", "--categorical", "label,c",
            "--set", "train.max_steps=2", "--n-estimators", "1", "--out", str(tmp_path / "run"),
            "--quiet", "--device", "cpu",
        ]
    )  # fmt: skip
    assert code == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    kinds = {c["name"]: c["kind"] for c in config["schema"]["columns"]}
    assert kinds["label"] == "categorical"


# -- 2. columns matched by name -------------------------------------------------------------------


def test_predict_matches_columns_by_name_and_ignores_extra_ones_with_a_warning() -> None:
    frame = labelled()
    X, y = frame.drop(columns="label"), frame["label"]
    clf = NPTClassifier(random_state=0, **FAST).fit(X, y)
    expected = clf.predict_proba(X)
    shuffled = X[["c", "b", "a"]].copy()
    shuffled.insert(0, "id", np.arange(len(X)))
    with pytest.warns(UserWarning, match=r"ignoring column\(s\) \['id'\]"):
        np.testing.assert_array_equal(clf.predict_proba(shuffled), expected)
    with pytest.raises(DataValidationError, match=r"lacks column\(s\) \['b'\]"):
        clf.predict(X.drop(columns="b"))


def test_cli_predict_on_a_file_laid_out_differently(tmp_path: Path) -> None:
    frame = labelled()
    frame.to_csv(tmp_path / "t.csv", index=False)
    other = frame[["c", "label", "b", "a"]].copy()
    other.insert(0, "id", np.arange(len(frame)))
    other.to_csv(tmp_path / "t2.csv", index=False)
    run = tmp_path / "run"
    args = ["--set", "train.max_steps=2", "--n-estimators", "1", "--quiet", "--device", "cpu"]
    assert main(["fit", str(tmp_path / "t.csv"), "--target", "label", "--out", str(run), *args]) == 0
    assert main(["predict", str(run), str(tmp_path / "t.csv"), "--out", str(tmp_path / "p1.csv")]) == 0
    with pytest.warns(UserWarning, match="ignoring"):
        assert main(["predict", str(run), str(tmp_path / "t2.csv"), "--out", str(tmp_path / "p2.csv")]) == 0
    p1, p2 = pd.read_csv(tmp_path / "p1.csv"), pd.read_csv(tmp_path / "p2.csv")
    pd.testing.assert_frame_equal(p1, p2)


# -- 3. silent bad input --------------------------------------------------------------------------


def test_a_stray_string_in_a_numeric_column_is_named() -> None:
    frame = labelled()
    frame["a"] = frame["a"].astype(object)
    frame.loc[7, "a"] = "n/a?"
    with pytest.raises(
        DataValidationError, match=r"column 'a' holds numbers except for 1 value\(s\) \['n/a\?'\]"
    ):
        NPTClassifier(**FAST).fit(frame.drop(columns="label"), frame["label"])
    # marking it categorical is the user's explicit choice, and is honoured
    NPTClassifier(categorical_features=["a"], **FAST).fit(frame.drop(columns="label"), frame["label"])


def test_degenerate_tables_are_refused() -> None:
    frame = labelled()
    with pytest.raises(DataValidationError, match="at least 2 labelled rows; the table has 1 sample"):
        NPTRegressor(**FAST).fit(frame[["a", "b"]].head(1), frame["a"].head(1))
    with pytest.raises(DataValidationError, match="single class"):
        NPTClassifier(**FAST).fit(frame[["a", "b"]], np.zeros(len(frame), dtype=int))
    with pytest.raises(DataValidationError, match="single class"):
        TablePredictor(targets=["c"], **FAST).fit(frame.assign(c="x"))


def test_a_changed_weights_file_fails_its_integrity_check(tmp_path: Path) -> None:
    frame = labelled()
    clf = NPTClassifier(random_state=0, **FAST).fit(frame.drop(columns="label"), frame["label"])
    path = clf.save(tmp_path / "model")
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = b"\xff" * 8  # the same length, the last float overwritten with NaN bits
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="model.safetensors: fails its integrity check"):
        NPTClassifier.load(path)


def test_non_finite_predictions_are_refused() -> None:
    frame = labelled()
    X = frame.drop(columns="label")
    clf = NPTClassifier(random_state=0, **FAST).fit(X, frame["label"])
    module = clf.learner_.members[0].module
    for p in module.parameters():
        p.data.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="not finite"):
        clf.predict_proba(X.head(3))


# -- 4. the command line --------------------------------------------------------------------------


def test_cli_user_errors_are_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labelled().to_csv(tmp_path / "t.csv", index=False)
    base = ["fit", str(tmp_path / "t.csv"), "--target", "label", "--quiet", "--n-estimators", "1"]
    for extra in (["--device", "gpu"], ["--set", "train.learning_rate=1e30", "--set", "train.max_steps=5"]):
        assert main([*base, *extra, "--out", str(tmp_path / "r"), "--force"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("semiparam: error:") and "\n" not in err and "Traceback" not in err


def test_explain_and_analyze_refuse_an_existing_out_without_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "features.csv").write_text("kept")
    assert main(["explain", str(tmp_path / "no-run"), str(tmp_path / "t.csv"), "--out", str(out)]) == 2
    (out / "corruption.md").write_text("kept")
    assert (
        main(["analyze", "corruption", str(tmp_path / "r"), str(tmp_path / "t.csv"), "--out", str(out)]) == 2
    )
    assert (out / "features.csv").read_text() == "kept" and (out / "corruption.md").read_text() == "kept"


def test_python_m_semiparam_version_and_help_without_torch() -> None:
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.startswith("semiparam ")
    code = "import sys, semiparam.cli.main as m; m.build_parser(); print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert shown.stdout.strip() == "False", shown.stderr
    help_text = run_cli("tune", "--help").stdout
    assert "80%" in help_text and "80%%" not in help_text and "--quiet" in help_text


def test_predict_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    frame = labelled(n=400)
    frame.to_csv(tmp_path / "t.csv", index=False)
    run = tmp_path / "run"
    args = ["--set", "train.max_steps=2", "--n-estimators", "1", "--quiet", "--device", "cpu"]
    assert main(["fit", str(tmp_path / "t.csv"), "--target", "label", "--out", str(run), *args]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = f"{sys.executable} -m semiparam predict {run} {tmp_path / 't.csv'} | head -1"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env)
    assert done.stdout.startswith("label"), done.stderr
    assert done.stderr == "", done.stderr


# -- 5. settings that would mislead ---------------------------------------------------------------


def test_max_steps_far_below_min_steps_warns() -> None:
    frame = labelled()
    with pytest.warns(UserWarning, match="below min_steps=50"):
        NPTClassifier(**FAST).fit(frame[["a", "b"]], frame["label"])


def test_a_fixed_schedule_projected_past_the_threshold_warns() -> None:
    from semiparam.training.engine import CostWarning

    class Clock:
        config = type("C", (), {"lr_schedule": "flat_cosine", "time_budget": None, "max_steps": 10**6})()
        start_step = 0
        model = __import__("torch").nn.Linear(1, 1)

    warn = CostWarning(threshold=1.0, timed_steps=1)
    warn.on_step_end(Clock(), 0, {})
    import time

    time.sleep(0.01)
    with pytest.warns(UserWarning, match=r"1000000 steps will take about .* more on cpu"):
        warn.on_step_end(Clock(), 1, {})


# -- 7. what users of scikit-learn, CatBoost and TabPFN expect ----------------------------------


def test_eval_set_replaces_the_internal_split() -> None:
    frame = labelled(n=80)
    X, y = frame.drop(columns="label"), frame["label"]
    X_val, y_val = X.iloc[60:], y.iloc[60:]
    clf = NPTClassifier(random_state=0, **{**FAST, "max_steps": 20}, train_options={"eval_every": 5})
    clf.fit(X.iloc[:60], y.iloc[:60], eval_set=(X_val, y_val))
    member = clf.learner_.members[0]
    assert member.eval_rows is not None and len(member.eval_rows.values) == 20
    assert clf.history_.members[0].eval_steps  # it validated on them
    with pytest.raises(DataValidationError, match="pair"):
        NPTClassifier(**FAST).fit(X, y, eval_set=X_val)
    with pytest.raises(DataValidationError, match="eval_set's labels .* not seen"):
        NPTClassifier(**FAST).fit(X, y, eval_set=(X_val, y_val + 5))
    # matched as set_context matches them: as they are, "1" is not the class 1
    with pytest.raises(DataValidationError, match=r"eval_set's labels \['0', '1'\]"):
        NPTClassifier(**FAST).fit(X, y, eval_set=(X_val, y_val.astype(str)))
    reg = NPTRegressor(random_state=0, **FAST).fit(
        X[["a", "b"]], X["a"] * 2, eval_set=(X_val[["a", "b"]], X_val["a"])
    )
    assert reg.learner_.members[0].eval_rows is not None


def test_predict_log_proba_is_the_log_of_predict_proba() -> None:
    frame = labelled()
    clf = NPTClassifier(random_state=0, **FAST).fit(frame[["a", "b"]], frame["label"])
    np.testing.assert_allclose(
        np.exp(clf.predict_log_proba(frame[["a", "b"]])), clf.predict_proba(frame[["a", "b"]])
    )


def test_imputer_takes_time_budget_and_n_estimators() -> None:
    frame = labelled()[["a", "b", "c"]]
    frame.loc[::7, "a"] = np.nan
    from semiparam import TableImputer

    imputer = TableImputer(
        n_estimators=2, time_budget=30, max_steps=3, model_options=TINY_MODEL, verbose=False
    )
    filled = imputer.fit_transform(frame)
    assert len(imputer.learner_.members) == 2 and not filled["a"].isna().any()


def test_cli_evaluate_and_predict_carrying_an_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frame = labelled()
    frame.insert(0, "id", [f"r{k}" for k in range(len(frame))])
    frame.drop(columns="id").to_csv(tmp_path / "train.csv", index=False)
    frame.to_csv(tmp_path / "new.csv", index=False)
    run = tmp_path / "run"
    args = ["--set", "train.max_steps=2", "--n-estimators", "1", "--quiet", "--device", "cpu"]
    assert main(["fit", str(tmp_path / "train.csv"), "--target", "label", "--out", str(run), *args]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), str(tmp_path / "new.csv")]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["rows"] == len(frame) and set(scores["targets"]["label"]) == {
        "accuracy",
        "log_loss",
        "roc_auc",
    }
    out = tmp_path / "p.csv"
    assert main(["predict", str(run), str(tmp_path / "new.csv"), "--id", "id", "--out", str(out)]) == 0
    preds = pd.read_csv(out)
    assert list(preds.columns[:2]) == ["id", "label"] and preds["id"].tolist() == frame["id"].tolist()


def test_feature_importances_as_a_fitted_attribute(tmp_path: Path) -> None:
    frame = labelled(n=120)
    X = frame.drop(columns="label")
    clf = NPTClassifier(random_state=0, **{**FAST, "max_steps": 30}).fit(X, frame["label"])
    importances = clf.feature_importances_
    assert importances.shape == (3,) and np.all(importances >= 0)
    assert importances.sum() == pytest.approx(1.0) or importances.sum() == 0.0
    assert clf.feature_importances_ is importances  # computed once
    loaded = NPTClassifier.load(clf.save(tmp_path / "m"))
    assert not hasattr(loaded, "feature_importances_")  # no held-out rows on disk: a clear AttributeError
    model = TablePredictor(targets=["label"], random_state=0, **FAST).fit(frame)
    assert model.feature_importances_.shape == (3,)


def test_feature_importances_are_scored_on_rows_the_scoring_model_never_saw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first member's held-out rows are scored by that member alone, predicting from the rows
    it trained on: the other members trained on them, and the full context holds their labels."""
    frame = labelled(n=100)
    X, y = frame.drop(columns="label"), frame["label"]
    clf = NPTClassifier(random_state=0, **{**FAST, "n_estimators": 3}).fit(X, y)
    calls = []
    original = NPTClassifier.feature_importances

    def spy(self: NPTClassifier, X: pd.DataFrame, y: np.ndarray, **kwargs: object) -> pd.DataFrame:
        calls.append((len(self.learner_.members), len(X), kwargs.get("context")))
        return original(self, X, y, **kwargs)

    monkeypatch.setattr(NPTClassifier, "feature_importances", spy)
    assert clf.feature_importances_.shape == (3,)
    ((n_members, n_rows, context),) = calls
    held_out = clf.learner_.members[0].validation_index
    assert n_members == 1 and n_rows == len(held_out) == 10
    X_ctx, _ = context
    assert len(X_ctx) == len(X) - len(held_out)
    assert not set(map(tuple, X.iloc[held_out].to_numpy())) & set(map(tuple, X_ctx.to_numpy()))
    assert len(clf.learner_.members) == 3  # the estimator itself keeps every member


# -- sample_weight ---------------------------------------------------------------------------------


def test_weighted_loss_counts_a_row_of_weight_two_twice() -> None:
    import torch

    from semiparam.data.columns import ColumnLayout
    from semiparam.nn.columns import ColumnOutputs
    from semiparam.training.losses import npt_loss

    layout = ColumnLayout(kinds=("continuous", "continuous"), cardinalities=(0, 0))
    rng = torch.Generator().manual_seed(0)
    pred, true = torch.randn(3, 2, 1, generator=rng), torch.randn(3, 2, generator=rng)
    score_t = torch.tensor([[False, True]] * 3)
    score_f = torch.tensor([[True, False], [False, False], [True, False]])
    weights = torch.tensor([2.0, 1.0, 0.0])
    weighted, _ = npt_loss(ColumnOutputs(pred, []), true, score_t, score_f, layout, 0.3, row_weights=weights)
    t = [0, 0, 1]  # row 0 twice, row 1 once, row 2 not at all
    plain, _ = npt_loss(ColumnOutputs(pred[t], []), true[t], score_t[t], score_f[t], layout, 0.3)
    assert torch.allclose(weighted, plain)


def test_zero_weight_rows_do_not_train_the_model() -> None:
    rng = np.random.default_rng(0)
    n = 80
    X = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n)})
    heavy = np.arange(n) % 2 == 0
    y = np.where(heavy, 0.0, 10.0)  # rows of weight 0 hold another target
    fast = {**FAST, "max_steps": 40, "random_state": 0}
    plain = NPTRegressor(**fast).fit(X, y).predict(X).mean()
    weighted = NPTRegressor(**fast).fit(X, y, sample_weight=heavy.astype(float)).predict(X).mean()
    assert weighted < 2.5 < plain
    labels = np.where(heavy, "kept", "ignored")
    together = {**fast, "train_options": {"members_together": "always"}, "n_estimators": 2}
    model = NPTClassifier(**together).fit(X, labels, sample_weight=heavy.astype(float))
    assert (model.predict(X) == "kept").mean() > 0.9


def test_equal_weights_are_no_weights_and_bad_weights_are_refused() -> None:
    frame = labelled()
    X, y = frame.drop(columns="label"), frame["label"]
    plain = NPTClassifier(random_state=0, **FAST).fit(X, y).predict_proba(X)
    ones = NPTClassifier(random_state=0, **FAST).fit(X, y, sample_weight=np.full(len(X), 3.0))
    np.testing.assert_array_equal(ones.predict_proba(X), plain)
    model = NPTClassifier(random_state=0, **FAST)
    for bad, message in [
        (np.ones(len(X) - 1), "one weight per row"),
        (np.r_[-1.0, np.ones(len(X) - 1)], "finite and >= 0"),
        (np.r_[np.nan, np.ones(len(X) - 1)], "finite and >= 0"),
        (np.r_[1.0, np.zeros(len(X) - 1)], "zero for all but 1 row"),
        (["heavy"] * len(X), "must hold numbers"),
    ]:
        with pytest.raises(DataValidationError, match=message):
            model.fit(X, y, sample_weight=bad)
    predictor = TablePredictor(targets=["label"], random_state=0, **FAST)
    predictor.fit(frame, sample_weight=np.linspace(0.5, 2, len(frame)))
    assert predictor.predict(frame.head(3)).shape[0] == 3


def test_cli_weight_column_and_the_validation_scores_in_metrics(tmp_path: Path) -> None:
    frame = labelled(80)
    frame["w"] = np.where(np.arange(len(frame)) % 4 == 0, 0.0, 1.5)
    frame.to_csv(tmp_path / "t.csv", index=False)
    common = ["--set", "train.max_steps=3", "--quiet", "--n-estimators", "2", "--model", "npt"]
    out = tmp_path / "run"
    assert (
        main(
            [
                "fit",
                str(tmp_path / "t.csv"),
                "--target",
                "label",
                "--weight-column",
                "w",
                "--out",
                str(out),
                *common,
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    validation = metrics["validation"]
    assert len(validation["members"]) == 2
    member = validation["members"][0]["label"]
    assert 0.0 <= member["accuracy"] <= 1.0 and member["log_loss"] > 0 and member["rows"] == 8
    mean = np.mean([m["label"]["accuracy"] for m in validation["members"]])
    assert validation["mean"]["label"]["accuracy"] == pytest.approx(mean)
    config = json.loads((out / "config.json").read_text())
    assert config["weight_column"] == "w" and "w" not in config["schema"]["targets"]
    assert "w" not in [c["name"] for c in config["schema"]["columns"]]
    for bad in ("label", "nope"):
        assert (
            main(["fit", str(tmp_path / "t.csv"), "--target", "label", "--weight-column", bad, *common]) == 2
        )
