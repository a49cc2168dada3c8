"""SPINClassifier / SPINRegressor / TableImputer(model="spin") / CLI: the public API end to end."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from sklearn.utils.estimator_checks import estimator_checks_generator, parametrize_with_checks

from semiparam import SPINClassifier, SPINRegressor, TableImputer, TablePredictor
from semiparam.cli.main import main as cli_main
from semiparam.estimators import SPINClassifier as SPINClassifierFromEstimators

TINY_SPIN = {"d_embedding": 8, "n_heads": 2, "n_blocks": 1, "dropout": 0.0}
# lr 1e-2 and no feature loss so that 60 steps reach the checks' training-accuracy bar (0.83)
TINY = dict(max_steps=60, learning_rate=1e-2, p_feature=0.0, model_options=TINY_SPIN, random_state=0)
# one member: these tests look inside the fitted model (SPIN's cpu preset trains three)
FAST = dict(
    max_steps=30,
    learning_rate=1e-2,
    model_options=TINY_SPIN,
    random_state=0,
    validation_fraction=0.0,
    n_estimators=1,
)


@pytest.mark.slow  # about 5 minutes on two busy cores: every check fits several models
@parametrize_with_checks(
    [
        SPINClassifier(**TINY),
        SPINRegressor(**TINY),
        TableImputer(model="spin", max_steps=20, model_options=TINY_SPIN, random_state=0),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# The default tier runs the checks about the API contract (not about accuracy) on 3-step fits.
API_CHECKS = {
    "check_no_attributes_set_in_init",
    "check_estimators_overwrite_params",
    "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self",
    "check_estimators_unfitted",
    "check_n_features_in_after_fitting",
    "check_methods_sample_order_invariance",
    "check_methods_subset_invariance",
    "check_fit2d_1sample",
    "check_dict_unchanged",
    "check_fit_idempotent",
    "check_fit_check_is_fitted",
}
QUICK = dict(TINY, max_steps=3)


def _api_checks():
    for estimator in (SPINClassifier(**QUICK), SPINRegressor(**QUICK)):
        for est, check in estimator_checks_generator(estimator, legacy=True, mark="skip"):
            name = getattr(check, "func", check).__name__
            if name in API_CHECKS:
                yield pytest.param(est, check, id=f"{type(est).__name__}-{name}")


@pytest.mark.parametrize(("estimator", "check"), list(_api_checks()))
def test_sklearn_api_contract(estimator, check):
    check(estimator)


def _blobs(n: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(["u", "v"], n)})
    y = np.where(X["a"] + 0.5 * (X["c"] == "u") > 0.2, "pos", "neg")
    return X, y


def test_exported_and_uses_spin():
    assert SPINClassifierFromEstimators is SPINClassifier
    X, y = _blobs(80)
    clf = SPINClassifier(**FAST).fit(X, y)
    assert clf.learner_.model_name == "spin"
    assert clf.learner_.context.rows is None  # no training rows kept, only the encoding
    assert clf.learner_.train_config.p_target == 0.5 and clf.learner_.train_config.tradeoff_start == 0.5
    proba = clf.predict_proba(X)
    assert proba.shape == (80, 2)
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-6)


def test_learns_and_is_row_equivariant():
    X, y = _blobs(240)
    X_test, y_test = _blobs(100, seed=1)
    clf = SPINClassifier(max_steps=80, learning_rate=3e-3, model_options=TINY_SPIN, random_state=0).fit(X, y)
    assert (clf.predict(X_test) == y_test).mean() > 0.8
    perm = np.random.default_rng(2).permutation(100)
    np.testing.assert_allclose(
        clf.predict_proba(X_test.iloc[perm]), clf.predict_proba(X_test)[perm], atol=1e-9
    )
    # a row's prediction does not depend on the other rows it is predicted with
    np.testing.assert_allclose(clf.predict_proba(X_test.iloc[:1]), clf.predict_proba(X_test)[:1], atol=1e-9)


def test_test_labels_never_reach_the_model():
    """Test labels never enter the model: with the test rows' features in training (transductive)
    the predictions are the same whatever their labels, and a target column present at predict time
    is hidden."""
    X, y = _blobs(100)
    test, y_test = _blobs(40, seed=3)
    frame = X.assign(label=y)
    predictor = TablePredictor(targets=["label"], model="spin", **FAST).fit(frame, X_unlabeled=test)
    right = predictor.predict(test.assign(label=y_test))
    wrong = predictor.predict(test.assign(label=np.where(y_test == "pos", "neg", "pos")))
    pd.testing.assert_frame_equal(right, wrong)
    # the unlabeled rows did join training
    inductive = TablePredictor(targets=["label"], model="spin", **FAST).fit(frame).predict(test)
    assert not np.allclose(inductive["label_proba_pos"], right["label_proba_pos"])


def test_gaussian_regressor_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(70, 3))
    y = X[:, 0] * 3 + 10 + rng.normal(scale=0.1, size=70)
    reg = SPINRegressor(loss="gaussian", **FAST).fit(X, y)
    mean, std = reg.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5,) and (std > 0).all()
    reg.save(tmp_path / "reg")
    with pytest.raises(ValueError, match="SPINRegressor"):
        SPINClassifier.load(tmp_path / "reg")
    mean2, std2 = SPINRegressor.load(tmp_path / "reg").predict(X[:5], return_std=True)
    np.testing.assert_array_equal(mean, mean2)
    np.testing.assert_array_equal(std, std2)


def test_chunked_encoding_path_equals_one_pass():
    """The learner's streamed encoding (chunks of 7 rows) predicts as the one-pass encoding."""
    X, y = _blobs(150)
    X_test, _ = _blobs(30, seed=4)
    one = SPINRegressor(**{**FAST, "model_options": {**TINY_SPIN, "encode_chunk_rows": 10_000}})
    chunked = SPINRegressor(**{**FAST, "model_options": {**TINY_SPIN, "encode_chunk_rows": 7}})
    target = X["a"].to_numpy() * 2.0
    a = one.fit(X, target).predict(X_test)
    b = chunked.fit(X, target).predict(X_test)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    # and equals the module's one-pass forward with the test rows as masked queries
    learner = one.learner_
    enc = learner.encoder.transform(X.assign(__target__=target))
    enc_test = learner.encoder.transform(X_test, absent=["__target__"])
    values = torch.as_tensor(np.concatenate([enc.values, enc_test.values]), dtype=torch.float64)
    missing = torch.as_tensor(np.concatenate([enc.missing, enc_test.missing]))
    missing[len(X) :, -1] = True
    is_query = torch.arange(len(values)) >= len(X)
    module = learner.inference_module() if hasattr(learner, "inference_module") else learner.module.eval()
    module = module.to(torch.float64)
    with torch.no_grad():
        direct = module(values.masked_fill(missing, 0.0), missing, is_query=is_query).continuous[
            is_query, -1, 0
        ]  # the target: last continuous column
    direct = learner.encoder.decode_continuous("__target__", direct.numpy())
    np.testing.assert_allclose(a, direct, rtol=1e-7, atol=1e-7)


