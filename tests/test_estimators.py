"""End-to-end behaviour of the NPT estimators: leakage, batch independence, save/load, inputs."""

import json

import numpy as np
import pandas as pd
import pytest

from semiparam import (
    ConfigError,
    DataValidationError,
    NPTClassifier,
    NPTRegressor,
    SPINClassifier,
    TableImputer,
    TablePredictor,
)

from .conftest import TINY_MODEL

FAST = dict(max_steps=15, learning_rate=1e-2, model_options=TINY_MODEL, random_state=0, n_estimators=1)


@pytest.fixture(scope="module")
def fitted(request):
    rng = np.random.default_rng(0)
    n = 80
    frame = pd.DataFrame(
        {
            "num": rng.normal(size=n),
            "cat": pd.Categorical(rng.choice(["a", "b", "c"], n)),
            "flag": rng.random(n) < 0.5,
        }
    )
    y = np.where(frame["num"] > 0, "yes", "no")
    clf = NPTClassifier(p_target=0.5, **FAST).fit(frame.iloc[:60], y[:60])
    return clf, frame, y


def test_classes_and_proba(fitted):
    clf, frame, _ = fitted
    proba = clf.predict_proba(frame.iloc[60:])
    assert list(clf.classes_) == ["no", "yes"]
    assert proba.shape == (20, 2)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-9)
    assert set(clf.predict(frame.iloc[60:])) <= {"no", "yes"}


def test_batch_independence_and_row_order(fitted):
    """A test row's prediction does not depend on the other test rows (default predict mode)."""
    clf, frame, _ = fitted
    test = frame.iloc[60:]
    full = clf.predict_proba(test)
    one_by_one = np.vstack([clf.predict_proba(test.iloc[[i]]) for i in range(len(test))])
    np.testing.assert_allclose(full, one_by_one, atol=1e-12)
    other = test.copy()
    other.iloc[1:, 0] = 99.0  # change every other test row
    np.testing.assert_allclose(clf.predict_proba(other)[0], full[0], atol=1e-12)
    perm = np.random.default_rng(1).permutation(len(test))
    np.testing.assert_allclose(clf.predict_proba(test.iloc[perm]), full[perm], atol=1e-12)


def test_no_test_label_leakage(fitted):
    """Test labels never enter the model: a model trained with the test rows' features
    (transductive) predicts identically whatever their labels were, and the learner hides any
    target column present at predict time."""
    clf, frame, y = fitted
    learner = clf.learner_
    test = frame.iloc[60:].reset_index(drop=True)
    target = learner.schema.targets[0]
    with_true = test.assign(**{target: y[60:]})
    with_flipped = test.assign(**{target: np.where(y[60:] == "yes", "no", "yes")})
    a = learner.predict_columns(with_true, [target])[target]["proba"]
    b = learner.predict_columns(with_flipped, [target])[target]["proba"]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, clf.predict_proba(test), atol=1e-12)


def test_transductive_fit_uses_unlabeled_rows(fitted):
    _, frame, y = fitted
    a = NPTClassifier(**FAST).fit(frame.iloc[:60], y[:60], X_unlabeled=frame.iloc[60:])
    b = NPTClassifier(**FAST).fit(frame.iloc[:60], y[:60])
    assert not np.allclose(a.predict_proba(frame.iloc[60:]), b.predict_proba(frame.iloc[60:]))


def test_seeded_fit_is_reproducible(fitted):
    clf, frame, y = fitted
    again = NPTClassifier(p_target=0.5, **FAST).fit(frame.iloc[:60], y[:60])
    np.testing.assert_array_equal(again.predict_proba(frame), clf.predict_proba(frame))


