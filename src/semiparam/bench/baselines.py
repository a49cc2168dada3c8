"""Baselines of the NPT paper, tuned honestly on the validation split (spec-npt 7.2, 7.3).

Each baseline draws ``n_configs`` settings at random (seeded; Optuna's random sampler) from the
paper's search space (Tables 17-25), fits each on the training rows, keeps the one with the best
validation score (AUROC for binary, accuracy for multi-class, RMSE for regression) and predicts
the test rows with it; as in the reference code the final model is fitted on training rows only.

NOTE[DIFF] against the paper: a random search of ``n_configs`` settings instead of a grid of
24-11,340; ``n_estimators`` capped at ``max_estimators``; the plan's thread count per model; the MLP runs at
most 100 epochs (scikit-learn default 200) and stops
early on an internal 10% hold-out of the training rows (scikit-learn ``early_stopping``); the
paper's ``max_features="auto"`` is scikit-learn's old default (sqrt for classification, all
features for regression); the MLP's ``learning_rate`` schedule only acts with SGD, and scikit-
learn's default Adam solver is used (as the search space leaves the solver at its default).

XGBoost, LightGBM and CatBoost come with the ``baselines`` extra
(``pip install 'semiparam[baselines]'``); without it they are reported as unavailable.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler
from threadpoolctl import threadpool_limits

from .protocol import HIGHER_IS_BETTER, PRIMARY_METRIC, score_predictions

MISSING_CATEGORY = "__missing__"


@dataclass(frozen=True)
class FoldData:
    """The rows of one fold, as DataFrames/Series, with what models need to know about them."""

    X_train: pd.DataFrame
    y_train: pd.Series
    X_val: pd.DataFrame
    y_val: pd.Series
    X_test: pd.DataFrame
    task: str
    categorical: tuple[str, ...]

    @property
    def continuous(self) -> list[str]:
        return [c for c in self.X_train.columns if c not in self.categorical]


@dataclass
class ModelOutput:
    """Test predictions of one model on one fold plus what it did to get there."""

    prediction: np.ndarray  # values (regression) or probabilities (n, n_classes)
    classes: list[Any] | None
    details: dict[str, Any]


def _categories_as_text(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    frame = frame.copy()
    for c in columns:
        col = frame[c].astype(object)
        frame[c] = col.where(col.notna(), MISSING_CATEGORY).astype(str)
    return frame


def preprocessor(data: FoldData, kind: str) -> Callable[[pd.DataFrame], np.ndarray]:
    """Fit on the training rows and return the transform.

    ``tree``: categories as ordinal codes, continuous columns median-imputed.
    ``dense`` (MLP, k-NN): categories one-hot (at most 64 per column, the rest pooled),
    continuous columns median-imputed and standardised."""
    cat = list(data.categorical)
    cont = data.continuous
    if kind == "tree":
        cat_enc: Any = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
        cont_enc: Any = SimpleImputer(strategy="median")
    elif kind == "dense":
        cat_enc = OneHotEncoder(handle_unknown="infrequent_if_exist", max_categories=64, sparse_output=False)
        cont_enc = make_pipeline(SimpleImputer(strategy="median"), StandardScaler())
    else:
        raise ValueError(f"preprocessor kind must be 'tree' or 'dense', got {kind!r}")
    parts = []
    if cont:
        parts.append(("continuous", cont_enc, cont))
    if cat:
        parts.append(("categorical", cat_enc, cat))
    transformer = ColumnTransformer(parts, remainder="drop")
    transformer.fit(_categories_as_text(data.X_train, cat))
    return lambda frame: np.asarray(transformer.transform(_categories_as_text(frame, cat)), dtype=np.float64)


# -- search spaces (spec-npt 7.3) -----------------------------------------------------------------


def _boosting_space(trial: Any, task: str, small: bool, max_estimators: int) -> dict[str, Any]:
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-3, 0.3, log=True),
        "max_depth": trial.suggest_int("max_depth", 3, 10),
        "n_estimators": trial.suggest_int("n_estimators", 50, max(50, max_estimators), log=True),
    }


def _forest_space(trial: Any, task: str, small: bool, max_estimators: int) -> dict[str, Any]:
    criteria = ["gini", "entropy"] if task != "regression" else ["absolute_error", "squared_error"]
    auto = "sqrt" if task != "regression" else 1.0  # scikit-learn's old "auto"
    features = trial.suggest_categorical("max_features", ["auto", "sqrt", "log2"])
    return {
        "criterion": trial.suggest_categorical("criterion", criteria),
        "n_estimators": trial.suggest_int("n_estimators", 50, max(50, max_estimators), log=True),
        "max_features": auto if features == "auto" else features,
    }


def _mlp_space(trial: Any, task: str, small: bool, max_estimators: int) -> dict[str, Any]:
    # NOTE: the hidden layers of scikit-learn's MLP (the paper's baseline search), not a semiparam key
    n_layers = trial.suggest_int("n_layers", 1, 3) if small else 3
    width = trial.suggest_int("width", 25, 500, log=True)
    return {
        "hidden_layer_sizes": (width,) * n_layers,
        "alpha": trial.suggest_float("alpha", 1e-6, 1.0 if small else 1e-2, log=True),
        "batch_size": trial.suggest_int("batch_size", 32 if small else 128, 256),
        "learning_rate": trial.suggest_categorical("learning_rate", ["constant", "invscaling", "adaptive"]),
        "learning_rate_init": trial.suggest_float("learning_rate_init", 1e-5, 1e-1, log=True),
    }


def _knn_space(trial: Any, task: str, small: bool, max_estimators: int) -> dict[str, Any]:
    if small:
        return {
            "n_neighbors": trial.suggest_int("n_neighbors", 2, 100),
            "weights": trial.suggest_categorical("weights", ["uniform", "distance"]),
            "algorithm": trial.suggest_categorical("algorithm", ["ball_tree", "kd_tree", "brute"]),
            "leaf_size": trial.suggest_int("leaf_size", 10, 100),
            "p": trial.suggest_categorical("p", [1, 2]),
        }
    return {
        "n_neighbors": trial.suggest_int("n_neighbors", 2, 1000, log=True),
        "weights": "distance",
        "algorithm": "auto",
        "leaf_size": trial.suggest_int("leaf_size", 10, 100),
        "p": 2,
    }


# -- estimator factories ---------------------------------------------------------------------------


def _sk_forest(task: str, params: dict[str, Any], seed: int, threads: int = 1) -> Any:
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    cls = RandomForestRegressor if task == "regression" else RandomForestClassifier
    return cls(**params, n_jobs=threads, random_state=seed)


def _sk_gb(task: str, params: dict[str, Any], seed: int, threads: int = 1) -> Any:
    from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor

    cls = GradientBoostingRegressor if task == "regression" else GradientBoostingClassifier
    return cls(**params, random_state=seed)


def _sk_hgb(task: str, params: dict[str, Any], seed: int, threads: int = 1) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    cls = HistGradientBoostingRegressor if task == "regression" else HistGradientBoostingClassifier
    p = dict(params)
    p["max_iter"] = p.pop("n_estimators")
    return cls(**p, early_stopping=False, random_state=seed)


def _xgb(task: str, params: dict[str, Any], seed: int, threads: int = 1) -> Any:
    import xgboost

    cls = xgboost.XGBRegressor if task == "regression" else xgboost.XGBClassifier
    return cls(**params, n_jobs=threads, random_state=seed, tree_method="hist", verbosity=0)


def _lgbm(task: str, params: dict[str, Any], seed: int, threads: int = 1) -> Any:
    import lightgbm

    cls = lightgbm.LGBMRegressor if task == "regression" else lightgbm.LGBMClassifier
    return cls(**params, n_jobs=threads, random_state=seed, verbose=-1)


def _catboost(task: str, params: dict[str, Any], seed: int, threads: int = 1) -> Any:
    import catboost

    cls = catboost.CatBoostRegressor if task == "regression" else catboost.CatBoostClassifier
    p = dict(params)
    p["depth"] = p.pop("max_depth")
    p["iterations"] = p.pop("n_estimators")
    return cls(**p, thread_count=threads, random_seed=seed, verbose=False, allow_writing_files=False)


def _mlp(task: str, params: dict[str, Any], seed: int, threads: int = 1) -> Any:
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    cls = MLPRegressor if task == "regression" else MLPClassifier
    return cls(**params, max_iter=100, early_stopping=True, random_state=seed)


def _knn(task: str, params: dict[str, Any], seed: int, threads: int = 1) -> Any:
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

    cls = KNeighborsRegressor if task == "regression" else KNeighborsClassifier
    return cls(**params, n_jobs=threads)


@dataclass(frozen=True)
class Baseline:
    """One baseline: how to draw a setting, build the estimator and encode the table."""

    key: str
    title: str
    paper_name: str | None  # row name in the paper's tables
    space: Callable[[Any, str, bool, int], dict[str, Any]]  # (optuna trial, task, small, max_estimators)
    factory: Callable[..., Any]  # (task, params, seed, threads) -> unfitted estimator
    encoding: str  # "tree" or "dense"
    requires: str | None = None  # optional package

    def unavailable_reason(self) -> str | None:
        if self.requires and importlib.util.find_spec(self.requires) is None:
            return f"{self.requires} is not installed: pip install 'semiparam[baselines]'"
        if importlib.util.find_spec("optuna") is None:
            return "optuna (the random search) is not installed: pip install 'semiparam[bench]'"
        return None

    def run(
        self,
        data: FoldData,
        *,
        n_configs: int,
        max_estimators: int,
        small: bool,
        seed: int,
        threads: int = 1,
    ) -> ModelOutput:
        """Random search on the validation rows; test predictions of the best setting. ``threads``:
        the estimator's own thread count, and a cap on the BLAS/OpenMP pools (threadpoolctl)."""
        reason = self.unavailable_reason()
        if reason:
            raise ImportError(f"baseline {self.key!r} unavailable: {reason}")
        if n_configs < 1:
            raise ValueError(f"n_configs must be >= 1, got {n_configs}")
        encode = preprocessor(data, self.encoding)
        X_train, X_val, X_test = encode(data.X_train), encode(data.X_val), encode(data.X_test)
        y_train = data.y_train.to_numpy()
        if data.task != "regression":
            classes = sorted(pd.unique(data.y_train).tolist(), key=str)
            code = {c: i for i, c in enumerate(classes)}
            y_fit = np.array([code[v] for v in y_train])
        else:
            classes = None
            y_fit = y_train.astype(np.float64)
        metric = PRIMARY_METRIC[data.task]
        sign = 1.0 if HIGHER_IS_BETTER[metric] else -1.0
        import optuna

        best: tuple[float, dict[str, Any], Any] | None = None
        tried = []

        def objective(trial: Any) -> float:
            nonlocal best
            params = self.space(trial, data.task, small, max_estimators)
            if "n_neighbors" in params:
                params["n_neighbors"] = int(min(params["n_neighbors"], len(X_train) - 1))
            model = self.factory(data.task, params, seed, threads)
            with warnings.catch_warnings(), threadpool_limits(threads):
                warnings.simplefilter("ignore")  # convergence chatter of the MLP, feature-name notes
                model.fit(X_train, y_fit)
                val_pred = self._predict(model, X_val, data.task, classes)
            val_score = score_predictions(data.task, data.y_val.to_numpy(), val_pred, classes)[metric]
            tried.append({"params": _jsonable(params), f"val_{metric}": val_score})
            if not np.isnan(val_score) and (best is None or sign * val_score > sign * best[0]):
                best = (val_score, params, model)  # kept fitted: the test rows are predicted by it
            return float(val_score)

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            direction="maximize" if sign > 0 else "minimize", sampler=optuna.samplers.RandomSampler(seed=seed)
        )
        study.optimize(objective, n_trials=n_configs)
        if best is None:
            raise RuntimeError(f"{self.key}: every setting gave a NaN validation {metric}")
        with warnings.catch_warnings(), threadpool_limits(threads):
            warnings.simplefilter("ignore")
            prediction = self._predict(best[2], X_test, data.task, classes)
        return ModelOutput(
            prediction,
            classes,
            {
                "best_params": _jsonable(best[1]),
                f"best_val_{metric}": best[0],
                "n_configs": n_configs,
                "search": tried,
            },
        )

    @staticmethod
    def _predict(model: Any, X: np.ndarray, task: str, classes: list[Any] | None) -> np.ndarray:
        if task == "regression":
            return np.asarray(model.predict(X), dtype=np.float64).reshape(-1)
        proba = np.asarray(model.predict_proba(X), dtype=np.float64)
        assert classes is not None
        if proba.shape[1] != len(classes):  # a class absent from training: give it zero mass
            full = np.zeros((len(X), len(classes)))
            full[:, np.asarray(model.classes_, dtype=np.int64)] = proba
            proba = full
        return proba


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (list(v) if isinstance(v, tuple) else v.item() if isinstance(v, np.generic) else v)
        for k, v in params.items()
    }


BASELINES: dict[str, Baseline] = {
    b.key: b
    for b in (
        Baseline("random_forest", "Random Forest", "Random Forest", _forest_space, _sk_forest, "tree"),
        Baseline(
            "gradient_boosting", "Gradient Boosting", "Gradient Boosting", _boosting_space, _sk_gb, "tree"
        ),
        Baseline("xgboost", "XGBoost", "XGBoost", _boosting_space, _xgb, "tree", "xgboost"),
        Baseline("catboost", "CatBoost", "CatBoost", _boosting_space, _catboost, "tree", "catboost"),
        Baseline("lightgbm", "LightGBM", "LightGBM", _boosting_space, _lgbm, "tree", "lightgbm"),
        Baseline("mlp", "MLP", "MLP", _mlp_space, _mlp, "dense"),
        Baseline("knn", "k-NN", "k-NN", _knn_space, _knn, "dense"),
        Baseline("hist_gradient_boosting", "HistGradientBoosting", None, _boosting_space, _sk_hgb, "tree"),
    )
}
