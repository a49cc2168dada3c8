"""``semiparam tune``: search a table model's settings (:func:`semiparam.tuning.tune`) from the
command line; the best settings land in ``OUT/best.toml`` for ``semiparam fit --config``."""

from __future__ import annotations

import argparse
import shlex
from typing import Any


def cmd_tune(args: argparse.Namespace) -> int:
    from ..tuning import tune
    from .common import load_settings, read_table, split_list

    model_options, train_options = load_settings(args.config, args.set or [])
    frame = read_table(args.data, split_list(args.na_values))
    targets = split_list(args.target) or []
    result = tune(
        frame,
        targets,
        model=args.model,
        preset=args.preset,
        n_trials=args.trials,
        timeout=args.timeout,
        n_estimators=args.n_estimators,
        model_options=model_options,
        train_options=train_options,
        categorical_features=split_list(args.categorical),
        validation_fraction=args.validation_fraction,
        random_state=args.seed,
        device=args.device,
        threads=args.threads,
        out=args.out,
        resume=args.resume,
        overwrite=args.force,
        executor=args.executor,
        ray_address=args.ray_address,
        max_concurrent=args.max_concurrent,
        cpus_per_trial=args.cpus_per_trial,
        verbose=not args.quiet,
    )
    trials = result.trials
    done = int((trials["state"] == "COMPLETE").sum())
    print(f"{done} of {len(trials)} trials finished; score: lower is better (held-out rows)")
    if result.defaults_score is not None:
        print(f"  defaults   {result.defaults_score:.6g}")
    print(f"  best       {result.best_score:.6g}")
    for key, value in result.best_params.items():
        print(f"    {key} = {value!r}")
    # the settings are the tuned family's: fit that family (fit's default trains NPT and SPIN)
    fit = ["semiparam", "fit", args.data, "--target", args.target, "--model", args.model]
    fit += ["--config", f"{args.out}/best.toml"]
    print(f"wrote {args.out}/trials.csv, best.toml and tune.json; fit with the best settings:")
    print("  " + " ".join(shlex.quote(a) for a in fit))
    return 0


def add_tune_parser(sub: Any) -> None:
    from .common import executor_option

    p = sub.add_parser(
        "tune",
        help="search a table model's settings (Optuna TPE; Ray Tune with --executor ray)",
        description="Fit the model on 80% of the rows per trial and score the rest; the first trial "
        "is the defaults. Writes OUT/trials.csv, OUT/best.toml (for fit --config) and OUT/tune.json.",
    )
    p.add_argument("data", help="CSV/Parquet table holding the feature and target columns")
    p.add_argument("--target", required=True, help="target column(s), comma-separated")
    p.add_argument("--trials", type=int, default=20, help="trials, the defaults' included (default 20)")
    p.add_argument("--out", required=True, help="directory for trials.csv, best.toml, tune.json")
    p.add_argument("--model", default="npt", help="table model: npt | spin")
    p.add_argument("--preset", default="cpu", help="the preset whose settings are searched around")
    p.add_argument("--timeout", type=float, help="seconds for the whole search (a running trial ends)")
    p.add_argument("--n-estimators", type=int, default=1, help="ensemble members per trial fit (default 1)")
    p.add_argument("--config", help="TOML with [model] and [train]: settings every trial starts from")
    p.add_argument(
        "--set", action="append", metavar="SECTION.KEY=VALUE", help="a setting every trial starts from"
    )
    p.add_argument("--validation-fraction", type=float, default=0.2, help="held-out rows per trial")
    p.add_argument("--categorical", help="columns to treat as categorical, comma-separated")
    p.add_argument("--na-values", help="extra strings read as missing, comma-separated")
    p.add_argument("--seed", type=int, default=0, help="split, fits and sampler seed")
    p.add_argument("--device", default="auto", help="auto (CUDA, MPS, else CPU), cpu, cuda:1...")
    p.add_argument("--threads", type=int, help="torch threads per trial (default: as set)")
    p.add_argument("--resume", action="store_true", help="continue the search in --out (serial)")
    p.add_argument("--force", action="store_true", help="replace the files of an earlier search in --out")
    executor_option(p, "run the trials one after another here (default) or as Ray Tune trials")
    p.add_argument("--ray-address", help="an existing Ray cluster (default: start one on this machine)")
    p.add_argument("--max-concurrent", type=int, default=1, help="Ray: trials at once (default 1)")
    p.add_argument("--quiet", action="store_true", help="no line per finished trial")
    p.add_argument("--cpus-per-trial", type=float, help="Ray: CPUs each trial reserves (default 1)")
    p.set_defaults(func=cmd_tune)