def test_save_load_round_trip(fitted, tmp_path):
    clf, frame, _ = fitted
    clf.save(tmp_path / "model")
    files = sorted(p.name for p in (tmp_path / "model").iterdir())
    assert files == ["context.safetensors", "model.safetensors", "semiparam.json"]
    meta = json.loads((tmp_path / "model" / "semiparam.json").read_text())
    assert meta["model_name"] == "npt" and meta["estimator"]["class"] == "NPTClassifier"
    loaded = NPTClassifier.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict_proba(frame), clf.predict_proba(frame))
    np.testing.assert_array_equal(loaded.classes_, clf.classes_)
    with pytest.raises(ValueError, match="NPTClassifier"):
        NPTRegressor.load(tmp_path / "model")
    with pytest.raises(FileNotFoundError):
        NPTClassifier.load(tmp_path / "nothing")


def test_regressor_gaussian_std_and_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(70, 3))
    y = X[:, 0] * 3 + 10 + rng.normal(scale=0.1, size=70)
    reg = NPTRegressor(loss="gaussian", **FAST).fit(X, y)
    mean, std = reg.predict(X, return_std=True)
    assert mean.shape == std.shape == (70,) and (std > 0).all()
    reg.save(tmp_path)
    mean2, std2 = NPTRegressor.load(tmp_path).predict(X, return_std=True)
    np.testing.assert_array_equal(mean, mean2)
    np.testing.assert_array_equal(std, std2)
    with pytest.raises(ValueError, match="gaussian"):
        NPTRegressor(**FAST).fit(X, y).predict(X, return_std=True)


def test_multi_output_regression():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    Y = np.column_stack([X[:, 0], -X[:, 1] * 100])
    pred = NPTRegressor(**FAST).fit(X, Y).predict(X)
    assert pred.shape == (50, 2)
    assert abs(pred[:, 1].std() / pred[:, 0].std()) > 5  # each target in its own units


def test_table_predictor_mixed_targets(mixed_frame, tmp_path):
    frame = mixed_frame.assign(score=mixed_frame["num"] * 2.0)
    pred = TablePredictor(targets=["target", "score"], **FAST).fit(frame.iloc[:45])
    out = pred.predict(frame.iloc[45:])
    assert list(out.columns) == ["target", "target_proba_no", "target_proba_yes", "score"]
    assert set(out["target"]) <= {"yes", "no"}
    pred.save(tmp_path)
    pd.testing.assert_frame_equal(TablePredictor.load(tmp_path).predict(frame.iloc[45:]), out)


def test_set_context_changes_predictions_without_retraining(fitted, tmp_path):
    clf, frame, y = fitted
    before = clf.predict_proba(frame.iloc[60:])
    weights = {k: v.clone() for k, v in clf.learner_.module.state_dict().items()}
    clf_copy = NPTClassifier.load(clf.save(tmp_path / "ctx"))
    clf_copy.set_context(frame.iloc[:60], np.where(y[:60] == "yes", "no", "yes"))
    after = clf_copy.predict_proba(frame.iloc[60:])
    assert not np.allclose(before, after)  # p_target < 1: labels in the context matter
    for k, v in clf_copy.learner_.module.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), weights[k].numpy())
    with pytest.raises(DataValidationError, match="not seen"):
        clf_copy.set_context(frame.iloc[:3], ["yes", "no", "maybe"])


def test_masking_rates_each_estimator_trains_with():
    # NPT's and SPIN's cpu presets mask few feature cells (chosen on the suite); the imputer,
    # whose only signal is feature masking, keeps the paper's 0.15; an argument still wins
    assert NPTClassifier()._configs()[1].p_feature == 0.05
    assert SPINClassifier()._configs()[1].p_feature == 0.05
    assert SPINClassifier(p_feature=0.15)._configs()[1].p_feature == 0.15
    imputer_train = TableImputer()._configs()[1]
    assert (imputer_train.p_feature, imputer_train.max_steps) == (0.15, 400)
    assert TableImputer(p_feature=0.3, max_steps=7)._configs()[1].p_feature == 0.3
    assert TableImputer(train_options={"max_steps": 7})._configs()[1].max_steps == 7


