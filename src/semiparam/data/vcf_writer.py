"""Writing VCFs: bgzipped or plain text through htslib (:class:`VCFWriter`), genotypes as read
(:func:`write_genotypes_vcf`), imputed dosages and probabilities with Beagle's INFO and FORMAT
fields (:func:`write_imputed_vcf`), and a tabix index when bcftools or tabix is installed."""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .genotypes import GenotypeData, VariantSites, require_cyvcf2


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
    """Write a tabix index (``.tbi``) next to a bgzipped VCF with pysam (htslib, in process);
    returns the index path, or None when pysam is not installed (``pip install
    'semiparam[genomics]'``)."""
    try:
        import pysam
    except ModuleNotFoundError:
        return None
    path = Path(path)
    pysam.tabix_index(str(path), preset="vcf", force=True, keep_original=True)
    return Path(str(path) + ".tbi")


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
    header = imputed_vcf_header(samples, sites.contigs(), contig_lines, source=source, ap=ap)
    with VCFWriter(path, header) as writer:
        for line in imputed_vcf_lines(
            sites, hap_alt_prob, typed=typed, phased=phased, dr2=dr2, decimals=decimals, ap=ap
        ):
            writer.write_line(line)
    return Path(path)


def imputed_vcf_header(
    samples: Sequence[str],
    contigs: Sequence[str],
    contig_lines: Sequence[str] = (),
    *,
    source: str = "semiparam",
    ap: bool = False,
) -> str:
    """The header of :func:`write_imputed_vcf`'s files."""
    format_lines = IMPUTED_FORMAT_LINES + (AP_FORMAT_LINES if ap else ())
    return _header(samples, contigs, contig_lines, IMPUTED_INFO_LINES, format_lines, [f"##source={source}"])


def imputed_vcf_lines(
    sites: VariantSites,
    hap_alt_prob: np.ndarray,
    *,
    typed: np.ndarray,
    phased: bool,
    dr2: np.ndarray,
    decimals: int = 3,
    ap: bool = False,
) -> Iterator[str]:
    """The records of :func:`write_imputed_vcf` as text lines (no newline), a block of sites at a
    time, so a caller can write them in pieces (``semiparam impute-vcf`` on whole chromosomes)."""
    n_sites = len(sites)
    fmt = f"{{:.{decimals}f}}"
    fields = "GT:DS:GP:AP1:AP2" if ap else "GT:DS:GP"
    # Numbers are rounded to `decimals` and looked up in a table of their texts; object-array
    # concatenation then builds a block of sites at once (much faster than formatting each value).
    scale = 10**decimals
    text = np.array([f"{k / scale:.{decimals}f}" for k in range(2 * scale + 1)], dtype=object)
    gt_phased = np.array(["0|0", "0|1", "1|0", "1|1"], dtype=object)
    gt_unphased = np.array(["0/0", "0/1", "1/1"], dtype=object)
    block = 256

    def txt(x: np.ndarray) -> np.ndarray:
        return text[np.rint(x * scale).astype(np.int64)]

    for lo in range(0, n_sites, block):
        p = np.clip(hap_alt_prob[lo : lo + block].astype(np.float64), 0.0, 1.0)  # (B, n_samples, 2)
        a, b = p[..., 0], p[..., 1]
        gp = np.stack([(1 - a) * (1 - b), a * (1 - b) + b * (1 - a), a * b], axis=-1)  # (B, n, 3)
        if phased:
            gt = gt_phased[2 * (a > 0.5) + (b > 0.5)]
        else:
            gt = gt_unphased[gp.argmax(axis=-1)]
        calls = gt + ":" + txt(a + b) + ":" + txt(gp[..., 0]) + "," + txt(gp[..., 1]) + "," + txt(gp[..., 2])
        if ap:
            calls = calls + ":" + txt(a) + ":" + txt(b)
        for k in range(p.shape[0]):
            i = lo + k
            af = float(p[k].mean())
            info = f"AF={fmt.format(af)};DR2={fmt.format(float(dr2[i]))}" + ("" if typed[i] else ";IMP")
            yield (
                f"{sites.chrom[i]}\t{sites.pos[i]}\t{sites.id[i]}\t{sites.ref[i]}\t{sites.alt[i]}\t.\tPASS\t"
                f"{info}\t{fields}\t" + "\t".join(calls[k].tolist())
            )


__all__ = [
    "VCFWriter",
    "imputed_vcf_header",
    "imputed_vcf_lines",
    "index_vcf",
    "write_genotypes_vcf",
    "write_imputed_vcf",
]
