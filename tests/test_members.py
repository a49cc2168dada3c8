"""Ensemble members trained together (training.members): the same members as one after another."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from semiparam import NPTClassifier, NPTRegressor, SPINRegressor
from semiparam.training import members as members_module
from semiparam.training.optim import LambLookahead

SMALL = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2, "dropout": 0.0, "n_frequencies": 4}


def _table(n: int = 90, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X[:, 0] - 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


def _fit(cls, together: str, X, y, **kwargs):
    options = {"members_together": together, **kwargs.pop("train_options", {})}
    model = cls(random_state=3, n_estimators=3, device="cpu", train_options=options, **kwargs)
    return model.fit(X, y)


@pytest.mark.parametrize("math_attention", [False, True], ids=["cpu-kernels", "math-kernel"])
@pytest.mark.parametrize("cls", [NPTRegressor, SPINRegressor])
def test_together_trains_the_members_one_after_another_would(cls, math_attention, monkeypatch) -> None:
    """Without dropout every draw of a member is its own (weights, validation split, masks), so
    training together changes nothing but float rounding; with patience 2 the members stop at
    different steps and leave the stack one by one. Also with the attention kernels the stack
    uses on CUDA (the math kernel only), forced here on the CPU."""
    if math_attention:
        kernels = members_module.stacked_attention_kernels
        monkeypatch.setattr(
            members_module, "stacked_attention_kernels", lambda device: kernels(device, math=True)
        )
    X, y = _table()
    stopping = {"min_steps": 0, "eval_every": 2, "min_anneal_steps": 4}
    options = dict(max_steps=200, patience=2, model_options=SMALL, train_options=stopping)
    if cls is SPINRegressor:
        options["model_options"] = {"d_embedding": 8, "n_heads": 2, "dropout": 0.0}
        # the masking rate stated, not the preset's: this compares two ways of running one fit,
        # and its float drift over 200 steps should not move with a change of the preset
        options["train_options"] = {**stopping, "p_feature": 0.15}
    serial = _fit(cls, "never", X, y, **options)
    together = _fit(cls, "always", X, y, **options)
    assert not serial.learner_.trains_together() and together.learner_.trains_together()
    for a, b in zip(serial.history_.members, together.history_.members, strict=True):
        assert a.steps == b.steps and a.best_step == b.best_step and a.stop_reason == b.stop_reason
        np.testing.assert_allclose(a.val_loss, b.val_loss, rtol=1e-3, atol=1e-5)
    assert len({m.n_steps for m in together.history_.members}) > 1  # they stopped apart
    np.testing.assert_allclose(together.predict(X), serial.predict(X), rtol=1e-3, atol=1e-3)


def test_each_member_ends_with_its_best_weights() -> None:
    X, y = _table(seed=1)
    stopping = {"min_steps": 0, "eval_every": 2, "min_anneal_steps": 4}
    model = _fit(
        NPTRegressor, "always", X, y, max_steps=100, patience=2, model_options=SMALL, train_options=stopping
    )
    for member, history in zip(model.learner_.members, model.history_.members, strict=True):
        ctx, val = member.training_setup(member.encoder, *_encoded(model, X, y)).validation
        assert member._target_loss(ctx, val) == pytest.approx(history.best_val_loss, rel=1e-5)


def _encoded(model, X, y):
    import pandas as pd

    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    frame["__target__"] = y
    return model.learner_.encoder.transform(frame), None


def test_together_with_dropout_classifies_and_uses_one_time_budget() -> None:
    X, _ = _table(120, seed=2)
    labels = (X[:, 0] > 0).astype(int)
    options = {**SMALL, "dropout": 0.1}
    model = _fit(NPTClassifier, "always", X, labels, max_steps=150, model_options=options, time_budget=60.0)
    assert model.learner_.members[0].train_config.time_budget == 60.0  # not split three ways
    proba = model.predict_proba(X)
    assert proba.shape == (120, 2) and np.allclose(proba.sum(1), 1)
    assert (proba.argmax(1) == labels).mean() > 0.7


def test_auto_trains_together_only_off_the_cpu() -> None:
    X, y = _table()
    model = _fit(NPTRegressor, "auto", X, y, max_steps=5, model_options=SMALL)
    assert model.learner_.trains_together() == (model.learner_.device.type != "cpu")
    # a checkpointed fit always trains its members one after another
    assert not model.learner_.trains_together(checkpoint_dir="somewhere")


def test_member_optimizer_steps_each_member_as_alone() -> None:
    """LAMB's trust ratio and the learning rate per member: a stacked step is M separate steps."""
    torch.manual_seed(0)
    weights = [torch.randn(4, 3) for _ in range(3)]
    grads = [torch.randn(4, 3) for _ in range(3)]
    rates = [1e-2, 5e-3, 0.0]
    alone = []
    for w, g, lr in zip(weights, grads, rates, strict=True):
        p = torch.nn.Parameter(w.clone())
        opt = LambLookahead([p], lr=lr, k=2)
        for _ in range(3):
            p.grad = g.clone()
            opt.step()
        alone.append(p.detach())
    stacked = torch.nn.Parameter(torch.stack(weights))
    opt = LambLookahead([stacked], lr=0.0, k=2, members=3)
    opt.param_groups[0]["lr"] = torch.tensor(rates)
    for _ in range(3):
        stacked.grad = torch.stack(grads)
        opt.step()
    torch.testing.assert_close(stacked.detach(), torch.stack(alone))
    # a member leaving the stack keeps the others' state: they continue as alone
    keep = torch.tensor([0, 2])
    smaller = torch.nn.Parameter(stacked.detach().index_select(0, keep).clone())
    opt2 = opt.restricted([stacked], [smaller], keep)
    assert opt2.state[smaller]["exp_avg"].shape == (2, 4, 3)
    torch.testing.assert_close(opt2.state[smaller]["slow"], opt.state[stacked]["slow"][keep])


def test_stacked_attention_kernels_are_the_math_kernel_on_cuda_only() -> None:
    """On CUDA the stack's attention runs PyTorch's math kernel (the fused kernels' backward failed
    under vmap there); elsewhere the choice is PyTorch's."""
    import contextlib

    assert isinstance(members_module.stacked_attention_kernels(torch.device("cpu")), contextlib.nullcontext)
    with members_module.stacked_attention_kernels(torch.device("cuda")):
        from torch.backends.cuda import flash_sdp_enabled, math_sdp_enabled, mem_efficient_sdp_enabled

        assert math_sdp_enabled() and not flash_sdp_enabled() and not mem_efficient_sdp_enabled()
