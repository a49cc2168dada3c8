#!/usr/bin/env python3
"""Set up a virtual environment and run the demo or the tests, on a fresh machine with only Python.

    python3 scripts/run.py demo            # NPT + SPIN vs gradient boosting on breast cancer (a few minutes)
    python3 scripts/run.py test            # the default test suite (pytest -m 'not slow')
    python3 scripts/run.py test -m slow    # extra pytest arguments are passed through

The CPU build of PyTorch is installed first with an exact pin (an unpinned ``torch`` would pull a
multi-GB GPU build); the package itself only asks for a range.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("SEMIPARAM_VENV", ROOT / ".venv"))
TORCH_PIN = os.environ.get("SEMIPARAM_TORCH", "torch==2.13.0")


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def ensure_env(extras: str) -> Path:
    py = venv_python()
    if not py.exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    have_torch = subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode == 0
    if not have_torch:
        run([str(py), "-m", "pip", "install", "-q", TORCH_PIN])
    run([str(py), "-m", "pip", "install", "-q", "-e", f".[{extras}]"])
    return py


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("demo", "test"):
        print(__doc__)
        return 2
    if argv[0] == "demo":
        py = ensure_env("parquet")
        run([str(py), "-m", "semiparam.cli.main", "demo", *argv[1:]])
    else:
        py = ensure_env("test")
        run([str(py), "-m", "pytest", "-q", "-n", "2", *argv[1:]])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except subprocess.CalledProcessError as err:
        sys.exit(err.returncode)
