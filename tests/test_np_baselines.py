"""The baseline neural processes BANP (bootstrapping) and TNPD (transformer): what is particular to
each. The invariances, padding, persistence and input checks shared by every NP are in
``test_np_models.py``, parametrised over all six models."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from semiparam import ConfigError
from semiparam.models.banp import BANPModule, bootstrap_indices
from semiparam.models.tnpd import TNPDModule
from semiparam.neural_processes import BANP, TNPD, BANPConfig, GPTaskSampler, TNPDConfig, load

TINY_BANP = {"d_model": 16, "n_heads": 2}
TINY_TNPD = {"d_model": 16, "n_heads": 2, "n_blocks": 2, "d_feedforward": 32}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _sampler(seed: int = 0, **kwargs) -> GPTaskSampler:
    options = dict(min_ctx=8, max_ctx=16, min_tgt=4, max_tgt=8, random_state=seed) | kwargs
    return GPTaskSampler(**options)


@pytest.fixture(scope="module")
def banp() -> BANP:
    return BANP(random_state=0, **TINY_BANP).fit(_sampler(), max_steps=2, batch_size=4)


@pytest.fixture(scope="module")
def tnpd() -> TNPD:
    return TNPD(random_state=0, **TINY_TNPD).fit(_sampler(), max_steps=2, batch_size=4)


# -- BANP ----------------------------------------------------------------------------------------------


def test_bootstrap_indices_draw_real_points_into_real_slots_only() -> None:
    mask = torch.tensor(
        [[1, 1, 1, 0, 0, 0], [1, 0, 1, 0, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 0]], dtype=torch.bool
    )
    idx = bootstrap_indices(mask, 300, (4, 6), generator=torch.Generator().manual_seed(0))
    assert idx.shape == (300, 4, 6) and idx.dtype == torch.long
    slots = torch.arange(6)
    for b in range(4):
        real = set(mask[b].nonzero().flatten().tolist())
        drawn = idx[:, b][:, mask[b]]  # what the real slots received
        assert set(drawn.unique().tolist()) == real  # every real point and nothing else
        assert torch.equal(idx[:, b][:, ~mask[b]], slots[~mask[b]].expand(300, -1))  # padded: untouched
    # uniform over the real points: 300 draws x 4 slots of task 1, ~300 per point
    counts = torch.bincount(idx[:, 1][:, mask[1]].flatten(), minlength=6)[mask[1]]
    assert counts.min() > 220 and counts.max() < 380
    again = bootstrap_indices(mask, 300, (4, 6), generator=torch.Generator().manual_seed(0))
    other = bootstrap_indices(mask, 300, (4, 6), generator=torch.Generator().manual_seed(1))
    assert torch.equal(idx, again) and not torch.equal(idx, other)
    # no mask = all real; an all-True mask draws the same indices
    plain = bootstrap_indices(None, 5, (2, 7), generator=torch.Generator().manual_seed(3))
    everything = torch.ones(2, 7, dtype=torch.bool)
    full = bootstrap_indices(everything, 5, (2, 7), generator=torch.Generator().manual_seed(3))
    assert torch.equal(plain, full) and plain.min() >= 0 and plain.max() <= 6


def test_banp_bootstrap_contexts_are_data_and_padding_stays_padded(banp) -> None:
    module: BANPModule = banp.module_
    ragged = _sampler(5, shared_sizes=False, min_ctx=3, max_ctx=12).sample(4)
    assert ragged.is_padded
    cx, cy, cmask = ragged.context_x, ragged.context_y, ragged.context_mask
    paired, residual = module.draw_indices(cx, cmask, 6, torch.Generator().manual_seed(0))
    with torch.enable_grad():
        y_boot = module.bootstrap_contexts(cx, cy, cmask, paired, residual)
    assert y_boot.shape == (6, 4, cx.shape[1], 1) and not y_boot.requires_grad  # no gradient: data
    assert torch.isfinite(y_boot).all() and (y_boot[:, ~cmask] == 0).all()
    assert not torch.allclose(y_boot[0], y_boot[1])  # draws differ


def test_banp_padding_with_shared_draws(banp) -> None:
    """With the same bootstrap draws, a task's predictions inside a padded batch (garbage in the
    padded slots) equal those of the task alone: padded points are never resampled nor attended."""
    module: BANPModule = banp.module_
    ragged = _sampler(7, shared_sizes=False, min_ctx=3, max_ctx=12, min_tgt=2, max_tgt=7).sample(4)
    cmask = ragged.context_mask
    cx, cy = ragged.context_x.clone(), ragged.context_y.clone()
    cx[~cmask], cy[~cmask] = 1e3, -1e3
    paired, residual = module.draw_indices(cx, cmask, 5, torch.Generator().manual_seed(1))
    (mean, std), (means, stds) = module.bootstrap_predict(cx, cy, cmask, ragged.target_x, paired, residual)
    for i in range(4):
        m = int(cmask[i].sum())
        assert cmask[i, :m].all()  # the sampler pads at the end
        (mean1, std1), (means1, stds1) = module.bootstrap_predict(
            cx[i : i + 1, :m],
            cy[i : i + 1, :m],
            None,
            ragged.target_x[i : i + 1],
            paired[:, i : i + 1, :m],
            residual[:, i : i + 1, :m],
        )
        for a, b in ((mean1, mean[i : i + 1]), (std1, std[i : i + 1])):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        for a, b in ((means1, means[:, i : i + 1]), (stds1, stds[:, i : i + 1])):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_banp_context_permutation_invariance(banp) -> None:
    """Permuting the context together with the bootstrap draws (so each draw picks the same points)
    changes no prediction."""
    module: BANPModule = banp.module_
    b = _sampler(2, min_ctx=10, max_ctx=10, min_tgt=6, max_tgt=6).sample(3)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))  # new slot j = old slot perm[j]
    inverse = torch.argsort(perm)
    paired, residual = module.draw_indices(b.context_x, None, 4, torch.Generator().manual_seed(0))
    paired_new = inverse[paired]  # the same point in the same bootstrap slot
    residual_new = inverse[residual[..., perm]]  # slot j draws the residual its old slot drew
    old = module.bootstrap_predict(b.context_x, b.context_y, None, b.target_x, paired, residual)
    new = module.bootstrap_predict(
        b.context_x[:, perm], b.context_y[:, perm], None, b.target_x, paired_new, residual_new
    )
    for pair_old, pair_new in zip(old, new):
        for a, c in zip(pair_old, pair_new):
            torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)


def test_banp_predictions_are_seeded_and_mix_the_bootstrap_draws(banp) -> None:
    b = _sampler(3).sample(2)
    a = banp.predict(b.context_x, b.context_y, b.target_x, random_state=4)
    again = banp.predict(b.context_x, b.context_y, b.target_x, random_state=4)
    other = banp.predict(b.context_x, b.context_y, b.target_x, random_state=5)
    assert torch.equal(a.mean, again.mean) and torch.equal(a.samples, again.samples)
    assert not torch.equal(a.samples, other.samples)
    assert a.samples.shape[0] == banp.config_.n_bootstrap_eval == 50  # the default: the paper's 50
    torch.testing.assert_close(a.mean, a.samples.mean(dim=0))
    assert (a.std >= 0.1).all()  # every mixture component has sigma >= 0.1
    assert banp.predict(b.context_x, b.context_y, b.target_x, n_samples=3).samples.shape[0] == 3
    few = BANP(random_state=0, n_bootstrap_eval=7, **TINY_BANP).fit(_sampler(), max_steps=1, batch_size=2)
    assert few.predict(b.context_x, b.context_y, b.target_x).samples.shape[0] == 7
    assert banp.is_stochastic and not banp.is_latent


def test_banp_loss_is_base_plus_bootstrap_and_trains_the_adaptation_layer(banp) -> None:
    module: BANPModule = banp.module_
    b = _sampler(4, min_ctx=6, max_ctx=6, min_tgt=5, max_tgt=5).sample(2)
    args = (b.context_x, b.context_y, None, b.target_x, b.target_y, None)
    g = torch.Generator().manual_seed(0)
    with torch.enable_grad():
        module.zero_grad()
        loss = module.loss(*args, generator=g)
        loss.backward()
    assert torch.isfinite(loss)
    assert module.decoder.adaptation.weight.grad.abs().sum() > 0  # the bootstrap path is trained
    module.zero_grad(set_to_none=True)
    again = module.loss(*args, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loss.detach(), again)  # seeded: reproducible
    # a decoder that ignores its input: base and every bootstrap prediction are N(0.3, sigma^2),
    # so the loss is twice the negative mean log-likelihood of that Gaussian
    zeroed = BANP(random_state=0, **TINY_BANP).fit(_sampler(), max_steps=1, batch_size=2).module_
    with torch.no_grad():
        zeroed.decoder.net[-1].weight.zero_()
        zeroed.decoder.net[-1].bias.copy_(torch.tensor([0.3, 0.5]))
    sigma = 0.1 + 0.9 * math.log1p(math.exp(0.5))
    ll = torch.distributions.Normal(0.3, sigma).log_prob(b.target_y[..., 0])
    torch.testing.assert_close(zeroed.loss(*args), -2 * ll.mean(), atol=1e-5, rtol=1e-5)


def test_banp_config_checks() -> None:
    with pytest.raises(ConfigError, match="n_bootstrap_train"):
        BANPConfig(n_bootstrap_train=0)
    with pytest.raises(ConfigError, match="n_bootstrap_eval"):
        BANP(n_bootstrap_eval=0)
    assert BANPConfig().n_bootstrap_train == 4 and BANPConfig().n_bootstrap_eval == 50


# -- TNPD ----------------------------------------------------------------------------------------------


def test_tnpd_targets_do_not_see_each_other(tnpd) -> None:
    b = _sampler(6, min_ctx=9, max_ctx=9, min_tgt=6, max_tgt=6).sample(2)
    base = tnpd.predict(b.context_x, b.context_y, b.target_x)
    moved = b.target_x.clone()
    moved[:, 0] += 1.7
    changed = tnpd.predict(b.context_x, b.context_y, moved)
    torch.testing.assert_close(changed.mean[:, 1:], base.mean[:, 1:], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(changed.std[:, 1:], base.std[:, 1:], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(changed.mean[:, 0], base.mean[:, 0])  # the moved target does change
    for j in range(6):  # one target at a time: the same prediction
        alone = tnpd.predict(b.context_x, b.context_y, b.target_x[:, j : j + 1])
        torch.testing.assert_close(alone.mean, base.mean[:, j : j + 1], atol=1e-6, rtol=1e-6)
    assert base.samples is None and not tnpd.is_stochastic


def test_tnpd_equals_the_joint_masked_pass_of_a_torch_transformer(tnpd) -> None:
    """Targets querying each layer's context states = PyTorch's post-norm TransformerEncoder over
    all m + n tokens, with a mask letting every token attend to the m context tokens only."""
    module: TNPDModule = tnpd.module_
    config = module.config
    layers = []
    for ours in module.layers:
        theirs = torch.nn.TransformerEncoderLayer(
            config.d_model, config.n_heads, config.d_feedforward, dropout=0.0, batch_first=True
        )
        att = ours.attention
        with torch.no_grad():
            theirs.self_attn.in_proj_weight.copy_(torch.cat([att.q.weight, att.k.weight, att.v.weight]))
            theirs.self_attn.in_proj_bias.copy_(torch.cat([att.q.bias, att.k.bias, att.v.bias]))
            theirs.self_attn.out_proj.load_state_dict(att.out.state_dict())
            theirs.norm1.load_state_dict(ours.norm_attention.state_dict())
            theirs.norm2.load_state_dict(ours.norm_ff.state_dict())
            theirs.linear1.load_state_dict(ours.ff[0].state_dict())
            theirs.linear2.load_state_dict(ours.ff[3].state_dict())
        layers.append(theirs.eval())
    b = _sampler(8, min_ctx=7, max_ctx=7, min_tgt=5, max_tgt=5).sample(3)
    m, n = 7, 5
    with torch.no_grad():
        tokens = torch.cat(
            [
                module.embedder(torch.cat([b.context_x, b.context_y], -1)),
                module.embedder(torch.cat([b.target_x, torch.zeros_like(b.target_y)], -1)),
            ],
            dim=1,
        )
        blocked = torch.ones(m + n, m + n, dtype=torch.bool)  # True = may not attend
        blocked[:, :m] = False
        for layer in layers:
            tokens = layer(tokens, src_mask=blocked)
        mean, raw = module.head(tokens[:, m:]).chunk(2, -1)
        ours = tnpd.predict(b.context_x, b.context_y, b.target_x)
    torch.testing.assert_close(ours.mean, mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.std, 0.1 + 0.9 * torch.nn.functional.softplus(raw), atol=1e-5, rtol=1e-5)
    assert n == ours.mean.shape[1]


def test_tnpd_config_checks() -> None:
    assert (TNPDConfig().d_model, TNPDConfig().n_heads, TNPDConfig().n_blocks) == (64, 4, 6)
    assert TNPDConfig().d_feedforward == 128
    with pytest.raises(ConfigError, match="n_blocks"):
        TNPDConfig(n_blocks=0)
    with pytest.raises(ConfigError, match="d_feedforward"):
        TNPD(d_feedforward=0)
    with pytest.raises(ConfigError, match="must divide"):
        TNPD(d_model=10, n_heads=4)
    with pytest.raises(ConfigError, match="unknown TNPDConfig key"):
        TNPD(n_layer=2)


# -- both -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "options"), [(BANP, TINY_BANP), (TNPD, TINY_TNPD)], ids=["BANP", "TNPD"])
def test_a_short_fit_lowers_the_loss(cls, options) -> None:
    # one fixed kernel; observed over seeds 0-3: the held-out score gains 0.06-0.2 in 60 steps
    sampler = _sampler(0, lengthscale_range=(0.5, 0.5), scale_range=(1.0, 1.0))
    eval_set = sampler.eval_set(2, 8, seed=1)
    untrained = cls(random_state=0, **options).fit(sampler, max_steps=1, batch_size=8)
    trained = cls(random_state=0, **options).fit(
        sampler, max_steps=60, batch_size=8, learning_rate=3e-3, log_every=20
    )
    assert trained.history_.loss[-1] < trained.history_.loss[0]
    assert trained.evaluate(eval_set, n_samples=8) > untrained.evaluate(eval_set, n_samples=8) + 0.05


@pytest.mark.parametrize("name", ["banp", "tnpd"])
def test_cli_fits_and_predicts_with_the_baselines(name, tmp_path, capsys) -> None:
    from semiparam.cli.main import main

    rng = np.random.default_rng(0)
    parts = []
    for k in range(6):
        t = np.sort(rng.uniform(0, 5, 10))
        parts.append(pd.DataFrame({"series": f"s{k}", "t": t, "value": np.sin(t + k)}))
    table = pd.concat(parts, ignore_index=True)
    table.to_csv(tmp_path / "series.csv", index=False)
    run = tmp_path / "run"
    fit = ["np-fit", str(tmp_path / "series.csv"), "--task", "series", "--x", "t", "--y", "value"]
    fit += ["--model", name, "--steps", "2", "--batch-size", "3"]
    assert main([*fit, "--out", str(run), "--quiet"]) == 0
    assert type(load(run / "model")).__name__ == name.upper()
    context = table.groupby("series").head(6)
    context.to_csv(tmp_path / "context.csv", index=False)
    table.drop(context.index).to_csv(tmp_path / "targets.csv", index=False)
    out = tmp_path / "pred.csv"
    args = ["np-predict", str(run), str(tmp_path / "context.csv"), str(tmp_path / "targets.csv")]
    assert main([*args, "--samples", "5", "--out", str(out)]) == 0
    pred = pd.read_csv(out)
    assert (pred["value_std"] > 0).all() and pred["value_mean"].notna().all()
    assert "log-likelihood" in capsys.readouterr().err
