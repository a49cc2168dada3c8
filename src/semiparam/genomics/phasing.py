"""Phase of target genotypes: which heterozygous calls are unphased, a refusal naming the first
one, and a window-local phasing of them against reference haplotypes (:func:`phase_window`)."""

from __future__ import annotations

import numpy as np

from ..data.genotypes import VariantSites


def phase_window(
    genotypes: np.ndarray, phased: np.ndarray, reference: np.ndarray, *, n_candidates: int = 8
) -> np.ndarray:
    """Phase unphased heterozygous calls of one window against reference haplotypes.

    ``genotypes (n_samples, n_sites, 2)`` int8 (-1 missing), ``phased (n_samples, n_sites)`` bool,
    ``reference (n_ref, n_sites)`` 0/1. Returns ``(n_samples, 2, n_sites)`` haplotypes (-1 missing).

    For a sample with unphased hets: rank reference haplotypes by how many homozygous calls they
    contradict, and for each of the best ``n_candidates`` let the first haplotype copy its alleles
    at the unphased hets (the second takes the others); keep the candidate whose two haplotypes are
    together closest to their nearest reference haplotypes. Phased hets keep their phase.
    NOTE[DIFF]: a window-local best-match heuristic, far simpler than Beagle's or SHAPEIT's HMM
    phasing; the stitched dosages do not depend on phase, the per-haplotype GT may switch.
    """
    n_samples, n_sites, _ = genotypes.shape
    out = np.transpose(genotypes, (0, 2, 1)).copy()  # (n, 2, s)
    a, b = genotypes[:, :, 0], genotypes[:, :, 1]
    observed = (a >= 0) & (b >= 0)
    het_unphased = observed & (a != b) & ~phased
    todo = np.flatnonzero(het_unphased.any(axis=1))
    if len(todo) == 0:
        return out
    ref = reference.astype(np.float32)  # (r, s)
    dose = np.where(observed, a.astype(np.int64) + b, -1)[todo]  # (t, s)
    hom0 = (dose == 0).astype(np.float32)
    hom2 = (dose == 2).astype(np.float32)
    # contradicted homozygous calls per (sample, reference haplotype)
    contradict = hom0 @ ref.T + hom2 @ (1.0 - ref).T  # (t, r)
    c = min(n_candidates, ref.shape[0])
    cand = np.argpartition(contradict, c - 1, axis=1)[:, :c]  # (t, c)
    het = het_unphased[todo]  # (t, s)
    first = np.where(het[:, None, :], ref[cand], out[todo, 0][:, None, :])  # (t, c, s)
    second = np.where(het[:, None, :], 1.0 - ref[cand], out[todo, 1][:, None, :])
    obs = observed[todo][:, None, :].astype(np.float32)

    def nearest(h: np.ndarray) -> np.ndarray:  # min Hamming distance to the reference, observed sites
        hv = np.clip(h, 0, 1) * obs  # (t, c, s)
        # mismatches = sum obs*(h + r - 2 h r)
        d = hv.sum(-1, keepdims=True) + obs @ ref.T - 2.0 * (hv @ ref.T)  # (t, c, r)
        return d.min(axis=-1)

    score = nearest(first) + nearest(second) + np.take_along_axis(contradict, cand, axis=1)
    best = score.argmin(axis=1)
    rows = np.arange(len(todo))
    out[todo, 0] = first[rows, best].astype(np.int8)
    out[todo, 1] = second[rows, best].astype(np.int8)
    out[~np.broadcast_to(observed[:, None, :], out.shape)] = -1
    return out


def unphased_heterozygotes(alleles: np.ndarray, phased: np.ndarray) -> np.ndarray:
    """``(n_sites, n_samples)`` bool: observed heterozygous calls written unphased (``0/1``)."""
    a, b = alleles[..., 0], alleles[..., 1]
    return (a >= 0) & (b >= 0) & (a != b) & ~phased


def check_phased(
    alleles: np.ndarray, phased: np.ndarray, sites: VariantSites, samples: list[str] | None = None
) -> None:
    """Raise a ValueError naming the first unphased heterozygous call, if there is one."""
    bad = unphased_heterozygotes(alleles, phased)
    if bad.any():
        i, k = np.argwhere(bad)[0]
        who = samples[k] if samples is not None else f"#{k}"
        raise ValueError(
            f"{int(bad.sum())} unphased heterozygous target genotype(s) at typed sites, e.g. sample {who} "
            f"at {sites.label(i)}; let the imputer phase them (unphased='phase', --unphased phase, the "
            "default) or phase the targets first (Beagle, SHAPEIT, Eagle)"
        )
