"""What a VCF holds once read: :class:`VariantSites` (biallelic variants in file order),
:class:`GenotypeData` (diploid alleles and phase per site and sample), :class:`HaplotypePanel` (a
phased, complete reference panel), :class:`ReadReport` (what was skipped and why), the error type
:class:`VCFError`, and the one place the optional ``cyvcf2`` binding to htslib is imported."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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

    @classmethod
    def concat(cls, parts: Sequence[VariantSites]) -> VariantSites:
        """Sites of consecutive blocks, joined in order."""
        return cls(
            *(
                np.concatenate([getattr(p, name) for p in parts])
                for name in ("chrom", "pos", "id", "ref", "alt")
            )
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
