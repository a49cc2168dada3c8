"""``semiparam`` command line: fit | predict | impute | impute-vcf | demo | bench.

Each ``fit`` writes one run directory: ``config.json`` (every resolved setting), ``metrics.json``
(training history, validation loss, timings) and ``model/`` (weights and fitted state, no pickle).
Settings come from the preset, then an optional TOML file with ``[model]`` and ``[train]`` tables,
then ``--set section.key=value`` overrides; unknown keys raise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from .._config import ConfigError, parse_override


def read_table(path: str | Path, na_values: list[str] | None = None) -> pd.DataFrame:
    """Read CSV (optionally gzipped) or Parquet, by file extension."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    suffixes = "".join(path.suffixes).lower()
    if suffixes.endswith((".parquet", ".pq")):
        try:
            return pd.read_parquet(path)
        except ImportError as err:
            raise SystemExit("reading Parquet needs pyarrow: pip install 'semiparam[parquet]'") from err
    if ".csv" in suffixes or ".tsv" in suffixes or ".txt" in suffixes:
        sep = "\t" if ".tsv" in suffixes else ","
        return pd.read_csv(path, sep=sep, na_values=na_values)
    raise ValueError(f"cannot tell the format of {path}: use .csv, .csv.gz, .tsv or .parquet")


def write_table(frame: pd.DataFrame, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if "".join(path.suffixes).lower().endswith((".parquet", ".pq")):
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)


def load_settings(config_file: str | None, overrides: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(model_options, train_options)`` from a TOML file and ``section.key=value`` overrides."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    model: dict[str, Any] = {}
    train: dict[str, Any] = {}
    sections = {"model": model, "train": train}
    if config_file:
        data = tomllib.loads(Path(config_file).read_text())
        unknown = sorted(set(data) - set(sections))
        if unknown:
            raise ConfigError(f"unknown section(s) {unknown} in {config_file}; use [model] and [train]")
        for name, table in data.items():
            sections[name].update(table)
    for text in overrides:
        key, value = parse_override(text)
        section, _, field = key.partition(".")
        if section not in sections or not field:
            raise ConfigError(f"override {text!r} must name model.<key> or train.<key>")
        sections[section][field] = value
    return model, train


def _split_list(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def _training_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Estimator arguments shared by the training commands (fit, impute)."""
    model_options, train_options = load_settings(args.config, args.set or [])
    return {
        "model": args.model,
        "preset": args.preset,
        "categorical_features": _split_list(args.categorical),
        "model_options": model_options or None,
        "train_options": train_options or None,
        "device": args.device,
        "random_state": args.seed,
        "verbose": None if not args.quiet else False,
    }


def cmd_fit(args: argparse.Namespace) -> int:
    from ..estimators.tabular import TablePredictor

    frame = read_table(args.data, _split_list(args.na_values))
    targets = _split_list(args.target) or []
    predictor = TablePredictor(
        targets=targets,
        loss=args.loss,
        time_budget=args.time_budget,
        n_estimators=args.n_estimators,
        **_training_kwargs(args),
    )
    start = time.perf_counter()
    predictor.fit(frame)
    seconds = time.perf_counter() - start
    out = Path(args.out or f"runs/{args.model}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    learner = predictor.learner_
    (out / "config.json").write_text(
        json.dumps(
            {
                "data": str(args.data),
                "targets": targets,
                "model": args.model,
                "preset": args.preset,
                "model_config": learner.model_config.to_dict(),
                "train_config": learner.train_config.to_dict(),
                "schema": learner.schema.to_dict(),
                "seed": args.seed,
                "device": args.device,
            },
            indent=2,
        )
    )
    history = learner.history
    metrics = {
        "fit_seconds": seconds,
        "steps": len(history.steps),
        "final_train_loss": history.train_loss[-1],
        "best_val_loss": history.best_val_loss,
        "best_step": history.best_step,
        "stop_reason": history.stop_reason,
        "ensemble": history.summary(),
        "history": history.to_dict(),
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    predictor.save(out / "model")
    best = ""
    if history.best_val_loss is not None:
        best = (
            f", best validation loss {history.best_val_loss:.4f} at step {history.best_step}"
            f" of {history.n_steps} (stopped: {history.stop_reason})"
        )
    print(f"fitted {args.model} on {len(frame)} rows in {seconds:.1f}s{best}; run written to {out}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from ..estimators.tabular import TablePredictor

    run = Path(args.run)
    model_dir = run / "model" if (run / "model").exists() else run
    predictor = TablePredictor.load(model_dir, device=args.device)
    frame = read_table(args.data, _split_list(args.na_values))
    preds = predictor.predict(frame)
    if args.out:
        write_table(preds, args.out)
        print(f"wrote {len(preds)} predictions to {args.out}")
    else:
        preds.to_csv(sys.stdout, index=False)
    return 0


def cmd_impute(args: argparse.Namespace) -> int:
    from ..estimators.imputer import TableImputer

    frame = read_table(args.data, _split_list(args.na_values))
    imputer = TableImputer(**_training_kwargs(args))
    n_missing = int(frame.isna().sum().sum())
    filled = imputer.fit_transform(frame)
    write_table(filled, args.out)
    print(f"filled {n_missing} missing cells of {frame.shape[0]}x{frame.shape[1]}; wrote {args.out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(max_steps=args.steps, seed=args.seed, device=args.device, quiet=args.quiet)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="semiparam", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, training: bool = True) -> None:
        p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.add_argument("--na-values", help="extra strings read as missing, comma-separated (e.g. '?,NULL')")
        if training:
            p.add_argument("--model", default="npt", help="table model: npt | spin")
            p.add_argument("--preset", default="cpu", help="cpu | small | base (spin also: spin16 | spin64)")
            p.add_argument("--config", help="TOML file with [model] and [train] tables")
            p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a setting")
            p.add_argument("--categorical", help="columns to treat as categorical, comma-separated")
            p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("fit", help="train on a CSV/Parquet table; writes a run directory")
    p.add_argument("data")
    p.add_argument("--target", required=True, help="target column(s), comma-separated")
    p.add_argument("--loss", default="squared_error", help="squared_error | gaussian (continuous targets)")
    p.add_argument("--out", help="run directory (default runs/<model>-<time>)")
    p.add_argument("--time-budget", type=float, help="seconds of training (stops and anneals before)")
    p.add_argument("--n-estimators", type=int, default=1, help="ensemble members (default 1)")
    common(p)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("predict", help="predict the targets of a table with a fitted run")
    p.add_argument("run", help="run directory written by fit")
    p.add_argument("data")
    p.add_argument("--out", help="output CSV/Parquet (default: stdout)")
    common(p, training=False)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("impute", help="fill every missing cell of a table")
    p.add_argument("data")
    p.add_argument("--out", required=True)
    common(p)
    p.set_defaults(func=cmd_impute)

    p = sub.add_parser("demo", help="NPT beside gradient boosting on scikit-learn's breast cancer data")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_demo)

    from ..bench.cli import add_bench_parser  # the logic lives in semiparam.bench

    add_bench_parser(sub)

    from .impute_vcf import add_impute_vcf_parser  # the logic lives in semiparam.genomics

    add_impute_vcf_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (ConfigError, ValueError, FileNotFoundError, TypeError, KeyError) as err:
        print(f"semiparam {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
