"""The benchmarks' harness: records keyed on settings and source, resume, subprocess cells, reports."""

from __future__ import annotations

import json

import harness as h
import pytest


@pytest.fixture
def cell_module(tmp_path, monkeypatch):
    """A cell module beside the harness, removed afterwards."""
    path = h.BENCHMARKS / "_test_harness_cell.py"
    path.write_text(
        "import time\n"
        "def double(x, fail=False):\n"
        "    if fail:\n"
        "        raise ValueError('no good x')\n"
        "    return {'y': 2 * x}\n"
        "def sleep(seconds):\n"
        "    time.sleep(seconds)\n"
        "    return {}\n"
    )
    yield "_test_harness_cell"
    path.unlink()


def test_records_resume_and_key_on_settings_and_source(tmp_path, monkeypatch):
    calls = []

    def compute(settings):
        calls.append(dict(settings))
        return {"y": settings["x"] + 1}

    path = tmp_path / "r.jsonl"
    records = h.Records(path)
    assert records.run({"x": 1}, compute)["y"] == 2
    assert records.run({"x": 1}, compute)["y"] == 2  # reused, not recomputed
    assert len(calls) == 1
    reread = h.Records(path)  # a new process resumes from the file
    assert reread.run({"x": 1}, compute)["y"] == 2 and len(calls) == 1
    assert reread.run({"x": 2}, compute)["y"] == 3 and len(calls) == 2
    # other source code: code-dependent records go stale, code-independent ones stay current
    reread.add({"x": 9}, {"y": 0}, code_dependent=False)
    monkeypatch.setattr(h, "code", lambda: {"commit": "c", "src": "other", "dirty": False})
    later = h.Records(path)
    assert later.get({"x": 1}) is None
    assert later.get({"x": 9}, code_dependent=False)["y"] == 0
    assert [r["settings"] for r in later.current()] == [{"x": 9}]


def test_failed_record_is_kept_unless_retried(tmp_path):
    records = h.Records(tmp_path / "r.jsonl")
    records.run({"x": 1}, lambda s: {"ok": False, "error": "boom"})
    assert records.run({"x": 1}, lambda s: {"y": 1})["ok"] is False
    assert records.run({"x": 1}, lambda s: {"y": 1}, retry_errors=True)["y"] == 1


def test_run_cell_result_failure_and_timeout(cell_module):
    ok = h.run_cell(f"{cell_module}:double", {"x": 4})
    assert ok["ok"] and ok["y"] == 8 and ok["peak_rss_mb"] > 0 and ok["cell_seconds"] > 0
    bad = h.run_cell(f"{cell_module}:double", {"x": 4, "fail": True})
    assert not bad["ok"] and "no good x" in bad["error"]
    slow = h.run_cell(f"{cell_module}:sleep", {"seconds": 30}, timeout=2)
    assert not slow["ok"] and slow["timed_out"]


def test_report_names_command_commit_and_machine(tmp_path):
    records = h.Records(tmp_path / "r.jsonl")
    rec = records.add({"x": 1}, {"y": 1.234567})
    md = h.write_report(
        tmp_path / "rep", "A title", h.md_table(["x", "y"], [[1, rec["y"]], [None, "n/a"]]), {"rows": 1},
        command="python benchmarks/x.py --flag", records=[rec],
    )  # fmt: skip
    text = md.read_text()
    assert text.startswith("# A title\n")
    assert "`python benchmarks/x.py --flag`" in text and h.describe_machine() in text
    assert "| 1 | 1.235 |" in text and "| - | n/a |" in text
    data = json.loads((tmp_path / "rep.json").read_text())
    assert data["data"] == {"rows": 1} and data["command"] == "python benchmarks/x.py --flag"
    assert data["src"] == h.code()["src"]