def _dir_sizes(path: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in path.iterdir()}


def test_save_load_round_trip_without_training_rows(tmp_path):
    X, y = _blobs(60)
    X_big, y_big = _blobs(600, seed=5)
    X_test, _ = _blobs(25, seed=6)
    small = SPINClassifier(**FAST).fit(X, y)
    big = SPINClassifier(**FAST).fit(X_big, y_big)
    small.save(tmp_path / "small")
    big.save(tmp_path / "big")
    loaded = SPINClassifier.load(tmp_path / "big")
    np.testing.assert_array_equal(loaded.predict_proba(X_test), big.predict_proba(X_test))
    np.testing.assert_array_equal(loaded.predict(X_test), big.predict(X_test))
    # the saved encoding is the h x f x e inducing points, nothing row-shaped
    context = load_file(str(tmp_path / "big" / "context.safetensors"))
    assert list(context) == ["inducing_points"]
    assert context["inducing_points"].shape[0] == 10
    s, b = _dir_sizes(tmp_path / "small"), _dir_sizes(tmp_path / "big")
    assert s["context.safetensors"] == b["context.safetensors"]
    assert s["model.safetensors"] == b["model.safetensors"]
    assert abs(s["semiparam.json"] - b["semiparam.json"]) < 2000  # digits of stats, not rows


