"""Invariants of the NPT module itself (ARCHITECTURE.md, "Invariants worth a test each")."""

import pytest
import torch

from semiparam import ConfigError, NPTConfig
from semiparam.models.npt import NPT, AttentionBetweenAttributes, AttentionBetweenDatapoints
from semiparam.nn.columns import ColumnLayout

LAYOUT = ColumnLayout(("continuous", "categorical", "continuous", "categorical"), (0, 3, 0, 2))


def _table(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(n, 4, generator=g)
    values[:, 1] = torch.randint(0, 3, (n,), generator=g).float()
    values[:, 3] = torch.randint(0, 2, (n,), generator=g).float()
    hidden = torch.rand(n, 4, generator=g) < 0.25
    return values, hidden


def _model(**overrides) -> NPT:
    torch.manual_seed(0)
    config = NPTConfig(d_embedding=8, n_heads=2, n_blocks=4, **overrides)
    return NPT(config, LAYOUT).eval()


def test_blocks_alternate_starting_with_abd():
    model = _model()
    kinds = [type(b) for b in model.blocks]
    assert kinds == [AttentionBetweenDatapoints, AttentionBetweenAttributes] * 2
    no_aba = _model(use_aba=False)
    assert [type(b) for b in no_aba.blocks] == [AttentionBetweenDatapoints] * 2


def test_output_shapes():
    model = _model()
    values, hidden = _table(10)
    out = model(values, hidden)
    assert out.continuous.shape == (10, 2, 1)
    assert [c.shape for c in out.categorical] == [(10, 3), (10, 2)]
    gaussian = _model(gaussian_head=True)(values, hidden)
    assert gaussian.continuous.shape == (10, 2, 2)


@pytest.mark.parametrize("scale", ["full", "per_head"])
def test_row_permutation_equivariance(scale):
    model = _model(attention_scale=scale)
    values, hidden = _table(25)
    perm = torch.randperm(25, generator=torch.Generator().manual_seed(1))
    out = model(values, hidden)
    out_perm = model(values[perm], hidden[perm])
    torch.testing.assert_close(out.continuous[perm], out_perm.continuous, atol=1e-5, rtol=1e-5)
    for a, b in zip(out.categorical, out_perm.categorical):
        torch.testing.assert_close(a[perm], b, atol=1e-5, rtol=1e-5)


def test_rows_interact_through_abd():
    """Not a per-row model: changing another row changes a row's prediction."""
    model = _model()
    values, hidden = _table(12)
    before = model(values, hidden).continuous[0]
    values2 = values.clone()
    values2[5, 0] += 3.0
    after = model(values2, hidden).continuous[0]
    assert (before - after).abs().max() > 1e-4


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_cached_context_equals_full_masked_pass(similarity):
    model = _model(row_similarity=similarity)
    values, hidden = _table(30)
    is_query = torch.zeros(30, dtype=torch.bool)
    is_query[20:] = True
    full = model(values, hidden, is_query=is_query)
    cache = model.encode_context(values[~is_query], hidden[~is_query])
    cached = model.forward_queries(values[is_query], hidden[is_query], cache)
    torch.testing.assert_close(full.continuous[is_query], cached.continuous, atol=1e-5, rtol=1e-5)
    for a, b in zip(full.categorical, cached.categorical):
        torch.testing.assert_close(a[is_query], b, atol=1e-5, rtol=1e-5)


def test_cosine_rows_attend_most_to_themselves_and_their_copies_untrained():
    """row_similarity="cosine": one projection for queries and keys, so before any training each
    row's largest attention weights (every head) go to itself and to an exact copy of it, where
    the paper's two projections rank its copy anywhere."""
    values, hidden = _table(20)
    values, hidden = torch.cat([values, values]), torch.cat([hidden, hidden])
    twins = torch.arange(40).remainder(20)

    def top_two(model: NPT) -> torch.Tensor:
        mab = model.blocks[0].mab
        weights = mab.self_attention_weights(model._embed(values, hidden).reshape(1, 40, -1))[0]
        return weights.topk(2, dim=-1).indices.remainder(20)  # (heads, rows, 2)

    cosine = _model(row_similarity="cosine")
    attention = cosine.blocks[0].mab.attention
    abd = [b for b in cosine.blocks if isinstance(b, AttentionBetweenDatapoints)]
    assert all(b.mab.attention.k is None and "mab.attention.k.weight" not in b.state_dict() for b in abd)
    assert (top_two(cosine) == twins[None, :, None]).all()
    assert (top_two(_model()) != twins[None, :, None]).any()  # the paper's dot product: not so
    # the temperature is learned, per head
    assert attention.log_temperature.requires_grad and attention.log_temperature.shape == (2,)


def test_cosine_similarity_needs_one_width():
    from semiparam.nn.attention import MultiheadAttention

    with pytest.raises(ValueError, match="kv_width"):
        MultiheadAttention(8, 2, kv_width=4, similarity="cosine")


def test_query_rows_do_not_see_each_other():
    model = _model()
    values, hidden = _table(30)
    cache = model.encode_context(values[:20], hidden[:20])
    together = model.forward_queries(values[20:], hidden[20:], cache)
    alone = model.forward_queries(values[20:21], hidden[20:21], cache)
    torch.testing.assert_close(together.continuous[:1], alone.continuous, atol=1e-5, rtol=1e-5)
    changed = values[20:].clone()
    changed[1:] = torch.randn_like(changed[1:])
    other = model.forward_queries(changed, hidden[20:], cache)
    torch.testing.assert_close(other.continuous[:1], alone.continuous, atol=1e-5, rtol=1e-5)


def test_hidden_value_is_ignored():
    """A hidden cell's value never reaches the model: only its mask bit does."""
    model = _model()
    values, hidden = _table(15)
    hidden[3, 0] = True
    hidden[3, 1] = True
    changed = values.clone()
    changed[3, 0] = 100.0
    changed[3, 1] = 2.0
    torch.testing.assert_close(model(values, hidden).continuous, model(changed, hidden).continuous)


@pytest.mark.parametrize("kind", ["attention_dropout", "dropout"])
def test_dropout_acts_in_training_only(kind: str) -> None:
    """Dropout (on attention weights, or on activations) makes two training-mode passes differ and
    leaves evaluation deterministic; with the rate at 0 training-mode passes agree too, so the
    difference comes from that dropout and nothing else."""
    values, hidden = _table(10)
    off = {"attention_dropout": 0.0, "dropout": 0.0}
    model = _model(**{**off, kind: 0.5})
    torch.testing.assert_close(model(values, hidden).continuous, model(values, hidden).continuous)
    model.train()
    a, b = model(values, hidden).continuous, model(values, hidden).continuous
    assert not torch.allclose(a, b)
    model.eval()
    torch.testing.assert_close(model(values, hidden).continuous, model(values, hidden).continuous)
    plain = _model(**off).train()
    torch.testing.assert_close(plain(values, hidden).continuous, plain(values, hidden).continuous)


@pytest.mark.parametrize(
    "bad",
    [
        {"n_blocks": 3},
        {"d_embedding": 10, "n_heads": 4},
        {"dropout": 1.5},
        {"attention_scale": "sqrt"},
        {"n_blocks": "eight"},
        {"column_heads": 0},
        {"d_embedding": 8, "n_heads": 2, "column_heads": 3},
        {"max_row_width": 0},
        {"n_heads": 0},
    ],
)
def test_invalid_config_raises(bad):
    with pytest.raises(ConfigError, match="|".join(bad)):
        NPTConfig(**bad)


def test_unknown_config_key_raises():
    with pytest.raises(ConfigError, match="n_layerz"):
        NPTConfig.from_dict({"n_layerz": 4})


def test_presets_match_paper():
    small, base = NPTConfig.paper_small(), NPTConfig.paper_base()
    assert (small.n_blocks, small.n_heads, small.d_embedding) == (8, 8, 128)
    assert (base.n_blocks, base.n_heads, base.d_embedding) == (8, 8, 64)
    assert small.attention_dropout == 0.1 and small.dropout == 0.1


def test_column_heads_set_the_attention_within_a_row_only():
    """``column_heads`` gives ABA its own head count; ABD keeps ``n_heads``; None is n_heads."""
    model = _model(column_heads=1)
    heads = [b.mab.attention.n_heads for b in model.blocks]
    assert heads == [2, 1, 2, 1]
    assert [b.mab.attention.n_heads for b in _model().blocks] == [2, 2, 2, 2]
    values, hidden = _table(12)
    assert model(values, hidden).continuous.shape == (12, 2, 1)


@pytest.mark.parametrize(
    ("e", "columns", "n_heads", "column_heads", "expected"),
    [
        (16, 4, 4, None, 16),
        (16, 8, 4, None, 16),
        (16, 9, 4, None, 12),
        (16, 30, 4, None, 4),
        (16, 30, 4, 1, 4),
        (12, 20, 2, 3, 6),
        (12, 40, 2, 3, 6),
    ],
)
def test_row_cap_lowers_e_to_a_multiple_of_every_head_count(e, columns, n_heads, column_heads, expected):
    config = NPTConfig(d_embedding=e, n_heads=n_heads, column_heads=column_heads, max_row_width=128)
    capped = config.for_columns(columns).d_embedding
    assert capped == expected
    assert capped % n_heads == 0 and capped % (column_heads or n_heads) == 0
