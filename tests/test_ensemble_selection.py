"""Ensemble selection of ``model="auto"``: the families weighed on the rows they all held out."""

import functools
import json

import numpy as np
import pandas as pd
import pytest

from semiparam import ConfigError, TableClassifier, TableRegressor
from semiparam.estimators._ensemble import MIN_SELECTION_ROWS, EnsembleLearner, Family, greedy_selection
from semiparam.estimators.learner import HELD_OUT_FILE, TableLearner, prediction_loss
from semiparam.models.npt import NPTConfig
from semiparam.models.spin import SPINConfig
from semiparam.training.config import TrainConfig

TINY = {"d_embedding": 8, "n_heads": 2, "dropout": 0.0}
OPTIONS = {"npt": {**TINY, "n_blocks": 2}, "spin": {**TINY, "n_blocks": 1}}
ENSEMBLE_SELECTION_ROUNDS = 25  # as AutoGluon's weighted ensemble: a weight is a multiple of 1/25
SELECT = {"ensemble_selection": ENSEMBLE_SELECTION_ROUNDS}
FAST = dict(
    max_steps=20,
    learning_rate=1e-2,
    model_options=OPTIONS,
    train_options=SELECT,
    random_state=0,
    verbose=False,
)
TARGET = "__target__"
pytestmark = pytest.mark.filterwarnings("ignore:max_steps=.* is below min_steps")


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    n = 300
    X = pd.DataFrame({"num": rng.normal(size=n), "cat": rng.choice(["a", "b", "c"], n)})
    y = 2.0 * X["num"].to_numpy() + (X["cat"] == "a") + rng.normal(scale=0.3, size=n)
    return X, y


@pytest.fixture(scope="module")
def regressor(frame):
    X, y = frame
    return TableRegressor(n_estimators=2, **FAST).fit(X.iloc[:240], y[:240])


def member_means(model, X):
    encoded = model.learner_.encoder.transform(X, absent=[TARGET])
    return np.stack([m.predict_columns(encoded, [TARGET])[TARGET]["mean"] for m in model.learner_.members])


def test_greedy_selection_takes_the_better_candidate_alone_and_mixes_complementary_ones():
    truth = np.linspace(-1.0, 1.0, 50)

    def mse(prediction):
        return float(np.mean((prediction - truth) ** 2))

    good, bad = truth + 0.01, truth + 1.0
    np.testing.assert_array_equal(greedy_selection([bad, good], mse, 10), [0.0, 1.0])
    # errors of opposite sign cancel in the mean: half of each
    np.testing.assert_allclose(greedy_selection([truth + 0.5, truth - 0.5], mse, 10), [0.5, 0.5])
    # +1 and -0.25 cancel at a fifth of the first
    weights = greedy_selection([truth + 1.0, truth - 0.25], mse, ENSEMBLE_SELECTION_ROUNDS)
    assert weights.sum() == pytest.approx(1.0) and 0.12 <= weights[0] <= 0.28
    # a tie goes to the earlier candidate
    np.testing.assert_array_equal(greedy_selection([good, good.copy()], mse, 4), [1.0, 0.0])


def test_the_spin_members_hold_out_the_rows_of_the_npt_members(regressor):
    npt, spin = regressor.learner_.members[:2], regressor.learner_.members[2:]
    assert [m.model_name for m in npt + spin] == ["npt", "npt", "spin", "spin"]
    assert all(m.split_seed is None for m in npt)  # NPT's members split as a family alone does
    for a, b in zip(npt, spin, strict=True):
        assert b.split_seed == a.seed != b.seed
        np.testing.assert_array_equal(a.validation_index, b.validation_index)
        np.testing.assert_array_equal(a.held_out[TARGET]["rows"], a.validation_index)
    assert not np.array_equal(npt[0].validation_index, npt[1].validation_index)


def test_a_member_beyond_the_first_familys_size_holds_out_rows_of_its_own():
    # 1 NPT + 2 SPIN (model="auto" on a large table): the first SPIN member shares the NPT
    # member's held-out rows, the second keeps a split of its own, so no two members of a family
    # hold out the same rows
    families = [Family("npt", NPTConfig(), TrainConfig(), 1), Family("spin", SPINConfig(), TrainConfig(), 2)]
    learner = EnsembleLearner(
        families[0].model_name, families[0].model_config, families[0].train_config,
        n_members=1, more_families=families[1:], seed=0,
    )  # fmt: skip
    npt, spin_a, spin_b = learner.members
    assert npt.split_seed is None and spin_a.split_seed == npt.seed and spin_b.split_seed is None


def test_family_weights_are_the_greedy_selection_on_the_rows_both_families_held_out(regressor, frame):
    X, y = frame
    members = regressor.learner_.members
    rows = np.unique(np.concatenate([m.validation_index for m in members[:2]]))
    assert len(rows) >= MIN_SELECTION_ROWS

    def family_prediction(family):  # each row: the mean of the family's members that held it out
        total, count = np.zeros(len(rows)), np.zeros(len(rows))
        for m in family:
            where = np.searchsorted(rows, m.held_out[TARGET]["rows"])
            total[where] += m.held_out[TARGET]["mean"]
            count[where] += 1
        return total / count

    reference = {"truth": y[:240][rows], "weight": np.ones(len(rows))}
    loss = functools.partial(prediction_loss, reference)
    expected = greedy_selection(
        [family_prediction(members[:2]), family_prediction(members[2:])], loss, ENSEMBLE_SELECTION_ROUNDS
    )
    weights = [m.ensemble_weights[TARGET] for m in members]
    np.testing.assert_allclose(weights, np.repeat(expected / 2, 2))
    # the held-out truth is the label in its own units
    np.testing.assert_allclose(members[0].held_out[TARGET]["truth"], y[:240][members[0].validation_index])


