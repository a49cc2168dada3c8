"""``semiparam explain`` and ``semiparam analyze corruption|lookup|deletion``: explanations and the
NPT paper's analyses of a fitted run from the command line (the logic lives in
``semiparam.estimators.explain`` and ``semiparam.estimators.analyses``)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def _load_run(run: str, device: str) -> Any:
    from ..estimators.tabular import TablePredictor

    path = Path(run)
    return TablePredictor.load(path / "model" if (path / "model").exists() else path, device=device)


def _context(args: argparse.Namespace) -> tuple[Any, None] | None:
    """``--context CSV``: the labelled rows a SPIN run predicts from (it keeps only their encoding)."""
    from .common import read_table, split_list

    if not getattr(args, "context", None):
        return None
    return (read_table(args.context, split_list(args.na_values)), None)


def _command() -> str:
    return " ".join(shlex.quote(a) for a in ["semiparam", *sys.argv[1:]])


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..estimators import analyses
    from .common import read_table, split_list

    # the report's files are refused before any work, as fit refuses an existing run directory
    existing = [p for p in analyses.analysis_paths(args.out, args.analysis) if p.exists()]
    if existing and not args.force:
        raise FileExistsError(f"{existing[0]} already exists; pass --force to replace it")
    frame = read_table(args.data, split_list(args.na_values))
    name = args.name or Path(args.data).stem
    if args.analysis == "lookup":
        result = _lookup(args, frame, name)
    else:
        model = _load_run(args.run, args.device)
        if args.analysis == "corruption":
            result = analyses.corruption_test(
                model, frame, context=_context(args), seed=args.seed, dataset=name
            )
        else:
            result = analyses.deletion_test(
                model, frame, context=_context(args), n_rows=args.rows, seed=args.seed, dataset=name
            )
    path = analyses.write_analysis(args.out, args.analysis, [result], _command())
    print(json.dumps({k: v for k, v in result.items() if k not in ("curve", "context_rows")}, default=str))
    print(f"wrote {path}")
    return 0


def _lookup(args: argparse.Namespace, frame: pd.DataFrame, name: str) -> dict[str, Any]:
    import numpy as np
    import pandas as pd
    from sklearn.model_selection import train_test_split

    from ..estimators import NPTClassifier, NPTRegressor, SPINClassifier, SPINRegressor, analyses

    if args.target not in frame.columns:
        raise ValueError(f"target column {args.target!r} not in {args.data}; it has {list(frame.columns)}")
    y = frame[args.target]
    X = frame.drop(columns=[args.target])
    classify = args.task == "classification" or (
        args.task == "auto" and not pd.api.types.is_float_dtype(y) and y.nunique() <= 20
    )
    cls = {
        ("npt", True): NPTClassifier,
        ("npt", False): NPTRegressor,
        ("spin", True): SPINClassifier,
        ("spin", False): SPINRegressor,
    }[(args.model, classify)]
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=args.test_fraction, random_state=args.seed
    )
    # one model: the lookup task is a study of the mechanism, not of the ensemble
    model = cls(
        n_estimators=1,
        max_steps=args.steps,
        random_state=args.seed,
        device=args.device,
        verbose=not args.quiet,
    )
    return analyses.lookup_test(
        model,
        X_train.reset_index(drop=True),
        np.asarray(y_train),
        X_test.reset_index(drop=True),
        np.asarray(y_test),
        shuffle_targets=not args.real_labels,
        dataset=name,
    )


def cmd_explain(args: argparse.Namespace) -> int:
    """Row and feature attributions of query rows as CSV files, bar charts and attention heat maps."""

    from .._io import atomic_directory
    from .common import check_out_dir, read_table, split_list

    check_out_dir(args.out, args.force)
    model = _load_run(args.run, args.device)
    frame = read_table(args.data, split_list(args.na_values))
    if len(frame) > args.max_rows:
        raise ValueError(f"{args.data} has {len(frame)} rows; explain at most --max-rows {args.max_rows}")
    # everything is written aside and renamed into place once complete
    with atomic_directory(args.out, overwrite=args.force) as tmp:
        written = _explain_into(tmp, args, model, frame)
    for path in written:
        print(f"wrote {Path(args.out) / path.relative_to(tmp)}")
    return 0


def _explain_into(out: Path, args: argparse.Namespace, model: Any, frame: pd.DataFrame) -> list[Path]:
    import numpy as np

    context = _context(args)
    features = model.explain_features(frame, method=args.method, target=args.target)
    features.insert(0, "row", np.arange(len(frame)))
    features.to_csv(out / "features.csv", index=False)
    written = [out / "features.csv"]
    try:
        rows = model.explain_rows(frame, top_k=args.top_k, context=context, target=args.target)
        rows.to_csv(out / "rows.csv", index=False)
        written.append(out / "rows.csv")
    except ValueError as err:  # SPIN without --context: say so, keep the feature attributions
        print(f"row attributions skipped: {err}", file=sys.stderr)
        rows = None
    maps = model.attention_maps(frame, context=context, max_rows=args.max_rows)
    return written + _plots(out, features.drop(columns="row"), rows, maps)


def _plots(out: Path, features: pd.DataFrame, rows: pd.DataFrame | None, maps: dict[str, Any]) -> list[Path]:
    import numpy as np

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'semiparam[bench]'): no figures", file=sys.stderr)
        return []
    written = []
    for i in range(len(features)):
        fig, axes = plt.subplots(1, 2 if rows is not None else 1, figsize=(10, 3.5), squeeze=False)
        ax = axes[0, 0]
        values = features.iloc[i]
        order = np.argsort(-np.abs(values.to_numpy()))[:15]
        ax.barh([str(values.index[k]) for k in order][::-1], values.to_numpy()[order][::-1])
        ax.set_title(f"row {i}: feature attributions")
        if rows is not None:
            mine = rows[rows["row"] == i]
            axes[0, 1].bar([str(r) for r in mine["context_row"]], mine["score"])
            axes[0, 1].set_title("context rows (attention)")
            axes[0, 1].set_xlabel("context row")
        fig.tight_layout()
        path = out / f"row_{i}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    heat = maps.get("rows") if "composed" not in maps else maps["composed"][None, :, None, :]
    if heat is not None:
        blocks = heat.shape[0]
        fig, axes = plt.subplots(1, blocks, figsize=(4 * blocks, 3.2), squeeze=False)
        for b in range(blocks):
            image = np.log(np.clip(heat[b].mean(axis=1), 1e-12, None))  # (rows, context): mean of heads
            axes[0, b].imshow(image, aspect="auto", cmap="viridis")
            axes[0, b].set_title(f"row attention, block {b} (log, mean of heads)")
            axes[0, b].set_xlabel("context row")
            axes[0, b].set_ylabel("query row")
        fig.tight_layout()
        path = out / "row_attention.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    if "columns" in maps:
        columns = maps["columns"]  # (blocks, rows, heads, d, d)
        names = maps["column_names"]
        fig, axes = plt.subplots(1, columns.shape[0], figsize=(4.5 * columns.shape[0], 4), squeeze=False)
        for b in range(columns.shape[0]):
            axes[0, b].imshow(columns[b].mean(axis=(0, 1)), cmap="magma")
            axes[0, b].set_xticks(range(len(names)), names, rotation=90, fontsize=7)
            axes[0, b].set_yticks(range(len(names)), names, fontsize=7)
            axes[0, b].set_title(f"attribute attention, block {b}")
        fig.tight_layout()
        path = out / "column_attention.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def add_analyze_parsers(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--device", default="auto", help="auto (CUDA, MPS, else CPU), cpu, cuda:1...")
        p.add_argument("--na-values", help="extra strings read as missing, comma-separated")
        p.add_argument("--quiet", action="store_true", help="no progress output")
        p.add_argument("--force", action="store_true", help="replace existing outputs in --out")

    p = sub.add_parser("explain", help="row and feature attributions of query rows of a fitted run")
    p.add_argument("run", help="run directory written by fit")
    p.add_argument("data", help="CSV/Parquet of the rows to explain (a few)")
    p.add_argument("--out", required=True, help="directory for CSV files and figures")
    p.add_argument("--method", default="mask", help="feature attribution: mask | gradient | lime")
    p.add_argument("--top-k", type=int, default=5, help="context rows per query row")
    p.add_argument("--target", help="the target explained (a run with several)")
    p.add_argument("--context", help="labelled rows to predict from (needed for SPIN's row attributions)")
    p.add_argument("--max-rows", type=int, default=32, help="most query rows")
    common(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("analyze", help="the NPT paper's analyses: corruption, lookup, deletion")
    p.add_argument("analysis", choices=["corruption", "lookup", "deletion"])
    p.add_argument("run", nargs="?", help="run directory written by fit (corruption, deletion)")
    p.add_argument("data", nargs="?", help="labelled rows, targets included (CSV/Parquet)")
    p.add_argument("--out", required=True, help="directory for the report")
    p.add_argument("--name", help="dataset name in the report (default: the file's stem)")
    p.add_argument("--context", help="labelled rows to predict from (SPIN keeps only an encoding)")
    p.add_argument("--rows", type=int, default=20, help="deletion: query rows analysed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", help="lookup: the target column")
    p.add_argument("--model", default="npt", choices=["npt", "spin"], help="lookup: the model trained")
    p.add_argument("--task", default="auto", choices=["auto", "classification", "regression"])
    p.add_argument("--test-fraction", type=float, default=0.2, help="lookup: rows held out as new rows")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="lookup: training steps (default: the lookup schedule's, as in benchmarks/results/lookup.md)",
    )
    p.add_argument(
        "--real-labels",
        action="store_true",
        help="lookup: train on the table's own labels (the paper's task) instead of labels "
        "shuffled across each step's rows",
    )
    common(p)
    p.set_defaults(func=_analyze_entry)


def _analyze_entry(args: argparse.Namespace) -> int:
    """``analyze lookup DATA --target T`` takes one positional; the others ``RUN DATA``."""
    if args.analysis == "lookup":
        if args.data is None and args.run is not None:
            args.data, args.run = args.run, None
        if args.data is None or args.target is None:
            raise ValueError("analyze lookup needs DATA and --target")
    elif args.run is None or args.data is None:
        raise ValueError(f"analyze {args.analysis} needs RUN (a fitted run directory) and DATA")
    return cmd_analyze(args)
