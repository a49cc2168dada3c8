"""Bootstrapping Attentive Neural Process, BANP (Lee et al. 2020, "Bootstrapping Neural Processes";
a conditional baseline of the SPIN paper, Table 16).

BANP is a CANP (self-attention set encoders, deterministic cross-attention and pooled paths) whose
predictions are a mixture over K *bootstrap contexts*, which stand in for a latent variable as the
source of functional uncertainty. One bootstrap context per draw, per task (paper Algorithm 1)::

    paired bootstrap     (x*, y*) = m points drawn with replacement from the context (x, y)
    base fit             mu, sigma = CANP((x*, y*)) predicted at the context inputs x
    residuals            eps = (y - mu) / sigma, drawn again with replacement, centred
    bootstrap context    (x, y~) with y~ = mu + sigma * eps~             (no gradient: data)

Each bootstrap context is encoded by the same two paths as the real context, and the decoder
combines both through the *adaptation layer*: a bias-free linear map of the bootstrap representation
added to the decoder's first hidden layer::

    base        mu, sigma = Dec(x_t, r_c)                          r = [cross-attention r, pooled r']
    bootstrap   mu_k, sigma_k = Dec(x_t, r_c; + W_adapt r_k)       k = 1..K
    predictive  p(y_t | x_t, context) = (1 / K) sum_k N(y_t; mu_k, sigma_k^2)

Training minimises -(log p_base(y_t) + log (1/K) sum_k p_k(y_t)) per target point, with K = 4;
evaluation uses K = 50 (both as in the reference code; ``BANPConfig.n_bootstrap_train`` /
``n_bootstrap_eval``). Padded context points are never drawn and never overwritten: each real slot
of a bootstrap context receives a real point of its own task, padded slots stay padded.

NOTE[DIFF]: the reference code scores context and target points in the training loss; like every
NP here (:meth:`NeuralProcess.loss`) we score the targets only, averaged per target point.
NOTE[DIFF]: the attention blocks are the library's pre-LayerNorm MAB, as in CANP here (see
``np_base``), not the reference code's post-norm blocks, so that BANP and CANP differ only in the
bootstrap. The reference code has no padding (one context size per batch); resampling within each
task's real points is what it does for an unpadded task.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._config import ConfigError
from .np_base import (
    EncodedContext,
    GaussianDecoder,
    NeuralProcess,
    NPConfig,
    Objective,
    gaussian_log_prob,
    logmeanexp,
    masked_mean,
    mean_over_targets,
    mixture_moments,
    output_std,
    self_attention_paths,
)


@dataclass(frozen=True)
class BANPConfig(NPConfig):
    """BANP widths (as CANP, paper A.6: width 128, 8 heads) and the number of bootstrap contexts per
    task: ``n_bootstrap_train`` per training step, ``n_bootstrap_eval`` when predicting or scoring
    (reference code: 4 and 50)."""

    n_bootstrap_train: int = 4
    n_bootstrap_eval: int = 50

    def validate(self) -> None:
        super().validate()
        for name in ("n_bootstrap_train", "n_bootstrap_eval"):
            if getattr(self, name) < 1:
                raise ConfigError(f"BANPConfig.{name} must be >= 1, got {getattr(self, name)}")


def bootstrap_indices(
    mask: Tensor | None,
    n_samples: int,
    shape: tuple[int, int],
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Resampling with replacement within each task: ``(S, B, m)`` long positions into the m slots.

    ``shape`` is ``(B, m)``; ``mask (B, m)`` bool marks the real points (None = all real). Real slot
    j of draw s of task b gets the position of a real point of task b drawn uniformly; a padded slot
    gets its own position, so it stays padded. One uniform per slot from ``generator``.
    """
    batch, n_points = shape
    device = mask.device if mask is not None else device
    uniform = torch.rand((n_samples, batch, n_points), generator=generator, device=device)
    if mask is None:
        return (uniform * n_points).long().clamp_max(n_points - 1)
    count = mask.sum(dim=1)  # (B,) real points per task
    last = (count - 1).clamp_min(0)[None, :, None]
    rank = (uniform * count[None, :, None]).long().clamp_max(last)  # (S, B, m): which real point
    real_first = torch.argsort((~mask).to(torch.uint8), dim=1, stable=True)  # (B, m)
    picked = real_first[None].expand(n_samples, -1, -1).gather(2, rank)
    own = torch.arange(n_points, device=mask.device).expand_as(picked)
    return torch.where(mask[None], picked, own)


