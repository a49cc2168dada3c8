#!/usr/bin/env python
"""What an approximate attention backend costs in accuracy: NPT (and SPIN) trained with each
attention backend between datapoints on real tables of the development suite, beside the exact
default (``sdpa``), with the metric, fit seconds and peak memory of each (issue "Attention backends
and speed", item 5).

    python benchmarks/backend_accuracy.py                       # adult and diamonds, NPT, 4 backends
    python benchmarks/backend_accuracy.py --tables kick,wage --models npt,spin

Each cell is a development-suite cell (``devsuite.run_cell``: split 0, the model at its defaults
with only ``model_options.row_attention`` changed) run in its own process; its record goes to
``<out>/tabular_defaults.jsonl``, where the exact ``sdpa`` cells are those of
``tabular_defaults.py``, so a stopped run resumes and neither script reruns the other's cells. The
report is ``<out>/backend_accuracy.md`` (and ``.json``). Run it alone on the machine: fit seconds
are part of the comparison.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import devsuite as ds
import harness as h

BACKENDS = ("sdpa", "performer", "topk", "chunked")
DEFAULT_TABLES = ("adult", "diamonds")


def overrides_of(backend: str) -> dict[str, Any]:
    return {} if backend == "sdpa" else {"model_options": {"row_attention": backend}}


def measure(records: h.Records, table: str, model: str, backend: str, timeout: float) -> dict[str, Any]:
    """The record of one cell, run now when it has none (or only a failed one)."""
    settings, keyed = ds.cell_settings(table, model, 0, overrides_of(backend))

    def compute(s: dict[str, Any]) -> dict[str, Any]:
        print(f"[run] {table} {model} {backend}", flush=True)
        result = h.run_cell("devsuite:cell", s, timeout=timeout, threads=ds.N_THREADS)
        return {**result, "machine": h.describe_machine()}

    return records.run(settings, compute, keyed, retry_errors=True)


def row(table: str, model: str, backend: str, rec: dict[str, Any], exact: dict[str, Any] | None) -> list:
    if not rec["ok"]:
        return [table, model, backend, rec["error"][-200:], None, None, None, None, None]
    versus = exact is not None and exact["ok"] and backend != "sdpa"
    return [
        table, model, backend, rec["primary"], rec["score"],
        h.fmt(rec["score"] / exact["score"], 3) if versus else None, rec["fit_seconds"],
        h.fmt(rec["fit_seconds"] / exact["fit_seconds"], 3) if versus else None, rec.get("fit_peak_rss_mb"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default=",".join(DEFAULT_TABLES))
    parser.add_argument("--models", default="npt", help="npt and/or spin")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--out", type=Path, default=h.RESULTS)
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one cell may take")
    args = parser.parse_args(argv)
    picked = {}
    for name, allowed in (("tables", ds.TABLES), ("models", ds.FAMILIES), ("backends", BACKENDS)):
        picked[name] = [x.strip() for x in getattr(args, name).split(",") if x.strip()]
        if unknown := [x for x in picked[name] if x not in allowed]:
            raise SystemExit(f"unknown {name} {unknown}; choose from {list(allowed)}")
    records = h.Records(args.out / "tabular_defaults.jsonl")
    rows, used = [], []
    for table in picked["tables"]:
        for model in picked["models"]:
            exact = (
                measure(records, table, model, "sdpa", args.timeout) if "sdpa" in picked["backends"] else None
            )
            for backend in picked["backends"]:
                rec = exact if backend == "sdpa" else measure(records, table, model, backend, args.timeout)
                rows.append(row(table, model, backend, rec, exact))
                used.append(rec)
    lines = [
        "Each model at its defaults with only `model_options.row_attention` changed (split 0); lower is "
        "better (RMSE for regression, log loss for classification); fit seconds and peak resident memory "
        f"of the fit on {ds.N_THREADS} threads. Records made on: "
        + "; ".join(sorted({str(r.get("machine")) for r in used if r["ok"]}))
        + ".",
        "",
        *h.md_table(
            [
                "table",
                "model",
                "backend",
                "metric",
                "score",
                "score / exact",
                "fit s",
                "fit s / exact",
                "peak RSS MB",
            ],
            rows,
        ),  # fmt: skip
    ]
    title = "Attention backends: accuracy against the exact default"
    command = h.command_line(None if argv is None else ["benchmarks/backend_accuracy.py", *argv])
    print(h.write_report(args.out / "backend_accuracy", title, lines, used, command=command, records=used))
    return 0


if __name__ == "__main__":
    sys.exit(main())
