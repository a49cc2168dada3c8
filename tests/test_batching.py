"""Minibatching, validation split and checkpointing pieces of the training loop."""

import numpy as np
import pandas as pd
import pytest
import torch

from semiparam import ConfigError, NPTClassifier, NPTRegressor
from semiparam.estimators._sampling import split_validation, stratified_order
from semiparam.training.config import TrainConfig
from semiparam.training.trainer import BestCheckpoint

from .conftest import TINY_MODEL


def test_stratified_deal_keeps_class_shares():
    rng = np.random.default_rng(0)
    strata = np.array([0] * 900 + [1] * 100)
    order = stratified_order(1000, strata, rng)
    assert sorted(order.tolist()) == list(range(1000))
    n_batches = 10
    for k in range(n_batches):
        batch = order[k::n_batches]
        assert (strata[batch] == 1).sum() == 10  # every batch holds 10% of the minority class


def test_validation_split_is_stratified_and_disjoint():
    rng = np.random.default_rng(0)
    strata = np.array([0] * 80 + [1] * 20)
    train, val = split_validation(100, 0.2, strata, rng)
    assert len(val) == 20 and len(set(train) & set(val)) == 0 and len(train) + len(val) == 100
    assert (strata[val] == 1).sum() == 4
    train, val = split_validation(3, 0.1, None, rng)  # too small to hold out a row
    assert len(val) == 0 and len(train) == 3


def test_minibatch_training_runs_and_is_seeded():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    y = (X[:, 0] > 0.8).astype(int)
    kwargs = dict(max_steps=12, batch_size=32, model_options=TINY_MODEL, random_state=3)
    a = NPTClassifier(**kwargs).fit(X, y)
    b = NPTClassifier(**kwargs).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert len(a.history_.train_loss) == 12


def test_full_batch_rows_keeps_a_small_table_whole_unless_a_batch_size_is_asked_for():
    from semiparam.estimators._sampling import RowSampler

    def n_batches(n: int, **kwargs: int) -> int:
        rows = torch.zeros(n, 3)
        sampler = RowSampler(
            rows, rows.bool(), torch.ones(n, dtype=torch.bool), 512, None, np.random.default_rng(0), **kwargs
        )
        return sampler.n_batches

    assert n_batches(1024, full_batch_rows=1024) == 1
    assert n_batches(1025, full_batch_rows=1024) == 3  # then batches of batch_size rows (dealt evenly)
    assert n_batches(900) == 2  # full_batch_rows=0: batch_size alone decides
    cpu = TrainConfig.cpu()
    assert (cpu.batch_size, cpu.full_batch_rows) == (512, 1024)
    assert NPTClassifier()._configs()[1].full_batch_rows == 1024
    # a batch size the user asks for is the batch size, on any table
    assert NPTClassifier(batch_size=256)._configs()[1].full_batch_rows == 0
    assert NPTClassifier(train_options={"batch_size": 256})._configs()[1].full_batch_rows == 0
    both = {"batch_size": 256, "full_batch_rows": 600}
    assert NPTClassifier(train_options=both)._configs()[1].full_batch_rows == 600


class _FakeTrainer:
    def __init__(self):
        from semiparam.training.trainer import TrainHistory

        self.model = torch.nn.Linear(2, 1)
        self.history = TrainHistory()
        self.stop = False
        self.config = TrainConfig()
        self.anneal_start = None  # the adaptive schedule's anneal has not begun

    def request_stop(self, step, reason):
        self.stop = True
        self.history.stopped_early = reason == "plateau"


def test_best_checkpoint_restores_best_weights_and_stops():
    trainer = _FakeTrainer()
    cb = BestCheckpoint(patience=2)
    weights = []
    for step, loss in enumerate([3.0, 2.0, 4.0, 5.0]):
        with torch.no_grad():
            trainer.model.weight.fill_(float(step))
        weights.append(float(step))
        cb.on_eval(trainer, step, loss)
        if trainer.stop:
            break
    assert trainer.stop and step == 3 and trainer.history.stopped_early
    assert trainer.history.best_step == 1 and trainer.history.best_val_loss == 2.0
    cb.on_train_end(trainer)
    assert trainer.model.weight.unique().item() == 1.0


