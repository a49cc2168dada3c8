"""GP task sampler, padded task batches, their storage, and the exact GP likelihood."""

from __future__ import annotations

import math

import pytest
import torch

from semiparam.neural_processes import (
    GPTaskSampler,
    TaskBatch,
    gp_log_likelihood,
    kernel_matrix,
    load_eval_set,
    load_task_batches,
    save_task_batches,
)


def test_sample_shapes_ranges_and_shared_sizes() -> None:
    sampler = GPTaskSampler(min_ctx=5, max_ctx=9, min_tgt=2, max_tgt=4, random_state=0)
    seen_m, seen_n = set(), set()
    for _ in range(40):
        batch = sampler.sample(3)
        b, m, _ = batch.context_x.shape
        n = batch.target_x.shape[1]
        assert b == 3 and batch.context_y.shape == (3, m, 1) and batch.target_y.shape == (3, n, 1)
        assert 5 <= m <= 9 and 2 <= n <= 4
        assert batch.context_mask.all() and batch.target_mask.all()  # shared sizes: no padding
        assert batch.context_x.abs().max() <= 2.0 and batch.target_x.abs().max() <= 2.0
        assert batch.context_x.dtype == torch.float32
        seen_m.add(m)
        seen_n.add(n)
    assert seen_m == set(range(5, 10)) and seen_n == {2, 3, 4}  # bounds are inclusive


def test_seed_reproduces_batches_and_differs_across_seeds() -> None:
    a = GPTaskSampler(min_ctx=4, max_ctx=8, random_state=3).sample(2)
    b = GPTaskSampler(min_ctx=4, max_ctx=8, random_state=3).sample(2)
    c = GPTaskSampler(min_ctx=4, max_ctx=8, random_state=4).sample(2)
    assert torch.equal(a.context_y, b.context_y) and torch.equal(a.target_x, b.target_x)
    assert a.context_y.shape != c.context_y.shape or not torch.equal(a.context_y, c.context_y)


def test_ragged_sizes_are_padded_with_masks() -> None:
    sampler = GPTaskSampler(min_ctx=2, max_ctx=12, min_tgt=1, max_tgt=6, shared_sizes=False, random_state=1)
    batch = sampler.sample(16)
    m_sizes = batch.context_mask.sum(1)
    assert len(set(m_sizes.tolist())) > 1  # sizes differ within the batch
    assert batch.is_padded
    # padding sits at the end of each task and holds zeros
    for i in range(16):
        k = int(m_sizes[i])
        assert batch.context_mask[i, :k].all() and not batch.context_mask[i, k:].any()
        assert (batch.context_y[i, k:] == 0).all() and (batch.context_x[i, k:] == 0).all()
        task = batch.task(i)
        assert task["context_x"].shape == (k, 1)
    rebuilt = TaskBatch.from_tasks([batch.task(i) for i in range(16)])
    assert torch.equal(rebuilt.context_y, batch.context_y) and torch.equal(
        rebuilt.target_mask, batch.target_mask
    )


def test_rbf_draws_have_the_kernel_covariance() -> None:
    # one context and one target point per task: E[y_c y_t] = k(x_c, x_t), Var y = s^2 + noise^2
    sampler = GPTaskSampler(
        min_ctx=1,
        max_ctx=1,
        min_tgt=1,
        max_tgt=1,
        lengthscale_range=(0.5, 0.5),
        scale_range=(0.8, 0.8),
        random_state=0,
    )
    batch = sampler.sample(20000)
    yc, yt = batch.context_y[:, 0, 0].double(), batch.target_y[:, 0, 0].double()
    xc, xt = batch.context_x[:, 0, 0].double(), batch.target_x[:, 0, 0].double()
    assert yc.var().item() == pytest.approx(0.64 + 0.02**2, rel=0.05)
    k = 0.64 * torch.exp(-0.5 * ((xc - xt) / 0.5) ** 2)
    # residual of the product around its expectation has mean ~0 (std error ~ 0.64 / sqrt(20000))
    assert abs((yc * yt - k).mean().item()) < 0.02
    assert (yc * yt).mean().item() > 0.1  # and it is not trivially zero


@pytest.mark.parametrize("kernel", ["rbf", "matern52", "periodic"])
def test_kernels_are_valid_covariances(kernel: str) -> None:
    x = torch.linspace(-2, 2, 30, dtype=torch.float64)[None, :, None]
    params = {k: torch.tensor([0.7], dtype=torch.float64) for k in ("lengthscale", "scale", "period")}
    cov = kernel_matrix(kernel, x, x, params)[0]
    assert torch.allclose(cov, cov.T)
    assert torch.allclose(cov.diagonal(), torch.full((30,), 0.49, dtype=torch.float64))
    assert torch.linalg.eigvalsh(cov).min() > -1e-8
    batch = GPTaskSampler(kernel, min_ctx=8, max_ctx=8, random_state=0).sample(4)
    assert torch.isfinite(batch.context_y).all() and batch.params is not None


