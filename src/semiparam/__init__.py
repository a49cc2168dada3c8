"""semiparam: deep learning models that predict by attending over a whole dataset."""

from ._config import ConfigError
from ._io import ModelFileError
from .data.table import DataValidationError, TableEncoder, TableSchema, infer_schema
from .estimators import (
    NPTClassifier,
    NPTImageClassifier,
    NPTRegressor,
    SPINClassifier,
    SPINImageClassifier,
    SPINRegressor,
    TableClassifier,
    TableImputer,
    TablePredictor,
    TableRegressor,
)
from .models.npt import NPT, NPTConfig
from .models.spin import SPIN, SPINConfig
from .training.config import TrainConfig

__version__ = "0.1.0"

__all__ = [
    "NPT",
    "ConfigError",
    "DataValidationError",
    "ModelFileError",
    "NPTClassifier",
    "NPTConfig",
    "NPTImageClassifier",
    "NPTRegressor",
    "SPIN",
    "SPINClassifier",
    "SPINConfig",
    "SPINImageClassifier",
    "SPINRegressor",
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
