"""The benchmarks' one harness: a record store keyed on a cell's settings and the code it ran,
cells run in a subprocess with a time limit and their own peak memory, and reports rendered from
JSON that name the command, the commit and the machine that made them.

A benchmark script is its measurement and its report layout; everything else is here::

    import harness as h

    records = h.Records(h.RESULTS / "my_bench" / "records.jsonl")
    for settings in grid:
        rec = records.run(settings, lambda s: h.run_cell("my_bench:cell", s, timeout=600))
    h.write_report(h.RESULTS / "my_bench" / "my_bench", "Title", lines, data)

**Keys.** A record's key hashes its settings and, unless the cell does not run semiparam's code
(a baseline: put its library's version into the settings instead), the source tree of
``src/semiparam`` at the commit: ``git``'s tree hash of ``src/`` at HEAD, plus a hash of the
uncommitted diff under ``src/`` when there is one. So a commit that only adds results keeps every
record current, any change to the package's code makes the records of its models stale, and a
stopped run resumes where it stopped. There is no re-keying: when the code changes, rerun what
matters; each record keeps the commit it was made at, and each report names it.

**Cells.** :func:`run_cell` runs ``module:function`` (a module beside this file) in a fresh Python
process with the settings as keyword arguments, a wall-clock limit, and the thread count set in its
environment; it returns the function's result with the cell's wall seconds, peak resident memory
(the process's high-water mark: its own, not the parent's) and, on a GPU, peak CUDA memory. A cell
that fails or runs out of time returns ``ok: false`` and why, and its record is kept (rerun it with
``retry_errors``).

Run ``python benchmarks/<script>.py`` from the repository root: Python puts ``benchmarks/`` on the
import path, so the scripts import this module by name.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from semiparam.bench.measure import machine_info
from semiparam.bench.measure import measure as measure  # the package's one probe, for the scripts

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"


# -- the code and the machine ------------------------------------------------------------------


def git(*args: str) -> str | None:
    """``git <args>`` in the repository, stripped; None when git fails or is absent."""
    try:
        res = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


@cache
def code() -> dict[str, Any]:
    """The code a record was made with: the commit, whether ``src/`` differs from it, and
    ``src``: the key part (the tree hash of ``src/`` at HEAD, plus the hash of the uncommitted
    diff under ``src/`` when there is one)."""
    commit = git("rev-parse", "HEAD")
    tree = git("rev-parse", "HEAD:src") or "no-git"
    diff = git("diff", "HEAD", "--binary", "--", "src") or ""
    untracked = git("ls-files", "--others", "--exclude-standard", "--", "src") or ""
    dirty = bool(diff or untracked)
    src = tree[:16]
    if dirty:
        h = hashlib.sha256(diff.encode())
        for rel in sorted(untracked.split()):
            h.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes())
        src += "+" + h.hexdigest()[:8]
    return {"commit": commit, "src": src, "dirty": dirty}


@cache
def machine() -> dict[str, Any]:
    """CPU, cores, memory, GPU and library versions (``semiparam.bench.measure.machine_info``, plus
    the cores this process may use and the GPU): the context every timing needs."""
    info = machine_info()
    info["cores"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def describe_machine(m: Mapping[str, Any] | None = None) -> str:
    m = machine() if m is None else m
    text = f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gb')} GiB"
    return text + (f", {m['gpu']}" if m.get("gpu") else "")


def jsonable(value: Any) -> Any:
    """A JSON-safe, deterministic copy of a value (numpy scalars become numbers, mappings are
    sorted, other objects become their repr)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    if isinstance(value, type):
        return value.__name__
    return repr(value)


