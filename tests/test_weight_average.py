"""The moving average of the weights of a table trained in batches (batch_weight_average)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from semiparam import NPTRegressor, SPINRegressor
from semiparam._config import ConfigError
from semiparam.training.config import TrainConfig
from semiparam.training.engine import Engine

SMALL = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2, "dropout": 0.0, "n_frequencies": 4}


class _Line(Engine):
    """A linear fit of fixed rows: enough of a model to watch the average."""

    def __init__(self, decay: float) -> None:
        torch.manual_seed(0)
        self.x, self.y = torch.randn(32, 3), torch.randn(32)
        super().__init__(torch.nn.Linear(3, 1), TrainConfig(learning_rate=0.1), weight_average=decay)

    def step_loss(self, batch, step):
        loss = ((self.model(self.x).squeeze(1) - self.y) ** 2).mean()
        return loss, {"loss": float(loss.detach())}


def test_the_average_follows_the_weights_and_validation_reads_it() -> None:
    engine = _Line(0.8)
    expected = None
    for step in range(5):
        engine.train_step(None, step)
        now = [p.detach().clone() for p in engine.params]
        if expected is not None:
            now = [0.8 * e + 0.2 * w for e, w in zip(expected, now, strict=True)]
        expected = now
    assert engine.averaged is not None
    for a, e in zip(engine.averaged, expected, strict=True):
        torch.testing.assert_close(a, e)
    live = [p.detach().clone() for p in engine.params]
    assert not all(torch.equal(a, w) for a, w in zip(engine.averaged, live, strict=True))
    with engine.averaged_weights():  # what validation and the best checkpoint see
        for p, e in zip(engine.params, expected, strict=True):
            torch.testing.assert_close(p.detach(), e)
    for p, w in zip(engine.params, live, strict=True):  # the training goes on from its own
        assert torch.equal(p.detach(), w)
    assert _Line(0.0).averaged is None


def _table(n: int = 240, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X[:, 0] - 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


def _fit(decay: float, batch_size: int | None, cls=NPTRegressor, **train):
    X, y = _table()
    model = cls(
        random_state=1,
        n_estimators=1,
        max_steps=60,
        batch_size=batch_size,
        device="cpu",
        model_options=SMALL if cls is NPTRegressor else {"d_embedding": 8, "n_heads": 2},
        train_options={"batch_weight_average": decay, "min_steps": 0, "eval_every": 5, **train},
    )
    return model.fit(X, y), X


@pytest.mark.parametrize("cls", [NPTRegressor, SPINRegressor])
def test_a_table_in_batches_averages_and_one_in_a_full_batch_does_not(cls) -> None:
    averaged, X = _fit(0.9, 48, cls)
    plain, _ = _fit(0.0, 48, cls)
    assert not np.allclose(averaged.predict(X), plain.predict(X))
    averaged, X = _fit(0.9, None, cls)  # 240 rows: one full batch under the cpu preset
    plain, _ = _fit(0.0, None, cls)
    np.testing.assert_array_equal(averaged.predict(X), plain.predict(X))


def test_members_together_average_as_one_after_another() -> None:
    X, y = _table()
    fits = []
    for together in ("never", "always"):
        model = NPTRegressor(
            random_state=3,
            n_estimators=2,
            max_steps=80,
            batch_size=48,
            patience=2,
            device="cpu",
            model_options=SMALL,
            train_options={
                "members_together": together,
                "min_steps": 0,
                "eval_every": 2,
                "min_anneal_steps": 4,
            },
        )
        fits.append(model.fit(X, y))
    serial, together = fits
    assert together.learner_.trains_together() and not serial.learner_.trains_together()
    for a, b in zip(serial.history_.members, together.history_.members, strict=True):
        assert a.steps == b.steps and a.best_step == b.best_step
        np.testing.assert_allclose(a.val_loss, b.val_loss, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(together.predict(X), serial.predict(X), rtol=1e-3, atol=1e-3)


def test_the_cpu_presets_average_and_a_decay_of_one_is_refused() -> None:
    assert TrainConfig.cpu().batch_weight_average > 0
    assert TrainConfig.spin_cpu().batch_weight_average == TrainConfig.cpu().batch_weight_average
    with pytest.raises(ConfigError, match="batch_weight_average"):
        TrainConfig(batch_weight_average=1.0)
