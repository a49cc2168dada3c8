"""Training to convergence, ensembles and the preprocessing of the out-of-the-box estimators."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from semiparam import ConfigError, NPTClassifier, NPTRegressor, SPINRegressor
from semiparam.data.table import TableEncoder, infer_schema
from semiparam.estimators._ensemble import member_seeds
from semiparam.models.npt import NPTConfig
from semiparam.nn.columns import ColumnEmbedding, ColumnLayout
from semiparam.training.config import TrainConfig
from semiparam.training.trainer import BestCheckpoint, Trainer

from .conftest import TINY_MODEL

# -- the adaptive schedule -------------------------------------------------------------------------


class _Counter(torch.nn.Module):
    """A one-parameter model whose trainer we drive with a scripted validation curve."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))


def _trainer(config: TrainConfig, val_curve, patience=None, smoothing=0.0):
    from semiparam.nn.columns import ColumnOutputs

    model = _Counter()
    layout = ColumnLayout(("continuous",), (0,))
    trainer = Trainer(
        model,
        layout,
        torch.tensor([True]),
        config,
        forward=lambda m, v, h: ColumnOutputs((v * m.w).unsqueeze(-1).unsqueeze(-1)[:, :, :, 0], []),
        callbacks=[BestCheckpoint(patience, smoothing)],
    )
    calls = iter(val_curve)
    return trainer, lambda: next(calls)


def _batch(n=8):
    from semiparam.training.trainer import Batch

    return Batch(torch.ones(n, 1), torch.zeros(n, 1, dtype=torch.bool), torch.ones(n, dtype=torch.bool))


def test_plateau_starts_an_anneal_then_stops():
    cfg = TrainConfig(
        lr_schedule="adaptive", max_steps=1000, eval_every=1, anneal_fraction=0.5, min_anneal_steps=2
    )
    # improves for 10 evaluations, then flat: patience 3 -> anneal from step 13 for 7 steps
    curve = [10.0 - k for k in range(10)] + [5.0] * 1000
    trainer, evaluate = _trainer(cfg, curve, patience=3)
    history = trainer.fit(lambda step: _batch(), evaluate)
    assert history.anneal_start == 13
    assert history.n_steps == 13 + max(2, round(0.5 * 13))
    assert history.stop_reason == "plateau, annealed"
    lrs = [trainer.learning_rate(s) for s in range(history.n_steps)]
    assert lrs[12] == pytest.approx(cfg.learning_rate)  # flat before the anneal
    assert lrs[-1] == pytest.approx(0.0, abs=1e-12)  # annealed to zero at the last step
    assert all(a >= b for a, b in zip(lrs[13:], lrs[14:]))


def test_anneal_patience_ends_an_anneal_that_finds_nothing_better():
    cfg = TrainConfig(
        lr_schedule="adaptive", max_steps=1000, eval_every=1, anneal_fraction=0.5, min_anneal_steps=2,
        anneal_patience=2,
    )  # fmt: skip
    # as above: the anneal starts at step 13 (planned: 6 steps); no evaluation in it improves on
    # the best, so it ends after its second
    curve = [10.0 - k for k in range(10)] + [5.0] * 1000
    trainer, evaluate = _trainer(cfg, curve, patience=3)
    history = trainer.fit(lambda step: _batch(), evaluate)
    assert history.anneal_start == 13 and history.n_steps == 15
    assert history.stop_reason == "plateau, annealed (ended early at step 15)"
    assert history.best_step == 9
    # an anneal that keeps improving runs its length
    curve = [10.0 - k for k in range(10)] + [5.0] * 3 + [0.9 - 1e-4 * k for k in range(1000)]
    trainer, evaluate = _trainer(cfg, curve, patience=3)
    history = trainer.fit(lambda step: _batch(), evaluate)
    assert history.n_steps == 13 + round(0.5 * 13) and history.stop_reason == "plateau, annealed"


def test_ceiling_leaves_room_for_the_anneal():
    cfg = TrainConfig(lr_schedule="adaptive", max_steps=50, eval_every=5, anneal_fraction=0.25)
    trainer, evaluate = _trainer(cfg, [1.0 / (k + 1) for k in range(100)], patience=100)
    history = trainer.fit(lambda step: _batch(), evaluate)
    assert history.n_steps == 50
    assert history.anneal_start == int(50 / 1.25)
    assert history.stop_reason == "max_steps, annealed"
    assert trainer.learning_rate(49) == pytest.approx(0.0, abs=1e-12)


def test_smoothed_patience_ignores_one_noisy_evaluation():
    cfg = TrainConfig(lr_schedule="constant", max_steps=40, eval_every=1)
    # one lucky low evaluation early in a falling curve: on the raw loss, patience 3 stops at
    # step 4; the smoothed curve keeps falling, so training goes on
    curve = [4.0, 2.0, 3.5, 3.0, 2.5, 2.2, 1.9, 1.6, 1.3, 1.0] + [1.0] * 40
    trainer, evaluate = _trainer(cfg, curve, patience=3, smoothing=0.0)
    assert trainer.fit(lambda step: _batch(), evaluate).n_steps == 5
    trainer, evaluate = _trainer(cfg, curve, patience=3, smoothing=0.5)
    history = trainer.fit(lambda step: _batch(), evaluate)
    assert history.n_steps > 10 and history.stop_reason == "plateau"
    assert history.best_step == 9  # the checkpoint is still chosen on the raw loss


