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
