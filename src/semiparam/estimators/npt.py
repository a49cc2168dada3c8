"""NPT estimators: the Non-Parametric Transformer behind scikit-learn's API."""

from __future__ import annotations

from .tabular import TableClassifier, TableRegressor, single_family


@single_family
class NPTClassifier(TableClassifier):
    __doc__ = "Non-Parametric Transformer classifier (Kossen et al. 2021).\n" + TableClassifier._family_doc
    _model_name = "npt"


@single_family
class NPTRegressor(TableRegressor):
    __doc__ = "Non-Parametric Transformer regressor (Kossen et al. 2021).\n" + TableRegressor._family_doc
    _model_name = "npt"
