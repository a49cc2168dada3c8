#!/usr/bin/env python
"""Genotype imputation on two real panels: SPIN and NPT (``semiparam impute-vcf``) beside Beagle 5
(the version installed, read from the program) and a nearest-haplotype k-NN, on exactly the same
split, sites and VCF files.

    .venv/bin/python benchmarks/genomics.py                        # the committed report
    .venv/bin/python benchmarks/genomics.py --quick                # a smoke run, a few minutes
    .venv/bin/python benchmarks/genomics.py --methods knn,beagle   # a subset

Protocol (spec-spin section 5): held-out *reference* haplotypes are masked at every non-array
site and imputed from their array genotypes; Pearson R^2 is pooled over all (site, haplotype)
pairs of the evaluated sites (the paper's number, on per-haplotype ALT probabilities) and over
(site, sample) dosages (phase-free, the fair comparison with Beagle, which re-phases its input),
overall and by minor-allele frequency in the reference; genotype concordance is the share of
most-likely genotypes equal to the truth. Each method runs as its own process (one thread) on
the same files; wall time and peak resident memory are those of that process.

Panels (``$SEMIPARAM_DATA_DIR/genomics``, see shared/data/README.md):

- ``1kgp_first1000``: 1000 Genomes phase 3 chr20, first 1000 variants, all 5008 haplotypes;
  test = genotypooler's 240 study samples, reference = the other 2264; array = Omni2.5 sites.
- ``shapeit4_chr20``: SHAPEIT4 example panel, 600 haplotypes x 24,990 variants of chr20:1-4 Mb;
  test = 50 of the 300 reference samples (seeded), reference = the other 250; array = the
  Omni scaffold sites that match a panel variant exactly.

Evaluated sites: blocks of 100 consecutive untyped sites polymorphic in the reference (the
paper's windows), drawn at random; every method gets a reference VCF restricted to the array
sites plus those blocks. Every reduction is listed in the report next to the numbers.
Writes benchmarks/results/genomics.json and genomics.md; scratch files under
benchmarks/results/tmp/genomics/.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from semiparam.datasets import data_dir
from semiparam.genomics import (
    GenotypeData,
    evaluate_imputation,
    minor_allele_frequency,
    read_positions,
    read_reference_panel,
    read_vcf,
    write_genotypes_vcf,
)

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
SCRATCH = RESULTS / "tmp" / "genomics"
BLOCK = 100  # untyped sites per evaluated window (the paper's 100 target SNPs)

# What each panel runs. Steps are the CPU budget of this machine, not the paper's (15k-100k).
PLAN: dict[str, dict[str, Any]] = {
    "1kgp_first1000": {"n_blocks": 3, "n_inputs": 25},
    "shapeit4_chr20": {"n_blocks": 3, "n_inputs": 150, "n_test_samples": 50},
    # the whole 3 Mb region as a user runs it: the panel's 300 samples as reference, the 203 other
    # samples' real Omni array genotypes as targets, their sequence genotypes as truth
    "shapeit4_chr20_whole": {
        "n_blocks": 0,
        "n_inputs": 150,
        "whole": True,
        "methods": ["copy", "copy-panel", "beagle", "knn"],
    },
}
# model runs: name -> impute-vcf arguments
MODEL_RUNS: dict[str, list[str]] = {
    "copy": ["--model", "copy"],
    "spin-shared": ["--model", "spin", "--mode", "shared"],
    "npt-shared": ["--model", "npt", "--mode", "shared"],
    "spin-per-window": ["--model", "spin", "--mode", "per-window"],
    "npt-per-window": ["--model", "npt", "--mode", "per-window"],
    "knn": ["--model", "knn"],
}
DEFAULT_METHODS = [
    "copy",
    "copy-panel",
    "beagle",
    "knn",
    "spin-shared",
    "npt-shared",
    "spin-per-window",
    "npt-per-window",
]


# -- preparing the splits ----------------------------------------------------------------------
def _panel_files(name: str) -> dict[str, Any]:
    base = data_dir() / "genomics"
    if name == "1kgp_first1000":
        d = base / "1kgp_phase3_chr20"
        return {
            "vcf": d / "ALL.chr20.first1000.vcf.gz",
            "test_samples": (d / "study.population.txt").read_text().split(),
            "array": read_positions(d / "omni25_HDonly_chr20.coords.gz")
            + read_positions(d / "omniexpress_LDonly_chr20.coords.gz"),
            "plink_map": d / "plink.chr20.GRCh37.map.gz",
        }
    d = base / "shapeit4_example_chr20"
    scaffold, _ = read_vcf(d / "scaffold.vcf.gz")
    return {
        "vcf": d / "reference.vcf.gz",
        "array_keys": set(scaffold.sites.keys()),
        "shapeit_map": d / "chr20.b37.gmap.gz",
    }


def prepare(name: str, seed: int, n_blocks: int, phased_targets: bool = False) -> dict[str, Any]:
    """Write ref.vcf.gz (reference samples, array sites + evaluated blocks), target.vcf.gz (test
    samples at array sites), truth.npz and a PLINK map; return the split's description."""
    out = SCRATCH / name
    out.mkdir(parents=True, exist_ok=True)
    if PLAN[name].get("whole"):
        return prepare_whole(name, out)
    files = _panel_files(name)
    panel, report = read_reference_panel(files["vcf"])
    rng = np.random.default_rng(seed)
    if "test_samples" in files:
        test = [s for s in files["test_samples"] if s in set(panel.samples)]
    else:
        n_test = PLAN[name]["n_test_samples"]
        test = sorted(rng.choice(panel.samples, size=n_test, replace=False).tolist(), key=panel.samples.index)
    ref_samples = [s for s in panel.samples if s not in set(test)]
    if "array" in files:
        array = set(files["array"])
        typed = np.array([(c, p) in array for c, p in zip(panel.sites.chrom, panel.sites.pos)])
    else:
        typed = np.array([k in files["array_keys"] for k in panel.sites.keys()])
    ref_panel = panel.subset_samples(ref_samples)
    alt = ref_panel.alt_counts()
    polymorphic = (alt > 0) & (alt < ref_panel.n_haplotypes)
    candidates = np.flatnonzero(~typed & polymorphic)
    n_possible = len(candidates) // BLOCK
    chosen = np.sort(rng.choice(n_possible, size=min(n_blocks, n_possible), replace=False))
    blocks = [candidates[b * BLOCK : (b + 1) * BLOCK] for b in chosen]
    eval_sites = np.concatenate(blocks)
    keep = np.sort(np.concatenate([np.flatnonzero(typed), eval_sites]))
    write_genotypes_vcf(
        out / "ref.vcf.gz", ref_panel.subset_sites(keep).as_genotypes(), source="benchmarks/genomics.py"
    )
    test_geno = panel.subset_samples(test).as_genotypes()
    target = test_geno.subset_sites(np.flatnonzero(typed))
    if not phased_targets:  # what an array gives: genotypes without phase, written 0/1
        target = GenotypeData(
            target.sites,
            target.samples,
            np.sort(target.alleles, axis=2),
            np.zeros_like(target.phased),
            target.contig_lines,
        )
    write_genotypes_vcf(out / "target.vcf.gz", target, source="benchmarks/genomics.py")
    np.savez_compressed(
        out / "truth.npz",
        pos=panel.sites.pos[eval_sites],
        truth=test_geno.alleles[eval_sites],
        maf=minor_allele_frequency(ref_panel.haplotypes[eval_sites]),
    )
    _write_plink_map(files, out / "plink.map")
    info = {
        "panel": name,
        "source_file": str(files["vcf"]),
        "n_variants_in_file": report.n_records,
        "n_reference_haplotypes": ref_panel.n_haplotypes,
        "n_test_samples": len(test),
        "n_array_sites": int(typed.sum()),
        "n_untyped_polymorphic": int(len(candidates)),
        "n_blocks_possible": int(n_possible),
        "n_blocks": len(blocks),
        "n_eval_sites": int(len(eval_sites)),
        "block_positions": [[int(panel.sites.pos[b[0]]), int(panel.sites.pos[b[-1]])] for b in blocks],
        "seed": seed,
        "targets": "phased" if phased_targets else "unphased",
    }
    (out / "split.json").write_text(json.dumps(info, indent=2))
    return info


