"""Inducing Point Neural Processes (Rastogi et al. 2023, section 3.3, appendix A.6, Tables 16-17).

The attentive NPs of Kim et al. let the m context points self-attend, which costs O(m^2). IPNPs
replace that self-attention with SPIN's cross-attention between datapoints (XABD): h learned
inducing points attend to the context, O(m h), and everything downstream sees only the h inducing
points. Two models:

- **CIPNP** (conditional): targets cross-attend (queries MLP(x_t)) to the inducing points of one
  SPIN encoder, keys = values = inducing points; a second SPIN encoder, mean-pooled over its
  inducing points, gives a deterministic global summary r'. Gaussian head, sigma = 0.1 + 0.9
  softplus. Trained by the target log-likelihood.
- **IPNP** (latent): the pooled path gives a global latent z ~ N(mu_z, sigma_z) with
  sigma_z = 0.1 + 0.9 sigmoid; trained by the variational lower bound (ELBO) with the posterior
  from context + targets and the prior from the context.

The paper sets h = floor(min_ctx / 2) for each context range; ``n_inducing=None`` lets the
front door resolve it from the task sampler at fit time.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._config import ConfigError
from .np_base import CrossAttentionPath, InducingPointSetEncoder, NeuralProcess, NPConfig, PoolingPath


@dataclass(frozen=True)
class CIPNPConfig(NPConfig):
    """CIPNP widths; ``n_inducing`` is h, the number of inducing points of each SPIN encoder
    (None = decide at fit: floor(min_ctx / 2), the paper's choice)."""

    n_inducing: int | None = None

    def validate(self) -> None:
        super().validate()
        if self.n_inducing is not None and self.n_inducing < 1:
            raise ConfigError(f"{type(self).__name__}.n_inducing must be >= 1 or None, got {self.n_inducing}")


@dataclass(frozen=True)
class IPNPConfig(CIPNPConfig):
    """IPNP: CIPNP widths plus ``d_latent``, the size of z (paper A.6: 128)."""

    d_latent: int = 128

    def validate(self) -> None:
        super().validate()
        if self.d_latent < 1:
            raise ConfigError(f"IPNPConfig.d_latent must be >= 1, got {self.d_latent}")


def _inducing(config: CIPNPConfig) -> int:
    if config.n_inducing is None:
        raise ConfigError("n_inducing is unresolved (None); set it, or let the estimator's fit() choose it")
    return config.n_inducing


class CIPNPModule(NeuralProcess):
    """CIPNP: SPIN (XABD) set encoders in both paths, deterministic pooled summary."""

    def __init__(self, config: CIPNPConfig) -> None:
        w, heads, h = config.d_model, config.n_heads, _inducing(config)
        super().__init__(
            config,
            CrossAttentionPath(config, InducingPointSetEncoder(w, heads, h), separate_keys=False),
            PoolingPath(config, InducingPointSetEncoder(w, heads, h), d_out=w),
            d_latent=None,
        )


class IPNPModule(NeuralProcess):
    """IPNP: SPIN (XABD) set encoders in both paths, latent pooled path."""

    def __init__(self, config: IPNPConfig) -> None:
        w, heads, h = config.d_model, config.n_heads, _inducing(config)
        super().__init__(
            config,
            CrossAttentionPath(config, InducingPointSetEncoder(w, heads, h), separate_keys=False),
            PoolingPath(config, InducingPointSetEncoder(w, heads, h), d_out=2 * config.d_latent),
            d_latent=config.d_latent,
        )
