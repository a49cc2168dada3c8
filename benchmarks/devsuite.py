"""The development suite's models and cells: every model at its defaults (only ``random_state``
set) and Optuna-tuned gradient boosting beside them, 2 threads each, on the 32 tables of
``tables.py`` (re-exported here with their splits and metrics). ``tabular_defaults.py`` runs the
grid; other scripts reuse the tables, models and :func:`run_cell`.

Models: ``auto`` (TableClassifier / TableRegressor: NPT and SPIN members together), ``npt``,
``spin``; ``hgb`` (HistGradientBoosting, categories from the dtype), ``rf`` (random forest behind
ordinal encoding and median imputation), ``xgb``, ``lgbm``, ``catboost`` (native categoricals);
``*_tuned``: a seeded Optuna TPE search on an inner 80/20 split of the training rows, rounds by
early stopping, then a refit on all of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import harness as h
import numpy as np
import pandas as pd

from tables import (  # noqa: F401  # isort: skip - the suite's tables, splits and metrics, re-exported
    CORE_TABLES, TABLES, TableSpec, aligned_proba, average_ranks, data_hash, describe_table, inner_split,
    load_table, primary_metric, rank_scores, score, split_seed, split_sizes, split_table,
)  # fmt: skip

DEFAULT_MODELS = ("auto", "npt", "spin", "hgb", "rf", "xgb", "lgbm", "catboost")
TUNED_MODELS = ("hgb_tuned", "xgb_tuned", "lgbm_tuned", "catboost_tuned")
ALL_MODELS = DEFAULT_MODELS + TUNED_MODELS
NEURAL_MODELS = ("auto", "npt", "spin")
FAMILIES = ("npt", "spin")  # the neural models of one family
GBDT_DEFAULTS = ("hgb", "xgb", "lgbm", "catboost")
N_THREADS = 2  # every model gets the whole 2-core machine: torch threads, n_jobs, thread_count
EARLY_STOPPING_ROUNDS = 50  # tuned models: rounds without improvement on the inner validation
MAX_ROUNDS = 2000  # tuned models: boosting rounds before early stopping
LIBRARY_OF = {"auto": "torch", "npt": "torch", "spin": "torch", "hgb": "sklearn", "rf": "sklearn",
              "xgb": "xgboost", "lgbm": "lightgbm", "catboost": "catboost"}  # fmt: skip
ROUNDS_PARAM = {"hgb": "max_iter", "xgb": "n_estimators", "lgbm": "n_estimators", "catboost": "iterations"}


def library_available(name: str) -> str | None:
    """None when model ``name``'s library (and Optuna, for a tuned one) imports, else the reason."""
    for lib in [LIBRARY_OF[name.removesuffix("_tuned")]] + (["optuna"] if name.endswith("_tuned") else []):
        try:
            __import__(lib)
        except Exception as exc:  # noqa: BLE001 - a broken install is as unavailable as a missing one
            return f"{lib} not importable: {exc}"
    return None


def library_version(name: str) -> str | None:
    try:
        return str(__import__(LIBRARY_OF[name.removesuffix("_tuned")]).__version__)
    except Exception:  # noqa: BLE001
        return None


def _categorical_columns(X: pd.DataFrame) -> list[str]:
    return [c for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype) or X[c].dtype == object]


class _Baseline:
    """predict/predict_proba of a fitted ``model_``, on rows prepared as in the fit."""

    def _prep(self, X: pd.DataFrame, fit: bool) -> pd.DataFrame:
        return X

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.model_.predict(self._prep(X, fit=False))).reshape(-1)

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.model_.predict_proba(self._prep(X, fit=False)))