def test_time_budget_stops_training_and_anneals():
    cfg = TrainConfig(lr_schedule="adaptive", max_steps=10**6, eval_every=10, time_budget=0.3)
    trainer, evaluate = _trainer(cfg, [1.0] * 10**6, patience=None)
    history = trainer.fit(lambda step: _batch(), evaluate)
    assert history.stop_reason == "time_budget, annealed"
    assert history.seconds < 3.0  # the budget plus one anneal; not a timing assertion of speed
    assert trainer.learning_rate(history.n_steps - 1) == pytest.approx(0.0, abs=1e-12)


def test_training_options_are_validated():
    for bad in ({"time_budget": 0}, {"smoothing": 1.5}, {"tradeoff_steps": 0}, {"anneal_fraction": -1}):
        with pytest.raises(ConfigError):
            TrainConfig(**bad)
    with pytest.raises(ConfigError, match="n_estimators"):
        NPTClassifier(n_estimators=0).fit(np.zeros((6, 1)), [0, 1] * 3)


# -- preprocessing --------------------------------------------------------------------------------


def test_quantile_map_is_fitted_on_training_rows_and_inverts():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"skewed": rng.lognormal(0, 2, 500), "binary": rng.integers(0, 2, 500) * 1.0})
    schema = infer_schema(frame)
    enc = TableEncoder.fit(frame, schema, quantile_columns=["skewed", "binary"])
    assert "binary" not in enc.quantiles  # two values: a quantile map would only distort it
    z = enc.transform(frame).values[:, 0]
    assert abs(float(np.mean(z))) < 0.05 and abs(float(np.std(z)) - 1) < 0.05
    assert frame["skewed"].skew() > 5 and abs(pd.Series(z).skew()) < 0.5  # lognormal skew removed
    assert len(enc.quantiles["skewed"]["quantiles"]) == 500 // 30  # a summary, not the rows
    back = enc.decode_continuous("skewed", z.astype(np.float64))
    np.testing.assert_allclose(back, frame["skewed"], rtol=1e-3)
    restored = TableEncoder.from_dict(enc.to_dict())
    np.testing.assert_array_equal(restored.transform(frame).values, enc.transform(frame).values)
    with_nan = frame.assign(skewed=frame["skewed"].where(np.arange(500) % 7 > 0))
    encoded = enc.transform(with_nan)
    assert encoded.missing[::7, 0].all() and np.isfinite(encoded.values).all()


def test_periodic_embedding_separates_close_values_and_respects_the_mask():
    torch.manual_seed(0)
    layout = ColumnLayout(("continuous",), (0,))
    emb = ColumnEmbedding(layout, 8, dropout=0.0, n_frequencies=4, frequency_scale=1.0)
    values = torch.tensor([[0.1], [0.2], [5.0]])
    hidden = torch.tensor([[False], [False], [True]])
    out = emb(values, hidden)
    other = emb(torch.tensor([[0.1], [0.2], [-3.0]]), hidden)
    assert torch.equal(out[2], other[2])  # a hidden value does not reach the embedding
    linear = ColumnEmbedding(layout, 8, dropout=0.0)
    assert sum(p.numel() for p in emb.parameters()) > sum(p.numel() for p in linear.parameters())


def test_piecewise_linear_embedding_is_continuous_bends_at_the_edges_and_respects_the_mask():
    torch.manual_seed(0)
    layout = ColumnLayout(("continuous",), (0,))
    emb = ColumnEmbedding(layout, 8, dropout=0.0, n_bins=4)
    edges = torch.cat([emb.bin_left, emb.bin_left[-1:] + emb.bin_width[-1:]])
    # the inner edges are the standard normal's quartiles (the quantile map's training quartiles)
    np.testing.assert_allclose(edges[1:-1].numpy(), [-0.6745, 0.0, 0.6745], atol=1e-4)
    x = torch.linspace(-4.0, 4.0, 801).view(-1, 1)
    part = emb._piecewise(x)[:, 0]  # (801, e)
    assert torch.equal(part[0], part[50])  # flat below the first edge (-1.67) ...
    assert torch.equal(part[-1], part[-51])  # ... and above the last
    assert (part[1:] - part[:-1]).abs().max() < 0.05  # continuous: no jump between neighbours
    slopes = (part[1:] - part[:-1]) / 0.01
    # linear within a bin, a new direction in the next one
    assert torch.allclose(slopes[360], slopes[380], atol=1e-4)  # both in (-0.67, 0)
    assert not torch.allclose(slopes[380], slopes[420], atol=1e-3)  # (-0.67, 0) vs (0, 0.67)
    hidden = torch.tensor([[False], [True]])
    a = emb(torch.tensor([[0.3], [2.0]]), hidden)
    b = emb(torch.tensor([[0.3], [-2.0]]), hidden)
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])  # a hidden value does not reach it
    with pytest.raises(ConfigError, match="n_bins"):
        NPTConfig(n_bins=-1).validate()


