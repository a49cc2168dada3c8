"""VCF in, VCF out: the end-to-end imputation behind ``semiparam impute-vcf``.

:func:`impute_vcf` reads a phased reference panel and target genotypes, matches the target's
sites to the panel (:func:`align_targets`), fits a :class:`~.imputer.GenotypeImputer` (or loads
one), imputes every panel site for every target sample and writes a bgzipped VCF with GT, DS and
GP per sample and AF, DR2 and IMP per site. It returns a summary (counts, timings, peak memory).

Site matching, by (chrom, pos, REF, ALT):

- exact match: used;
- REF and ALT swapped: used with the alleles flipped (counted);
- same position but other alleles, or a site the panel lacks: not used (counted);
- contigs: a target contig the panel lacks is reported; no shared contig at all is an error that
  says whether a ``chr`` prefix is the difference.

Typed (input) sites are the matched target sites, restricted to ``array_sites`` (a positions
file) when given; every other panel site is imputed.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._measure import peak_rss_mb as peak_memory_mb
from ..data.vcf import (
    GenotypeData,
    VariantSites,
    VCFError,
    read_positions,
    read_reference_panel,
    read_vcf,
)
from ..data.vcf_writer import index_vcf, write_imputed_vcf
from .alignment import TargetLookup, contig_hint
from .imputer import BASELINES, COPYING, GenotypeImputer
from .metrics import dosage_r2_estimate
from .phasing import check_phased
from .streaming import impute_streamed


@dataclass
class AlignmentReport:
    n_target_sites: int = 0
    n_matched: int = 0
    n_flipped: int = 0  # REF/ALT swapped relative to the panel
    n_allele_mismatch: int = 0  # same position, other alleles
    n_not_in_panel: int = 0
    n_not_on_array: int = 0  # matched, but not in the array positions file
    n_typed: int = 0
    contigs_not_in_panel: list[str] = field(default_factory=list)
    examples: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"{self.n_typed} typed sites used of {self.n_target_sites} target sites"]
        for n, what in (
            (self.n_flipped, "with REF/ALT swapped (flipped)"),
            (self.n_allele_mismatch, "with alleles that differ from the panel (dropped)"),
            (self.n_not_in_panel, "not in the panel (dropped)"),
            (self.n_not_on_array, "not array sites (ignored as inputs)"),
        ):
            if n:
                parts.append(f"{n} {what}")
        if self.contigs_not_in_panel:
            parts.append(f"contigs not in the panel: {self.contigs_not_in_panel}")
        return "; ".join(parts)


@dataclass
class AlignedTargets:
    """Target genotypes on the panel's sites: ``alleles (n_panel_sites, n_samples, 2)`` int8 (-1
    unknown), ``phased`` bool like it, ``typed (n_panel_sites,)`` bool."""

    samples: list[str]
    alleles: np.ndarray
    phased: np.ndarray
    typed: np.ndarray
    report: AlignmentReport


def align_targets(
    panel_sites: VariantSites,
    target: GenotypeData,
    *,
    array_positions: Sequence[tuple[str, int]] | None = None,
    allowed_typed: np.ndarray | None = None,
) -> AlignedTargets:
    """Put ``target`` genotypes on ``panel_sites`` (see the module docstring). ``allowed_typed``
    (n_panel_sites,) bool restricts typed sites further (a loaded model's typed sites)."""
    panel_contigs = set(panel_sites.contigs())
    target_contigs = target.sites.contigs()
    if target.n_sites and not set(target_contigs) & panel_contigs:
        raise VCFError(
            f"the target's contigs {target_contigs[:5]} are not in the reference panel "
            f"{sorted(panel_contigs)[:5]}{contig_hint(target_contigs, sorted(panel_contigs))}"
        )
    lookup = TargetLookup(target, array_positions)
    alleles, phased, typed = lookup.align(panel_sites, allowed=allowed_typed)
    report = AlignmentReport(**lookup.report())
    if report.n_typed == 0:
        raise VCFError(
            "no target site can be used as input: "
            + report.summary()
            + (f"; e.g. {report.examples}" if report.examples else "")
        )
    return AlignedTargets(list(target.samples), alleles, phased, typed, report)


def _partial_directory(out: str | Path, resume: bool, say: Callable[[str], None]) -> Path:
    """``<out>.partial``, where a run keeps its finished chunks or windows until the output is
    written: an earlier run's is reused with ``resume``, else removed to start afresh."""
    partial = Path(str(out) + ".partial")
    if partial.exists() and resume:
        say(f"resuming from {partial}")
    elif partial.exists():
        say(f"{partial} holds the work of an earlier run; starting afresh (--resume reuses it)")
        shutil.rmtree(partial)
    return partial


def fit_panel(
    reference: str | Path,
    out: str | Path,
    *,
    array_sites: str | Path | None = None,
    region: str | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
    **imputer_params: Any,
) -> dict[str, Any]:
    """Fit an imputer on a reference panel once and save it to ``out`` (``semiparam fit-panel``),
    so that ``impute_vcf(None, target, ..., model_dir=out)`` imputes target files without reading
    the panel's VCF again. "copy" and "knn" need no typed sites (their windows are planned per
    target file); table models are trained for ``array_sites`` (a positions file). Returns a
    summary dict."""
    if Path(out).exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass overwrite=True (--force) to replace it")
    say = log or (lambda message: None)
    start = time.perf_counter()
    panel, report = read_reference_panel(reference, region=region)
    say(f"reference: {report.summary()}; {panel.n_haplotypes} haplotypes")
    typed = None
    if array_sites is not None:
        wanted = set(read_positions(array_sites))
        typed = np.array(
            [(c, p) in wanted for c, p in zip(panel.sites.chrom.tolist(), panel.sites.pos.tolist())]
        )
        if not typed.any():
            raise VCFError(f"none of the positions in {array_sites} is a site of the panel {reference}")
        say(f"{int(typed.sum())} panel sites are array sites")
    imp = GenotypeImputer(**imputer_params)
    imp.log = log
    imp.fit(panel, typed)
    imp.save(out, overwrite=overwrite)
    seconds = time.perf_counter() - start
    say(f"saved the fitted panel to {out} in {seconds:.1f}s")
    return {
        "reference": str(reference),
        "out": str(out),
        "model": imp.model,
        "n_sites": panel.n_sites,
        "n_haplotypes": panel.n_haplotypes,
        "n_typed": None if typed is None else int(typed.sum()),
        "reference_read": asdict(report),
        "total_seconds": seconds,
        "peak_memory_mb": peak_memory_mb(),
    }


def impute_vcf(
    reference: str | Path | None,
    target: str | Path,
    out: str | Path,
    *,
    array_sites: str | Path | None = None,
    region: str | None = None,
    imputer: GenotypeImputer | None = None,
    model_dir: str | Path | None = None,
    save_model: str | Path | None = None,
    overwrite: bool = False,
    index: bool = True,
    ap: bool = False,
    resume: bool = False,
    n_jobs: int = 1,
    chunk_sites: int = 20_000,
    log: Callable[[str], None] | None = None,
    **imputer_params: Any,
) -> dict[str, Any]:
    """Impute ``target`` from ``reference`` and write ``out`` (``.vcf.gz``; ``.vcf`` for plain text).

    ``array_sites``: positions file of the typed sites (default: every target site found in the
    panel). ``region``: ``chrom:start-end`` read from both files (needs indexes). ``imputer``: an
    unfitted :class:`GenotypeImputer` to fit (default: one built from ``imputer_params``).
    ``model_dir``: load a saved imputer instead of fitting (``reference`` may then be None).
    ``save_model``: save the fitted imputer there (an existing directory raises
    :class:`FileExistsError` before any work, unless ``overwrite``). ``ap``: also write each haplotype's ALT
    probability (FORMAT AP1, AP2). ``resume``: reuse the windows a killed run of the same command
    finished (kept in ``<out>.partial/`` until the output is written; without ``resume`` such a
    directory is started afresh). ``n_jobs``: windows imputed at once (threads). ``chunk_sites``:
    with a panel file and the "copy" or "knn" model, the panel is read and imputed in chunks of
    this many sites, so memory does not grow with the chromosome (:mod:`.streaming`); the table
    models and saved panels hold the whole panel. Returns a summary dict.
    """
    if save_model is not None and Path(save_model).exists() and not overwrite:
        raise FileExistsError(f"{save_model} already exists; pass overwrite=True (--force) to replace it")
    say = log or (lambda message: None)
    start = time.perf_counter()
    timings: dict[str, float] = {}
    summary: dict[str, Any] = {"reference": str(reference), "target": str(target), "out": str(out)}

    streamed = (
        model_dir is None
        and imputer is None
        and save_model is None
        and reference is not None
        and imputer_params.get("model", COPYING) in BASELINES
    )
    t0 = time.perf_counter()
    target_data, tgt_report = read_vcf(target, region=region)
    say(f"target: {tgt_report.summary()}; {target_data.n_samples} samples")
    summary["target_read"] = asdict(tgt_report)
    positions = read_positions(array_sites) if array_sites is not None else None
    timings["read_seconds"] = time.perf_counter() - t0
    partial = _partial_directory(out, resume, say)
    if streamed:
        assert reference is not None
        summary.update(
            impute_streamed(
                reference,
                target_data,
                Path(out),
                imputer_params=imputer_params,
                array_positions=positions,
                region=region,
                chunk_sites=chunk_sites,
                partial=partial,
                resume=resume,
                ap=ap,
                index=index,
                n_jobs=n_jobs,
                say=say,
                log=log,
            )
        )
        shutil.rmtree(partial, ignore_errors=True)
        summary["peak_memory_mb"] = peak_memory_mb()
        summary["read_seconds"] = timings["read_seconds"]  # of the target; the panel is read in chunks
        summary["total_seconds"] = time.perf_counter() - start
        say(
            f"wrote {out}: {summary['n_samples']} samples x {summary['n_sites_written']} sites "
            f"({summary['n_imputed']} imputed, mean DR2 {summary['mean_dr2_imputed'] or 0:.3f}) in "
            f"{summary['total_seconds']:.1f}s, {summary['n_chunks']} chunk(s); peak memory "
            f"{summary['peak_memory_mb']:.0f} MiB"
        )
        return summary

    t0 = time.perf_counter()
    if model_dir is not None:
        imp = GenotypeImputer.load(model_dir)
        if imputer_params.get("unphased"):
            imp.unphased = imputer_params["unphased"]
        imp.log = log
        panel_sites, contig_lines = imp.sites_, imp.contig_lines_
        say(f"loaded imputer from {model_dir}: {len(panel_sites)} sites, {len(imp.windows_)} windows")
        panel = None
    else:
        if reference is None:
            raise ValueError("give a reference panel (or model_dir of a saved imputer)")
        panel, ref_report = read_reference_panel(reference, region=region)
        say(f"reference: {ref_report.summary()}; {panel.n_haplotypes} haplotypes")
        summary["reference_read"] = asdict(ref_report)
        panel_sites, contig_lines = panel.sites, panel.contig_lines
    aligned = align_targets(
        panel_sites,
        target_data,
        array_positions=positions,
        allowed_typed=imp.typed_ if model_dir is not None and imp.model not in BASELINES else None,
    )
    say(f"sites: {aligned.report.summary()}")
    summary["alignment"] = asdict(aligned.report)
    timings["read_seconds"] += time.perf_counter() - t0

    t0 = time.perf_counter()
    if model_dir is None:
        assert panel is not None
        imp = imputer if imputer is not None else GenotypeImputer(**imputer_params)
    if imp.unphased == "error":  # fail before training, not after
        check_phased(aligned.alleles, aligned.phased, panel_sites, aligned.samples)
    if model_dir is None:
        imp.log = imp.log or log
        say(f"training {imp.model} ({imp.mode}, preset {imp.preset}) ...")
        imp.fit(panel, aligned.typed)
        if save_model is not None:
            imp.save(save_model, overwrite=overwrite)
            say(f"saved the fitted imputer to {save_model}")
    elif imp.model in BASELINES:  # a saved panel: windows and settings for these targets' typed sites
        imp.retarget(aligned.typed)
    timings["fit_seconds"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    say(f"imputing {len(aligned.samples)} samples over {len(imp.windows_)} windows ...")
    probs = imp.impute(aligned.alleles, aligned.phased, checkpoint=partial, n_jobs=n_jobs)
    timings["impute_seconds"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    dr2 = dosage_r2_estimate(probs.reshape(len(panel_sites), -1))
    # inputs phased by the diploid copying model are kept in phase across windows: phased output
    all_phased = bool(aligned.phased[aligned.typed].all()) or imp.unphased == "phase"
    out = Path(out)
    write_imputed_vcf(
        out,
        panel_sites,
        aligned.samples,
        probs,
        typed=aligned.typed,
        phased=all_phased,
        dr2=dr2,
        contig_lines=contig_lines,
        source=f"semiparam impute-vcf model={imp.model} mode={imp.mode}",
        ap=ap,
    )
    index_path = None
    if index and out.name.endswith(".gz"):
        index_path = index_vcf(out)
    shutil.rmtree(partial, ignore_errors=True)  # the output is whole: its windows are no longer needed
    timings["write_seconds"] = time.perf_counter() - t0
    timings["total_seconds"] = time.perf_counter() - start

    imputed = ~aligned.typed
    summary.update(
        {
            "model": imp.model,
            "mode": imp.mode,
            "n_samples": len(aligned.samples),
            "n_sites_written": len(panel_sites),
            "n_typed": int(aligned.typed.sum()),
            "n_imputed": int(imputed.sum()),
            "n_windows": len(imp.windows_),
            "n_parameters": sum(p.numel() for p in imp.learners_[0].module.parameters())
            if imp.learners_
            else 0,
            "mean_dr2_imputed": float(dr2[imputed & imp.modelled_].mean())
            if (imputed & imp.modelled_).any()
            else None,
            "phased_output": all_phased,
            "index": str(index_path) if index_path else None,
            "peak_memory_mb": peak_memory_mb(),
            **timings,
        }
    )
    say(
        f"wrote {out}: {len(aligned.samples)} samples x {len(panel_sites)} sites "
        f"({summary['n_imputed']} imputed, mean DR2 {summary['mean_dr2_imputed'] or 0:.3f}) in "
        f"{timings['total_seconds']:.1f}s (fit {timings['fit_seconds']:.1f}s, impute "
        f"{timings['impute_seconds']:.1f}s); peak memory {summary['peak_memory_mb']:.0f} MiB"
        + (
            ""
            if index_path or not out.name.endswith(".gz") or not index
            else "; no index (pysam not installed)"
        )
    )
    return summary
