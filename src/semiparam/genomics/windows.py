"""Windows of untyped sites, K-mer tokens, and back from token probabilities to allele dosages.

Imputation is split into windows as in SPIN's genomics experiments (spec-spin section 5.1):

- the **targets** of a window are ``window_targets`` consecutive untyped reference sites of one
  contig; consecutive windows overlap by ``overlap`` sites, and the last window of a contig is
  shifted back to end at its last site, so every window has the same number of targets;
- its **inputs** are ``n_inputs`` array (typed) sites: for each target take the ``n_inputs`` array
  sites nearest in base pairs, take the union over the window, keep its middle ``n_inputs``
  (the authors' code).

Each window is a table with one row per haplotype: the input alleles grouped into non-overlapping
K-mers, then the target alleles grouped likewise; a K-mer of bits ``b_0..b_{K-1}`` is the token
``sum_j b_j 2**j``, a categorical cell with ``2**K`` classes (K = 5 in the paper: 32 classes). A
token with any missing bit is a missing cell. When a contig has fewer than ``n_inputs`` array sites
or fewer than ``window_targets`` untyped sites, the missing slots are padded with a constant 0
bit (slot index -1), the same in reference and target rows, so every window has the same
columns and a single model can serve all of them.
NOTE[DIFF]: the paper's windows always have their full 150 inputs and 100 targets.

A model predicts a probability over the 2**K classes of each token; the ALT probability of bit j is
the sum over the classes whose bit j is 1 (:func:`token_bit_probabilities`). Overlapping windows
are stitched by a weighted mean whose weight is a triangle peaking at each window's centre, so a
site is decided mostly by the window in which it is most central.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._config import ConfigError


@dataclass(frozen=True)
class Window:
    """One window: indices into the panel's sites (-1 = padding slot)."""

    contig: str
    inputs: np.ndarray  # (n_inputs,) int64
    targets: np.ndarray  # (window_targets,) int64
    target_weights: np.ndarray  # (window_targets,) float64, 0 for padding

    def to_dict(self) -> dict[str, object]:
        return {
            "contig": self.contig,
            "inputs": self.inputs.tolist(),
            "targets": self.targets.tolist(),
            "target_weights": self.target_weights.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Window:
        return cls(
            str(d["contig"]),
            np.asarray(d["inputs"], dtype=np.int64),
            np.asarray(d["targets"], dtype=np.int64),
            np.asarray(d["target_weights"], dtype=np.float64),
        )


@dataclass(frozen=True)
class WindowSpec:
    """How windows are cut. Input and target counts are rounded up to multiples of ``kmer``."""

    n_inputs: int = 150
    window_targets: int = 100
    overlap: int = 20
    kmer: int = 5

    def __post_init__(self) -> None:
        if not 1 <= self.kmer <= 10:
            raise ConfigError(f"kmer must be in [1, 10] (2**kmer classes per token), got {self.kmer}")
        if self.n_inputs < 1 or self.window_targets < 1:
            raise ConfigError(
                f"n_inputs and window_targets must be >= 1, got {self.n_inputs} and {self.window_targets}"
            )
        if not 0 <= self.overlap < self.window_targets:
            raise ConfigError(f"overlap must be in [0, window_targets), got {self.overlap}")

    @property
    def input_slots(self) -> int:
        return -(-self.n_inputs // self.kmer) * self.kmer

    @property
    def target_slots(self) -> int:
        return -(-self.window_targets // self.kmer) * self.kmer

    @property
    def n_input_tokens(self) -> int:
        return self.input_slots // self.kmer

    @property
    def n_target_tokens(self) -> int:
        return self.target_slots // self.kmer

    @property
    def n_classes(self) -> int:
        return 2**self.kmer


def _nearest_block(array_pos: np.ndarray, p: int, k: int) -> tuple[int, int]:
    """``[lo, hi)`` of the ``k`` array positions nearest to ``p`` (sorted ``array_pos``)."""
    m = len(array_pos)
    if k >= m:
        return 0, m
    hi = int(np.searchsorted(array_pos, p))
    lo = hi
    while hi - lo < k:  # grow towards the nearer neighbour; ties go left
        if lo == 0:
            hi += 1
        elif hi == m:
            lo -= 1
        elif p - array_pos[lo - 1] <= array_pos[hi] - p:
            lo -= 1
        else:
            hi += 1
    return lo, hi


def _triangle(n_real: int, n_slots: int) -> np.ndarray:
    w = np.zeros(n_slots, dtype=np.float64)
    i = np.arange(n_real, dtype=np.float64)
    w[:n_real] = np.minimum(i + 1, n_real - i)
    return w


def plan_windows(
    chrom: np.ndarray, pos: np.ndarray, is_array: np.ndarray, is_target: np.ndarray, spec: WindowSpec
) -> list[Window]:
    """Cut every contig's ``is_target`` sites into windows whose inputs are ``is_array`` sites.

    ``chrom``, ``pos``, ``is_array``, ``is_target``: per panel site. A contig with targets but no
    array site raises: nothing would inform its windows.
    """
    windows: list[Window] = []
    n_in, n_t = spec.input_slots, spec.target_slots
    step = spec.window_targets - spec.overlap
    for contig in dict.fromkeys(chrom.tolist()):
        on_contig = chrom == contig
        targets = np.flatnonzero(on_contig & is_target)
        arrays = np.flatnonzero(on_contig & is_array)
        if len(targets) == 0:
            continue
        if len(arrays) == 0:
            raise ValueError(
                f"contig {contig!r} has {len(targets)} sites to impute but no typed (array) site; "
                "check that the target VCF covers it"
            )
        array_pos = pos[arrays]
        size = min(spec.window_targets, len(targets))
        starts = list(range(0, max(len(targets) - size, 0) + 1, step))
        if starts[-1] + size < len(targets):
            starts.append(len(targets) - size)  # last window ends at the contig's last target
        for s in starts:
            block = targets[s : s + size]
            lo, _ = _nearest_block(array_pos, int(pos[block[0]]), spec.n_inputs)
            _, hi = _nearest_block(array_pos, int(pos[block[-1]]), spec.n_inputs)
            if hi - lo > spec.n_inputs:  # keep the middle n_inputs of the union
                lo += (hi - lo - spec.n_inputs) // 2
                hi = lo + spec.n_inputs
            inputs = np.full(n_in, -1, dtype=np.int64)
            inputs[: hi - lo] = arrays[lo:hi]
            target_idx = np.full(n_t, -1, dtype=np.int64)
            target_idx[:size] = block
            windows.append(Window(str(contig), inputs, target_idx, _triangle(size, n_t)))
    return windows


def gather_bits(alleles: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``alleles (n_sites, n_rows)`` (0/1, -1 missing) at ``index`` (slots; -1 = padding -> 0):
    returns ``(n_rows, n_slots)`` int8."""
    out = np.zeros((alleles.shape[1], len(index)), dtype=np.int8)
    real = index >= 0
    out[:, real] = alleles[index[real]].T
    return out


def tokenize(bits: np.ndarray, kmer: int) -> np.ndarray:
    """``bits (n_rows, n_slots)`` (0/1, -1 missing), n_slots a multiple of ``kmer`` ->
    ``(n_rows, n_slots // kmer)`` int64 tokens, -1 where any bit of the K-mer is missing."""
    n_rows, n_slots = bits.shape
    if n_slots % kmer:
        raise ValueError(f"{n_slots} slots are not a multiple of kmer={kmer}")
    grouped = bits.reshape(n_rows, n_slots // kmer, kmer).astype(np.int64)
    weights = 1 << np.arange(kmer, dtype=np.int64)
    tokens = (np.clip(grouped, 0, 1) * weights).sum(axis=2)
    tokens[(grouped < 0).any(axis=2)] = -1
    return tokens


def bit_table(kmer: int) -> np.ndarray:
    """``(2**kmer, kmer)`` float: bit j of class c."""
    classes = np.arange(2**kmer)[:, None]
    return ((classes >> np.arange(kmer)[None, :]) & 1).astype(np.float64)


def token_bit_probabilities(
    proba: np.ndarray, kmer: int, observed_bits: np.ndarray | None = None
) -> np.ndarray:
    """Marginal ALT probability of each bit: ``proba (n_rows, n_tokens, 2**kmer)`` ->
    ``(n_rows, n_tokens * kmer)``.

    With ``observed_bits (n_rows, n_tokens * kmer)`` (0/1, -1 unknown), classes that contradict an
    observed bit are dropped first, so a partly observed K-mer is completed conditionally on the
    bits that are known (used for missing genotypes at typed sites).
    """
    table = bit_table(kmer)  # (C, K)
    p = proba.astype(np.float64)
    if observed_bits is not None:
        n_rows, n_tokens, _ = p.shape
        obs = observed_bits.reshape(n_rows, n_tokens, kmer)
        # (n, t, 1, K) vs (C, K): class c agrees where the bit is unknown or equal
        agree = ((obs[:, :, None, :] < 0) | (obs[:, :, None, :] == table[None, None])).all(axis=3)
        p = p * agree
        total = p.sum(axis=2, keepdims=True)
        p = np.where(total > 0, p / np.where(total > 0, total, 1.0), proba)
    out = p @ table  # (n, t, K)
    return out.reshape(out.shape[0], -1)


def window_columns(spec: WindowSpec) -> tuple[list[str], list[str]]:
    """Column names of a window table: inputs ``in0..``, targets ``out0..``."""
    return [f"in{j}" for j in range(spec.n_input_tokens)], [f"out{j}" for j in range(spec.n_target_tokens)]
