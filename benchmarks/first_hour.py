#!/usr/bin/env python
"""What a new user waits for (issue "A user's first hour"): how long ``semiparam --help`` and
``semiparam fit --help`` take to answer, and how close a fit with a ``time_budget`` ends to its
budget.

    python benchmarks/first_hour.py

Start-up: each command is run ``--repeats`` times as a fresh process (after one warm-up run, so
the file cache is warm as on a user's second call); the median and the slowest are reported. Time
budget: the default ``NPTClassifier`` and ``NPTRegressor`` (three members) fitted with each budget
on a development table, 2 threads, in a fresh process each, whole ``fit`` timed; the goal is to end
no later than 10% of the budget or half a second after it. Writes ``results/first_hour.md`` and
``.json``. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

import devsuite as ds
import harness as h

COMMANDS = (["--help"], ["fit", "--help"], ["--version"])
BUDGETS = (2.0, 5.0, 15.0)
BUDGET_TABLES = ("breast_cancer", "concrete")


def startup(repeats: int) -> list[dict[str, Any]]:
    rows = []
    for args in COMMANDS:
        command = [sys.executable, "-m", "semiparam", *args]
        subprocess.run(command, capture_output=True, check=True)  # warm the file cache
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times.append(time.perf_counter() - start)
        name = "semiparam " + " ".join(args)
        rows.append({"command": name, "median_s": statistics.median(times), "max_s": max(times)})
    return rows


def budget_cell(table: str, budget: float) -> dict[str, Any]:
    """A default fit with ``time_budget=budget``, timed whole (a harness cell: a fresh process)."""
    X_tr, _, y_tr, _ = ds.split_table(table, 0)
    est = ds.make_model("npt", ds.TABLES[table].task, ds.split_seed(table, 0), {"time_budget": budget})
    start = time.perf_counter()
    est.fit(X_tr, y_tr)
    seconds = time.perf_counter() - start
    steps = [m.n_steps for m in est.history_.members]
    return {"table": table, "budget_s": budget, "fit_s": seconds, "over_s": seconds - budget, "steps": steps}


def render(startup_rows: list[dict[str, Any]], budget_rows: list[dict[str, Any]]) -> list[str]:
    def within(row: dict[str, Any]) -> str:
        return "yes" if row["over_s"] <= max(0.1 * row["budget_s"], 0.5) else "no"

    return [
        "## Start-up of the command line (fresh process each, after one warm-up)",
        "",
        *h.md_table(
            ["command", "median s", "slowest s"],
            [[f"`{r['command']}`", f"{r['median_s']:.3f}", f"{r['max_s']:.3f}"] for r in startup_rows],
        ),
        "",
        "## Default NPT fits with a time budget (whole fit timed, 2 threads)",
        "",
        "Goal: a budget is a limit: the whole fit ends no later than 10% of the budget or half a second "
        "after it (whichever is more). 'over s' is negative where the fit ended early.",
        "",
        *h.md_table(
            ["table", "budget s", "fit s", "over s", "within goal", "steps per member"],
            [
                [
                    r["table"],
                    f"{r['budget_s']:g}",
                    f"{r['fit_s']:.2f}",
                    f"{r['over_s']:+.2f}",
                    within(r),
                    r["steps"],
                ]
                if r["ok"]
                else [r["table"], f"{r['budget']:g}", r["error"], None, None, None]
                for r in budget_rows
            ],
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    startup_rows = startup(args.repeats)
    budget_rows = []
    for table in BUDGET_TABLES:
        for budget in BUDGETS:
            cell = {"table": table, "budget": budget}
            budget_rows.append({**cell, **h.run_cell("first_hour:budget_cell", cell, threads=ds.N_THREADS)})
            print(budget_rows[-1], flush=True)
    data = {"startup": startup_rows, "budgets": budget_rows}
    title = "A user's first hour: start-up and time budgets"
    print(h.write_report(h.RESULTS / "first_hour", title, render(startup_rows, budget_rows), data))


if __name__ == "__main__":
    main()
