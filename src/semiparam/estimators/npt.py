"""NPT estimators: the Non-Parametric Transformer behind scikit-learn's API."""

from __future__ import annotations

from .tabular import TableClassifier, TableRegressor


class NPTClassifier(TableClassifier):
    __doc__ = "Non-Parametric Transformer classifier (Kossen et al. 2021).\n" + (
        TableClassifier.__doc__ or ""
    )
    _model_name = "npt"


class NPTRegressor(TableRegressor):
    __doc__ = "Non-Parametric Transformer regressor (Kossen et al. 2021).\n" + (TableRegressor.__doc__ or "")
    _model_name = "npt"
