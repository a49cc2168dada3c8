"""Inducing Point Neural Processes (Rastogi et al. 2023, section 3.3, appendix A.6, Tables 16-17).

The attentive NPs of Kim et al. let the m context points self-attend, which costs O(m^2). IPNPs
replace that self-attention with SPIN's cross-attention between datapoints (XABD): h learned
inducing points attend to the context, O(m h), and everything downstream sees only the h inducing
points. Two models:

- **CIPNP** (conditional): targets cross-attend (queries MLP(x_t)) to the inducing points of one
  SPIN encoder, keys = values = inducing points; a second SPIN encoder, mean-pooled over its
  inducing points, gives a deterministic global summary r' (in the paper; here by default the
  first encoder's inducing points are pooled instead, see ``summary_encoder`` below). Gaussian
  head, sigma = 0.1 + 0.9 softplus. Trained by the target log-likelihood.
- **IPNP** (latent): the pooled path gives a global latent z ~ N(mu_z, sigma_z) with
  sigma_z = 0.1 + 0.9 sigmoid; trained by the variational lower bound (ELBO) with the posterior
  from context + targets and the prior from the context.

The paper sets h = floor(min_ctx / 2) for each context range; ``n_inducing=None`` lets the
front door resolve it from the task sampler at fit time.

**How targets read the inducing points** (``readout``). In the paper (and ``readout="inducing"``)
the targets' queries MLP(x_t) attend to the h inducing points themselves (keys = values = H_D).
Trained so, the models learn slowly: at the start every inducing point attends almost uniformly to
the context and holds nearly the same summary, its key says nothing about *where* in x its
information lies, and the targets can only find their neighbourhood once the inducing points have
specialised to regions and the queries have learned which is which -- two attention hops that
must be learned together. ``readout="context"`` (the default) adds one cross-attention: after XABD
the context points read back from the inducing points (the Set Transformer's induced set
attention, O(m h) like XABD), and the targets attend to the m context points with keys MLP(x_c),
as the attentive NPs do. The context interacts only through the h inducing points, so the cost
stays linear in m for a fixed h. The read-back is an attention with a residual and no
feed-forward by default (``readback_ff=0``): per context point it is the dearest part of the
model, and a feed-forward there (``readback_ff=4``, a full ``MAB(D, H_D)``, the earlier default;
models saved with it load as such) bought no accuracy at equal steps.
``readout="located"`` keeps the paper's O(n h) read-out and keys each inducing point by where it
looks (:class:`LocatedInducingPath`). ``benchmarks/np_convergence.py`` trains every form.
NOTE[DIFF]: none of this is in the paper (its CIPNP has targets attend to H_D only); the measured
reasons are in ``benchmarks/results/np_convergence.md``.

**Where r' comes from** (``summary_encoder``). The paper's CIPNP, like the ANP family, has a second
encoder of its own for the global summary r' (``"separate"``). Once the read-out is linear in m,
that encoder's per-context-point work (its input MLP and the keys and values of its XABD) is a
large share of what a training step stores per context point. ``"shared"`` (the default) pools
the cross path's own h inducing points instead (:class:`InducingSummaryPool`): one SPIN encoder in
all. Models saved before the option existed load with ``"separate"``; IPNP keeps its own latent
encoder (its posterior encodes context and targets together). NOTE[DIFF]: not in the paper; the
measured reasons are in ``benchmarks/results/np_convergence.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor, nn

from .._config import ConfigError
from ..nn.attention import InducedSetAttention, InducingPointAttention
from .np_base import (
    CrossAttentionPath,
    CrossContext,
    NeuralProcess,
    NPConfig,
    PoolingPath,
    inducing_point_encoder,
    key_padding_mask,
    mlp,
)

Readout = Literal["context", "inducing", "located"]
READOUTS: tuple[str, ...] = get_args(Readout)
SummaryEncoder = Literal["separate", "shared"]
SUMMARY_ENCODERS: tuple[str, ...] = get_args(SummaryEncoder)


@dataclass(frozen=True)
class CIPNPConfig(NPConfig):
    """CIPNP widths; ``n_inducing`` is h, the number of inducing points of each SPIN encoder
    (None = decide at fit: floor(min_ctx / 2), the paper's choice)."""

    n_inducing: int | None = None
    readout: Readout = "context"  # "inducing": the paper's (targets attend to H_D only), see above
    readback_ff: int = 0  # readout="context": feed-forward multiplier of the read-back block; 0 = none
    summary_encoder: SummaryEncoder = "shared"  # r' pools the cross path's inducing points; see above

    def validate(self) -> None:
        super().validate()
        if self.n_inducing is not None and self.n_inducing < 1:
            raise ConfigError(f"{type(self).__name__}.n_inducing must be >= 1 or None, got {self.n_inducing}")
        if self.readout not in READOUTS:
            raise ConfigError(
                f"{type(self).__name__}.readout must be one of {READOUTS}, got {self.readout!r}"
            )
        if self.readback_ff < 0:
            raise ConfigError(f"{type(self).__name__}.readback_ff must be >= 0, got {self.readback_ff}")
        if self.summary_encoder not in SUMMARY_ENCODERS:
            raise ConfigError(
                f"{type(self).__name__}.summary_encoder must be one of {SUMMARY_ENCODERS},"
                f" got {self.summary_encoder!r}"
            )


@dataclass(frozen=True)
class IPNPConfig(CIPNPConfig):
    """IPNP: CIPNP widths plus ``d_latent``, the size of z (paper A.6: 128)."""

    d_latent: int = 128
    summary_encoder: SummaryEncoder = "separate"  # the only choice for the latent model (validate)

    def validate(self) -> None:
        super().validate()
        if self.d_latent < 1:
            raise ConfigError(f"IPNPConfig.d_latent must be >= 1, got {self.d_latent}")
        if self.summary_encoder != "separate":
            raise ConfigError(
                "IPNPConfig.summary_encoder must be 'separate': the latent path also encodes context and"
                " targets together (the posterior in training), which the cross path never sees"
            )


def _inducing(config: CIPNPConfig) -> int:
    if config.n_inducing is None:
        raise ConfigError("n_inducing is unresolved (None); set it, or let the estimator's fit() choose it")
    return config.n_inducing


class InducedContextPath(CrossAttentionPath):
    """``readout="context"``: XABD, then the context points read back from the inducing points
    (:class:`~semiparam.nn.attention.InducedSetAttention`, ISAB: ``H = MAB(H_D, D)``, then
    ``D' = MAB(D, H)``, O(m h) both); the targets attend to the m read-back points with keys
    MLP(x_c). The read-back block's feed-forward has ``readback_ff`` x w hidden units (0: none,
    the cheapest per context point). The inducing points' summaries are kept for a shared pooled
    summary. NOTE[DIFF]: see the module docstring (``readout``)."""

    def __init__(self, config: CIPNPConfig) -> None:
        w, heads, h = config.d_model, config.n_heads, _inducing(config)
        encoder = InducedSetAttention(w, heads, h, readback_ff_multiplier=config.readback_ff, dropout=0.0)
        super().__init__(config, encoder, separate_keys=True)


class LocatedInducingPath(CrossAttentionPath):
    """``readout="located"``: the targets attend to the h inducing points (O(n h), as the paper),
    with each inducing point's key saying *where* it looks: the XABD attention weights of inducing
    point j, applied to MLP(x_c), give its location ``l_j = sum_i a_ji MLP(x_c,i)``; the target
    queries MLP(x_t) are matched against those (keys l_j, values H_j, as the attentive NPs match
    MLP(x_t) against MLP(x_c)). One XABD pass computes both (the values of the attention carry
    ``[V(D), MLP(x_c)]``), so the per-context-point work is the paper form's plus MLP(x_c).
    NOTE[DIFF]: not in the paper, see the module docstring (``readout``)."""

    def __init__(self, config: CIPNPConfig) -> None:
        w, heads, h = config.d_model, config.n_heads, _inducing(config)
        super().__init__(config, inducing_point_encoder(w, heads, h), separate_keys=True)

    def encode(self, context_x: Tensor, context_y: Tensor, context_mask: Tensor | None) -> CrossContext:
        encoder = self.set_encoder
        assert isinstance(encoder, InducingPointAttention) and self.key_mlp is not None
        mab, attention = encoder.mab, encoder.mab.attention
        tokens = self.value_mlp(torch.cat([context_x, context_y], dim=-1))  # (B, m, w)
        b, m, _ = tokens.shape
        queries = encoder.inducing.expand(b, -1, -1)  # (B, h, w)
        k, v = mab.context_kv(tokens)  # (B, heads, m, dh)
        located = self.key_mlp(context_x).view(b, m, attention.n_heads, -1).transpose(1, 2)  # like k
        both = attention.backend(
            mab.query_heads(queries),
            k,
            torch.cat([v, located], dim=-1),
            scale=attention.scale,
            attn_mask=key_padding_mask(context_mask),
        )  # (B, heads, h, 2 dh): the same weights over values and locations
        heads_v, heads_l = both.split(v.shape[-1], dim=-1)
        keys = heads_l.transpose(1, 2).reshape(b, queries.shape[1], attention.width)  # (B, h, w)
        summaries = mab.finish(queries, heads_v)
        return CrossContext(keys, summaries, None, summaries)


def _cross_path(config: CIPNPConfig) -> CrossAttentionPath:
    w, heads, h = config.d_model, config.n_heads, _inducing(config)
    if config.readout == "inducing":  # the paper: keys = values = the h inducing points
        return CrossAttentionPath(config, inducing_point_encoder(w, heads, h), separate_keys=False)
    if config.readout == "located":
        return LocatedInducingPath(config)
    return InducedContextPath(config)


class InducingSummaryPool(nn.Module):
    """``summary_encoder="shared"``: r' = MLP(mean of the cross path's h inducing points), ``(B, w)``,
    in place of a second SPIN encoder over the context. NOTE[DIFF]: the paper's CIPNP has a second
    SPIN encoder of its own (as the ANP family has two paths); sharing the first drops that
    encoder's per-context-point work (its input MLP and XABD keys and values), most of the memory
    left once the read-out is linear in m."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.output_mlp = mlp(width, width, width)

    def forward(self, summaries: Tensor) -> Tensor:
        return self.output_mlp(summaries.mean(dim=1))  # (B, h, w) -> (B, w)


class CIPNPModule(NeuralProcess):
    """CIPNP: SPIN (XABD) set encoders in both paths (read out as ``config.readout`` says),
    deterministic pooled summary."""

    def __init__(self, config: CIPNPConfig) -> None:
        w, heads, h = config.d_model, config.n_heads, _inducing(config)
        cross = _cross_path(config)  # built first: the initialisation draws in the order they always had
        pool = (
            InducingSummaryPool(w)
            if config.summary_encoder == "shared"
            else PoolingPath(config, inducing_point_encoder(w, heads, h), d_out=w)
        )
        super().__init__(config, cross, pool, d_latent=None)

    def summarise(self, cross: CrossContext, x: Tensor, y: Tensor, mask: Tensor | None) -> Tensor:
        if isinstance(self.pooling_path, InducingSummaryPool):
            assert cross.summaries is not None  # every CIPNP read-out keeps them
            return self.pooling_path(cross.summaries)
        return super().summarise(cross, x, y, mask)


class IPNPModule(NeuralProcess):
    """IPNP: SPIN (XABD) set encoders in both paths (read out as ``config.readout`` says), latent
    pooled path."""

    def __init__(self, config: IPNPConfig) -> None:
        w, heads, h = config.d_model, config.n_heads, _inducing(config)
        super().__init__(
            config,
            _cross_path(config),
            PoolingPath(config, inducing_point_encoder(w, heads, h), d_out=2 * config.d_latent),
            d_latent=config.d_latent,
        )
