"""Attentive Neural Process, ANP (Kim et al. 2019): the latent baseline of the SPIN paper (Table 17).

A deterministic cross-attention path as in CANP, plus a global latent z: the context points
self-attend (``MAB(D, D)``, O(m^2)), are mean-pooled and mapped to ``N(mu_z, sigma_z)``. Trained
by the variational lower bound with the posterior q(z | context + targets) from the same latent
encoder and the prior p(z | context).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._config import ConfigError
from .np_base import NeuralProcess, NPConfig, self_attention_paths


@dataclass(frozen=True)
class ANPConfig(NPConfig):
    """ANP widths; ``d_latent`` is the size of z (paper A.6: 128)."""

    d_latent: int = 128

    def validate(self) -> None:
        super().validate()
        if self.d_latent < 1:
            raise ConfigError(f"ANPConfig.d_latent must be >= 1, got {self.d_latent}")


class ANPModule(NeuralProcess):
    """ANP: self-attention set encoders, latent pooled path."""

    def __init__(self, config: ANPConfig) -> None:
        super().__init__(config, *self_attention_paths(config, 2 * config.d_latent), d_latent=config.d_latent)