def test_lookup_pairs_copy_rows_whole_and_give_each_pair_one_drawn_label():
    from semiparam.estimators._sampling import LookupPairs, RowSampler

    n, target = 40, 2
    values = torch.arange(n * 3, dtype=torch.float32).view(n, 3)
    missing = torch.zeros(n, 3, dtype=torch.bool)
    labelled = torch.ones(n, dtype=torch.bool)
    labelled[-4:] = False  # transductive rows: never a source
    rows = RowSampler(values, missing, labelled, 512, None, np.random.default_rng(0))
    batch = LookupPairs(rows, [target], 0.5)(0)
    twins = torch.nonzero(batch.revealed).flatten()
    assert len(twins) == 10  # half the rows in pairs: 10 pairs
    for slot in twins.tolist():
        # the twin's features are those of a labelled row, which keeps them and shares its label
        source = int(torch.nonzero((values[:, :target] == batch.values[slot, :target]).all(1))[0])
        assert source != slot and bool(labelled[source]) and not bool(batch.revealed[source])
        assert torch.equal(batch.values[source], batch.values[slot])
        assert float(batch.values[slot, target]) in set(values[:-4, target].tolist())
        assert bool(batch.labelled[slot])
    untouched = ~batch.revealed
    untouched[
        [int(torch.nonzero((values[:, :target] == batch.values[s, :target]).all(1))[0]) for s in twins]
    ] = False
    assert torch.equal(batch.values[untouched], values[untouched])  # the other rows as they were
    assert LookupPairs(rows, [target], 0.0)(1).revealed is None  # no share: the step unchanged
    assert torch.equal(batch.queried, torch.zeros(n, dtype=torch.bool).index_fill(0, torch.tensor(
        [int(torch.nonzero((values[:, :target] == batch.values[s, :target]).all(1))[0]) for s in twins]
    ), True))  # fmt: skip