def test_rare_feature_categories_share_a_level_targets_never(mixed_frame):
    # the cpu preset groups the categories of a feature seen in fewer than 5 training rows; a rare
    # class of the target stays a class, and the imputer (whose every column is a target) groups
    # nothing; min_category_count=1 is the papers' encoding
    frame = mixed_frame.assign(shop=["s1"] * 30 + ["s2"] * 26 + ["r1", "r2", "r2", "r3"])
    y = np.where(np.arange(60) < 3, "rare", frame.pop("target"))
    clf = NPTClassifier(**FAST).fit(frame, y)
    assert clf.infrequent_categories_ == {"shop": ["r1", "r2", "r3"]}
    assert "rare" in clf.classes_ and clf.predict_proba(frame).shape == (60, 3)
    with pytest.warns(UserWarning, match="infrequent level"):
        clf.predict(frame.iloc[:1].assign(shop="new shop"))
    plain = NPTClassifier(**FAST, train_options={"min_category_count": 1}).fit(frame, y)
    assert plain.infrequent_categories_ == {}
    assert TableImputer()._configs()[1].min_category_count == 1
    with pytest.raises(ConfigError, match="imputes every column"):  # it could only impute "infrequent"
        TableImputer(max_steps=2, train_options={"min_category_count": 5}).fit(frame)
    npt_count = NPTClassifier()._configs()[1].min_category_count
    assert npt_count > 1 and SPINClassifier()._configs()[1].min_category_count == npt_count


def test_imputer_fills_every_missing_cell(mixed_frame):
    frame = mixed_frame.copy()
    frame = frame.astype({"flag": object, "target": object})
    rng = np.random.default_rng(3)
    holes = rng.random(frame.shape) < 0.15
    damaged = frame.mask(holes)
    imputer = TableImputer(max_steps=20, learning_rate=1e-2, model_options=TINY_MODEL, random_state=0)
    filled = imputer.fit_transform(damaged)
    assert filled.isna().sum().sum() == 0
    assert filled.index.equals(damaged.index) and list(filled.columns) == list(damaged.columns)
    observed = ~holes
    for j, name in enumerate(frame.columns):
        kept = observed[:, j]
        assert (filled[name][kept].astype(str) == damaged[name][kept].astype(str)).all()
        if name in ("cat", "target", "flag"):
            assert set(filled[name].astype(str)) <= set(frame[name].astype(str))


def test_unseen_category_warns_and_is_missing(fitted):
    clf, frame, _ = fitted
    odd = frame.iloc[60:62].copy()
    odd["cat"] = odd["cat"].astype(object)
    odd.iloc[0, 1] = "zzz"
    with pytest.warns(UserWarning, match="not seen at fit"):
        clf.predict_proba(odd)


@pytest.mark.parametrize(
    "mutate, error, match",
    [
        (lambda f: f.drop(columns=["flag"]), ValueError, "flag|features"),
        (lambda f: f.rename(columns={"num": "numb"}), ValueError, "feature names|numb"),
        (lambda f: f.assign(num=np.where(np.arange(len(f)) == 3, np.inf, f["num"])), ValueError, "inf"),
        (
            lambda f: f.assign(num=f["num"].astype(object).where(np.arange(len(f)) != 2, "abc")),
            ValueError,
            "non-numeric",
        ),
        (lambda f: f.iloc[:0], ValueError, "no rows|0 sample"),
    ],
    ids=["missing-column", "renamed-column", "inf", "string-in-numeric", "empty"],
)
def test_bad_input_at_predict(fitted, mutate, error, match):
    clf, frame, _ = fitted
    with pytest.raises(error, match=match):
        clf.predict(mutate(frame))


