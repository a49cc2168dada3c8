"""Fill every missing cell of a mixed-type table from the masking objective."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..data.columns import CATEGORICAL
from ..data.table import infer_schema
from .base import TableEstimatorMixin


class TableImputer(TransformerMixin, TableEstimatorMixin):
    """Impute missing cells (NaN, None, pd.NA) of any column, continuous or categorical.

    The model is trained by masked reconstruction alone: every observed cell is a candidate for
    feature masking (``p_feature``, default 0.15, the paper's) and the loss is the feature
    loss, i.e. NPT/SPIN trained with lambda = 1 and no target columns (NPT section 2.7,
    "imputation"). ``transform`` predicts each missing cell from the row's observed cells and the
    training rows as context: the mean for continuous columns, the most probable category otherwise.

    Parameters are those of the classifiers (see ``NPTClassifier``), plus ``model``: ``"npt"`` or
    ``"spin"``; ``n_estimators`` members (default 1) average their predictions and a
    ``time_budget`` bounds the whole fit. There is no target, so ``p_target``,
    ``validation_fraction`` and ``patience`` (held-out labels and stopping on them) do not apply:
    training runs ``max_steps`` steps (400 unless given) or until the ``time_budget``.
    """

    def __init__(
        self,
        model: str = "npt",
        preset: str = "cpu",
        *,
        max_steps: int | None = None,
        batch_size: int | None = None,
        learning_rate: float | None = None,
        p_feature: float | None = None,
        time_budget: float | None = None,
        n_estimators: int | None = 1,
        categorical_features: Sequence[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        train_options: dict[str, Any] | None = None,
        device: str = "auto",
        random_state: Any = None,
        verbose: bool | None = None,
    ) -> None:
        self.model = model
        self.preset = preset
        self.max_steps = max_steps
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.p_feature = p_feature
        self.time_budget = time_budget
        self.n_estimators = n_estimators
        self.categorical_features = categorical_features
        self.model_options = model_options
        self.train_options = train_options
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # parameters of the supervised estimators that do not apply here: there is no target to hide
    # or to validate on (see the class docstring)
    p_target = None
    validation_fraction = None
    patience = None
    # with nothing to validate on, the adaptive schedule would run to its ceiling: an imputer
    # trains for 400 steps unless max_steps is given. Feature masking is its whole training
    # signal, so it keeps the paper's p_feature of 0.15 (the cpu preset's 0.05 was chosen for
    # supervised prediction, where the target loss leads). Every column is one it imputes, with a
    # category it saw: none of them shares an infrequent level (min_category_count 1)
    _train_defaults = {"max_steps": 400, "p_feature": 0.15, "min_category_count": 1}

    @property
    def _model_name(self) -> str:  # type: ignore[override]
        return self.model

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    def fit(
        self, X: Any, y: Any = None, *, checkpoint_dir: str | Path | None = None, resume: bool = False
    ) -> TableImputer:
        """Learn to fill any cell of ``X`` from the others (``y`` is ignored). ``checkpoint_dir``
        and ``resume``: as :meth:`TableClassifier.fit`."""
        frame = self._as_frame(X, reset=True)
        self.feature_columns_ = list(frame.columns)
        schema = infer_schema(frame, categorical=self._categorical_features(frame))
        self.learner_ = self._new_learner(len(frame)).fit(
            frame, schema, checkpoint_dir=checkpoint_dir, resume=resume
        )
        return self

    def transform(self, X: Any) -> Any:
        check_is_fitted(self, "learner_")
        frame = self._as_frame(X, reset=False)
        enc = self.learner_.encoder.transform(frame)
        filled = frame.copy()
        columns = [c for j, c in enumerate(frame.columns) if enc.missing[:, j].any()]
        if columns:
            preds = self.learner_.predict_columns(enc, columns)  # encoded once, above
            for name in columns:
                j = list(frame.columns).index(name)
                rows = enc.missing[:, j] & frame[name].isna().to_numpy()
                spec = self.learner_.schema.columns[j]
                if spec.kind == CATEGORICAL:
                    cats = np.asarray(spec.categories, dtype=object)
                    fill = cats[np.argmax(preds[name]["proba"], axis=1)]
                    if not pd.api.types.is_object_dtype(filled[name].dtype):
                        filled[name] = filled[name].astype(object)
                else:
                    fill = preds[name]["mean"]
                filled.loc[rows, name] = fill[rows]
        if isinstance(X, pd.DataFrame):
            filled.columns = X.columns
            filled.index = X.index
            return filled
        return filled.to_numpy()
