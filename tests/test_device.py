"""Device choice, mixed precision and the dropout masks that training's speed rests on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import functional_call, stack_module_state, vmap

from semiparam import NPTClassifier, NPTConfig, NPTRegressor, SPINRegressor, TrainConfig
from semiparam.models.npt import NPT
from semiparam.nn.columns import ColumnLayout
from semiparam.nn.dropout import dropout, keep_mask
from semiparam.training.device import autocast_dtype, predict_dtype, resolve_device


def test_auto_device_is_what_this_machine_has() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available() and getattr(torch.backends, "mps", None) is not None:
        expected = "mps" if torch.backends.mps.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="device"):
        resolve_device("no-such-device")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")


def test_precision_rules() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert autocast_dtype(cpu, "auto") is None and autocast_dtype(cuda, "auto") == torch.bfloat16
    assert autocast_dtype(cpu, "bf16") == torch.bfloat16 and autocast_dtype(cuda, "off") is None
    assert predict_dtype(cpu, "auto") == torch.float64 and predict_dtype(cuda, "auto") == torch.float32
    assert predict_dtype(cpu, "float32") == torch.float32 and predict_dtype(cuda, "float64") == torch.float64
    with pytest.raises(Exception, match="mixed_precision"):
        TrainConfig(mixed_precision="fp8")


@pytest.mark.parametrize("cls", [NPTClassifier, NPTRegressor, SPINRegressor])
def test_estimators_default_to_auto(cls) -> None:
    assert cls().get_params()["device"] == "auto"


def test_auto_fit_says_where_it_trains_and_predicts_in_float64_on_cpu(capsys) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int)
    model = NPTClassifier(random_state=0, max_steps=5, n_estimators=2, verbose=True).fit(X, y)
    err = capsys.readouterr().err
    device = resolve_device("auto")
    assert f"2 npt members on {device}" in err
    assert model.device == "auto" and model.learner_.device == device
    if device.type == "cpu":
        member = model.learner_.members[0]
        assert next(member.inference_module().parameters()).dtype == torch.float64
        assert next(member.module.parameters()).dtype == torch.float32


def test_bf16_autocast_trains_on_the_cpu_and_keeps_float32_weights() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 3))
    y = X[:, 0] * 2 + 0.1 * rng.normal(size=80)
    plain = NPTRegressor(random_state=0, max_steps=15, n_estimators=1, device="cpu")
    mixed = NPTRegressor(
        random_state=0, max_steps=15, n_estimators=1, device="cpu", train_options={"mixed_precision": "bf16"}
    )
    plain.fit(X, y)
    mixed.fit(X, y)
    assert all(p.dtype == torch.float32 for p in mixed.learner_.module.parameters())
    assert np.isfinite(mixed.history_.train_loss).all()
    # the same model trained in another precision: close, not identical
    a, b = plain.predict(X), mixed.predict(X)
    assert np.isfinite(b).all() and not np.array_equal(a, b)
    assert np.corrcoef(a, b)[0, 1] > 0.9


def test_keep_mask_rate_and_independence() -> None:
    g = torch.Generator().manual_seed(0)
    for p in (0.1, 0.5, 0.9):
        mask = keep_mask((400, 500), p, g, torch.device("cpu"))
        assert mask.dtype == torch.bool and mask.shape == (400, 500)
        assert abs((~mask).float().mean().item() - p) < 0.005
    # the four 16-bit lanes of a 64-bit draw are independent: neighbours agree as chance says
    mask = keep_mask((200_000,), 0.5, g, torch.device("cpu")).view(-1, 4).float()
    corr = np.corrcoef(mask.T.numpy())
    assert np.abs(corr - np.eye(4)).max() < 0.02
    # odd sizes and the same stream from the same seed
    a = keep_mask((7, 3), 0.3, torch.Generator().manual_seed(5), torch.device("cpu"))
    b = keep_mask((7, 3), 0.3, torch.Generator().manual_seed(5), torch.device("cpu"))
    assert torch.equal(a, b)


def test_dropout_scales_kept_values() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.ones(50_000)
    y = dropout(x, 0.2, generator=g)
    kept = y[y != 0]
    assert torch.allclose(kept, torch.full_like(kept, 1 / 0.8))
    assert abs(y.mean().item() - 1.0) < 0.02
    assert torch.equal(dropout(x, 0.2, generator=g, training=False), x)


def test_npt_forward_batches_over_members_with_vmap() -> None:
    """The column embedding writes nothing in place, so torch.func can run several members of an
    ensemble as one batched model; each member's output equals its own forward pass."""
    layout = ColumnLayout(("continuous", "categorical", "continuous"), (0, 3, 0))
    torch.manual_seed(0)
    members = [NPT(NPTConfig(d_embedding=8, n_heads=2, n_blocks=2, dropout=0.0), layout) for _ in range(3)]
    values = torch.tensor([[0.5, 1.0, -1.0], [1.5, 2.0, 0.0], [-0.3, 0.0, 2.0], [0.1, 1.0, 0.4]])
    hidden = torch.tensor([[False, False, True], [False, True, False], [False] * 3, [True, False, False]])
    params, buffers = stack_module_state(members)

    def one(p, b, v, h):
        out = functional_call(members[0], (p, b), (v, h))
        return out.continuous, out.categorical[0]

    stacked = vmap(one, in_dims=(0, 0, None, None))(params, buffers, values, hidden)
    for k, member in enumerate(members):
        own = member(values, hidden)
        torch.testing.assert_close(stacked[0][k], own.continuous)
        torch.testing.assert_close(stacked[1][k], own.categorical[0])


def test_compiled_training_step_learns_the_same_model() -> None:
    """train_options={"compile": True} runs the training forward through torch.compile: the
    same computation, so the same fit up to float rounding."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 2))
    y = X[:, 0] - X[:, 1]
    small = {"d_embedding": 4, "n_heads": 2, "n_blocks": 2, "n_frequencies": 0}
    kwargs = dict(random_state=0, max_steps=8, n_estimators=1, device="cpu", model_options=small)
    eager = NPTRegressor(**kwargs).fit(X, y)
    compiled = NPTRegressor(**kwargs, train_options={"compile": True}).fit(X, y)
    np.testing.assert_allclose(compiled.history_.train_loss, eager.history_.train_loss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(compiled.predict(X), eager.predict(X), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("numel", [1, 7, 4000, 4003])
def test_keep_mask_by_shifts_is_the_int16_view_mask(numel: int) -> None:
    """The arithmetic path (vmap before PyTorch 2.13, where ``view(torch.int16)`` has no batching
    rule) draws the same mask as the int16 view, lane for lane, at any keep rate."""
    from semiparam.nn.dropout import _keep_mask_by_shifts

    for p in (0.0001, 0.1, 0.5, 0.9):
        words = torch.randint(-(1 << 63), (1 << 63) - 1, ((numel + 3) // 4,), dtype=torch.int64)
        threshold = round(p * 65536) - 32768
        expected = words.view(torch.int16)[:numel] >= threshold
        assert torch.equal(_keep_mask_by_shifts(words, numel, p), expected)
    g = torch.Generator().manual_seed(3)
    mask = keep_mask((numel,), 0.3, g, torch.device("cpu"))
    words = torch.randint(
        -(1 << 63),
        (1 << 63) - 1,
        ((numel + 3) // 4,),
        dtype=torch.int64,
        generator=torch.Generator().manual_seed(3),
    )
    assert torch.equal(_keep_mask_by_shifts(words, numel, 0.3), mask)
