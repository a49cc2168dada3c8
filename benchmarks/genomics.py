#!/usr/bin/env python
"""Genotype imputation on real panels: the haplotype-copying default, SPIN and NPT (``semiparam
impute-vcf``) beside Beagle 5 (the version installed) and a nearest-haplotype k-NN, on the same
split, sites and VCF files: dosage and haplotype R² (by MAF), concordance, seconds and memory.

    python benchmarks/genomics.py                        # every panel and method (resumes)
    python benchmarks/genomics.py --quick                # a smoke run: 1 block, a few steps
    python benchmarks/genomics.py --methods knn,beagle --panels shapeit4_chr20

Protocol (spec-spin section 5): held-out reference samples are given as unphased genotypes at the
array sites and every other site is imputed. Panels (``$SEMIPARAM_DATA_DIR/genomics``):
``1kgp_first1000`` (1000 Genomes chr20, first 1000 variants; test = genotypooler's 240 study
samples; array = the Omni2.5 sites), ``shapeit4_chr20`` (the SHAPEIT4 example panel; test = 50 of
its 300 samples; array = the Omni scaffold sites on the panel), both evaluated on random blocks of
100 consecutive untyped polymorphic sites (the paper's windows; each method's reference holds the
array sites and those blocks), and ``shapeit4_chr20_whole``: the whole region as a user runs it
(the panel as reference, the 203 other samples' chip genotypes as targets, their sequence
genotypes as truth). Each method is its own process with one thread, timed with its start-up.
Records: ``<out>/genomics.jsonl``; report ``genomics.md`` (+ ``.json``); scratch files under
``<out>/tmp/genomics/``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import harness as h
import numpy as np

import semiparam.genomics as sg
from semiparam.datasets import data_dir

BLOCK = 100  # untyped sites per evaluated window (the paper's 100 target SNPs)
# per panel: evaluated blocks, typed inputs per window; steps are this CPU's budget, not the paper's
PLAN: dict[str, dict[str, Any]] = {
    "1kgp_first1000": {"n_blocks": 3, "n_inputs": 25},
    "shapeit4_chr20": {"n_blocks": 3, "n_inputs": 150, "n_test_samples": 50},
    "shapeit4_chr20_whole": {"n_blocks": 0, "whole": True},
}
MODEL_RUNS = {"copy": ["--model", "copy"], "knn": ["--model", "knn"]} | {
    f"{m}-{w}": ["--model", m, "--mode", w] for w in ("shared", "per-window") for m in ("spin", "npt")
}  # fmt: skip
STEPS = {"shared": 720, "per-window": 240}  # the same total steps for both modes (paper: 15k-100k)
METHODS = ["copy", "copy-panel", "beagle", *list(MODEL_RUNS)[1:]]
WHOLE_METHODS = ["copy", "copy-panel", "beagle", "knn"]  # the table models: hundreds of windows
MODEL_SETTINGS = ["--set", "model.d_embedding=8"]


# -- the split ---------------------------------------------------------------------------------
@cache
def prepare(name: str, seed: int, n_blocks: int, scratch: Path) -> dict[str, Any]:
    """Write ref.vcf.gz (reference samples at the array sites and the evaluated blocks),
    target.vcf.gz (the test samples at the array sites, unphased), truth.npz and a PLINK map;
    return the split's description."""
    out = scratch / name
    out.mkdir(parents=True, exist_ok=True)
    if PLAN[name].get("whole"):
        return prepare_whole(out)
    base = data_dir() / "genomics"
    rng = np.random.default_rng(seed)
    if name == "1kgp_first1000":
        d = base / "1kgp_phase3_chr20"
        panel, report = sg.read_reference_panel(d / "ALL.chr20.first1000.vcf.gz")
        test = [s for s in (d / "study.population.txt").read_text().split() if s in set(panel.samples)]
        array = set(sg.read_positions(d / "omni25_HDonly_chr20.coords.gz"))
        array |= set(sg.read_positions(d / "omniexpress_LDonly_chr20.coords.gz"))
        typed = np.array([(c, p) in array for c, p in zip(panel.sites.chrom, panel.sites.pos)])
        with gzip.open(d / "plink.chr20.GRCh37.map.gz", "rt") as src:
            (out / "plink.map").write_text(src.read())
    else:
        d = base / "shapeit4_example_chr20"
        panel, report = sg.read_reference_panel(d / "reference.vcf.gz")
        chosen = rng.choice(panel.samples, size=PLAN[name]["n_test_samples"], replace=False)
        test = [s for s in panel.samples if s in set(chosen.tolist())]
        scaffold = set(sg.read_vcf(d / "scaffold.vcf.gz")[0].sites.keys())
        typed = np.array([k in scaffold for k in panel.sites.keys()])
        _write_plink_map(d / "chr20.b37.gmap.gz", out / "plink.map")
    ref_panel = panel.subset_samples([s for s in panel.samples if s not in set(test)])
    alt = ref_panel.alt_counts()
    candidates = np.flatnonzero(~typed & (alt > 0) & (alt < ref_panel.n_haplotypes))
    n_possible = len(candidates) // BLOCK
    picked = np.sort(rng.choice(n_possible, size=min(n_blocks, n_possible), replace=False))
    blocks = [candidates[b * BLOCK : (b + 1) * BLOCK] for b in picked]
    evaluated = np.concatenate(blocks)
    keep = np.sort(np.concatenate([np.flatnonzero(typed), evaluated]))
    sg.write_genotypes_vcf(out / "ref.vcf.gz", ref_panel.subset_sites(keep).as_genotypes(), source=__file__)
    test_geno = panel.subset_samples(test).as_genotypes()
    t = test_geno.subset_sites(np.flatnonzero(typed))  # what an array gives: no phase, written 0/1
    t = sg.GenotypeData(
        t.sites, t.samples, np.sort(t.alleles, axis=2), np.zeros_like(t.phased), t.contig_lines
    )
    sg.write_genotypes_vcf(out / "target.vcf.gz", t, source=__file__)
    np.savez_compressed(
        out / "truth.npz", pos=panel.sites.pos[evaluated], truth=test_geno.alleles[evaluated],
        maf=sg.minor_allele_frequency(ref_panel.haplotypes[evaluated]),
    )  # fmt: skip
    return {
        "panel": name, "n_variants_in_file": report.n_records, "n_test_samples": len(test),
        "n_reference_haplotypes": ref_panel.n_haplotypes, "n_array_sites": int(typed.sum()),
        "n_blocks_possible": int(n_possible), "n_blocks": len(blocks), "n_eval_sites": len(evaluated),
        "seed": seed,
        "block_positions": [[int(panel.sites.pos[b[0]]), int(panel.sites.pos[b[-1]])] for b in blocks],
    }  # fmt: skip