def test_lookup_pairs_give_a_source_s_duplicate_rows_the_pair_s_label():
    """A table's duplicate rows: every row of the step equal in features to a source shows the
    pair's label, so no row contradicts the twin (here each row is in the table twice)."""
    from semiparam.estimators._sampling import LookupPairs, RowSampler

    n, target = 60, 2
    features = torch.randn(n // 2, target).repeat(2, 1)
    labels = torch.randn(n // 2, 1).repeat(2, 1)
    values, missing = torch.cat([features, labels], 1), torch.zeros(n, 3, dtype=torch.bool)
    missing[::7, 1] = True  # a missing cell is part of a row's features
    labelled = torch.ones(n, dtype=torch.bool)
    rows = RowSampler(values, missing, labelled, 512, None, np.random.default_rng(1))
    for step in range(5):
        batch = LookupPairs(rows, [target], 0.5)(step)
        by_features: dict[tuple, set[float]] = {}
        for k in range(n):
            if not batch.missing[k, :target].any():
                row = tuple(batch.values[k, :target].tolist())
                by_features.setdefault(row, set()).add(float(batch.values[k, target]))
        assert all(len(labels) == 1 for labels in by_features.values())
        # the sources' labels were drawn: most differ from the row's own
        sources = torch.nonzero(batch.queried).flatten()
        changed = (batch.values[sources, target] != values[sources, target]).float().mean()
        assert changed > 0.5


def test_lookup_steps_are_every_nth_step_of_shuffled_labels_beside_copies_shown_whole():
    from semiparam.estimators._sampling import LOOKUP_ROWS, LookupSteps, RowSampler

    n, target = 600, 2
    features = torch.randn(n // 2, target).repeat(2, 1)  # every row twice in the table
    values = torch.cat([features, torch.randn(n // 2, 1).repeat(2, 1)], 1)
    missing = torch.zeros(n, 3, dtype=torch.bool)
    labelled = torch.ones(n, dtype=torch.bool)
    labelled[-10:] = False  # transductive rows: never in a lookup step
    rows = RowSampler(values, missing, labelled, 512, None, np.random.default_rng(0), full_batch_rows=1024)
    steps = LookupSteps(rows, [target], 5)
    for step in range(10):
        batch = steps(step)
        if step % 5 != 4:  # an ordinary step: the row sampler's, untouched
            assert batch.revealed is None and batch.queried is None and torch.equal(batch.values, values)
            continue
        m = len(batch.values) // 2
        assert m == LOOKUP_ROWS and batch.labelled.all()
        originals, copies = batch.values[:m], batch.values[m:]
        assert torch.equal(originals, copies) and torch.equal(batch.missing[:m], batch.missing[m:])
        assert batch.queried[:m].all() and not batch.queried[m:].any()
        assert batch.revealed[m:].all() and not batch.revealed[:m].any()
        # labelled rows of the table, their labels shuffled across them: mostly not their own ...
        source = [int(torch.nonzero((values[:, :target] == r[:target]).all(1))[0]) for r in originals]
        assert all(bool(labelled[i]) for i in source)
        assert (originals[:, target] != values[source, target]).float().mean() > 0.5
        # ... and a table's duplicate rows show one label
        by_features: dict[tuple, set[float]] = {}
        for r in originals.tolist():
            by_features.setdefault(tuple(r[:target]), set()).add(r[target])
        assert all(len(labels) == 1 for labels in by_features.values())


def test_lookup_every_trains_an_npt_and_refuses_one():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(80, 3)), columns=["a", "b", "c"])
    y = X["a"] - X["b"]
    reg = NPTRegressor(
        max_steps=12, n_estimators=1, train_options={"lookup_every": 3}, random_state=0, verbose=False
    )
    assert np.isfinite(reg.fit(X, y).predict(X)).all() and reg.history_.n_steps == 12
    assert TrainConfig(lookup_every=0).lookup_every == 0
    with pytest.raises(ConfigError, match="lookup_every must be 0"):
        TrainConfig(lookup_every=1)


def _twin_table() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """12 rows of 2 features and a target (column 2): rows 0-1, 2-3-4 and 5-6 are twins (6 also
    differs from 5 in a missing cell, so only 0-1 and 2-3-4 are groups), row 11 is unlabelled."""
    values = torch.tensor(
        [[0, 0], [0, 0], [1, 1], [1, 1], [1, 1], [2, 0], [2, 0]] + [[3 + k, 0] for k in range(5)]
    )
    values = torch.cat([values.float(), torch.arange(12).float().view(12, 1)], 1)
    missing = torch.zeros(12, 3, dtype=torch.bool)
    missing[6, 1] = True
    labelled = torch.ones(12, dtype=torch.bool)
    labelled[11] = False
    values[10] = values[11]  # an unlabelled row is nobody's twin
    values[10, 2] = 10.0
    return values, missing, labelled


def test_twin_groups_are_labelled_rows_of_the_same_features():
    from semiparam.estimators._sampling import twin_groups

    values, missing, labelled = _twin_table()
    groups = twin_groups(values, missing, labelled, [2])
    assert groups is not None
    assert (groups[[5, 6, 7, 8, 9, 10, 11]] == -1).all()  # a missing cell, the unlabelled row
    assert groups[0] == groups[1] and groups[2] == groups[3] == groups[4] and groups[0] != groups[2]
    assert twin_groups(values[5:10], missing[5:10], labelled[5:10], [2]) is None


def test_twin_noise_moves_each_group_s_labels_together_and_no_other_row():
    from semiparam.estimators._sampling import RowSampler, TwinNoise

    values, missing, labelled = _twin_table()
    rows = RowSampler(values, missing, labelled, 512, None, np.random.default_rng(0))
    noise = TwinNoise(rows, [2], [0, 0, 0], 1.0)
    for step in range(20):
        shift = noise(step).values[:, 2] - values[:, 2]
        assert (shift[5:] == 0).all()  # rows without a twin keep their labels
        # one draw per group, added to each of its labels
        same = torch.isclose(shift[[1, 3, 4]], shift[[0, 2, 2]]).all()
        assert same and not torch.isclose(shift[0], shift[2])
    batch = noise(0)
    assert batch.twins is not None and torch.equal(batch.twins >= 0, torch.arange(12) < 5)
    # no twin, no draw: the row sampler's generator is where it was, the batch is the sampler's
    lone = RowSampler(values[5:], missing[5:], labelled[5:], 512, None, np.random.default_rng(0))
    state = lone.rng.bit_generator.state
    batch = TwinNoise(lone, [2], [0, 0, 0], 1.0)(0)
    assert batch.twins is None and lone.rng.bit_generator.state == state
    assert torch.equal(batch.values, values[5:])
    # a categorical target is left alone (and draws nothing)
    rows = RowSampler(values, missing, labelled, 512, None, np.random.default_rng(0))
    state = rows.rng.bit_generator.state
    batch = TwinNoise(rows, [2], [0, 0, 12], 1.0)(0)
    assert batch.twins is None and torch.equal(batch.values, values) and rows.rng.bit_generator.state == state


def test_masks_never_hide_the_labels_of_a_whole_group_of_twins():
    from semiparam.training.masking import MaskingPolicy, mask_for_training

    values, missing, labelled = _twin_table()
    groups = torch.tensor([0, 0, 1, 1, 1] + [-1] * 7)
    target = torch.tensor([False, False, True])
    policy = MaskingPolicy(p_feature=0.0, p_target=0.999, randomize_fraction=0.0)
    gen = torch.Generator().manual_seed(0)
    cards = torch.zeros(3, dtype=torch.long)
    masked = mask_for_training(
        values, missing, target_columns=target, labelled_rows=labelled, cardinalities=cards,
        policy=policy, generator=gen, twin_groups=groups,
    )  # fmt: skip
    scored = masked.score_target[:, 2]
    # every labelled row drawn: one row of each group stays shown (its first), the others scored
    assert scored.tolist() == [False, True, False, True, True] + [True] * 6 + [False]
    assert not masked.hidden[0, 2] and not masked.hidden[2, 2] and masked.hidden[1, 2]
    # a group with a single row in the step (a row shard) is no group: its row is drawn as any
    alone = torch.tensor([0, 1, 1, 1, 1] + [-1] * 7)
    masked = mask_for_training(
        values, missing, target_columns=target, labelled_rows=labelled, cardinalities=cards,
        policy=policy, generator=torch.Generator().manual_seed(0), twin_groups=alone,
    )  # fmt: skip
    assert bool(masked.score_target[0, 2]) and not bool(masked.score_target[1, 2])


def test_twin_noise_is_validated_and_leaves_a_table_without_twins_as_it_was():
    with pytest.raises(ConfigError, match="twin_noise"):
        TrainConfig(twin_noise=1.5)
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(80, 3)), columns=list("abc"))
    y = X["a"] * 2 + rng.normal(size=80) * 0.1
    kwargs = dict(n_estimators=1, max_steps=60, random_state=0, verbose=False, model_options=TINY_MODEL)
    plain = NPTRegressor(**kwargs, train_options={"twin_noise": 0.0}).fit(X, y).predict(X)
    noisy = NPTRegressor(**kwargs, train_options={"twin_noise": 1.0}).fit(X, y).predict(X)
    np.testing.assert_array_equal(plain, noisy)
