"""``semiparam bench``: run a named benchmark plan and write JSON, a markdown report and plots.

    semiparam bench uci                           # the papers' small UCI tables, 3 CV folds, all models
    semiparam bench uci --models npt,xgboost      # compute only these; the report covers all done
    semiparam bench uci --report-only             # rebuild the report from results already computed
    semiparam bench --list                        # plans, datasets and models

Results go to ``--out`` (default ``benchmarks/results`` when run from the repository, else
``bench-results``): ``<plan>.json``, ``<report>.md``, PNG plots; per-fold progress in
``<out>/tmp/<plan>.jsonl``, from which an interrupted run resumes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

USAGE_EPILOG = __doc__.split("\n\n")[1]


def add_bench_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Register ``bench`` on the ``semiparam`` command's sub-parsers."""
    p = sub.add_parser(
        "bench",
        help="run a benchmark plan (uci, smoke); writes JSON, markdown and plots",
        description=__doc__.split("\n")[0],
        epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("plan", nargs="?", default="uci", help="plan name (default uci); see --list")
    p.add_argument("--datasets", help="compute only these datasets of the plan, comma-separated")
    p.add_argument("--models", help="compute only these models of the plan, comma-separated")
    p.add_argument("--out", help="output directory")
    p.add_argument("--fresh", action="store_true", help="discard earlier per-fold results of this plan")
    p.add_argument("--report-only", action="store_true", help="compute nothing; rebuild the report")
    p.add_argument("--threads", type=int, help="torch threads (default: the plan's, 1)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--list", action="store_true", help="list plans, datasets and models, then exit")
    p.set_defaults(func=cmd_bench)
    return p


def _split(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def _default_out() -> Path:
    repo_results = Path("benchmarks") / "results"
    return repo_results if Path("benchmarks").is_dir() else Path("bench-results")


def cmd_bench(args: argparse.Namespace) -> int:
    import dataclasses

    from .. import datasets
    from .baselines import BASELINES
    from .models import model_unavailable_reason, table_model_names
    from .report import write_report
    from .runner import run_suite, write_results
    from .suites import SUITES, get_plan, report_intro

    if args.list:
        print("plans:    " + ", ".join(sorted(SUITES)))
        print("datasets: " + ", ".join(datasets.list_datasets()))
        for key in list(table_model_names()) + list(BASELINES):
            reason = model_unavailable_reason(key)
            print(f"model {key:<24}" + (f"unavailable: {reason}" if reason else "available"))
        return 0
    plan = get_plan(args.plan)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        plan = dataclasses.replace(plan, threads=args.threads)
    out = Path(args.out) if args.out else _default_out()
    only_models = _split(args.models)
    only_datasets = _split(args.datasets)
    results = run_suite(
        plan,
        out / "tmp",
        resume=not args.fresh,
        only_datasets=only_datasets,
        only_models=only_models,
        compute=not args.report_only,
    )
    json_path = write_results(results, out / f"{plan.stem}.json")
    command = f"semiparam bench {args.plan}" + (f" --threads {args.threads}" if args.threads else "")
    title, intro = report_intro(plan.name)
    report = write_report(
        results,
        out / f"{plan.stem}.md",
        title=title,
        command=command,
        intro=intro,
        with_plots=not args.no_plots,
    )
    print(f"wrote {json_path} and {report}")
    return 0