def prepare_whole(out: Path) -> dict[str, Any]:
    """The SHAPEIT4 region whole: reference = the panel file; targets = the 203 other samples'
    scaffold genotypes at the sites that match a panel variant, as the chip gave them; truth =
    their sequence genotypes at every other panel site alone at its position, with no missing call."""
    d = data_dir() / "genomics" / "shapeit4_example_chr20"
    panel, report = sg.read_reference_panel(d / "reference.vcf.gz")
    scaffold, _ = sg.read_vcf(d / "scaffold.vcf.gz")
    keys = set(panel.sites.keys())
    on_panel = np.flatnonzero([k in keys for k in scaffold.sites.keys()])
    sg.write_genotypes_vcf(out / "target.vcf.gz", scaffold.subset_sites(on_panel), source=__file__)
    (out / "ref.vcf.gz").unlink(missing_ok=True)
    (out / "ref.vcf.gz").symlink_to(d / "reference.vcf.gz")
    sequence, _ = sg.read_vcf(d / "unphased.vcf.gz", samples=scaffold.samples)
    typed_pos = set(scaffold.sites.pos[on_panel].tolist())
    positions, counts = np.unique(panel.sites.pos, return_counts=True)
    single = set(positions[counts == 1].tolist())
    seq_index = {k: i for i, k in enumerate(sequence.sites.keys())}
    pairs = [(i, seq_index.get(k)) for i, k in enumerate(panel.sites.keys()) if k[1] not in typed_pos]
    pairs = [(i, j) for i, j in pairs if j is not None and panel.sites.pos[i] in single]
    rows, truth_rows = zip(*[(i, j) for i, j in pairs if (sequence.alleles[j] >= 0).all()])
    rows, truth_rows = list(rows), list(truth_rows)
    np.savez_compressed(
        out / "truth.npz", pos=panel.sites.pos[rows], truth=sequence.alleles[truth_rows],
        maf=sg.minor_allele_frequency(panel.haplotypes[rows]),
    )  # fmt: skip
    _write_plink_map(d / "chr20.b37.gmap.gz", out / "plink.map")
    return {
        "panel": "shapeit4_chr20_whole", "whole": True, "n_variants_in_file": report.n_records,
        "n_reference_haplotypes": panel.n_haplotypes, "n_test_samples": scaffold.n_samples,
        "n_array_sites": int(len(on_panel)), "n_panel_sites": panel.n_sites, "n_eval_sites": len(rows),
        "target_missing_fraction": float((scaffold.alleles[on_panel] < 0).any(axis=2).mean()),
        "target_phased_fraction": float(scaffold.phased[on_panel].mean()),
    }  # fmt: skip


