"""``semiparam np-fit`` / ``np-predict``: neural processes on a user's own series from CSV files.

    semiparam np-fit series.csv --task series --x t --y value --model cipnp --steps 2000 --out RUN
    semiparam np-predict RUN context.csv targets.csv --out predictions.csv

``np-fit`` meta-learns from one task per value of the ``--task`` column (each split at random into
context and targets at every step, :class:`~semiparam.neural_processes.TaskCollection`) and writes the run
directory: ``model/`` (weights and settings) and ``np_run.json`` (the columns, the settings and the
training history). ``--set train.<key>=<value>`` sets any training setting (the fields of
:class:`~semiparam.training.config.TrainConfig`, over its neural-process preset), ``--set
model.<key>=<value>`` the model's. ``np-predict`` predicts every row of the targets table from the
context rows of its own task: the targets table plus ``<y>_mean`` and ``<y>_std`` per output
column, and, when the targets hold the outputs too, the mean log-likelihood of each task on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

# the names of estimators.neural_process.NEURAL_PROCESSES in lower case, written out so that building
# the parser imports no torch (tests/test_cli.py checks they match)
MODELS = ("cipnp", "ipnp", "canp", "anp", "banp", "tnpd")
RUN_FILE = "np_run.json"


def add_np_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "np-fit",
        help="meta-learn a neural process from many short series (one task per value of --task)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("data", help="CSV/Parquet table: a task column, input column(s), output column(s)")
    p.add_argument("--task", required=True, help="the column naming each row's task (series)")
    p.add_argument("--x", required=True, help="input column(s), comma-separated")
    p.add_argument("--y", required=True, help="output column(s), comma-separated")
    p.add_argument("--model", default="cipnp", choices=MODELS)
    p.add_argument("--steps", type=int, default=2000, help="training steps (batches of tasks)")
    p.add_argument("--batch-size", type=int, default=16, help="tasks per step")
    p.add_argument("--learning-rate", type=float, default=5e-4)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a setting: model.<key> (the model's config) or train.<key> (TrainConfig, the neural-process"
        " preset's, e.g. train.lr_schedule=adaptive); repeatable, after --steps and the like",
    )
    p.add_argument("--min-ctx", type=int, default=3, help="fewest context points per task and draw")
    p.add_argument("--max-ctx", type=int, help="most context points per task and draw (default: all but one)")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--force", action="store_true", help="replace an existing run directory")
    p.add_argument("--device", default="auto", help="auto (CUDA, MPS, else CPU), cpu, cuda:1...")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--na-values", help="extra strings read as missing, comma-separated")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_np_fit)

    p = sub.add_parser("np-predict", help="predict target points of each task from its context points")
    p.add_argument("run", help="run directory written by np-fit")
    p.add_argument("context", help="CSV/Parquet: the task, input and output columns of the context points")
    p.add_argument("targets", help="CSV/Parquet: the task and input columns of the points to predict")
    p.add_argument("--out", help="output CSV/Parquet (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.add_argument(
        "--samples",
        type=int,
        help="latent draws (ipnp, anp) or bootstrap contexts (banp); default: the model's own (50)",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA, MPS, else CPU), cpu, cuda:1...")
    p.add_argument("--na-values", help="extra strings read as missing, comma-separated")
    p.set_defaults(func=cmd_np_predict)


def _columns(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError(f"no column named in {text!r}")
    return names


def _model_class(name: str) -> Any:
    from ..estimators.neural_process import NEURAL_PROCESSES

    return NEURAL_PROCESSES[name.upper()]


def cmd_np_fit(args: argparse.Namespace) -> int:
    from ..neural_processes import TaskCollection
    from .common import load_settings, read_table, split_list

    out = Path(args.out)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())) and not args.force:
        raise FileExistsError(f"{out} already exists and is not empty; pass --force to replace it")
    frame = read_table(args.data, split_list(args.na_values))
    x_cols, y_cols = _columns(args.x), _columns(args.y)
    tasks = TaskCollection.from_frame(
        frame,
        task=args.task,
        x=x_cols,
        y=y_cols,
        min_ctx=args.min_ctx,
        max_ctx=args.max_ctx,
        random_state=args.seed,
    )
    if not args.quiet:
        print(f"{args.data}: {tasks!r}", file=sys.stderr)
    model_options, train_options = load_settings(None, args.set)
    model = _model_class(args.model)(
        random_state=args.seed,
        device=args.device,
        **{"x_dim": len(x_cols), "y_dim": len(y_cols), **model_options},
    )
    train_options = {
        "max_steps": args.steps,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        **train_options,
    }
    model.fit(tasks, **train_options)
    from .._io import atomic_directory

    with atomic_directory(out, overwrite=args.force) as tmp:
        model.save(tmp / "model")
        history = model.history_.to_dict() if model.history_ is not None else {}
        run = {
            "model": args.model,
            "columns": {"task": args.task, "x": x_cols, "y": y_cols},
            "data": str(args.data),
            "n_tasks": len(tasks),
            "settings": {
                "steps": args.steps,
                "batch_size": args.batch_size,
                "learning_rate": args.learning_rate,
                "min_ctx": tasks.min_ctx,
                "max_ctx": tasks.max_ctx,
                "seed": args.seed,
                "model_options": model_options,
                "train_options": train_options,
            },
            "history": history,
        }
        (tmp / RUN_FILE).write_text(json.dumps(run, indent=2))
    if not args.quiet:
        loss = history.get("loss") or [float("nan")]
        print(f"wrote {out}: {args.model}, {args.steps} steps, final loss {loss[-1]:.4f}", file=sys.stderr)
    return 0


def cmd_np_predict(args: argparse.Namespace) -> int:
    import numpy as np
    import pandas as pd

    from ..neural_processes import load
    from .common import check_writable, read_table, split_list, write_table

    run_file = Path(args.run) / RUN_FILE
    if not run_file.exists():
        raise FileNotFoundError(f"{args.run} is not an np-fit run directory (no {RUN_FILE})")
    run = json.loads(run_file.read_text())
    task, x_cols, y_cols = run["columns"]["task"], run["columns"]["x"], run["columns"]["y"]
    if args.out:
        check_writable(args.out, args.force)
    na = split_list(args.na_values)
    context, targets = read_table(args.context, na), read_table(args.targets, na)
    for name, table, needed in (
        (args.context, context, [task, *x_cols, *y_cols]),
        (args.targets, targets, [task, *x_cols]),
    ):
        missing = [c for c in needed if c not in table.columns]
        if missing:
            raise KeyError(f"{name}: no column(s) {missing} (the run was fitted on {needed})")
    model = load(Path(args.run) / "model", device=args.device)
    groups = dict(list(context.groupby(task, sort=False)))
    absent = [t for t in pd.unique(targets[task]) if t not in groups]
    if absent:
        raise ValueError(f"{args.context}: no context points for task(s) {absent[:10]} of {args.targets}")
    mean = np.full((len(targets), len(y_cols)), np.nan)
    std = np.full_like(mean, np.nan)
    scores = {}
    has_y = all(c in targets.columns for c in y_cols)
    for name, rows in targets.groupby(task, sort=False).indices.items():
        ctx = groups[name]
        tx = targets.iloc[rows][x_cols].to_numpy(dtype=np.float32)
        pred = model.predict(
            ctx[x_cols].to_numpy(dtype=np.float32),
            ctx[y_cols].to_numpy(dtype=np.float32),
            tx,
            n_samples=args.samples,
        )
        mean[rows], std[rows] = pred.mean, pred.std
        if has_y:
            ty = targets.iloc[rows][y_cols].to_numpy(dtype=np.float32)
            scores[name] = model.log_likelihood(
                ctx[x_cols].to_numpy(dtype=np.float32),
                ctx[y_cols].to_numpy(dtype=np.float32),
                tx,
                ty,
                n_samples=args.samples,
            )
    out = targets.copy()
    for k, col in enumerate(y_cols):
        out[f"{col}_mean"], out[f"{col}_std"] = mean[:, k], std[:, k]
    if args.out:
        write_table(out, args.out, overwrite=args.force)
    else:
        out.to_csv(sys.stdout, index=False)
    if scores:
        average = float(np.mean(list(scores.values())))
        print(
            f"mean log-likelihood per target point, averaged over {len(scores)} task(s): {average:.4f}",
            file=sys.stderr,
        )
    return 0
