"""Invariants of the SPIN module, its streamed dataset encoding and its training objective."""

import math

import pytest
import torch

from semiparam import ConfigError, SPINConfig, TrainConfig
from semiparam.models.registry import get_model
from semiparam.models.spin import SPIN
from semiparam.nn.attention import MAB
from semiparam.nn.columns import ColumnLayout
from semiparam.nn.streaming import StreamingCrossAttention
from semiparam.training.masking import MaskingPolicy, mask_for_training
from semiparam.training.trainer import Batch, Trainer

# 6 columns: continuous, categorical(3), continuous, categorical(2), continuous, continuous
LAYOUT = ColumnLayout(
    ("continuous", "categorical", "continuous", "categorical", "continuous", "continuous"),
    (0, 3, 0, 2, 0, 0),
)


def _table(n: int, seed: int = 0, p_hidden: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(n, 6, generator=g)
    values[:, 1] = torch.randint(0, 3, (n,), generator=g).float()
    values[:, 3] = torch.randint(0, 2, (n,), generator=g).float()
    hidden = torch.rand(n, 6, generator=g) < p_hidden
    return values, hidden


def _model(**overrides) -> SPIN:
    torch.manual_seed(0)
    options = dict(d_embedding=8, n_heads=2, n_blocks=3, n_inducing=5, n_latent_attributes=4)
    options.update(overrides)
    return SPIN(SPINConfig(**options), LAYOUT).eval()


def _close(a, b, atol=1e-5):
    torch.testing.assert_close(a.continuous, b.continuous, atol=atol, rtol=atol)
    for x, y in zip(a.categorical, b.categorical):
        torch.testing.assert_close(x, y, atol=atol, rtol=atol)


def test_registered_and_shapes():
    assert get_model("spin") == (SPINConfig, SPIN)
    model = _model()
    values, hidden = _table(11)
    out = model(values, hidden)
    assert out.continuous.shape == (11, 4, 1)
    assert [c.shape for c in out.categorical] == [(11, 3), (11, 2)]
    state = model.encode_context(values, hidden)
    assert state.shape == (1, 5, 4 * 8)  # (1, h, f*e)
    # ABLA after the last XABD would feed nothing and is not built
    assert [layer.abla is not None for layer in model.layers] == [True, True, False]
    assert _model(gaussian_head=True)(values, hidden).continuous.shape == (11, 4, 2)


def test_latents_capped_at_column_count():
    """f >= d: H_A starts as D itself (no projection), as in the reference code."""
    model = _model(n_latent_attributes=50)
    assert model.n_latents == 6 and model.row_projection is None
    values, hidden = _table(9)
    assert model.encode_context(values, hidden).shape == (1, 5, 6 * 8)


def test_row_permutation_equivariance():
    model = _model()
    values, hidden = _table(40)
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(1))
    out = model(values, hidden)
    _close(out.rows(perm), model(values[perm], hidden[perm]))
    # the encoding is a set function of the rows
    torch.testing.assert_close(
        model.encode_context(values, hidden),
        model.encode_context(values[perm], hidden[perm]),
        atol=1e-6,
        rtol=1e-5,
    )


@pytest.mark.parametrize("chunk_rows", [1, 7, 32, 99])
def test_streamed_encoding_equals_one_pass(chunk_rows):
    model = _model()
    values, hidden = _table(100, seed=3)
    one_pass = model.encode_context(values, hidden, chunk_rows=1000)
    streamed = model.encode_context(values, hidden, chunk_rows=chunk_rows)
    torch.testing.assert_close(streamed, one_pass, atol=1e-5, rtol=1e-5)
    # and the one-pass encoding is what training's forward computes
    torch.testing.assert_close(one_pass, model._encode_embedded(model._embed(values, hidden)))


def test_streamed_encoding_exact_in_float64_with_skewed_scores():
    """Large logits in one chunk only: the log-sum-exp combination must stay exact."""
    model = _model().double()
    with torch.no_grad():
        model.inducing_points.mul_(40.0)  # sharp attention
    values, hidden = _table(64, seed=5)
    values = values.double()
    values[:3, 0] = 25.0  # three outlying rows in the first chunk
    one_pass = model.encode_context(values, hidden, chunk_rows=64)
    streamed = model.encode_context(values, hidden, chunk_rows=5)
    torch.testing.assert_close(streamed, one_pass, atol=1e-10, rtol=1e-10)


