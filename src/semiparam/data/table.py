"""Tables in, tensors out: column schema inference and the fitted table encoder.

``infer_schema`` decides each column's kind from its dtype (categorical for pandas category, object,
string and bool dtypes; continuous for numbers), with user overrides. ``TableEncoder.fit`` learns
standardisation statistics and category maps from training rows only; ``transform`` turns a table
into ``values (n, d) float32`` (standardised scalars or category indices) and ``missing (n, d)``.
NaN, None and pd.NA are missing cells. Categories seen in too few training rows can share one
"infrequent" level (``TableEncoder.fit``'s ``min_category_count``); a category never seen at fit
time joins that level, or becomes missing where a column has none, with a warning. Everything
fitted is JSON-serialisable (``to_dict`` / ``from_dict``): no pickle.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .columns import CATEGORICAL, CONTINUOUS, ColumnLayout


class DataValidationError(ValueError):
    """The input table cannot be used as given; the message names the offending column/values."""


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    kind: str  # CONTINUOUS or CATEGORICAL
    categories: tuple[Any, ...] = ()  # JSON scalars, in index order (categorical only)
    # categories seen at fit too rarely to learn on their own: they share one level, index
    # ``len(categories)`` (see ``TableEncoder.fit``'s ``min_category_count``)
    infrequent: tuple[Any, ...] = ()

    @property
    def n_levels(self) -> int:
        """Embedding rows the column needs: one per category, one for the infrequent ones."""
        return len(self.categories) + (1 if self.infrequent else 0)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": self.kind, "categories": list(self.categories)}
        if self.infrequent:
            out["infrequent"] = list(self.infrequent)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ColumnSpec:
        return cls(d["name"], d["kind"], tuple(d["categories"]), tuple(d.get("infrequent", ())))


@dataclass(frozen=True)
class TableSchema:
    """Columns in model order and which of them are targets."""

    columns: tuple[ColumnSpec, ...]
    targets: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def target_indices(self) -> list[int]:
        names = self.names
        return [names.index(t) for t in self.targets]

    @property
    def feature_names(self) -> list[str]:
        return [c.name for c in self.columns if c.name not in self.targets]

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def layout(self) -> ColumnLayout:
        return ColumnLayout(
            tuple(c.kind for c in self.columns),
            tuple(c.n_levels if c.kind == CATEGORICAL else 0 for c in self.columns),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"columns": [c.to_dict() for c in self.columns], "targets": list(self.targets)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableSchema:
        return cls(tuple(ColumnSpec.from_dict(c) for c in d["columns"]), tuple(d["targets"]))


def _is_categorical_dtype(series: pd.Series) -> bool:
    dtype = series.dtype
    return bool(
        isinstance(dtype, pd.CategoricalDtype)
        or pd.api.types.is_object_dtype(dtype)
        or pd.api.types.is_string_dtype(dtype)
        or pd.api.types.is_bool_dtype(dtype)
    )


# an integer target with at most this many distinct values is read as class labels
MAX_INTEGER_CLASSES = 10


def integer_labels(series: pd.Series) -> bool:
    """Whether a target column of integers reads as class labels: an integer (or boolean) dtype
    with at most ``MAX_INTEGER_CLASSES`` distinct values, as 0/1 or 0/1/2 labels are meant. A
    float column, or one with more values, is a number; ``categorical_features`` /
    ``continuous_features`` (``--categorical`` / ``--continuous``) decide either way."""
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return True
    if not pd.api.types.is_integer_dtype(dtype):
        return False
    return int(series.nunique(dropna=True)) <= MAX_INTEGER_CLASSES


def _to_json_scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (str, int, float, bool)):
        return value
    raise DataValidationError(
        f"category value {value!r} of type {type(value).__name__} is not a string, number or bool"
    )


def _sorted_categories(values: Sequence[Any]) -> tuple[Any, ...]:
    unique = list(dict.fromkeys(_to_json_scalar(v) for v in values))
    try:
        return tuple(sorted(unique))
    except TypeError:  # mixed types: order by type name, then value text
        return tuple(sorted(unique, key=lambda v: (type(v).__name__, str(v))))


def check_table(frame: pd.DataFrame, *, what: str = "table") -> None:
    """Fail early on tables no model can use: empty, duplicate names, unhashable cells."""
    if frame.shape[0] == 0:
        raise DataValidationError(f"the {what} has no rows")
    if frame.shape[1] == 0:
        raise DataValidationError(f"the {what} has no columns")
    # names are compared as text (the schema's names): 0 and "0" are the same column
    duplicated = pd.Index([str(c) for c in frame.columns]).duplicated()
    duplicated = frame.columns[duplicated].tolist()
    if duplicated:
        raise DataValidationError(f"the {what} has duplicate column names {duplicated}")
    for name in frame.columns:
        col = frame[name]
        if pd.api.types.is_object_dtype(col.dtype):
            for value in col:
                if value is not None and not isinstance(value, (str, int, float, bool, np.generic)):
                    if value is pd.NA:
                        continue
                    raise TypeError(
                        f"column {name!r} holds {value!r} ({type(value).__name__}); each cell "
                        "argument must be a string or a number (or missing)"
                    )


def infer_schema(
    frame: pd.DataFrame,
    targets: Sequence[str] = (),
    *,
    categorical: Sequence[str] | None = None,
    continuous: Sequence[str] | None = None,
) -> TableSchema:
    """Infer each column's kind and categories from ``frame`` (the rows available at fit time).

    ``categorical`` / ``continuous`` force the kind of the named columns. Raises on an all-missing
    column, on inf in a continuous column, and on strings in a column forced to be continuous.
    """
    check_table(frame)
    names = [str(c) for c in frame.columns]
    for group, label in (
        (targets, "target"),
        (categorical or (), "categorical"),
        (continuous or (), "continuous"),
    ):
        missing = [c for c in group if c not in names]
        if missing:
            raise DataValidationError(f"{label} column(s) {missing} not in the table; it has {names}")
    overlap = set(categorical or ()) & set(continuous or ())
    if overlap:
        raise DataValidationError(
            f"column(s) {sorted(overlap)} are listed as both categorical and continuous"
        )
    specs = []
    for name, col_name in zip(names, frame.columns):
        col = frame[col_name]
        observed = col[~col.isna()]
        if observed.empty:
            raise DataValidationError(f"column {name!r} has no observed values (all missing)")
        if categorical is not None and name in categorical:
            kind = CATEGORICAL
        elif continuous is not None and name in continuous:
            kind = CONTINUOUS
        else:
            kind = CATEGORICAL if _is_categorical_dtype(col) else CONTINUOUS
            if kind == CATEGORICAL:
                _check_stray_strings(observed, name)
        if kind == CATEGORICAL:
            specs.append(ColumnSpec(name, CATEGORICAL, _sorted_categories(observed.tolist())))
        else:
            _numeric_column(col, name)  # raises on strings or inf
            specs.append(ColumnSpec(name, CONTINUOUS))
    return TableSchema(tuple(specs), tuple(targets))


# a column of strings whose values are numbers in at least this share, but not all, is a
# numeric column with stray text in it (a typo, a "n/a" marker), not a categorical one
STRAY_TEXT_SHARE = 0.9


def _check_stray_strings(observed: pd.Series, name: str) -> None:
    """Raise when a text column's values are numbers but for a few: pandas reads one stray
    string as a whole column of text, which would otherwise train as a categorical with a level
    per number."""
    if not (pd.api.types.is_object_dtype(observed.dtype) or pd.api.types.is_string_dtype(observed.dtype)):
        return
    numbers = pd.to_numeric(observed, errors="coerce")
    stray = numbers.isna()
    n_stray = int(stray.sum())
    if n_stray == 0 or len(observed) - n_stray < STRAY_TEXT_SHARE * len(observed):
        return
    examples = observed[stray].unique()[:5].tolist()
    raise DataValidationError(
        f"column {name!r} holds numbers except for {n_stray} value(s) {examples} (first at row "
        f"{observed.index[stray.to_numpy()][0]}): clean them, read them as missing (na_values, "
        "--na-values), or mark the column categorical"
    )


def _numeric_column(col: pd.Series, name: str) -> np.ndarray:
    """A continuous column as float64 with NaN for missing; clear errors for strings and inf."""
    if pd.api.types.is_bool_dtype(col.dtype):
        return col.astype("float64").to_numpy()
    converted = pd.to_numeric(col, errors="coerce")
    bad = converted.isna() & ~col.isna()
    if bad.any():
        examples = col[bad].unique()[:5].tolist()
        raise DataValidationError(
            f"column {name!r} is continuous but holds non-numeric value(s) {examples} "
            f"(first at row {int(np.flatnonzero(bad.to_numpy())[0])}); mark it categorical or clean it"
        )
    values = converted.to_numpy(dtype="float64", na_value=np.nan)
    if np.isinf(values).any():
        raise DataValidationError(
            f"column {name!r} contains inf at row(s) {np.flatnonzero(np.isinf(values))[:5].tolist()}; "
            "use NaN for a missing value"
        )
    return values


@dataclass
class EncodedTable:
    values: np.ndarray  # (n, d) float32: standardised scalars / category indices; 0 where missing
    missing: np.ndarray  # (n, d) bool
    # (n,) float32 sample weights of the rows (a fit's ``sample_weight``), None: every row 1
    weights: np.ndarray | None = None


def _quantile_transformer(quantiles: Sequence[float], references: Sequence[float]) -> Any:
    """A fitted one-column ``QuantileTransformer`` (to a standard normal) from its stored state."""
    from sklearn.preprocessing import QuantileTransformer

    qt = QuantileTransformer(n_quantiles=len(references), output_distribution="normal")
    qt.quantiles_ = np.asarray(quantiles, dtype=np.float64).reshape(-1, 1)
    qt.references_ = np.asarray(references, dtype=np.float64)
    qt.n_features_in_ = 1
    return qt


@dataclass
class TableEncoder:
    """Fitted on training rows only: per continuous column a mean and a (population) std, and for
    the columns in ``quantiles`` a quantile map to a standard normal (applied before the
    standardisation; see ``TrainConfig.feature_transform``)."""

    schema: TableSchema
    means: dict[str, float]
    stds: dict[str, float]
    quantiles: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # the fitted transformers rebuilt from ``quantiles`` once per column, not on every call
    _transformers: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _quantile_map(self, name: str) -> Any | None:
        q = self.quantiles.get(name)
        if q is None:
            return None
        if name not in self._transformers:
            self._transformers[name] = _quantile_transformer(q["quantiles"], q["references"])
        return self._transformers[name]

    @classmethod
    def fit(
        cls,
        frame: pd.DataFrame,
        schema: TableSchema,
        *,
        quantile_columns: Sequence[str] = (),
        min_category_count: int = 1,
        group_columns: Sequence[str] = (),
    ) -> TableEncoder:
        """``quantile_columns``: continuous columns mapped through scikit-learn's
        ``QuantileTransformer`` (normal output, one quantile per 30 rows, 10 to 1,000) fitted on
        ``frame``; columns with at most two distinct values are only standardised.

        ``group_columns``: categorical columns whose categories seen in fewer than
        ``min_category_count`` rows of ``frame`` share one "infrequent" level (scikit-learn's
        ``min_frequency`` of its encoders); a category first seen after fit joins that level too.
        The returned encoder's ``schema`` records the grouping (``ColumnSpec.infrequent``)."""
        from sklearn.preprocessing import QuantileTransformer

        if isinstance(min_category_count, bool) or not isinstance(min_category_count, (int, np.integer)):
            raise DataValidationError(f"min_category_count must be an integer, got {min_category_count!r}")
        if min_category_count < 1:
            raise DataValidationError(f"min_category_count must be >= 1, got {min_category_count}")
        means: dict[str, float] = {}
        stds: dict[str, float] = {}
        quantiles: dict[str, dict[str, list[float]]] = {}
        frame = frame.set_axis([str(c) for c in frame.columns], axis=1)  # schema names are text
        if min_category_count > 1 and group_columns:
            schema = _group_infrequent(frame, schema, int(min_category_count), group_columns)
        for spec in schema.columns:
            if spec.kind != CONTINUOUS:
                continue
            x = _numeric_column(frame[spec.name], spec.name)
            x = x[~np.isnan(x)]
            if x.size == 0:
                raise DataValidationError(f"column {spec.name!r} has no observed values (all missing)")
            if spec.name in quantile_columns and np.unique(x).size > 2:
                # one quantile per 30 rows (10 to 1,000), the usual recipe of tabular deep
                # learning: a summary of the column's distribution, not a copy of its values
                n_quantiles = max(min(x.size // 30, 1000), 10)
                qt = QuantileTransformer(
                    n_quantiles=n_quantiles, output_distribution="normal", subsample=10**9
                ).fit(x.reshape(-1, 1))
                quantiles[spec.name] = {
                    "quantiles": qt.quantiles_[:, 0].tolist(),
                    "references": qt.references_.tolist(),
                }
                x = qt.transform(x.reshape(-1, 1))[:, 0]
            mean, std = _mean_std(x)
            means[spec.name] = mean
            stds[spec.name] = std if std > 0 else 1.0  # a constant column stays 0 after centring
        return cls(schema, means, stds, quantiles)

    def _forward_map(self, name: str, x: np.ndarray) -> np.ndarray:
        qt = self._quantile_map(name)
        if qt is None:
            return x
        out = np.full_like(x, np.nan)
        ok = ~np.isnan(x)
        if ok.any():
            out[ok] = qt.transform(x[ok].reshape(-1, 1))[:, 0]
        return out

    def align(self, frame: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Check that ``frame`` has the named columns (default: all); return them in schema order."""
        wanted = list(columns) if columns is not None else self.schema.names
        have = [str(c) for c in frame.columns]
        missing = [c for c in wanted if c not in have]
        extra = [c for c in have if c not in wanted]
        if missing or extra:
            raise DataValidationError(
                f"columns do not match those seen at fit: missing {missing}, unexpected {extra}"
            )
        frame = frame.copy()
        frame.columns = have
        return frame[wanted]

    def transform(self, frame: pd.DataFrame, *, absent: Sequence[str] = ()) -> EncodedTable:
        """Encode ``frame``. Columns named in ``absent`` (e.g. targets at predict time) need not be
        present and are encoded as missing."""
        check_table(frame)
        present = [c for c in self.schema.names if c not in absent]
        frame = self.align(frame, present) if absent else self.align(frame)
        n, d = frame.shape[0], len(self.schema.columns)
        values = np.zeros((n, d), dtype=np.float32)
        missing = np.ones((n, d), dtype=bool)
        for j, spec in enumerate(self.schema.columns):
            if spec.name not in present:
                continue
            col = frame[spec.name]
            if spec.kind == CONTINUOUS:
                x = _numeric_column(col, spec.name)
                miss = np.isnan(x)
                z = (self._forward_map(spec.name, x) - self.means[spec.name]) / self.stds[spec.name]
                _check_float32(z, miss, spec.name)
                values[:, j] = np.where(miss, 0.0, z)
            else:
                codes = _category_codes(col, spec)
                miss = codes < 0
                values[:, j] = np.where(miss, 0, codes)
            missing[:, j] = miss
        return EncodedTable(values, missing)

    def decode_continuous(self, name: str, z: np.ndarray) -> np.ndarray:
        x = z * self.stds[name] + self.means[name]
        qt = self._quantile_map(name)
        if qt is None:
            return x
        return qt.inverse_transform(np.asarray(x, dtype=np.float64).reshape(-1, 1))[:, 0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema.to_dict(),
            "means": self.means,
            "stds": self.stds,
            "quantiles": self.quantiles,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableEncoder:
        return cls(
            TableSchema.from_dict(d["schema"]),
            dict(d["means"]),
            dict(d["stds"]),
            dict(d.get("quantiles", {})),
        )


def _group_infrequent(
    frame: pd.DataFrame, schema: TableSchema, min_count: int, columns: Sequence[str]
) -> TableSchema:
    """``schema`` with the categories of ``columns`` seen in fewer than ``min_count`` rows of
    ``frame`` moved to ``ColumnSpec.infrequent`` (kept categories keep their order)."""
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise DataValidationError(f"column(s) {unknown} to group are not in the table")
    specs = []
    for spec in schema.columns:
        if spec.name not in columns or spec.kind != CATEGORICAL or spec.infrequent:
            specs.append(spec)
            continue
        codes = _category_codes(frame[spec.name], spec)
        counts = np.bincount(codes[codes >= 0], minlength=len(spec.categories))
        rare = counts < min_count
        if not rare.any():
            specs.append(spec)
            continue
        kept = tuple(c for c, r in zip(spec.categories, rare) if not r)
        grouped = tuple(c for c, r in zip(spec.categories, rare) if r)
        specs.append(ColumnSpec(spec.name, CATEGORICAL, kept, grouped))
    return TableSchema(tuple(specs), schema.targets)


def _mean_std(x: np.ndarray) -> tuple[float, float]:
    """Mean and population std of finite ``x``, computed on ``x / 2**k`` (``2**k`` about max|x|) so
    that values near the float64 limit (1e308) do not overflow the sums; scaling by a power of two
    is exact, so ordinary columns get exactly ``x.mean()`` and ``x.std()``."""
    top = float(np.abs(x).max())
    if not top > 0:
        return 0.0, 0.0
    scale = float(np.ldexp(1.0, int(np.frexp(top)[1]) - 1))  # max|x / scale| < 2
    y = x / scale
    return float(y.mean()) * scale, float(y.std()) * scale


def _check_float32(z: np.ndarray, miss: np.ndarray, name: str) -> None:
    """Standardised values must fit the float32 the models read; a value ~1e38 training standard
    deviations from the training mean does not."""
    too_far = ~miss & ~(np.abs(z) <= np.finfo(np.float32).max)
    if too_far.any():
        rows = np.flatnonzero(too_far)[:5].tolist()
        raise DataValidationError(
            f"column {name!r} holds value(s) at row(s) {rows} too far from the training values to "
            f"encode ({np.abs(z[too_far]).max():.3g} standard deviations); check the data"
        )


def _category_codes(col: pd.Series, spec: ColumnSpec) -> np.ndarray:
    """Index of each cell's category; the infrequent level (``len(spec.categories)``) for the
    categories grouped at fit; -1 for missing. A category unseen at fit goes to the infrequent
    level when the column has one, else it is missing; either way with a warning."""
    # Not scikit-learn's OrdinalEncoder: it refuses a column that mixes numbers and strings
    # ("Encoders require their input argument must be uniformly strings or numbers"), and such
    # columns are valid here (a schema's categories are JSON scalars of any mix).
    lookup = {cat: i for i, cat in enumerate(spec.categories)}
    other = len(spec.categories)
    lookup.update({cat: other for cat in spec.infrequent})
    isna = col.isna().to_numpy()
    # dict lookup matches 1 == 1.0 == np.int64(1) == True, so integer-valued floats find their ints
    mapped = col.astype(object).map(lambda v: lookup.get(v, -1) if v is not None else -1)
    codes = np.array(mapped.to_numpy(dtype=np.int64, na_value=-1))
    codes[isna] = -1
    unseen_at = (codes < 0) & ~isna
    unseen = col[unseen_at].tolist()
    if unseen:
        if spec.infrequent:
            codes[unseen_at] = other
        treated = "given the column's infrequent level" if spec.infrequent else "treated as missing"
        warnings.warn(
            f"column {spec.name!r}: {len(unseen)} cell(s) hold categories not seen at fit time "
            f"(e.g. {list(dict.fromkeys(unseen))[:5]}); they are {treated}",
            UserWarning,
            stacklevel=3,
        )
    return codes
