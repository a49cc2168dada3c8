"""The papers' tabular datasets: ``semiparam.datasets.load("boston")``, ``list_datasets()``.

See :mod:`semiparam.data.datasets` for the column kinds, file formats and where data are found.
"""

from .data.datasets import (
    Dataset,
    DatasetError,
    DatasetInfo,
    Split,
    data_dir,
    dataset_info,
    list_datasets,
    load,
    register_dataset,
)

__all__ = [
    "Dataset",
    "DatasetError",
    "DatasetInfo",
    "Split",
    "data_dir",
    "dataset_info",
    "list_datasets",
    "load",
    "register_dataset",
]
