"""The attention-backend harness (spec-weng F3): every registered backend against the dense
reference, row-permutation equivariance, key masks, pair masks, and the memory savers."""

import pytest
import torch

from semiparam import ConfigError, NPTConfig, SPINConfig
from semiparam.models.npt import NPT
from semiparam.models.spin import SPIN
from semiparam.nn.backends import (
    BACKENDS,
    DenseAttention,
    _DropoutAttention,
    dropout_attention,
    dropout_mask,
    make_backend,
    orthogonal_gaussian,
)
from semiparam.nn.columns import ColumnLayout

DH = 8
SCALE = DH**-0.5
# the error each backend may show against dense softmax attention on the inputs below (queries and
# keys of norm ~1.4 per head, 40 queries over 50 keys): exact ones float rounding; performer's
# 256 random features a Monte Carlo estimate (relative error ~ 1/sqrt(features));
# topk with 50 >= n_keys is exact
TOLERANCE = {"performer": 0.2}
OPTIONS = {"topk": {"top_k": 50}, "chunked": {"chunk": 16}, "sdpa": {"chunk": 16}}


def _qkv(seed: int = 0, n_q: int = 40, n_k: int = 50, b: int = 2, h: int = 2, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n_q, DH, generator=g, dtype=dtype) * 0.5
    k = torch.randn(b, h, n_k, DH, generator=g, dtype=dtype) * 0.5
    v = torch.randn(b, h, n_k, DH, generator=g, dtype=dtype)
    return q, k, v


def _backend(name: str):
    torch.manual_seed(0)
    return make_backend(name, DH, **OPTIONS.get(name, {}))


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.fixture(params=sorted(BACKENDS))
def name(request) -> str:
    return request.param


def test_backend_against_dense_reference(name):
    q, k, v = _qkv()
    reference = DenseAttention(DH)(q, k, v, scale=SCALE)
    out = _backend(name)(q, k, v, scale=SCALE)
    assert out.shape == reference.shape
    tolerance = TOLERANCE.get(name, 1e-5)
    assert _relative_error(out, reference) < tolerance
    assert BACKENDS[name].exact == (name not in ("performer", "topk"))


def test_paired_against_dense_reference(name):
    """Each query over the shared context and its own key, as a masked dense attention."""
    q, k_ctx, v_ctx = _qkv(1, n_q=12, n_k=30, b=1)
    _, k_self, v_self = _qkv(2, n_q=12, n_k=12, b=1)
    out = _backend(name).paired(q, k_ctx, v_ctx, k_self, v_self, scale=SCALE)
    k = torch.cat([k_ctx, k_self], dim=2)
    v = torch.cat([v_ctx, v_self], dim=2)
    mask = torch.cat([torch.ones(12, 30, dtype=torch.bool), torch.eye(12, dtype=torch.bool)], dim=1)
    reference = DenseAttention(DH)(q, k, v, scale=SCALE, attn_mask=mask)
    assert _relative_error(out, reference) < TOLERANCE.get(name, 1e-5)


def test_row_permutation_equivariance(name):
    backend = _backend(name)
    q, k, v = _qkv(3)
    out = backend(q, k, v, scale=SCALE)
    g = torch.Generator().manual_seed(4)
    perm_k = torch.randperm(k.shape[2], generator=g)
    perm_q = torch.randperm(q.shape[2], generator=g)
    # keys (with their values) in another order: the same outputs
    shuffled = backend(q, k[:, :, perm_k], v[:, :, perm_k], scale=SCALE)
    torch.testing.assert_close(shuffled, out, atol=1e-5, rtol=1e-4)
    # queries in another order: the outputs in that order
    reordered = backend(q[:, :, perm_q], k, v, scale=SCALE)
    torch.testing.assert_close(reordered, out[:, :, perm_q], atol=1e-5, rtol=1e-4)


def test_key_mask(name):
    """Masked keys have no influence, and the result is the attention over the kept keys."""
    backend = _backend(name)
    q, k, v = _qkv(5)
    keep = torch.rand(k.shape[2], generator=torch.Generator().manual_seed(6)) < 0.6
    mask = keep.view(1, 1, 1, -1)
    out = backend(q, k, v, scale=SCALE, attn_mask=mask)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, ~keep] = torch.randn_like(k2[:, :, ~keep]) * 3
    v2[:, :, ~keep] = 100.0
    torch.testing.assert_close(backend(q, k2, v2, scale=SCALE, attn_mask=mask), out, atol=1e-5, rtol=1e-4)
    kept = backend(q, k[:, :, keep], v[:, :, keep], scale=SCALE)
    torch.testing.assert_close(out, kept, atol=1e-5, rtol=1e-4)


