"""What a dataset is and how its files are found, read and checked: :class:`Dataset`,
:class:`DatasetInfo`, :class:`Split`, :class:`DatasetError`, the data directory (:func:`data_dir`),
and the helpers every reader of :mod:`semiparam.data.loaders` uses (official file names in a user's
directory, CSV or whitespace tables with or without a header, row counts, the Gal 2016 splits)."""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

Task = Literal["regression", "binary", "multiclass"]
Protocol = Literal["cv", "holdout", "fixed"]


class DatasetError(ValueError):
    """A dataset file is missing or does not have the expected format; the message says which."""


@dataclass(frozen=True)
class Split:
    """Row positions of one canonical split (``val`` empty when the split defines none)."""

    train: np.ndarray
    test: np.ndarray
    val: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass(frozen=True)
class DatasetInfo:
    """What the registry knows about a dataset before reading it."""

    name: str
    title: str
    task: Task
    n_rows: int | None  # rows of the project's copy (None: depends on the file given)
    official_rows: int | None  # rows of the complete official dataset
    protocol: Protocol  # paper protocol: 10-fold CV, one 0.7/0.1/0.2 split, or a fixed test set
    paper_name: str | None  # column name in the papers' result tables (None: not in them)
    default_files: tuple[str, ...]  # relative to the data directory
    notes: str = ""
    loader: Callable[[Path | None, DatasetInfo], Dataset] | None = field(default=None, repr=False)

    @property
    def is_subset(self) -> bool:
        """True when the project's copy holds fewer rows than the official dataset."""
        return self.n_rows is not None and self.official_rows is not None and self.n_rows < self.official_rows


@dataclass(frozen=True)
class Dataset:
    """A loaded table: ``frame`` holds the features then the target column(s)."""

    name: str
    frame: pd.DataFrame
    targets: tuple[str, ...]
    task: Task
    categorical: tuple[str, ...]
    splits: Mapping[str, Split]
    info: DatasetInfo
    source: tuple[Path, ...]

    @property
    def target(self) -> str:
        if len(self.targets) != 1:
            raise ValueError(
                f"{self.name} has {len(self.targets)} targets {list(self.targets)}; use .targets"
            )
        return self.targets[0]

    @property
    def features(self) -> list[str]:
        return [c for c in self.frame.columns if c not in self.targets]

    @property
    def continuous(self) -> tuple[str, ...]:
        return tuple(c for c in self.features if c not in self.categorical)

    @property
    def X(self) -> pd.DataFrame:
        return self.frame[self.features]

    @property
    def y(self) -> pd.Series:
        return self.frame[self.target]

    @property
    def n_classes(self) -> int | None:
        return None if self.task == "regression" else int(self.y.nunique())

    def __repr__(self) -> str:
        first_split = f" {next(iter(self.splits))!r}..." if self.splits else ""
        return (
            f"Dataset({self.name!r}, {self.frame.shape[0]} rows x {len(self.features)} features "
            f"({len(self.categorical)} categorical), target={list(self.targets)}, task={self.task!r}, "
            f"{len(self.splits)} canonical split(s){first_split})"
        )


# -- locating files -------------------------------------------------------------------------------


def data_dir() -> Path:
    """The project's data directory: ``$SEMIPARAM_DATA_DIR``, else ``../shared/data`` relative to
    the repository root. Raises :class:`DatasetError` naming both places when neither exists."""
    env = os.environ.get("SEMIPARAM_DATA_DIR")
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DatasetError(f"SEMIPARAM_DATA_DIR={env!r} is not a directory")
        return path
    repo_root = Path(__file__).resolve().parents[3]  # src/semiparam/data/<this file> -> repo
    path = repo_root.parent / "shared" / "data"
    if not path.is_dir():
        raise DatasetError(
            f"no data directory: set SEMIPARAM_DATA_DIR or put the data at {path}, "
            "or pass path= to load() with your own copy of the official file"
        )
    return path


