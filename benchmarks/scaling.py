"""NPT vs SPIN as the training set grows: memory and time per training step, predict latency.

    python benchmarks/scaling.py                      # n = 1k ... 64k
    python benchmarks/scaling.py --sizes 1000,4000 --steps 2 --out /tmp/scaling
    python benchmarks/scaling.py --report-only        # the report and plot from the records

The cell of ``step_cost.py`` at the ``matched`` widths (e = 16, 4 heads, 2 datapoint-attention
blocks each: NPT 4 blocks ABD, ABA, ABD, ABA; SPIN 2 layers of XABA -> XABD -> ABLA, h = 10, f = 5,
as the paper's Protein run), the default attention, 1 thread, a fresh process per (model, n): one
batch of all n Protein rows (the paper's "context size"; jittered resamples past 45,730 rows), a
warm-up step, then ``--steps`` timed ones in wall and CPU seconds (the plot shows the best CPU
seconds: on a shared machine wall time mostly measures the other jobs); then the n rows are encoded
as prediction context and predicting its first 1,024 rows is timed (batches of 256, best of 5). NPT
predictions here attend to *all* n context rows (the estimators cap NPT's context by sampling);
SPIN predicts from its h inducing points whatever n is. Memory: peak RSS minus the baseline before
the model was built, under an address-space cap (``--mem-cap-gib``). Once a model fails at some n
(out of memory, past ``--timeout``), its larger sizes are not run.

Records: ``<out>/scaling.jsonl``; report: ``<out>/scaling.{md,json,png}`` (a table per n, the fitted
growth exponents, and the three measures against n, log-log).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import harness as h
import step_cost

MEASURES = {  # key: (plot title, value of a row)
    "step_rss_gib": ("training-step memory: peak RSS - baseline (GiB)", lambda r: r["step_rss_gib"]),
    "step_cpu_seconds_min": (
        "CPU seconds per training step (best timed step)",
        lambda r: min(r["step_cpu_seconds"]),
    ),
    "predict_ms_per_row": ("predict latency (ms per query row)", lambda r: r["predict_ms_per_row"]),
}


def exponents(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Fitted growth exponents in n (sizes >= 4k) of each measure, per model."""
    out: dict[str, dict[str, float]] = {}
    for model in sorted({r["model"] for r in rows}):
        ok = [r for r in rows if r["model"] == model and r["status"] == "ok"]
        if ok:
            out[model] = {
                key: step_cost.fitted_exponent([r["n"] for r in ok], [value(r) for r in ok])
                for key, (_, value) in MEASURES.items()
            }
    return out


def report_lines(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    def cell(model: str, n: int) -> list[str]:
        r = next((x for x in rows if (x["model"], x["n"]) == (model, n)), None)
        if r is None:
            return ["–", "", "", ""]
        if r["status"] != "ok":
            return [r["status"], "", "", ""]
        return [
            f"{min(r['step_cpu_seconds']):.2f}",
            f"{min(r['step_seconds']):.2f}",
            f"{r['step_rss_gib']:.2f}",
            f"{r['predict_ms_per_row']:.3f}",
        ]

    widths = step_cost.WIDTHS["matched"]
    lines = [
        "Protein rows (synthetic jittered rows beyond 45,730), one batch of all n rows per step, widths "
        f"NPT `{widths['npt']}`, SPIN `{widths['spin']}`; 1 thread per run, memory cap "
        f"{args.mem_cap_gib} GiB and {args.timeout:.0f} s per run.",
        "",
        "Per model: CPU s/step (best timed step) | wall s/step (best) | step memory GiB (peak RSS - "
        f"baseline {rows[0].get('baseline_rss_gib', float('nan')):.2f} GiB) | predict ms per query row.",
        "",
    ]
    columns = ["n", *(f"{m} {c}" for m in ("SPIN", "NPT") for c in ("CPU s", "wall s", "GiB", "ms/row"))]
    lines += h.md_table(
        columns, [[f"{n:,}", *cell("spin", n), *cell("npt", n)] for n in sorted({r["n"] for r in rows})]
    )
    lines += ["", "Fitted growth exponents over n >= 4,000 (1 = linear, 2 = quadratic, 0 = flat):", ""]
    for model, fit in exponents(rows).items():
        lines.append(
            f"- {model.upper()}: step memory n^{fit['step_rss_gib']:.2f}, step time "
            f"n^{fit['step_cpu_seconds_min']:.2f}, predict latency n^{fit['predict_ms_per_row']:.2f}"
        )
    return lines


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"npt": "tab:red", "spin": "tab:blue"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for ax, (title, value) in zip(axes, MEASURES.values()):
        for model in ("npt", "spin"):
            ok = [r for r in rows if r["model"] == model and r["status"] == "ok"]
            if ok:
                xs, ys = [r["n"] for r in ok], [value(r) for r in ok]
                slope = step_cost.fitted_exponent(xs, ys)
                ax.plot(xs, ys, "o-", color=colors[model], label=f"{model.upper()} (fitted n^{slope:.2f})")
                grid = [xs[0], max(r["n"] for r in rows)]  # slope 1 through the first point
                ax.plot(grid, [ys[0] * g / xs[0] for g in grid], ":", color=colors[model], alpha=0.5)
            for r in (r for r in rows if r["model"] == model and r["status"] != "ok"):
                ax.axvline(r["n"], color=colors[model], alpha=0.25, linestyle="--")
                ax.annotate(
                    f"{model.upper()} {r['status']}", (r["n"], 0.02), xycoords=("data", "axes fraction"),
                    rotation=90, fontsize=7, color=colors[model], va="bottom",
                )  # fmt: skip
        ax.set(xscale="log", yscale="log", xlabel="training rows n (one batch)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(title="dotted: slope 1; fit over n >= 4k", fontsize=7, title_fontsize=7, loc="upper left")
    fig.suptitle("NPT vs SPIN on Protein (9 features + target, e=16, CPU, 1 thread)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=step_cost.SIZES)
    parser.add_argument("--models", default="spin,npt")
    parser.add_argument(
        "--steps", type=int, default=2, help="timed training steps per size (after 1 warm-up)"
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per (model, n) run")
    parser.add_argument("--mem-cap-gib", type=float, default=14.0, help="address-space cap per run")
    parser.add_argument("--out", type=Path, default=h.RESULTS)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--retry-errors", action="store_true", help="rerun failed runs")
    args = parser.parse_args()
    records = h.Records(args.out / "scaling.jsonl")
    rows = []
    for model in args.models.split(","):
        grid = [
            {"model": model, "backend": "sdpa", "n": int(n), "widths": "matched", "steps": args.steps,
             "threads": 1, "device": "cpu", "mem_cap_gib": args.mem_cap_gib, "rate": False, "predict": True}
            for n in args.sizes.split(",")
        ]  # fmt: skip
        rows += step_cost.series(records, grid, args.timeout, not args.report_only, args.retry_errors)
    if rows:
        title = "NPT vs SPIN: cost of a training step and of prediction as the training set grows"
        data = {"rows": rows, "fitted_exponents": exponents(rows)}
        path = h.write_report(args.out / "scaling", title, report_lines(rows, args), data, records=rows)
        plot(rows, args.out / "scaling.png")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
