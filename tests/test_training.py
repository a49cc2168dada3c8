"""Masking rates, loss on scored cells only, schedules, optimiser, and learning a tiny table."""

import math

import pytest
import torch

from semiparam import ConfigError, NPTConfig, TrainConfig
from semiparam.models.npt import NPT
from semiparam.nn.columns import ColumnLayout, ColumnOutputs
from semiparam.training.losses import cell_losses, npt_loss
from semiparam.training.masking import MaskingPolicy, mask_for_training
from semiparam.training.schedules import cosine_tradeoff, flat_cosine
from semiparam.training.trainer import Batch, Trainer

LAYOUT = ColumnLayout(("continuous", "categorical", "continuous", "categorical"), (0, 5, 0, 3))
TARGETS = torch.tensor([False, False, False, True])
CARDS = torch.tensor(LAYOUT.cardinalities)


def _data(n=20000, missing_rate=0.1, seed=0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(n, 4, generator=g)
    values[:, 1] = torch.randint(0, 5, (n,), generator=g).float()
    values[:, 3] = torch.randint(0, 3, (n,), generator=g).float()
    missing = torch.rand(n, 4, generator=g) < missing_rate
    return values, missing


def _mask(values, missing, labelled, policy, seed, **kwargs):
    """``mask_for_training`` on the test layout with a seeded generator."""
    return mask_for_training(
        values,
        missing,
        target_columns=TARGETS,
        labelled_rows=labelled,
        cardinalities=CARDS,
        policy=policy,
        generator=torch.Generator().manual_seed(seed),
        **kwargs,
    )


def test_feature_masking_rate_and_bert_split():
    values, missing = _data()
    policy = MaskingPolicy(p_feature=0.15, p_target=1.0)
    labelled = torch.ones(len(values), dtype=torch.bool)
    m = _mask(values, missing, labelled, policy, 1)
    feature_cells = ~missing & ~TARGETS
    rate = m.score_feature[feature_cells].float().mean().item()
    assert abs(rate - 0.15) < 0.01
    assert not m.score_feature[:, 3].any() and not m.score_feature[missing].any()
    # 90% of selected cells hidden, 10% randomised with the mask bit left at 0
    hidden_share = m.hidden[m.score_feature].float().mean().item()
    assert abs(hidden_share - 0.9) < 0.02
    randomized = m.score_feature & ~m.hidden
    assert (m.values[randomized][:] != values[randomized]).float().mean() > 0.5
    # randomised categories stay valid indices
    cat = m.values[:, 1][randomized[:, 1]]
    assert ((cat >= 0) & (cat < 5) & (cat == cat.round())).all()
    # deterministic target masking: every target hidden, labelled observed targets scored
    assert m.hidden[:, 3].all()
    torch.testing.assert_close(m.score_target[:, 3], ~missing[:, 3])
    # hidden cells carry value 0
    assert (m.values[m.hidden] == 0).all()


def test_stochastic_target_masking_keeps_other_labels_visible():
    values, missing = _data()
    labelled = torch.rand(len(values), generator=torch.Generator().manual_seed(3)) < 0.8
    policy = MaskingPolicy(p_feature=0.0, p_target=0.3)
    m = _mask(values, missing, labelled, policy, 2)
    candidates = labelled & ~missing[:, 3]
    assert abs(m.score_target[candidates, 3].float().mean().item() - 0.3) < 0.015
    visible = candidates & ~m.score_target[:, 3]
    assert not m.hidden[visible, 3].any()  # unselected labels are context
    torch.testing.assert_close(m.values[visible, 3], values[visible, 3])
    # unlabelled rows: target always hidden, never scored
    assert m.hidden[~labelled, 3].all() and not m.score_target[~labelled].any()
    assert not m.score_feature.any()


@pytest.mark.parametrize("p_target", [1.0, 0.5])
def test_revealed_rows_are_shown_whole_and_never_scored(p_target):
    values, missing = _data(4000)
    labelled = torch.ones(len(values), dtype=torch.bool)
    revealed = torch.arange(len(values)) >= 2000  # the lookup task's copies
    policy = MaskingPolicy(p_feature=0.15, p_target=p_target)
    m = _mask(values, missing, labelled, policy, 4, revealed_rows=revealed)
    # copies: exactly their observed cells shown, unchanged, nothing scored
    torch.testing.assert_close(m.hidden[revealed], missing[revealed])
    shown = revealed.view(-1, 1) & ~missing
    torch.testing.assert_close(m.values[shown], values[shown])
    assert not m.score_target[revealed].any() and not m.score_feature[revealed].any()
    # originals: masked as without copies
    originals = ~revealed & ~missing[:, 3]
    if p_target == 1.0:
        assert m.hidden[~revealed, 3].all() and m.score_target[originals, 3].all()
    else:
        assert abs(m.score_target[originals, 3].float().mean().item() - 0.5) < 0.04
    assert m.score_feature[~revealed].any()


def test_queried_rows_have_their_targets_scored_whatever_p_target_draws():
    values, missing = _data(4000)
    labelled = torch.ones(len(values), dtype=torch.bool)
    queried = torch.arange(len(values)) < 1000  # the lookup pairs' sources
    policy = MaskingPolicy(p_feature=0.0, p_target=0.5, randomize_fraction=0.0)
    m = _mask(values, missing, labelled, policy, 4, queried_rows=queried)
    observed = ~missing[:, 3]
    assert m.score_target[queried & observed, 3].all() and m.hidden[queried, 3].all()
    others = ~queried & observed
    assert abs(m.score_target[others, 3].float().mean().item() - 0.5) < 0.04  # as without


def test_loss_reads_only_scored_cells():
    torch.manual_seed(0)
    n = 8
    outputs = ColumnOutputs(torch.randn(n, 2, 1), [torch.randn(n, 5), torch.randn(n, 3)])
    values, _ = _data(n)
    score_t = torch.zeros(n, 4, dtype=torch.bool)
    score_t[:4, 3] = True
    score_f = torch.zeros(n, 4, dtype=torch.bool)
    score_f[2, 0] = True
    loss, _ = npt_loss(outputs, values, score_t, score_f, LAYOUT, lam=0.3)
    changed = values.clone()
    changed[4:, 3] = (changed[4:, 3] + 1) % 3  # unscored targets
    changed[:, 2] += 5.0  # unscored continuous column
    loss2, _ = npt_loss(outputs, changed, score_t, score_f, LAYOUT, lam=0.3)
    torch.testing.assert_close(loss, loss2)
    per_cell = cell_losses(outputs, values, LAYOUT)
    expected = 0.7 * per_cell[:4, 3].mean() + 0.3 * per_cell[2, 0]
    torch.testing.assert_close(loss, expected)


def test_categorical_heads_and_losses_are_each_columns_own() -> None:
    """The heads read the categorical columns gathered at once and the losses are written at
    once: the same values and gradients, to the bit, as a head and a cross-entropy per column."""
    from semiparam.nn.columns import ColumnHeads

    torch.manual_seed(1)
    heads = ColumnHeads(LAYOUT, 6, dropout=0.0)
    values, _ = _data(10)
    h = torch.randn(10, 4, 6, requires_grad=True)
    outputs = heads(h)
    losses = cell_losses(outputs, values, LAYOUT, label_smoothing=0.1)
    (grad,) = torch.autograd.grad(losses.sum(), h)
    h2 = h.detach().clone().requires_grad_(True)
    total = h2.new_zeros(())
    for k, (j, head) in enumerate(zip(LAYOUT.categorical, heads.cat_heads, strict=True)):
        logits = head(h2[:, j])
        assert torch.equal(logits, outputs.categorical[k])
        loss = torch.nn.functional.cross_entropy(
            logits, values[:, j].long(), reduction="none", label_smoothing=0.1
        )
        assert torch.equal(loss, losses[:, j])
        total = total + loss.sum()
    (grad2,) = torch.autograd.grad(total, h2)
    assert torch.equal(grad[:, LAYOUT.categorical], grad2[:, LAYOUT.categorical])


def test_schedules():
    assert flat_cosine(0, 100, 0.5) == 1.0 and flat_cosine(49, 100, 0.5) == 1.0
    assert flat_cosine(100, 100, 0.5) == pytest.approx(0.0, abs=1e-12)
    assert flat_cosine(75, 100, 0.5) == pytest.approx(0.5)
    assert cosine_tradeoff(0, 10) == 1.0 and cosine_tradeoff(10, 10) == pytest.approx(0.0, abs=1e-12)
    assert cosine_tradeoff(5, 10) == pytest.approx(0.5)


def test_train_config_validation():
    with pytest.raises(ConfigError, match="p_target"):
        TrainConfig(p_target=0.0)
    with pytest.raises(ConfigError, match="unknown"):
        TrainConfig.from_dict({"max_stepz": 3})
    assert TrainConfig.paper_base().flat_fraction == 0.7


def test_tiny_table_learned_to_near_zero_error():
    """y = 2 * x0 - x1 exactly: NPT drives the target error close to zero."""
    layout = ColumnLayout(("continuous",) * 3, (0, 0, 0))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 2, generator=g)
    y = 2 * x[:, :1] - x[:, 1:]
    values = torch.cat([x, y / y.std()], dim=1)
    missing = torch.zeros_like(values, dtype=torch.bool)
    torch.manual_seed(0)
    model = NPT(NPTConfig(d_embedding=16, n_heads=2, n_blocks=2, dropout=0.0), layout)
    config = TrainConfig(max_steps=300, learning_rate=3e-3, p_feature=0.0, flat_fraction=0.7)
    targets = torch.tensor([False, False, True])
    trainer = Trainer(model, layout, targets, config, generator=torch.Generator().manual_seed(0))
    batch = Batch(values, missing, torch.ones(64, dtype=torch.bool))
    history = trainer.fit(lambda step: batch)
    assert history.train_loss[-1] < 0.02 * history.train_loss[0]
    model.eval()
    hidden = torch.zeros_like(missing)
    hidden[:, 2] = True
    pred = model(values.masked_fill(hidden, 0), hidden).continuous[:, 2, 0]
    assert math.sqrt(((pred - values[:, 2]) ** 2).mean().item()) < 0.1


def test_a_step_after_evaluation_trains_the_model_inside_a_wrapper():
    """Under DDP the engine steps through a wrapper while evaluation switches the model inside
    it: the next step must switch the model back to training (dropout on)."""
    from semiparam.training.engine import Engine

    class Tiny(Engine):
        def step_loss(self, batch, step):
            return self.model(batch).pow(2).mean(), {"loss": 0.0}

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    engine = Tiny(model, TrainConfig(max_steps=2), optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    engine.train_root = torch.nn.ModuleList([model])  # a wrapper, as DDP is
    engine.train_step(torch.ones(4, 3), 0)
    model.eval()  # what evaluate() does
    engine.train_step(torch.ones(4, 3), 1)
    assert model.training and model[1].training
