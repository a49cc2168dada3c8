"""Whole chromosomes in bounded memory: ``impute-vcf`` with the copying or k-NN model reads the
reference panel in chunks of sites, imputes each chunk with a margin of typed sites on both sides
and writes it out, so memory depends on the chunk size, not on the chromosome's length.

A chunk is ``chunk_sites`` consecutive panel sites (its *core*) plus, on each side, the panel
sites up to the ``2 * n_inputs``-th typed site (its *margins*), so the windows that impute the core
see the same typed inputs as they would in the whole file; only the core's sites are written. The
copying model's ``ne`` (or k-NN's ``k``) is picked on the first chunk and kept for the others.
Unphased targets are phased in each chunk; consecutive chunks are put in phase with each other by
the heterozygous typed sites their margins share, as consecutive phasing segments are.

Each finished chunk is kept under ``<out>.partial/`` (its VCF records, gzipped, and the state the
next chunk needs) with the run's fingerprint; ``resume=True`` goes on after the last one, and the
output is assembled from the chunks at the end.
NOTE[DIFF]: a panel that fits in one chunk is imputed exactly as the whole-file path does; with
several chunks, windows are planned per chunk, so sites near a chunk's edge can be imputed from a
slightly different window than in one pass.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._io import digest
from .._measure import peak_rss_mb as peak_memory_mb
from ..data.genotypes import GenotypeData, HaplotypePanel, ReadReport, VariantSites, VCFError
from ..data.vcf import iter_reference_panel
from ..data.vcf_writer import VCFWriter, imputed_vcf_header, imputed_vcf_lines, index_vcf
from .alignment import TargetLookup, contig_hint
from .copying import align_phase
from .imputer import GenotypeImputer, claim_run_directory
from .metrics import dosage_r2_estimate
from .phasing import check_phased


class _Buffer:
    """Consecutive panel sites read so far and not yet dropped, with their global indices."""

    def __init__(self, blocks: Iterator[HaplotypePanel], lookup: TargetLookup) -> None:
        self.blocks = blocks
        self.lookup = lookup
        self.base = 0  # global index of the first buffered site
        self.panel: HaplotypePanel | None = None
        self.keys_typed = np.zeros(0, dtype=bool)  # sites a target could be typed at
        self.exhausted = False

    @property
    def end(self) -> int:
        return self.base + (0 if self.panel is None else self.panel.n_sites)

    def read_more(self) -> bool:
        if self.exhausted:
            return False
        try:
            block = next(self.blocks)
        except StopIteration:
            self.exhausted = True
            return False
        typable = self.lookup.typable(block.sites)
        if self.panel is None:
            self.panel = block
        else:
            self.panel = _concat_panels(self.panel, block)
        self.keys_typed = np.concatenate([self.keys_typed, typable])
        return True

    def typed_after(self, start: int) -> int:
        """Typed-capable sites buffered at or after global index ``start``."""
        return int(self.keys_typed[max(0, start - self.base) :].sum())

    def nth_typed_before(self, start: int, n: int) -> int:
        """Global index of the ``n``-th typable site before ``start`` (the buffer's start if fewer)."""
        idx = np.flatnonzero(self.keys_typed[: max(0, start - self.base)])
        return self.base + (int(idx[-n]) if len(idx) >= n else 0)

    def nth_typed_from(self, start: int, n: int) -> int:
        """Global index just past the ``n``-th typable site at or after ``start`` (the end if fewer)."""
        idx = np.flatnonzero(self.keys_typed[max(0, start - self.base) :])
        return start + int(idx[n - 1]) + 1 if len(idx) >= n else self.end

    def slice(self, lo: int, hi: int) -> HaplotypePanel:
        assert self.panel is not None
        return self.panel.subset_sites(np.arange(lo - self.base, hi - self.base))

    def drop_before(self, start: int) -> None:
        if self.panel is None or start <= self.base:
            return
        k = start - self.base
        self.panel = self.panel.subset_sites(np.arange(k, self.panel.n_sites))
        self.keys_typed = self.keys_typed[k:]
        self.base = start


def _concat_panels(a: HaplotypePanel, b: HaplotypePanel) -> HaplotypePanel:
    sites = VariantSites.concat([a.sites, b.sites])
    return HaplotypePanel(sites, a.samples, np.concatenate([a.haplotypes, b.haplotypes]), a.contig_lines)


def _fingerprint(
    reference: Path,
    target: GenotypeData,
    params: dict[str, Any],
    array: set[tuple[str, int]] | None,
    chunk_sites: int,
    region: str | None,
) -> str:
    stat = reference.stat()
    return digest(
        [str(reference.resolve()), stat.st_size, stat.st_mtime_ns, region, chunk_sites],
        params,
        sorted(array) if array is not None else None,
        target.sites.keys(),
        list(target.samples),
        np.asarray(target.alleles),
        np.asarray(target.phased),
        length=32,
    )


def impute_streamed(
    reference: str | Path,
    target: GenotypeData,
    out: Path,
    *,
    imputer_params: dict[str, Any],
    array_positions: Sequence[tuple[str, int]] | None,
    region: str | None,
    chunk_sites: int,
    partial: Path,
    resume: bool,
    ap: bool,
    index: bool,
    n_jobs: int,
    say: Callable[[str], None],
    log: Callable[[str], None] | None,
) -> dict[str, Any]:
    """Impute ``target`` from the panel file ``reference`` chunk by chunk into ``out`` (see the
    module docstring); returns the summary fields of :func:`.pipeline.impute_vcf`."""
    if chunk_sites < 1:
        raise ValueError(f"chunk_sites must be >= 1, got {chunk_sites}")
    if not Path(reference).exists():
        raise FileNotFoundError(f"no such VCF file: {reference}")
    lookup = TargetLookup(target, array_positions)
    array = lookup.array
    probe = GenotypeImputer(**imputer_params)
    probe._check_params()
    if probe.unphased == "error":  # fail before any work
        check_phased(target.alleles, target.phased, target.sites, target.samples)
    margin = 2 * probe.n_inputs
    fingerprint = _fingerprint(
        Path(reference), target, probe._fingerprint_params(), array, chunk_sites, region
    )
    claim_run_directory(partial, fingerprint, "chunks")

    ref_report = ReadReport(str(reference))
    buffer = _Buffer(iter_reference_panel(reference, region=region, report=ref_report), lookup)
    fixed: dict[str, Any] = {}  # settings picked on the first chunk
    phased_output = bool(target.phased.all()) or probe.unphased == "phase"
    previous: tuple[np.ndarray, np.ndarray] | None = None  # global typed indices, (n, 2, s) phased haps
    timings = {"fit_seconds": 0.0, "impute_seconds": 0.0}
    n_windows = n_chunks = 0
    dr2_sum = 0.0
    dr2_count = 0
    contigs: list[str] = []
    contig_lines: list[str] = []
    core_start = 0
    while True:
        while not buffer.exhausted and (
            buffer.end < core_start + chunk_sites or buffer.typed_after(core_start + chunk_sites) < margin
        ):
            buffer.read_more()
        core_end = min(core_start + chunk_sites, buffer.end)
        if core_end <= core_start:
            break
        assert buffer.panel is not None
        contig_lines = list(buffer.panel.contig_lines)
        left = buffer.nth_typed_before(core_start, margin)
        right = buffer.nth_typed_from(core_end, margin)
        ext = buffer.slice(left, right)
        core = slice(core_start - left, core_end - left)
        alleles, phased, typed = lookup.align(ext.sites, core)
        for c in ext.sites.chrom[core].tolist():
            if not contigs or contigs[-1] != c:
                contigs.append(c)
        part = partial / f"chunk_{n_chunks:06d}.vcf.txt.gz"
        state_file = partial / f"chunk_{n_chunks:06d}.npz"
        if resume and part.exists() and state_file.exists():
            with np.load(state_file, allow_pickle=False) as z:
                state = {k: z[k] for k in z.files}
            fixed = json.loads(str(state["fixed"]))
            previous = (state["typed_index"], state["haps"]) if state["typed_index"].size else previous
            n_windows += int(state["n_windows"])
            dr2_sum += float(state["dr2_sum"])
            dr2_count += int(state["dr2_count"])
        else:
            if not typed.any():
                here = sorted(set(ext.sites.chrom[core].tolist()))
                theirs = target.sites.contigs()
                if not set(here) & set(theirs):
                    raise VCFError(
                        f"the reference panel's contig(s) {here} have no target genotypes (the target has "
                        f"{theirs[:5]}){contig_hint(theirs, here)}; impute the contigs the target covers, "
                        "e.g. with --region"
                    )
                raise VCFError(
                    f"no typed site near {ext.sites.label(core.start)}: the targets share no site with "
                    "this part of the reference panel"
                )
            params = {**imputer_params}
            if fixed:
                params["copying"] = {**(params.get("copying") or {}), "ne": fixed["ne"]}
                if fixed.get("knn_neighbors") is not None:
                    params["knn_neighbors"] = fixed["knn_neighbors"]
            imp = GenotypeImputer(**params)
            imp.log = log if n_chunks == 0 else None
            t0 = time.perf_counter()
            imp.fit(ext, typed)
            timings["fit_seconds"] += time.perf_counter() - t0
            if not fixed:
                fixed = {"ne": imp.copying_.ne, "knn_neighbors": getattr(imp, "neighbors_", None)}
            t0 = time.perf_counter()
            probs = imp.impute(alleles, phased, n_jobs=n_jobs)  # (n_ext, n_samples, 2)
            timings["impute_seconds"] += time.perf_counter() - t0
            n_windows += len(imp.windows_)
            typed_index = np.flatnonzero(typed) + left
            haps = np.transpose(imp.phased_inputs_[typed].reshape(typed.sum(), -1, 2), (1, 2, 0))  # (n, 2, s)
            if previous is not None:
                shared, i_prev, i_cur = np.intersect1d(previous[0], typed_index, return_indices=True)
                if shared.size:
                    swap = align_phase(previous[1][:, :, i_prev], haps[:, :, i_cur])
                    probs[:, swap] = probs[:, swap][:, :, ::-1]
                    haps[swap] = haps[swap][:, ::-1]
            previous = (typed_index, haps)
            core_probs = probs[core]
            dr2 = dosage_r2_estimate(core_probs.reshape(core_probs.shape[0], -1))
            imputed = (~typed[core]) & imp.modelled_[core]
            dr2_sum += float(dr2[imputed].sum())
            dr2_count += int(imputed.sum())
            lines = imputed_vcf_lines(
                ext.sites.subset(np.arange(core.start, core.stop)),
                core_probs,
                typed=typed[core],
                phased=phased_output,
                dr2=dr2,
                ap=ap,
            )
            tmp = partial / f".{part.name}.{os.getpid()}"
            with gzip.open(tmp, "wt", compresslevel=1) as f:
                for line in lines:
                    f.write(line + "\n")
            np.savez(
                partial / f".{state_file.stem}.{os.getpid()}.npz",
                typed_index=typed_index,
                haps=haps,
                fixed=json.dumps(fixed),
                n_windows=len(imp.windows_),
                dr2_sum=float(dr2[imputed].sum()),
                dr2_count=int(imputed.sum()),
            )
            tmp.replace(part)
            (partial / f".{state_file.stem}.{os.getpid()}.npz").replace(state_file)
        n_chunks += 1
        say(
            f"chunk {n_chunks}: panel sites {core_start + 1}-{core_end} done; "
            f"peak memory {peak_memory_mb():.0f} MiB"
        )
        buffer.drop_before(min(buffer.nth_typed_before(core_end, margin), core_end))
        core_start = core_end

    report = lookup.report()
    if report["n_typed"] == 0:
        raise VCFError(f"no target site can be used as input: {report}")
    t0 = time.perf_counter()
    header = imputed_vcf_header(
        target.samples,
        contigs,
        contig_lines,
        source=f"semiparam impute-vcf model={probe.model} streamed in {n_chunks} chunk(s)",
        ap=ap,
    )
    with VCFWriter(out, header) as writer:
        for c in range(n_chunks):
            with gzip.open(partial / f"chunk_{c:06d}.vcf.txt.gz", "rt") as f:
                for line in f:
                    writer.write_line(line.rstrip("\n"))
    index_path = index_vcf(out) if index and out.name.endswith(".gz") else None
    timings["write_seconds"] = time.perf_counter() - t0
    n_sites = core_start
    return {
        "reference_read": ref_report.__dict__,
        "alignment": report,
        "model": probe.model,
        "mode": probe.mode,
        "n_samples": target.n_samples,
        "n_sites_written": n_sites,
        "n_typed": report["n_typed"],
        "n_imputed": n_sites - report["n_typed"],
        "n_windows": n_windows,
        "n_chunks": n_chunks,
        "n_parameters": 0,
        "mean_dr2_imputed": dr2_sum / dr2_count if dr2_count else None,
        "phased_output": phased_output,
        "index": str(index_path) if index_path else None,
        "copying_ne": fixed.get("ne"),
        **timings,
    }
