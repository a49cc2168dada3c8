"""TableClassifier / TableRegressor with ``model="auto"``: NPT and SPIN members in one ensemble."""

import inspect

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from semiparam import (
    ConfigError,
    NPTClassifier,
    NPTRegressor,
    SPINClassifier,
    TableClassifier,
    TableRegressor,
)
from semiparam.estimators._ensemble import EnsembleLearner, Family
from semiparam.models.npt import NPTConfig
from semiparam.models.spin import SPINConfig
from semiparam.training.config import TrainConfig

TINY = {"d_embedding": 8, "n_heads": 2, "dropout": 0.0}
OPTIONS = {"npt": {**TINY, "n_blocks": 2}, "spin": {**TINY, "n_blocks": 1}}
pytestmark = pytest.mark.filterwarnings("ignore:max_steps=.* is below min_steps")

FAST = dict(max_steps=20, learning_rate=1e-2, model_options=OPTIONS, random_state=0, verbose=False)


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    n = 90
    X = pd.DataFrame({"num": rng.normal(size=n), "cat": rng.choice(["a", "b", "c"], n)})
    return X, np.where(X["num"] > 0, "yes", "no"), X["num"].to_numpy() * 2.0


@pytest.fixture(scope="module")
def auto_classifier(frame):
    X, y, _ = frame
    return TableClassifier(n_estimators=2, **FAST).fit(X.iloc[:70], y[:70])


def test_auto_is_the_default_and_trains_both_families(auto_classifier):
    assert TableClassifier().model == "auto" and TableRegressor().get_params()["model"] == "auto"
    learner = auto_classifier.learner_
    assert [m.model_name for m in learner.members] == ["npt", "npt", "spin", "spin"]
    assert learner.model_name == "npt+spin"
    assert "2 npt + 2 spin members" in learner.describe_fit()
    # each member has its own seed; one encoder for all
    assert len({m.seed for m in learner.members}) == 4
    assert all(m.encoder is learner.encoder for m in learner.members)


def test_auto_prediction_is_the_mean_of_every_member(auto_classifier, frame):
    X, _, _ = frame
    queries = X.iloc[70:]
    proba = auto_classifier.predict_proba(queries)
    encoded = auto_classifier.learner_.encoder.transform(queries, absent=["__target__"])
    per_member = [
        m.predict_columns(encoded, ["__target__"])["__target__"]["proba"]
        for m in auto_classifier.learner_.members
    ]
    np.testing.assert_allclose(proba, np.mean(per_member, axis=0), rtol=1e-6)
    # the two families predict differently: the average is not one family's
    npt, spin = np.mean(per_member[:2], axis=0), np.mean(per_member[2:], axis=0)
    assert not np.allclose(npt, spin)


def test_auto_round_trip(auto_classifier, frame, tmp_path):
    X, _, _ = frame
    auto_classifier.save(tmp_path / "auto")
    loaded = TableClassifier.load(tmp_path / "auto")
    assert loaded.model == "auto" and loaded.learner_.model_name == "npt+spin"
    np.testing.assert_array_equal(
        loaded.predict_proba(X.iloc[70:]), auto_classifier.predict_proba(X.iloc[70:])
    )


def test_auto_regressor_and_set_context(frame):
    X, _, y = frame
    reg = TableRegressor(n_estimators=1, **FAST).fit(X.iloc[:70], y[:70])
    assert [m.model_name for m in reg.learner_.members] == ["npt", "spin"]
    before = reg.predict(X.iloc[70:])
    assert before.shape == (20,) and np.isfinite(before).all()
    reg.set_context(X.iloc[:70], -y[:70])  # every member reads the new labels
    assert not np.allclose(reg.predict(X.iloc[70:]), before)


def test_one_family_through_model(frame):
    X, _, y = frame
    reg = TableRegressor(model="spin", n_estimators=1, **{**FAST, "model_options": OPTIONS["spin"]})
    reg.fit(X.iloc[:70], y[:70])
    assert [m.model_name for m in reg.learner_.members] == ["spin"]


def test_family_options_and_shared_options(frame):
    X, _, y = frame
    options = {"dropout": 0.2, "npt": {"ff_multiplier": 3}, "spin": {"n_inducing": 3}}
    reg = TableRegressor(n_estimators=1, max_steps=2, model_options=options, random_state=0, verbose=False)
    reg.fit(X.iloc[:70], y[:70])
    npt, spin = (m.model_config for m in reg.learner_.members)
    assert npt.ff_multiplier == 3 and npt.dropout == 0.2
    assert spin.n_inducing == 3 and spin.dropout == 0.2


