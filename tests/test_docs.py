"""The documentation site (``mkdocs.yml``, ``docs/``) builds with no warning (``--strict``), its
API reference generated from the docstrings; the README names only pages that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_documentation_builds_without_warnings(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "tables" / "index.html").read_text()
    assert "Out of the box on a laptop CPU" in api  # TrainConfig.cpu's docstring, rendered


def test_the_readme_names_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`(docs/[\w/.-]+\.md)`", readme))
    assert named, "the README links no guide page"
    assert not [p for p in named if not (ROOT / p).exists()]
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert not [p for p in pages if p not in nav], "a page of docs/ is missing from mkdocs.yml's nav"
    assert len(readme.splitlines()) <= 150


def test_reports_named_in_the_source_and_the_pages_exist() -> None:
    """A docstring or page that points at a benchmark report points at one the benchmarks still
    produce (deleted reports are named as retired, in the git history)."""
    named = set()
    for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "src").rglob("*.py")]:
        for found in re.findall(r"benchmarks/results/[\w./-]*[\w/]", path.read_text()):
            named.add((path.relative_to(ROOT).as_posix(), found))
    assert named
    missing = [
        (where, p) for where, p in named if not (ROOT / p).exists() and not (ROOT / f"{p}.md").exists()
    ]
    assert not missing
