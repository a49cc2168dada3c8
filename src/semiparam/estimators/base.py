"""scikit-learn style front doors shared by the table estimators.

``__init__`` stores parameters only; ``fit`` validates, encodes, builds and trains through
:class:`TableLearner`; learned state ends in ``_``. ``save(path)`` / ``load(path)`` store weights
and fitted state as safetensors + JSON (no pickle).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from .._config import ConfigError, canonical_keys
from ..data.table import DataValidationError, check_table
from ..models.registry import get_model, model_names
from ..parallel import resolve_executor
from ..training.config import TrainConfig
from ._ensemble import EnsembleLearner, Family

# estimator arguments that override fields of TrainConfig when not None
_TRAIN_ARGS = (
    "max_steps",
    "batch_size",
    "learning_rate",
    "p_feature",
    "p_target",
    "validation_fraction",
    "patience",
    "time_budget",
)

# NOTE[DIFF]: the papers train one model. The out-of-the-box (cpu) presets are ensembles of three
# members (own seed, validation split, masks and batches; predictions averaged), chosen on the
# development suite (``benchmarks/tabular_defaults.py --set spin.n_estimators=3 --set
# npt.n_estimators=3`` beside the defaults; the comparison is in its generated report).
_DEFAULT_MEMBERS = {("spin", "cpu"): 3, ("npt", "cpu"): 3}


# model="auto" (the recommended estimator): members of these families in one ensemble, by default
# as many of each as _AUTO_MEMBERS says for the preset and the table's size (else each family's
# own default). NOTE[DIFF]: the papers train one model of one family. On the cpu preset the
# composition follows the table's labelled rows:
# - a small table (at most AUTO_SMALL_TABLE_ROWS rows, which trains in one full batch): 3 NPT +
#   2 SPIN. On the development suite's small tables the members' errors are mostly variance (a
#   single member stops on a validation split of a few dozen rows), and a second NPT member gained
#   far more than a second SPIN member (benchmarks/results/suite32/tabular_defaults.md,
#   "Sub-ensembles of auto" on the tables of at most 1,024 training rows, which lists the fits'
#   i NPT + j SPIN views); their fits are cheap, so this is where members pay. A fourth NPT
#   member (4 + 2, measured as the default at 548b260 and shown by its views there) scored as 3 + 2
#   did and took the fit past the fit-speed budget (benchmarks/results/fit_cost_auto at f3f13fd).
# - a larger table (trained in batches): 1 NPT + 2 SPIN. There the members' errors are mostly
#   shared (bias): the report's views on the larger tables move little with a second NPT member,
#   and each member costs several times a small table's. The members dropped there pay for the
#   ones added to the small tables within the fit-speed budget.
# The previous default, 2 NPT + 2 SPIN on every table, is n_estimators=2.
AUTO = "auto"
AUTO_FAMILIES = ("npt", "spin")
AUTO_SMALL_TABLE_ROWS = 1024
_AUTO_MEMBERS = {"cpu": {"small": {"npt": 3, "spin": 2}, "large": {"npt": 1, "spin": 2}}}
# TrainConfig fields that model="auto" sets for its members where the preset would otherwise decide
# (an argument or train_options entry still wins). NOTE[DIFF]: with four members the cpu preset's
# anneal after the plateau (a share of the steps run: NPT 20%, SPIN 30%) is cut to its shortest
# (``min_anneal_steps``): most members' best checkpoint comes before it, and the steps it saves pay
# for the fourth member within the fit-speed budget; chosen on the development suite (the auto
# rows of benchmarks/results/suite32/tabular_defaults.md against those of 2 + 2 members with it).
_AUTO_TRAIN = {"cpu": {"anneal_fraction": 0.0}}


def canonical_model_options(
    model: str, options: Mapping[str, Any] | None, *, warn: bool = True
) -> dict[str, Any] | None:
    """``model_options`` of an estimator of ``model`` with old key spellings replaced by their
    names now (``semiparam._config.ALIASES``), each with a FutureWarning unless ``warn`` is
    False; with ``model="auto"`` each family's entry by its own config (a shared entry could not
    have an old spelling: no key was renamed in every family)."""
    if options is None:
        return None
    if model == AUTO:
        return {
            k: canonical_model_options(k, v, warn=warn)
            if k in AUTO_FAMILIES and isinstance(v, Mapping)
            else v
            for k, v in options.items()
        }
    try:
        config_cls, _ = get_model(model)
    except ValueError:  # not a table model (the genotype imputer's "copy", "knn"): nothing renamed
        return dict(options)
    return canonical_keys(config_cls, options, warn=warn, stacklevel=3)


def default_members(model: str, preset: str, family: str | None = None, n_rows: int | None = None) -> int:
    """Ensemble members an estimator of ``model`` trains when ``n_estimators`` is None; for
    ``model="auto"``, those of ``family`` on a table of ``n_rows`` labelled rows (None: a small
    table; see ``AUTO_SMALL_TABLE_ROWS``)."""
    if model == AUTO:
        assert family is not None
        if (sizes := _AUTO_MEMBERS.get(preset)) is None:
            return default_members(family, preset)
        small = n_rows is None or n_rows <= AUTO_SMALL_TABLE_ROWS
        return sizes["small" if small else "large"][family]
    return _DEFAULT_MEMBERS.get((model, preset), 1)


class TableEstimatorMixin(BaseEstimator):
    """Parameters, config resolution, input conversion and persistence common to all estimators."""

    _model_name = "npt"
    # TrainConfig fields this estimator sets where the preset would otherwise decide (an argument
    # or train_options entry still wins)
    _train_defaults: dict[str, Any] = {}

    def resolved_configs(self, model_name: str | None = None) -> tuple[Any, TrainConfig]:
        """The model config and :class:`TrainConfig` a fit would use: the preset with this
        estimator's ``model_options``, ``train_options`` and explicit arguments applied (old
        option keys translated), validated. ``model_name``: one family of ``model="auto"``."""
        return self._configs(model_name)

    def _configs(self, model_name: str | None = None) -> tuple[Any, TrainConfig]:
        """The model and training configs of ``model_name`` (default: this estimator's model)."""
        model_name = model_name or self._model_name
        config_cls, _ = get_model(model_name)
        model_config = config_cls.preset(self.preset)
        options = self._model_options(model_name)
        if options:
            model_config = config_cls.from_dict(options, base=model_config)
        train_config = TrainConfig.preset(self.preset, model=model_name)
        explicit = {name: getattr(self, name) for name in _TRAIN_ARGS if getattr(self, name) is not None}
        options = dict(self.train_options or {})
        clash = sorted(set(explicit) & set(options))
        if clash:
            raise ConfigError(f"{clash} given both as arguments and in train_options")
        defaults = {
            **(_AUTO_TRAIN.get(self.preset, {}) if self._model_name == AUTO else {}),
            **self._train_defaults,
        }
        defaults = {k: v for k, v in defaults.items() if k not in explicit and k not in options}
        if ("batch_size" in explicit or "batch_size" in options) and "full_batch_rows" not in options:
            defaults["full_batch_rows"] = 0  # a batch size asked for is the batch size
        train_config = TrainConfig.from_dict({**defaults, **explicit, **options}, base=train_config)
        if train_config.max_steps < train_config.min_steps:
            warnings.warn(
                f"max_steps={train_config.max_steps} is below min_steps={train_config.min_steps}, the "
                "steps this preset trains before it trusts its validation loss: so short a fit can "
                "predict worse than chance (a ranking of classes reversed); use max_steps >= "
                f"{train_config.min_steps}, or a time_budget",
                UserWarning,
                stacklevel=3,
            )
        return self._adjust_model_config(model_config), train_config

    def _adjust_model_config(self, model_config: Any) -> Any:
        return model_config

    def _executor(self) -> str:
        """Where independent fits and large predictions run: ``executor``, or ``backend`` (its
        old name, deprecated: a FutureWarning) when that was given. Resolved at fit and predict,
        not in ``__init__``, which stores both as given (scikit-learn's ``get_params`` /
        ``clone``)."""
        executor, backend = getattr(self, "executor", "serial"), getattr(self, "backend", None)
        return resolve_executor(executor, backend, stacklevel=3)

    def _model_options(self, model_name: str) -> dict[str, Any]:
        """``model_options`` for ``model_name``. With ``model="auto"`` an entry named after a
        family (``"npt": {...}``) holds that family's options, and any other entry is an option
        of every family."""
        options = dict(self.model_options or {})
        if self._model_name != AUTO:
            return options
        for name, value in options.items():
            if name in AUTO_FAMILIES and not isinstance(value, dict):
                raise ConfigError(f"model_options[{name!r}] must be a dict of {name} options, got {value!r}")
        shared = {k: v for k, v in options.items() if k not in AUTO_FAMILIES}
        return {**shared, **options.get(model_name, {})}

    def _pretrained_learner(self, model: str, n_members: int | None) -> Any:
        """``init="pretrained"``: the prior-fitted NPT (``estimators.pretrained``); ``n_members``
        (``n_estimators``, checked by the caller) counts its views."""
        from .pretrained import N_ENSEMBLE, PriorFittedLearner

        init = getattr(self, "init", "random")
        if init != "pretrained":
            raise ConfigError(f"init must be 'random' or 'pretrained', got {init!r}")
        if model != "npt":
            raise ConfigError(
                f"init='pretrained' is the prior-fitted NPT; model={model!r} has no pretrained weights "
                "(use NPTClassifier / NPTRegressor, or model='npt')"
            )
        steps = self.max_steps or 0
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
            raise ConfigError(f"max_steps must be an integer >= 0, got {self.max_steps!r}")
        seed = check_random_state(self.random_state).randint(0, 2**31 - 1)
        views = N_ENSEMBLE if n_members is None else int(n_members)
        return PriorFittedLearner(
            device=self.device,
            seed=seed,
            n_ensemble=views,
            fine_tune_steps=int(steps),
            time_budget=self.time_budget,
            verbose=self.verbose,
        )

    def _new_learner(self, n_rows: int | None = None) -> EnsembleLearner:
        """The unfitted ensemble; ``n_rows``: the labelled rows it will train on, which choose
        ``model="auto"``'s composition (:func:`default_members`)."""
        model = self._model_name
        if model != AUTO:
            try:
                get_model(model)
            except ValueError:
                raise ConfigError(
                    f"unknown model {model!r}; choose {AUTO!r} (NPT and SPIN together) or one of "
                    f"{model_names()}"
                ) from None
        n_members = getattr(self, "n_estimators", None)
        if n_members is not None and (
            isinstance(n_members, bool) or not isinstance(n_members, (int, np.integer)) or n_members < 1
        ):
            raise ConfigError(f"n_estimators must be an integer >= 1, got {n_members!r}")
        if getattr(self, "init", "random") != "random":
            return self._pretrained_learner(model, n_members)
        names = AUTO_FAMILIES if model == AUTO else (model,)
        families = []
        for name in names:
            model_config, train_config = self._configs(name)
            n = default_members(model, self.preset, name, n_rows) if n_members is None else int(n_members)
            families.append(Family(name, model_config, train_config, n))
        seed = check_random_state(self.random_state).randint(0, 2**31 - 1)
        first = families[0]
        return EnsembleLearner(
            first.model_name,
            first.model_config,
            first.train_config,
            n_members=first.n_members,
            more_families=families[1:],
            device=self.device,
            seed=seed,
            verbose=self.verbose,
            executor=self._executor(),
            ray_address=getattr(self, "ray_address", None),
        )

    def _as_frame(self, X: Any, *, reset: bool) -> pd.DataFrame:
        """Validate ``X`` (DataFrame or 2-D array-like) and return it as a DataFrame with the
        column names seen at fit (``x0, x1, ...`` for arrays)."""
        if isinstance(X, pd.DataFrame):
            names = [str(c) for c in X.columns]
            duplicated = sorted({c for c in names if names.count(c) > 1})
            if duplicated:
                raise DataValidationError(
                    f"X has duplicate column name(s) {duplicated} (names are compared as text)"
                )
            if reset:
                validate_data(self, X, reset=True, skip_check_array=True)
            frame = X.copy()
            frame.columns = [str(c) for c in frame.columns]
            if frame.shape[0] == 0:
                raise DataValidationError("the table has no rows")
            if not reset:
                return self._match_columns(frame)
        else:
            array = check_array(
                X, dtype=None, ensure_all_finite=False, ensure_min_samples=1, ensure_min_features=1
            )
            validate_data(self, array, reset=reset, skip_check_array=True)
            frame = pd.DataFrame(array, columns=[f"x{j}" for j in range(array.shape[1])])
            check_table(frame)
            for name in frame.columns:  # numeric object columns of an array are numbers
                if frame[name].dtype == object:
                    converted = pd.to_numeric(frame[name], errors="coerce")
                    if not (converted.isna() & frame[name].notna()).any():
                        frame[name] = converted.astype("float64")
        return frame

    def _match_columns(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A DataFrame given after fit, its columns matched to the fitted ones by name (any order;
        columns the model was not fitted on are left out with a warning; missing ones are named in
        the error). A model fitted on an array matches columns by position."""
        names = list(self.feature_columns_)
        if not hasattr(self, "feature_names_in_"):  # fitted on an array: x0, x1, ... by position
            if frame.shape[1] != len(names):
                raise DataValidationError(
                    f"X has {frame.shape[1]} columns, but the model was fitted on {len(names)}"
                )
            frame.columns = names
            return frame
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise DataValidationError(
                f"X lacks column(s) {missing} that the model was fitted on (it has {list(frame.columns)})"
            )
        extra = [c for c in frame.columns if c not in names]
        if extra:
            warnings.warn(
                f"ignoring column(s) {extra} of X: the model was not fitted on them",
                UserWarning,
                stacklevel=4,
            )
        return frame[names]

    def _categorical_features(self, frame: pd.DataFrame, targets: Sequence[str] = ()) -> list[str] | None:
        """The feature columns ``categorical_features`` names (by name or position); a target
        column named there is accepted (it marks the target categorical) and left out."""
        if self.categorical_features is None:
            return None
        names = list(frame.columns)
        out = []
        for c in self.categorical_features:
            if isinstance(c, (int, np.integer)) and not isinstance(c, bool):
                if not 0 <= c < len(names):
                    raise DataValidationError(
                        f"categorical_features index {c} out of range for {len(names)} columns"
                    )
                out.append(names[c])
            elif str(c) in names:
                out.append(str(c))
            elif str(c) in targets:
                continue
            else:
                raise DataValidationError(
                    f"categorical_features names unknown column {c!r}; columns are {names}"
                )
        return out

    def _continuous_columns(self, frame: pd.DataFrame, targets: Sequence[str] = ()) -> list[str]:
        """The columns of ``frame`` that ``continuous_features`` (an estimator that has it) forces
        to be numbers; a target named there is accepted and left out."""
        names = getattr(self, "continuous_features", None) or []
        unknown = [str(c) for c in names if str(c) not in frame.columns and str(c) not in targets]
        if unknown:
            raise DataValidationError(
                f"continuous_features names unknown column(s) {unknown}; columns are {list(frame.columns)}"
            )
        return [str(c) for c in names if str(c) in frame.columns]

    def _unlabeled_frame(self, X_unlabeled: Any) -> pd.DataFrame | None:
        if X_unlabeled is None:
            return None
        return self._as_frame(X_unlabeled, reset=False)

    def with_members(self, members: Sequence[Any]) -> Any:
        """A view of this fitted estimator that predicts with ``members`` (some of the fitted
        ensemble's ``learner_.members``, whose weights it shares) and without the others: how a
        smaller ensemble of the same fit would predict, with nothing retrained."""
        check_is_fitted(self, "learner_")
        view = copy.copy(self)
        view.learner_ = copy.copy(self.learner_)
        view.learner_.members = list(members)
        return view

    # -- persistence --------------------------------------------------------------------------
    def _fitted_extra(self) -> dict[str, Any]:
        return {}

    def _restore_extra(self, extra: dict[str, Any]) -> None:
        pass

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Save the fitted estimator to directory ``path`` (written aside and renamed into place;
        an existing ``path`` raises :class:`FileExistsError` unless ``overwrite``)."""
        check_is_fitted(self, "learner_")
        params = self.get_params(deep=False)
        if params.get("backend") is not None:  # the deprecated name of executor: saved as executor
            params["executor"] = params["backend"]
        params.pop("backend", None)
        extra = {
            "class": type(self).__name__,
            "params": params,
            "feature_columns": list(self.feature_columns_),
            "n_features_in": int(self.n_features_in_),
            "feature_names_in": list(self.feature_names_in_) if hasattr(self, "feature_names_in_") else None,
            **self._fitted_extra(),
        }
        return self.learner_.save(path, extra, overwrite=overwrite)

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None) -> Any:
        """Load an estimator written by :meth:`save`; it predicts exactly as the saved one."""
        learner, extra = EnsembleLearner.load(path, device=device)
        if extra.get("class") != cls.__name__:
            raise ValueError(f"{path} holds a {extra.get('class')}, not a {cls.__name__}")
        params = dict(extra["params"])
        # saved before a key's rename (ALIASES): the options as they are spelt now, silently
        model = params.get("model", cls._model_name)
        params["model_options"] = canonical_model_options(model, params.get("model_options"), warn=False)
        params["device"] = device if device is not None else str(learner.device)  # cpu if saved GPU is absent
        est = cls(**params)
        est.learner_ = learner
        est.feature_columns_ = list(extra["feature_columns"])
        est.n_features_in_ = extra["n_features_in"]
        if extra.get("feature_names_in") is not None:
            est.feature_names_in_ = np.asarray(extra["feature_names_in"], dtype=object)
        est._restore_extra(extra)
        return est

    @property
    def infrequent_categories_(self) -> dict[str, list[Any]]:
        """Per categorical feature, the categories seen in fewer than ``min_category_count``
        training rows, which share one level (columns without such categories are left out)."""
        check_is_fitted(self, "learner_")
        return {c.name: list(c.infrequent) for c in self.learner_.schema.columns if c.infrequent}

    @property
    def history_(self) -> Any:
        check_is_fitted(self, "learner_")
        return self.learner_.history