def resolve_files(info: DatasetInfo, path: Path | None, official_names: Sequence[str] = ()) -> list[Path]:
    """The file(s) to read: the defaults in the data directory, or inside a user directory the
    project's file names or the official ones, or the user's file itself."""
    if path is None:
        base = data_dir()
        files = [base / f for f in info.default_files]
        missing = [str(f) for f in files if not f.exists()]
        if missing:
            raise DatasetError(f"{info.name}: file(s) {missing} not found in the data directory {base}")
        return files
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise DatasetError(f"{info.name}: {path} does not exist")
    ours = [path / Path(f).name for f in info.default_files]
    if all(f.exists() for f in ours):
        return ours
    for name in official_names:
        candidates = [path / name, path / f"{name}.gz"]
        for c in candidates:
            if c.exists():
                return [c]
    expected = [Path(f).name for f in info.default_files] + list(official_names)
    raise DatasetError(f"{info.name}: found none of {expected} in {path}")


def first_line(path: Path) -> str:
    """The first line of a (possibly gzipped) text file, stripped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", errors="replace") as fh:
        return fh.readline().strip()


def _looks_numeric(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def read_table(
    path: Path, names: Sequence[str], *, na_values: Sequence[str] = (), **kwargs: Any
) -> pd.DataFrame:
    """Read a CSV or whitespace-separated file with or without a header into columns ``names``.

    A header is detected when the first field of the first line is not a number. The column count
    is checked here, the row count by the caller."""
    if path.suffix.lower() in (".xls", ".xlsx"):
        raise DatasetError(f"{path}: Excel files are not read; save the sheet as CSV and pass that file")
    line = first_line(path)
    sep = "," if "," in line else r"\s+"
    first = line.split(",")[0] if sep == "," else (line.split() or [""])[0]
    header = None if _looks_numeric(first.strip().strip('"')) else 0
    try:
        frame = pd.read_csv(
            path,
            sep=sep,
            header=header,
            na_values=list(na_values),
            skipinitialspace=True,
            engine="python" if sep != "," else "c",
            **kwargs,
        )
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise DatasetError(f"{path}: cannot parse as a table ({err})") from err
    if frame.shape[1] != len(names):
        raise DatasetError(
            f"{path}: has {frame.shape[1]} columns, expected {len(names)} ({', '.join(names[:4])}, ...); "
            "is this the right file?"
        )
    frame.columns = list(names)  # files with a header of other names are taken by position
    return frame


def check_rows(
    info: DatasetInfo, frame: pd.DataFrame, path: Path, expected: int | None, what: str = "rows"
) -> None:
    """Raise :class:`DatasetError` unless ``frame`` read from ``path`` has ``expected`` rows."""
    if expected is not None and len(frame) != expected:
        raise DatasetError(
            f"{info.name}: {path} has {len(frame)} {what}, expected {expected} ({info.title}); "
            "pass the complete official file or the project's copy"
        )


def _as_categories(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    for c in columns:
        frame[c] = frame[c].astype("category")
    return frame


def make_dataset(
    info: DatasetInfo,
    frame: pd.DataFrame,
    target: str,
    categorical: Sequence[str],
    files: Sequence[Path],
    splits: Mapping[str, Split] | None = None,
) -> Dataset:
    """The :class:`Dataset` of ``frame``: ``categorical`` columns as pandas categories, the target
    column last."""
    frame = _as_categories(frame.reset_index(drop=True), categorical)
    order = [c for c in frame.columns if c != target] + [target]
    return Dataset(
        info.name,
        frame[order],
        (target,),
        info.task,
        tuple(categorical),
        dict(splits or {}),
        info,
        tuple(files),
    )


def _gal_splits(path: Path, n_rows: int) -> dict[str, Split]:
    """The Gal & Ghahramani (2016) 90/10 splits stored as ``split,role,row``."""
    table = pd.read_csv(path)
    if list(table.columns) != ["split", "role", "row"] or table["row"].max() >= n_rows:
        raise DatasetError(f"{path}: not a split file with columns split,role,row for {n_rows} rows")
    out = {}
    for k, part in table.groupby("split"):
        out[f"gal2016/{k}"] = Split(
            train=np.sort(part.loc[part.role == "train", "row"].to_numpy(np.int64)),
            test=np.sort(part.loc[part.role == "test", "row"].to_numpy(np.int64)),
        )
    return out


def gal_splits_if_local(
    info: DatasetInfo, path: Path | None, files: list[Path], n_rows: int
) -> dict[str, Split]:
    """Gal 2016 splits from the data directory, only when the data came from there too."""
    if path is not None:
        return {}
    split_file = files[0].parent / "splits_gal2016.csv.gz"
    return _gal_splits(split_file, n_rows) if split_file.exists() else {}