def test_pair_mask(name):
    q, k, v = _qkv(7)
    pairs = torch.rand(q.shape[2], k.shape[2], generator=torch.Generator().manual_seed(8)) < 0.5
    pairs[:, 0] = True  # every query keeps a key
    backend = _backend(name)
    if not BACKENDS[name].pair_masks:
        with pytest.raises(ValueError, match="key masks only"):
            backend(q, k, v, scale=SCALE, attn_mask=pairs)
        return
    reference = DenseAttention(DH)(q, k, v, scale=SCALE, attn_mask=pairs)
    out = backend(q, k, v, scale=SCALE, attn_mask=pairs)
    assert _relative_error(out, reference) < TOLERANCE.get(name, 1e-5)


def test_topk_keeps_the_k_best_keys():
    q, k, v = _qkv(9)
    out = make_backend("topk", DH, top_k=5, chunk=7)(q, k, v, scale=SCALE)
    scores = torch.matmul(q, k.transpose(-1, -2)) * SCALE
    fifth = scores.topk(5, dim=-1).values[..., -1:]
    reference = DenseAttention(DH)(q, k, v, scale=SCALE, attn_mask=scores >= fifth)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-4)


def test_chunked_gradients_equal_dense():
    q, k, v = (t.double().requires_grad_() for t in _qkv(10))
    torch.autograd.gradcheck(
        lambda q, k, v: make_backend("chunked", DH, chunk=7)(q, k, v, scale=SCALE),
        (q[:1, :1, :15], k[:1, :1, :9], v[:1, :1, :9]),
    )
    grads = []
    for backend in (make_backend("chunked", DH, chunk=7), DenseAttention(DH)):
        q.grad = k.grad = v.grad = None
        backend(q, k, v, scale=SCALE).square().sum().backward()
        grads.append([t.grad.clone() for t in (q, k, v)])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def _masked_reference(q, k, v, attn_mask, p, chunk, seed):
    """Attention with dropout written out with autograd, each chunk's mask from ``dropout_mask``
    as :func:`dropout_attention` seeds it."""
    pieces = []
    for i, s in enumerate(range(0, q.shape[-2], chunk)):
        scores = torch.matmul(q[..., s : s + chunk, :], k.transpose(-1, -2)) * SCALE
        scores = scores.masked_fill(~attn_mask[..., s : s + chunk, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        drop, keep_scale = dropout_mask(tuple(probs.shape), p, seed + i)
        pieces.append(torch.matmul(probs.masked_fill(drop, 0.0) * keep_scale, v))
    return torch.cat(pieces, dim=2)


def test_chunked_dropout_gradients_match_its_masks():
    """The dropout function's hand-written backward pass (which recomputes each chunk's weights and
    redraws its mask from the chunk's seed) equals autograd through the same masks, with a pair
    mask and keys shared across the batch (their gradient summed over it), and passes gradcheck."""
    q, k, v = (t.double() for t in _qkv(11, n_q=23, n_k=17))
    k, v = k[:1].requires_grad_(), v[:1].requires_grad_()
    q.requires_grad_()
    attn_mask = torch.rand(2, 1, 23, 17, generator=torch.Generator().manual_seed(3)) > 0.3
    attn_mask[..., 0] = True
    seed = 99
    function = _DropoutAttention.apply
    got = function(q, k, v, attn_mask, SCALE, 0.3, 5, seed)
    reference = _masked_reference(q, k, v, attn_mask, 0.3, 5, seed)
    torch.testing.assert_close(got, reference)
    grad = torch.randn_like(got)
    expected = torch.autograd.grad(reference, (q, k, v), grad)
    for a, b in zip(torch.autograd.grad(got, (q, k, v), grad), expected):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(
        lambda q, k, v: function(q, k, v, attn_mask[:, :, :7], SCALE, 0.3, 3, seed), (q[:, :, :7], k, v)
    )


def test_dropout_mask_rate_and_reproducibility():
    """Each element drops with probability p (to 2**-17), the kept ones are scaled to keep the
    mean, and the mask is a function of the seed alone: not of the number of threads."""
    torch.set_num_threads(2)
    try:
        drop, keep_scale = dropout_mask((3, 1000, 1000), 0.1, seed=5)  # 1.5M words: several parts
        torch.set_num_threads(1)
        again, _ = dropout_mask((3, 1000, 1000), 0.1, seed=5)
    finally:
        torch.set_num_threads(1)
    assert torch.equal(drop, again)
    assert not torch.equal(drop, dropout_mask((3, 1000, 1000), 0.1, seed=6)[0])
    assert abs(drop.double().mean().item() - 0.1) < 2e-3  # 3M draws: sd 1.7e-4
    assert keep_scale == pytest.approx(1 / (1 - round(0.1 * 2**16) / 2**16))
    assert not dropout_mask((50,), 0.0, seed=1)[0].any()
    assert dropout_mask((50,), 1.0, seed=1)[0].all()


def test_chunked_dropout_follows_the_generator():
    """The masks come from the generator handed in: the same state gives the same output, another
    state another one, and the global RNG is left alone."""
    q, k, v = _qkv(12)
    backend = make_backend("chunked", DH, chunk=16)
    outs = []
    for seed in (1, 1, 2):
        generator = torch.Generator().manual_seed(seed)
        outs.append(backend(q, k, v, scale=SCALE, dropout_p=0.3, generator=generator))
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)
    assert not torch.allclose(outs[0], outs[2])
    state = torch.get_rng_state()
    again = dropout_attention(
        q, k, v, scale=SCALE, dropout_p=0.3, chunk=16, generator=torch.Generator().manual_seed(1)
    )
    torch.testing.assert_close(again, outs[0], atol=0, rtol=0)
    assert torch.equal(state, torch.get_rng_state())


def test_sdpa_with_dropout_is_chunked_and_without_is_fused():
    q, k, v = _qkv(13)
    sdpa = make_backend("sdpa", DH, chunk=16)
    torch.testing.assert_close(
        sdpa(q, k, v, scale=SCALE),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=SCALE),
        atol=0,
        rtol=0,
    )
    torch.manual_seed(0)
    a = sdpa(q, k, v, scale=SCALE, dropout_p=0.5)
    torch.manual_seed(0)
    b = make_backend("chunked", DH, chunk=16)(q, k, v, scale=SCALE, dropout_p=0.5)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert not torch.allclose(a, sdpa(q, k, v, scale=SCALE))


