"""The saved-model directory: one format for every kind of model semiparam saves.

A saved model is a directory holding safetensors files (weights, context rows, a reference panel),
perhaps directories of other saved models (an ensemble's members, an imputer's window models), and
one JSON metadata file::

    {"format_version": 2, "kind": "table", "library_version": "0.1.0", ...the kind's own state...,
     "sha256": {"model.safetensors": "...", ...}}

Kinds (:data:`KINDS`): ``table`` (one fitted table model, :class:`~.learner.TableLearner`),
``ensemble`` (its members in ``member_<k>/``), ``prior-fitted`` (``init="pretrained"``),
``neural-process`` and ``genotype-imputer``. The metadata file is ``semiparam.json``, but for the
last two, which kept the names they had before this format (``neural_process.json``,
``imputer.json``).

:func:`save_model_dir` writes a directory atomically (aside, renamed into place) with the version,
kind, library version and the SHA-256 of every tensor file; :func:`read_model_dir` reads one back:
a missing metadata file raises :class:`FileNotFoundError`, a corrupt one, a tensor file that fails
its checksum, a kind not asked for, or a format newer than this library's
:class:`~semiparam._io.ModelFileError` naming the file. A file of an older format goes through
:data:`UPGRADES`, the one chain of upgrades (format ``n`` -> ``n + 1``, applied in order), so that
every loader sees the current layout. Configs saved under a key renamed since
(``semiparam._config.ALIASES``) are read through :meth:`SavedModel.config`, the one place where a
saved file's config is built: old spellings load silently.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file, save_file

from .._config import FrozenConfig
from .._io import ModelFileError, atomic_directory, file_sha256, read_json, read_tensors, verify_checksums
from .._provenance import library_version as module_version

FORMAT_VERSION = 3  # the model-directory format this version writes; older ones are upgraded
META_FILE = "semiparam.json"
WEIGHTS_FILE = "model.safetensors"

C = TypeVar("C", bound=FrozenConfig)


@dataclass(frozen=True)
class Kind:
    """A kind of saved model: its metadata file, what the user is told it is, and the JSON indent
    (None: one line, for the imputer's long per-site lists)."""

    meta_file: str = META_FILE
    description: str = "saved semiparam model"
    indent: int | None = 2


KINDS: dict[str, Kind] = {
    "table": Kind(),
    "ensemble": Kind(),
    "prior-fitted": Kind(),
    "neural-process": Kind("neural_process.json", "saved neural process"),
    "genotype-imputer": Kind("imputer.json", "saved GenotypeImputer", indent=None),
}


def library_version() -> str:
    """This semiparam's version, ``semiparam.__version__`` (written into every saved model)."""
    return module_version("semiparam") or "unknown"


def json_default(value: Any) -> Any:
    """``json.dumps``'s ``default``: numpy scalars and arrays as plain numbers and lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot store {type(value).__name__} in JSON")


def module_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's weights as a safetensors file stores them (on the CPU, contiguous)."""
    return {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}


def save_tensors(path: Path, tensors: Mapping[str, Any]) -> None:
    """One safetensors file: torch tensors, or numpy arrays (all of one kind)."""
    if tensors and all(isinstance(v, np.ndarray) for v in tensors.values()):
        save_numpy(dict(tensors), str(path))
    else:
        save_file(dict(tensors), str(path))


# -- writing ------------------------------------------------------------------------------------


def save_model_dir(
    path: str | Path,
    kind: str,
    meta: Mapping[str, Any],
    *,
    tensors: Mapping[str, Mapping[str, Any]] | None = None,
    parts: Mapping[str, Callable[[Path], Any]] | None = None,
    overwrite: bool = False,
) -> Path:
    """Save a model of ``kind`` to the directory ``path``: ``parts`` first (``{name: save}``, each
    ``save(path / name)`` saving a model of its own there: an ensemble's members), then each of
    ``tensors`` (``{file name: {tensor name: tensor}}``) as a safetensors file, then the metadata
    file: ``meta`` with the format version, the kind, the library version and the SHA-256 of each
    tensor file. All of it is written into a hidden sibling of ``path``, renamed to ``path`` when
    complete (``semiparam._io.atomic_directory``): an existing ``path`` raises
    :class:`FileExistsError` unless ``overwrite``, and survives any failed save."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of saved model {kind!r}; known: {sorted(KINDS)}")
    reserved = sorted({"format_version", "kind", "library_version", "sha256"} & set(meta))
    if reserved:
        raise ValueError(f"{reserved} are written by the model-directory format, not by the model")
    path = Path(path)
    with atomic_directory(path, overwrite=overwrite) as tmp:
        for name, save in (parts or {}).items():
            save(tmp / name)
        for name, values in (tensors or {}).items():
            save_tensors(tmp / name, values)
        full = {
            "format_version": FORMAT_VERSION,
            "kind": kind,
            "library_version": library_version(),
            **meta,
            # checked on load: a tensor file changed after saving is refused, not run
            "sha256": {name: file_sha256(tmp / name) for name in (tensors or {})},
        }
        text = json.dumps(full, indent=KINDS[kind].indent, default=json_default)
        (tmp / KINDS[kind].meta_file).write_text(text, encoding="utf-8")
    return path


# -- the upgrade chain ------------------------------------------------------------------------------

Upgrade = Callable[[dict[str, Any], str], dict[str, Any]]

# format n -> n + 1: ``UPGRADES[n](meta, meta_file_name)`` returns the metadata in format n + 1's
# layout. Reading applies them in order from the file's version to FORMAT_VERSION; a change to the
# layout adds one here (and bumps FORMAT_VERSION) instead of a branch in every loader.
UPGRADES: dict[int, Upgrade] = {}


def upgrade(version: int) -> Callable[[Upgrade], Upgrade]:
    """Register the upgrade of format ``version`` to ``version + 1``."""

    def register(fn: Upgrade) -> Upgrade:
        if version in UPGRADES:
            raise ValueError(f"format {version} already has an upgrade ({UPGRADES[version].__name__})")
        UPGRADES[version] = fn
        return fn

    return register


_LAYOUTS_V1 = {None: "table", "ensemble-1": "ensemble", "prior-fitted-1": "prior-fitted"}


@upgrade(1)
def _kind_from_layout(meta: dict[str, Any], meta_file: str) -> dict[str, Any]:
    """Format 1 (each kind saved on its own): the kind was the metadata file's name or
    ``semiparam.json``'s ``layout``; no library version; checksums only of a single table model."""
    out = dict(meta)
    layout = out.pop("layout", None)
    if meta_file == KINDS["neural-process"].meta_file:
        out["kind"] = "neural-process"
    elif meta_file == KINDS["genotype-imputer"].meta_file:
        out["kind"] = "genotype-imputer"
    elif layout in _LAYOUTS_V1:
        out["kind"] = _LAYOUTS_V1[layout]
    else:
        raise ModelFileError(f"{meta_file}: unknown model layout {layout!r}")
    out.setdefault("library_version", None)  # written before it was recorded
    out.setdefault("sha256", None)  # None: nothing to check
    return out


@upgrade(2)
def _executor_from_backend(meta: dict[str, Any], meta_file: str) -> dict[str, Any]:
    """Format 2: the estimators' ``executor`` parameter (where independent fits run, ``"serial"``
    or ``"ray"``) was called ``backend`` in the saved parameters (``estimator.params``) of the
    table, ensemble and prior-fitted kinds; "backend" now names only the attention backends."""
    estimator = meta.get("estimator")
    if not isinstance(estimator, dict) or not isinstance(estimator.get("params"), dict):
        return dict(meta)
    params = dict(estimator["params"])
    if "backend" in params:
        params.setdefault("executor", params.pop("backend"))
    return {**meta, "estimator": {**estimator, "params": params}}


def upgraded(meta: dict[str, Any], meta_file: str | Path) -> dict[str, Any]:
    """``meta`` (a metadata file's content) in the current format: a format newer than this
    library's, or one that is not a version at all, raises :class:`ModelFileError`."""
    meta_file = Path(meta_file)
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < min(UPGRADES, default=1):
        raise ModelFileError(f"{meta_file}: unsupported model format {version!r}")
    if version > FORMAT_VERSION:
        written = meta.get("library_version")
        by = f"semiparam {written}" if written else "a newer semiparam"
        raise ModelFileError(
            f"{meta_file}: model format {version} (written by {by}) is newer than the newest this "
            f"semiparam {library_version()} reads ({FORMAT_VERSION}); upgrade semiparam to load it"
        )
    meta = dict(meta)
    while version < FORMAT_VERSION:
        step = UPGRADES.get(version)
        if step is None:  # pragma: no cover - every version below the current one has its upgrade
            raise ModelFileError(f"{meta_file}: no upgrade from model format {version}")
        meta = step(meta, meta_file.name)
        version += 1
        meta["format_version"] = version
    return meta


# -- reading ------------------------------------------------------------------------------------------


@dataclass
class SavedModel:
    """A saved model directory read back (:func:`read_model_dir`): its metadata, upgraded to the
    current format, and the files beside it, checked against their checksums."""

    path: Path
    kind: str
    meta: dict[str, Any]
    meta_file: Path
    version_read: int = field(default=FORMAT_VERSION)  # the format on disk, before upgrading

    def tensors(self, name: str, *, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """The torch tensors of safetensors file ``name``."""
        return read_tensors(self.path / name, load_file, device=str(device))

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        """The numpy arrays of safetensors file ``name``."""
        return read_tensors(self.path / name, load_numpy)

    def load_weights(
        self, module: torch.nn.Module, *, device: str | torch.device = "cpu", name: str = WEIGHTS_FILE
    ) -> torch.nn.Module:
        """``module`` with the weights of ``name`` loaded; weights that do not fit the module
        (missing, extra or mis-shaped tensors) raise :class:`ModelFileError`."""
        try:
            module.load_state_dict(self.tensors(name, device=device))
        except RuntimeError as err:
            raise ModelFileError(f"{self.path / name}: weights do not match {self.meta_file}: {err}") from err
        return module

    def config(self, cls: type[C], key: str, *, missing: Mapping[str, Any] | None = None) -> C:
        """The config of class ``cls`` stored under ``key``: saved under keys since renamed
        (``ALIASES``), it loads silently; ``missing``: the values of options the file predates
        (what the model did before they existed)."""
        values = self.meta.get(key)
        if not isinstance(values, dict):
            raise ModelFileError(f"{self.meta_file}: {key!r} is not a mapping of {cls.__name__} settings")
        return cls.from_dict({**(missing or {}), **values}, warn=False)


def read_model_dir(path: str | Path, *kinds: str) -> SavedModel:
    """Read the saved model directory ``path``, which must hold a model of one of ``kinds``:
    its metadata (upgraded through :data:`UPGRADES`) and the checksums of its files.

    Raises :class:`FileNotFoundError` when ``path`` holds no metadata file of those kinds, and
    :class:`ModelFileError` (naming the file) when it is corrupt, of a newer format, of another
    kind, or a file fails its checksum."""
    if not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"kinds must be some of {sorted(KINDS)}, got {list(kinds)}")
    path = Path(path)
    names = list(dict.fromkeys(KINDS[k].meta_file for k in kinds))
    meta_file = next((path / n for n in names if (path / n).is_file()), None)
    if meta_file is None:
        what = " or ".join(dict.fromkeys(KINDS[k].description for k in kinds))
        raise FileNotFoundError(f"{path} is not a {what} (no {' or '.join(names)})")
    raw = read_json(meta_file)
    if not isinstance(raw, dict):
        raise ModelFileError(f"{meta_file}: expected a JSON object, got {type(raw).__name__}")
    meta = upgraded(raw, meta_file)  # a copy: ``raw`` keeps the version on disk
    version_read = int(raw["format_version"])
    kind = meta.get("kind")
    if kind not in kinds:
        raise ModelFileError(f"{meta_file}: holds a model of kind {kind!r}, not {' or '.join(kinds)}")
    checksums = meta.pop("sha256", None)
    if checksums is None and version_read >= 2:
        raise ModelFileError(f"{meta_file}: the checksums of the model's files are missing; it is corrupt")
    verify_checksums(path, checksums)
    return SavedModel(path, kind, meta, meta_file, version_read)


__all__ = [
    "FORMAT_VERSION",
    "KINDS",
    "UPGRADES",
    "SavedModel",
    "json_default",
    "module_tensors",
    "read_model_dir",
    "save_model_dir",
    "upgraded",
]