def test_streaming_block_equals_mab():
    torch.manual_seed(0)
    mab = MAB(12, 3, cross=True, dropout=0.0).eval()
    x = torch.randn(2, 4, 12)
    y = torch.randn(2, 50, 12)
    stream = StreamingCrossAttention(mab, x)
    for start in range(0, 50, 8):
        stream.update(y[:, start : start + 8])
    torch.testing.assert_close(stream.result(), mab(x, y), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="no keys"):
        StreamingCrossAttention(mab, x).result()


def test_encoding_path_equals_masked_full_pass():
    """forward(is_query) == encode_context(context) + forward_queries(queries)."""
    model = _model()
    values, hidden = _table(50)
    is_query = torch.zeros(50, dtype=torch.bool)
    is_query[35:] = True
    full = model(values, hidden, is_query=is_query)
    state = model.encode_context(values[~is_query], hidden[~is_query], chunk_rows=6)
    _close(full.rows(is_query), model.forward_queries(values[is_query], hidden[is_query], state))


def test_queries_independent_of_each_other():
    model = _model()
    values, hidden = _table(30)
    state = model.encode_context(values[:20], hidden[:20])
    together = model.forward_queries(values[20:], hidden[20:], state)
    alone = model.forward_queries(values[20:21], hidden[20:21], state)
    _close(together.rows(slice(0, 1)), alone)
    changed = values[20:].clone()
    changed[1:, [0, 2, 4, 5]] = torch.randn(9, 4)  # other queries' continuous cells
    _close(model.forward_queries(changed, hidden[20:], state).rows(slice(0, 1)), alone)


def test_no_label_leakage_and_context_labels_are_read():
    """A hidden (query) label never reaches the model; a visible context label does."""
    model = _model()
    values, hidden = _table(40, p_hidden=0.0)
    target = 1  # the categorical column plays the label
    hidden[30:, target] = True
    is_query = torch.arange(40) >= 30
    base = model(values, hidden, is_query=is_query)
    leaked = values.clone()
    leaked[30:, target] = (leaked[30:, target] + 1) % 3  # change the hidden query labels
    _close(base, model(leaked, hidden, is_query=is_query))
    relabelled = values.clone()
    relabelled[:30, target] = (relabelled[:30, target] + 1) % 3  # change the visible context labels
    moved = model(relabelled, hidden, is_query=is_query).continuous[is_query]
    assert (moved - base.continuous[is_query]).abs().max() > 1e-4


def test_rows_interact_only_through_inducing_points():
    model = _model()
    values, hidden = _table(20)
    before = model(values, hidden).continuous[0]
    changed = values.clone()
    changed[7, 0] += 3.0
    assert (model(changed, hidden).continuous[0] - before).abs().max() > 1e-5
    # without XABD's reduction (learned latents at inference) the context does not matter
    learned = _model(inference_latents="learned")
    a = learned.encode_context(values, hidden)
    b = learned.encode_context(changed[:5], hidden[:5])
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, learned.inducing_points.detach())


def test_state_tensors_round_trip_and_checks():
    model = _model()
    values, hidden = _table(25)
    state = model.encode_context(values, hidden)
    tensors = model.state_to_tensors(state)
    assert list(tensors) == ["inducing_points"] and tensors["inducing_points"].shape == (5, 4, 8)
    torch.testing.assert_close(model.state_from_tensors(tensors), state)
    with pytest.raises(ValueError, match="expects"):
        model.state_from_tensors({"inducing_points": torch.zeros(5, 4, 9)})
    with pytest.raises(ValueError, match="inducing_points"):
        model.state_from_tensors({"values": torch.zeros(3)})
    with pytest.raises(ValueError, match="at least one context row"):
        model.encode_context(values[:0], hidden[:0])


def test_predictor_attention_maps():
    model = _model()
    values, hidden = _table(12)
    weights = model.attention_to_inducing_points(values, hidden, model.encode_context(values, hidden))
    assert weights.shape == (12, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(12))


