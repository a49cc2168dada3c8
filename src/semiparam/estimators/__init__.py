"""The scikit-learn style estimators over table models: NPT and SPIN classifiers and regressors,
the generic table predictors and the imputer of any missing cell."""

from .imputer import TableImputer
from .npt import NPTClassifier, NPTRegressor
from .spin import SPINClassifier, SPINRegressor
from .tabular import TableClassifier, TablePredictor, TableRegressor

__all__ = [
    "NPTClassifier",
    "NPTRegressor",
    "SPINClassifier",
    "SPINRegressor",
    "TableClassifier",
    "TableImputer",
    "TablePredictor",
    "TableRegressor",
]
