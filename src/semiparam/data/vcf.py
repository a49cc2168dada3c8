"""Reading VCF / VCF.gz / BCF files for genotype imputation (writing: :mod:`semiparam.data.vcf_writer`).

Reading goes through ``cyvcf2`` (htslib), the optional ``genomics`` extra
(``pip install 'semiparam[genomics]'``); this module imports it only when a file is read or
written. Everything else here is plain numpy.

A file is read into :class:`VariantSites` (one entry per biallelic variant, in file order) and
a :class:`GenotypeData` holding ``alleles (n_sites, n_samples, 2)`` int8 (0 = REF, 1 = ALT,
-1 = missing) and ``phased (n_sites, n_samples)`` bool. What happens to records the imputation
model cannot use is a choice, counted in a :class:`ReadReport`:

- multi-allelic records: skipped (default) or an error; split them first with
  ``bcftools norm -m -any`` to keep them;
- records without an ALT allele (``.``): skipped;
- exact duplicates of (chrom, pos, ref, alt): the first is kept;
- haploid or polyploid calls, unsorted positions, a file that cannot be parsed: an error naming the
  record.

A *reference panel* (:func:`read_reference_panel`) must be phased and complete: every genotype
``a|b`` with no missing allele; the error names the first offending sample and site.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .genotypes import (
    MISSING,
    GenotypeData,
    HaplotypePanel,
    ReadReport,
    VariantSites,
    VCFError,
    require_cyvcf2,
)


def _open_vcf(path: str | Path, samples: Sequence[str] | None) -> Any:
    cyvcf2 = require_cyvcf2()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such VCF file: {path}")
    try:
        vcf = cyvcf2.VCF(str(path), lazy=True, threads=1)
    except (OSError, Exception) as err:  # cyvcf2 raises plain Exception on a malformed header
        raise VCFError(f"cannot read {path} as VCF/BCF: {err}") from err
    if samples is not None:
        unknown = sorted(set(samples) - set(vcf.samples))
        if unknown:
            raise VCFError(f"sample(s) {unknown[:5]} not in {path} (it has {len(vcf.samples)} samples)")
        vcf.set_samples(list(samples))
    return vcf


def _parsed(records: Iterable[Any], path: str | Path) -> Iterable[Any]:
    """The records, with cyvcf2's bare ``Exception`` on a record htslib cannot parse (a truncated
    or damaged file) turned into a :class:`VCFError` naming the file and the last good record."""
    it = iter(records)
    last = "the header"
    while True:
        try:
            rec = next(it)
        except StopIteration:
            return
        except Exception as err:
            raise VCFError(
                f"{path}: cannot parse the record after {last} (truncated or damaged?): {err}"
            ) from err
        last = f"{rec.CHROM}:{rec.POS}"
        yield rec


def iter_vcf(
    path: str | Path,
    *,
    region: str | None = None,
    samples: Sequence[str] | None = None,
    multiallelic: Literal["skip", "error"] = "skip",
    block_sites: int = 10_000,
    report: ReadReport | None = None,
) -> Iterator[GenotypeData]:
    """The diploid genotypes of a VCF / VCF.gz / BCF in blocks of up to ``block_sites`` kept
    records, in file order, so a whole chromosome need not be held at once (see :func:`read_vcf`
    for the arguments). ``report`` (a :class:`ReadReport`) is filled as the file is read."""
    if multiallelic not in ("skip", "error"):
        raise ValueError(f"multiallelic must be 'skip' or 'error', got {multiallelic!r}")
    if block_sites < 1:
        raise ValueError(f"block_sites must be >= 1, got {block_sites}")
    if region is not None and not any(Path(str(path) + ext).exists() for ext in (".tbi", ".csi")):
        raise VCFError(
            f"reading region {region!r} needs an index of {path}: run `bcftools index -t {path}` "
            "(or `tabix -p vcf`), or leave out the region"
        )
    vcf = _open_vcf(path, samples)
    sample_names = list(samples) if samples is not None else list(vcf.samples)
    if not sample_names:
        raise VCFError(f"{path} has no samples (no genotype columns)")
    report = report if report is not None else ReadReport(str(path))
    contig_lines = [line for line in vcf.raw_header.splitlines() if line.startswith("##contig=")]
    n_samples = len(sample_names)
    seen: set[tuple[str, int, str, str]] = set()
    last: tuple[str, int] | None = None
    finished_contigs: set[str] = set()
    try:
        records: Iterable[Any] = vcf(region) if region else vcf
    except Exception as err:
        raise VCFError(f"cannot fetch region {region!r} from {path} (is it indexed?): {err}") from err

    def block(
        chrom: list[str],
        pos: list[int],
        refs: list[str],
        alts: list[str],
        ids: list[str],
        blocks: list[np.ndarray],
    ) -> GenotypeData:
        if blocks:
            stacked = np.stack(blocks)  # (n_sites, n_samples, 3) int8
            alleles = np.ascontiguousarray(stacked[:, :, :2])
            alleles[alleles < 0] = MISSING
            phased = stacked[:, :, 2].astype(bool)
        else:
            alleles = np.zeros((0, n_samples, 2), dtype=np.int8)
            phased = np.zeros((0, n_samples), dtype=bool)
        sites = VariantSites.from_lists(chrom, pos, refs, alts, ids)
        return GenotypeData(sites, sample_names, alleles, phased, contig_lines)

    chrom: list[str] = []
    pos: list[int] = []
    ids: list[str] = []
    refs: list[str] = []
    alts: list[str] = []
    blocks: list[np.ndarray] = []
    yielded = False
    for rec in _parsed(records, path):
        report.n_records += 1
        where = f"{rec.CHROM}:{rec.POS}"
        # order check: positions ascend within a contig and a contig never comes back
        if last is not None:
            if rec.CHROM == last[0] and rec.POS < last[1]:
                raise VCFError(
                    f"{path} is not sorted: {where} comes after {last[0]}:{last[1]}; run `bcftools sort`"
                )
            if rec.CHROM != last[0]:
                finished_contigs.add(last[0])
                seen.clear()  # duplicates can only be on the same contig
                if rec.CHROM in finished_contigs:
                    raise VCFError(
                        f"{path} is not sorted: contig {rec.CHROM} appears twice; run `bcftools sort`"
                    )
        last = (rec.CHROM, rec.POS)
        alt_alleles = rec.ALT
        if len(alt_alleles) == 0:
            report.n_no_alt += 1
            report.examples.setdefault("no_alt", where)
            continue
        if len(alt_alleles) > 1:
            if multiallelic == "error":
                raise VCFError(
                    f"{path}: {where} is multi-allelic ({rec.REF}>{','.join(alt_alleles)}); "
                    "split it with `bcftools norm -m -any`"
                )
            report.n_multiallelic += 1
            report.examples.setdefault("multiallelic", where)
            continue
        key = (rec.CHROM, int(rec.POS), rec.REF, alt_alleles[0])
        if key in seen:
            report.n_duplicate += 1
            report.examples.setdefault("duplicate", where)
            continue
        seen.add(key)
        try:
            gt = rec.genotype.array()  # (n_samples, ploidy + 1) int16; last column = phased flag
        except Exception as err:  # cyvcf2 raises a bare Exception on a GT it cannot parse
            raise VCFError(f"{path}: {where}: cannot read the genotypes ({err})") from err
        if gt.shape[1] != 3 or (gt[:, 1] == -2).any():
            bad = int(np.flatnonzero(gt[:, 1] == -2)[0]) if gt.shape[1] >= 2 and (gt[:, 1] == -2).any() else 0
            raise VCFError(
                f"{path}: {where} has a non-diploid genotype (sample {sample_names[bad]}); only diploid "
                "calls are supported (haploid chrX/chrY/MT are not)"
            )
        if (gt[:, :2] > 1).any():  # e.g. 1|2 where the record has a single ALT allele
            bad = int(np.flatnonzero((gt[:, :2] > 1).any(axis=1))[0])
            raise VCFError(
                f"{path}: {where} has genotype allele {int(gt[bad, :2].max())} (sample {sample_names[bad]}) "
                f"but only one ALT allele ({rec.REF}>{alt_alleles[0]})"
            )
        blocks.append(gt.astype(np.int8))  # -1/0/1 alleles and the phase flag: int8 is enough
        chrom.append(rec.CHROM)
        pos.append(int(rec.POS))
        ids.append(rec.ID or ".")
        refs.append(rec.REF)
        alts.append(alt_alleles[0])
        report.n_kept += 1
        if len(blocks) == block_sites:
            yield block(chrom, pos, refs, alts, ids, blocks)
            yielded = True
            chrom, pos, ids, refs, alts, blocks = [], [], [], [], [], []
    vcf.close()
    if blocks or not yielded:
        yield block(chrom, pos, refs, alts, ids, blocks)


def read_vcf(
    path: str | Path,
    *,
    region: str | None = None,
    samples: Sequence[str] | None = None,
    multiallelic: Literal["skip", "error"] = "skip",
) -> tuple[GenotypeData, ReadReport]:
    """Read the diploid genotypes of a VCF / VCF.gz / BCF (bgzipped or not, indexed or not).

    ``region`` (``"20:1000000-2000000"``) needs an index (``.tbi``/``.csi``). ``samples`` keeps those
    samples, in that order. Returns the genotypes and a :class:`ReadReport` of skipped records.
    """
    report = ReadReport(str(path))
    parts = list(
        iter_vcf(
            path,
            region=region,
            samples=samples,
            multiallelic=multiallelic,
            block_sites=1 << 30,
            report=report,
        )
    )
    return parts[0] if len(parts) == 1 else concat_genotypes(parts), report


def concat_genotypes(parts: Sequence[GenotypeData]) -> GenotypeData:
    """Blocks of one file's genotypes (same samples), joined in order."""
    first = parts[0]
    sites = VariantSites.concat([p.sites for p in parts])
    return GenotypeData(
        sites,
        list(first.samples),
        np.concatenate([p.alleles for p in parts]),
        np.concatenate([p.phased for p in parts]),
        list(first.contig_lines),
    )


