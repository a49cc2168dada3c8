"""The library's LAMB + Lookahead against the maintained pytorch_optimizer pair it replaces."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from semiparam.training.optim import LambLookahead

pytorch_optimizer = pytest.importorskip("pytorch_optimizer")


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU(), torch.nn.Linear(7, 3))
    model.register_parameter("zero", torch.nn.Parameter(torch.zeros(4)))  # ||w|| = 0: trust ratio 1
    model.register_parameter("unused", torch.nn.Parameter(torch.ones(2)))  # never has a gradient
    return model


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    gen = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = torch.randn(16, 5, generator=gen)
        loss = model(x).pow(2).mean() + (model.zero * torch.arange(4.0)).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for group in optimizer.param_groups:
            group["lr"] = 1e-2 * (1 + step % 3)  # the schedule sets the rate every step
        optimizer.step()


def test_matches_pytorch_optimizer_lamb_lookahead() -> None:
    ours, theirs = _model(0), _model(0)
    k, alpha = 6, 0.5
    lamb = pytorch_optimizer.Lamb(
        theirs.parameters(), lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0
    )
    _train(theirs, pytorch_optimizer.Lookahead(lamb, k=k, alpha=alpha), 20)
    _train(ours, LambLookahead(ours.parameters(), lr=1e-2, k=k, alpha=alpha), 20)
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert not torch.equal(ours[0].weight, _model(0)[0].weight)  # it trained


def test_state_dict_round_trip_continues_exactly() -> None:
    a, b = _model(0), _model(0)
    opt_a = LambLookahead(a.parameters(), lr=1e-2, k=4)
    _train(a, opt_a, 7)
    b.load_state_dict(a.state_dict())
    opt_b = LambLookahead(b.parameters(), lr=1e-2, k=4)
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # as read back from a checkpoint
    _train(a, opt_a, 5)
    _train(b, opt_b, 5)
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(x, y)


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="alpha"):
        LambLookahead(_model(0).parameters(), alpha=1.5)


def test_a_fit_does_not_import_torch_dynamo() -> None:
    """torch.optim wraps add_param_group and zero_grad so that their first call imports
    torch._dynamo (over a second of a small fit); nothing in a default fit compiles."""
    code = (
        "import sys, numpy as np\n"
        "from semiparam import NPTRegressor\n"
        "X = np.random.default_rng(0).normal(size=(40, 3)); y = X[:, 0]\n"
        "m = NPTRegressor(n_estimators=1, max_steps=3, random_state=0).fit(X, y)\n"
        "m.predict(X[:5])\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_zero_grad_still_clears_or_zeroes() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    opt = LambLookahead([w], lr=0.1)
    w.grad = torch.ones(3)
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and not w.grad.any()
    opt.zero_grad()
    assert w.grad is None