def test_periodic_kernel_repeats_with_its_period() -> None:
    params = {"lengthscale": torch.tensor([0.8]), "scale": torch.tensor([1.0]), "period": torch.tensor([0.5])}
    x = torch.tensor([[[0.0]]])
    shifted = torch.tensor([[[0.0], [0.5], [1.0], [0.25]]])
    k = kernel_matrix("periodic", x, shifted, params)[0, 0]
    assert torch.allclose(k[:3], torch.ones(3), atol=1e-5) and k[3] < 0.1


def test_bad_sampler_arguments_raise() -> None:
    with pytest.raises(ValueError, match="unknown kernel 'laplace'"):
        GPTaskSampler("laplace")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_ctx=10, max_ctx=5"):
        GPTaskSampler(min_ctx=10, max_ctx=5)
    with pytest.raises(ValueError, match="min_tgt"):
        GPTaskSampler(min_tgt=0)
    with pytest.raises(ValueError, match="batch_size"):
        GPTaskSampler().sample(0)


def test_eval_set_is_fixed_and_round_trips_through_disk(tmp_path) -> None:
    sampler = GPTaskSampler(min_ctx=4, max_ctx=10, random_state=123)
    sampler.sample(5)  # drawing from the sampler does not change its evaluation set
    first = sampler.eval_set(3, 4, seed=7)
    again = GPTaskSampler(min_ctx=4, max_ctx=10, random_state=999).eval_set(3, 4, seed=7)
    assert all(torch.equal(a.context_y, b.context_y) for a, b in zip(first, again, strict=True))
    path = tmp_path / "eval.safetensors"
    saved = sampler.save_eval_set(path, 3, 4, seed=7)
    loaded, meta = load_eval_set(path)
    assert meta["settings"]["random_state"] == 7 and meta["n_batches"] == 3
    for a, b in zip(saved, loaded, strict=True):
        for name in ("context_x", "context_y", "target_x", "target_y", "context_mask", "target_mask"):
            assert torch.equal(getattr(a, name), getattr(b, name))
        assert b.params is not None and torch.equal(a.params["lengthscale"], b.params["lengthscale"])
    with pytest.raises(ValueError, match="safetensors"):
        save_task_batches(tmp_path / "eval.pt", saved, {})
    with pytest.raises(FileNotFoundError):
        load_task_batches(tmp_path / "missing.safetensors")


def test_gp_log_likelihood_matches_the_gaussian_conditional_and_ignores_padding() -> None:
    sampler = GPTaskSampler(min_ctx=3, max_ctx=9, min_tgt=2, max_tgt=5, shared_sizes=False, random_state=5)
    batch = sampler.sample(4)
    ll = gp_log_likelihood(batch, "rbf", 0.02)
    assert ll.shape == batch.target_mask.shape
    assert torch.isnan(ll[~batch.target_mask]).all() and torch.isfinite(ll[batch.target_mask]).all()
    assert batch.params is not None
    for i in range(4):
        task = batch.task(i)
        params = {k: v[i : i + 1].double() for k, v in batch.params.items()}
        x = torch.cat([task["context_x"], task["target_x"]]).double()[None]  # (1, m + n, 1)
        y = torch.cat([task["context_y"], task["target_y"]]).double()[:, 0]
        m = task["context_x"].shape[0]
        cov = kernel_matrix("rbf", x, x, params)[0] + (0.02**2 + 1e-8) * torch.eye(
            x.shape[1], dtype=torch.float64
        )
        for j in range(task["target_x"].shape[0]):
            # marginal of (context, target j) conditioned on the context, by the Schur complement
            idx = list(range(m)) + [m + j]
            c = cov[idx][:, idx]
            mean = c[-1, :-1] @ torch.linalg.solve(c[:-1, :-1], y[:m])
            var = c[-1, -1] - c[-1, :-1] @ torch.linalg.solve(c[:-1, :-1], c[:-1, -1])
            expected = torch.distributions.Normal(mean, var.sqrt()).log_prob(y[m + j])
            assert ll[i, j].item() == pytest.approx(expected.item(), abs=1e-3)
    assert math.isfinite(float(ll[batch.target_mask].mean()))
