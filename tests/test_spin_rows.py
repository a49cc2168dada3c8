"""SPIN's optional row reader (``SPINConfig.predictor_rows``): the predictor also reads the
context rows' latent encodings, so that a prediction can follow the labels of similar rows."""

import numpy as np
import pandas as pd
import pytest
import torch

from semiparam import SPINClassifier, SPINConfig, SPINRegressor, TrainConfig
from semiparam._config import ConfigError
from semiparam.estimators import learner as learner_module
from semiparam.models.spin import SPIN
from semiparam.nn.columns import ColumnLayout

from .lookup import assert_reads_its_context, lookup_task

LAYOUT = ColumnLayout(("continuous", "categorical", "continuous", "continuous"), (0, 3, 0, 0))


def _table(n: int, seed: int = 0, p_hidden: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(n, 4, generator=g)
    values[:, 1] = torch.randint(0, 3, (n,), generator=g).float()
    return values, torch.rand(n, 4, generator=g) < p_hidden


def _model(**overrides) -> SPIN:
    torch.manual_seed(0)
    options = dict(
        d_embedding=8, n_heads=2, n_blocks=2, n_inducing=5, n_latent_attributes=3, predictor_rows=True
    )
    options.update(overrides)
    return SPIN(SPINConfig(**options), LAYOUT).eval()


def _close(a, b, atol=1e-5):
    torch.testing.assert_close(a.continuous, b.continuous, atol=atol, rtol=atol)
    for x, y in zip(a.categorical, b.categorical, strict=True):
        torch.testing.assert_close(x, y, atol=atol, rtol=atol)


def test_off_by_default_and_the_encoding_then_holds_the_inducing_points_alone():
    assert SPINConfig().predictor_rows is False and SPINConfig.cpu().predictor_rows == "twins"
    for off in (False, "twins"):  # "twins" unresolved (no table seen) builds no reader
        plain = _model(predictor_rows=off)
        assert plain.row_reader is None and plain.read_projection is None
    values, hidden = _table(9)
    assert isinstance(plain.encode_context(values, hidden), torch.Tensor)
    # a config that leaves it off fingerprints as before it existed (older checkpoints resume)
    assert "predictor_rows" not in SPINConfig().fingerprint_dict()
    assert SPINConfig(predictor_rows=True).fingerprint_dict()["predictor_rows"] is True
    with pytest.raises(ConfigError, match="predictor_rows"):
        SPINConfig(predictor_rows="always")


def _members(reg) -> list:
    return reg.learner_.members


def test_the_default_reads_rows_only_where_the_table_holds_twins_and_a_continuous_target(
    tmp_path, monkeypatch
):
    """SPIN's cpu preset (``predictor_rows="twins"``, ``twin_min_steps=150``): each fit fixes the
    row reader on or off from the whole table, every member alike, and saves it so."""
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(40, 3)), columns=["a", "b", "c"])
    y = X["a"].to_numpy() + 0.1 * rng.normal(size=40)
    twice = pd.concat([X, X], ignore_index=True)
    kwargs = dict(n_estimators=2, max_steps=12, model_options={"d_embedding": 8}, verbose=False)
    with pytest.warns(UserWarning, match="below min_steps"):
        with_twins = SPINRegressor(**kwargs, random_state=0).fit(twice, np.tile(y, 2))
        without = SPINRegressor(**kwargs, random_state=0).fit(X, y)
        labels = np.tile(np.where(y > 0, "up", "down"), 2)
        classes = SPINClassifier(**kwargs, random_state=0).fit(twice, labels)
    assert all(m.model_config.predictor_rows is True for m in _members(with_twins))
    for member in _members(without) + _members(classes):  # no twins, or a categorical target
        assert member.model_config.predictor_rows is False
        # nothing for twin noise to move: saved as what it did, as before it existed
        assert member.train_config.twin_noise == 0 and member.train_config.twin_min_steps == 0
    assert _members(without)[0].module.row_reader is None
    loaded = SPINRegressor.load(with_twins.save(tmp_path / "twins"))
    assert all(m.model_config.predictor_rows is True for m in _members(loaded))
    np.testing.assert_array_equal(loaded.predict(X), with_twins.predict(X))
    # where twins exist, no plateau stop before twin_min_steps (up to max_steps); a member
    # fitted alone fixes the same as members trained together
    floor = {**kwargs, "n_estimators": 1, "train_options": {"min_steps": 5, "twin_min_steps": 30}}
    for steps, (table, labels), expected in [
        (40, (twice, np.tile(y, 2)), 30),
        (20, (twice, np.tile(y, 2)), 20),
        (40, (X, y), 5),
    ]:
        member = _members(SPINRegressor(**{**floor, "max_steps": steps}).fit(table, labels))[0]
        assert member.train_config.min_steps == expected
        assert member.model_config.predictor_rows is (expected != 5)
    assert TrainConfig.spin_cpu().twin_min_steps == 150 and TrainConfig.cpu().twin_min_steps == 0
    # a table of more rows than the reader's limit keeps SPIN's encoding of h inducing points
    monkeypatch.setattr(learner_module, "TWINS_READER_MAX_ROWS", len(twice) - 1)
    member = _members(SPINRegressor(**{**floor, "max_steps": 40}).fit(twice, np.tile(y, 2)))[0]
    assert member.model_config.predictor_rows is False and member.module.row_reader is None
    assert member.train_config.twin_noise == 0 and member.train_config.min_steps == 5
    with pytest.raises(ConfigError, match="twin_min_steps"):
        TrainConfig(twin_min_steps=-1)


