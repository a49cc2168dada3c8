"""``semiparam`` command line: fit | predict | evaluate | impute | impute-vcf | np-fit | np-predict |
tune | demo | bench | explain | analyze.

Each ``fit`` writes one run directory: ``config.json`` (every resolved setting), ``metrics.json``
(training history, validation loss, timings), ``model/`` (weights and fitted state, no pickle) and
``checkpoint/`` (the training state, written as it trains: ``fit --out RUN --resume`` continues a
killed fit to the result of an uninterrupted one).
Settings come from the preset, then an optional TOML file with ``[model]`` and ``[train]`` tables,
then ``--set section.key=value`` overrides; unknown keys raise.

Nothing is overwritten without ``--force`` (and then it is replaced only once the new output is
complete). Errors a user can fix print one line, ``semiparam: error: <file>: <problem>``, and exit
with status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .._config import ConfigError
from .._io import atomic_directory, atomic_file
from .common import (
    check_writable,
    load_settings,
    ray_options,
    read_table,
    split_list,
    write_table,
)

CHECKPOINT_DIR = "checkpoint"  # in a run directory: the training state of ``fit`` (see --resume)


def _training_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Estimator arguments shared by the training commands (fit, impute)."""
    model_options, train_options = load_settings(args.config, args.set or [])
    return {
        "model": args.model,
        "preset": args.preset,
        "categorical_features": split_list(args.categorical),
        "model_options": model_options or None,
        "train_options": train_options or None,
        "device": args.device,
        "random_state": args.seed,
        "verbose": None if not args.quiet else False,
    }


class WorkerLostError(RuntimeError):
    """A process of a data-parallel fit failed or was killed, and the others cannot go on."""


def cmd_fit(args: argparse.Namespace) -> int:
    import numpy as np
    import pandas as pd

    from ..estimators.tabular import TablePredictor
    from ..training.distributed import init_from_environment

    # under torchrun (WORLD_SIZE > 1): join the process group; rank 0 writes the run directory
    group, args.device = init_from_environment(args.device)
    if group.distributed and args.executor == "ray":
        raise ValueError("--executor ray trains the members as Ray tasks; it does not combine with torchrun")
    if args.resume and not args.out:
        raise ValueError("--resume needs --out: the run directory of the fit to continue")
    out = Path(args.out or f"runs/{args.model}-{time.strftime('%Y%m%d-%H%M%S')}")
    checkpoints = out / CHECKPOINT_DIR
    if args.resume:
        if not checkpoints.is_dir():
            raise FileNotFoundError(f"{out}: no training checkpoint to resume ({checkpoints} is absent)")
    elif out.exists() and not (out.is_dir() and not any(out.iterdir())):
        # an empty directory may be reused; anything else needs --force (checked before training)
        if not args.force:
            raise FileExistsError(f"{out} already exists and is not empty; pass --force to replace it")
        if checkpoints.exists() and group.is_main:  # the old run's checkpoint is of another fit
            shutil.rmtree(checkpoints)
    group.barrier()
    frame = read_table(args.data, split_list(args.na_values))
    targets = split_list(args.target) or []
    weights = None
    if args.weight_column:
        if args.weight_column in targets or args.weight_column not in frame.columns:
            where = "is a target" if args.weight_column in targets else "is not in the table"
            raise ValueError(f"--weight-column {args.weight_column!r} {where}")
        weights = pd.to_numeric(frame.pop(args.weight_column), errors="coerce").to_numpy()
        if np.isnan(weights).any():
            rows = np.flatnonzero(np.isnan(weights))[:5].tolist()
            raise ValueError(f"--weight-column {args.weight_column!r} has no number at row(s) {rows}")
    predictor = TablePredictor(
        targets=targets,
        loss=args.loss,
        time_budget=args.time_budget,
        n_estimators=args.n_estimators,
        executor=args.executor,
        ray_address=args.ray_address,
        continuous_features=split_list(args.continuous),
        **_training_kwargs(args),
    )
    start = time.perf_counter()
    # the training state goes to <out>/checkpoint/ as it trains; the finished run replaces the
    # directory at once (the checkpoint moves into it, so --resume on a finished run is a no-op)
    try:
        predictor.fit(frame, sample_weight=weights, checkpoint_dir=checkpoints, resume=args.resume)
    except RuntimeError as err:
        if not group.distributed:
            raise
        raise WorkerLostError(
            f"process {group.rank} of {group.world_size} stopped: {error_line(err)}; the last checkpoint "
            f"is in {checkpoints}: continue with the same command and --resume (any number of processes "
            "that divides the shards)"
        ) from err
    seconds = time.perf_counter() - start
    if not group.is_main:  # every process holds the same model; the first writes the run
        group.barrier()
        return 0
    with atomic_directory(out, overwrite=True) as tmp:
        _write_run(tmp, args, targets, predictor, seconds, world_size=group.world_size)
        if checkpoints.is_dir():
            checkpoints.rename(tmp / CHECKPOINT_DIR)
    group.barrier()
    history = predictor.learner_.history
    best = ""
    if history.best_val_loss is not None:
        best = (
            f", best validation loss {history.best_val_loss:.4f} at step {history.best_step}"
            f" of {history.n_steps} (stopped: {history.stop_reason})"
        )
    schema = predictor.learner_.schema
    kinds = "; ".join(_target_kind(spec) for spec in schema.columns if spec.name in targets)
    print(f"fitted {args.model} on {len(frame)} rows in {seconds:.1f}s{best}; run written to {out}")
    print(f"targets: {kinds}")
    summary = predictor.learner_.validation_summary()
    if summary:
        scores = "; ".join(
            f"{target} " + ", ".join(f"{k} {v:.4g}" for k, v in entry.items())
            for target, entry in summary["mean"].items()
        )
        print(f"held-out rows (each member's own validation rows, mean over members): {scores}")
    return 0


