"""The scikit-learn style estimators over table models: NPT and SPIN classifiers and regressors,
the generic table predictors, the imputer of any missing cell, and the image classifiers."""

from .image import NPTImageClassifier, SPINImageClassifier
from .imputer import TableImputer
from .npt import NPTClassifier, NPTRegressor
from .spin import SPINClassifier, SPINRegressor
from .tabular import TableClassifier, TablePredictor, TableRegressor

__all__ = [
    "NPTClassifier",
    "NPTImageClassifier",
    "NPTRegressor",
    "SPINClassifier",
    "SPINImageClassifier",
    "SPINRegressor",
    "TableClassifier",
    "TableImputer",
    "TablePredictor",
    "TableRegressor",
]