def _take(values: Tensor, index: Tensor) -> Tensor:
    """``values (N, m, d)`` at ``index (N, m)`` along the point axis -> ``(N, m, d)``."""
    return values.gather(1, index[..., None].expand(-1, -1, values.shape[-1]))


def _stack(values: Tensor, n_samples: int) -> Tensor:
    """``(B, ...)`` repeated for S draws -> ``(S * B, ...)``, draw-major (as ``reshape`` of (S, B, ...))."""
    stacked = values[None].expand(n_samples, *values.shape)  # (S, B, ...)
    return stacked.reshape(n_samples * values.shape[0], *values.shape[1:])


class AdaptedGaussianDecoder(GaussianDecoder):
    """The NP decoder with the BANP adaptation layer: ``W_adapt r_k`` (bias-free) is added to the
    first hidden layer's pre-activation when a bootstrap representation ``r_k`` is given."""

    def __init__(self, x_dim: int, y_dim: int, d_representation: int, width: int) -> None:
        super().__init__(x_dim, y_dim, d_representation, width)
        self.adaptation = nn.Linear(d_representation, width, bias=False)

    def forward(
        self, target_x: Tensor, representation: Tensor, bootstrap: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        hidden = self.net[0](torch.cat([target_x, representation], dim=-1))  # (..., n, w)
        if bootstrap is not None:
            hidden = hidden + self.adaptation(bootstrap)
        mean, raw_std = self.net[1:](hidden).chunk(2, dim=-1)
        return mean, output_std(raw_std)


class BANPModule(NeuralProcess):
    """BANP: the CANP encoders and decoder, an adaptation layer, and residual-bootstrap contexts."""

    config: BANPConfig

    def __init__(self, config: BANPConfig) -> None:
        w = config.d_model
        super().__init__(config, *self_attention_paths(config, w), d_latent=None)
        self.decoder = AdaptedGaussianDecoder(config.x_dim, config.y_dim, 2 * w, w)

    @property
    def is_stochastic(self) -> bool:
        """Predictions are a mixture over random bootstrap contexts (drawn from ``generator``)."""
        return True

    def representation(self, context: EncodedContext, target_x: Tensor) -> Tensor:
        """``[r, r']`` at ``target_x (N, n, x_dim)``: cross-attention and pooled paths, ``(N, n, 2w)``."""
        assert context.summary is not None
        pooled = context.summary[:, None, :].expand(-1, target_x.shape[1], -1)
        return torch.cat([self.cross_path(context.cross, target_x), pooled], dim=-1)

    def draw_indices(
        self,
        context_x: Tensor,
        context_mask: Tensor | None,
        n_samples: int,
        generator: torch.Generator | None,
    ) -> tuple[Tensor, Tensor]:
        """The paired- and residual-bootstrap positions, each ``(S, B, m)`` (:func:`bootstrap_indices`)."""
        shape = (context_x.shape[0], context_x.shape[1])
        device = context_x.device
        paired = bootstrap_indices(context_mask, n_samples, shape, generator=generator, device=device)
        residual = bootstrap_indices(context_mask, n_samples, shape, generator=generator, device=device)
        return paired, residual

    @torch.no_grad()
    def bootstrap_contexts(
        self,
        context_x: Tensor,
        context_y: Tensor,
        context_mask: Tensor | None,
        paired_index: Tensor,
        residual_index: Tensor,
    ) -> Tensor:
        """The outputs ``y~ (S, B, m, y_dim)`` of the S residual-bootstrap contexts ``(x, y~)`` of each
        task, from the positions drawn by :meth:`draw_indices`. Padded slots are 0.

        Computed without gradient, as the reference code does: the bootstrap contexts are data."""
        s, b, m = paired_index.shape
        xs, ys = _stack(context_x, s), _stack(context_y, s)  # (S B, m, .)
        masks = None if context_mask is None else _stack(context_mask, s)
        # paired bootstrap: refit on m points drawn with replacement, predict at every context input
        paired_flat = paired_index.reshape(s * b, m)
        refit = self.encode(_take(xs, paired_flat), _take(ys, paired_flat), masks)
        mu, sigma = self.decoder(xs, self.representation(refit, xs))  # (S B, m, y_dim)
        # residual bootstrap: standardised residuals drawn with replacement, centred per draw
        residuals = _take((ys - mu) / sigma, residual_index.reshape(s * b, m))
        if masks is not None:  # padded slots hold their own (meaningless) residual: clear it
            residuals = residuals.masked_fill(~masks[..., None], 0.0)
        # as the reference code: the *drawn* residuals are centred (each draw has mean exactly 0);
        # the mean runs over real slots only
        residuals = residuals - masked_mean(residuals, masks)[:, None, :]
        y_boot = mu + sigma * residuals
        if masks is not None:
            y_boot = y_boot.masked_fill(~masks[..., None], 0.0)
        return y_boot.view(s, b, m, -1)

    def bootstrap_predict(
        self,
        context_x: Tensor,
        context_y: Tensor,
        context_mask: Tensor | None,
        target_x: Tensor,
        paired_index: Tensor,
        residual_index: Tensor,
    ) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """Base prediction ``(mean, std)``, each ``(B, n, y_dim)``, and the S bootstrap predictions,
        each ``(S, B, n, y_dim)``, at ``target_x`` given the bootstrap positions."""
        s, b, _ = paired_index.shape
        n = target_x.shape[1]
        y_boot = self.bootstrap_contexts(context_x, context_y, context_mask, paired_index, residual_index)
        base = self.representation(self.encode(context_x, context_y, context_mask), target_x)  # (B, n, 2w)
        targets = _stack(target_x, s)  # (S B, n, x_dim)
        boot_context = self.encode(
            _stack(context_x, s),
            y_boot.reshape(s * b, *y_boot.shape[2:]),
            None if context_mask is None else _stack(context_mask, s),
        )
        boot = self.representation(boot_context, targets)  # (S B, n, 2w)
        means, stds = self.decoder(targets, _stack(base, s), boot)  # (S B, n, y_dim)
        return self.decoder(target_x, base), (means.view(s, b, n, -1), stds.view(s, b, n, -1))

    def _bootstrap(
        self,
        context_x: Tensor,
        context_y: Tensor,
        context_mask: Tensor | None,
        target_x: Tensor,
        n_samples: int,
        generator: torch.Generator | None,
    ) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        paired, residual = self.draw_indices(context_x, context_mask, n_samples, generator)
        return self.bootstrap_predict(context_x, context_y, context_mask, target_x, paired, residual)

    def target_log_likelihood(
        self,
        context_x: Tensor,
        context_y: Tensor,
        context_mask: Tensor | None,
        target_x: Tensor,
        target_y: Tensor,
        *,
        n_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """log of the bootstrap mixture's density per target point, ``(B, n)``: logmeanexp over
        ``n_samples`` bootstrap contexts (None: ``config.n_bootstrap_eval``)."""
        k = self.config.n_bootstrap_eval if n_samples is None else n_samples
        _, (means, stds) = self._bootstrap(context_x, context_y, context_mask, target_x, k, generator)
        return logmeanexp(gaussian_log_prob(target_y[None], means, stds), dim=0)

    def predict(
        self,
        context_x: Tensor,
        context_y: Tensor,
        context_mask: Tensor | None,
        target_x: Tensor,
        *,
        n_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Mean and std ``(B, n, y_dim)`` of the mixture over ``n_samples`` bootstrap contexts (None:
        ``config.n_bootstrap_eval``), and the per-context means ``(S, B, n, y_dim)`` as samples."""
        k = self.config.n_bootstrap_eval if n_samples is None else n_samples
        _, (means, stds) = self._bootstrap(context_x, context_y, context_mask, target_x, k, generator)
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
        """-(ll_base + ll_bootstrap) per target point, averaged over tasks: ll_base under the base
        prediction, ll_bootstrap under the mixture of ``config.n_bootstrap_train`` bootstrap
        contexts. ``objective`` and ``n_samples`` (the latent models' settings) are not used."""
        k = self.config.n_bootstrap_train
        base, (means, stds) = self._bootstrap(context_x, context_y, context_mask, target_x, k, generator)
        ll_base = gaussian_log_prob(target_y, *base)  # (B, n)
        ll_boot = logmeanexp(gaussian_log_prob(target_y[None], means, stds), dim=0)  # (B, n)
        return -mean_over_targets(ll_base + ll_boot, target_mask).mean()
