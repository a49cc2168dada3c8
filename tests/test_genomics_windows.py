"""Windows, K-mer tokens, metrics and phasing: pure numpy, no VCF library needed."""

from __future__ import annotations

import numpy as np
import pytest

from semiparam._config import ConfigError
from semiparam.genomics.metrics import (
    dosage_r2_estimate,
    evaluate_imputation,
    genotype_concordance,
    pooled_r2,
    r2_by_maf,
)
from semiparam.genomics.phasing import phase_window
from semiparam.genomics.simulate import simulate_haplotypes, simulate_panel, split_samples
from semiparam.genomics.windows import (
    WindowSpec,
    bit_table,
    gather_bits,
    plan_windows,
    token_bit_probabilities,
    tokenize,
)


def test_tokens_round_trip_through_one_hot_probabilities() -> None:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, size=(7, 15)).astype(np.int8)
    tokens = tokenize(bits, 5)
    assert tokens.shape == (7, 3) and tokens.min() >= 0 and tokens.max() < 32
    one_hot = np.eye(32)[tokens]  # (7, 3, 32)
    np.testing.assert_array_equal(token_bit_probabilities(one_hot, 5), bits)


def test_missing_bit_makes_the_token_missing() -> None:
    bits = np.array([[1, 0, 1, 0, 0, -1, 1, 1, 1, 1]], dtype=np.int8)
    np.testing.assert_array_equal(tokenize(bits, 5), [[5, -1]])


def test_marginal_is_sum_over_classes_with_the_bit_set() -> None:
    rng = np.random.default_rng(1)
    proba = rng.dirichlet(np.ones(8), size=(4, 2))  # kmer 3
    got = token_bit_probabilities(proba, 3)
    table = bit_table(3)
    for j in range(3):
        np.testing.assert_allclose(got[:, j], proba[:, 0, table[:, j] == 1].sum(-1))


def test_observed_bits_condition_the_missing_ones() -> None:
    # two classes carry all the mass: 0b011 (bits 1,1,0) and 0b100 (bits 0,0,1)
    proba = np.zeros((1, 1, 8))
    proba[0, 0, 3], proba[0, 0, 4] = 0.5, 0.5
    observed = np.array([[1, -1, -1]])  # bit 0 known to be 1 -> only class 3 agrees
    np.testing.assert_allclose(token_bit_probabilities(proba, 3, observed), [[1.0, 1.0, 0.0]])


def test_windows_cover_every_target_with_fixed_shape() -> None:
    rng = np.random.default_rng(2)
    n = 400
    pos = np.sort(rng.choice(10**6, n, replace=False))
    chrom = np.array(["20"] * 250 + ["21"] * 150, dtype=object)
    is_array = rng.random(n) < 0.25
    is_target = ~is_array
    spec = WindowSpec(n_inputs=20, window_targets=30, overlap=6, kmer=5)
    windows = plan_windows(chrom, pos, is_array, is_target, spec)
    covered = np.zeros(n, dtype=bool)
    for w in windows:
        assert w.inputs.shape == (spec.input_slots,) and w.targets.shape == (spec.target_slots,)
        real_t, real_i = w.targets[w.targets >= 0], w.inputs[w.inputs >= 0]
        assert is_target[real_t].all() and is_array[real_i].all()
        assert (chrom[real_t] == w.contig).all() and (chrom[real_i] == w.contig).all()
        assert (np.diff(real_t) > 0).all() and (np.diff(real_i) > 0).all()
        covered[real_t] = True
    assert covered[is_target].all()


def test_window_inputs_are_the_nearest_array_sites() -> None:
    pos = np.arange(100) * 100
    is_array = np.zeros(100, dtype=bool)
    is_array[::4] = True  # array sites every 400 bp
    is_target = ~is_array
    spec = WindowSpec(n_inputs=5, window_targets=5, overlap=0, kmer=5)
    w = plan_windows(np.array(["1"] * 100, dtype=object), pos, is_array, is_target, spec)[10]
    centre = pos[w.targets].mean()
    chosen = set(w.inputs.tolist())
    others = [i for i in np.flatnonzero(is_array) if i not in chosen]
    assert max(abs(pos[list(chosen)] - centre)) <= min(abs(pos[others] - centre)) + 400