def prepare_whole(name: str, out: Path) -> dict[str, Any]:
    """The SHAPEIT4 region whole: reference = the panel file as it is; targets = the 203 other
    samples' Omni scaffold genotypes at the sites that match a panel variant exactly, as the chip
    gave them (mostly unphased, some missing); truth = their sequence genotypes (``unphased.vcf.gz``)
    at every other panel site with a single record at its position and no missing genotype."""
    d = data_dir() / "genomics" / "shapeit4_example_chr20"
    panel, report = read_reference_panel(d / "reference.vcf.gz")
    scaffold, _ = read_vcf(d / "scaffold.vcf.gz")
    keys = set(panel.sites.keys())
    on_panel = np.flatnonzero([k in keys for k in scaffold.sites.keys()])
    write_genotypes_vcf(
        out / "target.vcf.gz", scaffold.subset_sites(on_panel), source="benchmarks/genomics.py"
    )
    ref_link = out / "ref.vcf.gz"
    ref_link.unlink(missing_ok=True)
    ref_link.symlink_to(d / "reference.vcf.gz")
    sequence, _ = read_vcf(d / "unphased.vcf.gz", samples=scaffold.samples)
    typed_pos = set(scaffold.sites.pos[on_panel].tolist())
    position_count: dict[int, int] = {}
    for p in panel.sites.pos.tolist():
        position_count[p] = position_count.get(p, 0) + 1
    seq_index = {k: i for i, k in enumerate(sequence.sites.keys())}
    rows, truth_rows = [], []
    for i, key in enumerate(panel.sites.keys()):
        j = seq_index.get(key)
        if j is None or key[1] in typed_pos or position_count[key[1]] != 1:
            continue
        if (sequence.alleles[j] < 0).any():
            continue
        rows.append(i)
        truth_rows.append(j)
    np.savez_compressed(
        out / "truth.npz",
        pos=panel.sites.pos[rows],
        truth=sequence.alleles[truth_rows],
        maf=minor_allele_frequency(panel.haplotypes[rows]),
    )
    _write_plink_map({"shapeit_map": d / "chr20.b37.gmap.gz"}, out / "plink.map")
    target_missing = float((scaffold.alleles[on_panel] < 0).any(axis=2).mean())
    return {
        "panel": name,
        "whole": True,
        "source_file": str(d / "reference.vcf.gz"),
        "n_variants_in_file": report.n_records,
        "n_reference_haplotypes": panel.n_haplotypes,
        "n_test_samples": scaffold.n_samples,
        "n_array_sites": int(len(on_panel)),
        "n_panel_sites": panel.n_sites,
        "n_eval_sites": len(rows),
        "target_missing_fraction": target_missing,
        "target_phased_fraction": float(scaffold.phased[on_panel].mean()),
        "targets": "array genotypes as given",
    }


