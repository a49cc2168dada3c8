"""Shared pieces of the attentive neural processes: CANP, ANP (Kim et al. 2019) and their inducing-
point versions CIPNP, IPNP (Rastogi et al. 2023, section 3.3 and appendix A.6, Tables 16-17).

A neural process (NP) maps a context set ``{(x_i, y_i)}`` of m points to a predictive distribution
at n target inputs. All four models share one skeleton and differ only in the *set encoder* that
lets context points interact, and in whether the second path is deterministic or latent::

    cross-attention path   q = MLP(x_t)                                  (B, n, w)
                           V = SetEncoder(MLP([x_c, y_c]))               (B, m, w) or (B, h, w)
                           r = CrossAtt(q, K, V)                         (B, n, w)
                               CANP/ANP: K = MLP(x_c) over the m points  (Kim et al. 2019)
                               CIPNP/IPNP: K = V = the h inducing points (spec 4.2, [C])
    pooling path           s = MLP(mean(SetEncoder(MLP([x, y]))))        (B, w) or (B, 2 d_z)
                               conditional: r' = s, repeated over targets (Lee et al. 2020)
                               latent:      z ~ N(mu_z, sigma_z), sigma_z = 0.1 + 0.9 sigmoid
    decoder                mu, sigma = MLP([x_t, r, r' or z]), sigma = 0.1 + 0.9 softplus

BANP (``banp.py``, Lee et al. 2020) is the CANP skeleton plus residual-bootstrap contexts and an
adaptation layer in the decoder; TNP-D (``tnpd.py``) is a masked transformer that shares only the
helpers here (``mlp``, ``output_std``, ``gaussian_log_prob``, ...), not the skeleton.

SetEncoder is ``MAB(D, D)`` (self-attention between the context points, O(m^2)) for CANP/ANP and
``XABD = MAB(H_D, D)`` (h learned inducing points cross-attend to the context, O(m h),
:class:`~semiparam.nn.attention.InducingPointAttention`) for CIPNP/IPNP (:func:`encode_set`).
Padded context points (``mask`` False) are excluded from every attention and pool, so padding
never changes a prediction.

NOTE[DIFF]: the IPNP reference code uses a Set-Transformer post-LayerNorm MAB (ReLU FF, no bias);
we reuse the library's pre-LayerNorm MAB (GELU 4x FF, learned residual projection, no dropout) for
every attention in all four models, so the comparison between them stays like for like.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import Normal, kl_divergence

from .._config import ConfigError, FrozenConfig
from ..nn.attention import MAB, InducedSetAttention, InducingPointAttention

Objective = Literal["elbo", "iwae"]


@dataclass(frozen=True)
class NPConfig(FrozenConfig):
    """Widths shared by every NP here (paper appendix A.6: width 128, 8 heads, 1-D x and y)."""

    x_dim: int = 1
    y_dim: int = 1
    # w: width of every MLP, attention block and representation. NOTE: not NPT's / SPIN's
    # d_embedding, which is the width per attribute (a row token is n_columns * d_embedding wide)
    d_model: int = 128
    n_heads: int = 8  # must divide d_model

    def validate(self) -> None:
        for name in ("x_dim", "y_dim", "d_model", "n_heads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{type(self).__name__}.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model})")


def mlp(d_in: int, d_hidden: int, d_out: int, n_hidden: int = 1) -> nn.Sequential:
    """``Linear -> ReLU`` repeated ``n_hidden`` times, then ``Linear`` (the papers' "MLP, n hidden")."""
    layers: list[nn.Module] = []
    width = d_in
    for _ in range(n_hidden):
        layers += [nn.Linear(width, d_hidden), nn.ReLU()]
        width = d_hidden
    layers.append(nn.Linear(width, d_out))
    return nn.Sequential(*layers)


def key_padding_mask(mask: Tensor | None) -> Tensor | None:
    """``(B, m)`` bool (True = real point) -> ``(B, 1, 1, m)`` for attention over m keys."""
    return None if mask is None else mask[:, None, None, :]


def masked_mean(tokens: Tensor, mask: Tensor | None) -> Tensor:
    """Mean over the set axis of ``tokens (B, k, w)``, real tokens only -> ``(B, w)``."""
    if mask is None:
        return tokens.mean(dim=1)
    weights = mask.to(tokens.dtype)[..., None]  # (B, k, 1)
    return (tokens * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


def mean_over_targets(values: Tensor, target_mask: Tensor | None) -> Tensor:
    """Mean of per-point ``values (B, n)`` over each task's real targets -> ``(B,)``."""
    if target_mask is None:
        return values.mean(dim=1)
    total = torch.where(target_mask, values, 0.0).sum(dim=1)  # padded values never count, even NaN
    return total / target_mask.sum(dim=1).clamp_min(1).to(values.dtype)


def gaussian_log_prob(y: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """log N(y; mean, std^2) summed over the last (y_dim) axis: ``(..., n, y_dim) -> (..., n)``."""
    return Normal(mean, std, validate_args=False).log_prob(y).sum(dim=-1)


def output_std(raw: Tensor) -> Tensor:
    """Predictive std = 0.1 + 0.9 softplus(raw) (spec 4.2; bounded away from 0 for stable training)."""
    return 0.1 + 0.9 * F.softplus(raw)


def latent_std(raw: Tensor) -> Tensor:
    """Latent std = 0.1 + 0.9 sigmoid(raw) (spec 4.2)."""
    return 0.1 + 0.9 * torch.sigmoid(raw)


def mixture_moments(means: Tensor, stds: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and std of an equal-weight mixture of Gaussians ``(S, ...)`` over its first axis (the
    law of total variance)."""
    mean = means.mean(dim=0)
    var = (stds**2 + means**2).mean(dim=0) - mean**2
    return mean, var.clamp_min(0.0).sqrt()


def logmeanexp(values: Tensor, dim: int) -> Tensor:
    return torch.logsumexp(values, dim=dim) - math.log(values.shape[dim])


# ---- set encoders: let the context points interact ----------------------------------------------


class SelfAttentionSetEncoder(nn.Module):
    """``MAB(D, D)``: self-attention between the m context points, ``(B, m, w) -> (B, m, w)``, O(m^2).
    (A module of its own only for the parameter names of saved models: ``set_encoder.mab.*``.)"""

    def __init__(self, width: int, n_heads: int) -> None:
        super().__init__()
        self.mab = MAB(width, n_heads, dropout=0.0)

    def forward(self, tokens: Tensor, *, attn_mask: Tensor | None = None) -> Tensor:
        return self.mab(tokens, attn_mask=attn_mask)


SetEncoder = SelfAttentionSetEncoder | InducingPointAttention | InducedSetAttention


def inducing_point_encoder(width: int, n_heads: int, n_inducing: int) -> InducingPointAttention:
    """XABD, SPIN's cross-attention between datapoints, as an NP set encoder: h learned inducing
    points attend to the m context points, ``(B, m, w) -> (B, h, w)``, O(m h), no dropout.

    As in the IPNP code, the SPIN encoder here has one XABD block and no per-datapoint latent
    attributes (no XABA/ABLA): with 1-D x and y a row is only two numbers."""
    return InducingPointAttention(width, n_heads, n_inducing, dropout=0.0)


def encode_set(
    encoder: SetEncoder, tokens: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Let the points of a set ``tokens (B, m, w)`` (padding ``mask (B, m)``, True = real) interact:
    ``(encoded, its mask, summaries)``. Self-attention keeps the m points and their mask; XABD
    returns its h inducing points (no padding: mask None), which are also the summaries; ISAB
    returns the m read-back points with their mask and the h summaries. Summaries are None where
    there are no inducing points."""
    attn_mask = key_padding_mask(mask)
    if isinstance(encoder, InducedSetAttention):
        encoded, summaries = encoder(tokens, attn_mask=attn_mask)
        return encoded, mask, summaries
    if isinstance(encoder, InducingPointAttention):
        summaries = encoder(tokens, attn_mask=attn_mask)  # (B, h, w)
        return summaries, None, summaries
    return encoder(tokens, attn_mask=attn_mask), mask, None


# ---- the two encoder paths and the decoder -------------------------------------------------------


@dataclass
class CrossContext:
    """What the cross-attention path keeps of a context: keys, values ``(B, k, w)`` and their mask;
    for the inducing-point paths also the h inducing points' summaries ``(B, h, w)`` (XABD's output),
    which a CIPNP with ``summary_encoder="shared"`` pools into r'."""

    keys: Tensor
    values: Tensor
    mask: Tensor | None
    summaries: Tensor | None = None


class CrossAttentionPath(nn.Module):
    """Target-specific representation r(x_t): queries MLP(x_t) cross-attend to the encoded context.

    ``separate_keys=True`` (CANP/ANP): keys MLP(x_c), values SetEncoder(MLP([x_c, y_c])), m of them.
    ``separate_keys=False`` (CIPNP/IPNP): keys = values = the h inducing points.

    NOTE[DIFF]: with separate keys, Kim et al. 2019 use bare multihead attention here (the BNP code
    adds a post-LN residual block); we use the same pre-LN residual + feed-forward :class:`MAB` as
    the CIPNP's cross-attention (with keys and values from two inputs), so that CANP/ANP and
    CIPNP/IPNP differ only in their set encoders."""

    def __init__(self, config: NPConfig, set_encoder: SetEncoder, *, separate_keys: bool) -> None:
        super().__init__()
        w = config.d_model
        self.query_mlp = mlp(config.x_dim, w, w)
        self.value_mlp = mlp(config.x_dim + config.y_dim, w, w)
        self.key_mlp = mlp(config.x_dim, w, w) if separate_keys else None
        self.set_encoder = set_encoder
        self.attend = MAB(w, config.n_heads, dropout=0.0, cross=True, separate_values=separate_keys)

    def encode(self, context_x: Tensor, context_y: Tensor, context_mask: Tensor | None) -> CrossContext:
        tokens = self.value_mlp(torch.cat([context_x, context_y], dim=-1))  # (B, m, w)
        values, mask, summaries = encode_set(self.set_encoder, tokens, context_mask)  # (B, m or h, w)
        keys = values if self.key_mlp is None else self.key_mlp(context_x)
        return CrossContext(keys, values, mask, summaries)

    def forward(self, context: CrossContext, target_x: Tensor) -> Tensor:
        queries = self.query_mlp(target_x)  # (B, n, w)
        values = None if self.key_mlp is None else context.values  # else keys = values
        return self.attend(queries, context.keys, values=values, attn_mask=key_padding_mask(context.mask))


class PoolingPath(nn.Module):
    """A global summary of a set: MLP([x, y]) -> SetEncoder -> mean pool -> MLP, ``(B, d_out)``.

    For the inducing-point models the pool runs over the h inducing points (IPNP code [C])."""

    def __init__(self, config: NPConfig, set_encoder: SetEncoder, d_out: int) -> None:
        super().__init__()
        w = config.d_model
        self.input_mlp = mlp(config.x_dim + config.y_dim, w, w)
        self.set_encoder = set_encoder
        self.output_mlp = mlp(w, w, d_out)

    def forward(self, x: Tensor, y: Tensor, mask: Tensor | None) -> Tensor:
        tokens, token_mask, _ = encode_set(self.set_encoder, self.input_mlp(torch.cat([x, y], dim=-1)), mask)
        return self.output_mlp(masked_mean(tokens, token_mask))  # (B, d_out)


class GaussianDecoder(nn.Module):
    """``[x_t, r, r' or z] -> Linear -> ReLU -> Linear -> ReLU -> Linear -> (mu, sigma)`` per target."""

    def __init__(self, x_dim: int, y_dim: int, d_representation: int, width: int) -> None:
        super().__init__()
        self.net = mlp(x_dim + d_representation, width, 2 * y_dim, n_hidden=2)

    def forward(self, target_x: Tensor, representation: Tensor) -> tuple[Tensor, Tensor]:
        out = self.net(torch.cat([target_x, representation], dim=-1))  # (..., n, 2 y_dim)
        mean, raw_std = out.chunk(2, dim=-1)
        return mean, output_std(raw_std)


def self_attention_paths(config: NPConfig, d_pool: int) -> tuple[CrossAttentionPath, PoolingPath]:
    """The two paths of the attentive NPs (CANP, ANP, BANP), each with a self-attention set
    encoder: the cross-attention path (keys MLP(x_c)) and a pooling path of ``d_pool`` outputs.
    Built in this order, the order of their initialisation draws."""
    w, heads = config.d_model, config.n_heads
    cross = CrossAttentionPath(config, SelfAttentionSetEncoder(w, heads), separate_keys=True)
    return cross, PoolingPath(config, SelfAttentionSetEncoder(w, heads), d_out=d_pool)


# ---- the model -----------------------------------------------------------------------------------


@dataclass
class EncodedContext:
    """A context encoded once: the cross-attention keys/values and the pooled summary (``r'`` for a
    conditional model, the prior ``(mu_z, sigma_z)`` of the latent for a latent one)."""

    cross: CrossContext
    summary: Tensor | None = None  # (B, w), conditional
    prior: tuple[Tensor, Tensor] | None = None  # each (B, d_z), latent


class NeuralProcess(nn.Module):
    """The NP skeleton (module docstring); subclasses choose the set encoders.

    All tensors are padded batches: ``context_x (B, m, x_dim)``, ``context_y (B, m, y_dim)``,
    ``context_mask (B, m)`` bool or None (= all real); targets likewise with n points.
    """

    def __init__(
        self,
        config: NPConfig,
        cross_path: CrossAttentionPath,
        pooling_path: nn.Module,
        d_latent: int | None,
    ) -> None:
        super().__init__()
        self.config = config
        self.d_latent = d_latent
        self.cross_path = cross_path
        self.pooling_path = pooling_path
        d_second = config.d_model if d_latent is None else d_latent
        self.decoder = GaussianDecoder(config.x_dim, config.y_dim, config.d_model + d_second, config.d_model)

    @property
    def is_latent(self) -> bool:
        return self.d_latent is not None

    @property
    def is_stochastic(self) -> bool:
        """Whether predictions are a mixture over random draws from ``generator`` (here: z)."""
        return self.is_latent

    def latent_distribution(self, x: Tensor, y: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """``(mu_z, sigma_z)``, each ``(B, d_z)``, of the latent given the set ``(x, y)``."""
        mu, raw = self.pooling_path(x, y, mask).chunk(2, dim=-1)
        return mu, latent_std(raw)

    def encode(self, context_x: Tensor, context_y: Tensor, context_mask: Tensor | None) -> EncodedContext:
        cross = self.cross_path.encode(context_x, context_y, context_mask)
        if self.is_latent:
            return EncodedContext(cross, prior=self.latent_distribution(context_x, context_y, context_mask))
        return EncodedContext(cross, summary=self.summarise(cross, context_x, context_y, context_mask))

    def summarise(self, cross: CrossContext, x: Tensor, y: Tensor, mask: Tensor | None) -> Tensor:
        """A conditional model's global summary r' ``(B, w)`` of the context: the pooling path's
        (``cross``, the cross path's encoding of the same context, is there for models that reuse it)."""
        return self.pooling_path(x, y, mask)

    def decode(
        self, context: EncodedContext, target_x: Tensor, z: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Predictive mean and std ``(B, n, y_dim)``; for a latent model ``z (S, B, d_z)`` gives
        ``(S, B, n, y_dim)``."""
        r = self.cross_path(context.cross, target_x)  # (B, n, w)
        n = target_x.shape[1]
        if not self.is_latent:
            assert context.summary is not None
            second = context.summary[:, None, :].expand(-1, n, -1)  # (B, n, w)
            return self.decoder(target_x, torch.cat([r, second], dim=-1))
        if z is None:
            raise ValueError("a latent neural process needs z samples to decode")
        s = z.shape[0]
        # (S, B, n, .): the deterministic parts are shared by all S latent samples
        r = r[None].expand(s, -1, -1, -1)
        xs = target_x[None].expand(s, -1, -1, -1)
        zs = z[:, :, None, :].expand(-1, -1, n, -1)
        return self.decoder(xs, torch.cat([r, zs], dim=-1))

    def _sample_z(
        self, mu: Tensor, sigma: Tensor, n_samples: int, generator: torch.Generator | None
    ) -> Tensor:
        eps = torch.randn((n_samples, *mu.shape), generator=generator, device=mu.device, dtype=mu.dtype)
        return mu + sigma * eps  # (S, B, d_z), reparameterised

    def target_log_likelihood(
        self,
        context_x: Tensor,
        context_y: Tensor,
        context_mask: Tensor | None,
        target_x: Tensor,
        target_y: Tensor,
        *,
        n_samples: int = 50,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """log p(y_t | x_t, context) per target point, ``(B, n)`` (padded targets are not masked
        here). Latent models: logmeanexp over ``n_samples`` draws of z from the prior p(z | context)."""
        context = self.encode(context_x, context_y, context_mask)
        if not self.is_latent:
            mean, std = self.decode(context, target_x)
            return gaussian_log_prob(target_y, mean, std)
        assert context.prior is not None
        z = self._sample_z(*context.prior, n_samples, generator)
        mean, std = self.decode(context, target_x, z)  # (S, B, n, y_dim)
        return logmeanexp(gaussian_log_prob(target_y[None], mean, std), dim=0)

    def predict(
        self,
        context_x: Tensor,
        context_y: Tensor,
        context_mask: Tensor | None,
        target_x: Tensor,
        *,
        n_samples: int = 50,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Predictive ``mean``, ``std`` ``(B, n, y_dim)`` and, for latent models, ``samples``
        ``(S, B, n, y_dim)``: the decoder mean under S draws of z (sampled functions). For latent
        models mean/std are those of the mixture over z (law of total variance)."""
        context = self.encode(context_x, context_y, context_mask)
        if not self.is_latent:
            mean, std = self.decode(context, target_x)
            return mean, std, None
        assert context.prior is not None
        z = self._sample_z(*context.prior, n_samples, generator)
        means, stds = self.decode(context, target_x, z)  # (S, B, n, y_dim)
        return (*mixture_moments(means, stds), means)

    def loss(
        self,
        context_x: Tensor,
        context_y: Tensor,
        context_mask: Tensor | None,
        target_x: Tensor,
        target_y: Tensor,
        target_mask: Tensor | None,
        *,
        objective: Objective = "elbo",
        n_samples: int = 1,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Training loss, a scalar: per task, the negative target log-likelihood (conditional) or the
        negative ELBO / importance-weighted bound (latent), divided by the task's number of targets,
        then averaged over tasks.

        NOTE[DIFF]: the paper's loss sums over target points; like the reference code we divide by
        the number of points, so batches with 4 and with 64 targets weigh the same (and the KL term
        is divided likewise). The paper scores target points only; the code also scores the context
        points -- we follow the paper.
        """
        n_points = (
            target_mask.sum(dim=1).to(target_y.dtype)
            if target_mask is not None
            else torch.full(target_y.shape[:1], float(target_y.shape[1]), device=target_y.device)
        )  # (B,)
        weight = (
            target_mask.to(target_y.dtype) if target_mask is not None else torch.ones_like(target_y[..., 0])
        )
        context = self.encode(context_x, context_y, context_mask)
        if not self.is_latent:
            mean, std = self.decode(context, target_x)
            ll = (gaussian_log_prob(target_y, mean, std) * weight).sum(dim=1)  # (B,)
            return -(ll / n_points).mean()
        assert context.prior is not None
        prior_mu, prior_sigma = context.prior
        # the posterior q(z | context + targets): the same latent encoder over the union
        all_x = torch.cat([context_x, target_x], dim=1)
        all_y = torch.cat([context_y, target_y], dim=1)
        all_mask = _cat_masks(context_mask, target_mask, context_x, target_x)
        post_mu, post_sigma = self.latent_distribution(all_x, all_y, all_mask)
        z = self._sample_z(post_mu, post_sigma, n_samples, generator)  # (S, B, d_z)
        mean, std = self.decode(context, target_x, z)  # (S, B, n, y_dim)
        ll = (gaussian_log_prob(target_y[None], mean, std) * weight).sum(dim=-1)  # (S, B)
        if objective == "elbo":
            kl = _normal_kl(post_mu, post_sigma, prior_mu, prior_sigma)  # (B,)
            bound = ll.mean(dim=0) - kl
        elif objective == "iwae":
            log_prior = gaussian_log_prob(z, prior_mu, prior_sigma)  # (S, B)
            log_post = gaussian_log_prob(z, post_mu, post_sigma)
            bound = logmeanexp(ll + log_prior - log_post, dim=0)
        else:
            raise ValueError(f"objective must be 'elbo' or 'iwae', got {objective!r}")
        return -(bound / n_points).mean()


def _cat_masks(
    context_mask: Tensor | None, target_mask: Tensor | None, context_x: Tensor, target_x: Tensor
) -> Tensor | None:
    if context_mask is None and target_mask is None:
        return None
    if context_mask is None:
        context_mask = torch.ones(context_x.shape[:2], dtype=torch.bool, device=context_x.device)
    if target_mask is None:
        target_mask = torch.ones(target_x.shape[:2], dtype=torch.bool, device=target_x.device)
    return torch.cat([context_mask, target_mask], dim=1)


def _normal_kl(mu_q: Tensor, sigma_q: Tensor, mu_p: Tensor, sigma_p: Tensor) -> Tensor:
    """KL(N(mu_q, sigma_q^2) || N(mu_p, sigma_p^2)) summed over the last axis."""
    q = Normal(mu_q, sigma_q, validate_args=False)
    return kl_divergence(q, Normal(mu_p, sigma_p, validate_args=False)).sum(dim=-1)
