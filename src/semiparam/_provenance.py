"""Where a measured number came from: a description of the machine (:func:`machine_info`) and
the version of the code that ran (:func:`code_hash`). Shared by the benchmarks
(``semiparam.bench.measure`` re-exports it beside the timing probe of :mod:`semiparam._measure`)
and by ``semiparam tune``'s summary; it imports nothing of the package.
"""

from __future__ import annotations

import ast
import hashlib
import os
import platform
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any


def machine_info() -> dict[str, Any]:
    """CPU, cores, memory, load and library versions: the context every timing needs."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        match = re.search(r"model name\s*:\s*(.+)", cpuinfo)
        info["cpu"] = match.group(1).strip() if match else platform.processor()
    except OSError:
        info["cpu"] = platform.processor()
    try:
        meminfo = Path("/proc/meminfo").read_text()
        match = re.search(r"MemTotal:\s+(\d+)", meminfo)
        info["memory_gb"] = round(int(match.group(1)) / 2**20, 1) if match else None
    except OSError:
        info["memory_gb"] = None
    try:
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    versions = {}
    for module in ("semiparam", "torch", "numpy", "pandas", "sklearn", "xgboost", "lightgbm", "catboost"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001 - an optional package may be absent or broken
            versions[module] = None
    info["versions"] = versions
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def _source_files(root: Path) -> list[Path]:
    return [
        p
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    ]


def _code_only(source: bytes) -> bytes:
    """A Python file's syntax tree without docstrings: comments, docstrings and formatting do not
    change what runs, so editing them does not make a measured result stale."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False).encode()


# Modules that only present results (report text, the papers' reference numbers, command-line
# front ends): editing them changes no measured number, so they are left out of ``code_hash``.
PRESENTATION_ONLY = ("bench/report.py", "bench/paper.py", "bench/cli.py", "cli/")
# what only the image classifiers run (``import semiparam`` brings them in, no table fit calls
# them): left out of the table models' hash, so that their changes leave table results current
IMAGE_ONLY = ("estimators/image.py", "data/images.py")

# The code of the table models: what ``import semiparam`` brings in (estimators, NPT, SPIN, their
# layers, training and table encoding), found by following its imports. Results of the table models
# are keyed on this part only, so a change to genomics, the neural processes or the benchmarks'
# own modules leaves them current.
TABLE_MODELS = ("semiparam",)


def _module_file(root: Path, parts: list[str]) -> Path | None:
    """The file of module ``semiparam.<parts>`` under the package folder ``root``, if there is one."""
    path = root.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def _imported_modules(root: Path, path: Path) -> Iterator[list[str]]:
    """The semiparam modules that ``path`` imports anywhere in it (functions included), as name
    parts below the package; for ``from M import x`` both M and, when it is a module, M.x."""
    rel = path.relative_to(root).with_suffix("").parts
    package = list(rel[:-1])  # the package a relative import starts from
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "semiparam":
                module = node.module.split(".")[1:]
            else:
                continue
            yield module
            for alias in node.names:
                yield module + [alias.name]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "semiparam":
                    yield alias.name.split(".")[1:]


def import_closure(root: Path, modules: tuple[str, ...]) -> list[Path]:
    """The files of ``modules`` (dotted names, e.g. ``"semiparam.genomics"``) under the package
    folder ``root`` and of every semiparam module they import, directly or not, sorted. The
    ``__init__`` of each package on the way is included too (Python runs it on import), but what it
    imports is followed only when the package itself is imported: ``semiparam/__init__.py`` brings
    in the table models, which compute nothing for ``semiparam.genomics``."""
    todo = []
    for name in modules:
        parts = name.split(".")
        if parts[0] != "semiparam" or (found := _module_file(root, parts[1:])) is None:
            raise ValueError(f"no semiparam module {name!r} under {root}")
        todo.append(found)
    followed: set[Path] = set()
    parents: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in followed:
            continue
        followed.add(path)
        parts = list(path.relative_to(root).with_suffix("").parts)
        parents.update(f for i in range(len(parts)) if (f := _module_file(root, parts[:i])) is not None)
        todo.extend(f for m in _imported_modules(root, path) if (f := _module_file(root, m)) is not None)
    return sorted(followed | parents)


def code_hash(
    root: Path | None = None,
    *,
    exclude: tuple[str, ...] = PRESENTATION_ONLY + IMAGE_ONLY,
    modules: tuple[str, ...] | None = TABLE_MODELS,
) -> str:
    """sha256 (16 hex digits) of the code that ``modules`` run (default: the table models; None:
    every file of the package) in the semiparam package at ``root`` (default: the imported one):
    each file's path and, for Python files, its syntax tree without docstrings (other files: their
    bytes); caches and the files under ``exclude`` (paths relative to the package, a trailing "/"
    for a folder; default: the presentation-only and image-only modules) left out. Benchmark
    results keyed on it go stale when code that could change a number changes. The syntax tree is
    the running Python's (3.12 added fields to function and class nodes), so the same files hash
    differently under another Python version: a result made elsewhere is matched by its commit."""
    if root is None:
        return _package_code_hash(exclude, modules)
    files = _source_files(root) if modules is None else import_closure(root, modules)
    h = hashlib.sha256()
    for path in files:
        rel = path.relative_to(root).as_posix()
        if any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in exclude):
            continue
        data = path.read_bytes()
        h.update(rel.encode())
        h.update(b"\0")
        h.update(_code_only(data) if path.suffix == ".py" else data)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _package_root() -> Path:
    return Path(__file__).resolve().parent  # this module lies at the top of the package


@lru_cache(maxsize=8)
def _package_code_hash(exclude: tuple[str, ...], modules: tuple[str, ...] | None) -> str:
    return code_hash(_package_root(), exclude=exclude, modules=modules)


def library_version(module: str) -> str | None:
    """``module.__version__``, or None when it cannot be imported."""
    try:
        return str(__import__(module).__version__)
    except Exception:  # noqa: BLE001 - an optional package may be absent or broken
        return None