class GBDTModel(_Baseline):
    """A gradient-boosting library at given settings, fed a DataFrame with categorical dtypes:
    ``hgb`` with ``categorical_features="from_dtype"`` (a column of more than 250 training levels,
    above HGB's bin limit, becomes its level code as a number); ``xgb`` with
    ``enable_categorical=True, tree_method="hist"``; ``lgbm`` on the category dtype; ``catboost``
    with the category columns as ``cat_features`` (as text; NaN is the level "nan"). All with
    ``N_THREADS`` threads. ``fit(..., X_val, y_val)`` early-stops on the validation rows (tuning)."""

    MAX_HGB_LEVELS = 250

    def __init__(self, library: str, task: str, seed: int, params: Mapping[str, Any] | None = None):
        self.library, self.task, self.seed, self.params = library, task, seed, dict(params or {})

    def _make(self, early_stopping: bool = False) -> Any:
        lib, es = self.library, early_stopping
        if lib == "hgb":
            from sklearn import ensemble

            classes = ensemble.HistGradientBoostingClassifier, ensemble.HistGradientBoostingRegressor
            base = {"categorical_features": "from_dtype", "random_state": self.seed}
            base.update({"early_stopping": True, "n_iter_no_change": EARLY_STOPPING_ROUNDS} if es else {})
        elif lib == "xgb":
            import xgboost

            classes = xgboost.XGBClassifier, xgboost.XGBRegressor
            base = {"enable_categorical": True, "tree_method": "hist", "n_jobs": N_THREADS,
                    "random_state": self.seed}  # fmt: skip
            base.update({"early_stopping_rounds": EARLY_STOPPING_ROUNDS} if es else {})
        elif lib == "lgbm":
            import lightgbm

            classes = lightgbm.LGBMClassifier, lightgbm.LGBMRegressor
            base = {"n_jobs": N_THREADS, "random_state": self.seed, "verbose": -1}
        elif lib == "catboost":
            import catboost

            classes = catboost.CatBoostClassifier, catboost.CatBoostRegressor
            base = {"random_seed": self.seed, "verbose": 0, "thread_count": N_THREADS,
                    "allow_writing_files": False}  # fmt: skip
        else:
            raise ValueError(f"unknown library {lib!r}")
        return classes[self.task == "regression"](**{**base, **self.params})

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
        self.model_ = self._make(early_stopping=X_val is not None)
        kwargs: dict[str, Any] = {"cat_features": self.cat_columns_} if self.library == "catboost" else {}
        if X_val is not None:
            Xv = self._prep(X_val, fit=False)
            if self.library == "hgb":
                kwargs.update(X_val=Xv, y_val=y_val)
            elif self.library == "xgb":
                kwargs.update(eval_set=[(Xv, y_val)], verbose=False)
            elif self.library == "lgbm":
                import lightgbm

                stop = lightgbm.early_stopping(EARLY_STOPPING_ROUNDS, verbose=False)
                kwargs.update(eval_set=[(Xv, y_val)], callbacks=[stop])
            else:
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
        best = m.get_best_iteration()
        return int(best) + 1 if best is not None else int(m.tree_count_)


class RFModel(_Baseline):
    """Random forest (sklearn defaults, 100 trees) behind ordinal-encoded categories (unknown and
    missing: -1) and median-imputed continuous columns."""

    def __init__(self, task: str, seed: int, params: Mapping[str, Any] | None = None):
        self.task, self.seed, self.params = task, seed, dict(params or {})

    def _forest(self) -> Any:
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        cls = RandomForestRegressor if self.task == "regression" else RandomForestClassifier
        return cls(**{"n_jobs": N_THREADS, "random_state": self.seed, **self.params})

    def fit(self, X: pd.DataFrame, y: pd.Series) -> RFModel:
        from sklearn.compose import ColumnTransformer
        from sklearn.impute import SimpleImputer
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import OrdinalEncoder

        cats = _categorical_columns(X)
        nums = [c for c in X.columns if c not in cats]
        enc = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1, encoded_missing_value=-1)
        imputer = SimpleImputer(strategy="median", keep_empty_features=True)
        prep = ColumnTransformer([("cat", enc, cats), ("num", imputer, nums)])
        self.model_ = Pipeline([("prep", prep), ("forest", self._forest())]).fit(X, y)
        self.classes_ = getattr(self.model_, "classes_", None)
        return self


# The tuned models' search spaces, suggested in this order: (low, high, log); int bounds suggest ints.
SEARCH_SPACES: dict[str, dict[str, tuple]] = {
    "hgb": {"learning_rate": (0.01, 0.3, True), "max_leaf_nodes": (4, 128, True),
            "min_samples_leaf": (2, 64, True), "l2_regularization": (1e-3, 10.0, True),
            "max_features": (0.5, 1.0, False)},
    "xgb": {"learning_rate": (0.01, 0.3, True), "max_depth": (2, 10, False),
            "min_child_weight": (0.5, 20.0, True), "subsample": (0.5, 1.0, False),
            "colsample_bytree": (0.5, 1.0, False), "reg_lambda": (1e-3, 10.0, True)},
    "lgbm": {"learning_rate": (0.01, 0.3, True), "num_leaves": (4, 128, True),
             "min_child_samples": (2, 64, True), "subsample": (0.5, 1.0, False),
             "colsample_bytree": (0.5, 1.0, False), "reg_lambda": (1e-3, 10.0, True)},
    "catboost": {"learning_rate": (0.01, 0.3, True), "depth": (3, 8, False), "l2_leaf_reg": (0.5, 30.0, True),
                 "rsm": (0.5, 1.0, False), "subsample": (0.5, 1.0, False)},
}  # fmt: skip
FIXED_PARAMS = {"hgb": {"max_iter": MAX_ROUNDS}, "xgb": {"n_estimators": MAX_ROUNDS},
                "lgbm": {"subsample_freq": 1, "n_estimators": MAX_ROUNDS},
                "catboost": {"bootstrap_type": "Bernoulli", "iterations": MAX_ROUNDS}}  # fmt: skip