def test_categorical_embedding_gradients_do_not_depend_on_thread_scheduling():
    # many rows share each code: the gradient of a code's vector sums over them, and that sum must be
    # reduced in the same order every time for a seeded fit to repeat on more than one thread
    torch.manual_seed(0)
    layout = ColumnLayout(("categorical", "categorical", "continuous"), (4, 3, 0))
    emb = ColumnEmbedding(layout, 16, dropout=0.0)
    values = torch.stack(
        [torch.randint(0, 4, (2000,)), torch.randint(0, 3, (2000,)), torch.randn(2000)], 1
    ).float()
    hidden = torch.zeros_like(values, dtype=torch.bool)
    weights = torch.randn(2000, 3, 16)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = []
        for _ in range(30):
            emb.zero_grad()
            (emb(values, hidden) * weights).sum().backward()
            grads.append(emb.cat_table.grad.clone())
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(g, grads[0]) for g in grads)


# -- ensembles ------------------------------------------------------------------------------------

FAST = dict(max_steps=12, learning_rate=1e-2, model_options=TINY_MODEL, random_state=0)


def _regression(n=70, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.normal(size=n), "b": pd.Categorical(rng.choice(list("xyz"), n))})
    y = X["a"] * 2 + (X["b"] == "x") + 0.1 * rng.normal(size=n)
    return X, y.to_numpy()


def test_member_seeds_differ_and_member_zero_is_the_single_model():
    seeds = member_seeds(123, 4)
    assert seeds[0] == 123 and len(set(seeds)) == 4
    X, y = _regression()
    single = NPTRegressor(**FAST).fit(X, y)
    first = NPTRegressor(n_estimators=3, **FAST).fit(X, y).learner_.members[0]
    np.testing.assert_array_equal(
        single.learner_.members[0].predict_columns(X.assign(__target__=0.0), ["__target__"])["__target__"][
            "mean"
        ],
        first.predict_columns(X.assign(__target__=0.0), ["__target__"])["__target__"]["mean"],
    )


def test_ensemble_averages_members_and_mixes_gaussians(tmp_path):
    X, y = _regression()
    reg = NPTRegressor(n_estimators=3, loss="gaussian", **FAST).fit(X, y)
    members = reg.learner_.members
    assert len(members) == 3 and len(reg.history_.members) == 3
    assert all(m.encoder is members[0].encoder for m in members)  # one encoder for all
    queries = X.assign(__target__=0.0)
    outs = [m.predict_columns(queries, ["__target__"])["__target__"] for m in members]
    mean, std = reg.predict(X, return_std=True)
    np.testing.assert_allclose(mean, np.mean([o["mean"] for o in outs], axis=0), rtol=1e-12)
    var = np.mean([o["std"] ** 2 + o["mean"] ** 2 for o in outs], axis=0) - mean**2
    np.testing.assert_allclose(std, np.sqrt(var), rtol=1e-10)
    assert (std >= np.min([o["std"] for o in outs], axis=0) - 1e-12).all()
    reg.save(tmp_path / "ens")
    again = NPTRegressor.load(tmp_path / "ens")
    np.testing.assert_array_equal(again.predict(X), reg.predict(X))
    assert again.history_.n_members == 3
    assert again.history_.summary()["members"][2]["steps"] == reg.history_.members[2].n_steps


def test_ensemble_classifier_probabilities_are_a_mean_and_sum_to_one():
    X, y = _regression()
    labels = np.where(y > 0, "hi", "lo")
    clf = NPTClassifier(n_estimators=2, **FAST).fit(X, labels)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-12)
    X2, _ = _regression(seed=1)
    clf.set_context(X2, np.where(X2["a"] > 0, "hi", "lo"))  # every member's context replaced
    assert all(m.context.n_rows == 70 for m in clf.learner_.members)


def test_spin_ensemble_with_time_budget():
    X, y = _regression()
    reg = SPINRegressor(
        n_estimators=2,
        time_budget=60.0,
        max_steps=10,
        model_options={"d_embedding": 8, "n_heads": 2},
        random_state=0,
    ).fit(X, y)
    # each member's share of what is left of the whole fit's budget, less its overhead:
    budgets = [m.train_config.time_budget for m in reg.learner_.members]
    # the first gets half of the budget less a guess at its overhead; the second what is left
    assert budgets[0] == pytest.approx(28.5, abs=0.5) and 0 < budgets[1] <= 60.0
    assert math.isfinite(float(np.mean(reg.predict(X))))
    assert reg.history_.stop_reason.endswith("annealed")  # the cpu preset's adaptive schedule
