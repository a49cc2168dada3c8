"""Target genotypes on a reference panel's sites: which panel site each target site is, with
alleles flipped where REF and ALT are swapped, and the counts of what could not be used."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.genotypes import GenotypeData, VariantSites, VCFError


def contig_hint(target: Sequence[str], panel: Sequence[str]) -> str:
    strip = {c.removeprefix("chr") for c in target}
    if strip & {c.removeprefix("chr") for c in panel}:
        return " (they differ by a 'chr' prefix: rename with `bcftools annotate --rename-chrs`)"
    return ""


@dataclass
class TargetLookup:
    """Target genotypes by panel site key, and the counts of the alignment report.

    ``array_positions``: the typed (array) sites; None: every target site found in the panel.
    A panel site matches a target site by (chrom, pos, REF, ALT), or with REF and ALT swapped
    (the target's alleles flipped). :meth:`align` puts the targets on a block of panel sites and
    counts its ``core``; :meth:`report` gives the counts of :class:`.pipeline.AlignmentReport`.
    """

    target: GenotypeData
    array_positions: Sequence[tuple[str, int]] | None = None
    exact: dict[tuple[str, int, str, str], int] = field(init=False)
    flipped: dict[tuple[str, int, str, str], int] = field(init=False)
    positions: dict[tuple[str, int], list[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.array = set(self.array_positions) if self.array_positions is not None else None
        target_contigs = self.target.sites.contigs()
        if self.array is not None and not {c for c, _ in self.array} & set(target_contigs):
            array_contigs = sorted({c for c, _ in self.array})[:5]
            raise VCFError(
                f"the array positions file names contigs {array_contigs}, none of which is in the "
                f"target {target_contigs[:5]}{contig_hint(array_contigs, target_contigs)}"
            )
        keys = self.target.sites.keys()
        self.exact = {k: t for t, k in enumerate(keys)}
        self.flipped = {(c, p, alt, ref): t for t, (c, p, ref, alt) in enumerate(keys)}
        self.positions = {}
        for t, (c, p, _, _) in enumerate(keys):
            self.positions.setdefault((c, p), []).append(t)
        n = self.target.n_sites
        self.matched = np.zeros(n, dtype=bool)
        self.used = np.zeros(n, dtype=bool)  # matched and typed
        self.was_flipped = np.zeros(n, dtype=bool)
        self.position_seen = np.zeros(n, dtype=bool)
        self.panel_contigs: set[str] = set()

    def typable(self, sites: VariantSites) -> np.ndarray:
        """Bool per site: a target site matches it and it is an array site."""
        return np.array(
            [self._match(k) is not None and self._on_array(k[0], k[1]) for k in sites.keys()], dtype=bool
        )

    def _match(self, key: tuple[str, int, str, str]) -> tuple[int, bool] | None:
        """``(target row, flipped)`` of the target site matching panel site ``key``, or None."""
        t = self.exact.get(key)
        if t is not None:
            return t, False
        t = self.flipped.get(key)
        return None if t is None else (t, True)

    def _on_array(self, chrom: str, pos: int) -> bool:
        return self.array is None or (chrom, pos) in self.array

    def align(
        self, sites: VariantSites, core: slice = slice(None), allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(alleles (n, n_samples, 2), phased (n, n_samples), typed (n,))`` of the targets on
        ``sites``; the report counts only the ``core`` sites (each panel site once). ``allowed``
        (bool per site) restricts the typed sites further (a loaded model's)."""
        n, n_samples = len(sites), self.target.n_samples
        alleles = np.full((n, n_samples, 2), -1, dtype=np.int8)
        phased = np.ones((n, n_samples), dtype=bool)
        typed = np.zeros(n, dtype=bool)
        in_core = np.zeros(n, dtype=bool)
        in_core[core] = True
        for i, key in enumerate(sites.keys()):
            chrom, pos = key[0], key[1]
            if in_core[i]:
                self.panel_contigs.add(chrom)
                for t in self.positions.get((chrom, pos), ()):
                    self.position_seen[t] = True
            match = self._match(key)
            if match is None:
                continue
            t, flip = match
            if in_core[i]:
                self.matched[t] = True
            if not self._on_array(chrom, pos):
                continue
            if allowed is not None and not allowed[i]:
                continue
            a = self.target.alleles[t]
            if flip:
                a = np.where(a >= 0, 1 - a, a).astype(np.int8)
            alleles[i] = a
            phased[i] = self.target.phased[t]
            typed[i] = True
            if in_core[i]:
                self.used[t] = True
                self.was_flipped[t] |= flip
        return alleles, phased, typed

    def report(self) -> dict[str, Any]:
        target = self.target
        unmatched = ~self.matched
        examples: dict[str, str] = {}
        mismatch = unmatched & self.position_seen
        absent = unmatched & ~self.position_seen
        for name, mask in (("allele_mismatch", mismatch), ("not_in_panel", absent)):
            if mask.any():
                examples[name] = target.sites.label(int(np.flatnonzero(mask)[0]))
        return {
            "n_target_sites": target.n_sites,
            "n_matched": int(self.matched.sum()),
            "n_flipped": int((self.was_flipped & self.used).sum()),
            "n_allele_mismatch": int(mismatch.sum()),
            "n_not_in_panel": int(absent.sum()),
            "n_not_on_array": int((self.matched & ~self.used).sum()),
            "n_typed": int(self.used.sum()),
            "contigs_not_in_panel": [c for c in target.sites.contigs() if c not in self.panel_contigs],
            "examples": examples,
        }