def _target_kind(spec: Any) -> str:
    """``label: classes [0, 1]`` or ``price: continuous``: how a target was read."""
    if spec.kind == "categorical":
        more = ", ..." if len(spec.categories) > 6 else ""
        shown = ", ".join(repr(c) for c in spec.categories[:6]) + more
        return f"{spec.name}: {len(spec.categories)} classes [{shown}]"
    return f"{spec.name}: continuous"


def _write_run(
    out: Path,
    args: argparse.Namespace,
    targets: list[str],
    predictor: Any,
    seconds: float,
    world_size: int = 1,
) -> None:
    """config.json, metrics.json and model/ of a fitted run, into directory ``out``."""
    learner = predictor.learner_
    (out / "config.json").write_text(
        json.dumps(
            {
                "data": str(args.data),
                "targets": targets,
                "weight_column": args.weight_column,
                "model": args.model,
                "preset": args.preset,
                "model_config": learner.model_config.to_dict(),
                "train_config": learner.train_config.to_dict(),
                "schema": learner.schema.to_dict(),
                "seed": args.seed,
                "device": args.device,
                # processes that trained it (torchrun); each step's rows were dealt into
                # train_config.shards shards (None: one per process)
                "world_size": world_size,
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
        # each member's scores on its own held-out rows (never trained on), and their mean
        "validation": learner.validation_summary(),
        "ensemble": history.summary(),
        "history": history.to_dict(),
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    predictor.save(out / "model")


def cmd_predict(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..estimators.tabular import TablePredictor

    if args.out:
        check_writable(args.out, args.force)
    run = Path(args.run)
    model_dir = run / "model" if (run / "model").exists() else run
    predictor = TablePredictor.load(model_dir, device=args.device)
    frame = read_table(args.data, split_list(args.na_values))
    carried = split_list(args.id) or []
    absent = [c for c in carried if c not in frame.columns]
    if absent:
        raise ValueError(f"--id column(s) {absent} not in {args.data}; it has {list(frame.columns)}")
    features = frame.drop(columns=[c for c in carried if c not in predictor.feature_columns_])
    preds = predictor.predict(features)
    if carried:  # the input's id columns first, as given, then the predictions
        clash = [c for c in carried if c in preds.columns]
        if clash:
            raise ValueError(f"--id column(s) {clash} share a name with a prediction column")
        preds = pd.concat([frame[carried].reset_index(drop=True), preds], axis=1)
    if args.out:
        write_table(preds, args.out, overwrite=args.force)
        print(f"wrote {len(preds)} predictions to {args.out}")
    else:
        preds.to_csv(sys.stdout, index=False)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Scores of a fitted run on a labelled table: per target, accuracy, log loss (and ROC AUC for
    two classes) or RMSE, MAE and R^2; one JSON object on standard output (or ``--out``)."""
    import numpy as np
    from sklearn import metrics

    from ..estimators.tabular import TablePredictor

    if args.out:
        check_writable(args.out, args.force)
    run = Path(args.run)
    predictor = TablePredictor.load(run / "model" if (run / "model").exists() else run, device=args.device)
    frame = read_table(args.data, split_list(args.na_values))
    specs = [c for c in predictor.learner_.schema.columns if c.name in predictor.learner_.schema.targets]
    absent = [s.name for s in specs if s.name not in frame.columns]
    if absent:
        raise ValueError(f"{args.data} lacks the target column(s) {absent}: evaluate needs the labels")
    labelled = frame.dropna(subset=[s.name for s in specs])
    if labelled.empty:
        raise ValueError(f"{args.data} has no row with every target labelled")
    preds = predictor.predict(labelled)
    scores: dict[str, Any] = {"data": str(args.data), "rows": len(labelled), "targets": {}}
    for spec in specs:
        truth = labelled[spec.name].to_numpy()
        if spec.kind == "categorical":
            classes = list(spec.categories)
            proba = preds[[f"{spec.name}_proba_{c}" for c in classes]].to_numpy()
            unknown = sorted({str(v) for v in truth} - {str(c) for c in classes})
            if unknown:
                raise ValueError(f"target {spec.name!r} holds labels the model never saw: {unknown[:5]}")
            index = {str(c): k for k, c in enumerate(classes)}
            codes = np.array([index[str(v)] for v in truth])
            entry = {
                "accuracy": float(np.mean(np.argmax(proba, axis=1) == codes)),
                "log_loss": float(metrics.log_loss(codes, proba, labels=list(range(len(classes))))),
            }
            if len(classes) == 2 and len(set(codes)) == 2:
                entry["roc_auc"] = float(metrics.roc_auc_score(codes, proba[:, 1]))
        else:
            truth = truth.astype(float)
            guess = preds[spec.name].to_numpy(dtype=float)
            entry = {
                "rmse": float(np.sqrt(np.mean((truth - guess) ** 2))),
                "mae": float(np.mean(np.abs(truth - guess))),
                "r2": float(metrics.r2_score(truth, guess)),
            }
        scores["targets"][spec.name] = entry
    text = json.dumps(scores, indent=2)
    if args.out:
        with atomic_file(args.out, overwrite=args.force) as tmp:
            Path(tmp).write_text(text + "\n")
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


def cmd_impute(args: argparse.Namespace) -> int:
    from ..estimators.imputer import TableImputer

    check_writable(args.out, args.force)
    frame = read_table(args.data, split_list(args.na_values))
    imputer = TableImputer(**_training_kwargs(args))
    n_missing = int(frame.isna().sum().sum())
    filled = imputer.fit_transform(frame)
    write_table(filled, args.out, overwrite=args.force)
    print(f"filled {n_missing} missing cells of {frame.shape[0]}x{frame.shape[1]}; wrote {args.out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(max_steps=args.steps, seed=args.seed, device=args.device, quiet=args.quiet)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="semiparam", description=__doc__.split("\n")[0])
    parser.add_argument("--debug", action="store_true", help="on an error, show the full traceback")
    parser.add_argument("--version", action="version", version=f"semiparam {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, training: bool = True, model: str = "npt") -> None:
        p.add_argument("--device", default="auto", help="auto (CUDA, MPS, else CPU), cpu, cuda:1...")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.add_argument("--na-values", help="extra strings read as missing, comma-separated (e.g. '?,NULL')")
        if training:
            choices = "auto (NPT and SPIN members together) | npt | spin" if model == "auto" else "npt | spin"
            p.add_argument("--model", default=model, help=f"table model: {choices} (default {model})")
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
    p.add_argument("--force", action="store_true", help="replace an existing, non-empty run directory")
    p.add_argument(
        "--resume", action="store_true", help="continue the killed fit whose run directory is --out"
    )
    p.add_argument(
        "--weight-column",
        help="column holding each row's sample weight in the loss (a number >= 0; not a feature)",
    )
    p.add_argument(
        "--continuous",
        help="columns to treat as numbers, comma-separated (an integer target with at most 10 "
        "distinct values is otherwise read as class labels; --categorical forces classes)",
    )
    p.add_argument("--time-budget", type=float, help="seconds of training (stops and anneals before)")
    p.add_argument(
        "--n-estimators",
        type=int,
        default=None,
        help="ensemble members (default: the preset's, 3 for the cpu preset, 1 for the paper presets; "
        "with --model auto, of each family)",
    )
    ray_options(p, "the ensemble members")
    common(p, model="auto")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("predict", help="predict the targets of a table with a fitted run")
    p.add_argument("run", help="run directory written by fit")
    p.add_argument("data")
    p.add_argument("--out", help="output CSV/Parquet (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.add_argument(
        "--id", help="columns of the input copied into the predictions (e.g. an id), comma-separated"
    )
    common(p, training=False)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("evaluate", help="scores of a fitted run on a labelled table")
    p.add_argument("run", help="run directory written by fit")
    p.add_argument("data", help="CSV/Parquet holding the features and the target column(s)")
    p.add_argument("--out", help="write the JSON scores here (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    common(p, training=False)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("impute", help="fill every missing cell of a table")
    p.add_argument("data")
    p.add_argument("--out", required=True)
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    common(p)
    p.set_defaults(func=cmd_impute)

    p = sub.add_parser("demo", help="NPT beside gradient boosting on scikit-learn's breast cancer data")
    p.add_argument("--steps", type=int, default=None, help="step ceiling (default: the estimator's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (CUDA, MPS, else CPU), cpu, cuda:1...")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_demo)

    from ..bench.cli import add_bench_parser  # the logic lives in semiparam.bench

    add_bench_parser(sub)

    from .analyze import add_analyze_parsers  # explain, analyze corruption|lookup|deletion

    add_analyze_parsers(sub)

    from .impute_vcf import add_fit_panel_parser, add_impute_vcf_parser  # logic: semiparam.genomics

    add_impute_vcf_parser(sub)
    add_fit_panel_parser(sub)

    from .np_cli import add_np_parsers  # np-fit, np-predict: neural processes on CSV series

    add_np_parsers(sub)

    from .tune_cli import add_tune_parser  # the logic lives in semiparam.tuning

    add_tune_parser(sub)
    return parser


def error_line(err: BaseException) -> str:
    """One line for an error: ``<file>: <problem>`` where the error names a file."""
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.filename}: {err.strerror}"
    elif isinstance(err, KeyError) and len(err.args) == 1:
        text = f"missing entry {err.args[0]!r}"
    else:
        text = str(err) or type(err).__name__
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors with a message a user can act on: bad input, settings or files (not bugs)."""
    errors: tuple[type[BaseException], ...] = (
        ConfigError,
        ValueError,  # DataValidationError, VCFError, ModelFileError, JSON/TOML/CSV decode errors
        OSError,  # FileNotFoundError, FileExistsError, PermissionError, ...
        TypeError,
        KeyError,
        ImportError,  # an optional dependency (pyarrow, cyvcf2) is missing
        FloatingPointError,  # a fit that diverged (the message says which setting to lower)
    )
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - older safetensors
        return errors
    return (*errors, SafetensorError)


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug is accepted anywhere before a "--", not only before the command
    head = argv[: argv.index("--")] if "--" in argv else argv
    debug = "--debug" in head
    if debug:
        argv.remove("--debug")
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # the reader of standard output went away (``semiparam predict ... | head -1``): what it
        # wanted was written; end quietly, with nothing more sent to the closed pipe
        _silence_stdout()
        return 0
    except _user_errors() as err:
        if debug:
            raise
        print(f"semiparam: error: {error_line(err)}", file=sys.stderr)
        return 2
    except WorkerLostError as err:
        if debug:
            raise
        print(f"semiparam: error: {error_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if debug:
            raise
        print("semiparam: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
