"""The haplotype-copying model: genetic maps, forward-backward, diploid phasing, phase alignment."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from semiparam._config import ConfigError
from semiparam.genomics.copying import (
    CopyingSettings,
    align_phase,
    genetic_positions,
    haploid_posteriors,
    interpolate_sites,
    phase_diploid,
    read_genetic_map,
    switch_probabilities,
)


def test_genetic_maps_in_both_formats_and_bad_lines(tmp_path: Path) -> None:
    plink = tmp_path / "plink.map"
    plink.write_text("20\t.\t0.0\t1000\n20\t.\t1.0\t2000\n")
    shapeit = tmp_path / "chr20.gmap.gz"
    with gzip.open(shapeit, "wt") as f:
        f.write("pos chr cM\n1000 20 0.0\n2000 20 1.0\n")
    for path in (plink, shapeit):
        gmap = read_genetic_map(path)
        cm = genetic_positions(
            np.array(["20", "20", "20", "21"]), np.array([1500, 2000, 3000, 5_000_000]), gmap
        )
        # interpolated; beyond the map's end extended at 1 cM/Mb; a contig the map lacks at 1 cM/Mb
        np.testing.assert_allclose(cm, [0.5, 1.0, 1.001, 5.0])
    bad = tmp_path / "bad.map"
    bad.write_text("20 . x 1000\n")
    with pytest.raises(ValueError, match="bad.map: not a genetic map line.*'20 . x 1000'"):
        read_genetic_map(bad)
    with pytest.raises(FileNotFoundError):
        read_genetic_map(tmp_path / "absent.map")


def test_switch_probabilities_grow_with_distance_and_ne() -> None:
    rho = switch_probabilities(np.array([0.0, 0.01, 0.11]), 100, 1e4)
    assert rho.shape == (2,) and 0 < rho[0] < rho[1] < 1
    assert np.all(switch_probabilities(np.array([0.0, 0.01, 0.11]), 100, 1e5) > rho)
    with pytest.raises(ConfigError):
        CopyingSettings(error=0.0)


def test_posterior_follows_the_matching_haplotype_across_a_switch() -> None:
    rng = np.random.default_rng(0)
    reference = rng.integers(0, 2, size=(60, 8)).astype(np.uint8)  # (sites, K)
    query = np.concatenate([reference[:30, 2], reference[30:, 5]]).astype(np.int8)[None, :]
    query[0, 10] = -1  # a missing allele is uninformative
    rho = np.full(59, 0.02)
    post = haploid_posteriors(query, reference, rho, 1e-3)
    assert post.shape == (60, 1, 8)
    np.testing.assert_allclose(post.sum(-1), 1.0, rtol=1e-5)
    assert post[:25, 0, 2].min() > 0.9 and post[35:, 0, 5].min() > 0.9
    # untyped sites between typed ones copy the posterior's haplotypes
    sites = np.array([5.5, 45.5])
    alleles = np.stack([reference[5], reference[45]])
    p = interpolate_sites(post, np.arange(60, dtype=float), sites, alleles)
    np.testing.assert_allclose(p[0], [reference[5, 2], reference[45, 5]], atol=0.1)


def test_diploid_phasing_recovers_the_phase_of_two_reference_haplotypes() -> None:
    rng = np.random.default_rng(1)
    reference = rng.integers(0, 2, size=(80, 30)).astype(np.uint8)
    truth = np.stack([reference[:, 3], reference[:, 17]], axis=1).astype(np.int8)  # (s, 2)
    geno = np.sort(truth, axis=1)[None]  # written 0/1: unphased
    phased = np.zeros((1, 80), dtype=bool)
    out = phase_diploid(
        geno,
        phased,
        reference,
        np.full(79, 0.01),
        CopyingSettings(ne=1e4, n_candidates=30),
        np.random.default_rng(0),
    )
    assert out.shape == (1, 2, 80)
    np.testing.assert_array_equal(out[0].sum(0), truth.sum(1))  # the genotypes are kept
    # one of the two orientations, with no switch error
    assert (out[0, 0] == truth[:, 0]).all() or (out[0, 0] == truth[:, 1]).all()


def test_phase_alignment_swaps_a_window_written_the_other_way() -> None:
    previous = np.array([[[0, 1, 1, 0], [1, 0, 1, 1]]], dtype=np.int8)
    current = previous[:, ::-1].copy()
    assert align_phase(previous, current).tolist() == [True]
    assert align_phase(previous, previous).tolist() == [False]
