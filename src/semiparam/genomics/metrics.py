"""Imputation accuracy and quality scores.

- :func:`pooled_r2`: the paper's headline number (spec-spin section 5.3): one Pearson r between
  predicted and true values pooled over every (site, haplotype) pair, squared. On haplotypes the
  values are ALT probabilities vs 0/1 alleles; on genotypes, dosages (0..2) vs true ALT counts.
- :func:`r2_by_maf`: the same, pooled within minor-allele-frequency bins.
- :func:`genotype_concordance`: share of genotypes whose most likely call equals the truth, over
  all genotypes and over those where the truth or the call carries an ALT allele (non-reference
  concordance, which rare sites cannot inflate).
- :func:`dosage_r2_estimate`: the per-site quality score written to INFO/DR2, computed without
  the truth from the haplotype ALT probabilities (the estimator of MaCH/minimac Rsq and Beagle DR2):
  ``var(p) / (mean(p) (1 - mean(p)))`` over the imputed haplotypes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_MAF_BINS: tuple[float, ...] = (0.0, 0.005, 0.01, 0.05, 0.5)


def pooled_r2(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Squared Pearson correlation of all entries pooled; NaN when either side is constant."""
    y = np.asarray(truth, dtype=np.float64).ravel()
    p = np.asarray(predicted, dtype=np.float64).ravel()
    if y.shape != p.shape:
        raise ValueError(f"truth has {y.size} values, predicted {p.size}")
    if y.size < 2 or y.std() == 0 or p.std() == 0:
        return float("nan")
    yc, pc = y - y.mean(), p - p.mean()
    r = float((yc * pc).sum() / np.sqrt((yc * yc).sum() * (pc * pc).sum()))
    return r * r


def per_site_r2(truth: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """r^2 of each row (site) across columns; NaN where a row is constant."""
    y = np.asarray(truth, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    yc = y - y.mean(axis=1, keepdims=True)
    pc = p - p.mean(axis=1, keepdims=True)
    den = np.sqrt((yc * yc).sum(1) * (pc * pc).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (yc * pc).sum(1) / den
    return np.where(den > 0, r * r, np.nan)


def r2_by_maf(
    truth: np.ndarray, predicted: np.ndarray, maf: np.ndarray, bins: Sequence[float] = DEFAULT_MAF_BINS
) -> list[dict[str, float]]:
    """Pooled r^2 per MAF bin ``(lo, hi]``: ``truth``/``predicted`` ``(n_sites, n)``, ``maf (n_sites,)``.
    Each entry: ``{"lo", "hi", "n_sites", "r2"}``."""
    maf = np.asarray(maf, dtype=np.float64)
    out = []
    for lo, hi in zip(bins[:-1], bins[1:]):
        rows = (maf > lo) & (maf <= hi)
        r2 = pooled_r2(truth[rows], predicted[rows]) if rows.any() else float("nan")
        out.append({"lo": float(lo), "hi": float(hi), "n_sites": int(rows.sum()), "r2": r2})
    return out


def genotype_probabilities(hap_alt_prob: np.ndarray) -> np.ndarray:
    """``(..., 2)`` haplotype ALT probabilities -> ``(..., 3)`` P(0), P(1), P(2) ALT alleles."""
    a, b = hap_alt_prob[..., 0].astype(np.float64), hap_alt_prob[..., 1].astype(np.float64)
    return np.stack([(1 - a) * (1 - b), a * (1 - b) + b * (1 - a), a * b], axis=-1)


def genotype_concordance(true_dosage: np.ndarray, gp: np.ndarray) -> dict[str, float]:
    """``true_dosage (n_sites, n_samples)`` ALT counts, ``gp (n_sites, n_samples, 3)``: share of
    exact calls overall and among genotypes where the truth or the call is not REF/REF."""
    call = np.asarray(gp).argmax(axis=-1)
    truth = np.asarray(true_dosage).astype(np.int64)
    exact = call == truth
    nonref = (truth > 0) | (call > 0)
    return {
        "concordance": float(exact.mean()) if exact.size else float("nan"),
        "nonref_concordance": float(exact[nonref].mean()) if nonref.any() else float("nan"),
    }


def dosage_r2_estimate(hap_alt_prob: np.ndarray) -> np.ndarray:
    """Per-site estimated dosage r^2 from ``hap_alt_prob (n_sites, n_haplotypes)``; 0 at sites with
    mean ALT probability 0 or 1, clipped to [0, 1]."""
    p = np.asarray(hap_alt_prob, dtype=np.float64)
    mean = p.mean(axis=1)
    var = p.var(axis=1)
    den = mean * (1.0 - mean)
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = np.where(den > 1e-12, var / den, 0.0)
    return np.clip(r2, 0.0, 1.0)


def minor_allele_frequency(haplotypes: np.ndarray) -> np.ndarray:
    """Per-site MAF of ``(n_sites, n_haplotypes)`` 0/1 haplotypes."""
    f = np.asarray(haplotypes, dtype=np.float64).mean(axis=1)
    return np.minimum(f, 1.0 - f)


def evaluate_imputation(
    true_haplotypes: np.ndarray,
    hap_alt_prob: np.ndarray,
    maf: np.ndarray,
    bins: Sequence[float] = DEFAULT_MAF_BINS,
) -> dict[str, object]:
    """All metrics for ``true_haplotypes`` / ``hap_alt_prob`` ``(n_sites, n_samples, 2)`` at the
    evaluated sites, with ``maf (n_sites,)`` from the reference panel."""
    truth = np.asarray(true_haplotypes, dtype=np.float64)
    prob = np.asarray(hap_alt_prob, dtype=np.float64)
    n_sites = truth.shape[0]
    hap_t, hap_p = truth.reshape(n_sites, -1), prob.reshape(n_sites, -1)
    dose_t, dose_p = truth.sum(axis=2), prob.sum(axis=2)
    return {
        "n_sites": int(n_sites),
        "n_samples": int(truth.shape[1]),
        "r2_haplotype": pooled_r2(hap_t, hap_p),
        "r2_dosage": pooled_r2(dose_t, dose_p),
        "r2_dosage_by_maf": r2_by_maf(dose_t, dose_p, maf, bins),
        "r2_haplotype_by_maf": r2_by_maf(hap_t, hap_p, maf, bins),
        "mean_per_site_r2_dosage": float(np.nanmean(per_site_r2(dose_t, dose_p)))
        if n_sites
        else float("nan"),
        **genotype_concordance(dose_t, genotype_probabilities(prob)),
    }
