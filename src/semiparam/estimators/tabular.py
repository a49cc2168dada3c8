"""Classifier, regressor and multi-target predictor over any table model (NPT, SPIN)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..data.columns import CATEGORICAL, CONTINUOUS
from ..data.table import ColumnSpec, DataValidationError, TableSchema, infer_schema, integer_labels
from .base import AUTO, TableEstimatorMixin
from .explain import ExplainMixin

TARGET = "__target__"


def _common_init(self: Any, **kwargs: Any) -> None:
    for name, value in kwargs.items():
        setattr(self, name, value)


def _require_y(estimator: Any, y: Any) -> None:
    if y is None:
        raise ValueError(f"{type(estimator).__name__} requires y to be passed, but the target y is None")


MIN_TRAINING_ROWS = 2  # rows a fit needs: one to learn from and one to predict


def _check_trainable(frame: pd.DataFrame, target_specs: Sequence[ColumnSpec]) -> None:
    """Refuse tables nothing can be learned from: too few rows, a target with a single class."""
    if len(frame) < MIN_TRAINING_ROWS:
        raise DataValidationError(
            f"a fit needs at least {MIN_TRAINING_ROWS} labelled rows; the table has "
            f"{len(frame)} sample{'s' if len(frame) != 1 else ''}"
        )
    for spec in target_specs:
        if spec.kind == CATEGORICAL and len(spec.categories) < 2:
            raise DataValidationError(
                f"target {spec.name!r} has a single class {list(spec.categories)}; a classifier "
                "needs at least two"
            )


def check_sample_weight(sample_weight: Any, n_rows: int) -> np.ndarray | None:
    """A fit's ``sample_weight`` as float32 weights of its ``n_rows`` rows, or None when every
    row weighs the same (weights that are all equal change nothing). Refused: a shape other than
    (n_rows,), a value that is not a finite number >= 0, fewer than two rows of positive weight."""
    if sample_weight is None:
        return None
    try:
        w = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise DataValidationError(f"sample_weight must hold numbers: {err}") from None
    if w.ndim != 1 or len(w) != n_rows:
        raise DataValidationError(
            f"sample_weight must be one weight per row of X: shape ({n_rows},), got {w.shape}"
        )
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if len(bad):
        raise DataValidationError(
            f"sample_weight must be finite and >= 0; row(s) {bad[:5].tolist()} hold {w[bad[:5]].tolist()}"
        )
    if (w > 0).sum() < MIN_TRAINING_ROWS:
        raise DataValidationError(
            f"sample_weight is zero for all but {(w > 0).sum()} row(s); a fit needs at least "
            f"{MIN_TRAINING_ROWS} rows of positive weight"
        )
    if np.all(w == w[0]):
        return None
    return (w / w.mean()).astype(np.float32)


class _SupervisedTableEstimator(ExplainMixin, TableEstimatorMixin):
    def _fit_frame(
        self,
        X: Any,
        targets: pd.DataFrame,
        target_specs: Sequence[ColumnSpec],
        X_unlabeled: Any,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
        eval_set: Any = None,
        sample_weight: Any = None,
    ) -> None:
        # NOTE[DIFF]: the papers train transductively (the test rows' features are in the input
        # during training); an estimator is inductive unless X_unlabeled is given, so a fitted
        # model predicts rows it has never seen without retraining (the papers' "no
        # semi-supervision" ablation, spec-npt 2.5).
        frame = self._as_frame(X, reset=True)
        if len(targets) != len(frame):
            raise DataValidationError(f"X has {len(frame)} rows but y has {len(targets)}")
        clash = [c for c in targets.columns if c in frame.columns]
        if clash:
            raise DataValidationError(f"target name(s) {clash} clash with feature columns")
        weights = check_sample_weight(sample_weight, len(frame))
        self.feature_columns_ = list(frame.columns)
        unlabeled = self._unlabeled_frame(X_unlabeled)
        pool = frame if unlabeled is None else pd.concat([frame, unlabeled], ignore_index=True)
        categorical = self._categorical_features(frame, targets=list(targets.columns))
        continuous = self._continuous_columns(frame, targets=list(targets.columns))
        feature_schema = infer_schema(pool, categorical=categorical, continuous=continuous)
        _check_trainable(frame, target_specs)
        schema = TableSchema(
            feature_schema.columns + tuple(target_specs), tuple(s.name for s in target_specs)
        )
        table = pd.concat([frame.reset_index(drop=True), targets.reset_index(drop=True)], axis=1)
        evaluation = None if eval_set is None else self._eval_table(eval_set, targets)
        self.learner_ = self._new_learner(len(frame)).fit(
            table,
            schema,
            unlabeled=unlabeled,
            checkpoint_dir=checkpoint_dir,
            resume=resume,
            evaluation=evaluation,
            sample_weight=weights,
        )
        # what feature_importances_ is scored on, when first asked for (kept in memory, not
        # saved): the eval_set, predicted by every member from its context; else the first
        # member's held-out rows, predicted by that member alone from the rows it trained on
        # (the other members trained on those rows, and the full context holds their labels)
        held_out = self.learner_.members[0].validation_index
        self._importance_rows, self._importance_context = evaluation, None
        if evaluation is None and held_out is not None and len(held_out) >= 2:
            self._importance_rows = table.iloc[held_out].reset_index(drop=True)
            self._importance_context = table.drop(index=held_out).reset_index(drop=True)
        self._feature_importances = None

    @property
    def feature_importances_(self) -> np.ndarray:
        """Per feature (in the order of ``feature_names_in_``), how much the held-out loss grows
        when the feature is hidden in the scored rows (:meth:`feature_importances`, ``scope="row"``),
        negative values set to 0 and the whole scaled to sum to 1 (all 0 when no feature helps).
        Scored on ``eval_set`` or the first member's validation rows on first access, so it costs
        nothing until asked for; a model loaded from disk has no held-out rows (call
        ``feature_importances(X, y)`` with labelled rows)."""
        check_is_fitted(self, "learner_")
        if getattr(self, "init", "random") == "pretrained":
            raise NotImplementedError(
                "feature importances of the prior-fitted NPT (init='pretrained') are not available yet"
            )
        cached = getattr(self, "_feature_importances", None)
        if cached is not None:
            return cached
        rows = getattr(self, "_importance_rows", None)
        if rows is None:
            raise AttributeError(
                "feature_importances_ needs held-out rows (a fit with validation_fraction > 0 or "
                "an eval_set, in this process); call feature_importances(X, y) with labelled rows"
            )
        names = list(self.learner_.schema.targets)
        if len(names) != 1:
            raise AttributeError("feature_importances_ is defined for one target; call feature_importances")
        target, model = names[0], self
        context = self._importance_context
        if context is not None:  # member 0 alone, predicting from its training rows
            model = self.with_members(self.learner_.members[:1])
        scores = model._importance_scores(rows, target, context)
        raw = np.clip(scores["importance"].reindex(self.feature_columns_).to_numpy(dtype=float), 0.0, None)
        total = raw.sum()
        self._feature_importances = raw / total if total > 0 else raw
        return self._feature_importances

    def _importance_scores(
        self, rows: pd.DataFrame, target: str, context: pd.DataFrame | None
    ) -> pd.DataFrame:
        """:meth:`feature_importances` of held-out ``rows`` (features and the target column),
        predicted from ``context`` rows laid out the same (None: the model's own context)."""
        given = None if context is None else (context.drop(columns=[target]), context[target].to_numpy())
        return self.feature_importances(
            rows.drop(columns=[target]), rows[target].to_numpy(), scope="row", context=given
        )

    def _eval_table(self, eval_set: Any, targets: pd.DataFrame) -> pd.DataFrame:
        """``eval_set=(X_val, y_val)`` as one table of features and targets, checked as ``fit``
        checks its own rows."""
        if not isinstance(eval_set, (tuple, list)) or len(eval_set) != 2:
            raise DataValidationError("eval_set must be a pair (X_val, y_val)")
        X_val, y_val = eval_set
        y_arr = np.asarray(y_val.to_numpy() if isinstance(y_val, (pd.Series, pd.DataFrame)) else y_val)
        y2 = y_arr.reshape(len(y_arr), -1)
        if y2.shape[1] != targets.shape[1]:
            raise DataValidationError(
                f"eval_set's y has {y2.shape[1]} target column(s), y has {targets.shape[1]}"
            )
        if pd.isna(pd.DataFrame(y2)).any().any():
            raise DataValidationError("eval_set's y has missing values")
        labels = pd.DataFrame(
            {name: pd.Series(y2[:, k], dtype=targets[name].dtype) for k, name in enumerate(targets.columns)}
        )
        return self._context_frame(X_val, labels)

    def _context_frame(self, X: Any, targets: pd.DataFrame) -> pd.DataFrame:
        frame = self._as_frame(X, reset=False).reset_index(drop=True)
        if len(targets) != len(frame):
            raise DataValidationError(f"X has {len(frame)} rows but y has {len(targets)}")
        return pd.concat([frame, targets.reset_index(drop=True)], axis=1)

    def _predict_targets(self, X: Any) -> dict[str, dict[str, np.ndarray]]:
        check_is_fitted(self, "learner_")
        frame = self._as_frame(X, reset=False)
        targets = list(self.learner_.schema.targets)
        # where to predict follows the estimator's current executor (set_params after fit counts)
        self.learner_.use_executor(self._executor(), getattr(self, "ray_address", None))
        return self.learner_.predict_columns(frame, targets, absent=targets)


_FIT_DOC = """

        ``checkpoint_dir``: write the training state there every few steps or minutes
        (``checkpoint_every_steps`` / ``checkpoint_every_seconds`` in ``train_options``), so a
        killed fit can be continued with ``resume=True`` to the result of an uninterrupted one
        (same ``random_state``). Without ``resume`` an existing checkpoint raises
        ``FileExistsError``; with it and no checkpoint the fit starts afresh; a checkpoint of other
        data, settings or seed raises ``CheckpointMismatchError``."""


class _ContinuousLossMixin:
    """The ``loss`` parameter of estimators with continuous targets: ``gaussian`` gives the
    model a mean + scale head for continuous columns."""

    loss: str

    def _adjust_model_config(self, model_config: Any) -> Any:
        if self.loss not in ("squared_error", "gaussian"):
            raise ValueError(f"loss must be 'squared_error' or 'gaussian', got {self.loss!r}")
        return model_config.replace(gaussian_head=self.loss == "gaussian")


_PARAMS_DOC = """
    Parameters
    ----------
    preset : {"cpu", "small", "base"}
        Model and training preset: ``cpu`` (default, minutes on a laptop), the paper's NPT-Small or
        NPT-Base settings.
    init : {"random", "pretrained"}
        ``"random"`` (default): the model is trained on the table. ``"pretrained"`` (NPT only):
        the prior-fitted NPT shipped with the package, meta-trained on synthetic tables, predicts
        from the table as its context in one forward pass, with no training (``max_steps`` unset
        or 0); with ``max_steps`` > 0 a copy of its weights is first fine-tuned on the table (at
        most that many steps, stopped on a held-out tenth of the rows or the ``eval_set``).
        ``n_estimators`` views of the table (features in other slots, classes in another order)
        are averaged, 4 by default. At most 10 classes and one target.
    max_steps, batch_size, learning_rate, p_feature, p_target, validation_fraction, patience :
        Override the preset's training settings (see ``TrainConfig``) when not None. With the
        ``cpu`` preset training stops by itself when the validation loss stops improving
        (``max_steps`` is then a ceiling); ``history_`` says at which step and why.
    time_budget : float, optional
        Seconds of training for the whole fit (all members together); the learning rate is
        annealed before the budget runs out.
    n_estimators : int, optional
        Members of the ensemble: each trained with its own seed and validation split; their
        predictions are averaged (probabilities, or a Gaussian mixture). None (default): the
        preset's own count, 3 for the ``cpu`` preset and 1 for the paper presets (see
        ``semiparam.estimators.base.default_members``).
    categorical_features : list of column names or indices, optional
        Force these feature columns to be categorical (default: inferred from dtypes).
    model_options, train_options : dict, optional
        Further ``ModelConfig`` / ``TrainConfig`` fields; unknown keys raise.
    device : str
        ``"auto"`` (default: CUDA when available, then Apple's MPS, else the CPU; verbose output
        says which), ``"cpu"``, ``"cuda"``, ``"cuda:1"``... On CUDA training runs under bf16
        autocast and predictions in float32 (``train_options`` ``mixed_precision`` and
        ``predict_dtype`` choose otherwise).
    random_state : int, RandomState or None
    verbose : bool or None
        Progress bar; None shows it only on a terminal.
    executor : {"serial", "ray"}
        Where the ensemble members are trained: one after another in this process (default) or as
        Ray tasks (``pip install 'semiparam[distributed]'``), each with this process's thread
        count, so the fitted model is the same either way; with ``"ray"`` predictions for many
        rows are sharded over Ray tasks too.
    ray_address : str, optional
        With ``executor="ray"``: the cluster to join (``"auto"``, ``ray://host:10001``); None starts
        Ray on this machine for the fit.
    backend : {"serial", "ray"}, optional
        Deprecated: the old name of ``executor`` (a FutureWarning at fit); "backend" now names
        only the attention backends (``model_options`` ``row_attention`` / ``column_attention``).
"""


_MODEL_DOC = """
    The model is chosen by ``model``: ``"auto"`` (default) trains NPT and SPIN members together
    in one ensemble (with the ``cpu`` preset 3 NPT + 2 SPIN on a table of at most 1,024 rows,
    1 NPT + 2 SPIN on a larger one) and averages their
    predictions (each member weighs the same; ``train_options={"ensemble_selection": 25}`` weighs
    the two families by ensemble selection on the validation rows both held out);
    ``"npt"`` or ``"spin"`` trains one family, as :class:`NPTClassifier` / :class:`SPINClassifier`
    and their regressors do.
"""
_MODEL_PARAM = """    model : {"auto", "npt", "spin"}
        The model family. With ``"auto"``, ``n_estimators`` (when given) counts the members of
        each family, and ``model_options`` may hold one family's options under its name
        (``{"spin": {"n_inducing": 20}}``; other entries apply to both).
"""


def _with_model(params_doc: str) -> str:
    """The parameters section ``params_doc`` with ``model`` as its first entry."""
    header = "    ----------\n"
    head, _, rest = params_doc.partition(header)
    return _MODEL_DOC + head + header + _MODEL_PARAM + rest


def single_family(cls: type) -> type:
    """Class decorator for the estimators of one model family (``_model_name``): their
    ``__init__`` is the parent's without the ``model`` parameter, which they refuse."""
    parent_init = cls.__mro__[1].__init__
    signature = inspect.signature(parent_init)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if "model" in kwargs:
            raise TypeError(
                f"{type(self).__name__} always trains {self._model_name.upper()} models and takes no "
                "'model' argument; TableClassifier and TableRegressor choose the family with model="
            )
        parent_init(self, *args, **kwargs)
        del self.model  # the class decides the family

    __init__.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for name, p in signature.parameters.items() if name != "model"]
    )
    __init__.__doc__ = parent_init.__doc__
    cls.__init__ = __init__  # type: ignore[misc]
    return cls