def test_performer_features_are_fixed_and_deterministic():
    q, k, v = _qkv(14)
    backend = _backend("performer")
    torch.testing.assert_close(backend(q, k, v, scale=SCALE), backend(q, k, v, scale=SCALE), atol=0, rtol=0)
    assert "projection" in backend.state_dict()
    # more features, a closer estimate: the error falls as 1/sqrt(features), no bias left over
    reference = DenseAttention(DH)(q, k, v, scale=SCALE)
    errors = {}
    for m in (16, 4096):
        torch.manual_seed(0)
        estimate = make_backend("performer", DH, n_features=m)(q, k, v, scale=SCALE)
        errors[m] = _relative_error(estimate, reference)
    assert errors[4096] < 0.06 < errors[16]


def test_orthogonal_random_features_estimate_the_softmax_kernel_without_bias():
    """E[phi(x) . phi(y)] = exp(x . y) for the block-orthogonal draws (a QR without the sign
    correction biases the directions, and this estimate then stays off at any size)."""
    torch.manual_seed(0)
    x, y = torch.randn(5, DH) * 0.3, torch.randn(7, DH) * 0.3
    w = orthogonal_gaussian(65536, DH)

    def phi(t: torch.Tensor) -> torch.Tensor:
        return torch.exp(t @ w.T - 0.5 * (t * t).sum(-1, keepdim=True))

    estimate = phi(x) @ phi(y).T / w.shape[0]
    torch.testing.assert_close(estimate, torch.exp(x @ y.T), rtol=0.05, atol=0)


