"""VCF / VCF.gz / BCF input and output for genotype imputation.

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

import datetime
import gzip
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

MISSING = -1


class VCFError(ValueError):
    """A VCF file cannot be used as given; the message names the file, record or sample."""


def require_cyvcf2() -> Any:
    """Import ``cyvcf2`` or explain how to install it."""
    try:
        import cyvcf2
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ModuleNotFoundError(
            "reading and writing VCF files needs cyvcf2: pip install 'semiparam[genomics]' "
            "(or pip install cyvcf2)"
        ) from err
    return cyvcf2


@dataclass(frozen=True)
class VariantSites:
    """Biallelic variants in file order; every array has length ``n_sites``."""

    chrom: np.ndarray  # object (str)
    pos: np.ndarray  # int64, 1-based
    id: np.ndarray  # object (str; "." when absent)
    ref: np.ndarray  # object (str)
    alt: np.ndarray  # object (str)

    def __post_init__(self) -> None:
        n = len(self.pos)
        for name in ("chrom", "id", "ref", "alt"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"VariantSites.{name} has {len(getattr(self, name))} entries, pos has {n}")

    def __len__(self) -> int:
        return len(self.pos)

    @classmethod
    def from_lists(
        cls,
        chrom: Sequence[str],
        pos: Sequence[int],
        ref: Sequence[str],
        alt: Sequence[str],
        id: Sequence[str] | None = None,
    ) -> VariantSites:
        n = len(pos)
        ids = list(id) if id is not None else ["."] * n
        return cls(
            np.asarray(list(chrom), dtype=object),
            np.asarray(pos, dtype=np.int64),
            np.asarray(ids, dtype=object),
            np.asarray(list(ref), dtype=object),
            np.asarray(list(alt), dtype=object),
        )

    def subset(self, index: np.ndarray) -> VariantSites:
        return VariantSites(
            self.chrom[index], self.pos[index], self.id[index], self.ref[index], self.alt[index]
        )

    def keys(self) -> list[tuple[str, int, str, str]]:
        """``(chrom, pos, ref, alt)`` per site: the identity used to match files."""
        return list(zip(self.chrom.tolist(), self.pos.tolist(), self.ref.tolist(), self.alt.tolist()))

    def contigs(self) -> list[str]:
        """Contig names in order of first appearance."""
        return list(dict.fromkeys(self.chrom.tolist()))

    def label(self, i: int) -> str:
        return f"{self.chrom[i]}:{self.pos[i]} {self.ref[i]}>{self.alt[i]}"


@dataclass
class ReadReport:
    """What reading a VCF kept and skipped."""

    path: str
    n_records: int = 0
    n_kept: int = 0
    n_multiallelic: int = 0
    n_no_alt: int = 0
    n_duplicate: int = 0
    examples: dict[str, str] = field(default_factory=dict)  # reason -> first record skipped

    def summary(self) -> str:
        skipped = [
            f"{n} {reason}"
            for n, reason in (
                (self.n_multiallelic, "multi-allelic (split with `bcftools norm -m -any` to keep them)"),
                (self.n_no_alt, "without ALT allele"),
                (self.n_duplicate, "duplicate"),
            )
            if n
        ]
        text = f"{self.path}: {self.n_kept} of {self.n_records} records used"
        return text + (f"; skipped {', '.join(skipped)}" if skipped else "")


@dataclass
class GenotypeData:
    """Diploid genotypes: ``alleles (n_sites, n_samples, 2)`` int8, 0/1 or -1 (missing);
    ``phased (n_sites, n_samples)`` bool (True for ``a|b``)."""

    sites: VariantSites
    samples: list[str]
    alleles: np.ndarray
    phased: np.ndarray
    contig_lines: list[str] = field(default_factory=list)  # ``##contig`` header lines, verbatim

    def __post_init__(self) -> None:
        n_sites, n_samples = len(self.sites), len(self.samples)
        if self.alleles.shape != (n_sites, n_samples, 2):
            raise ValueError(f"alleles has shape {self.alleles.shape}, expected ({n_sites}, {n_samples}, 2)")
        if self.phased.shape != (n_sites, n_samples):
            raise ValueError(f"phased has shape {self.phased.shape}, expected ({n_sites}, {n_samples})")

    @property
    def n_sites(self) -> int:
        return len(self.sites)

    @property
    def n_samples(self) -> int:
        return len(self.samples)

    def haplotypes(self) -> np.ndarray:
        """``(n_sites, 2 * n_samples)`` int8: sample k's haplotypes are columns 2k and 2k + 1."""
        return self.alleles.reshape(self.n_sites, 2 * self.n_samples)

    def subset_sites(self, index: np.ndarray) -> GenotypeData:
        return GenotypeData(
            self.sites.subset(index),
            list(self.samples),
            self.alleles[index],
            self.phased[index],
            list(self.contig_lines),
        )

    def subset_samples(self, names: Sequence[str]) -> GenotypeData:
        lookup = {s: i for i, s in enumerate(self.samples)}
        unknown = [s for s in names if s not in lookup]
        if unknown:
            raise VCFError(f"sample(s) {unknown[:5]} not in the file (it has {len(self.samples)} samples)")
        idx = np.asarray([lookup[s] for s in names], dtype=np.int64)
        return GenotypeData(
            self.sites, list(names), self.alleles[:, idx], self.phased[:, idx], list(self.contig_lines)
        )