def _write_plink_map(files: dict[str, Any], path: Path) -> None:
    """Beagle's ``map=``: PLINK format ``chrom . cM bp``."""
    if "plink_map" in files:
        with gzip.open(files["plink_map"], "rt") as src:
            path.write_text(src.read())
        return
    lines = []
    with gzip.open(files["shapeit_map"], "rt") as src:
        next(src)  # header "pos chr cM"
        for line in src:
            pos, chrom, cm = line.split()
            lines.append(f"{chrom}\t.\t{cm}\t{pos}\n")
    path.write_text("".join(lines))


# -- running one method ------------------------------------------------------------------------
def run_method(panel: str, method: str, steps: dict[str, int], quick: bool) -> dict[str, Any]:
    """Run ``method`` as a child process on the prepared files; time it, read its peak RSS.
    ``copy-panel``: ``semiparam fit-panel`` once (timed apart), then ``impute-vcf --panel``."""
    d = SCRATCH / panel
    out_prefix = d / f"out_{method}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result: dict[str, Any] = {"method": method}
    out_vcf = Path(str(out_prefix) + ".vcf.gz")
    shape = ["--n-inputs", str(PLAN[panel]["n_inputs"]), "--window-targets", str(BLOCK), "--overlap", "0"]
    if PLAN[panel].get("whole"):
        shape = []  # the defaults, as a user runs them
    cli = [sys.executable, "-m", "semiparam.cli.main"]
    if method == "beagle":
        exe = shutil.which("beagle")
        if exe is None:
            return {"method": method, "error": "beagle not installed (apt-get install beagle)"}
        cmd = [
            exe,
            f"ref={d / 'ref.vcf.gz'}",
            f"gt={d / 'target.vcf.gz'}",
            f"out={out_prefix}",
            f"map={d / 'plink.map'}",
            "nthreads=1",
            "ap=true",
            "gp=true",
            "seed=1",
        ]
    elif method == "copy-panel":
        panel_dir = d / "out_copy-panel.panel"
        fit_cmd = [
            *cli,
            "fit-panel",
            str(d / "ref.vcf.gz"),
            "--out",
            str(panel_dir),
            "--map",
            str(d / "plink.map"),
            "--force",
            "--quiet",
            *shape,
        ]
        fit = _run_timed(fit_cmd, env, d / "out_copy-panel.fit.log")
        result["fit_panel"] = fit
        if "error" in fit:
            return {**result, "error": fit["error"]}
        cmd = [*cli, "impute-vcf", "--panel", str(panel_dir), "--target", str(d / "target.vcf.gz")]
        cmd += ["--out", str(out_vcf), "--ap", "--no-index", "--quiet", "--force"]
    else:
        step_args = []
        if method not in ("knn", "copy"):
            step_args = ["--steps", str(steps[method.split("-", 1)[1].replace("-", "_")])]
        cmd = [
            *cli,
            "impute-vcf",
            "--ref",
            str(d / "ref.vcf.gz"),
            "--target",
            str(d / "target.vcf.gz"),
            "--out",
            str(out_vcf),
            *shape,
            "--map",
            str(d / "plink.map"),
            "--ap",
            "--no-index",
            "--quiet",
            "--force",
            *MODEL_RUNS[method],
            *step_args,
            *MODEL_SETTINGS,
        ]
    run = _run_timed(cmd, env, d / f"out_{method}.log")
    result.update(run)
    if "error" in run:
        return result
    summary_file = Path(str(out_vcf) + ".summary.json")
    if summary_file.exists():
        s = json.loads(summary_file.read_text())
        result["fit_seconds"] = s.get("fit_seconds")
        result["impute_seconds"] = s.get("impute_seconds")
        result["n_parameters"] = s.get("n_parameters")
    result.update(evaluate(panel, out_vcf))
    return result


