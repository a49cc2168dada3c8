"""What each lever of the default imputer is worth: the copying model on the splits that
``benchmarks/genomics.py`` prepared (unphased targets), one setting changed at a time, in process.

    .venv/bin/python benchmarks/genomics.py --methods copy   # prepares the splits (or any run of it)
    .venv/bin/python benchmarks/genomics_levers.py           # writes results/genomics_levers.{json,md}

Rows: the defaults; phasing by the best-match heuristic (``unphased="match"``) instead of the
diploid copying model; no refinement pass of the phasing; fewer or more phasing candidates; a fixed
``ne`` instead of the one picked on held-out reference samples; and the targets given *phased*
(their true phase), which bounds what better phasing could add. Seconds are fit + impute in this
process (no start-up, no VCF reading or writing), one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import genomics as bench  # noqa: E402

from semiparam.genomics import (  # noqa: E402
    GenotypeImputer,
    align_targets,
    evaluate_imputation,
    read_reference_panel,
    read_vcf,
)

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "phasing: best-match heuristic": {"unphased": "match"},
    "phasing: no refinement pass": {"copying": {"refinements": 0}},
    "phasing: 20 candidates": {"copying": {"n_candidates": 20}},
    "phasing: 80 candidates": {"copying": {"n_candidates": 80}},
    "ne fixed at 1e5 (not picked)": {"copying": {"ne": 1e5}},
    "ne fixed at 1e6 (not picked)": {"copying": {"ne": 1e6}},
    "targets given phased (true phase)": {"phased_targets": True},
}


def run(panel: str, variant: dict[str, Any]) -> dict[str, Any]:
    d = bench.SCRATCH / panel
    ref, _ = read_reference_panel(d / "ref.vcf.gz")
    settings = dict(variant)
    phased_targets = settings.pop("phased_targets", False)
    truth = np.load(d / "truth.npz")
    target, _ = read_vcf(d / "target.vcf.gz")
    aligned = align_targets(ref.sites, target)
    alleles, phased = aligned.alleles, aligned.phased
    row = {int(p): i for i, p in enumerate(ref.sites.pos)}
    if phased_targets:  # the test samples' true haplotypes at the typed sites
        full, _ = read_reference_panel(bench._panel_files(panel)["vcf"])
        names = aligned.samples
        true = full.subset_samples(names).as_genotypes()
        where = {int(p): i for i, p in enumerate(true.sites.pos)}
        typed_rows = np.flatnonzero(aligned.typed)
        alleles = alleles.copy()
        alleles[typed_rows] = true.alleles[[where[int(ref.sites.pos[i])] for i in typed_rows]]
        phased = np.ones_like(phased)
    imp = GenotypeImputer(
        n_inputs=bench.PLAN[panel]["n_inputs"],
        window_targets=bench.BLOCK,
        overlap=0,
        genetic_map=str(d / "plink.map"),
        **settings,
    )
    start = time.perf_counter()
    imp.fit(ref, aligned.typed)
    probs = imp.impute(alleles, phased)
    seconds = time.perf_counter() - start
    rows = [row[int(p)] for p in truth["pos"]]
    metrics = evaluate_imputation(truth["truth"], probs[rows].astype(np.float64), truth["maf"])
    return {
        "r2_dosage": metrics["r2_dosage"],
        "r2_dosage_by_maf": metrics["r2_dosage_by_maf"],
        "seconds": seconds,
        "ne": imp.copying_.ne,
    }


def write_report(results: dict[str, Any], path: Path) -> None:
    lines = [
        "# Levers of the default genotype imputer (haplotype copying)",
        "",
        f"Command: `{results['command']}`  ",
        f"Code: {results['code']}  ",
        f"Machine: {results['machine']}  ",
        f"Date: {results['date']}",
        "",
        "The splits of `genomics.md` (unphased targets at array sites; evaluated blocks of untyped "
        "sites). One setting changed at a time from the defaults; seconds are fit + impute inside "
        "one process (no start-up or VCF input/output), one thread.",
        "",
    ]
    for panel, rows in results["panels"].items():
        bins = next(iter(rows.values()))["r2_dosage_by_maf"]
        heads = ["variant", "R² dosage", *[f"MAF ({b['lo']:g},{b['hi']:g}]" for b in bins], "ne", "seconds"]
        lines += [f"## {panel}", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        for name, r in rows.items():
            cells = [name, f"{r['r2_dosage']:.4f}", *[f"{b['r2']:.3f}" for b in r["r2_dosage_by_maf"]]]
            cells += [f"{r['ne']:.3g}", f"{r['seconds']:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--panels", default=",".join(p for p in bench.PLAN if not bench.PLAN[p].get("whole")))
    parser.add_argument("--out", default=str(bench.RESULTS / "genomics_levers"))
    args = parser.parse_args(argv)
    results: dict[str, Any] = {
        "command": " ".join(["python benchmarks/genomics_levers.py", *(argv or sys.argv[1:])]),
        "code": bench._code_version(),
        "machine": bench.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "panels": {},
    }
    out = Path(args.out)
    for panel in args.panels.split(","):
        if not (bench.SCRATCH / panel / "truth.npz").exists():
            raise SystemExit(f"no prepared split for {panel}: run benchmarks/genomics.py first")
        results["panels"][panel] = {}
        for name, variant in VARIANTS.items():
            r = run(panel, variant)
            results["panels"][panel][name] = r
            print(
                f"{panel} {name}: R2 {r['r2_dosage']:.4f} ({r['seconds']:.1f}s, ne {r['ne']:.3g})", flush=True
            )
            Path(str(out) + ".json").write_text(json.dumps(results, indent=2, default=float))
    write_report(results, Path(str(out) + ".md"))
    print(f"wrote {out}.json and {out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