def test_unknown_backend_and_bad_options():
    with pytest.raises(ValueError, match="unknown attention backend 'nope'"):
        make_backend("nope", DH)
    with pytest.raises(TypeError, match="takes no options"):
        make_backend("dense", DH, chunk=4)
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        make_backend("chunked", DH, chunk=0)


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"row_attention": "nope"}, "is not an attention backend"),
        ({"column_attention": "performer", "attention_dropout": 0.1}, "does not apply attention dropout"),
        ({"attention_top_k": 0}, "attention_top_k must be >= 1"),
    ],
)
def test_config_checks_the_backend(bad, match):
    with pytest.raises(ConfigError, match=match):
        NPTConfig(**bad)
    with pytest.raises(ConfigError, match=match):
        SPINConfig(**bad)


# -- the backends inside the models --------------------------------------------------------------

LAYOUT = ColumnLayout(("continuous", "categorical", "continuous"), (0, 3, 0))


def _table(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(n, 3, generator=g)
    values[:, 1] = torch.randint(0, 3, (n,), generator=g).float()
    hidden = torch.rand(n, 3, generator=g) < 0.25
    return values, hidden


def _npt(**overrides) -> NPT:
    torch.manual_seed(0)
    return NPT(NPTConfig(d_embedding=8, n_heads=2, n_blocks=4, **overrides), LAYOUT)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_npt_trains_and_predicts_with_each_row_backend(backend):
    model = _npt(row_attention=backend, attention_top_k=8, attention_chunk=5)
    values, hidden = _table(20)
    out = model.train()(values, hidden)
    loss = out.continuous.square().mean() + sum(c.logsumexp(-1).mean() for c in out.categorical)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    model.eval()
    with torch.no_grad():
        cache = model.encode_context(values[:15], hidden[:15])
        queries = model.forward_queries(values[15:], hidden[15:], cache)
        one = model.forward_queries(values[15:16], hidden[15:16], cache)
    # a query's prediction does not depend on the other queries of its batch
    torch.testing.assert_close(queries.continuous[:1], one.continuous, atol=1e-5, rtol=1e-5)


def test_exact_backends_give_the_default_model():
    values, hidden = _table(30)
    reference = _npt().eval()(values, hidden).continuous
    for backend in ("dense", "chunked"):
        out = _npt(row_attention=backend, column_attention=backend, attention_chunk=7).eval()(values, hidden)
        torch.testing.assert_close(out.continuous, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("model_kind", ["npt", "spin"])
def test_checkpointed_blocks_give_the_same_gradients(model_kind):
    """Activation checkpointing recomputes the blocks (dropout and attention dropout included) in
    the backward pass."""
    values, hidden = _table(16)
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        settings = dict(
            d_embedding=8, n_heads=2, dropout=0.3, attention_dropout=0.2, checkpoint_blocks=checkpointed
        )
        if model_kind == "npt":
            model = NPT(NPTConfig(**settings), LAYOUT)
        else:
            model = SPIN(SPINConfig(**settings), LAYOUT)
        model.train()
        torch.manual_seed(1)
        model(values, hidden).continuous.square().sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for key in grads[0]:
        torch.testing.assert_close(grads[1][key], grads[0][key], atol=1e-6, rtol=1e-5)


def test_spin_with_an_approximate_row_backend_encodes_as_it_trains():
    """XABD with random features: the encoding used at prediction is the one-pass encoding (no
    exact streaming), so it equals the masked full pass at any chunk size."""
    torch.manual_seed(0)
    model = SPIN(SPINConfig(d_embedding=8, n_heads=2, row_attention="performer"), LAYOUT).eval()
    values, hidden = _table(30)
    is_query = torch.zeros(30, dtype=torch.bool)
    is_query[24:] = True
    with torch.no_grad():
        full = model(values, hidden, is_query).continuous[24:]
        state = model.encode_context(values[:24], hidden[:24], chunk_rows=5)
        streamed = model.forward_queries(values[24:], hidden[24:], state).continuous
    torch.testing.assert_close(streamed, full, atol=1e-5, rtol=1e-5)


def test_estimator_takes_a_backend_through_model_options():
    import numpy as np

    from semiparam import NPTRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=60)
    model = NPTRegressor(
        n_estimators=1,
        max_steps=5,
        model_options={"row_attention": "performer", "random_features": 32},
        random_state=0,
        verbose=False,
    ).fit(X, y)
    assert np.isfinite(model.predict(X[:7])).all()
    block = model.learner_.members[0].module.blocks[0]
    assert block.mab.attention.backend.name == "performer"
    assert block.mab.attention.backend.n_features == 32
