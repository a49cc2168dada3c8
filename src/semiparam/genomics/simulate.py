"""Small synthetic haplotype panels with realistic linkage, for tests, demos and docs.

A Li & Stephens (2003) style copying model: a few *founder* haplotypes are drawn with allele
frequencies from a U-shaped Beta(0.3, 0.3) (many rare, some common variants); each simulated
haplotype walks along the sites copying one founder, jumps to a random founder between
consecutive sites with probability ``1 - exp(-rho * gap)``, and each copied allele mutates with
probability ``mutation``. Haplotypes therefore share long founder segments, which is the
structure imputation exploits. This is *synthetic* data: label results on it as such.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..data.genotypes import HaplotypePanel, VariantSites


def simulate_haplotypes(
    n_haplotypes: int,
    n_sites: int,
    *,
    n_founders: int = 12,
    length_bp: int = 1_000_000,
    switch_rate: float = 8.0,
    mutation: float = 0.002,
    min_maf: float = 0.0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """``(positions (n_sites,) int64, haplotypes (n_sites, n_haplotypes) uint8)``.

    ``switch_rate``: expected founder switches per haplotype over ``length_bp``. Sites whose MAF in
    the sample is at most ``min_maf`` get new founder alleles (up to ten tries), so tests can ask
    for polymorphic panels.
    """
    if n_haplotypes < 1 or n_sites < 1 or n_founders < 1:
        raise ValueError(
            f"n_haplotypes, n_sites and n_founders must be >= 1, got {n_haplotypes}, {n_sites}, {n_founders}"
        )
    rng = np.random.default_rng(seed)
    positions = np.sort(rng.choice(np.arange(1, length_bp + 1), size=n_sites, replace=False)).astype(np.int64)
    freq = np.clip(rng.beta(0.3, 0.3, size=n_sites), 0.02, 0.98)
    founders = (rng.random((n_founders, n_sites)) < freq).astype(np.uint8)
    gaps = np.diff(positions, prepend=positions[0]).astype(np.float64)
    p_switch = 1.0 - np.exp(-switch_rate * gaps / length_bp)
    # which founder each haplotype copies at each site
    jumps = rng.random((n_haplotypes, n_sites)) < p_switch[None, :]
    jumps[:, 0] = True
    draws = rng.integers(n_founders, size=(n_haplotypes, n_sites))
    # carry the last drawn founder forward between jumps
    last_jump = np.maximum.accumulate(np.where(jumps, np.arange(n_sites)[None, :], 0), axis=1)
    source = np.take_along_axis(draws, last_jump, axis=1)  # (n_hap, n_sites)
    columns = np.arange(n_sites)[None, :]
    flips = rng.random((n_haplotypes, n_sites)) < mutation
    haplotypes = (founders[source, columns] ^ flips).astype(np.uint8)  # (n_hap, n_sites)
    for _ in range(10):  # redraw the founders' alleles at sites left too rare, keeping the copying
        f = haplotypes.mean(axis=0)
        low = np.flatnonzero(np.minimum(f, 1 - f) <= min_maf)
        if len(low) == 0:
            break
        new_freq = rng.uniform(min(0.5, max(2 * min_maf, 0.05)), 0.5, size=len(low))
        founders[:, low] = (rng.random((n_founders, len(low))) < new_freq).astype(np.uint8)
        haplotypes[:, low] = founders[source[:, low], low[None, :]] ^ flips[:, low]
    return positions, np.ascontiguousarray(haplotypes.T)


def simulate_panel(
    n_samples: int,
    n_sites: int,
    *,
    contig: str = "20",
    sample_prefix: str = "S",
    seed: int = 0,
    **kwargs: float,
) -> HaplotypePanel:
    """A synthetic phased :class:`~semiparam.data.vcf.HaplotypePanel` of ``n_samples`` diploid
    samples (``2 * n_samples`` haplotypes); REF/ALT alleles are random distinct bases."""
    positions, haplotypes = simulate_haplotypes(2 * n_samples, n_sites, seed=seed, **kwargs)  # type: ignore[arg-type]
    rng = np.random.default_rng(seed + 1)
    bases = np.array(list("ACGT"), dtype=object)
    ref_idx = rng.integers(4, size=n_sites)
    alt_idx = (ref_idx + rng.integers(1, 4, size=n_sites)) % 4
    sites = VariantSites.from_lists(
        [contig] * n_sites,
        positions.tolist(),
        bases[ref_idx].tolist(),
        bases[alt_idx].tolist(),
        [f"snp{i}" for i in range(n_sites)],
    )
    samples = [f"{sample_prefix}{k}" for k in range(n_samples)]
    return HaplotypePanel(sites, samples, haplotypes)


def split_samples(samples: Sequence[str], n_test: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``(reference_samples, test_samples)``: a seeded random split by individual."""
    if not 0 < n_test < len(samples):
        raise ValueError(f"n_test must be in (0, {len(samples)}), got {n_test}")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(samples))
    test = sorted(perm[:n_test].tolist())
    ref = sorted(perm[n_test:].tolist())
    return [samples[i] for i in ref], [samples[i] for i in test]