def read_reference_panel(
    path: str | Path,
    *,
    region: str | None = None,
    samples: Sequence[str] | None = None,
    multiallelic: Literal["skip", "error"] = "skip",
) -> tuple[HaplotypePanel, ReadReport]:
    """Read a phased reference panel. Every genotype must be phased (``a|b``) and complete; a
    homozygous genotype written unphased (``0/0``) is accepted, since its phase is unambiguous."""
    data, report = read_vcf(path, region=region, samples=samples, multiallelic=multiallelic)
    if data.n_sites == 0:
        raise VCFError(f"{path}: no usable biallelic records{(' in ' + region) if region else ''}")
    return as_reference_panel(data, path), report


def iter_reference_panel(
    path: str | Path,
    *,
    region: str | None = None,
    samples: Sequence[str] | None = None,
    multiallelic: Literal["skip", "error"] = "skip",
    block_sites: int = 10_000,
    report: ReadReport | None = None,
) -> Iterator[HaplotypePanel]:
    """A phased reference panel in blocks of up to ``block_sites`` sites (see
    :func:`read_reference_panel` and :func:`iter_vcf`)."""
    n = 0
    for data in iter_vcf(
        path,
        region=region,
        samples=samples,
        multiallelic=multiallelic,
        block_sites=block_sites,
        report=report,
    ):
        n += data.n_sites
        if data.n_sites:
            yield as_reference_panel(data, path)
    if n == 0:
        raise VCFError(f"{path}: no usable biallelic records{(' in ' + region) if region else ''}")