def search_space(library: str, trial: Any) -> dict[str, Any]:
    """One trial's settings (boosting rounds come from early stopping)."""
    params = {}
    for name, (low, high, log) in SEARCH_SPACES[library].items():
        suggest = trial.suggest_int if isinstance(low, int) else trial.suggest_float
        params[name] = suggest(name, low, high, log=log)
    return {**params, **FIXED_PARAMS[library]}


class TunedGBDT(_Baseline):
    """Optuna TPE search (seeded) of ``n_trials`` settings on a stratified 80/20 inner split of the
    training rows, boosting rounds by early stopping on the inner 20%; then a refit on all training
    rows with the best settings and the best trial's number of rounds."""

    def __init__(self, library: str, task: str, seed: int, n_trials: int = 20, inner_fraction: float = 0.2):
        self.library, self.task, self.seed = library, task, seed
        self.n_trials, self.inner_fraction = n_trials, inner_fraction

    def fit(self, X: pd.DataFrame, y: pd.Series) -> TunedGBDT:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        Xtr, Xva, ytr, yva = inner_split(X, y, self.task, self.seed, self.inner_fraction)
        n_classes = int(y.max()) + 1 if self.task != "regression" else 0
        start = time.perf_counter()

        def objective(trial: Any) -> float:
            model = GBDTModel(self.library, self.task, self.seed, search_space(self.library, trial))
            model.fit(Xtr, ytr, Xva, yva)
            trial.set_user_attr("rounds", model.best_iteration())
            return predict_and_score(model, self.task, Xva, yva, n_classes)[primary_metric(self.task)]

        study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=self.seed))
        study.optimize(objective, n_trials=self.n_trials)
        best = study.best_trial
        params = search_space(self.library, optuna.trial.FixedTrial(best.params))
        params[ROUNDS_PARAM[self.library]] = int(best.user_attrs["rounds"])
        if self.library == "hgb":
            params["early_stopping"] = False
        search_seconds = time.perf_counter() - start
        self.model_ = GBDTModel(self.library, self.task, self.seed, params).fit(X, y)
        self.classes_ = self.model_.classes_
        self.tuning_ = {
            "best_params": h.jsonable(params), "best_inner_score": float(best.value),
            "best_trial": best.number, "n_trials": len(study.trials), "search_seconds": search_seconds,
            "refit_seconds": time.perf_counter() - start - search_seconds,
        }  # fmt: skip
        return self


def make_model(
    name: str, task: str, seed: int, overrides: Mapping[str, Any] | None = None, tuned_trials: int = 20
) -> Any:
    """Model ``name`` at its defaults with ``random_state=seed`` (plus ``overrides``: estimator
    parameters for npt/spin/auto, library parameters for the boosting models and rf)."""
    overrides = dict(overrides or {})
    if name in NEURAL_MODELS:
        import semiparam

        kind = {"auto": "Table", "npt": "NPT", "spin": "SPIN"}[name]
        cls = getattr(semiparam, kind + ("Regressor" if task == "regression" else "Classifier"))
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


def model_settings(name: str, model: Any, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings of an unfitted model: a neural estimator's parameters (where its members train,
    ``executor``/``ray_address``, and ``backend``, the old name of ``executor``, do not change the
    fitted model: left out, so records keep their keys across the rename), a baseline's library,
    seed and parameters."""
    if name not in NEURAL_MODELS:
        return {"class": type(model).__name__, **h.jsonable(vars(model))}
    params = {k: v for k, v in model.get_params().items() if k not in ("executor", "backend", "ray_address")}
    overrides = h.jsonable(dict(overrides or {}))
    return {"class": type(model).__name__, "params": h.jsonable(params), "overrides": overrides}


def cell_settings(
    table: str, model: str, split: int, overrides: Mapping[str, Any] | None = None, tuned_trials: int = 20
) -> tuple[dict[str, Any], bool]:
    """A cell's record settings and whether its result depends on semiparam's code: the table's
    data hash, and for a baseline its library's version instead of the code."""
    settings: dict[str, Any] = {"table": table, "model": model, "split": split, "data": data_hash(table)}
    if overrides:
        settings["overrides"] = dict(overrides)
    if model in NEURAL_MODELS:
        return settings, True
    settings["library"] = f"{LIBRARY_OF[model.removesuffix('_tuned')]} {library_version(model)}"
    if model in TUNED_MODELS:
        import optuna

        settings.update(tuned_trials=tuned_trials, optuna=optuna.__version__)
    return settings, False


