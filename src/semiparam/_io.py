"""Saving without losing anything, loading with errors that name the file.

:func:`atomic_directory` and :func:`atomic_file` write into a hidden sibling of the destination and
rename it into place only when writing finished, so an interrupted or failed save never leaves a
half-written model, and never destroys the one that was there. :func:`read_json` and
:func:`read_tensors` turn a corrupt or truncated saved file into a :class:`ModelFileError` naming
the file; :func:`available_device` maps a saved device that this machine lacks to the CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class ModelFileError(ValueError):
    """A saved model file is corrupt, truncated or inconsistent; the message names the file."""


def _empty_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _exists_message(path: Path) -> str:
    return f"{path} already exists; pass overwrite=True (--force on the command line) to replace it"


def _sibling(path: Path, tag: str) -> Path:
    """A hidden, unused name beside ``path`` that keeps its suffixes (``.csv.gz`` stays readable)."""
    return path.parent / f".{tag}-{secrets.token_hex(4)}-{path.name}"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _move_into_place(tmp: Path, path: Path, overwrite: bool) -> None:
    if not (path.exists() or path.is_symlink()):
        os.rename(tmp, path)
        return
    if not (overwrite or _empty_dir(path)):
        raise FileExistsError(_exists_message(path))
    old = _sibling(path, "old")
    os.rename(path, old)  # the old copy survives until the new one is in place
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    _remove(old)


@contextmanager
def atomic_directory(path: str | Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield a new, empty hidden directory beside ``path`` to write into; when the block finishes
    without an exception, rename it to ``path`` (an existing ``path`` is replaced only when
    ``overwrite``, or when it is an empty directory, which holds nothing to lose; it is renamed
    aside, the new one renamed in, then the old one deleted). On any exception the temporary
    directory is removed and ``path`` is left as it was.

    Raises :class:`FileExistsError` before anything is written when ``path`` exists (and is not
    an empty directory) and ``overwrite`` is False."""
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not (overwrite or _empty_dir(path)):
        raise FileExistsError(_exists_message(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = _sibling(path, "tmp")
        try:
            tmp.mkdir()  # plain mkdir: permissions follow the umask, like the final directory's
            break
        except FileExistsError:  # pragma: no cover - 32 random bits collided
            continue
    try:
        yield tmp
        _move_into_place(tmp, path, overwrite)
    except BaseException:
        _remove(tmp)
        raise


@contextmanager
def atomic_file(path: str | Path, *, overwrite: bool) -> Iterator[Path]:
    """Like :func:`atomic_directory` for one file: yield a hidden sibling path (same suffixes) to
    write; on success it replaces ``path`` (only when ``overwrite``), on failure it is removed."""
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise FileExistsError(_exists_message(path))
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        if not overwrite and path.exists():
            raise FileExistsError(_exists_message(path))
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def read_json(path: str | Path) -> Any:
    """Parse a saved JSON file; a corrupt or truncated one raises :class:`ModelFileError`."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ModelFileError(
            f"{path}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
            "the file is corrupt or truncated, save the model again"
        ) from err
    except UnicodeDecodeError as err:
        raise ModelFileError(f"{path}: not a text file ({err.reason}); the file is corrupt") from err


def read_tensors(path: str | Path, loader: Callable[..., Any], **kwargs: Any) -> Any:
    """``loader(str(path), **kwargs)`` (a safetensors ``load_file``); a missing file raises
    :class:`FileNotFoundError`, a corrupt or truncated one :class:`ModelFileError`."""
    from safetensors import SafetensorError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; the saved model is incomplete")
    try:
        return loader(str(path), **kwargs)
    except SafetensorError as err:
        raise ModelFileError(f"{path}: corrupt or truncated weights file ({err})") from err


def available_device(saved: str) -> str:
    """``saved`` when this machine has that device, otherwise ``"cpu"``: a model saved on a GPU
    loads on a machine without one."""
    import torch

    try:
        dev = torch.device(saved)
    except (RuntimeError, TypeError):
        return "cpu"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return "cpu"
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            return "cuda"
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            return "cpu"
    elif dev.type != "cpu":
        backend = getattr(torch, dev.type, None)
        if backend is None or not getattr(backend, "is_available", lambda: False)():
            return "cpu"
    return str(dev)


def digest(*parts: Any, length: int | None = None) -> str:
    """The SHA-256 (hex, its first ``length`` digits when given) of ``parts`` in order, each as
    bytes: ``bytes`` as they are, ``str`` as UTF-8, numpy arrays by their bytes in C order, anything
    else as JSON with sorted keys (``default=str``). The one hash behind the library's fingerprints
    (training checkpoints, genotype-imputation runs, benchmark records): what a stored piece of
    work was made from, so that a resumed run reuses it only for the same inputs. Its values never
    change, so work stored by an earlier version still resumes."""
    h = hashlib.sha256()
    np = sys.modules.get("numpy")  # an array can only be one when numpy is loaded
    for part in parts:
        if isinstance(part, bytes):
            h.update(part)
        elif isinstance(part, str):
            h.update(part.encode())
        elif np is not None and isinstance(part, np.ndarray):
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
    text = h.hexdigest()
    return text if length is None else text[:length]


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_checksums(directory: str | Path, expected: dict[str, str] | None) -> None:
    """Raise :class:`ModelFileError` when a file of ``directory`` does not have the SHA-256 its
    metadata recorded at saving. ``None``: a model saved before checksums were stored."""
    if expected is None:
        return
    if not isinstance(expected, dict):
        raise ModelFileError(f"{directory}: the stored checksums are not a mapping; the metadata is corrupt")
    for name, digest in expected.items():
        path = Path(directory) / Path(str(name)).name
        if not path.exists():
            raise FileNotFoundError(f"{path}: missing from the saved model")
        if file_sha256(path) != digest:
            raise ModelFileError(
                f"{path}: fails its integrity check (SHA-256 differs from the one stored at saving); "
                "the file is corrupt or was changed"
            )


__all__ = [
    "ModelFileError",
    "atomic_directory",
    "atomic_file",
    "available_device",
    "digest",
    "file_sha256",
    "read_json",
    "read_tensors",
    "verify_checksums",
]
