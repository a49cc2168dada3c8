"""The papers' tabular datasets: ``semiparam.datasets.load("boston")``, ``list_datasets()``; and the
image readers: ``load_mnist()``, ``read_idx(path)``, ``load_image_arrays(path)``,
``images_from_dataset(torchvision_dataset)``.

See :mod:`semiparam.data.datasets` for the column kinds, file formats and where data are found, and
:mod:`semiparam.data.images` for the image formats.
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
from .data.images import images_from_dataset, load_image_arrays, load_mnist, read_idx

__all__ = [
    "Dataset",
    "DatasetError",
    "DatasetInfo",
    "Split",
    "data_dir",
    "dataset_info",
    "images_from_dataset",
    "list_datasets",
    "load",
    "load_image_arrays",
    "load_mnist",
    "read_idx",
    "register_dataset",
]
