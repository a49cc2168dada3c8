"""TableClassifier / TableRegressor with ``model="auto"``: NPT and SPIN members in one ensemble."""

import copy
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
from semiparam.estimators.explain import Explainer
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
    # each member has its own seed; the members of each family alternate feature transforms,
    # each reading the encoder of its transform, the standardising one the ensemble's own
    assert len({m.seed for m in learner.members}) == 4
    transforms = [m.train_config.feature_transform for m in learner.members]
    assert transforms == ["quantile", "standard", "quantile", "standard"]
    assert auto_classifier.resolved_configs("spin")[1].feature_transform == "mixed"
    quantile, standard = learner.members[0].encoder, learner.members[1].encoder
    assert quantile.quantiles and not standard.quantiles and learner.encoder is standard
    assert [m.encoder for m in learner.members] == [quantile, standard, quantile, standard]
    assert learner.members[2].encoder is quantile


def test_auto_prediction_is_the_mean_of_every_member(auto_classifier, frame):
    X, _, _ = frame
    queries = X.iloc[70:]
    proba = auto_classifier.predict_proba(queries)
    per_member = [  # each member from the rows as its own encoder encodes them
        m.predict_columns(queries, ["__target__"], absent=["__target__"])["__target__"]["proba"]
        for m in auto_classifier.learner_.members
    ]
    np.testing.assert_allclose(proba, np.mean(per_member, axis=0), rtol=1e-6)
    # rows given already encoded (by the ensemble's encoder) are re-encoded for each member
    learner = auto_classifier.learner_
    encoded = learner.encoder.transform(queries, absent=["__target__"])
    given = learner.predict_columns(encoded, ["__target__"])["__target__"]["proba"]
    np.testing.assert_allclose(given, proba, rtol=1e-5, atol=1e-7)
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
    # the ensemble's encoder and each member's, shared as when fitted
    learner, fitted = loaded.learner_, auto_classifier.learner_
    assert learner.encoder == fitted.encoder and not learner.encoder.quantiles
    assert [m.encoder for m in learner.members] == [m.encoder for m in fitted.members]
    assert len({id(m.encoder) for m in learner.members}) == 2
    assert learner.members[1].encoder is learner.encoder


def test_mixed_transforms_in_explanations_and_contexts(auto_classifier, frame):
    """The explanations' probes and a new context reach each member in its own encoding."""
    X, y, _ = frame
    queries = X.iloc[70:]
    ex = Explainer(auto_classifier, None, None)
    np.testing.assert_allclose(
        ex.predict(ex.queries(queries)), auto_classifier.predict_proba(queries), rtol=1e-5, atol=1e-7
    )
    given = Explainer(auto_classifier, (X.iloc[:40], y[:40]), None)
    table = auto_classifier._context_table(X.iloc[:40], y[:40])
    own = [m.encoder.transform(table) for m in given.members]
    for (context, _), rows in zip(given.contexts, own, strict=True):
        np.testing.assert_array_equal(context.values, rows.values)
    model = copy.deepcopy(auto_classifier)
    model.set_context(X.iloc[:40], y[:40])
    np.testing.assert_allclose(
        given.predict(given.queries(queries)), model.predict_proba(queries), rtol=1e-5, atol=1e-7
    )
    for member, rows in zip(model.learner_.members, own, strict=True):
        if member.keeps_training_rows:
            np.testing.assert_array_equal(member.context.rows.values, rows.values)


def test_a_single_family_may_mix_transforms(frame):
    X, _, y = frame
    fast = {**FAST, "model_options": OPTIONS["npt"]}
    reg = NPTRegressor(n_estimators=3, train_options={"feature_transform": "mixed"}, **fast)
    reg.fit(X.iloc[:70], y[:70])
    transforms = [m.train_config.feature_transform for m in reg.learner_.members]
    assert transforms == ["quantile", "standard", "quantile"]
    assert np.isfinite(reg.predict(X.iloc[70:])).all()
    # one member alone: the quantile map
    one = NPTRegressor(n_estimators=1, train_options={"feature_transform": "mixed"}, **fast)
    one.fit(X.iloc[:70], y[:70])
    assert one.learner_.members[0].encoder.quantiles and one.learner_.encoder.quantiles


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
    other = TrainConfig.preset("cpu", model="spin").replace(min_category_count=cpu.min_category_count + 1)
    with pytest.raises(ValueError, match="min_category_count differ"):
        EnsembleLearner("npt", npt, cpu, more_families=[Family("spin", spin, other, 1)])
    # a feature transform of their own is fine: each member reads its own encoding
    standard = TrainConfig.preset("cpu", model="spin").replace(feature_transform="standard")
    mixed = EnsembleLearner("npt", npt, cpu, n_members=2, more_families=[Family("spin", spin, standard, 1)])
    assert [m.train_config.feature_transform for m in mixed.members] == ["quantile"] * 2 + ["standard"]


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
