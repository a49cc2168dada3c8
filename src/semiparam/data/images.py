"""Images in: readers for the files users have (IDX as MNIST ships, NumPy ``.npy``/``.npz``), an
adapter for torchvision-style datasets, and the checks every image estimator runs on its input.

Nothing here downloads: every reader takes a path. ``load_mnist`` finds the project's copy of the
MNIST test set (``SEMIPARAM_DATA_DIR``, see :func:`semiparam.data.dataset_files.data_dir`) or reads
the standard IDX files of a directory the user names.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .dataset_files import DatasetError, data_dir
from .table import DataValidationError

__all__ = [
    "check_images",
    "check_labels",
    "images_from_dataset",
    "load_image_arrays",
    "load_mnist",
    "read_idx",
]

# IDX type codes (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT"), big-endian data
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """The array of an IDX file (``.gz`` or not), in its own dtype and shape."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such IDX file")
    opener = gzip.open if file.suffix == ".gz" else open
    with opener(file, "rb") as fh:
        data = fh.read()
    if len(data) < 4:
        raise DatasetError(f"{file} is empty or truncated (no IDX header)")
    zero, code, n_dims = struct.unpack(">HBB", data[:4])
    if zero != 0 or code not in _IDX_TYPES or n_dims < 1:
        raise DatasetError(f"{file} is not an IDX file (header type 0x{code:02x}, {n_dims} dimensions)")
    header = 4 + 4 * n_dims
    if len(data) < header:
        raise DatasetError(f"{file} is truncated inside its IDX header")
    shape = struct.unpack(">" + "I" * n_dims, data[4:header])
    dtype = np.dtype(_IDX_TYPES[code])
    count = int(np.prod(shape))
    if len(data) - header != count * dtype.itemsize:
        raise DatasetError(
            f"{file} declares shape {shape} ({count} values) but holds "
            f"{(len(data) - header) // dtype.itemsize}"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def load_mnist(split: str = "test", path: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(images (n, 28, 28) uint8, labels (n,) int64)`` of an MNIST split from its IDX files
    (gzipped or not) in directory ``path``; by default the project's data directory's ``mnist/``,
    which holds the test set only (10,000 images)."""
    if split not in _MNIST_FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    folder = Path(path) if path is not None else data_dir() / "mnist"
    if folder.is_file():
        raise DatasetError(f"give the directory that holds the MNIST IDX files, not the file {folder}")
    found = []
    for stem in _MNIST_FILES[split]:
        candidates = [folder / (stem + ext) for ext in (".gz", "")]
        candidates += [folder / (stem.replace("-idx", ".idx") + ext) for ext in (".gz", "")]
        file = next((c for c in candidates if c.is_file()), None)
        if file is None:
            raise FileNotFoundError(
                f"MNIST {split} file {stem}[.gz] not found in {folder}; download the IDX files from "
                "the MNIST page and pass their directory"
            )
        found.append(file)
    images, labels = read_idx(found[0]), read_idx(found[1])
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DatasetError(
            f"MNIST {split}: images {images.shape} and labels {labels.shape} do not pair up "
            "(expected (n, 28, 28) and (n,))"
        )
    return images, labels.astype(np.int64)


def load_image_arrays(
    path: str | Path, *, images_key: str | None = None, labels_key: str | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Images (and labels) saved with NumPy: a ``.npy`` file of images (labels None), or a
    ``.npz`` archive whose arrays are named ``images_key``/``labels_key`` (default: the first of
    ``images``, ``x``, ``X``, ``x_train`` and of ``labels``, ``y``, ``targets``, ``y_train``)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such file")
    if file.suffix == ".npy":
        return np.load(file, allow_pickle=False), None
    if file.suffix != ".npz":
        raise DatasetError(f"{file}: expected a .npy or .npz file")
    with np.load(file, allow_pickle=False) as archive:
        names = list(archive.files)
        image_name = _pick(names, images_key, ("images", "x", "X", "x_train"), file, "images")
        label_name = _pick(names, labels_key, ("labels", "y", "targets", "y_train"), file, None)
        return archive[image_name], (archive[label_name] if label_name is not None else None)


def _pick(names: list[str], given: str | None, usual: Sequence[str], file: Path, need: str | None) -> Any:
    if given is not None:
        if given not in names:
            raise DatasetError(f"{file} has no array {given!r}; it holds {names}")
        return given
    for name in usual:
        if name in names:
            return name
    if need is not None:
        raise DatasetError(f"{file}: which array holds the {need}? It holds {names}; name it")
    return None


def images_from_dataset(dataset: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(images, labels)`` arrays from a torchvision-style dataset (``torchvision.datasets.MNIST``,
    ``CIFAR10``, ``ImageFolder``, any map-style dataset of ``(image, label)`` pairs). Images may be
    PIL images, tensors or arrays; a torchvision ``transform`` set on the dataset is applied, as
    iterating it would. Datasets that hold ``data`` and ``targets`` arrays and no transform are
    read without iterating. torchvision itself is not needed here (``pip install
    'semiparam[images]'`` for its datasets)."""
    data = getattr(dataset, "data", None)
    targets = getattr(dataset, "targets", None)
    plain = getattr(dataset, "transform", None) is None and getattr(dataset, "target_transform", None) is None
    if plain and data is not None and targets is not None and not isinstance(data, list):
        images = np.asarray(data.numpy() if hasattr(data, "numpy") else data)
        labels = np.asarray(targets.numpy() if hasattr(targets, "numpy") else targets)
        if images.ndim == 4 and images.shape[-1] in (1, 3, 4) and images.shape[1] not in (1, 3, 4):
            images = np.moveaxis(images, -1, 1)  # CIFAR-10 keeps (n, H, W, C)
        return images, labels
    try:
        n = len(dataset)
    except TypeError as err:
        raise TypeError("images_from_dataset needs a map-style dataset (with len and indexing)") from err
    if n == 0:
        raise DataValidationError("the dataset is empty")
    images_list, labels_list = [], []
    for k in range(n):
        item = dataset[k]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise DataValidationError(f"item {k} of the dataset is not an (image, label) pair")
        image, label = item[0], item[1]
        array = np.asarray(image.numpy() if hasattr(image, "numpy") else image)
        if array.ndim == 3 and array.shape[-1] in (1, 3, 4) and not hasattr(image, "numpy"):
            array = np.moveaxis(array, -1, 0)  # a PIL image or HWC array -> (C, H, W)
        images_list.append(array)
        labels_list.append(label.item() if hasattr(label, "item") else label)
    return _stack(images_list), np.asarray(labels_list)


def _stack(images: Sequence[np.ndarray]) -> np.ndarray:
    shapes = {np.shape(a) for a in images}
    if len(shapes) > 1:
        raise DataValidationError(
            f"the images have different shapes ({sorted(shapes)[:4]}...); resize or pad them to one size"
        )
    return np.stack([np.asarray(a) for a in images])


def check_images(images: Any, *, what: str = "images") -> np.ndarray:
    """``images`` as a float32 array ``(n, C, H, W)``: uint8 pixels divided by 255, other numbers
    as given (NaN = a missing pixel). Accepts ``(n, H, W)`` (one channel), ``(n, C, H, W)`` and a
    list of same-shaped images; a clear error for ragged lists, other ranks, non-numeric or
    complex data, inf, and empty input."""
    if isinstance(images, (list, tuple)):
        if not images:
            raise DataValidationError(f"no {what} given")
        try:
            images = _stack(list(images))
        except ValueError as err:
            if isinstance(err, DataValidationError):
                raise
            raise DataValidationError(
                f"the {what} have different shapes; resize or pad them to one size"
            ) from err
    if hasattr(images, "numpy") and not isinstance(images, np.ndarray):  # a torch tensor
        images = images.detach().cpu().numpy()
    array = np.asarray(images)
    if array.dtype == object:
        raise DataValidationError(
            f"the {what} are ragged or hold non-numbers (an object array); give one (n, H, W) or "
            "(n, C, H, W) array of numbers"
        )
    if array.dtype.kind not in "biuf":
        raise DataValidationError(f"the {what} have dtype {array.dtype}; pixels must be real numbers")
    if array.ndim == 3:
        array = array[:, None]
    elif array.ndim != 4:
        raise DataValidationError(
            f"the {what} have shape {array.shape}; expected (n, H, W) or (n, C, H, W)"
            + (" (a flat table of pixels? reshape it to (n, H, W))" if array.ndim == 2 else "")
        )
    if array.shape[0] == 0:
        raise DataValidationError(f"no {what} given (an array of 0 images)")
    if min(array.shape[1:]) == 0:
        raise DataValidationError(f"the {what} have an empty dimension: shape {array.shape}")
    if array.shape[1] > 4 and array.shape[3] <= 4:
        raise DataValidationError(
            f"the {what} have shape {array.shape}, which looks like (n, H, W, C); "
            "give (n, C, H, W): np.moveaxis(images, -1, 1)"
        )
    if array.dtype == np.uint8:
        out = array.astype(np.float32) / np.float32(255.0)
    else:
        out = array.astype(np.float32)
    if np.isinf(out).any():
        raise DataValidationError(f"the {what} hold inf; use NaN for a missing pixel")
    return out


def check_labels(labels: Any, n_images: int) -> np.ndarray:
    """Class labels ``(n,)`` for ``n_images`` images: one per image, none missing."""
    if labels is None:
        raise ValueError("labels are required: fit(images, labels)")
    array = np.asarray(labels.numpy() if hasattr(labels, "numpy") else labels)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise DataValidationError(f"labels have shape {array.shape}; expected one label per image, (n,)")
    if len(array) != n_images:
        raise DataValidationError(f"{n_images} images but {len(array)} labels")
    if (
        array.dtype.kind == "f"
        and np.isnan(array).any()
        or array.dtype == object
        and any(v is None or (isinstance(v, float) and np.isnan(v)) for v in array)
    ):
        raise DataValidationError("labels contain missing values")
    return array