@dataclass
class HaplotypePanel:
    """A phased reference panel: ``haplotypes (n_sites, n_haplotypes)`` uint8 (0 = REF, 1 = ALT);
    sample k owns haplotypes 2k and 2k + 1."""

    sites: VariantSites
    samples: list[str]
    haplotypes: np.ndarray
    contig_lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        expected = (len(self.sites), 2 * len(self.samples))
        if self.haplotypes.shape != expected:
            raise ValueError(f"haplotypes has shape {self.haplotypes.shape}, expected {expected}")

    @property
    def n_sites(self) -> int:
        return len(self.sites)

    @property
    def n_haplotypes(self) -> int:
        return self.haplotypes.shape[1]

    def alt_counts(self) -> np.ndarray:
        return self.haplotypes.sum(axis=1, dtype=np.int64)

    def subset_samples(self, names: Sequence[str]) -> HaplotypePanel:
        lookup = {s: i for i, s in enumerate(self.samples)}
        unknown = [s for s in names if s not in lookup]
        if unknown:
            raise VCFError(f"sample(s) {unknown[:5]} not in the panel")
        cols = np.asarray([[2 * lookup[s], 2 * lookup[s] + 1] for s in names], dtype=np.int64).reshape(-1)
        return HaplotypePanel(self.sites, list(names), self.haplotypes[:, cols], list(self.contig_lines))

    def subset_sites(self, index: np.ndarray) -> HaplotypePanel:
        return HaplotypePanel(
            self.sites.subset(index), list(self.samples), self.haplotypes[index], list(self.contig_lines)
        )

    def as_genotypes(self) -> GenotypeData:
        n_sites, n_samples = self.n_sites, len(self.samples)
        alleles = self.haplotypes.astype(np.int8).reshape(n_sites, n_samples, 2)
        return GenotypeData(
            self.sites,
            list(self.samples),
            alleles,
            np.ones((n_sites, n_samples), dtype=bool),
            list(self.contig_lines),
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
    if multiallelic not in ("skip", "error"):
        raise ValueError(f"multiallelic must be 'skip' or 'error', got {multiallelic!r}")
    if region is not None and not any(Path(str(path) + ext).exists() for ext in (".tbi", ".csi")):
        raise VCFError(
            f"reading region {region!r} needs an index of {path}: run `bcftools index -t {path}` "
            "(or `tabix -p vcf`), or leave out the region"
        )
    vcf = _open_vcf(path, samples)
    sample_names = list(samples) if samples is not None else list(vcf.samples)
    if not sample_names:
        raise VCFError(f"{path} has no samples (no genotype columns)")
    report = ReadReport(str(path))
    contig_lines = [line for line in vcf.raw_header.splitlines() if line.startswith("##contig=")]
    chrom: list[str] = []
    pos: list[int] = []
    ids: list[str] = []
    refs: list[str] = []
    alts: list[str] = []
    blocks: list[np.ndarray] = []
    seen: set[tuple[str, int, str, str]] = set()
    last: tuple[str, int] | None = None
    finished_contigs: set[str] = set()
    try:
        records: Iterable[Any] = vcf(region) if region else vcf
    except Exception as err:
        raise VCFError(f"cannot fetch region {region!r} from {path} (is it indexed?): {err}") from err
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
    vcf.close()
    report.n_kept = len(pos)
    n_samples = len(sample_names)
    if blocks:
        stacked = np.stack(blocks)  # (n_sites, n_samples, 3) int8
        alleles = np.ascontiguousarray(stacked[:, :, :2])
        alleles[alleles < 0] = MISSING
        phased = stacked[:, :, 2].astype(bool)
        del stacked
    else:
        alleles = np.zeros((0, n_samples, 2), dtype=np.int8)
        phased = np.zeros((0, n_samples), dtype=bool)
    sites = VariantSites.from_lists(chrom, pos, refs, alts, ids)
    return GenotypeData(sites, sample_names, alleles, phased, contig_lines), report


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
    return HaplotypePanel(data.sites, data.samples, haplotypes, data.contig_lines), report


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


# -- writing ---------------------------------------------------------------------------------------
def _header(
    samples: Sequence[str],
    contigs: Sequence[str],
    contig_lines: Sequence[str],
    info_lines: Sequence[str],
    format_lines: Sequence[str],
    extra_lines: Sequence[str] = (),
) -> str:
    known = {}
    for line in contig_lines:
        inner = line[len("##contig=<") :].rstrip(">")
        for part in inner.split(","):
            if part.startswith("ID="):
                known[part[3:]] = line
    lines = ["##fileformat=VCFv4.2", f"##fileDate={datetime.date.today():%Y%m%d}"]
    lines += list(extra_lines)
    lines += [known.get(c, f"##contig=<ID={c}>") for c in contigs]
    lines += list(info_lines) + list(format_lines)
    lines.append(
        "\t".join(["#CHROM", "POS", "ID", "REF", "ALT", "QUAL", "FILTER", "INFO", "FORMAT", *samples])
    )
    return "\n".join(lines) + "\n"


class VCFWriter:
    """Write a bgzipped VCF (``.vcf.gz``, readable by bcftools and tabix) or plain ``.vcf`` line by
    line, through htslib. Use as a context manager; :meth:`index` adds a ``.tbi`` afterwards."""

    def __init__(self, path: str | Path, header: str) -> None:
        cyvcf2 = require_cyvcf2()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = "wz" if self.path.name.endswith((".gz", ".bgz")) else "w"
        self._writer = cyvcf2.Writer.from_string(str(self.path), header, mode=mode)

    def write_line(self, line: str) -> None:
        self._writer.write_record(self._writer.variant_from_string(line))

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> VCFWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def index_vcf(path: str | Path) -> Path | None:
    """Write a tabix index next to a bgzipped VCF with ``bcftools`` or ``tabix`` if either is on
    PATH; returns the index path, or None when neither is installed."""
    import shutil
    import subprocess

    path = Path(path)
    for tool, args in (("bcftools", ["index", "-f", "-t"]), ("tabix", ["-f", "-p", "vcf"])):
        exe = shutil.which(tool)
        if exe:
            subprocess.run([exe, *args, str(path)], check=True, capture_output=True)
            return Path(str(path) + ".tbi")
    return None


GT_FORMAT_LINE = '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">'


def write_genotypes_vcf(
    path: str | Path,
    data: GenotypeData,
    *,
    source: str = "semiparam",
) -> Path:
    """Write genotypes (GT only) as VCF / VCF.gz; phased calls as ``a|b``, unphased as ``a/b``,
    missing alleles as ``.``. Used to hand panels and targets to other tools (Beagle, bcftools)."""
    header = _header(
        data.samples, data.sites.contigs(), data.contig_lines, [], [GT_FORMAT_LINE], [f"##source={source}"]
    )
    allele_text = np.array([".", "0", "1"], dtype=object)
    with VCFWriter(path, header) as writer:
        for i in range(data.n_sites):
            a = allele_text[data.alleles[i, :, 0].astype(np.int64) + 1]
            b = allele_text[data.alleles[i, :, 1].astype(np.int64) + 1]
            sep = np.where(data.phased[i], "|", "/")
            calls = "\t".join((a + sep + b).tolist())
            s = data.sites
            writer.write_line(
                f"{s.chrom[i]}\t{s.pos[i]}\t{s.id[i]}\t{s.ref[i]}\t{s.alt[i]}\t.\tPASS\t.\tGT\t{calls}"
            )
    return Path(path)


IMPUTED_INFO_LINES = (
    '##INFO=<ID=AF,Number=A,Type=Float,Description="Estimated ALT allele frequency in the imputed samples">',
    '##INFO=<ID=DR2,Number=A,Type=Float,Description="Dosage R-squared: estimated squared correlation '
    'between imputed and true ALT allele dose (from the haplotype ALT probabilities)">',
    '##INFO=<ID=IMP,Number=0,Type=Flag,Description="Imputed marker (not typed in the target)">',
)
IMPUTED_FORMAT_LINES = (
    GT_FORMAT_LINE,
    '##FORMAT=<ID=DS,Number=A,Type=Float,Description="Estimated ALT dose [P(RA) + 2*P(AA)]">',
    '##FORMAT=<ID=GP,Number=G,Type=Float,Description="Estimated genotype probabilities P(RR),P(RA),P(AA)">',
)
AP_FORMAT_LINES = (
    '##FORMAT=<ID=AP1,Number=A,Type=Float,Description="Estimated ALT probability of the first haplotype">',
    '##FORMAT=<ID=AP2,Number=A,Type=Float,Description="Estimated ALT probability of the second haplotype">',
)


def write_imputed_vcf(
    path: str | Path,
    sites: VariantSites,
    samples: Sequence[str],
    hap_alt_prob: np.ndarray,
    *,
    typed: np.ndarray,
    phased: bool,
    dr2: np.ndarray,
    contig_lines: Sequence[str] = (),
    source: str = "semiparam",
    decimals: int = 3,
    ap: bool = False,
) -> Path:
    """Write imputed genotypes: ``hap_alt_prob (n_sites, n_samples, 2)`` is each haplotype's ALT
    probability. Per sample: GT (``a|b`` from each haplotype's most likely allele when ``phased``,
    else ``a/b`` from the most likely genotype), DS and GP (the two haplotypes independent);
    per site INFO AF, DR2 and the IMP flag where ``typed`` (n_sites,) is False. ``ap`` adds AP1 and
    AP2, each haplotype's ALT probability (as Beagle's ``ap=true``)."""
    n_sites, n_samples = len(sites), len(samples)
    if hap_alt_prob.shape != (n_sites, n_samples, 2):
        raise ValueError(f"hap_alt_prob has shape {hap_alt_prob.shape}, expected ({n_sites}, {n_samples}, 2)")
    format_lines = IMPUTED_FORMAT_LINES + (AP_FORMAT_LINES if ap else ())
    header = _header(
        samples, sites.contigs(), contig_lines, IMPUTED_INFO_LINES, format_lines, [f"##source={source}"]
    )
    fmt = f"{{:.{decimals}f}}"
    fields = "GT:DS:GP:AP1:AP2" if ap else "GT:DS:GP"
    # Numbers are rounded to `decimals` and looked up in a table of their texts; object-array
    # concatenation then builds a block of sites at once (much faster than formatting each value).
    scale = 10**decimals
    text = np.array([f"{k / scale:.{decimals}f}" for k in range(2 * scale + 1)], dtype=object)
    gt_phased = np.array(["0|0", "0|1", "1|0", "1|1"], dtype=object)
    gt_unphased = np.array(["0/0", "0/1", "1/1"], dtype=object)
    block = 256
    with VCFWriter(path, header) as writer:
        for lo in range(0, n_sites, block):
            p = np.clip(hap_alt_prob[lo : lo + block].astype(np.float64), 0.0, 1.0)  # (B, n_samples, 2)
            a, b = p[..., 0], p[..., 1]
            gp = np.stack([(1 - a) * (1 - b), a * (1 - b) + b * (1 - a), a * b], axis=-1)  # (B, n, 3)
            if phased:
                gt = gt_phased[2 * (a > 0.5) + (b > 0.5)]
            else:
                gt = gt_unphased[gp.argmax(axis=-1)]

            def txt(x: np.ndarray) -> np.ndarray:
                return text[np.rint(x * scale).astype(np.int64)]

            calls = (
                gt + ":" + txt(a + b) + ":" + txt(gp[..., 0]) + "," + txt(gp[..., 1]) + "," + txt(gp[..., 2])
            )
            if ap:
                calls = calls + ":" + txt(a) + ":" + txt(b)
            for k in range(p.shape[0]):
                i = lo + k
                af = float(p[k].mean())
                info = f"AF={fmt.format(af)};DR2={fmt.format(float(dr2[i]))}" + ("" if typed[i] else ";IMP")
                writer.write_line(
                    f"{sites.chrom[i]}\t{sites.pos[i]}\t{sites.id[i]}\t{sites.ref[i]}\t{sites.alt[i]}\t.\tPASS\t"
                    f"{info}\t{fields}\t" + "\t".join(calls[k].tolist())
                )
    return Path(path)


__all__ = [
    "GenotypeData",
    "HaplotypePanel",
    "ReadReport",
    "VCFError",
    "VCFWriter",
    "VariantSites",
    "index_vcf",
    "read_positions",
    "read_reference_panel",
    "read_vcf",
    "write_genotypes_vcf",
    "write_imputed_vcf",
]
