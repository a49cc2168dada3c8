"""Ensemble members fitted at once in threads (``TrainConfig.concurrent_members``): each member
is what it is fitted alone on one PyTorch thread, whatever the scheduling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from semiparam import NPTClassifier, NPTRegressor, SPINRegressor
from semiparam.estimators.learner import TableLearner

SMALL = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2, "n_frequencies": 4}


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _table(n: int = 90, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X[:, 0] - 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


def _fit(cls, how: str, X, y, **options):
    train = {"concurrent_members": how, "min_steps": 0, "eval_every": 2, "min_anneal_steps": 4}
    model = cls(
        random_state=1,  # a seed whose three members stop at different steps
        n_estimators=3,
        device="cpu",
        max_steps=120,
        patience=2,
        train_options=train,
        **options,
    )
    return model.fit(X, y)


@pytest.mark.parametrize("cls", [NPTRegressor, SPINRegressor])
def test_concurrent_members_equal_members_fitted_in_turn(cls, one_thread) -> None:
    """With dropout on, masks drawn and members stopping at different steps, the members fitted
    at once in three threads are bit for bit the members fitted one after another (both on one
    PyTorch thread), and PyTorch's thread count is left as it was."""
    X, y = _table()
    options = {"model_options": SMALL} if cls is NPTRegressor else {}
    in_turn = _fit(cls, "never", X, y, **options)
    at_once = _fit(cls, "always", X, y, **options)
    assert in_turn.learner_.concurrent_workers() == 1 and at_once.learner_.concurrent_workers() == 2
    assert torch.get_num_threads() == 1
    histories = list(zip(in_turn.history_.members, at_once.history_.members, strict=True))
    for a, b in histories:
        assert a.steps == b.steps and a.val_loss == b.val_loss and a.best_step == b.best_step
    assert len({a.n_steps for a, _ in histories}) > 1  # they stopped apart
    for a, b in zip(in_turn.learner_.members, at_once.learner_.members, strict=True):
        for p, q in zip(a.module.state_dict().values(), b.module.state_dict().values(), strict=True):
            assert torch.equal(p, q)
    np.testing.assert_array_equal(at_once.predict(X), in_turn.predict(X))


def test_auto_runs_members_at_once_on_a_cpu_with_threads_to_spare() -> None:
    before = torch.get_num_threads()
    X, y = _table(n=40)
    model = NPTRegressor(
        n_estimators=3, device="cpu", max_steps=2, model_options=SMALL, train_options={"min_steps": 0}
    )
    learner = model.fit(X, y).learner_
    try:
        torch.set_num_threads(2)
        assert learner.concurrent_workers() == 3  # all three: one more than the threads
        assert "3 at a time in threads of one PyTorch thread each" in learner.describe_fit()
        torch.set_num_threads(1)
        assert learner.concurrent_workers() == 1  # nothing to gain on one thread
        torch.set_num_threads(4)
        learner.train_config = learner.train_config.replace(concurrent_members="never")
        assert learner.concurrent_workers() == 1
        learner.train_config = learner.train_config.replace(
            concurrent_members="auto", members_together="always"
        )
        assert learner.concurrent_workers() == 1  # stacked members train as one model
    finally:
        torch.set_num_threads(before)


def test_a_member_that_fails_raises_and_restores_the_threads(monkeypatch, one_thread) -> None:
    fit_encoded = TableLearner.fit_encoded

    def failing(self, *args, **kwargs):
        if self.label == "member 2 of 3":
            raise RuntimeError("member two broke")
        return fit_encoded(self, *args, **kwargs)

    monkeypatch.setattr(TableLearner, "fit_encoded", failing)
    torch.set_num_threads(2)
    X, y = _table(n=40)
    with pytest.raises(RuntimeError, match="member two broke"):
        NPTClassifier(
            n_estimators=3, device="cpu", max_steps=3, model_options=SMALL, train_options={"min_steps": 0}
        ).fit(X, y > 0)
    assert torch.get_num_threads() == 2


def test_a_time_budget_is_shared_by_rounds_of_concurrent_members(one_thread) -> None:
    X, y = _table(n=40)
    model = NPTRegressor(
        n_estimators=3,
        device="cpu",
        max_steps=5,
        model_options=SMALL,
        train_options={"concurrent_members": "always", "time_budget": 30.0, "min_steps": 0},
    ).fit(X, y)
    # on one thread two at a time: two rounds, each a share of the budget
    budgets = [m.train_config.time_budget for m in model.learner_.members]
    assert budgets == [pytest.approx(0.95 * 30.0 / 2)] * 3


def test_set_training_switches_only_a_model_in_the_other_mode() -> None:
    from torch import nn

    from semiparam.nn.modes import set_training

    calls = []

    class Counted(nn.Sequential):
        def train(self, mode: bool = True):
            calls.append(mode)
            return super().train(mode)

    model = Counted(nn.Linear(2, 2), nn.Dropout(0.5))
    assert set_training(model) is model and calls == []  # a new module trains already
    set_training(model, False)
    set_training(model, False)
    assert calls == [False] and not model[1].training
    set_training(model)
    assert calls == [False, True] and model[1].training


def test_validation_context_rows_samples_what_the_stopping_rule_reads(monkeypatch) -> None:
    """``validation_context_rows``: the validation loss of training reads a stratified sample of
    that many training rows; the default reads them all; 0 is refused by name."""
    from semiparam import ConfigError, TrainConfig

    seen: list[int] = []
    target_loss = TableLearner._target_loss

    def recording(self, context, queries):
        seen.append(len(context.values))
        return target_loss(self, context, queries)

    monkeypatch.setattr(TableLearner, "_target_loss", recording)
    X, y = _table(n=200)
    options = {"min_steps": 0, "eval_every": 5, "validation_context_rows": 60}
    NPTClassifier(n_estimators=1, device="cpu", max_steps=10, model_options=SMALL, train_options=options).fit(
        X, y > 0
    )
    assert seen and set(seen) == {60}
    seen.clear()
    NPTClassifier(
        n_estimators=1,
        device="cpu",
        max_steps=10,
        model_options=SMALL,
        train_options={"min_steps": 0, "eval_every": 5},
    ).fit(X, y > 0)
    assert seen and set(seen) == {180}  # every training row: 200 less the 10% held out
    with pytest.raises(ConfigError, match="validation_context_rows"):
        TrainConfig(validation_context_rows=0)
