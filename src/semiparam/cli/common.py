"""What the command-line modules share: reading and writing tables, refusing existing outputs,
settings from files and ``--set``, comma lists, and the Ray options of a command. Every
``cli`` module imports from here, and none imports ``cli.main``: ``main`` builds the parser from
the others, so the imports run one way."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import ConfigError, parse_override, read_settings_file
from .._io import atomic_file
from ..parallel import EXECUTORS

if TYPE_CHECKING:  # pandas loads when a command runs, not for --help
    import pandas as pd


def read_table(path: str | Path, na_values: list[str] | None = None) -> pd.DataFrame:
    """Read CSV (optionally gzipped) or Parquet, by file extension."""
    import pandas as pd

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


def check_writable(path: str | Path, force: bool) -> None:
    """Refuse an existing output (before any work is done) unless ``force``."""
    if Path(path).exists() and not force:
        raise FileExistsError(f"{path} already exists; pass --force to replace it")


def check_out_dir(path: str | Path, force: bool) -> None:
    """Refuse an existing, non-empty output directory (before any work is done) unless ``force``;
    an empty one may be reused."""
    out = Path(path)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())) and not force:
        raise FileExistsError(f"{out} already exists and is not empty; pass --force to replace it")


def write_table(frame: pd.DataFrame, path: str | Path, *, overwrite: bool = False) -> None:
    """Write CSV (gzipped for .gz) or Parquet by extension; the file appears only when complete."""
    path = Path(path)
    with atomic_file(path, overwrite=overwrite) as tmp:
        if "".join(path.suffixes).lower().endswith((".parquet", ".pq")):
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)


def load_settings(config_file: str | None, overrides: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(model_options, train_options)`` from a TOML file and ``section.key=value`` overrides."""
    model: dict[str, Any] = {}
    train: dict[str, Any] = {}
    if config_file:
        model, train = read_settings_file(config_file)
    sections = {"model": model, "train": train}
    for text in overrides:
        key, value = parse_override(text)
        section, _, field = key.partition(".")
        if section not in sections or not field:
            raise ConfigError(f"override {text!r} must name model.<key> or train.<key>")
        sections[section][field] = value
    return model, train


def split_list(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


class _DeprecatedExecutorFlag(argparse.Action):
    """``--backend``, the old name of ``--executor`` (hidden from ``--help``): sets the executor
    with a FutureWarning that names ``--executor``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        warnings.warn(
            f"{option_string} is deprecated: where independent fits run is now --executor; use "
            f"--executor {values}",
            FutureWarning,
            stacklevel=2,
        )
        setattr(namespace, self.dest, values)


def executor_option(p: argparse.ArgumentParser, help: str) -> None:
    """``--executor {serial,ray}`` (default serial), and ``--backend``, its old name, hidden."""
    p.add_argument("--executor", choices=EXECUTORS, default="serial", help=help)
    p.add_argument(
        "--backend",
        choices=EXECUTORS,
        dest="executor",
        action=_DeprecatedExecutorFlag,
        help=argparse.SUPPRESS,
    )


def ray_options(p: argparse.ArgumentParser, what: str) -> None:
    """``--executor`` and ``--ray-address`` of a command whose independent fits may run on Ray."""
    executor_option(p, f"train {what} one after another (default) or as Ray tasks; the result is the same")
    p.add_argument("--ray-address", help="with --executor ray: an existing cluster (default: start one here)")