def test_the_prediction_is_the_members_mean_under_their_weights(regressor, frame):
    X, _ = frame
    queries = X.iloc[240:]
    means = member_means(regressor, queries)
    weights = np.array([m.ensemble_weights[TARGET] for m in regressor.learner_.members])
    np.testing.assert_allclose(regressor.predict(queries), weights @ means, rtol=1e-9)
    # other weights (as a selection could give): the same rule
    saved = [dict(m.ensemble_weights) for m in regressor.learner_.members]
    try:
        for m, w in zip(regressor.learner_.members, (0.4, 0.4, 0.1, 0.1), strict=True):
            m.ensemble_weights = {TARGET: w}
        np.testing.assert_allclose(regressor.predict(queries), [0.4, 0.4, 0.1, 0.1] @ means, rtol=1e-9)
        regressor.learner_.weighted = False  # every member the same, whatever their weights
        np.testing.assert_allclose(regressor.predict(queries), means.mean(axis=0), rtol=1e-9)
        regressor.learner_.weighted = True
        # a view of the SPIN members alone: their weights renormalised (equal), as the family alone
        view = regressor.with_members(regressor.learner_.members[2:])
        np.testing.assert_allclose(view.predict(queries), means[2:].mean(axis=0), rtol=1e-9)
    finally:
        regressor.learner_.weighted = True
        for m, w in zip(regressor.learner_.members, saved, strict=True):
            m.ensemble_weights = w


def test_without_selection_or_without_enough_shared_rows_every_member_weighs_the_same(frame):
    X, y = frame
    off = TableRegressor(n_estimators=2, **{**FAST, "train_options": {}})  # the default: no selection
    off.fit(X.iloc[:240], y[:240])
    assert all(m.ensemble_weights == {} for m in off.learner_.members)
    np.testing.assert_allclose(off.predict(X.iloc[240:]), member_means(off, X.iloc[240:]).mean(axis=0))
    # 90 rows: 9 held out per member, 18 shared rows, fewer than the selection needs
    small = TableRegressor(n_estimators=2, **FAST).fit(X.iloc[:90], y[:90])
    assert all(m.ensemble_weights == {} for m in small.learner_.members)
    # one family: nothing to weigh
    one = {**FAST, "model_options": OPTIONS["npt"]}
    npt = TableRegressor(model="npt", n_estimators=2, **one).fit(X.iloc[:240], y[:240])
    assert all(m.ensemble_weights == {} and m.split_seed is None for m in npt.learner_.members)


def test_the_weights_are_saved_and_the_held_out_rows_are_not(regressor, frame, tmp_path):
    X, _ = frame
    path = regressor.save(tmp_path / "auto")
    loaded = TableRegressor.load(path)
    np.testing.assert_array_equal(loaded.predict(X.iloc[240:]), regressor.predict(X.iloc[240:]))
    for a, b in zip(loaded.learner_.members, regressor.learner_.members, strict=True):
        assert a.ensemble_weights == b.ensemble_weights
        assert a.held_out == {}  # training labels: never written with the model
    files = [f.name for f in path.rglob("*")]
    assert HELD_OUT_FILE not in files
    meta = json.loads((path / "member_2" / "semiparam.json").read_text())
    assert "held_out" not in json.dumps(meta)


def test_packed_members_carry_their_held_out_rows(regressor):
    member = regressor.learner_.members[2]
    back = TableLearner.from_files(member.to_files())
    assert back.ensemble_weights == member.ensemble_weights
    assert set(back.held_out[TARGET]) == set(member.held_out[TARGET])
    for key, value in member.held_out[TARGET].items():
        np.testing.assert_array_equal(back.held_out[TARGET][key], value)


def test_the_rows_of_an_eval_set_weigh_the_families(frame):
    X, y = frame
    labels = np.where(y > 0, "up", "down")
    clf = TableClassifier(n_estimators=2, **FAST)
    clf.fit(X.iloc[:200], labels[:200], eval_set=(X.iloc[200:240], labels[200:240]))
    members = clf.learner_.members
    for m in members:  # every member predicted the same 40 rows, after the 200 it trained on
        np.testing.assert_array_equal(m.held_out[TARGET]["rows"], 200 + np.arange(40))
    weights = [m.ensemble_weights[TARGET] for m in members]
    assert sum(weights) == pytest.approx(1.0)
    assert weights[0] == weights[1] and weights[2] == weights[3]
    proba = clf.predict_proba(X.iloc[240:])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_ensemble_selection_is_a_count_of_rounds():
    assert TrainConfig().ensemble_selection == 0  # the papers' single model: no selection
    assert TrainConfig.cpu().ensemble_selection == 0  # the plain average scored as well
    for bad in (-1, True):
        with pytest.raises(ConfigError, match="ensemble_selection must be an int"):
            TrainConfig(ensemble_selection=bad)
