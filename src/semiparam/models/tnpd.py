"""Transformer Neural Process with a diagonal Gaussian head, TNP-D (Nguyen & Grover 2022, "Transformer
Neural Processes: Uncertainty-Aware Meta Learning Via Sequence Modeling", section 3 and appendix).

Context and target points are tokens of one transformer. Each point is embedded by one MLP, a
context point from ``[x, y]`` and a target point from ``[x, 0]``; a stack of transformer encoder
layers runs under an attention mask in which *every token attends to the context tokens only*:
context points see each other, targets see the context but neither each other nor themselves. So
the prediction at a target depends on the context and its own x only: predictions factorise over
targets and do not change with the other targets. A small MLP head maps each target token to the
mean and std of a Gaussian::

    tokens      h_c = Embed([x_c, y_c]) (B, m, w),   h_t = Embed([x_t, 0]) (B, n, w)
    layer l     [h_c, h_t] <- MAB_post(queries [h_c, h_t], keys/values h_c)    l = 1..L
    head        mu, sigma = MLP(h_t), sigma = 0.1 + 0.9 softplus

Because targets never serve as keys, the joint masked pass over m + n tokens is computed exactly
as: per layer, all m + n tokens query the m context tokens (keys and values projected once).
Padded context points are masked out as keys; padded targets are queries whose output is ignored.
Cost per layer O(m (m + n) w). Trained by the negative target log-likelihood per target point.

Paper settings (GP regression, reference config): width 64, 6 layers, 4 heads, feed-forward 128,
ReLU, post-LayerNorm (PyTorch's ``TransformerEncoderLayer`` default), no dropout, embedding MLP
with 3 hidden layers, head MLP ``Linear(w, 128) -> ReLU -> Linear(128, 2 y_dim)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._config import ConfigError
from ..nn.attention import MAB
from .np_base import (
    NPConfig,
    Objective,
    gaussian_log_prob,
    key_padding_mask,
    mean_over_targets,
    mlp,
    output_std,
)

_EMBED_HIDDEN = 3  # reference code: build_mlp(depth=4) = 3 hidden ReLU layers


@dataclass(frozen=True)
class TNPDConfig(NPConfig):
    """TNP-D sizes (reference GP config: width 64, 4 heads, 6 layers, feed-forward 128)."""

    d_model: int = 64  # token width
    n_heads: int = 4  # must divide d_model
    n_blocks: int = 6  # transformer encoder layers. NOTE: was n_layers (ALIASES), NPT's name now
    d_feedforward: int = 128  # hidden width of each layer's feed-forward and of the head

    def validate(self) -> None:
        super().validate()
        for name in ("n_blocks", "d_feedforward"):
            if getattr(self, name) < 1:
                raise ConfigError(f"TNPDConfig.{name} must be >= 1, got {getattr(self, name)}")


def transformer_layer(width: int, n_heads: int, d_feedforward: int) -> MAB:
    """A post-LayerNorm transformer encoder layer (PyTorch's ``TransformerEncoderLayer`` with ReLU,
    no dropout) whose queries attend to a separate set of keys/values::

        h = LN(q + MHA(q, kv, kv)),   out = LN(h + Linear(ReLU(Linear(h))))

    called as ``layer(queries (B, k, w), keys_values (B, m, w), attn_mask=key mask)`` -> ``(B, k, w)``.
    """
    return MAB(
        width,
        n_heads,
        norm="post",
        residual_projection=False,
        activation="relu",
        d_feedforward=d_feedforward,
        dropout=0.0,
        scale="per_head",  # 1 / sqrt(width / heads), as torch.nn.MultiheadAttention
        layer_norm_eps=1e-5,  # torch.nn.LayerNorm's default
    )


class TNPDModule(nn.Module):
    """TNP-D. Same calling convention as :class:`~semiparam.models.np_base.NeuralProcess`: padded
    batches ``context_x (B, m, x_dim)``, ``context_y (B, m, y_dim)``, ``context_mask (B, m)`` or None,
    targets likewise with n points."""

    def __init__(self, config: TNPDConfig) -> None:
        super().__init__()
        self.config = config
        w = config.d_model
        self.embedder = mlp(config.x_dim + config.y_dim, w, w, n_hidden=_EMBED_HIDDEN)
        self.layers = nn.ModuleList(
            transformer_layer(w, config.n_heads, config.d_feedforward) for _ in range(config.n_blocks)
        )
        self.head = mlp(w, config.d_feedforward, 2 * config.y_dim)

    @property
    def is_latent(self) -> bool:
        return False

    @property
    def is_stochastic(self) -> bool:
        return False

    def forward(
        self, context_x: Tensor, context_y: Tensor, context_mask: Tensor | None, target_x: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Predictive mean and std at ``target_x``, each ``(B, n, y_dim)``."""
        m = context_x.shape[1]
        context = self.embedder(torch.cat([context_x, context_y], dim=-1))  # (B, m, w)
        empty_y = target_x.new_zeros(*target_x.shape[:-1], self.config.y_dim)
        targets = self.embedder(torch.cat([target_x, empty_y], dim=-1))  # (B, n, w)
        tokens = torch.cat([context, targets], dim=1)  # (B, m + n, w)
        keys = key_padding_mask(context_mask)
        for layer in self.layers[:-1]:
            tokens = layer(tokens, tokens[:, :m], attn_mask=keys)  # every token attends to the context
        # the last layer's context outputs feed nothing: only the targets query it
        targets = self.layers[-1](tokens[:, m:], tokens[:, :m], attn_mask=keys)  # (B, n, w)
        mean, raw_std = self.head(targets).chunk(2, dim=-1)
        # NOTE[DIFF]: the reference code's GP runs use std = exp(raw) (its bound_std option, off
        # there, gives 0.05 + 0.95 softplus); we bound the std as every NP here does, 0.1 + 0.9
        # softplus, so that all models share one likelihood head and train stably
        return mean, output_std(raw_std)

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
        """log p(y_t | x_t, context) per target point, ``(B, n)``. ``n_samples`` and ``generator``
        are not used (TNP-D is deterministic); they keep the neural processes' signature."""
        mean, std = self(context_x, context_y, context_mask, target_x)
        return gaussian_log_prob(target_y, mean, std)

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
        """Predictive ``mean``, ``std`` ``(B, n, y_dim)``, and no samples (None)."""
        mean, std = self(context_x, context_y, context_mask, target_x)
        return mean, std, None

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
        """Negative target log-likelihood per target point, averaged over tasks (as the reference
        code, which also scores the targets only). ``objective``, ``n_samples``, ``generator``:
        latent-model settings, not used."""
        ll = self.target_log_likelihood(context_x, context_y, context_mask, target_x, target_y)
        return -mean_over_targets(ll, target_mask).mean()
