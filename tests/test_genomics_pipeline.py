"""GenotypeImputer and the VCF-to-VCF pipeline on small simulated panels."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from semiparam._config import ConfigError
from semiparam.genomics import (
    GenotypeImputer,
    evaluate_imputation,
    minor_allele_frequency,
    simulate_panel,
    split_samples,
)
from semiparam.models.registry import model_names

TINY = {"n_inputs": 10, "window_targets": 20, "overlap": 5, "kmer": 5}
TINY_MODEL = {"npt": {"d_embedding": 4, "n_heads": 1}, "spin": {"d_embedding": 4, "n_heads": 1}}


@pytest.fixture(scope="module")
def split() -> dict[str, object]:
    panel = simulate_panel(70, 120, seed=5, min_maf=0.03)
    ref_names, test_names = split_samples(panel.samples, 10, seed=0)
    rng = np.random.default_rng(0)
    typed = np.zeros(panel.n_sites, dtype=bool)
    typed[np.sort(rng.choice(panel.n_sites, 30, replace=False))] = True
    return {
        "panel": panel,
        "ref": panel.subset_samples(ref_names),
        "test": panel.subset_samples(test_names),
        "typed": typed,
    }


def _query(split: dict[str, object]) -> np.ndarray:
    test, typed = split["test"], split["typed"]
    return np.where(typed[:, None], test.haplotypes.astype(np.int8), -1)  # type: ignore[union-attr,index]


def _dosage_r2(split: dict[str, object], probs: np.ndarray) -> float:
    typed = split["typed"]
    ev = ~typed  # type: ignore[operator]
    truth = split["test"].haplotypes[ev]  # type: ignore[union-attr]
    maf = minor_allele_frequency(split["ref"].haplotypes)[ev]  # type: ignore[union-attr]
    n = int(ev.sum())
    return float(evaluate_imputation(truth.reshape(n, -1, 2), probs[ev].reshape(n, -1, 2), maf)["r2_dosage"])


def test_knn_imputes_far_better_than_allele_frequency(split: dict[str, object]) -> None:
    imp = GenotypeImputer("knn", **TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    probs = imp.impute_haplotypes(_query(split))
    assert probs.shape == split["test"].haplotypes.shape  # type: ignore[union-attr]
    assert np.all((probs >= 0) & (probs <= 1))
    typed = split["typed"]
    np.testing.assert_array_equal(probs[typed], split["test"].haplotypes[typed])  # type: ignore[index,union-attr]
    assert _dosage_r2(split, probs) > 0.5


@pytest.mark.parametrize("model", ["npt", "spin"])
@pytest.mark.parametrize("mode", ["per_window", "shared"])
def test_table_models_train_and_impute(split: dict[str, object], model: str, mode: str) -> None:
    if model not in model_names():
        pytest.skip(f"{model} is not registered")
    imp = GenotypeImputer(
        model, mode=mode, max_steps=4, model_options=TINY_MODEL[model], random_state=1, **TINY
    ).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    assert len(imp.learners_) == (len(imp.windows_) if mode == "per_window" else 1)
    probs = imp.impute_haplotypes(_query(split))
    assert np.isfinite(probs).all() and np.all((probs >= 0) & (probs <= 1))
    untyped = ~split["typed"]  # type: ignore[operator]
    assert probs[untyped].std() > 0  # not a constant answer


def test_missing_typed_genotypes_are_filled(split: dict[str, object]) -> None:
    imp = GenotypeImputer("knn", **TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    query = _query(split)
    typed_idx = np.flatnonzero(split["typed"])  # type: ignore[arg-type]
    query[typed_idx[3], 0] = -1
    probs = imp.impute_haplotypes(query)
    assert 0.0 <= probs[typed_idx[3], 0] <= 1.0
    assert probs[typed_idx[3], 1] == query[typed_idx[3], 1]


def test_unphased_targets_error_or_phase(split: dict[str, object]) -> None:
    test = split["test"]
    alleles = np.where(split["typed"][:, None, None], test.as_genotypes().alleles, -1)  # type: ignore[index,union-attr]
    phased = np.zeros(alleles.shape[:2], dtype=bool)
    alleles = np.sort(alleles, axis=2)  # written 0/1: the phase is not known
    imp = GenotypeImputer("knn", unphased="error", **TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unphased heterozygous"):
        imp.impute(alleles, phased)
    typed = split["typed"]
    ev = ~typed  # type: ignore[operator]
    true_dose = test.as_genotypes().alleles[ev].sum(-1)  # type: ignore[union-attr]
    for model, unphased in (("knn", "match"), ("knn", "phase"), ("copy", "phase")):
        imp = GenotypeImputer(model, unphased=unphased, **TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
        probs = imp.impute(alleles, phased)
        dose = probs.sum(-1)
        np.testing.assert_array_equal(dose[typed], alleles[typed].sum(-1))  # type: ignore[index]
        assert np.corrcoef(true_dose.ravel(), dose[ev].ravel())[0, 1] ** 2 > 0.4, (model, unphased)


def test_copying_is_the_default_and_beats_knn(split: dict[str, object]) -> None:
    imp = GenotypeImputer(**TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    assert imp.model == "copy" and imp.unphased == "phase" and imp.learners_ == []
    assert imp.copying_.ne is not None  # picked on held-out reference samples
    probs = imp.impute_haplotypes(_query(split))
    typed = split["typed"]
    np.testing.assert_array_equal(probs[typed], split["test"].haplotypes[typed])  # type: ignore[index,union-attr]
    assert np.all((probs >= 0) & (probs <= 1))
    knn = GenotypeImputer("knn", **TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    assert _dosage_r2(split, probs) > _dosage_r2(split, knn.impute_haplotypes(_query(split)))


def test_copying_settings_are_checked(split: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="unknown copying setting"):
        GenotypeImputer(copying={"nee": 1}).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="error must be in"):
        GenotypeImputer(copying={"error": 0.7}).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unphased must be one of"):
        GenotypeImputer(unphased="guess").fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    imp = GenotypeImputer(copying={"ne": 5e4}, **TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    assert imp.copying_.ne == 5e4  # given: not picked


def test_bad_parameters_raise(split: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="unknown model"):
        GenotypeImputer("nope").fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="mode"):
        GenotypeImputer("knn", mode="both").fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="typed has shape"):
        GenotypeImputer("knn").fit(split["ref"], np.ones(3, dtype=bool))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="not fitted"):
        GenotypeImputer("knn").impute(np.zeros((3, 1, 2), dtype=np.int8))


def test_save_load_copying_predicts_the_same(split: dict[str, object], tmp_path: Path) -> None:
    imp = GenotypeImputer(**TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    test, typed = split["test"], split["typed"]
    alleles = np.sort(np.where(typed[:, None, None], test.as_genotypes().alleles, -1), axis=2)  # type: ignore[index,union-attr]
    phased = np.zeros(alleles.shape[:2], dtype=bool)
    before = imp.impute(alleles, phased)
    imp.save(tmp_path / "copy")
    loaded = GenotypeImputer.load(tmp_path / "copy")
    assert loaded.copying_ == imp.copying_
    np.testing.assert_allclose(loaded.impute(alleles, phased), before, atol=1e-6)


@pytest.mark.parametrize("mode", ["per_window", "shared"])
def test_save_load_predicts_the_same(split: dict[str, object], tmp_path: Path, mode: str) -> None:
    model = "spin" if "spin" in model_names() else "npt"
    imp = GenotypeImputer(model, mode=mode, max_steps=3, model_options=TINY_MODEL[model], **TINY).fit(
        split["ref"], split["typed"]
    )  # type: ignore[arg-type]
    imp.save(tmp_path / "fresh")  # saving right after fit works too
    query = _query(split)
    before = imp.impute_haplotypes(query)
    imp.save(tmp_path / "imp")
    loaded = GenotypeImputer.load(tmp_path / "imp")
    np.testing.assert_allclose(loaded.impute_haplotypes(query), before, atol=1e-5)


# -- VCF to VCF --------------------------------------------------------------------------------
cyvcf2 = pytest.importorskip("cyvcf2")


@pytest.fixture(scope="module")
def vcf_files(tmp_path_factory: pytest.TempPathFactory, split: dict[str, object]) -> dict[str, Path]:
    from semiparam.data.vcf_writer import write_genotypes_vcf

    root = tmp_path_factory.mktemp("vcf")
    typed = split["typed"]
    write_genotypes_vcf(root / "ref.vcf.gz", split["ref"].as_genotypes())  # type: ignore[union-attr]
    test = split["test"].as_genotypes()  # type: ignore[union-attr]
    write_genotypes_vcf(root / "target.vcf.gz", test.subset_sites(np.flatnonzero(typed)))  # type: ignore[arg-type]
    write_genotypes_vcf(root / "truth.vcf.gz", test)
    panel = split["panel"]
    positions = panel.sites.pos[typed]  # type: ignore[union-attr,index]
    (root / "array.txt").write_text("".join(f"20\t{p}\n" for p in positions[::2]))
    return {k: root / f"{k}.vcf.gz" for k in ("ref", "target", "truth")} | {"array": root / "array.txt"}


def test_cli_imputes_a_vcf(vcf_files: dict[str, Path], tmp_path: Path, split: dict[str, object]) -> None:
    from semiparam.cli.main import main

    out = tmp_path / "imputed.vcf.gz"
    code = main(
        [
            "impute-vcf",
            "--ref",
            str(vcf_files["ref"]),
            "--target",
            str(vcf_files["target"]),
            "--out",
            str(out),
            "--model",
            "knn",
            "--n-inputs",
            "10",
            "--window-targets",
            "20",
            "--overlap",
            "5",
            "--quiet",
        ]
    )
    assert code == 0 and out.exists()
    records = list(cyvcf2.VCF(str(out)))
    panel = split["panel"]
    assert len(records) == panel.n_sites  # type: ignore[union-attr]
    assert {"GT", "DS", "GP"} <= set(records[0].FORMAT)
    typed = split["typed"]
    assert [r.INFO.get("IMP") is None for r in records] == typed.tolist()  # type: ignore[union-attr]
    summary = (tmp_path / "imputed.vcf.gz.summary.json").read_text()
    assert '"n_typed": 30' in summary
    if shutil.which("bcftools"):
        stats = subprocess.run(
            ["bcftools", "stats", str(out)], capture_output=True, text=True, check=True
        ).stdout
        assert f"number of records:\t{panel.n_sites}" in stats  # type: ignore[union-attr]


def test_bcftools_reads_the_output(
    vcf_files: dict[str, Path], tmp_path: Path, split: dict[str, object]
) -> None:
    """The bcftools that pysam bundles (htslib's own reader) views, queries and indexes our VCF."""
    pysam = pytest.importorskip("pysam")
    from pysam import bcftools

    from semiparam.genomics import impute_vcf

    out = tmp_path / "imputed.vcf.gz"
    summary = impute_vcf(
        vcf_files["ref"], vcf_files["target"], out, ap=True, n_inputs=10, window_targets=20, overlap=5
    )
    assert summary["index"] == str(out) + ".tbi" and Path(summary["index"]).exists()
    panel = split["panel"]
    n_sites = panel.n_sites  # type: ignore[union-attr]
    body = bcftools.view("-H", str(out))
    assert len(body.splitlines()) == n_sites
    header = bcftools.view("-h", str(out))
    for tag in (
        "INFO=<ID=DR2",
        "INFO=<ID=AF",
        "INFO=<ID=IMP",
        "FORMAT=<ID=GT",
        "FORMAT=<ID=DS",
        "FORMAT=<ID=GP",
        "FORMAT=<ID=AP1",
        "FORMAT=<ID=AP2",
    ):
        assert tag in header, tag
    rows = bcftools.query("-f", "%POS\t%INFO/DR2\t%INFO/AF[\t%DS]\n", str(out)).splitlines()
    assert len(rows) == n_sites
    values = np.array([[float(x) for x in r.split("\t")] for r in rows])
    np.testing.assert_array_equal(values[:, 0], panel.sites.pos)  # type: ignore[union-attr]
    assert np.all((values[:, 3:] >= 0) & (values[:, 3:] <= 2))
    np.testing.assert_allclose(values[:, 2], values[:, 3:].mean(axis=1) / 2, atol=2e-3)  # AF = mean DS / 2
    # a region query through the index we wrote, and bcftools' own index of the same file
    first, last = int(panel.sites.pos[0]), int(panel.sites.pos[9])  # type: ignore[union-attr]
    assert len(bcftools.view("-H", "-r", f"20:{first}-{last}", str(out)).splitlines()) == 10
    bcftools.index("-f", "-c", str(out))
    assert (tmp_path / "imputed.vcf.gz.csi").exists()
    assert pysam.VariantFile(str(out)).header.samples[0] == split["test"].samples[0]  # type: ignore[union-attr]


def test_array_sites_file_restricts_the_inputs(vcf_files: dict[str, Path], tmp_path: Path) -> None:
    from semiparam.genomics import impute_vcf

    summary = impute_vcf(
        vcf_files["ref"],
        vcf_files["truth"],
        tmp_path / "o.vcf.gz",
        array_sites=vcf_files["array"],
        model="knn",
        index=False,
        **TINY,
    )
    assert summary["n_typed"] == 15  # every other array site
    assert summary["alignment"]["n_not_on_array"] == 120 - 15


def test_cli_reports_bad_input(
    vcf_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from semiparam.cli.main import main

    code = main(
        [
            "impute-vcf",
            "--ref",
            str(tmp_path / "missing.vcf.gz"),
            "--target",
            str(vcf_files["target"]),
            "--out",
            str(tmp_path / "o.vcf.gz"),
            "--quiet",
        ]
    )
    assert code == 2 and "no such VCF file" in capsys.readouterr().err
    unphased = tmp_path / "unphased.vcf"
    text = cyvcf2_text(vcf_files["target"]).replace("|", "/")
    unphased.write_text(text)
    code = main(
        [
            "impute-vcf",
            "--ref",
            str(vcf_files["ref"]),
            "--target",
            str(unphased),
            "--out",
            str(tmp_path / "o.vcf.gz"),
            "--model",
            "knn",
            "--unphased",
            "error",
            "--quiet",
            "--n-inputs",
            "10",
            "--window-targets",
            "20",
            "--overlap",
            "5",
        ]
    )
    assert code == 2 and "--unphased phase" in capsys.readouterr().err


def test_cli_default_imputes_unphased_targets_to_phased_output(
    vcf_files: dict[str, Path], tmp_path: Path, split: dict[str, object]
) -> None:
    """An array's unphased genotypes need no flag: phased by the copying model, imputed by it."""
    from semiparam.cli.main import main

    unphased = tmp_path / "unphased.vcf"
    unphased.write_text(cyvcf2_text(vcf_files["target"]).replace("|", "/").replace("1/0", "0/1"))
    out = tmp_path / "imputed.vcf.gz"
    args = ["impute-vcf", "--ref", str(vcf_files["ref"]), "--target", str(unphased), "--out", str(out)]
    assert main([*args, "--quiet", "--n-inputs", "10", "--window-targets", "20", "--overlap", "5"]) == 0
    vcf = cyvcf2.VCF(str(out))
    test = split["test"].as_genotypes()  # type: ignore[union-attr]
    typed = split["typed"]
    doses, phased_calls = [], []
    for i, rec in enumerate(vcf):
        gt = np.array([g[:2] for g in rec.genotypes])
        phased_calls.append(all(g[2] for g in rec.genotypes))
        if typed[i]:  # type: ignore[index]
            np.testing.assert_array_equal(gt.sum(1), test.alleles[i].sum(1))  # the genotypes given
        else:
            doses.append((rec.format("DS")[:, 0], test.alleles[i].sum(1)))
    assert all(phased_calls)
    ds = np.concatenate([d for d, _ in doses])
    truth = np.concatenate([t for _, t in doses])
    assert np.corrcoef(ds, truth)[0, 1] ** 2 > 0.5


def cyvcf2_text(path: Path) -> str:
    import gzip

    with gzip.open(path, "rt") as handle:
        return handle.read()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["spin", "npt"])
def test_table_models_learn_to_impute(split: dict[str, object], model: str) -> None:
    """A few hundred steps are enough to beat the allele-frequency guess (r^2 = 0) clearly."""
    if model not in model_names():
        pytest.skip(f"{model} is not registered")
    imp = GenotypeImputer(model, max_steps=200, random_state=0, **TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    assert _dosage_r2(split, imp.impute_haplotypes(_query(split))) > 0.3


def _records(path: Path) -> list[str]:
    return [line for line in cyvcf2_text(path).splitlines() if not line.startswith("#")]


def _unphased_target(vcf_files: dict[str, Path], tmp_path: Path) -> Path:
    unphased = tmp_path / "unphased.vcf"
    unphased.write_text(cyvcf2_text(vcf_files["target"]).replace("|", "/").replace("1/0", "0/1"))
    return unphased


SHAPE = {"n_inputs": 10, "window_targets": 20, "overlap": 5}


def test_a_killed_streamed_run_resumes_to_the_same_output(
    vcf_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default route reads the panel in chunks; a run killed in its third chunk goes on there."""
    from semiparam.genomics import impute_vcf

    unphased = _unphased_target(vcf_files, tmp_path)
    whole = impute_vcf(vcf_files["ref"], unphased, tmp_path / "whole.vcf.gz", chunk_sites=30, **SHAPE)
    assert whole["n_chunks"] == 4 and not (tmp_path / "whole.vcf.gz.partial").exists()

    fits: list[int] = []
    original = GenotypeImputer.fit

    def dies_in_the_third_chunk(self: GenotypeImputer, *args: object) -> object:
        fits.append(1)
        if len(fits) == 3:
            raise KeyboardInterrupt  # the run is killed here
        return original(self, *args)  # type: ignore[arg-type]

    out = tmp_path / "resumed.vcf.gz"
    monkeypatch.setattr(GenotypeImputer, "fit", dies_in_the_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        impute_vcf(vcf_files["ref"], unphased, out, chunk_sites=30, **SHAPE)
    partial = tmp_path / "resumed.vcf.gz.partial"
    assert len(list(partial.glob("chunk_*.vcf.txt.gz"))) == 2 and not out.exists()

    fits.clear()
    monkeypatch.setattr(GenotypeImputer, "fit", lambda self, *a: (fits.append(1), original(self, *a))[1])
    impute_vcf(vcf_files["ref"], unphased, out, chunk_sites=30, resume=True, **SHAPE)
    assert len(fits) == 2  # only the chunks not finished before
    assert _records(out) == _records(tmp_path / "whole.vcf.gz")
    assert not partial.exists()

    # chunks of another run are refused, not mixed in
    monkeypatch.setattr(GenotypeImputer, "fit", dies_in_the_third_chunk)
    fits.clear()
    with pytest.raises(KeyboardInterrupt):
        impute_vcf(vcf_files["ref"], unphased, tmp_path / "other.vcf.gz", chunk_sites=30, **SHAPE)
    with pytest.raises(ValueError, match="holds chunks of another run"):
        impute_vcf(
            vcf_files["ref"], vcf_files["target"], tmp_path / "other.vcf.gz", chunk_sites=30, resume=True
        )


def test_a_killed_run_with_a_saved_panel_resumes_to_the_same_output(
    vcf_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --panel and a windowed model (k-NN, the table models) windows are the unit: a killed
    run goes on after the last finished one."""
    from semiparam.genomics import fit_panel, impute_vcf

    unphased = _unphased_target(vcf_files, tmp_path)
    fit_panel(vcf_files["ref"], tmp_path / "panel", model="knn", **SHAPE)
    whole = impute_vcf(None, unphased, tmp_path / "whole.vcf.gz", model_dir=tmp_path / "panel")
    assert whole["n_windows"] >= 4

    calls: list[int] = []
    original = GenotypeImputer._predict_window

    def dies_after_three(self: GenotypeImputer, index: int, *args: object) -> object:
        calls.append(index)
        if len(calls) > 3:
            raise KeyboardInterrupt
        return original(self, index, *args)  # type: ignore[arg-type]

    out = tmp_path / "resumed.vcf.gz"
    monkeypatch.setattr(GenotypeImputer, "_predict_window", dies_after_three)
    with pytest.raises(KeyboardInterrupt):
        impute_vcf(None, unphased, out, model_dir=tmp_path / "panel")
    partial = tmp_path / "resumed.vcf.gz.partial"
    assert len(list(partial.glob("window_*.npz"))) == 3 and not out.exists()
    counted: list[int] = []

    def counting(self: GenotypeImputer, index: int, *args: object) -> object:
        counted.append(index)
        return original(self, index, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(GenotypeImputer, "_predict_window", counting)
    impute_vcf(None, unphased, out, model_dir=tmp_path / "panel", resume=True)
    assert counted == list(range(3, whole["n_windows"]))
    assert _records(out) == _records(tmp_path / "whole.vcf.gz")
    with pytest.raises(KeyboardInterrupt):
        monkeypatch.setattr(GenotypeImputer, "_predict_window", dies_after_three)
        calls.clear()
        impute_vcf(None, unphased, tmp_path / "other.vcf.gz", model_dir=tmp_path / "panel")
    with pytest.raises(ValueError, match="holds windows of another run"):
        impute_vcf(
            None, vcf_files["target"], tmp_path / "other.vcf.gz", model_dir=tmp_path / "panel", resume=True
        )


def test_chunked_imputation_matches_one_pass(
    vcf_files: dict[str, Path], tmp_path: Path, split: dict[str, object]
) -> None:
    """Chunks of 30 sites with their margins impute about as well as one pass over the panel,
    and every site is written once, in order."""
    from semiparam.genomics import impute_vcf

    unphased = _unphased_target(vcf_files, tmp_path)
    one = impute_vcf(vcf_files["ref"], unphased, tmp_path / "one.vcf.gz", **SHAPE)
    many = impute_vcf(vcf_files["ref"], unphased, tmp_path / "many.vcf.gz", chunk_sites=30, **SHAPE)
    assert one["n_chunks"] == 1 and many["n_chunks"] == 4
    assert many["alignment"] == one["alignment"] and many["n_typed"] == 30
    test = split["test"].as_genotypes()  # type: ignore[union-attr]
    untyped = ~split["typed"]  # type: ignore[operator]
    scores = []
    for name in ("one", "many"):
        records = list(cyvcf2.VCF(str(tmp_path / f"{name}.vcf.gz")))
        assert [r.POS for r in records] == split["panel"].sites.pos.tolist()  # type: ignore[union-attr]
        ds = np.array([r.format("DS")[:, 0] for r in records])
        truth = test.alleles.sum(-1)
        scores.append(np.corrcoef(ds[untyped].ravel(), truth[untyped].ravel())[0, 1] ** 2)
    assert scores[1] > scores[0] - 0.05, scores


def test_threads_give_the_same_imputation(split: dict[str, object]) -> None:
    test, typed = split["test"], split["typed"]
    alleles = np.sort(np.where(typed[:, None, None], test.as_genotypes().alleles, -1), axis=2)  # type: ignore[index,union-attr]
    phased = np.zeros(alleles.shape[:2], dtype=bool)
    imp = GenotypeImputer("knn", **TINY).fit(split["ref"], split["typed"])  # type: ignore[arg-type]
    np.testing.assert_array_equal(imp.impute(alleles, phased, n_jobs=2), imp.impute(alleles, phased))


def test_fit_panel_once_then_impute_target_files(vcf_files: dict[str, Path], tmp_path: Path) -> None:
    from semiparam.cli.main import main
    from semiparam.genomics import fit_panel, impute_vcf

    shape = ["--n-inputs", "10", "--window-targets", "20", "--overlap", "5"]
    panel = tmp_path / "panel"
    assert main(["fit-panel", str(vcf_files["ref"]), "--out", str(panel), "--quiet", *shape]) == 0
    assert (panel / "imputer.json").exists() and (panel / "fit_summary.json").exists()
    direct = tmp_path / "direct.vcf.gz"
    via_panel = tmp_path / "via_panel.vcf.gz"
    impute_vcf(vcf_files["ref"], vcf_files["target"], direct, n_inputs=10, window_targets=20, overlap=5)
    code = main(
        [
            "impute-vcf",
            "--panel",
            str(panel),
            "--target",
            str(vcf_files["target"]),
            "--out",
            str(via_panel),
            "--quiet",
        ]
    )
    assert code == 0
    assert _records(via_panel) == _records(direct)  # the same imputation, without reading the panel's VCF
    with pytest.raises(ValueError, match="only 'copy' and 'knn' fit a panel alone"):
        fit_panel(vcf_files["ref"], tmp_path / "spin_panel", model="spin")
    with pytest.raises(FileExistsError):
        fit_panel(vcf_files["ref"], panel)


def test_a_target_on_other_contig_names_gets_a_hint(vcf_files: dict[str, Path], tmp_path: Path) -> None:
    from semiparam.data.genotypes import VCFError
    from semiparam.genomics import impute_vcf

    renamed = tmp_path / "chr.vcf"
    text = cyvcf2_text(vcf_files["target"])
    renamed.write_text(
        "\n".join(
            line.replace("##contig=<ID=20", "##contig=<ID=chr20") if line.startswith("#") else "chr" + line
            for line in text.splitlines()
        )
        + "\n"
    )
    with pytest.raises(VCFError, match="differ by a 'chr' prefix"):
        impute_vcf(vcf_files["ref"], renamed, tmp_path / "o.vcf.gz", **SHAPE)