def test_set_context_reencodes_without_retraining():
    X, y = _blobs(120)
    X_new, _ = _blobs(120, seed=7)
    y_new = np.where(X_new["a"] > 0.2, "neg", "pos")  # the opposite rule
    X_test, _ = _blobs(50, seed=8)
    clf = SPINClassifier(**FAST).fit(X, y)
    weights = {k: v.clone() for k, v in clf.learner_.module.state_dict().items()}
    before = clf.predict_proba(X_test)
    clf.set_context(X_new, y_new)
    after = clf.predict_proba(X_test)
    assert np.abs(after - before).max() > 1e-4
    for k, v in clf.learner_.module.state_dict().items():
        torch.testing.assert_close(v, weights[k])
    clf.set_context(X, y)
    np.testing.assert_allclose(clf.predict_proba(X_test), before, atol=1e-9)


def test_regressor_beats_the_mean():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(200, 3)), columns=["a", "b", "c"])
    y = 2 * X["a"] - X["b"] + 0.1 * rng.normal(size=200)
    reg = SPINRegressor(max_steps=100, learning_rate=3e-3, model_options=TINY_SPIN, random_state=0).fit(X, y)
    X_test = pd.DataFrame(rng.normal(size=(80, 3)), columns=["a", "b", "c"])
    y_test = 2 * X_test["a"] - X_test["b"]
    mse = np.mean((reg.predict(X_test) - y_test) ** 2)
    assert mse < 0.3 * np.var(y_test), mse


def test_imputer_with_spin():
    rng = np.random.default_rng(0)
    a = rng.normal(size=200)
    frame = pd.DataFrame({"a": a, "b": 2 * a + 0.1 * rng.normal(size=200), "c": np.where(a > 0, "hi", "lo")})
    holes = frame.copy()
    holes.loc[::5, "b"] = np.nan
    holes.loc[1::7, "c"] = None
    imputer = TableImputer(
        model="spin",
        max_steps=120,
        learning_rate=3e-3,
        p_feature=0.3,
        model_options=TINY_SPIN,
        random_state=0,
    )
    filled = imputer.fit_transform(holes)
    assert imputer.learner_.model_name == "spin" and imputer.learner_.context.rows is None
    assert not filled.isna().any().any()
    rows = holes["b"].isna()
    err = np.mean((filled.loc[rows, "b"] - frame.loc[rows, "b"]) ** 2)
    assert err < 0.5 * np.var(frame["b"]), err


def test_cli_fit_and_predict_with_spin(tmp_path, capsys):
    X, y = _blobs(60)
    data = tmp_path / "train.csv"
    X.assign(label=y).to_csv(data, index=False)
    run = tmp_path / "run"
    code = cli_main(
        [
            "fit",
            str(data),
            "--target",
            "label",
            "--model",
            "spin",
            "--quiet",
            "--n-estimators",
            "1",
            "--out",
            str(run),
            "--set",
            "train.max_steps=5",
            "--set",
            "model.d_embedding=8",
            "--set",
            "model.n_heads=2",
        ]
    )
    assert code == 0
    assert (run / "model" / "context.safetensors").exists()
    config = (run / "config.json").read_text()
    assert '"model": "spin"' in config and '"n_inducing": 10' in config
    assert cli_main(["predict", str(run), str(data), "--out", str(tmp_path / "pred.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "pred.csv")) == 60
    assert (
        cli_main(
            [
                "fit",
                str(data),
                "--target",
                "label",
                "--model",
                "spin",
                "--quiet",
                "--preset",
                "huge",
                "--out",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
    assert "unknown SPIN preset" in capsys.readouterr().err


def test_default_members_follow_the_preset():
    """n_estimators=None takes the preset's count: three members for the cpu presets of SPIN and
    NPT, one for the paper presets; an explicit count wins."""
    from semiparam import NPTRegressor

    X, y = _blobs(40)
    target = X["a"].to_numpy()
    quick = dict(max_steps=3, model_options=TINY_SPIN, random_state=0, verbose=False)
    assert SPINRegressor().get_params()["n_estimators"] is None
    assert len(SPINRegressor(**quick).fit(X, target).learner_.members) == 3
    assert len(SPINRegressor(preset="small", **quick).fit(X, target).learner_.members) == 1
    assert len(SPINRegressor(n_estimators=2, **quick).fit(X, target).learner_.members) == 2
    npt = NPTRegressor(max_steps=3, model_options={"d_embedding": 8, "n_heads": 2}, random_state=0)
    assert len(npt.fit(X, target).learner_.members) == 3
    assert len(npt.set_params(preset="small").fit(X, target).learner_.members) == 1
