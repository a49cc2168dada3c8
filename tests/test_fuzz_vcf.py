"""Property-based fuzzing of the VCF reader (``semiparam.data.vcf``).

Random valid VCFs (diploid phased/unphased/missing genotypes, multi-allelic and ALT-less records,
duplicates, several contigs) and corrupted ones (truncated text or gzip, damaged characters,
shuffled or dropped lines, wrong column counts) are written to a temporary file and read with
``read_vcf`` and ``read_reference_panel``: each either parses into consistent arrays or raises
``VCFError``. Nothing else.
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cyvcf2")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from semiparam.data.vcf import VCFError, read_reference_panel, read_vcf  # noqa: E402

SAMPLES = ["A", "B", "C"]
GENOTYPES = ["0|0", "0|1", "1|0", "1|1", "0/1", "1/1", ".|.", "./.", "0", "1|2", ".", "0|."]


def header(n_samples: int, contigs: list[str]) -> str:
    lines = ["##fileformat=VCFv4.2"]
    lines += [f"##contig=<ID={c}>" for c in contigs]
    lines.append('##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">')
    lines.append(
        "\t".join(
            ["#CHROM", "POS", "ID", "REF", "ALT", "QUAL", "FILTER", "INFO", "FORMAT"] + SAMPLES[:n_samples]
        )
    )
    return "\n".join(lines) + "\n"


@st.composite
def valid_vcf(draw: st.DrawFn) -> str:
    n_samples = draw(st.integers(1, 3))
    contigs = draw(st.lists(st.sampled_from(["20", "21", "chrX"]), min_size=1, max_size=2, unique=True))
    phased_only = draw(st.booleans())
    genotypes = st.sampled_from(["0|0", "0|1", "1|0", "1|1"] if phased_only else GENOTYPES)
    records = []
    for chrom in contigs:
        positions = sorted(draw(st.lists(st.integers(1, 10_000), max_size=6)))
        for pos in positions:
            ref = draw(st.sampled_from("ACGT"))
            alt = draw(st.sampled_from(["A", "C", "G", "T", "G,T", ".", "AT"]))
            calls = [draw(genotypes) for _ in range(n_samples)]
            records.append("\t".join([chrom, str(pos), ".", ref, alt, ".", "PASS", ".", "GT", *calls]))
    return header(n_samples, contigs) + "".join(r + "\n" for r in records)


@st.composite
def corrupted_vcf(draw: st.DrawFn) -> str:
    text = draw(valid_vcf())
    how = draw(st.sampled_from(["truncate", "damage", "shuffle", "drop", "columns", "garbage"]))
    if how == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if how == "damage":
        chars = list(text)
        for _ in range(draw(st.integers(1, 5))):
            i = draw(st.integers(0, max(len(chars) - 1, 0)))
            if chars:
                chars[i] = draw(
                    st.sampled_from(["\t", "\n", "x", "#", "|", "/", ".", "-", "9", "\x00", ",", " "])
                )
        return "".join(chars)
    lines = text.splitlines()
    if how == "shuffle":
        lines = draw(st.permutations(lines))
    elif how == "drop" and lines:
        del lines[draw(st.integers(0, len(lines) - 1))]
    elif how == "columns" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        fields = lines[i].split("\t")
        lines[i] = "\t".join(
            fields[: draw(st.integers(0, len(fields)))] + draw(st.lists(st.just("0|1"), max_size=2))
        )
    elif how == "garbage":
        return draw(st.text(max_size=200))
    return "\n".join(lines) + "\n"


def read_both(text: str | bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{suffix}"
        if isinstance(text, str):
            text = text.encode()
        path.write_bytes(gzip.compress(text) if suffix == ".vcf.gz" else text)
        try:
            data, report = read_vcf(path)
        except VCFError:
            pass
        else:
            n_sites, n_samples = len(data.sites), len(data.samples)
            assert data.alleles.shape == (n_sites, n_samples, 2) and data.phased.shape == (n_sites, n_samples)
            assert set(np.unique(data.alleles).tolist()) <= {-1, 0, 1}
            assert report.n_kept == n_sites
            for chrom in set(data.sites.chrom.tolist()):  # sorted within each contig
                assert (np.diff(data.sites.pos[data.sites.chrom == chrom]) >= 0).all()
        try:
            panel, report = read_reference_panel(path)
        except VCFError:
            return
        assert panel.haplotypes.shape == (len(panel.sites), 2 * len(panel.samples))
        assert set(np.unique(panel.haplotypes).tolist()) <= {0, 1}


FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


HEAD1 = header(1, ["20"])


@FUZZ
@given(valid_vcf(), st.sampled_from([".vcf", ".vcf.gz"]))
# found by this test: allele 2 of a record with one ALT went through as an allele code of 2
@example(HEAD1 + "20\t1\t.\tA\tG\t.\tPASS\t.\tGT\t1|2\n", ".vcf")
def test_valid_vcfs_parse_or_raise_vcferror(text: str, suffix: str) -> None:
    read_both(text, suffix)


@FUZZ
@given(corrupted_vcf(), st.sampled_from([".vcf", ".vcf.gz"]))
# found by this test: cyvcf2's bare Exception escaped on a truncated record or genotype column
@example(HEAD1 + "20", ".vcf")
@example(HEAD1 + "20\t1\t.\tA\tA\t.\tPASS\t", ".vcf")
def test_corrupted_vcfs_raise_vcferror(text: str, suffix: str) -> None:
    read_both(text, suffix)


@FUZZ
@given(valid_vcf(), st.data())
def test_truncated_gzip_raises_vcferror(text: str, data: st.DataObject) -> None:
    raw = gzip.compress(text.encode())
    cut = data.draw(st.integers(0, len(raw) - 1))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cut.vcf.gz"
        path.write_bytes(raw[:cut])
        try:
            read_vcf(path)
        except VCFError:
            pass
