"""Conditional Attentive Neural Process, CANP (Kim et al. 2019, "Attentive Neural Processes",
deterministic path only; the conditional baseline of the SPIN paper, Table 16).

The context points interact through self-attention ``MAB(D, D)`` (cost O(m^2) in the context size
m); targets cross-attend with queries MLP(x_t) and keys MLP(x_c) to the self-attended context.
A second, pooled deterministic path ``r'`` (mean of another self-attended context) is added so the
parameter count matches the latent models, as in Lee et al. 2020 and the SPIN paper.
"""

from __future__ import annotations

from dataclasses import dataclass

from .np_base import NeuralProcess, NPConfig, self_attention_paths


@dataclass(frozen=True)
class CANPConfig(NPConfig):
    """CANP widths (paper A.6: width 128, 8 heads, one self-attention block per path)."""


class CANPModule(NeuralProcess):
    """CANP: self-attention set encoders in both paths, deterministic pooled summary."""

    def __init__(self, config: CANPConfig) -> None:
        super().__init__(config, *self_attention_paths(config, config.d_model), d_latent=None)