def as_reference_panel(data: GenotypeData, path: str | Path) -> HaplotypePanel:
    """``data`` as haplotypes, after checking that every genotype is complete and phased."""
    missing = (data.alleles < 0).any(axis=2)
    if missing.any():
        i, k = np.argwhere(missing)[0]
        raise VCFError(
            f"reference panel {path} has {int(missing.sum())} missing genotype(s), e.g. sample "
            f"{data.samples[k]} at {data.sites.label(i)}; a reference panel must be complete "
            "(impute or phase it first, e.g. with Beagle)"
        )
    het = data.alleles[:, :, 0] != data.alleles[:, :, 1]
    unphased = het & ~data.phased
    if unphased.any():
        i, k = np.argwhere(unphased)[0]
        raise VCFError(
            f"reference panel {path} has {int(unphased.sum())} unphased heterozygous genotype(s), e.g. "
            f"sample {data.samples[k]} at {data.sites.label(i)}; phase it first (Beagle, SHAPEIT, Eagle)"
        )
    haplotypes = data.haplotypes().astype(np.uint8)
    return HaplotypePanel(data.sites, data.samples, haplotypes, data.contig_lines)


def read_positions(path: str | Path) -> list[tuple[str, int]]:
    """Array marker positions: one ``chrom<TAB or space>pos`` per line (``chrom:pos`` also
    accepted); gzip allowed; ``#`` lines and a header line starting with ``chrom`` skipped. A VCF
    (``.vcf``, ``.vcf.gz``, ``.bcf``) is read for its sites."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such positions file: {path}")
    name = path.name.lower()
    if name.endswith((".vcf", ".vcf.gz", ".bcf", ".vcf.bgz")):
        vcf = _open_vcf(path, None)
        out = [(rec.CHROM, int(rec.POS)) for rec in vcf]
        vcf.close()
        return out
    opener = gzip.open if _is_gzip(path) else open
    out = []
    with opener(path, "rt") as handle:  # type: ignore[operator]
        for lineno, line in enumerate(handle, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            fields = text.replace(":", "\t").split()
            if len(fields) < 2:
                raise VCFError(f"{path} line {lineno}: expected 'chrom pos', got {text!r}")
            try:
                pos = int(fields[1])
            except ValueError:
                if lineno == 1:  # a header line such as "chrom pos"
                    continue
                raise VCFError(f"{path} line {lineno}: position {fields[1]!r} is not an integer") from None
            out.append((fields[0], pos))
    if not out:
        raise VCFError(f"{path} lists no positions")
    return out


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


__all__ = [
    "MISSING",
    "GenotypeData",
    "HaplotypePanel",
    "ReadReport",
    "VCFError",
    "VariantSites",
    "read_positions",
    "read_reference_panel",
    "read_vcf",
]