@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
def test_the_encoding_holds_one_token_per_row_streamed_or_not(chunk_rows):
    model = _model()
    values, hidden = _table(40, seed=3)
    h_d, rows = model.encode_context(values, hidden, chunk_rows=chunk_rows)
    assert h_d.shape == (1, 5, 3 * 8) and rows.shape == (1, 40, 3 * 8)
    one_h, one_rows = model._encode_embedded(model._embed(values, hidden))
    torch.testing.assert_close(h_d, one_h, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows, one_rows, atol=1e-6, rtol=1e-5)


def test_training_pass_equals_encoding_then_queries_and_queries_stay_independent():
    model = _model()
    values, hidden = _table(50)
    is_query = torch.arange(50) >= 35
    full = model(values, hidden, is_query=is_query)
    state = model.encode_context(values[~is_query], hidden[~is_query], chunk_rows=6)
    _close(full.rows(is_query), model.forward_queries(values[is_query], hidden[is_query], state))
    alone = model.forward_queries(values[35:36], hidden[35:36], state)
    _close(model.forward_queries(values[35:], hidden[35:], state).rows(slice(0, 1)), alone)
    # permuting the context rows permutes nothing in the predictions (a set function)
    perm = torch.randperm(35, generator=torch.Generator().manual_seed(2))
    shuffled = model.encode_context(values[:35][perm], hidden[:35][perm])
    _close(
        model.forward_queries(values[35:], hidden[35:], shuffled),
        model.forward_queries(values[35:], hidden[35:], state),
    )


def test_a_row_never_reads_itself_in_training():
    """Without ``is_query`` every row is a query and a context row at once: row i reads the others."""
    model = _model()
    values, hidden = _table(12)
    d_emb = model._embed(values, hidden)
    _, rows = model._encode_embedded(d_emb)
    read = model._read_rows(d_emb, rows, exclude_self=True)
    for i in (0, 5, 11):
        others = torch.cat([rows[:, :i], rows[:, i + 1 :]], dim=1)
        torch.testing.assert_close(
            read[:, i], model._read_rows(d_emb[i : i + 1], others)[:, 0], atol=1e-6, rtol=1e-5
        )
    one = model(values[:1], hidden[:1])  # one row: nothing else to read, and no NaN
    assert torch.isfinite(one.continuous).all()


