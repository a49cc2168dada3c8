"""``semiparam impute-vcf``: impute untyped sites of target VCF genotypes from a phased reference
panel, by haplotype copying (the default), SPIN, NPT or the nearest-haplotype baseline (the logic is
:func:`semiparam.genomics.impute_vcf`).

    semiparam impute-vcf --ref ref.vcf.gz --target array.vcf.gz --out imputed.vcf.gz \\
        [--array-sites omni.positions.gz] [--map genetic.map] \\
        [--model copy|spin|npt|knn] [--mode per-window|shared]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path


def add_impute_vcf_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "impute-vcf",
        help="impute untyped sites of a target VCF from a phased reference panel VCF",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--ref", help="phased reference panel (VCF, VCF.gz or BCF)")
    p.add_argument("--target", required=True, help="target genotypes at array sites (VCF, VCF.gz or BCF)")
    p.add_argument(
        "--out", required=True, help="output .vcf.gz (bgzipped, indexed when bcftools/tabix exist) or .vcf"
    )
    p.add_argument(
        "--array-sites",
        help="typed array positions ('chrom pos' per line, gzip ok, or a VCF); default: every target site",
    )
    p.add_argument("--region", help="chrom:start-end to read from both files (needs indexes)")
    _model_arguments(p)
    p.add_argument("--kmer", type=int, default=5, help="alleles per token (default 5: 32 classes)")
    p.add_argument(
        "--min-mac", type=int, default=1, help="model untyped sites with at least this minor allele count"
    )
    p.add_argument(
        "--unphased",
        default="phase",
        choices=["phase", "match", "error"],
        help="unphased heterozygous targets: phase them with a diploid copying model (default), "
        "with a best-match heuristic, or refuse them",
    )
    p.add_argument(
        "--knn-neighbors", type=int, help="k of --model knn (default: picked on held-out haplotypes)"
    )
    p.add_argument("--config", help="TOML file with [model] and [train] tables")
    p.add_argument(
        "--set", action="append", metavar="SECTION.KEY=VALUE", help="override a model/train setting"
    )
    p.add_argument("--save-model", help="save the fitted imputer to this directory")
    p.add_argument(
        "--force", action="store_true", help="replace an existing --out file or --save-model directory"
    )
    p.add_argument(
        "--panel",
        "--model-dir",
        dest="model_dir",
        help="a panel saved by `semiparam fit-panel` or --save-model, used instead of --ref",
    )
    p.add_argument("--summary", help="write the run summary as JSON here (default: <out>.summary.json)")
    p.add_argument("--no-index", action="store_true", help="do not write a .tbi index")
    p.add_argument(
        "--ap", action="store_true", help="also write per-haplotype ALT probabilities (FORMAT AP1, AP2)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="go on from the chunks (windows with --panel or a table model) that a killed run of the "
        "same command finished (<out>.partial/)",
    )
    p.add_argument(
        "--threads", type=int, default=1, help="windows imputed at once, in threads (knn; default 1)"
    )
    p.add_argument(
        "--chunk-sites",
        type=int,
        default=20_000,
        help="copy and knn read and impute the panel in chunks of this many sites (default 20000), "
        "so memory does not grow with the chromosome",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA, MPS, else CPU), cpu, cuda:1...")
    from .common import ray_options

    ray_options(p, "the per-window models")
    p.set_defaults(func=cmd_impute_vcf)


def add_fit_panel_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "fit-panel",
        help="fit an imputer on a reference panel once, for `impute-vcf --panel`",
        description="Fit an imputer on a phased reference panel and save it; `semiparam impute-vcf "
        "--panel DIR --target T.vcf.gz --out O.vcf.gz` then imputes target files without reading the "
        "panel's VCF again.",
    )
    p.add_argument("ref", help="phased reference panel (VCF, VCF.gz or BCF)")
    p.add_argument("--out", required=True, help="directory to write")
    p.add_argument(
        "--array-sites", help="typed array positions ('chrom pos' per line); needed by table models"
    )
    p.add_argument("--region", help="chrom:start-end to read (needs an index)")
    _model_arguments(p)
    p.add_argument("--force", action="store_true", help="replace an existing --out directory")
    p.set_defaults(func=cmd_fit_panel)


def _model_arguments(p: argparse.ArgumentParser) -> None:
    """The model, window and seed options that fit-panel and impute-vcf share."""
    p.add_argument(
        "--model",
        default="copy",
        help="copy (haplotype copying, default) | knn (nearest-haplotype baseline) | spin | npt | any "
        "registered model (the table models need the typed sites: a target, or --array-sites)",
    )
    p.add_argument(
        "--map",
        dest="genetic_map",
        help="genetic map, PLINK 'chrom id cM bp' or SHAPEIT 'pos chr cM' (gzip ok); default 1 cM/Mb",
    )
    p.add_argument(
        "--mode",
        default="per-window",
        choices=["per-window", "shared"],
        help="one model per window, or one meta-learned model shared by all windows",
    )
    p.add_argument("--preset", default="cpu", help="cpu | paper16 | paper64")
    p.add_argument("--steps", type=int, help="training steps (per window, or in all for --mode shared)")
    p.add_argument("--n-inputs", type=int, default=150, help="typed sites per window (default 150)")
    p.add_argument("--window-targets", type=int, default=100, help="untyped sites per window (default 100)")
    p.add_argument(
        "--overlap", type=int, default=20, help="untyped sites shared by consecutive windows (default 20)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _model_params(args: argparse.Namespace) -> dict[str, object]:
    """GenotypeImputer settings from :func:`_model_arguments`'s options."""
    return {
        "model": args.model,
        "mode": args.mode.replace("-", "_"),
        "preset": args.preset,
        "max_steps": args.steps,
        "n_inputs": args.n_inputs,
        "window_targets": args.window_targets,
        "overlap": args.overlap,
        "genetic_map": args.genetic_map,
        "random_state": args.seed,
        "verbose": False if args.quiet else None,
    }