def test_bad_input_at_fit(mixed_frame):
    y = mixed_frame["target"]
    X = mixed_frame.drop(columns=["target"])
    with pytest.raises(DataValidationError, match="all missing"):
        NPTClassifier(**FAST).fit(X.assign(num=np.nan), y)
    with pytest.raises(DataValidationError, match="inf"):
        NPTClassifier(**FAST).fit(X.assign(num=np.inf), y)
    with pytest.raises(ValueError, match="rows|samples"):
        NPTClassifier(**FAST).fit(X, y[:-3])
    with pytest.raises(ValueError, match="Expected 2D"):
        NPTClassifier(**FAST).fit(np.arange(10.0), np.arange(10) % 2)
    with pytest.raises(ValueError, match="missing labels"):
        NPTClassifier(**FAST).fit(X, y.where(y.index != 3, None))
    with pytest.raises(DataValidationError, match="not in the table|unknown column"):
        NPTClassifier(categorical_features=["nope"], **FAST).fit(X, y)
    with pytest.raises(ValueError, match="no rows|0 sample"):
        NPTClassifier(**FAST).fit(X.iloc[:0], y.iloc[:0])


def test_unknown_config_key_raises(mixed_frame):
    X, y = mixed_frame.drop(columns=["target"]), mixed_frame["target"]
    with pytest.raises(ConfigError, match="d_embeding"):
        NPTClassifier(model_options={"d_embeding": 8}).fit(X, y)
    with pytest.raises(ConfigError, match="max_stepz"):
        NPTClassifier(train_options={"max_stepz": 8}).fit(X, y)
    with pytest.raises(ConfigError, match="preset"):
        NPTClassifier("huge").fit(X, y)
    with pytest.raises(ConfigError, match="both"):
        NPTClassifier(max_steps=3, train_options={"max_steps": 4}).fit(X, y)


def test_categorical_override_and_inference(mixed_frame):
    X, y = mixed_frame.drop(columns=["target"]), mixed_frame["target"]
    clf = NPTClassifier(categorical_features=["count"], **FAST).fit(X, y)
    kinds = {c.name: c.kind for c in clf.learner_.schema.columns}
    assert kinds == {
        "num": "continuous",
        "cat": "categorical",
        "flag": "categorical",
        "count": "categorical",
        "__target__": "categorical",
    }


def test_resolved_configs_apply_the_options_and_arguments_a_fit_would_use():
    from semiparam import NPTClassifier

    model_config, train_config = NPTClassifier(
        max_steps=7, model_options={"n_blocks": 2}, train_options={"eval_every": 3}
    ).resolved_configs()
    assert (model_config.n_blocks, train_config.max_steps, train_config.eval_every) == (2, 7, 3)
    with pytest.raises(ValueError, match="max_steps"):  # one setting given twice
        NPTClassifier(max_steps=7, train_options={"max_steps": 9}).resolved_configs()


def test_calibration_may_sharpen_down_to_min_temperature():
    """Label smoothing caps how sure a model is; with ``min_temperature`` below 1 the
    temperature fitted on the validation rows may undo that cap (never below the floor), and it
    changes no predicted class. At the default floor of 1 it only softens."""
    rng = np.random.default_rng(1)
    n = 200
    x = rng.normal(size=n)
    x = x + np.sign(x)  # a wide margin: the validation rows are all predicted right
    frame = pd.DataFrame({"x": x, "noise": rng.normal(size=n)})
    y = np.where(x > 0, "pos", "neg")
    train = {"label_smoothing": 0.2, "calibrate": True, "validation_fraction": 0.25}
    fast = {**FAST, "max_steps": 60}
    fits = {
        floor: NPTClassifier(**fast, train_options={**train, "min_temperature": floor}).fit(
            frame.iloc[:160], y[:160]
        )
        for floor in (1.0, 0.5)
    }
    temps = {floor: next(iter(fit.learner_.members[0].temperatures.values())) for floor, fit in fits.items()}
    assert temps[1.0] >= 1.0 - 1e-6
    assert 0.5 - 1e-6 <= temps[0.5] < 1.0
    soft, sharp = (fits[f].predict_proba(frame.iloc[160:]) for f in (1.0, 0.5))
    assert (sharp.max(axis=1) > soft.max(axis=1)).all()
    np.testing.assert_array_equal(soft.argmax(axis=1), sharp.argmax(axis=1))
    with pytest.raises(ConfigError, match="min_temperature"):
        NPTClassifier(**FAST, train_options={"min_temperature": 0.0}).fit(frame, y)
