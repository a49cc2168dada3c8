"""VCF reading, writing and site matching on small generated files."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cyvcf2")

from semiparam.data.vcf import (  # noqa: E402
    VCFError,
    read_positions,
    read_reference_panel,
    read_vcf,
)
from semiparam.data.vcf_writer import write_genotypes_vcf, write_imputed_vcf  # noqa: E402
from semiparam.genomics.pipeline import align_targets  # noqa: E402
from semiparam.genomics.simulate import simulate_panel  # noqa: E402

HEADER = (
    "##fileformat=VCFv4.2\n##contig=<ID=20>\n"
    '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">\n'
    "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tA\tB\n"
)


def write_text_vcf(path: Path, records: list[str], header: str = HEADER) -> Path:
    path.write_text(header + "".join(r + "\n" for r in records))
    return path


def rec(pos: int, ref: str, alt: str, a: str, b: str, chrom: str = "20") -> str:
    return f"{chrom}\t{pos}\t.\t{ref}\t{alt}\t.\tPASS\t.\tGT\t{a}\t{b}"


@pytest.mark.parametrize("suffix", [".vcf", ".vcf.gz"])
def test_panel_round_trip(tmp_path: Path, suffix: str) -> None:
    panel = simulate_panel(6, 40, seed=0)
    path = write_genotypes_vcf(tmp_path / f"ref{suffix}", panel.as_genotypes())
    back, report = read_reference_panel(path)
    assert report.n_kept == 40 and back.samples == panel.samples
    np.testing.assert_array_equal(back.haplotypes, panel.haplotypes)
    np.testing.assert_array_equal(back.sites.pos, panel.sites.pos)
    assert back.sites.ref.tolist() == panel.sites.ref.tolist()
    if suffix == ".vcf.gz":
        with open(path, "rb") as handle:
            assert handle.read(4) == b"\x1f\x8b\x08\x04"  # BGZF: gzip with the extra field


def test_multiallelic_records_are_skipped_or_rejected(tmp_path: Path) -> None:
    path = write_text_vcf(
        tmp_path / "m.vcf",
        [
            rec(100, "A", "G", "0|1", "1|1"),
            rec(200, "C", "T,G", "0|2", "1|0"),
            rec(300, "G", "A", "0|0", "0|1"),
        ],
    )
    data, report = read_vcf(path)
    assert data.n_sites == 2 and report.n_multiallelic == 1
    assert "bcftools norm" in report.summary()
    with pytest.raises(VCFError, match="20:200 is multi-allelic"):
        read_vcf(path, multiallelic="error")


def test_missing_and_unphased_genotypes(tmp_path: Path) -> None:
    path = write_text_vcf(
        tmp_path / "t.vcf", [rec(100, "A", "G", "0/1", "./."), rec(200, "C", "T", "1|0", "0|.")]
    )
    data, _ = read_vcf(path)
    np.testing.assert_array_equal(data.alleles[:, 0], [[0, 1], [1, 0]])
    np.testing.assert_array_equal(data.alleles[:, 1], [[-1, -1], [0, -1]])
    assert data.phased.tolist() == [[False, False], [True, True]]
    with pytest.raises(VCFError, match="missing genotype.*sample B at 20:100"):
        read_reference_panel(path)
    unphased = write_text_vcf(tmp_path / "u.vcf", [rec(100, "A", "G", "0|1", "1/0")])
    with pytest.raises(VCFError, match="unphased heterozygous.*sample B"):
        read_reference_panel(unphased)
    homs = write_text_vcf(tmp_path / "h.vcf", [rec(100, "A", "G", "0/0", "1/1")])
    panel, _ = read_reference_panel(homs)  # unphased homozygotes are unambiguous
    np.testing.assert_array_equal(panel.haplotypes, [[0, 0, 1, 1]])


def test_unsorted_haploid_and_missing_files(tmp_path: Path) -> None:
    unsorted = write_text_vcf(
        tmp_path / "s.vcf", [rec(200, "A", "G", "0|1", "0|0"), rec(100, "C", "T", "0|1", "0|0")]
    )
    with pytest.raises(VCFError, match="not sorted"):
        read_vcf(unsorted)
    haploid = write_text_vcf(tmp_path / "x.vcf", [rec(100, "A", "G", "0", "1")])
    with pytest.raises(VCFError, match="non-diploid"):
        read_vcf(haploid)
    with pytest.raises(FileNotFoundError):
        read_vcf(tmp_path / "nope.vcf.gz")
    with pytest.raises(VCFError, match="sample"):
        read_vcf(unsorted, samples=["A", "Z"])


def test_read_positions_formats(tmp_path: Path) -> None:
    plain = tmp_path / "p.txt"
    plain.write_text("chrom\tpos\n20\t100\n# comment\n20 200\n20:300\n")
    assert read_positions(plain) == [("20", 100), ("20", 200), ("20", 300)]
    gz = tmp_path / "p.gz"
    with gzip.open(gz, "wt") as handle:
        handle.write("20\t5\n")
    assert read_positions(gz) == [("20", 5)]
    bad = tmp_path / "b.txt"
    bad.write_text("20\t1\n20\tx\n")
    with pytest.raises(VCFError, match="line 2"):
        read_positions(bad)


def test_align_targets_flips_drops_and_counts(tmp_path: Path) -> None:
    ref = write_text_vcf(
        tmp_path / "ref.vcf",
        [
            rec(100, "A", "G", "0|1", "1|1"),
            rec(200, "C", "T", "0|0", "0|1"),
            rec(300, "G", "A", "1|0", "0|0"),
        ],
    )
    target = write_text_vcf(
        tmp_path / "tgt.vcf",
        [
            rec(100, "A", "G", "0|1", "1|1"),  # exact
            rec(200, "T", "C", "1|1", "0|1"),  # REF/ALT swapped -> flipped
            rec(300, "G", "C", "0|1", "0|0"),  # other alleles -> dropped
            rec(400, "A", "T", "0|1", "0|0"),  # not in panel
        ],
    )
    panel, _ = read_reference_panel(ref)
    data, _ = read_vcf(target)
    aligned = align_targets(panel.sites, data)
    r = aligned.report
    assert (r.n_matched, r.n_flipped, r.n_allele_mismatch, r.n_not_in_panel) == (2, 1, 1, 1)
    assert aligned.typed.tolist() == [True, True, False]
    np.testing.assert_array_equal(aligned.alleles[1], [[0, 0], [1, 0]])  # flipped
    assert (aligned.alleles[2] == -1).all()
    only_first = align_targets(panel.sites, data, array_positions=[("20", 100)])
    assert only_first.typed.tolist() == [True, False, False] and only_first.report.n_not_on_array == 1


def test_contig_mismatch_error_names_the_fix(tmp_path: Path) -> None:
    ref = write_text_vcf(tmp_path / "ref.vcf", [rec(100, "A", "G", "0|1", "1|1")])
    header = HEADER.replace("ID=20", "ID=chr20")
    target = write_text_vcf(tmp_path / "tgt.vcf", [rec(100, "A", "G", "0|1", "1|1", chrom="chr20")], header)
    panel, _ = read_reference_panel(ref)
    data, _ = read_vcf(target)
    with pytest.raises(VCFError, match="'chr' prefix"):
        align_targets(panel.sites, data)


def test_imputed_vcf_fields(tmp_path: Path) -> None:
    panel = simulate_panel(3, 5, seed=0)
    probs = np.random.default_rng(0).random((5, 3, 2)).astype(np.float32)
    typed = np.array([True, False, False, True, False])
    out = write_imputed_vcf(
        tmp_path / "imp.vcf.gz",
        panel.sites,
        panel.samples,
        probs,
        typed=typed,
        phased=True,
        dr2=np.linspace(0, 1, 5),
        ap=True,
    )
    import cyvcf2

    vcf = cyvcf2.VCF(str(out))
    records = list(vcf)
    assert len(records) == 5
    ds = np.stack([r.format("DS")[:, 0] for r in records])
    np.testing.assert_allclose(ds, probs.sum(-1), atol=1e-3)
    gp = np.stack([r.format("GP") for r in records])
    np.testing.assert_allclose(gp.sum(-1), 1.0, atol=3e-3)
    assert [r.INFO.get("IMP") is not None for r in records] == (~typed).tolist()
    ap = np.stack([np.concatenate([r.format("AP1"), r.format("AP2")], axis=1) for r in records])
    np.testing.assert_allclose(ap, probs, atol=1e-3)
    assert records[0].gt_phases.all()
    if shutil.which("bcftools"):
        shown = subprocess.run(
            ["bcftools", "query", "-f", "%POS\\t%INFO/DR2[\\t%GT]\\n", str(out)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        assert len(shown) == 5 and shown[-1].split("\t")[1] == "1"


def test_region_needs_and_uses_an_index(tmp_path: Path) -> None:
    from semiparam.data.vcf_writer import index_vcf

    panel = simulate_panel(3, 30, seed=2)
    path = write_genotypes_vcf(tmp_path / "r.vcf.gz", panel.as_genotypes())
    lo, hi = int(panel.sites.pos[10]), int(panel.sites.pos[19])
    if index_vcf(path) is None:
        pytest.skip("neither bcftools nor tabix is installed")
    data, _ = read_vcf(path, region=f"20:{lo}-{hi}")
    np.testing.assert_array_equal(data.sites.pos, panel.sites.pos[10:20])
    (tmp_path / "r.vcf.gz.tbi").unlink()
    with pytest.raises(VCFError, match="needs an index"):
        read_vcf(path, region=f"20:{lo}-{hi}")