def test_no_label_leakage_and_a_context_label_moves_the_prediction():
    model = _model()
    values, hidden = _table(40, p_hidden=0.0)
    hidden[30:, 1] = True  # the categorical column plays the label, hidden for the queries
    is_query = torch.arange(40) >= 30
    base = model(values, hidden, is_query=is_query)
    leaked = values.clone()
    leaked[30:, 1] = (leaked[30:, 1] + 1) % 3
    _close(base, model(leaked, hidden, is_query=is_query))
    relabelled = values.clone()
    relabelled[:30, 1] = (relabelled[:30, 1] + 1) % 3
    assert (
        model(relabelled, hidden, is_query=is_query).continuous[is_query] - base.continuous[is_query]
    ).abs().max() > 1e-4


def test_state_tensors_round_trip_and_refuse_an_encoding_of_the_other_kind():
    model = _model()
    values, hidden = _table(25)
    state = model.encode_context(values, hidden)
    tensors = model.state_to_tensors(state)
    assert sorted(tensors) == ["inducing_points", "rows"] and tensors["rows"].shape == (25, 3, 8)
    h_d, rows = model.state_from_tensors(tensors)
    torch.testing.assert_close(h_d, state[0])
    torch.testing.assert_close(rows, state[1])
    with pytest.raises(ValueError, match="holds \\['inducing_points', 'rows'\\]"):
        model.state_from_tensors({"inducing_points": tensors["inducing_points"]})
    plain = _model(predictor_rows=False)
    with pytest.raises(ValueError, match="does not read them"):
        plain.forward_queries(values, hidden, state)
    with pytest.raises(ValueError, match="has no context-row tokens"):
        model.forward_queries(values, hidden, state[0])
    with pytest.raises(ValueError, match="inference_latents='learned'"):
        _model(inference_latents="learned").encode_context(values, hidden)


def test_attention_maps_name_the_rows_read():
    model = _model()
    values, hidden = _table(20)
    state = model.encode_context(values, hidden)
    maps = model.attention_maps(values[:4], hidden[:4], state, context=(values, hidden))
    assert maps["read_rows"].shape == (4, 2, 20) and maps["inducing_points"].shape == (4, 2, 5)
    torch.testing.assert_close(maps["read_rows"].sum(-1), torch.ones(4, 2))
    torch.testing.assert_close(maps["composed"].sum(-1), torch.ones(4))
    with pytest.raises(ValueError, match="the encoding holds 20 rows, the context given 5"):
        model.attention_maps(values[:4], hidden[:4], state, context=(values[:5], hidden[:5]))


def test_an_estimator_with_the_row_reader_saves_its_encoding_and_follows_a_new_context(tmp_path):
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"])
    y = X["a"].to_numpy() + 0.1 * rng.normal(size=60)
    options = {"d_embedding": 8, "n_heads": 2, "predictor_rows": True}
    reg = SPINRegressor(n_estimators=1, max_steps=15, model_options=options, random_state=0, verbose=False)
    with pytest.warns(UserWarning, match="below min_steps"):
        reg.fit(X, y)
    before = reg.predict(X)
    loaded = SPINRegressor.load(reg.save(tmp_path / "spin"))
    np.testing.assert_array_equal(loaded.predict(X), before)
    loaded.set_context(X, -y)
    assert not np.allclose(loaded.predict(X), before)


def test_default_spin_reads_its_context_the_copy_of_a_query_and_its_label():
    """Issue 49, item 4, for SPINRegressor at its defaults (one member; the table holds twins,
    so the row reader is on, with twin noise and no plateau stop before step 150;
    ``benchmarks/context_use.py``'s ``spin_default``): 150 rows twice, each pair with a random
    label unrelated to the features, the queries copies of the rows. After ``set_context`` with
    new random labels for the same rows its predictions follow the new labels (correlation >=
    0.8), not the old, and its attention ranks one of the query's copies first for at least 90%
    of the queries."""
    X, twice, y, y_new = lookup_task(seed=1)
    reg = SPINRegressor(n_estimators=1, random_state=1, verbose=False).fit(twice, np.tile(y, 2))
    assert_reads_its_context(reg, X, twice, y, y_new, context=(twice, np.tile(y, 2)))