# -- records -----------------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (none when it does not exist yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Records:
    """One JSONL file of records, each ``{"key", "settings", "code", "time", "ok", ...result}``.
    The last record of a key wins."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._by_key: dict[str, dict[str, Any]] = {}
        for rec in read_lines(self.path):
            self._by_key[rec["key"]] = rec

    @staticmethod
    def key(settings: Mapping[str, Any], code_dependent: bool = True) -> str:
        payload = {"settings": jsonable(dict(settings))}
        if code_dependent:
            payload["src"] = code()["src"]
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]

    def get(self, settings: Mapping[str, Any], code_dependent: bool = True) -> dict[str, Any] | None:
        return self._by_key.get(self.key(settings, code_dependent))

    def add(
        self, settings: Mapping[str, Any], result: Mapping[str, Any], code_dependent: bool = True
    ) -> dict[str, Any]:
        """Append one record (``result`` without ``ok`` counts as a success) and return it."""
        rec = {
            "key": self.key(settings, code_dependent),
            "settings": jsonable(dict(settings)),
            "code": {**code(), "keyed": code_dependent},
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "ok": True,
            **jsonable(dict(result)),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        self._by_key[rec["key"]] = rec
        return rec

    def run(
        self,
        settings: Mapping[str, Any],
        compute: Callable[[Mapping[str, Any]], Mapping[str, Any]],
        code_dependent: bool = True,
        retry_errors: bool = False,
    ) -> dict[str, Any]:
        """The current record of ``settings``, computed (``compute(settings)``) and stored when
        there is none, or when it failed and ``retry_errors``."""
        rec = self.get(settings, code_dependent)
        if rec is not None and (rec["ok"] or not retry_errors):
            return rec
        return self.add(settings, compute(settings), code_dependent)

    def current(self) -> list[dict[str, Any]]:
        """The records the current code would reuse: code-independent ones and those of this
        source tree."""
        src = code()["src"]
        return [r for r in self._by_key.values() if not r["code"]["keyed"] or r["code"]["src"] == src]

    def all(self) -> list[dict[str, Any]]:
        return list(self._by_key.values())


# -- measuring ---------------------------------------------------------------------------------


def run_cell(
    target: str,
    settings: Mapping[str, Any],
    *,
    timeout: float = 3600,
    threads: int | None = 2,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``target`` (``"module:function"``, a module under ``benchmarks/``) as
    ``function(**settings)`` in a fresh process. The result (a JSON-able mapping) comes back with
    ``ok``, ``cell_seconds``, ``peak_rss_mb`` and, when CUDA was used, ``peak_cuda_mb``; a failure
    or a timeout gives ``ok: false`` and ``error``."""
    child_env = dict(os.environ, **(env or {}))
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            child_env[var] = str(threads)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(BENCHMARKS / "harness.py"), "--cell", target, str(out)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, input=json.dumps(jsonable(dict(settings))), capture_output=True, text=True,
                timeout=timeout, cwd=ROOT, env=child_env,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"timed out after {timeout:.0f} s", "timed_out": True}
        seconds = time.perf_counter() - start
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
            return {"ok": False, "error": f"exit {proc.returncode}: " + " | ".join(tail)[-1500:]}
        result = json.loads(out.read_text())
    return {"ok": True, "cell_seconds": seconds, **result}


def _child(target: str, out: str) -> None:
    import importlib

    module, function = target.split(":")
    settings = json.loads(sys.stdin.read() or "{}")
    result = dict(getattr(importlib.import_module(module), function)(**settings))
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        result["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    Path(out).write_text(json.dumps(jsonable(result)))


# -- reports -----------------------------------------------------------------------------------


def command_line(argv: Sequence[str] | None = None) -> str:
    """How this script was run, as a command to paste (the script's path from the repository)."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve()
    name = script.relative_to(ROOT).as_posix() if script.is_relative_to(ROOT) else argv[0]
    return shlex.join(["python", name, *argv[1:]])


def fmt(value: Any, digits: int = 4) -> str:
    """A table cell: numbers to ``digits`` significant digits, missing values as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"


def md_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """Markdown table lines."""
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return lines


def write_report(
    stem: Path,
    title: str,
    lines: Sequence[str],
    data: Any,
    *,
    command: str | None = None,
    records: Iterable[Mapping[str, Any]] = (),
) -> Path:
    """``<stem>.md`` (the title, a header naming the command, the commit and the machine, then
    ``lines``) and ``<stem>.json`` (the same header and ``data``). The commits of ``records``, when
    given, are named too: a report may gather records made at several commits of the same source."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    command = command or command_line()
    commits = sorted({r["code"]["commit"][:10] for r in records if r.get("code", {}).get("commit")})
    made = code()
    header = {
        "title": title,
        "command": command,
        "commit": made["commit"],
        "src": made["src"],
        "records_commits": commits,
        "machine": machine(),
        "generated": time.strftime("%Y-%m-%d %H:%M"),
    }
    stem.with_suffix(".json").write_text(json.dumps({**header, "data": jsonable(data)}, indent=1) + "\n")
    source = f"commit `{(made['commit'] or 'unknown')[:10]}`"
    source += " with uncommitted changes" if made["dirty"] else ""
    if commits:
        source += f"; records made at {', '.join(f'`{c}`' for c in commits)}"
    head = [
        f"# {title}",
        "",
        f"Generated by `{command}` ({source}) on {describe_machine()}, {header['generated']}. "
        f"Data: `{stem.with_suffix('.json').name}`.",
        "",
    ]
    stem.with_suffix(".md").write_text("\n".join([*head, *lines]).rstrip() + "\n")
    return stem.with_suffix(".md")


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--cell":
    _child(sys.argv[2], sys.argv[3])
