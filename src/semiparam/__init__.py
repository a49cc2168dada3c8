"""semiparam: deep learning models that predict by attending over a whole dataset.

The public names load on first use (PEP 562), so ``import semiparam`` and the command line's
``--help`` do not pay for PyTorch and scikit-learn until a model is asked for."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "ConfigError": "._config",
    "ModelFileError": "._io",
    "DataValidationError": ".data.table",
    "TableEncoder": ".data.table",
    "TableSchema": ".data.table",
    "infer_schema": ".data.table",
    "NPTClassifier": ".estimators",
    "NPTImageClassifier": ".estimators",
    "NPTRegressor": ".estimators",
    "SPINClassifier": ".estimators",
    "SPINImageClassifier": ".estimators",
    "SPINRegressor": ".estimators",
    "TableClassifier": ".estimators",
    "TableImputer": ".estimators",
    "TablePredictor": ".estimators",
    "TableRegressor": ".estimators",
    "NPT": ".models.npt",
    "NPTConfig": ".models.npt",
    "SPIN": ".models.spin",
    "SPINConfig": ".models.spin",
    "TrainConfig": ".training.config",
}

__all__ = [
    "ConfigError",
    "DataValidationError",
    "ModelFileError",
    "NPT",
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'semiparam' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # the names as type checkers and IDEs see them
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