def _write_plink_map(shapeit_map: Path, path: Path) -> None:
    """Beagle's ``map=`` (PLINK: ``chrom . cM bp``) from a SHAPEIT map (``pos chr cM``)."""
    with gzip.open(shapeit_map, "rt") as src:
        next(src)
        path.write_text("".join(f"{c}\t.\t{cm}\t{p}\n" for p, c, cm in (line.split() for line in src)))


# -- one method --------------------------------------------------------------------------------
def run_method(s: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Run a method on the prepared files of a panel: its seconds and memory and the metrics of its
    output. ``copy-panel``: ``semiparam fit-panel`` once (timed apart), then ``impute-vcf --panel``."""
    panel, method = s["panel"], s["method"]
    split = prepare(panel, s["seed"], s["n_blocks"], scratch)
    d = scratch / panel
    out_vcf = d / f"out_{method}.vcf.gz"
    shape = ["--n-inputs", str(PLAN[panel].get("n_inputs")), "--window-targets", str(BLOCK), "--overlap", "0"]
    shape = [] if PLAN[panel].get("whole") else shape  # the whole region: the defaults, as a user runs it
    cli = [sys.executable, "-m", "semiparam.cli.main"]
    io = ["--out", str(out_vcf), "--ap", "--no-index", "--quiet", "--force"]
    result: dict[str, Any] = {"split": split}
    if method == "beagle":
        if shutil.which("beagle") is None:
            return {"ok": False, "error": "beagle not installed (apt-get install beagle)"}
        cmd = ["beagle", f"ref={d / 'ref.vcf.gz'}", f"gt={d / 'target.vcf.gz'}", f"out={d / 'out_beagle'}",
               f"map={d / 'plink.map'}", "nthreads=1", "ap=true", "gp=true", "seed=1"]  # fmt: skip
    elif method == "copy-panel":
        fit = [*cli, "fit-panel", str(d / "ref.vcf.gz"), "--out", str(d / "copy.panel"), "--force", "--quiet"]
        result["fit_panel"] = _run_timed([*fit, "--map", str(d / "plink.map"), *shape], d / "fit-panel.log")
        if "error" in result["fit_panel"]:
            return {"ok": False, "error": result["fit_panel"]["error"]}
        cmd = [*cli, "impute-vcf", "--panel", str(d / "copy.panel"), "--target", str(d / "target.vcf.gz")]
        cmd += io
    else:
        steps = [] if s.get("steps") is None else ["--steps", str(s["steps"])]
        cmd = [*cli, "impute-vcf", "--ref", str(d / "ref.vcf.gz"), "--target", str(d / "target.vcf.gz"), *io,
               *shape, "--map", str(d / "plink.map"), *MODEL_RUNS[method], *steps, *s["set"]]  # fmt: skip
    result.update(_run_timed(cmd, d / f"out_{method}.log"))
    if "error" in result:
        return {"ok": False, **result}
    summary = Path(f"{out_vcf}.summary.json")
    if summary.exists():
        found = json.loads(summary.read_text())
        result.update({k: found.get(k) for k in ("fit_seconds", "impute_seconds", "n_parameters")})
    return {**result, **evaluate(d, out_vcf)}


def _run_timed(cmd: list[str], log_path: Path) -> dict[str, Any]:
    """Run the program ``cmd`` with one thread: its wall and CPU seconds and peak resident memory (its
    own high-water mark, polled: Beagle's script execs java in the same process), or its error."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start, peak_kb = time.perf_counter(), 0
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=h.ROOT)
        while not (waited := os.wait4(proc.pid, os.WNOHANG))[0]:
            try:
                found = re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{proc.pid}/status").read_text())
                peak_kb = max(peak_kb, int(found.group(1)) if found else 0)
            except OSError:
                pass
            time.sleep(0.05)
    _, status, usage = waited
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; tell Popen
    result: dict[str, Any] = {
        "command": " ".join(str(c) for c in cmd).replace(str(h.ROOT) + "/", ""),
        "wall_seconds": time.perf_counter() - start,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": peak_kb / 1024 if peak_kb else None,
    }
    if proc.returncode != 0:
        result["error"] = log_path.read_text()[-2000:]
    return result


def evaluate(d: Path, out_vcf: Path) -> dict[str, Any]:
    """Metrics of an imputed VCF (ours or Beagle's, both with AP1/AP2) at the evaluated sites."""
    import cyvcf2

    truth = np.load(d / "truth.npz")
    wanted = {int(p): i for i, p in enumerate(truth["pos"])}
    probs = np.full(truth["truth"].shape, np.nan)  # (n_eval, n_samples, 2)
    for rec in cyvcf2.VCF(str(out_vcf)):
        i = wanted.get(int(rec.POS))
        if i is None or len(rec.ALT) != 1:
            continue
        probs[i, :, 0], probs[i, :, 1] = rec.format("AP1")[:, 0], rec.format("AP2")[:, 0]
    found = ~np.isnan(probs).any(axis=(1, 2))
    metrics = sg.evaluate_imputation(truth["truth"][found], probs[found], truth["maf"][found])
    return {**metrics, "n_eval_sites_missing_in_output": int((~found).sum())}


def beagle_version() -> str | None:
    """ "Beagle <version> (<build>)" as the installed ``beagle`` prints it, or None if absent."""
    res = subprocess.run(["beagle"], capture_output=True, text=True) if shutil.which("beagle") else None
    match = res and re.search(r"beagle\.(\S+)\.jar\s*\(version\s*([0-9.]+)\)", res.stdout + res.stderr)
    return f"Beagle {match.group(2)} ({match.group(1)})" if match else None


# -- the report --------------------------------------------------------------------------------
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


def verdict(by_panel: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The default against Beagle per panel: dosage R² and wall time as a multiple of Beagle's."""
    rows = []
    for panel, by in by_panel.items():
        copy, beagle, via = (
            by[m] if by.get(m, {}).get("ok") else None for m in ("copy", "beagle", "copy-panel")
        )
        if copy and beagle:
            rows.append([
                panel, round(copy["r2_dosage"], 4), round(beagle["r2_dosage"], 4),
                f"{copy['r2_dosage'] - beagle['r2_dosage']:+.4f}",
                f"{copy['wall_seconds'] / beagle['wall_seconds']:.1f}x",
                round(via["fit_panel"]["wall_seconds"], 1) if via else None,
                round(via["wall_seconds"], 1) if via else None, round(beagle["wall_seconds"], 1),
            ])  # fmt: skip
    heads = ["panel", "R² dosage copy", "R² dosage Beagle", "copy - Beagle", "wall copy / Beagle",
             "fit-panel once (s)", "per file with --panel (s)", "Beagle (s)"]  # fmt: skip
    return ["## The default against Beagle", "", *h.md_table(heads, rows)]


def method_table(by: dict[str, dict[str, Any]]) -> list[str]:
    ok = [r for r in by.values() if r["ok"]]
    bins = [(b["lo"], b["hi"], b["n_sites"]) for b in ok[0]["r2_dosage_by_maf"]] if ok else []
    by_maf = [f"R² dos. MAF ({lo:g},{hi:g}] (n={n})" for lo, hi, n in bins]
    heads = ["method", "R² dosage", "R² hap", *by_maf, "concord.", "non-ref conc.", "wall s", "CPU s",
             "fit s", "impute s", "peak MiB", "params"]  # fmt: skip
    r4 = lambda x: None if x is None else round(x, 4)  # noqa: E731
    r1 = lambda x: None if x is None else round(x, 1)  # noqa: E731
    rows = []
    for method, r in by.items():
        if not r["ok"]:
            error = (r["error"].strip().splitlines() or ["?"])[-1][-120:]
            rows.append([method, f"failed: {error}", *[""] * (len(heads) - 2)])
            continue
        rows.append([
            method, r4(r["r2_dosage"]), r4(r["r2_haplotype"]), *(r4(b["r2"]) for b in r["r2_dosage_by_maf"]),
            r4(r["concordance"]), r4(r["nonref_concordance"]), r1(r["wall_seconds"]), r1(r["cpu_seconds"]),
            r1(r.get("fit_seconds")), r1(r.get("impute_seconds")), None if r["peak_rss_mb"] is None else
            round(r["peak_rss_mb"]), f"{r['n_parameters'] / 1e6:.1f}M" if r.get("n_parameters") else None,
        ])  # fmt: skip
    return h.md_table(heads, rows)


def report_lines(recs: list[dict[str, Any]], beagle: str | None) -> list[str]:
    by_panel: dict[str, dict[str, dict[str, Any]]] = {}
    for r in recs:
        by_panel.setdefault(r["settings"]["panel"], {})[r["settings"]["method"]] = r
    steps = {r["settings"]["method"].split("-", 1)[-1]: r["settings"].get("steps") for r in recs}
    lines = [
        "Held-out samples of each panel are given to every method as **unphased** genotypes at the array "
        "sites only (an array's output, written `0/1`) and every other site is imputed. R² is Pearson's r² "
        "pooled over the evaluated (site, sample) dosages (**R² dosage**, phase-free: the fair comparison "
        "with Beagle, which re-phases its input) or (site, haplotype) ALT probabilities (**R² hap**, the "
        "paper's number; with unphased targets it also scores each method's phasing against the truth's "
        "arbitrary orientation), overall and by MAF of the reference panel. Concordance: most likely "
        "genotype = truth (all genotypes / those where truth or call is not REF/REF). Time and memory: "
        "each method's own process (Python or the JVM started included), one thread, one at a time; "
        "`fit s` / `impute s` are the model's own stages from its run summary.",
        "",
        "`copy` is `semiparam impute-vcf` at its defaults (the Li-Stephens haplotype-copying model Beagle "
        "also rests on; unphased targets phased by the diploid copying model; it trains nothing) given the "
        "panel's genetic map as Beagle is; `copy-panel` is the same model fitted once with `semiparam "
        "fit-panel`, then run with `impute-vcf --panel` (its row times the per-file run).",
        "",
        *verdict(by_panel),
        "",
        "**Reductions (everything differs from the paper here):**",
        "",
        f"- Training steps: {steps.get('shared', '-')} for each shared (meta-learned) model over all windows "
        f"of a panel, {steps.get('per-window', '-')} per window for per-window models (paper: 15k-100k steps "
        "on a GPU): budget-bound numbers, far from converged, not the models' ceiling.",
        "- Models: the `cpu` genomics preset (SPIN-16 / NPT-16 shapes: depth 4, 1 head, h=f=10, batches of "
        "256 haplotypes, chunk masking of 15% of rows) with learning rate 1e-2 (paper 1e-3), dropout 0.1 "
        f"(paper 0.4); overrides {' '.join(MODEL_SETTINGS[1::2])} (paper e=16).",
        "- 1kgp_first1000: only 24 Omni2.5 sites fall in the first 1000 variants (39 kb): 24 typed inputs "
        "per window (padded to 25) instead of 150. shapeit4_chr20: 50 of the 300 reference samples held "
        "out as test (the 203 target samples have unphased sequence data only).",
        f"- {beagle or 'Beagle'} instead of the paper's 5.1 (default parameters, the panel's genetic map); "
        "one seed (the paper: 5).",
        "- Paper, for scale (spec-spin Table 3: 1000 Genomes chr20, 4388 reference haplotypes, 150 Omni "
        "inputs, single 100-SNP windows, 15k+ steps on a GPU; pooled haplotype R² in %): Beagle 5.1 "
        "95.64, NPT-16 95.84, SPIN-16 95.92, KNN 89.70. Table 4 (one shared model over 10 windows, "
        "100k steps): SPIN-64 95.38, NPT-64 95.06.",
    ]
    for panel, by in by_panel.items():
        split = next((r["split"] for r in by.values() if "split" in r), None)
        lines += ["", f"## {panel}", "", _split_text(split) if split else "", "", *method_table(by)]
    lines += ["", "Each method's command line and each split: `genomics.json` (`command`, `split`)."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--panels", default=",".join(PLAN))
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 block, a few steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=h.RESULTS)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    records = h.Records(args.out / "genomics.jsonl")
    steps = {"shared": 20, "per-window": 10} if args.quick else STEPS
    beagle = beagle_version()
    wanted = []
    for panel in args.panels.split(","):
        allowed = WHOLE_METHODS if PLAN[panel].get("whole") else METHODS
        for method in (m for m in args.methods.split(",") if m in allowed):
            s = {"panel": panel, "method": method, "seed": args.seed, "n_blocks": PLAN[panel]["n_blocks"]}
            s["n_blocks"] = min(s["n_blocks"], 1) if args.quick else s["n_blocks"]
            if method in MODEL_RUNS:
                s.update(steps=steps.get(method.split("-", 1)[-1]), set=MODEL_SETTINGS)
            if method == "beagle":
                s["beagle"] = beagle
            wanted.append(s)
            if not args.report_only:
                rec = records.run(s, lambda s: run_method(s, args.out / "tmp" / "genomics"))
                print(f"{panel} {method}: R² dosage {rec.get('r2_dosage')} {rec.get('error', '')[-300:]}")
    recs = [r for s in wanted if (r := records.get(s)) is not None]
    title = "Genotype imputation: haplotype copying (the default), SPIN and NPT beside Beagle and a k-NN"
    path = h.write_report(args.out / "genomics", title, report_lines(recs, beagle), recs, records=recs)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