def test_short_contig_is_padded() -> None:
    pos = np.arange(12) * 10
    is_array = np.array([1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0], dtype=bool)
    spec = WindowSpec(n_inputs=10, window_targets=20, overlap=5, kmer=5)
    (w,) = plan_windows(np.array(["1"] * 12, dtype=object), pos, is_array, ~is_array, spec)
    assert (w.inputs >= 0).sum() == 3 and (w.targets >= 0).sum() == 9
    assert (w.target_weights[w.targets < 0] == 0).all()
    bits = gather_bits(np.ones((12, 2), dtype=np.int8), w.inputs)
    assert bits.shape == (2, 10) and bits[:, 3:].sum() == 0  # padding slots are constant 0


def test_contig_without_array_site_raises() -> None:
    with pytest.raises(ValueError, match="no typed"):
        plan_windows(
            np.array(["1", "1"], dtype=object),
            np.array([1, 2]),
            np.array([False, False]),
            np.array([True, True]),
            WindowSpec(n_inputs=5, window_targets=5, overlap=0),
        )


def test_window_spec_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="overlap"):
        WindowSpec(window_targets=10, overlap=10)
    with pytest.raises(ConfigError, match="kmer"):
        WindowSpec(kmer=0)


def test_pooled_r2_and_bins() -> None:
    truth = np.array([[0, 1, 1, 0], [1, 1, 0, 0]], dtype=float)
    assert pooled_r2(truth, truth) == pytest.approx(1.0)
    assert pooled_r2(truth, 1 - truth) == pytest.approx(1.0)  # r = -1
    assert np.isnan(pooled_r2(truth, np.zeros_like(truth)))
    bins = r2_by_maf(truth, truth, np.array([0.3, 0.004]), bins=(0, 0.005, 0.5))
    assert [b["n_sites"] for b in bins] == [1, 1]


def test_concordance_and_dr2() -> None:
    gp = np.array([[[0.9, 0.1, 0.0], [0.1, 0.8, 0.1], [0.0, 0.2, 0.8]]])
    out = genotype_concordance(np.array([[0, 1, 1]]), gp)
    assert out["concordance"] == pytest.approx(2 / 3) and out["nonref_concordance"] == pytest.approx(1 / 2)
    sharp = np.array([[0.0, 1.0, 0.0, 1.0]])
    vague = np.array([[0.5, 0.5, 0.5, 0.5]])
    assert dosage_r2_estimate(sharp)[0] == pytest.approx(1.0)
    assert dosage_r2_estimate(vague)[0] == pytest.approx(0.0)


def test_evaluate_imputation_perfect() -> None:
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, size=(20, 6, 2))
    res = evaluate_imputation(truth, truth.astype(float), np.full(20, 0.3))
    assert res["r2_dosage"] == pytest.approx(1.0) and res["concordance"] == 1.0


def test_simulated_panel_has_linkage() -> None:
    pos, haps = simulate_haplotypes(200, 300, seed=0, min_maf=0.05)
    assert haps.shape == (300, 200) and haps.dtype == np.uint8
    assert (np.diff(pos) > 0).all()
    f = haps.mean(axis=1)
    assert (np.minimum(f, 1 - f) > 0.05).all()
    # neighbouring sites are more correlated than distant ones (founder segments)
    c = np.corrcoef(haps.astype(float))
    near = np.mean(np.abs(np.diagonal(c, 1)))
    far = np.mean(np.abs(np.diagonal(c, 150)))
    assert near > 1.5 * far
    panel = simulate_panel(10, 50, seed=1)
    ref, test = split_samples(panel.samples, 3, seed=0)
    assert len(test) == 3 and not set(ref) & set(test)


def test_phase_window_recovers_a_pair_of_reference_haplotypes() -> None:
    rng = np.random.default_rng(4)
    ref = rng.integers(0, 2, size=(30, 40))
    a, b = ref[3], ref[17]
    # unphased genotype: het alleles written in a scrambled order
    swap = rng.random(40) < 0.5
    first, second = np.where(swap, b, a), np.where(swap, a, b)
    geno = np.stack([first, second], axis=-1)[None].astype(np.int8)  # (1, 40, 2)
    phased = np.zeros((1, 40), dtype=bool)
    out = phase_window(geno, phased, ref)
    got = {tuple(out[0, 0]), tuple(out[0, 1])}
    assert got == {tuple(a), tuple(b)}
    np.testing.assert_array_equal(out[0].sum(0), a + b)  # genotypes unchanged