def compositions(model: Any) -> dict[str, Any]:
    """A fitted ``model="auto"`` estimator's sub-ensembles: for every count ``i`` of its NPT
    members and ``j`` of its SPIN members (the first ones of each), a view ``"i+j"`` that predicts
    with those members only and shares their weights (the members' ensemble weights, renormalised);
    and ``"I+J mean"``, every member with the same weight (the plain average). Each member
    predicts once: the views read its first prediction again (they are only asked about one set
    of rows)."""
    members = model.learner_.members
    for member in members:
        member.predict_columns = _first_prediction(member.predict_columns)
    npt = [m for m in members if m.model_name == "npt"]
    spin = [m for m in members if m.model_name == "spin"]
    views = {
        f"{i}+{j}": model.with_members(npt[:i] + spin[:j])
        for i in range(len(npt) + 1)
        for j in range(len(spin) + 1)
        if i + j
    }
    mean = views[f"{len(npt)}+{len(spin)} mean"] = model.with_members(members)
    mean.learner_.weighted = False  # every member the same weight: no ensemble selection
    return views


def _first_prediction(predict: Callable[..., Any]) -> Callable[..., Any]:
    cache: dict[tuple, Any] = {}

    def first(frame: Any, columns: Any, *, absent: Any = ()) -> Any:
        if tuple(columns) not in cache:
            cache[tuple(columns)] = predict(frame, columns, absent=absent)
        return cache[tuple(columns)]

    return first


def predict_and_score(model: Any, task: str, X: pd.DataFrame, y: pd.Series, n_classes: int) -> dict:
    if task == "regression":
        return score(task, y.to_numpy(), model.predict(X))
    return score(task, y.to_numpy(), aligned_proba(model.predict_proba(X), model.classes_, n_classes))


def history_summary(model: Any) -> dict[str, Any]:
    """A neural model's training history without its per-step curves: per-member steps, best step,
    stop reason and seconds (``summary()``), and member 0's best step and stop reason."""
    hist = model.history_
    return h.jsonable(
        {**hist.summary(), **{k: getattr(hist, k) for k in ("best_step", "stop_reason", "stopped_early")}}
    )


def run_cell(
    table: str, model_name: str, split: int, overrides: Mapping | None = None, tuned_trials: int = 20
) -> dict[str, Any]:
    """Fit ``model_name`` on the train part of ``table``'s split and score it on the test part:
    metrics, wall/CPU seconds of fit and predict, peak RSS of the fit, stopping info, and for
    ``auto`` the scores of its sub-ensembles (the same fit's first i NPT and j SPIN members)."""
    from threadpoolctl import threadpool_limits

    task = TABLES[table].task
    X_tr, X_te, y_tr, y_te = split_table(table, split)
    n_classes = len(load_table(table)[2])
    seed = split_seed(table, split)
    model = make_model(model_name, task, seed, overrides, tuned_trials=tuned_trials)
    with threadpool_limits(limits=N_THREADS):
        with h.measure() as m_fit:
            model.fit(X_tr, y_tr)
        with h.measure() as m_pred:
            metrics = predict_and_score(model, task, X_te, y_te, n_classes)
    out: dict[str, Any] = {
        "n_train": len(X_tr), "n_test": len(X_te), "seed": seed, "metrics": metrics,
        "primary": primary_metric(task), "score": metrics[primary_metric(task)], "fit_seconds": m_fit.seconds,
        "fit_cpu_seconds": m_fit.cpu_seconds, "fit_peak_rss_mb": m_fit.peak_rss_mb,
        "predict_seconds": m_pred.seconds, "predict_cpu_seconds": m_pred.cpu_seconds,
    }  # fmt: skip
    if model_name in NEURAL_MODELS:
        out["history"] = history_summary(model)
    if model_name == "auto":  # sub-ensembles of the same fit, scored alone (paired comparisons)
        parts = compositions(model).items()
        out["composition_metrics"] = {k: predict_and_score(p, task, X_te, y_te, n_classes) for k, p in parts}
        weights: dict[str, float] = {}  # each family's weight from the ensemble selection
        for member in model.learner_.members:
            w = member.ensemble_weights.get(next(iter(member.held_out), ""), math.nan)
            weights[member.model_name] = weights.get(member.model_name, 0.0) + w
        out["family_weights"] = weights
    if hasattr(model, "tuning_"):
        out["tuning"] = model.tuning_
    gb = model if isinstance(model, GBDTModel) else getattr(model, "model_", None)
    if isinstance(gb, GBDTModel):
        out["rounds"] = getattr(gb.model_, "n_iter_", None) or gb.params.get(ROUNDS_PARAM[gb.library])
    return out


def cell(table: str, model: str, split: int, overrides=None, tuned_trials: int = 20, **_: Any) -> dict:
    """:func:`run_cell` from the settings of :func:`cell_settings`: the target of
    ``harness.run_cell("devsuite:cell", settings)``, which runs it in a fresh process."""
    return run_cell(table, model, split, overrides, tuned_trials)