def test_predictor_aba_reads_the_query_row_through_attention_between_its_cells():
    """predictor_aba adds attention between each query row's cells before the predictor: off, the
    model is the paper's (no extra parameters); on, queries stay independent of each other, the
    encoding path still equals the masked full pass, and a query's prediction depends on how its
    own cells combine (the attention) rather than only on each cell through the flattened row."""
    plain, deep = _model(), _model(predictor_aba=2)
    assert not any(name.startswith("query_aba") for name in plain.state_dict())
    assert sum(name.startswith("query_aba") for name in deep.state_dict()) > 0
    assert set(plain.state_dict()) < set(deep.state_dict())
    values, hidden = _table(50)
    is_query = torch.arange(50) >= 35
    full = deep(values, hidden, is_query=is_query)
    state = deep.encode_context(values[~is_query], hidden[~is_query], chunk_rows=6)
    _close(full.rows(is_query), deep.forward_queries(values[is_query], hidden[is_query], state))
    together = deep.forward_queries(values[35:], hidden[35:], state)
    _close(together.rows(slice(0, 1)), deep.forward_queries(values[35:36], hidden[35:36], state))
    weights = deep.attention_to_inducing_points(values[35:], hidden[35:], state)
    torch.testing.assert_close(weights.sum(-1), torch.ones(15))
    maps = deep.attention_maps(values[35:], hidden[35:], state)
    torch.testing.assert_close(maps["inducing_points"].mean(1), weights)
    # the attention mixes the cells: changing cell 0 moves the reconstruction of cell 2 through
    # the attention blocks even with the predictor's own cross-attention bypassed
    row = values[35:36].clone()
    tokens = deep._query_tokens(deep._embed(row, hidden[35:36]))
    row[0, 0] += 2.0
    moved = deep._query_tokens(deep._embed(row, hidden[35:36]))
    e = deep.config.d_embedding
    assert (moved[..., 2 * e : 3 * e] - tokens[..., 2 * e : 3 * e]).abs().max() > 1e-4
    unchanged = plain._query_tokens(plain._embed(row, hidden[35:36]))
    reference = plain._query_tokens(plain._embed(values[35:36], hidden[35:36]))
    torch.testing.assert_close(unchanged[..., 2 * e : 3 * e], reference[..., 2 * e : 3 * e])


def test_spin16_parameter_count_matches_paper():
    """Genomics SPIN-16 (50 tokens of 32 classes, e=16, h=f=10, depth 4): 8.1M parameters (T3)."""
    layout = ColumnLayout(("categorical",) * 50, (32,) * 50)
    model = SPIN(SPINConfig.spin16(), layout)
    n_params = sum(p.numel() for p in model.parameters())
    assert abs(n_params - 8.1e6) / 8.1e6 < 0.03, n_params


@pytest.mark.parametrize("name", ["cpu", "small", "base", "spin16", "spin64"])
def test_presets_build_and_pair_with_training_presets(name):
    config = SPINConfig.preset(name)
    SPIN(config, LAYOUT)
    train = TrainConfig.preset(name, model="spin")
    assert train.p_target < 1.0  # the encoder must see labels
    assert train.tradeoff_start == 0.5  # the paper's lambda_0
    assert (train.target_masking == "chunk") == name.startswith("spin")


def test_npt_training_presets_unchanged():
    assert TrainConfig.preset("cpu") == TrainConfig.preset("cpu", model="npt") == TrainConfig.cpu()
    assert TrainConfig.preset("cpu").target_masking == "token"
    with pytest.raises(ConfigError, match="spin16"):
        TrainConfig.preset("spin16")


@pytest.mark.parametrize(
    "bad",
    [
        {"d_embedding": 10, "n_heads": 4},
        {"n_inducing": 0},
        {"n_latent_attributes": 0},
        {"dropout": 1.0},
        {"inference_latents": "cached"},
        {"encode_chunk_rows": 0},
        {"predictor_aba": -1},
        {"column_heads": 0},
        {"d_embedding": 8, "n_heads": 2, "column_heads": 3},
        {"ff_multiplier": 0},
        {"max_row_width": 0},
        {"n_blocks": "two"},
        {"n_inducing_rows": 3},  # unknown key
    ],
)
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        SPINConfig.from_dict(bad)
    with pytest.raises(ConfigError, match="unknown SPIN preset"):
        SPINConfig.preset("large")


