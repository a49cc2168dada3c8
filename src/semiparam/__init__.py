"""semiparam: deep learning models that predict by attending over a whole dataset."""

from ._config import ConfigError
from .data.table import DataValidationError, TableEncoder, TableSchema, infer_schema
from .estimators import (
    NPTClassifier,
    NPTRegressor,
    TableClassifier,
    TableImputer,
    TablePredictor,
    TableRegressor,
)
from .models.npt import NPT, NPTConfig
from .training.config import TrainConfig

__version__ = "0.1.0"

__all__ = [
    "NPT",
    "ConfigError",
    "DataValidationError",
    "NPTClassifier",
    "NPTConfig",
    "NPTRegressor",
    "TableClassifier",
    "TableEncoder",
    "TableImputer",
    "TablePredictor",
    "TableRegressor",
    "TableSchema",
    "TrainConfig",
    "infer_schema",
    "__version__",
]
