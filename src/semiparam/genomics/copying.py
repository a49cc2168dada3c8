"""Haplotype copying: the semi-parametric imputer that attends to the reference haplotypes which
match a target locally (Li and Stephens 2003, the model inside Beagle, IMPUTE and minimac).

A target haplotype is modelled as a mosaic of reference haplotypes: a hidden state says which of
the ``K`` reference haplotypes it copies at each typed site, the copied haplotype switches between
neighbouring typed sites with probability ``rho = 1 - exp(-4 ne d / K)`` (``d``: genetic distance in
Morgans), and an allele is emitted with mismatch probability ``error``. The posterior over states
at a typed site is an attention distribution over the reference rows, sharpened by every typed
site of the contig through the forward-backward recursions (:func:`copy_impute`, one pass along
each contig per block of queries, as Beagle runs its HMM) instead of by one dot product; an
untyped site is the posterior-weighted mean of the reference alleles there, with posteriors
interpolated linearly in genetic distance between the flanking typed sites (Beagle's rule).

Unphased targets are phased first (:func:`phase_typed_sites`), in overlapping segments of typed
sites: a diploid copying model whose states are ordered pairs of reference haplotypes, restricted
to the ``n_candidates`` haplotypes that contradict the fewest homozygous calls of the sample in the
segment (then, in a refinement pass, those nearest to the decoded haplotypes), decoded by Viterbi;
the decoded pair fixes the phase of every heterozygous call (phased calls keep theirs).
Consecutive segments are put in phase with each other by the heterozygous sites they share
(:func:`align_phase`).

NOTE[DIFF]: not in the SPIN paper, whose genomics models are the table transformers alone. The
issue asks for a haplotype-copying component next to the learned model; this is it, and it is the
imputer's default because it alone reaches Beagle's accuracy within a CPU budget
(``benchmarks/results/genomics.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._config import ConfigError

CM_PER_BP_DEFAULT = 1e-6  # 1 cM per Mb where no genetic map is given (Beagle's rule too)
# ne values tried at fit time on held-out reference samples when none is given (then the
# half-decades either side of the best)
NE_GRID = (1e3, 1e4, 1e5, 1e6, 1e7)


@dataclass(frozen=True)
class CopyingSettings:
    """``ne``: effective population size of the switch rate; ``error``: allele mismatch
    probability; ``n_candidates``: reference haplotypes per sample in the diploid phasing model;
    ``refinements``: phasing passes after the first, each with candidates near the last decoding."""

    ne: float | None = None  # None: picked at fit time from NE_GRID
    error: float = 1e-3
    n_candidates: int = 40
    refinements: int = 1

    def __post_init__(self) -> None:
        if self.refinements < 0:
            raise ConfigError(f"copying refinements must be >= 0, got {self.refinements}")
        if self.ne is not None and not self.ne > 0:
            raise ConfigError(f"copying ne must be > 0, got {self.ne}")
        if not 0 < self.error < 0.5:
            raise ConfigError(f"copying error must be in (0, 0.5), got {self.error}")
        if self.n_candidates < 2:
            raise ConfigError(f"copying n_candidates must be >= 2, got {self.n_candidates}")


# -- genetic map -------------------------------------------------------------------------------
def read_genetic_map(path: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A genetic map by contig: ``{chrom: (bp, cM)}`` sorted by bp.

    Reads PLINK ``.map`` (``chrom id cM bp``, Beagle's ``map=``) and the SHAPEIT/Eagle format
    (header ``pos chr cM``), plain or gzipped; the format is told by the header and column count.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"genetic map {path} does not exist")
    try:
        frame = pd.read_csv(path, sep=r"\s+", header=None, comment="#", dtype=str)
    except pd.errors.EmptyDataError:
        raise ValueError(f"genetic map {path} has no positions") from None
    except pd.errors.ParserError as err:
        raise ValueError(
            f"{path}: not a genetic map (PLINK 'chrom id cM bp' or SHAPEIT 'pos chr cM'): {err}"
        ) from None
    shapeit = frame.shape[1] == 3
    if shapeit and list(frame.iloc[0]) == ["pos", "chr", "cM"]:
        frame = frame.iloc[1:]
    if frame.shape[1] not in (3, 4) or frame.isna().any().any():
        raise ValueError(
            f"{path}: not a genetic map: PLINK 'chrom id cM bp' (4 columns) or SHAPEIT 'pos chr cM' "
            f"(3 columns), found {frame.shape[1]} columns"
        )
    chrom_col, cm_col, bp_col = (1, 2, 0) if shapeit else (0, 2, 3)
    cm = pd.to_numeric(frame[cm_col], errors="coerce").to_numpy(np.float64)
    bp = pd.to_numeric(frame[bp_col], errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero(np.isnan(cm) | np.isnan(bp))
    if len(bad):
        line = " ".join(frame.iloc[bad[0]].tolist())
        raise ValueError(
            f"{path}: not a genetic map line (PLINK 'chrom id cM bp' or SHAPEIT 'pos chr cM'): {line[:80]!r}"
        )
    if len(frame) == 0:
        raise ValueError(f"genetic map {path} has no positions")
    chrom = frame[chrom_col].to_numpy(str)
    out = {}
    for contig in dict.fromkeys(chrom.tolist()):
        on = chrom == contig
        order = np.argsort(bp[on], kind="stable")
        out[str(contig)] = (bp[on][order], cm[on][order])
    return out


def genetic_positions(
    chrom: np.ndarray, pos: np.ndarray, genetic_map: dict[str, tuple[np.ndarray, np.ndarray]] | None
) -> np.ndarray:
    """cM of each site: interpolated in ``genetic_map`` (beyond its ends, extended at 1 cM/Mb);
    1 cM/Mb on contigs the map lacks or with no map."""
    out = pos.astype(np.float64) * CM_PER_BP_DEFAULT
    if genetic_map is None:
        return out
    for contig in dict.fromkeys(chrom.tolist()):
        entry = genetic_map.get(str(contig)) or genetic_map.get(str(contig).removeprefix("chr"))
        if entry is None:
            continue
        bp, cm = entry
        on = chrom == contig
        p = pos[on].astype(np.float64)
        g = np.interp(p, bp, cm)
        g = np.where(p < bp[0], cm[0] - (bp[0] - p) * CM_PER_BP_DEFAULT, g)
        g = np.where(p > bp[-1], cm[-1] + (p - bp[-1]) * CM_PER_BP_DEFAULT, g)
        out[on] = g
    return out


def switch_probabilities(cm: np.ndarray, n_ref: int, ne: float) -> np.ndarray:
    """``rho`` between consecutive typed sites at genetic positions ``cm`` (len - 1 values)."""
    morgans = np.maximum(np.diff(cm), 0.0) / 100.0
    return (-np.expm1(-4.0 * ne * morgans / n_ref)).clip(1e-12, 1.0)


# -- haploid copying ---------------------------------------------------------------------------
def haploid_posteriors(
    queries: np.ndarray, reference: np.ndarray, rho: np.ndarray, error: float
) -> np.ndarray:
    """Posterior of the copied reference haplotype at every typed site.

    ``queries (n_q, s)`` 0/1 (-1 missing: uninformative), ``reference (s, K)`` 0/1, ``rho (s - 1,)``.
    Returns ``(s, n_q, K)`` float32, each ``[t, q]`` summing to 1.
    """
    n_q, s = queries.shape
    k = reference.shape[1]
    # emission rows by observed allele: table[t, 0] for a REF query, [t, 1] for ALT, [t, 2] missing
    ref = reference.astype(bool)
    table = np.empty((s, 3, k), dtype=np.float32)
    table[:, 0] = np.where(ref, error, 1.0 - error)
    table[:, 1] = np.where(ref, 1.0 - error, error)
    table[:, 2] = 1.0
    codes = np.where(queries < 0, 2, queries).astype(np.intp)  # (n_q, s)

    def emission(t: int) -> np.ndarray:
        return table[t][codes[:, t]]

    forward = np.empty((s, n_q, k), dtype=np.float32)
    a = emission(0)
    a /= a.sum(axis=1, keepdims=True)
    forward[0] = a
    for t in range(1, s):
        r = np.float32(rho[t - 1])
        a = emission(t) * ((1.0 - r) * a + r / k)  # rows of a sum to 1
        a /= a.sum(axis=1, keepdims=True)
        forward[t] = a
    b = np.ones((n_q, k), dtype=np.float32)
    post = forward  # overwritten in place from the end
    post[s - 1] = forward[s - 1]
    for t in range(s - 2, -1, -1):
        r = np.float32(rho[t])
        eb = emission(t + 1) * b
        b = (1.0 - r) * eb + r / k * eb.sum(axis=1, keepdims=True)
        b /= b.max(axis=1, keepdims=True)
        p = forward[t] * b
        post[t] = p / p.sum(axis=1, keepdims=True)
    return post


def interpolate_sites(
    posteriors: np.ndarray,
    typed_cm: np.ndarray,
    site_cm: np.ndarray,
    site_alleles: np.ndarray,
) -> np.ndarray:
    """ALT probability at sites between (or beyond) the typed sites.

    ``posteriors (s, n_q, K)`` at typed sites with genetic positions ``typed_cm (s,)`` (sorted),
    ``site_cm (m,)``, ``site_alleles (m, K)`` the reference alleles there. Returns ``(n_q, m)``:
    the state posterior interpolated linearly in cM between the flanking typed sites (the nearest
    one beyond the ends), applied to the reference alleles.
    """
    s, n_q, _ = posteriors.shape
    m = len(site_cm)
    out = np.zeros((n_q, m), dtype=np.float64)
    right = np.searchsorted(typed_cm, site_cm, side="right")  # first typed site after
    left = np.clip(right - 1, 0, s - 1)
    right = np.clip(right, 0, s - 1)
    span = typed_cm[right] - typed_cm[left]
    lam = np.where(span > 0, (site_cm - typed_cm[left]) / np.where(span > 0, span, 1.0), 0.0).clip(0, 1)
    alleles = site_alleles.astype(np.float32)
    for key in np.unique(np.stack([left, right], axis=1), axis=0):
        lo, hi = int(key[0]), int(key[1])
        cols = np.flatnonzero((left == lo) & (right == hi))
        a = alleles[cols].T  # (K, c)
        p_lo = posteriors[lo] @ a  # (n_q, c)
        if hi == lo:
            out[:, cols] = p_lo
        else:
            p_hi = posteriors[hi] @ a
            out[:, cols] = (1.0 - lam[cols]) * p_lo + lam[cols] * p_hi
    return out.clip(0.0, 1.0)


def copy_impute(
    reference: np.ndarray,
    cm: np.ndarray,
    chrom: np.ndarray,
    typed: np.ndarray,
    haps: np.ndarray,
    wanted: np.ndarray,
    settings: CopyingSettings,
    *,
    block_bytes: int = 1 << 27,
) -> np.ndarray:
    """Impute by copying along whole contigs: one forward-backward pass over each contig's typed
    sites per block of query haplotypes, as Beagle runs its HMM (no windows).

    ``reference (n_sites, K)`` 0/1, ``cm``, ``chrom``, ``typed`` (bool) per panel site; ``haps
    (n_sites, n_q)`` the phased queries (0/1, -1 unknown); ``wanted`` (bool) the untyped sites to
    impute. Returns ``(n_sites, n_q)`` float32 ALT probabilities at the wanted sites and at typed
    sites where a query's allele is unknown; NaN elsewhere. Query blocks are sized so the
    posteriors of one block take about ``block_bytes``.
    """
    n_sites, n_q = haps.shape
    k = reference.shape[1]
    out = np.full((n_sites, n_q), np.nan, dtype=np.float32)
    for contig in dict.fromkeys(chrom.tolist()):
        on = chrom == contig
        t_sites = np.flatnonzero(on & typed)
        w_sites = np.flatnonzero(on & wanted & ~typed)
        if len(t_sites) == 0:
            if len(w_sites):
                raise ValueError(f"contig {contig!r} has sites to impute but no typed site")
            continue
        ref_t = reference[t_sites]
        ref_tf = ref_t.astype(np.float32)
        rho = switch_probabilities(cm[t_sites], k, settings.ne)
        queries = haps[t_sites].T  # (n_q, s)
        missing = queries < 0
        block = max(1, block_bytes // max(1, 4 * len(t_sites) * k))
        for lo in range(0, n_q, block):
            rows = slice(lo, min(n_q, lo + block))
            post = haploid_posteriors(queries[rows], ref_t, rho, settings.error)  # (s, b, K)
            if len(w_sites):
                out[w_sites, rows] = interpolate_sites(post, cm[t_sites], cm[w_sites], reference[w_sites]).T
            gaps = missing[rows]
            if gaps.any():
                s_idx, q_idx = np.nonzero(gaps.T)  # (site, query) pairs of unknown alleles
                out[t_sites[s_idx], lo + q_idx] = np.einsum("nk,nk->n", post[s_idx, q_idx], ref_tf[s_idx])
    return out


# -- diploid phasing ---------------------------------------------------------------------------
def phase_diploid(
    genotypes: np.ndarray,
    phased: np.ndarray,
    reference: np.ndarray,
    rho: np.ndarray,
    settings: CopyingSettings,
    rng: np.random.Generator,
) -> np.ndarray:
    """Phase one window's typed genotypes by Viterbi decoding of a diploid copying model.

    ``genotypes (n, s, 2)`` int8 (-1 missing), ``phased (n, s)`` bool, ``reference (s, K)`` 0/1,
    ``rho (s - 1,)``. Returns ``(n, 2, s)`` int8 haplotypes (-1 where the genotype is missing).
    States are ordered pairs ``(i, j)`` of ``L = n_candidates`` candidate haplotypes; both copy
    independently, so one step of the recursion costs O(L^2). A phased call is emitted per
    haplotype, an unphased one as the allele count. Candidates: first the haplotypes that
    contradict the fewest homozygous calls; then, for ``settings.refinements`` more passes, the
    ``L / 2`` haplotypes nearest to each of the two haplotypes the previous pass decoded.
    """
    n, s, _ = genotypes.shape
    k = reference.shape[1]
    a, b = genotypes[..., 0].astype(np.int64), genotypes[..., 1].astype(np.int64)
    observed = (a >= 0) & (b >= 0)
    out = np.transpose(genotypes, (0, 2, 1)).astype(np.int8).copy()
    het_unphased = observed & (a != b) & ~phased
    todo = np.flatnonzero(het_unphased.any(axis=1))
    if len(todo) == 0:
        return out
    ref = reference.astype(np.float32)  # (s, K)
    dose = np.where(observed, a + b, -1)
    n_cand = min(settings.n_candidates, k)
    obs = observed[todo].astype(np.float32)  # (t, s)
    hom0 = (dose[todo] == 0).astype(np.float32)
    hom2 = (dose[todo] == 2).astype(np.float32)
    score = hom0 @ ref + hom2 @ (1.0 - ref)  # contradicted homozygous calls (t, K)
    cand = _lowest(score + rng.random(score.shape, dtype=np.float32) * 0.5, n_cand)
    for _ in range(1 + settings.refinements):
        decoded = _decode_pairs(todo, cand, ref, dose, a, b, phased, observed, het_unphased, settings, rho)
        out[todo] = decoded
        if n_cand >= k:
            break
        # the next candidates: the haplotypes nearest to each decoded haplotype (Hamming distance
        # at observed sites), half for each
        near = []
        for h in range(2):
            x = np.clip(decoded[:, h], 0, 1).astype(np.float32) * obs
            dist = x.sum(1, keepdims=True) + obs @ ref - 2.0 * (x @ ref)  # (t, K)
            near.append(dist + rng.random(dist.shape, dtype=np.float32) * 0.5)
        half = max(1, n_cand // 2)
        first = _lowest(near[0], half)
        # the second half avoids the first's haplotypes
        masked = near[1].copy()
        np.put_along_axis(masked, first, np.inf, axis=1)
        cand = np.concatenate([first, _lowest(masked, n_cand - half)], axis=1)
    out[~np.broadcast_to(observed[:, None, :], out.shape)] = -1
    return out


def phase_typed_sites(
    reference: np.ndarray,
    cm: np.ndarray,
    chrom: np.ndarray,
    typed: np.ndarray,
    alleles: np.ndarray,
    phased: np.ndarray,
    settings: CopyingSettings,
    seed: int,
    *,
    segment: int = 150,
    method: str = "copy",
) -> np.ndarray:
    """Phase every typed site, segment by segment, and stitch the segments in phase.

    ``reference (n_sites, K)``, ``cm``, ``chrom``, ``typed`` (bool) per panel site; ``alleles
    (n_sites, n, 2)``, ``phased (n_sites, n)``. Each contig's typed sites are cut into segments of
    ``segment`` sites that overlap by a third; each is phased on its own (``method`` "copy":
    :func:`phase_diploid`; "match": the best-match heuristic :func:`.phasing.phase_window`), put in
    phase with the segment before it by the heterozygous sites they share
    (:func:`align_phase`), and takes over from the middle of the overlap. Returns ``(n_sites, 2n)``
    int8 haplotypes (sample j in columns 2j, 2j + 1): phased at typed sites, the alleles as given
    elsewhere.
    """
    from .phasing import phase_window

    n_sites, n, _ = alleles.shape
    out = alleles.reshape(n_sites, 2 * n).copy()
    step = max(1, segment - segment // 3)
    k = reference.shape[1]
    g = 0
    for contig in dict.fromkeys(chrom.tolist()):
        sites = np.flatnonzero(typed & (chrom == contig))
        if len(sites) == 0:
            continue
        starts = list(range(0, max(len(sites) - segment, 0) + 1, step))
        if starts[-1] + segment < len(sites):
            starts.append(len(sites) - segment)
        previous: tuple[int, int, np.ndarray] | None = None  # (start, end, (n, 2, s)) in site order
        for lo in starts:
            hi = min(lo + segment, len(sites))
            used = sites[lo:hi]
            geno = np.transpose(alleles[used], (1, 0, 2))  # (n, s, 2)
            if method == "match":
                haps = phase_window(geno, phased[used].T, reference[used].T)
            else:
                rho = switch_probabilities(cm[used], k, settings.ne)
                haps = phase_diploid(
                    geno, phased[used].T, reference[used], rho, settings, np.random.default_rng(seed + g)
                )
            g += 1
            first = lo
            if previous is not None:
                p_lo, p_hi, p_haps = previous
                overlap = p_hi - lo
                if overlap > 0:
                    swap = align_phase(p_haps[:, :, lo - p_lo :], haps[:, :, :overlap])
                    haps[swap] = haps[swap][:, ::-1]
                    first = lo + overlap // 2  # the previous segment keeps the first half
            keep = slice(first - lo, hi - lo)
            out[sites[first:hi]] = haps[:, :, keep].transpose(2, 0, 1).reshape(hi - first, 2 * n)
            previous = (lo, hi, haps)
    return out


def _lowest(score: np.ndarray, m: int) -> np.ndarray:
    """Column indices of the ``m`` lowest values of each row."""
    return np.argpartition(score, m - 1, axis=1)[:, :m]


def _decode_pairs(
    todo: np.ndarray,
    cand: np.ndarray,
    ref: np.ndarray,
    dose: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    phased: np.ndarray,
    observed: np.ndarray,
    het_unphased: np.ndarray,
    settings: CopyingSettings,
    rho: np.ndarray,
) -> np.ndarray:
    """The samples ``todo`` phased by the Viterbi path over pairs of their candidates ``cand``:
    ``(len(todo), 2, s)`` int8."""
    n_cand = cand.shape[1]
    s = ref.shape[0]
    log_match, log_miss = np.log1p(-settings.error), np.log(settings.error)
    out = np.empty((len(todo), 2, s), dtype=np.int8)
    ref8 = ref.astype(np.int8)
    gap = np.float32(log_match - log_miss)
    for chunk in np.array_split(np.arange(len(todo)), max(1, len(todo) // 32)):
        rows = todo[chunk]
        h = np.transpose(ref8[:, cand[chunk]], (1, 0, 2))  # (c, s, L): candidate alleles
        pair_dose = h[:, :, :, None] + h[:, :, None, :]  # (c, s, L, L)
        log_e = np.equal(pair_dose, dose[rows][:, :, None, None]).astype(np.float32)
        log_e *= gap
        log_e += np.float32(log_miss)
        # phased heterozygous calls: each haplotype emits its own allele (ordered pairs)
        ph_c, ph_s = np.nonzero(phased[rows] & observed[rows] & (a[rows] != b[rows]))
        if len(ph_c):
            hc = h[ph_c, ph_s]  # (m, L)
            ordered = (hc[:, :, None] == a[rows][ph_c, ph_s][:, None, None]) & (
                hc[:, None, :] == b[rows][ph_c, ph_s][:, None, None]
            )
            log_e[ph_c, ph_s] = np.where(ordered, np.float32(log_match), np.float32(log_miss))
        log_e[~observed[rows]] = 0.0
        path_i, path_j = _viterbi_pairs(log_e, rho, n_cand)
        pick = np.arange(len(chunk))[:, None]
        sites = np.arange(s)[None, :]
        allele_i = h[pick, sites, path_i]  # (c, s)
        allele_j = h[pick, sites, path_j]
        hets = het_unphased[rows]
        # hap 0 takes the allele its copied haplotype carries; where both copies agree (a
        # mismatch of the model), the heterozygote keeps the written order
        swap = hets & (allele_i != allele_j) & (allele_i != a[rows])
        out[chunk, 0] = np.where(swap, b[rows], a[rows])
        out[chunk, 1] = np.where(swap, a[rows], b[rows])
    return out


def _viterbi_pairs(log_e: np.ndarray, rho: np.ndarray, n_cand: int) -> tuple[np.ndarray, np.ndarray]:
    """Most probable path of ordered candidate pairs. ``log_e (c, s, L, L)`` log emissions.
    Returns ``(path_i, path_j)``, each ``(c, s)`` candidate indices.

    A pair moves by keeping both haplotypes, switching one (to the best of its row or column) or
    both (to the best pair), so a step needs only the row, column and overall maxima; the scores
    are kept and the path is traced back by recomputing the four options of each chosen state.
    """
    c, s, L, _ = log_e.shape
    stay = np.log1p(-rho + rho / L).astype(np.float32)  # (s - 1,) keep one haplotype
    move = np.log(rho / L).astype(np.float32)  # switch one to a given haplotype
    scores = np.empty((s, c, L, L), dtype=np.float32)
    delta = scores[0]
    np.subtract(log_e[:, 0], np.float32(2 * np.log(L)), out=delta)
    for t in range(1, s):
        st, mv = stay[t - 1], move[t - 1]
        row_max = delta.max(axis=2, keepdims=True)  # (c, L, 1)
        col_max = delta.max(axis=1, keepdims=True)  # (c, 1, L)
        top = row_max.max(axis=1, keepdims=True)  # (c, 1, 1)
        best = scores[t]
        np.add(delta, 2 * st, out=best)
        np.maximum(best, row_max + (st + mv), out=best)
        np.maximum(best, col_max + (st + mv), out=best)
        np.maximum(best, top + 2 * mv, out=best)
        best += log_e[:, t]
        best -= top  # keeps the scores near 0 (the path is unchanged by a shift per step)
        delta = best
    rows = np.arange(c)
    path_i = np.zeros((c, s), dtype=np.int64)
    path_j = np.zeros((c, s), dtype=np.int64)
    flat = delta.reshape(c, -1).argmax(axis=1)
    i, j = flat // L, flat % L
    for t in range(s - 1, -1, -1):
        path_i[:, t], path_j[:, t] = i, j
        if t == 0:
            break
        d = scores[t - 1]
        st, mv = stay[t - 1], move[t - 1]
        row_arg = d[rows, i].argmax(axis=1)  # best j of row i
        col_arg = d[rows, :, j].argmax(axis=1)  # best i of column j
        all_arg = d.reshape(c, -1).argmax(axis=1)
        options = np.stack(
            [
                d[rows, i, j] + 2 * st,
                d[rows, i, row_arg] + st + mv,
                d[rows, col_arg, j] + st + mv,
                d.reshape(c, -1)[rows, all_arg] + 2 * mv,
            ]
        )
        kind = options.argmax(axis=0)
        prev_i = np.select([kind == 2, kind == 3], [col_arg, all_arg // L], i)
        prev_j = np.select([kind == 1, kind == 3], [row_arg, all_arg % L], j)
        i, j = prev_i, prev_j
    return path_i, path_j


def align_phase(previous: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Whether to swap each sample's two haplotypes so ``current`` agrees with ``previous`` at the
    heterozygous sites both windows phased. ``previous``, ``current (n, 2, s)`` on the same sites
    (-1 missing). Returns ``(n,)`` bool."""
    het = (previous[:, 0] >= 0) & (previous[:, 0] != previous[:, 1]) & (current[:, 0] != current[:, 1])
    het &= current[:, 0] >= 0
    same = ((previous[:, 0] == current[:, 0]) & het).sum(axis=1)
    flipped = ((previous[:, 0] == current[:, 1]) & het).sum(axis=1)
    return flipped > same


__all__ = [
    "CopyingSettings",
    "NE_GRID",
    "align_phase",
    "copy_impute",
    "genetic_positions",
    "haploid_posteriors",
    "interpolate_sites",
    "phase_diploid",
    "phase_typed_sites",
    "read_genetic_map",
    "switch_probabilities",
]