class TableClassifier(ClassifierMixin, _SupervisedTableEstimator):
    __doc__ = "Classify rows of a table with the recommended table models.\n" + _with_model(_PARAMS_DOC)
    _family_doc = "Classify rows of a table.\n" + _PARAMS_DOC  # NPTClassifier, SPINClassifier

    def __init__(
        self,
        preset: str = "cpu",
        *,
        model: str = AUTO,
        init: str = "random",
        max_steps: int | None = None,
        batch_size: int | None = None,
        learning_rate: float | None = None,
        p_feature: float | None = None,
        p_target: float | None = None,
        validation_fraction: float | None = None,
        patience: int | None = None,
        time_budget: float | None = None,
        n_estimators: int | None = None,
        categorical_features: Sequence[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        train_options: dict[str, Any] | None = None,
        device: str = "auto",
        random_state: Any = None,
        verbose: bool | None = None,
        executor: str = "serial",
        ray_address: str | None = None,
        backend: str | None = None,
    ) -> None:
        _common_init(self, **{k: v for k, v in locals().items() if k not in ("self", "__class__")})

    @property
    def _model_name(self) -> str:  # type: ignore[override]
        return self.model

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.non_deterministic = False
        return tags

    def fit(
        self,
        X: Any,
        y: Any,
        X_unlabeled: Any = None,
        *,
        eval_set: Any = None,
        sample_weight: Any = None,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
    ) -> TableClassifier:
        """Fit on ``X`` (DataFrame or array) and labels ``y``. ``X_unlabeled``: extra rows without
        labels that join training (transductive mode of the paper). ``eval_set=(X_val, y_val)``:
        rows that pick the best checkpoint, decide when to stop and calibrate the probabilities,
        instead of a share of ``X`` held out (every row of ``X`` then trains and is context).
        ``sample_weight`` (n,): how much each row of ``X`` counts in the training loss and in the
        validation loss of the rows held out (a weight of 2 counts a row twice, 0 not at all);
        every row stays context for predictions whatever its weight. ``eval_set`` rows are
        unweighted."""
        _require_y(self, y)
        y = column_or_1d(np.asarray(y) if not isinstance(y, pd.Series) else y.to_numpy(), warn=True)
        if pd.isna(pd.Series(y)).any():
            raise DataValidationError("y contains missing labels; pass unlabeled rows as X_unlabeled")
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        spec = ColumnSpec(
            TARGET, CATEGORICAL, tuple(c.item() if isinstance(c, np.generic) else c for c in self.classes_)
        )
        labels = pd.DataFrame({TARGET: pd.Series(y, dtype=object)})
        self._fit_frame(X, labels, [spec], X_unlabeled, checkpoint_dir, resume, eval_set, sample_weight)
        return self

    def _eval_table(self, eval_set: Any, targets: pd.DataFrame) -> pd.DataFrame:
        if not isinstance(eval_set, (tuple, list)) or len(eval_set) != 2:
            raise DataValidationError("eval_set must be a pair (X_val, y_val)")
        return self._context_table(*eval_set, source="eval_set's labels")

    def set_context(self, X: Any, y: Any) -> TableClassifier:
        """Predict from the labelled rows ``(X, y)`` from now on, without retraining (e.g. after new
        data arrive). Labels must be among ``classes_``."""
        check_is_fitted(self, "learner_")
        self.learner_.refresh_context(self._context_table(X, y))
        return self

    def _context_table(self, X: Any, y: Any, source: str = "labels") -> pd.DataFrame:
        """Labelled rows ``(X, y)`` as a table of features and target. The labels must be among
        ``classes_`` as they are (``"1"`` is not the class ``1``), whatever ``source`` they
        come from (``set_context``, ``eval_set``, an explanation's context)."""
        y = column_or_1d(np.asarray(y), warn=True)
        unknown = sorted(set(np.unique(y).tolist()) - set(self.classes_.tolist()), key=str)
        if unknown:
            raise DataValidationError(
                f"{source} {unknown} were not seen at fit; classes are {self.classes_.tolist()}"
            )
        return self._context_frame(X, pd.DataFrame({TARGET: pd.Series(y, dtype=object)}))

    def predict_proba(self, X: Any) -> np.ndarray:
        return self._predict_targets(X)[TARGET]["proba"]

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The natural log of :meth:`predict_proba` (``-inf`` where a probability is 0)."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "learner_")
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def _fitted_extra(self) -> dict[str, Any]:
        return {"classes": self.classes_.tolist(), "classes_dtype": self.classes_.dtype.str}

    def _restore_extra(self, extra: dict[str, Any]) -> None:
        dtype = np.dtype(extra["classes_dtype"]) if extra["classes_dtype"][1] != "O" else object
        self.classes_ = np.asarray(extra["classes"], dtype=dtype)


class TableRegressor(RegressorMixin, _ContinuousLossMixin, _SupervisedTableEstimator):
    _family_doc = (
        "Regress one or several continuous targets.\n"
        + _PARAMS_DOC
        + """    loss : {"squared_error", "gaussian"}
        ``squared_error`` is the paper's objective; ``gaussian`` adds a predictive standard
        deviation (``predict(X, return_std=True)``).
"""
    )
    __doc__ = "Regress one or several continuous targets with the recommended table models.\n" + _with_model(
        _family_doc.partition("\n")[2]
    )

    def __init__(
        self,
        preset: str = "cpu",
        *,
        model: str = AUTO,
        init: str = "random",
        loss: str = "squared_error",
        max_steps: int | None = None,
        batch_size: int | None = None,
        learning_rate: float | None = None,
        p_feature: float | None = None,
        p_target: float | None = None,
        validation_fraction: float | None = None,
        patience: int | None = None,
        time_budget: float | None = None,
        n_estimators: int | None = None,
        categorical_features: Sequence[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        train_options: dict[str, Any] | None = None,
        device: str = "auto",
        random_state: Any = None,
        verbose: bool | None = None,
        executor: str = "serial",
        ray_address: str | None = None,
        backend: str | None = None,
    ) -> None:
        _common_init(self, **{k: v for k, v in locals().items() if k not in ("self", "__class__")})

    @property
    def _model_name(self) -> str:  # type: ignore[override]
        return self.model

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.target_tags.multi_output = True
        return tags

    def fit(
        self,
        X: Any,
        y: Any,
        X_unlabeled: Any = None,
        *,
        eval_set: Any = None,
        sample_weight: Any = None,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
    ) -> TableRegressor:
        """Fit on ``X`` and a continuous target ``y`` (n,) or several, ``y`` (n, k).
        ``eval_set=(X_val, y_val)``, ``sample_weight``: as :meth:`TableClassifier.fit`."""
        _require_y(self, y)
        y_arr = np.asarray(y.to_numpy() if isinstance(y, (pd.Series, pd.DataFrame)) else y)
        if y_arr.dtype == object:
            y_arr = pd.DataFrame(y_arr).apply(pd.to_numeric, errors="raise").to_numpy()
        if np.iscomplexobj(y_arr):
            raise DataValidationError("Complex data not supported: y holds complex numbers")
        y_arr = y_arr.astype(np.float64)
        self._y_ndim = y_arr.ndim
        y2 = y_arr.reshape(len(y_arr), -1)
        if not np.isfinite(y2).all():
            raise DataValidationError("y contains NaN or inf; pass unlabeled rows as X_unlabeled")
        names = [TARGET] if y_arr.ndim == 1 else [f"{TARGET}{k}" for k in range(y2.shape[1])]
        self.n_outputs_ = len(names)
        targets = pd.DataFrame(y2, columns=names)
        specs = [ColumnSpec(n, CONTINUOUS) for n in names]
        self._fit_frame(X, targets, specs, X_unlabeled, checkpoint_dir, resume, eval_set, sample_weight)
        return self

    def set_context(self, X: Any, y: Any) -> TableRegressor:
        """Predict from the labelled rows ``(X, y)`` from now on, without retraining."""
        check_is_fitted(self, "learner_")
        self.learner_.refresh_context(self._context_table(X, y))
        return self

    def _context_table(self, X: Any, y: Any) -> pd.DataFrame:
        """Labelled rows ``(X, y)`` as a table of features and target columns."""
        y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        names = list(self.learner_.schema.targets)
        if y2.shape[1] != len(names):
            raise DataValidationError(f"y has {y2.shape[1]} target column(s), the model {len(names)}")
        return self._context_frame(X, pd.DataFrame(y2, columns=names))

    def predict(self, X: Any, return_std: bool = False) -> Any:
        out = self._predict_targets(X)
        names = list(self.learner_.schema.targets)
        mean = np.column_stack([out[n]["mean"] for n in names])
        if return_std:
            if "std" not in out[names[0]]:
                raise ValueError("return_std=True needs a model fitted with loss='gaussian'")
            std = np.column_stack([out[n]["std"] for n in names])
        if self._y_ndim == 1:
            mean = mean[:, 0]
            std = std[:, 0] if return_std else None
        return (mean, std) if return_std else mean

    def _fitted_extra(self) -> dict[str, Any]:
        return {"y_ndim": self._y_ndim, "n_outputs": self.n_outputs_}

    def _restore_extra(self, extra: dict[str, Any]) -> None:
        self._y_ndim = extra["y_ndim"]
        self.n_outputs_ = extra["n_outputs"]


class TablePredictor(_ContinuousLossMixin, _SupervisedTableEstimator):
    """Predict one or several target columns of mixed kinds, named inside a DataFrame.

    ``fit(frame)`` trains with ``targets`` as target columns; ``predict(frame)`` returns a
    DataFrame with one column per target (the class for a categorical target, the mean for a
    continuous one) plus ``<target>_proba_<class>`` / ``<target>_std`` columns. Used by the CLI.

    A target's kind: strings, booleans and categories are classes; an integer column with at
    most ``MAX_INTEGER_CLASSES`` (10) distinct values is class labels (0/1, 0/1/2); other numbers
    are continuous. ``categorical_features`` and ``continuous_features`` name columns, targets
    or features, whose kind is forced either way.
    """

    def __init__(
        self,
        targets: Sequence[str] = (),
        preset: str = "cpu",
        *,
        model: str = "npt",
        loss: str = "squared_error",
        max_steps: int | None = None,
        batch_size: int | None = None,
        learning_rate: float | None = None,
        p_feature: float | None = None,
        p_target: float | None = None,
        validation_fraction: float | None = None,
        patience: int | None = None,
        time_budget: float | None = None,
        n_estimators: int | None = None,
        categorical_features: Sequence[Any] | None = None,
        continuous_features: Sequence[str] | None = None,
        model_options: dict[str, Any] | None = None,
        train_options: dict[str, Any] | None = None,
        device: str = "auto",
        random_state: Any = None,
        verbose: bool | None = None,
        executor: str = "serial",
        ray_address: str | None = None,
        backend: str | None = None,
    ) -> None:
        _common_init(self, **{k: v for k, v in locals().items() if k not in ("self", "__class__")})

    @property
    def _model_name(self) -> str:  # type: ignore[override]
        return self.model

    def fit(
        self,
        frame: pd.DataFrame,
        X_unlabeled: Any = None,
        *,
        eval_set: pd.DataFrame | None = None,
        sample_weight: Any = None,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
    ) -> TablePredictor:
        """Fit on ``frame``, which holds the feature and the target columns. ``eval_set``: a
        table laid out the same, whose rows pick the best checkpoint and decide when to stop
        instead of a share of ``frame`` held out. ``sample_weight``: one weight per row of
        ``frame``, as :meth:`TableClassifier.fit`."""
        if not isinstance(frame, pd.DataFrame):
            raise TypeError("TablePredictor.fit takes a DataFrame that holds the target columns")
        if not self.targets:
            raise DataValidationError("give at least one target column")
        frame = frame.copy()
        frame.columns = [str(c) for c in frame.columns]
        targets = [str(t) for t in self.targets]
        missing = [t for t in targets if t not in frame.columns]
        if missing:
            raise DataValidationError(
                f"target column(s) {missing} not in the table; it has {list(frame.columns)}"
            )
        labels = frame[targets]
        if labels.isna().any().any():
            bad = labels.columns[labels.isna().any()].tolist()
            raise DataValidationError(
                f"target column(s) {bad} have missing values; drop those rows or pass them as X_unlabeled"
            )
        cats = self._categorical_features(frame) or []
        continuous = self._continuous_columns(frame)
        # an integer target with few values is class labels (data.table.integer_labels), unless
        # continuous_features names it
        categorical_targets = [
            t for t in targets if t in cats or (t not in continuous and integer_labels(labels[t]))
        ]
        target_specs = infer_schema(
            labels,
            categorical=categorical_targets,
            continuous=[t for t in targets if t in continuous],
        ).columns
        features = frame.drop(columns=targets)
        self._fit_frame(
            features, labels, list(target_specs), X_unlabeled, checkpoint_dir, resume, eval_set, sample_weight
        )
        return self

    def _importance_scores(
        self, rows: pd.DataFrame, target: str, context: pd.DataFrame | None
    ) -> pd.DataFrame:
        return self.feature_importances(
            rows, None, scope="row", context=None if context is None else (context, None)
        )

    def _eval_table(self, eval_set: Any, targets: pd.DataFrame) -> pd.DataFrame:
        if not isinstance(eval_set, pd.DataFrame):
            raise TypeError("a TablePredictor's eval_set is a DataFrame holding the target columns")
        return self._labelled_rows(
            eval_set,
            list(targets.columns),
            missing="eval_set lacks the target column(s) {}",
            holes="eval_set's target columns have missing values",
        )

    def _context_table(self, frame: Any, y: Any = None) -> pd.DataFrame:
        """Labelled rows: a DataFrame holding the feature and the target columns."""
        if y is not None or not isinstance(frame, pd.DataFrame):
            raise TypeError(
                "a TablePredictor takes labelled rows as one DataFrame holding the target columns"
            )
        return self._labelled_rows(
            frame,
            list(self.learner_.schema.targets),
            missing="target column(s) {} not in the table",
            holes="target columns of labelled rows may not have missing values",
        )

    def _labelled_rows(
        self, frame: pd.DataFrame, targets: list[str], *, missing: str, holes: str
    ) -> pd.DataFrame:
        """``frame``'s feature and ``targets`` columns as :meth:`_context_frame` takes them, after
        checking that every target is there (``missing``, formatted with their names) and fully
        labelled (``holes``)."""
        frame = frame.rename(columns=str)
        absent = [t for t in targets if t not in frame.columns]
        if absent:
            raise DataValidationError(missing.format(absent))
        if frame[targets].isna().any().any():
            raise DataValidationError(holes)
        return self._context_frame(frame.drop(columns=targets), frame[targets])

    def predict(self, frame: Any) -> pd.DataFrame:
        if isinstance(frame, pd.DataFrame):
            frame = frame.drop(columns=[t for t in self.targets if t in frame.columns])
        out = self._predict_targets(frame)
        result: dict[str, Any] = {}
        for spec in self.learner_.schema.columns:
            if spec.name not in self.learner_.schema.targets:
                continue
            entry = out[spec.name]
            if spec.kind == CATEGORICAL:
                cats = np.asarray(spec.categories, dtype=object)
                result[spec.name] = cats[np.argmax(entry["proba"], axis=1)]
                for k, c in enumerate(spec.categories):
                    result[f"{spec.name}_proba_{c}"] = entry["proba"][:, k]
            else:
                result[spec.name] = entry["mean"]
                if "std" in entry:
                    result[f"{spec.name}_std"] = entry["std"]
        return pd.DataFrame(result)


for _cls in (TableClassifier, TableRegressor, TablePredictor):
    _cls.fit.__doc__ = (_cls.fit.__doc__ or "") + _FIT_DOC

del _cls
