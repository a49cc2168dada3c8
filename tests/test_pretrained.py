"""The prior-fitted NPT (issue 51): the prior over tables, pretraining with resume, and
``init="pretrained"`` prediction, all at tiny sizes on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from semiparam import NPTClassifier, NPTRegressor, SPINClassifier, TableClassifier
from semiparam._config import ConfigError
from semiparam._io import ModelFileError
from semiparam.data.prior import PriorConfig, TablePrior, encode_task, normal_scores
from semiparam.data.table import DataValidationError
from semiparam.models.npt import NPT, NPTConfig
from semiparam.training.checkpoint import TrainingCheckpoint
from semiparam.training.pretrain import PretrainConfig, pretrain, prior_layout

TINY = PriorConfig(min_rows=12, max_rows=24, max_features=4, max_classes=3)
TINY_MODEL = NPTConfig.prior().replace(d_embedding=4, n_blocks=2, n_heads=2, n_frequencies=2)
TINY_TRAINING = PretrainConfig(tasks_per_step=3, eval_tasks=4, eval_every=2, warmup_steps=2)


def test_prior_tasks_are_seeded_varied_and_resume_from_their_state():
    a, b = TablePrior(seed=3), TablePrior(seed=3)
    tasks = [a.sample() for _ in range(200)]
    for t, u in zip(tasks[:5], [b.sample() for _ in range(5)]):
        np.testing.assert_array_equal(t.X, u.X)
        np.testing.assert_array_equal(t.y, u.y)
    kinds = [t.n_classes for t in tasks]
    assert 0 in kinds and 2 in kinds and max(kinds) > 5  # regression, binary and many classes
    assert any(np.isnan(t.X).any() for t in tasks) and any(t.categorical.any() for t in tasks)
    for t in tasks:
        n, f = t.X.shape
        assert 1 <= f <= 16 and 2 <= t.n_train < n and len(t.y) == n
        if t.n_classes:  # every class of a query row was seen in the training rows, ids 0..k-1
            assert set(np.unique(t.y)) <= set(np.unique(t.y[: t.n_train])) == set(range(t.n_classes))
        for j in np.flatnonzero(t.categorical):
            seen = t.X[~np.isnan(t.X[:, j]), j]
            np.testing.assert_array_equal(seen, np.round(seen))
    state = a.state_dict()
    after = a.sample()
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.sample().X, after.X)


def test_prior_rate_counts_tasks_and_rows_drawn_in_its_time():
    from semiparam.pretraining import prior_rate

    rate = prior_rate(seconds=0.3)
    assert rate["tasks"] >= 1 and rate["seconds"] >= 0.3
    assert rate["tasks_per_second"] == pytest.approx(rate["tasks"] / rate["seconds"])
    assert rate["rows_per_second"] >= 32 * rate["tasks_per_second"]  # every task has 32+ rows


def test_encode_task_hides_queries_targets_and_unused_slots():
    X = np.array([[1.0, 5.0], [2.0, np.nan], [2.0, 7.0], [9.0, 1.0]])
    y = np.array([1.0, 0.0, 1.0, 1.0])
    values, hidden = encode_task(X, y, n_train=3, n_classes=2, n_features=4, positions=np.array([2, 0]))
    assert values.shape == hidden.shape == (4, 6)
    assert hidden[:, [1, 3, 5]].all()  # unused slots and the value slot of a classification
    assert hidden[3, 4] and not hidden[:3, 4].any()  # the query's class hidden
    np.testing.assert_array_equal(values[:3, 4], [1.0, 0.0, 1.0])
    assert hidden[1, 0] and not hidden[[0, 2, 3], 0].any()  # the missing cell
    # feature 0 in slot 2: normal scores of the training rows' mid-ranks, ties equal
    assert values[1, 2] == values[2, 2] and values[0, 2] < values[1, 2] < values[3, 2]
    reg_values, reg_hidden = encode_task(X, y * 10, n_train=3, n_classes=0, n_features=2)
    assert reg_hidden[:, 2].all() and abs(reg_values[:3, 3].mean()) < 1e-6  # standardised


def test_normal_scores_are_monotone_and_keep_missing():
    train = np.array([3.0, 1.0, 2.0, np.nan, 2.0])
    out = normal_scores(train, np.array([0.0, 1.0, 2.0, 2.5, 10.0, np.nan]))
    assert np.isnan(out[-1]) and np.all(np.diff(out[:-1]) >= 0) and out[2] == 0.0
    assert np.isnan(normal_scores(np.array([np.nan]), np.array([1.0]))).all()


def _tiny_module() -> NPT:
    torch.manual_seed(0)
    return NPT(TINY_MODEL, prior_layout(TINY.max_features, TINY.max_classes))


def test_pretraining_learns_logs_held_out_loss_and_resumes_exactly(tmp_path):
    straight = _tiny_module()
    run = pretrain(
        straight, TablePrior(TINY, seed=0), TINY_TRAINING, n_features=4, max_steps=6, progress=False
    )
    assert run.steps == 6 and [e["step"] for e in run.evaluations] == [2, 4, 6]
    assert {"loss", "accuracy", "classification", "regression"} <= set(run.evaluations[-1])

    resumed = _tiny_module()
    checkpoint = TrainingCheckpoint(tmp_path, "tiny", every_steps=2, every_seconds=None)
    first = pretrain(
        resumed, TablePrior(TINY, seed=0), TINY_TRAINING, n_features=4, max_steps=3, checkpoint=checkpoint
    )
    assert first.steps == 3
    again = _tiny_module()  # a new process: fresh weights, the state read from the checkpoint
    second = pretrain(
        again, TablePrior(TINY, seed=0), TINY_TRAINING, n_features=4, max_steps=6, checkpoint=checkpoint
    )
    assert second.steps == 6
    assert [e["step"] for e in second.evaluations] == [2, 3, 4, 6]  # and at the end of each run
    assert set(second.seconds_by_device) == {"cpu"} and second.seconds_by_device["cpu"] > 0
    for (name, p), q in zip(straight.state_dict().items(), again.state_dict().values()):
        torch.testing.assert_close(p, q, msg=name)
    np.testing.assert_allclose(second.history.train_loss, run.history.train_loss, rtol=1e-5)


def test_a_cooldown_branches_off_the_checkpoint_and_decays_the_rate_to_zero(tmp_path):
    from semiparam.training.pretrain import PriorTrainer

    checkpoint = TrainingCheckpoint(tmp_path, "tiny", every_steps=2, every_seconds=None)
    with pytest.raises(ValueError, match="no"):
        pretrain(_tiny_module(), TablePrior(TINY), TINY_TRAINING, n_features=4, max_steps=1, cooldown_steps=2)
    pretrain(
        _tiny_module(), TablePrior(TINY), TINY_TRAINING, n_features=4, max_steps=4, checkpoint=checkpoint
    )
    before = checkpoint.read()
    cooled = _tiny_module()
    run = pretrain(
        cooled,
        TablePrior(TINY),
        TINY_TRAINING,
        n_features=4,
        max_steps=99,
        checkpoint=checkpoint,
        cooldown_steps=3,
    )
    assert run.steps == 7 and run.evaluations[-1]["step"] == 7  # scored at its end
    after = checkpoint.read()  # the constant-rate run's state, untouched
    assert after["step"] == before["step"] == 3
    for name, p in after["model"].items():
        torch.testing.assert_close(p, before["model"][name], msg=name)
    assert any(not torch.equal(p, before["model"][n]) for n, p in cooled.state_dict().items())
    trainer = PriorTrainer(_tiny_module(), TINY_TRAINING, 10, cooldown=(4, 4))
    rates = [trainer.learning_rate(step) for step in range(3, 9)]
    full = TINY_TRAINING.learning_rate
    assert rates == pytest.approx([full, full, 0.75 * full, 0.5 * full, 0.25 * full, 0.0])


@pytest.fixture
def tiny_weights(tmp_path, monkeypatch):
    """Tiny pretrained weights in place of the shipped ones."""
    module = _tiny_module()
    pretrain(module, TablePrior(TINY, seed=0), TINY_TRAINING, n_features=4, max_steps=4, progress=False)
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, tmp_path / "npt_prior.safetensors")
    card = {"model_config": TINY_MODEL.to_dict(), "n_features": 4, "max_classes": 3}
    (tmp_path / "npt_prior.json").write_text(json.dumps(card))
    monkeypatch.setattr("semiparam.estimators.pretrained.weights_dir", lambda: tmp_path)
    return tmp_path


def _table(n: int = 60, n_features: int = 6, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(n, n_features)), columns=[f"f{i}" for i in range(n_features)])
    X["colour"] = rng.choice(["red", "green", "blue"], size=n)
    X.loc[3, "f0"] = np.nan
    y = np.where(X["f1"] + (X["colour"] == "red") > 0.5, "yes", "no")
    return X, y


def test_pretrained_classifier_predicts_in_context_without_training(tiny_weights):
    X, y = _table()  # 7 features for 4 slots: each view takes another 4 of them
    clf = NPTClassifier(init="pretrained", random_state=0).fit(X[:40], y[:40])
    proba = clf.predict_proba(X[40:])
    assert proba.shape == (20, 2) and np.allclose(proba.sum(1), 1.0)
    assert set(clf.predict(X[40:])) <= {"no", "yes"}
    again = NPTClassifier(init="pretrained", random_state=0).fit(X[:40], y[:40]).predict_proba(X[40:])
    np.testing.assert_array_equal(proba, again)
    flipped = clf.set_context(X[:40], np.where(y[:40] == "yes", "no", "yes")).predict_proba(X[40:])
    assert not np.allclose(flipped, proba)  # the context is what it predicts from
    reg = NPTRegressor(init="pretrained", n_estimators=2).fit(X[:40], X["f2"][:40] * 100 + 7)
    mean = reg.predict(X[40:])
    assert mean.shape == (20,) and np.isfinite(mean).all()


def test_pretrained_refuses_what_it_cannot_do(tiny_weights):
    X, y = _table()
    with pytest.raises(ConfigError, match="no pretrained weights"):
        SPINClassifier(init="pretrained").fit(X, y)
    with pytest.raises(ConfigError, match="no pretrained weights"):
        TableClassifier(init="pretrained").fit(X, y)
    with pytest.raises(ConfigError, match="max_steps"):
        NPTClassifier(init="pretrained", max_steps=-1).fit(X, y)
    with pytest.raises(ConfigError, match="init must be"):
        NPTClassifier(init="warm").fit(X, y)
    with pytest.raises(DataValidationError, match="at most 3 classes"):
        NPTClassifier(init="pretrained").fit(X, np.arange(len(X)) % 4)
    with pytest.raises(ValueError, match="sample_weight"):
        NPTClassifier(init="pretrained").fit(X, y, sample_weight=np.arange(len(X)) + 1.0)
    with pytest.raises(ValueError, match="X_unlabeled"):
        NPTClassifier(init="pretrained").fit(X, y, X_unlabeled=X)
    fitted = NPTClassifier(init="pretrained").fit(X, y)
    with pytest.raises(NotImplementedError, match="explanations"):
        fitted.explain_rows(X[:3])
    with pytest.raises(NotImplementedError, match="feature importances"):
        _ = fitted.feature_importances_


def test_a_pretrained_model_saves_and_loads_to_the_same_predictions(tiny_weights, tmp_path, monkeypatch):
    X, y = _table()
    clf = NPTClassifier(init="pretrained", n_estimators=2).fit(X[:40], y[:40])
    loaded = NPTClassifier.load(clf.save(tmp_path / "zero"))
    np.testing.assert_array_equal(loaded.predict_proba(X[40:]), clf.predict_proba(X[40:]))
    assert loaded.get_params()["init"] == "pretrained"
    tuned = NPTRegressor(init="pretrained", max_steps=12).fit(X[:40], X["f2"][:40])
    again = NPTRegressor.load(tuned.save(tmp_path / "tuned"))
    np.testing.assert_array_equal(again.predict(X[40:]), tuned.predict(X[40:]))
    assert again.history_.n_steps == tuned.history_.n_steps
    # other shipped weights: a zero-shot model saved with the old ones is refused
    other = tmp_path / "other_weights"
    other.mkdir()
    weights = load_file(tiny_weights / "npt_prior.safetensors")
    save_file({k: v + 1 for k, v in weights.items()}, other / "npt_prior.safetensors")
    (other / "npt_prior.json").write_text((tiny_weights / "npt_prior.json").read_text())
    monkeypatch.setattr("semiparam.estimators.pretrained.weights_dir", lambda: other)
    with pytest.raises(ModelFileError, match="other pretrained weights"):
        NPTClassifier.load(tmp_path / "zero")


def test_fine_tuning_starts_from_the_pretrained_weights_and_stops_on_held_out_rows(tiny_weights):
    X, y = _table(n=80)
    zero = NPTClassifier(init="pretrained", random_state=0).fit(X[:60], y[:60])
    tuned = NPTClassifier(init="pretrained", max_steps=30, random_state=0).fit(X[:60], y[:60])
    history = tuned.history_
    assert 0 < history.n_steps <= 30 and history.val_loss
    if history.best_step is not None:  # a step beat the pretrained weights on the held-out rows
        assert not np.allclose(zero.predict_proba(X[60:]), tuned.predict_proba(X[60:]))
    shipped = NPTClassifier(init="pretrained", random_state=0).fit(X[:60], y[:60])  # weights untouched
    np.testing.assert_array_equal(zero.predict_proba(X[60:]), shipped.predict_proba(X[60:]))
    with_eval = NPTRegressor(init="pretrained", max_steps=12, random_state=0)
    with_eval.fit(X[:60], X["f2"][:60], eval_set=(X[60:], X["f2"][60:]))
    assert np.isfinite(with_eval.predict(X[60:])).all() and with_eval.history_.val_loss


def test_fine_tuning_keeps_the_pretrained_weights_when_no_step_beats_them(tiny_weights, monkeypatch):
    X, y = _table(n=80)
    zero = NPTClassifier(init="pretrained", random_state=0).fit(X[:60], y[:60])
    from semiparam.estimators import pretrained

    class Ruinous(pretrained.PriorTrainer):  # every step scrambles the weights
        def train_step(self, batch, step):
            stats = super().train_step(batch, step)
            with torch.no_grad():
                for p in self.model.parameters():
                    p.add_(torch.randn_like(p) * 3.0)
            return stats

    monkeypatch.setattr(pretrained, "PriorTrainer", Ruinous)
    tuned = NPTClassifier(init="pretrained", max_steps=10, random_state=0).fit(X[:60], y[:60])
    assert tuned.history_.n_steps > 0 and tuned.history_.best_step is None
    assert "kept" in tuned.history_.stop_reason
    np.testing.assert_allclose(zero.predict_proba(X[60:]), tuned.predict_proba(X[60:]), rtol=1e-6)