def test_chunk_masking_hides_whole_rows():
    n, d = 400, 5
    values = torch.randn(n, d)
    targets = torch.tensor([False, False, True, True, True])
    kwargs = dict(
        target_columns=targets,
        labelled_rows=torch.ones(n, dtype=torch.bool),
        cardinalities=torch.zeros(d, dtype=torch.long),
        generator=torch.Generator().manual_seed(0),
    )
    chunk = MaskingPolicy(p_feature=0.0, p_target=0.3, target_masking="chunk", randomize_fraction=0.0)
    batch = mask_for_training(values, torch.zeros(n, d, dtype=torch.bool), policy=chunk, **kwargs)
    scored = batch.score_target[:, targets]
    per_row = scored.sum(1)
    assert set(per_row.tolist()) <= {0, 3}  # all targets of a row or none
    assert abs(per_row.gt(0).float().mean().item() - 0.3) < 0.07
    assert torch.equal(batch.hidden[:, targets], scored)  # scored targets hidden, the rest visible
    token = MaskingPolicy(p_feature=0.0, p_target=0.3, randomize_fraction=0.0)
    kwargs["generator"] = torch.Generator().manual_seed(0)
    per_row_token = (
        mask_for_training(values, torch.zeros(n, d, dtype=torch.bool), policy=token, **kwargs)
        .score_target[:, targets]
        .sum(1)
    )
    assert {1, 2} & set(per_row_token.tolist())  # token masking splits rows


def test_trainer_anneals_lambda_from_half_and_learns():
    """SPIN through the shared Trainer: lambda_0 = 0.5 cosine-annealed to 0; the loss drops."""
    torch.manual_seed(0)
    layout = ColumnLayout(("continuous", "continuous", "categorical"), (0, 0, 2))
    model = SPIN(SPINConfig(d_embedding=8, n_heads=2, n_blocks=1, dropout=0.0), layout)
    config = TrainConfig.preset("cpu", model="spin").replace(
        max_steps=80, learning_rate=3e-3, tradeoff_steps=None
    )
    trainer = Trainer(
        model, layout, torch.tensor([False, False, True]), config, generator=torch.Generator().manual_seed(0)
    )
    assert trainer.tradeoff(0) == 0.5
    assert math.isclose(trainer.tradeoff(40), 0.25, abs_tol=1e-9)
    assert trainer.tradeoff(80) < 1e-12
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 2, generator=g)
    values = torch.cat([x, (x[:, :1] > 0).float()], dim=1)
    batch = Batch(values, torch.zeros_like(values, dtype=torch.bool), torch.ones(128, dtype=torch.bool))
    history = trainer.fit(lambda step: batch)
    first, last = sum(history.train_loss[:10]) / 10, sum(history.train_loss[-10:]) / 10
    assert last < 0.6 * first, (first, last)


def test_right_sizing_options_shape_the_blocks():
    """``column_heads`` reaches XABA and ABLA (XABD and the predictor keep ``n_heads``),
    ``ff_multiplier`` every feed-forward, and ``max_row_width`` lowers e on a wide table."""
    model = _model(column_heads=1, ff_multiplier=2)
    layer = model.layers[0]
    assert (layer.xaba.attention.n_heads, layer.abla.attention.n_heads) == (1, 1)
    assert (layer.xabd.attention.n_heads, model.predictor.attention.n_heads) == (2, 2)
    assert model.predictor.ff[0].out_features == 2 * 6 * 8
    values, hidden = _table(10)
    assert model(values, hidden).continuous.shape == (10, 4, 1)
    capped = _model(d_embedding=16, max_row_width=48)  # 6 columns x 16 = 96 > 48 -> e = 8
    assert capped.config.d_embedding == 8
    assert capped.predictor.norm_q.normalized_shape == (6 * 8,)
    assert capped(values, hidden).continuous.shape == (10, 4, 1)
    assert _model(d_embedding=16).config.d_embedding == 16  # no cap: the paper's e