@pytest.mark.parametrize(
    "params, match",
    [
        ({"model": "gbdt"}, "unknown model 'gbdt'; choose 'auto'"),
        ({"model_options": {"npt": 3}}, r"model_options\['npt'\] must be a dict"),
        ({"model_options": {"spin": {"no_such_field": 1}}}, "no_such_field"),
    ],
)
def test_bad_model_settings_raise(frame, params, match):
    X, _, y = frame
    with pytest.raises(ConfigError, match=match):
        TableRegressor(max_steps=2, **params).fit(X, y)


def test_single_family_estimators_take_no_model_argument():
    for cls in (NPTClassifier, NPTRegressor, SPINClassifier):
        assert "model" not in inspect.signature(cls).parameters
        assert "model" not in cls().get_params()
        assert not hasattr(cls(), "model")
        with pytest.raises(TypeError, match="takes no 'model' argument"):
            cls(model="spin")
    est = clone(NPTRegressor(max_steps=5, n_estimators=2))
    assert est.get_params()["max_steps"] == 5 and est._model_name == "npt"
    assert clone(TableClassifier(model="spin")).get_params()["model"] == "spin"


def test_families_that_encode_differently_are_refused():
    npt, spin = NPTConfig.cpu(), SPINConfig.cpu()
    cpu = TrainConfig.preset("cpu", model="npt")
    other = TrainConfig.preset("cpu", model="spin").replace(feature_transform="standard")
    with pytest.raises(ValueError, match="feature_transform differ"):
        EnsembleLearner("npt", npt, cpu, more_families=[Family("spin", spin, other, 1)])


def test_auto_members_trained_as_stacks(frame):
    """members_together (a GPU's default): one stack per family, each with its own config."""
    X, _, y = frame
    reg = TableRegressor(n_estimators=2, train_options={"members_together": "always"}, **FAST)
    reg.fit(X.iloc[:70], y[:70])
    assert "trained together" in reg.learner_.describe_fit()
    assert [m.model_name for m in reg.learner_.members] == ["npt", "npt", "spin", "spin"]
    assert all(h.n_steps == 20 for h in reg.history_.members)
    assert reg.learner_.members[2].train_config.tradeoff_start == 0.5  # SPIN's own preset
    assert np.isfinite(reg.predict(X.iloc[70:])).all()


def test_auto_rows_are_explained_by_the_members_that_keep_them(auto_classifier, frame):
    X, y, _ = frame
    rows = auto_classifier.explain_rows(X.iloc[70:74], top_k=3)
    assert len(rows) == 12 and set(rows["rank"]) == {1, 2, 3}
    assert rows["context_row"].max() < 70
    # the same as an estimator holding only the NPT members
    npt_only = auto_classifier.with_members(auto_classifier.learner_.members[:2])
    pd.testing.assert_frame_equal(rows, npt_only.explain_rows(X.iloc[70:74], top_k=3))
    # given rows, every member explains
    given = auto_classifier.explain_rows(X.iloc[70:74], top_k=3, context=(X.iloc[:70], y[:70]))
    assert len(given) == 12


def test_default_composition_follows_the_table_size():
    from semiparam.estimators.base import AUTO_SMALL_TABLE_ROWS, default_members

    small, large = AUTO_SMALL_TABLE_ROWS, AUTO_SMALL_TABLE_ROWS + 1
    assert [default_members("auto", "cpu", f, small) for f in ("npt", "spin")] == [3, 2]
    assert [default_members("auto", "cpu", f, large) for f in ("npt", "spin")] == [1, 2]
    assert [default_members("auto", "cpu", f) for f in ("npt", "spin")] == [3, 2]  # size unknown: small
    # presets without a composition of their own: each family's own default, whatever the size
    assert [default_members("auto", "small", f, large) for f in ("npt", "spin")] == [1, 1]
    # one family alone: its own count on any table
    assert default_members("npt", "cpu", None, large) == default_members("npt", "cpu") == 3
    learner = TableRegressor(model_options=OPTIONS)._new_learner(small)
    assert [m.model_name for m in learner.members] == ["npt"] * 3 + ["spin"] * 2
    assert len({m.seed for m in learner.members}) == 5
    learner = TableRegressor(model_options=OPTIONS)._new_learner(large)
    assert [m.model_name for m in learner.members] == ["npt", "spin", "spin"]
    # n_estimators counts each family's members on any table
    asked = TableRegressor(model_options=OPTIONS, n_estimators=2)._new_learner(large)
    assert [m.model_name for m in asked.members] == ["npt", "npt", "spin", "spin"]
    learner = TableRegressor(model_options=OPTIONS)._new_learner(small)
    # auto's members anneal for the shortest span; one family alone keeps its preset's anneal
    assert [m.train_config.anneal_fraction for m in learner.members] == [0.0] * 5
    assert TableRegressor(model="npt").resolved_configs()[1].anneal_fraction == 0.2
    asked = TableRegressor(train_options={"anneal_fraction": 0.1})._new_learner()
    assert {m.train_config.anneal_fraction for m in asked.members} == {0.1}