def _logger(args: argparse.Namespace) -> Callable[[str], None]:
    start = time.perf_counter()

    def log(message: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    return log


def cmd_fit_panel(args: argparse.Namespace) -> int:
    from ..genomics import fit_panel
    from .common import check_writable

    check_writable(args.out, args.force)
    summary = fit_panel(
        args.ref,
        args.out,
        array_sites=args.array_sites,
        region=args.region,
        overwrite=args.force,
        log=_logger(args),
        **_model_params(args),
    )
    (Path(args.out) / "fit_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return 0


def cmd_impute_vcf(args: argparse.Namespace) -> int:
    from .common import check_writable, load_settings

    try:
        from ..genomics import impute_vcf
    except ModuleNotFoundError as err:  # pragma: no cover - torch etc. missing
        print(f"semiparam: error: {err}", file=sys.stderr)
        return 2
    if args.ref is None and args.model_dir is None:
        raise ValueError("give --ref (a phased reference panel) or --model-dir (a saved imputer)")
    check_writable(args.out, args.force)
    if args.save_model:
        check_writable(args.save_model, args.force)
    model_options, train_options = load_settings(args.config, args.set or [])
    try:
        summary = impute_vcf(
            args.ref,
            args.target,
            args.out,
            array_sites=args.array_sites,
            region=args.region,
            model_dir=args.model_dir,
            save_model=args.save_model,
            overwrite=args.force,
            index=not args.no_index,
            ap=args.ap,
            resume=args.resume,
            n_jobs=args.threads,
            chunk_sites=args.chunk_sites,
            log=_logger(args),
            **_model_params(args),
            kmer=args.kmer,
            min_mac=args.min_mac,
            unphased=args.unphased,
            knn_neighbors=args.knn_neighbors,
            model_options=model_options or None,
            train_options=train_options or None,
            device=args.device,
            executor=args.executor,
            ray_address=args.ray_address,
        )
    except ModuleNotFoundError as err:
        print(f"semiparam: error: {err}", file=sys.stderr)
        return 2
    summary_path = Path(args.summary) if args.summary else Path(str(args.out) + ".summary.json")
    summary_path.write_text(json.dumps(summary, indent=2, default=str))
    if not args.quiet:
        print(
            f"imputed {summary['n_imputed']} sites for {summary['n_samples']} samples "
            f"({summary['n_typed']} typed) with {summary['model']}; wrote {args.out}; "
            f"summary in {summary_path}"
        )
    return 0
