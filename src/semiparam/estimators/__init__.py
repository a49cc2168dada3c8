from .imputer import TableImputer
from .npt import NPTClassifier, NPTRegressor
from .tabular import TableClassifier, TablePredictor, TableRegressor

__all__ = [
    "NPTClassifier",
    "NPTRegressor",
    "TableClassifier",
    "TableImputer",
    "TablePredictor",
    "TableRegressor",
]