def _run_timed(cmd: list[str], env: dict[str, str], log_path: Path) -> dict[str, Any]:
    """Run ``cmd``; its command line, wall and CPU seconds and peak RSS, or its error."""
    start = time.perf_counter()
    peak_kb = 0
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        # Peak memory: the child's VmHWM (high-water RSS of its own address space; Beagle's script
        # execs java in the same process). wait4's ru_maxrss would also count the RSS this parent
        # had when it forked the child. CPU time comes from wait4.
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak_kb = max(peak_kb, _vm_hwm_kb(proc.pid))
            time.sleep(0.05)
    seconds = time.perf_counter() - start
    returncode = os.waitstatus_to_exitcode(status)
    proc.returncode = returncode  # reaped by wait4; tell Popen
    result: dict[str, Any] = {
        "command": " ".join(str(c) for c in cmd).replace(str(ROOT.parent) + "/", ""),
        "wall_seconds": seconds,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": peak_kb / 1024 if peak_kb else None,
    }
    if returncode != 0:
        result["error"] = log_path.read_text()[-2000:]
    return result


def _vm_hwm_kb(pid: int) -> int:
    """Peak resident set size (kB) of a running process, from /proc (0 when unavailable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def evaluate(panel: str, out_vcf: Path) -> dict[str, Any]:
    """Metrics of an imputed VCF (ours or Beagle's: DS, AP1, AP2) at the evaluated sites."""
    import cyvcf2

    truth = np.load(SCRATCH / panel / "truth.npz")
    wanted = {int(p): i for i, p in enumerate(truth["pos"])}
    n_samples = truth["truth"].shape[1]
    probs = np.full(truth["truth"].shape, np.nan, dtype=np.float64)  # (n_eval, n_samples, 2)
    for rec in cyvcf2.VCF(str(out_vcf)):
        i = wanted.get(int(rec.POS))
        if i is None or len(rec.ALT) != 1:
            continue
        ap1, ap2 = rec.format("AP1"), rec.format("AP2")
        if ap1 is None:  # no per-haplotype probabilities: split the dosage evenly
            ds = rec.format("DS")[:, 0]
            ap1 = ap2 = (ds / 2)[:, None]
        probs[i, :, 0], probs[i, :, 1] = ap1[:, 0], ap2[:, 0]
    found = ~np.isnan(probs).any(axis=(1, 2))
    metrics = evaluate_imputation(truth["truth"][found], probs[found], truth["maf"][found])
    metrics["n_eval_sites_missing_in_output"] = int((~found).sum())
    assert probs.shape[1] == n_samples
    return metrics


# -- report ------------------------------------------------------------------------------------
def _fmt(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def write_report(results: dict[str, Any], path: Path) -> None:
    beagle = results.get("beagle") or "Beagle"
    targets = next(iter(results["panels"].values()))["split"].get("targets", "phased")
    lines = [
        f"# Genotype imputation: haplotype copying (the default), SPIN and NPT beside {beagle} and a "
        "nearest-haplotype k-NN",
        "",
        f"Command: `{results['command']}`  ",
        f"Code: {results.get('code', '?')}  ",
        f"Machine: {results['machine']}  ",
        f"Date: {results['date']}; total wall time {results['total_minutes']:.1f} min.",
        "",
        f"Held-out samples of each reference panel are given to every method as **{targets}** "
        "genotypes at the array sites only (an array's normal output"
        + (", written `0/1`" if targets == "unphased" else "")
        + ") and every other site is imputed. R² is Pearson's r² pooled over all evaluated (site, "
        "sample) dosages (**R² dosage**, phase-free) or (site, haplotype) ALT probabilities (**R² "
        "hap**, the paper's number"
        + (
            "; with unphased targets it also scores each method's phasing against the truth's "
            "arbitrary orientation, so it is low for every method"
            if targets == "unphased"
            else ""
        )
        + "); by MAF of the reference panel. Concordance: most likely genotype = truth (all genotypes "
        "/ genotypes where truth or call is not REF/REF). Time and memory are those of each method's "
        "own process, Python or the JVM started included, one thread each, one method at a time.",
        "",
        "`copy` is `semiparam impute-vcf` at its defaults (haplotype copying, unphased targets "
        "phased by the diploid copying model) given the panel's genetic map as Beagle is; "
        "`copy-panel` is the same model fitted once with `semiparam fit-panel` and then run with "
        "`impute-vcf --panel` (its row times the per-file run; the one-off fit is in the verdict "
        "table).",
        "",
    ]
    lines += _verdict(results)
    lines += ["", "**Reductions (everything differs from the paper here):**", ""]
    lines += [f"- {r}" for r in results["reductions"]]
    for panel, block in results["panels"].items():
        split = block["split"]
        lines += [
            "",
            f"## {panel}",
            "",
            _split_text(split),
            "",
        ]
        bins = None
        for r in block["methods"]:
            if "r2_dosage_by_maf" in r:
                bins = [(b["lo"], b["hi"], b["n_sites"]) for b in r["r2_dosage_by_maf"]]
                break
        bin_heads = [f"R² dos. MAF ({lo:g},{hi:g}] (n={n})" for lo, hi, n in bins] if bins else []
        heads = [
            "method",
            "R² dosage",
            "R² hap",
            *bin_heads,
            "concord.",
            "non-ref conc.",
            "wall s",
            "CPU s",
            "fit s",
            "impute s",
            "peak MiB",
            "params",
        ]
        lines.append("| " + " | ".join(heads) + " |")
        lines.append("|" + "---|" * len(heads))
        for r in block["methods"]:
            if "error" in r:
                lines.append(
                    f"| {r['method']} | failed: {r['error'][:120].splitlines()[0]} |"
                    + " |" * (len(heads) - 2)
                )
                continue
            row = [
                r["method"],
                _fmt(r["r2_dosage"]),
                _fmt(r["r2_haplotype"]),
                *[_fmt(b["r2"]) for b in r["r2_dosage_by_maf"]],
                _fmt(r["concordance"]),
                _fmt(r["nonref_concordance"]),
                _fmt(r["wall_seconds"], 1),
                _fmt(r.get("cpu_seconds"), 1),
                _fmt(r.get("fit_seconds"), 1),
                _fmt(r.get("impute_seconds"), 1),
                _fmt(r.get("peak_rss_mb"), 0),
                f"{r['n_parameters'] / 1e6:.1f}M" if r.get("n_parameters") else "–",
            ]
            lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "## Reading the numbers",
        "",
        "- Paper, for scale (spec-spin Table 3: 1000 Genomes chr20, 4388 reference haplotypes, 150 Omni "
        "inputs, single 100-SNP windows, 15k+ steps on a GPU; pooled haplotype R² in %): Beagle 5.1 "
        "95.64, NPT-16 95.84, SPIN-16 95.92, KNN 89.70. Table 4 (one shared model over 10 windows, "
        "100k steps): SPIN-64 95.38, NPT-64 95.06.",
        "- `wall s` and `CPU s` include starting Python and importing torch (about 7 CPU s), reading "
        "the VCFs and writing the output; `fit s` / `impute s` are the model's own stages from the "
        "run summary. Beagle's peak memory is the resident memory of its JVM.",
        "- `copy` is the Li-Stephens copying model Beagle also rests on, written here in NumPy: one "
        "forward-backward pass along each contig's typed sites against every reference haplotype, "
        "posteriors interpolated in cM to the untyped sites; unphased targets are phased first, in "
        "overlapping segments of 150 typed sites, by Viterbi over pairs of 40 candidate haplotypes "
        "(one refinement pass) and stitched in phase; its `ne` is picked on held-out reference "
        "samples at fit time. It trains nothing, which is why it fits a CPU budget. What each of "
        "these choices is worth: `genomics_levers.md`.",
        "- Its wall time includes about 4 s of starting Python and importing the package (torch "
        "among it), which is most of the 1kgp_first1000 run; Beagle's JVM starts in under a second.",
        "- The transformers here trained for a few hundred steps; their rare-variant R² is near 0 "
        "(they predict the window's allele frequency there), which is where Beagle's HMM, the "
        "copying model and the k-NN copy whole haplotypes. These are budget-bound numbers, not the "
        "models' ceiling. They read the same targets, phased by the same diploid copying model.",
        "- A shared SPIN sees a window's reference panel only through its h=10 inducing points. "
        "Where it lags (1kgp_first1000: 4528 haplotypes of five super-populations, 24 inputs per "
        "window), our unverified guess is that 10 points are too few to summarise that panel within "
        "a few hundred steps; a larger h or longer training are the untested remedies.",
        "- Per-method commands (the exact `semiparam impute-vcf` / `beagle` lines) are in "
        "genomics.json (`command`); the split (samples, blocks) is in `split`.",
    ]
    path.write_text("\n".join(lines) + "\n")


def _split_text(split: dict[str, Any]) -> str:
    if split.get("whole"):
        return (
            f"The whole region: {split['n_panel_sites']} panel sites, {split['n_reference_haplotypes']} "
            f"reference haplotypes; targets: {split['n_test_samples']} other samples' Omni chip genotypes at "
            f"the {split['n_array_sites']} scaffold sites that match a panel variant, as the chip gave them "
            f"({100 * split['target_phased_fraction']:.0f}% of the calls written phased, "
            f"{100 * split['target_missing_fraction']:.1f}% missing); truth: their sequence genotypes at "
            f"{split['n_eval_sites']} untyped sites (those alone at their position, with no missing call). "
            "R² hap compares with the sequence data's read-backed phase and means little here. "
            "The table models are not run on it (hundreds of windows at their CPU budget)."
        )
    return (
        f"{split['n_reference_haplotypes']} reference haplotypes, {split['n_test_samples']} test samples "
        f"({2 * split['n_test_samples']} haplotypes), {split['n_array_sites']} array sites; evaluated on "
        f"{split['n_blocks']} random blocks of {BLOCK} consecutive untyped polymorphic sites "
        f"({split['n_eval_sites']} sites; {split['n_blocks_possible']} such blocks exist; "
        f"seed {split['seed']})."
    )


def _verdict(results: dict[str, Any]) -> list[str]:
    """The issue's acceptance per panel: the default's dosage R² against Beagle's and its wall time
    as a multiple of Beagle's (same threads, start-up included)."""
    lines = [
        "## The default against Beagle",
        "",
        "| panel | R² dosage copy | R² dosage Beagle | copy - Beagle | wall copy / Beagle | "
        "fit-panel once (s) | per file with --panel (s) | Beagle (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for panel, block in results["panels"].items():
        by = {r["method"]: r for r in block["methods"] if "error" not in r}
        copy, beagle, via = by.get("copy"), by.get("beagle"), by.get("copy-panel")
        if copy is None or beagle is None:
            continue
        fit = via.get("fit_panel", {}).get("wall_seconds") if via else None
        lines.append(
            f"| {panel} | {copy['r2_dosage']:.4f} | {beagle['r2_dosage']:.4f} | "
            f"{copy['r2_dosage'] - beagle['r2_dosage']:+.4f} | "
            f"{copy['wall_seconds'] / beagle['wall_seconds']:.1f}x | {_fmt(fit, 1)} | "
            f"{_fmt(via['wall_seconds'] if via else None, 1)} | {beagle['wall_seconds']:.1f} |"
        )
    return lines


def beagle_version() -> str | None:
    """ "Beagle <version> (<build>)" as the installed ``beagle`` prints it, or None if absent."""
    exe = shutil.which("beagle")
    if exe is None:
        return None
    try:
        res = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    text = res.stdout + res.stderr
    match = re.search(r"beagle\.(\S+)\.jar\s*\(version\s*([0-9.]+)\)", text)
    if match:
        return f"Beagle {match.group(2)} ({match.group(1)})"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first or None


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import torch

    return (
        f"{os.cpu_count()} CPU cores ({cpu}), {mem:.0f} GiB RAM, no GPU; "
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"{beagle_version() or 'Beagle not installed'}, one thread per method"
    )


MODEL_SETTINGS: list[str] = []


def _code_version() -> str:
    """The git commit (with "+changes" when the tree differs from it) and the genomics code's hash."""
    from semiparam.bench.measure import code_hash

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head, dirty = "unknown", ""
    genomics = code_hash(modules=("semiparam.genomics",), exclude=())
    return f"commit {head}{'+changes' if dirty else ''}, semiparam.genomics code {genomics}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    parser.add_argument("--panels", default=",".join(PLAN))
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny step counts, 1 block")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shared-steps", type=int, default=720)
    parser.add_argument("--per-window-steps", type=int, default=240)
    parser.add_argument(
        "--set",
        action="append",
        default=None,
        help="model/train overrides for impute-vcf (default: model.d_embedding=8)",
    )
    parser.add_argument("--out", default=str(RESULTS / "genomics"))
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    parser.add_argument(
        "--phased-targets", action="store_true", help="give the methods phased targets (default: unphased)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the results of (panel, method) pairs already in the .json made with the same split "
        "and settings; run the rest",
    )
    args = parser.parse_args(argv)
    if args.report_only:
        out = Path(args.out)
        write_report(json.loads(Path(str(out) + ".json").read_text()), Path(str(out) + ".md"))
        return 0
    start = time.perf_counter()
    methods = args.methods.split(",")
    steps = {"shared": args.shared_steps, "per_window": args.per_window_steps}
    if args.quick:
        steps = {"shared": 20, "per_window": 10}
    for s in args.set if args.set is not None else ["model.d_embedding=8"]:
        MODEL_SETTINGS.extend(["--set", s])
    results: dict[str, Any] = {
        "command": " ".join([".venv/bin/python benchmarks/genomics.py", *(argv or sys.argv[1:])]),
        "machine": machine(),
        "beagle": beagle_version(),
        "code": _code_version(),
        "date": time.strftime("%Y-%m-%d"),
        "steps": steps,
        "model_settings": MODEL_SETTINGS,
        "panels": {},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path = Path(str(out) + ".json")
    earlier = json.loads(json_path.read_text()) if args.resume and json_path.exists() else {}
    # kept results must come from the same package code (the commit may differ in benchmarks/ only)
    same_settings = all(earlier.get(k) == results[k] for k in ("steps", "model_settings")) and (
        str(earlier.get("code", "")).split(", ")[-1] == results["code"].split(", ")[-1]
    )
    kept = ran = 0
    for panel in args.panels.split(","):
        n_blocks = 1 if args.quick else PLAN[panel]["n_blocks"]
        split = prepare(panel, args.seed, n_blocks, phased_targets=args.phased_targets)
        print(f"[{time.perf_counter() - start:6.0f}s] {panel}: {json.dumps(split)[:300]}", flush=True)
        block = {"split": split, "methods": []}
        results["panels"][panel] = block
        done = {}
        old = earlier.get("panels", {}).get(panel)
        if same_settings and old is not None and old["split"] == split:
            done = {r["method"]: r for r in old["methods"] if "error" not in r}
        for method in [m for m in methods if m in PLAN[panel].get("methods", methods)]:
            if method in done:
                kept += 1
                block["methods"].append(done[method])
                print(f"{panel} {method}: kept from {json_path.name}", flush=True)
                continue
            r = run_method(panel, method, steps, args.quick)
            ran += 1
            block["methods"].append(r)
            # written after every method, so a stopped run keeps what it finished (--resume)
            json_path.write_text(json.dumps(results, indent=2, default=float))
            brief = {
                k: r.get(k)
                for k in ("r2_dosage", "r2_haplotype", "concordance", "wall_seconds", "peak_rss_mb", "error")
            }
            print(f"[{time.perf_counter() - start:6.0f}s] {panel} {method}: {brief}", flush=True)
    results["total_minutes"] = (time.perf_counter() - start) / 60
    if kept:  # a resumed run: say which runs made the cells, and their time together
        results["command"] = (
            f"{earlier['command']}; then {results['command']} (the {ran} cells missing before)"
        )
        results["total_minutes"] += earlier.get("total_minutes", 0.0)
    results["reductions"] = reductions(results, args)
    json_path.write_text(json.dumps(results, indent=2, default=float))
    write_report(results, Path(str(out) + ".md"))
    print(f"wrote {out}.json and {out}.md", flush=True)
    return 0


def reductions(results: dict[str, Any], args: argparse.Namespace) -> list[str]:
    s = results["steps"]
    return [
        f"Training steps: {s['shared']} for each shared (meta-learned) model over all windows of a panel, "
        f"{s['per_window']} per window for per-window models, so both modes get the same total steps "
        "(paper: 15k-100k steps on a GPU); models are far from converged.",
        "Models: the `cpu` genomics preset (the SPIN-16 / NPT-16 shapes: depth 4, 1 head, h=f=10, "
        "batches of 256 haplotypes, chunk masking of 15% of rows, LAMB+Lookahead) with learning rate "
        "1e-2 (paper 1e-3), dropout 0.1 (paper 0.4), no attention dropout"
        + (f"; overrides {' '.join(MODEL_SETTINGS[1::2])} (paper e=16)" if MODEL_SETTINGS else "")
        + ".",
        "Evaluated sites: random blocks of 100 consecutive untyped sites (see each panel); every "
        "method sees only the array sites plus those blocks. shapeit4_chr20_whole is the exception: "
        "the whole 3 Mb region, every untyped site, real chip genotypes.",
        "1kgp_first1000: only 24 Omni2.5 sites fall in the first 1000 variants (39 kb), so each window "
        "has 24 typed inputs (padded to 25) instead of 150.",
        "shapeit4_chr20: 50 of the 300 reference samples held out as test (the 203 target samples "
        "have unphased sequence data only); 250 reference samples remain.",
        f"{results.get('beagle') or 'Beagle'} instead of the paper's 5.1; default parameters, the panel's "
        "genetic map, one thread.",
        "One seed (0); the paper reports 5 seeds.",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
