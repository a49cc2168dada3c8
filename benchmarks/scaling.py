"""NPT vs SPIN as the training set grows: memory and time per training step, predict latency.

    python benchmarks/scaling.py                      # n = 1k ... 64k, about 15-20 min on 2 cores
    python benchmarks/scaling.py --sizes 1000,4000 --steps 2 --out /tmp/scaling
    python benchmarks/scaling.py --plot-only          # redraw the plot from the JSON

For each n and each model a fresh Python process (so that the RSS high-water mark belongs to that
size alone) loads Protein (UCI, 45,730 rows x 9 features + RMSD; ``semiparam.datasets``), builds
the model at matched widths, and runs training steps on **one batch of all n rows** (the paper's
"context size"): one warm-up step, then ``--steps`` timed ones, each timed in wall seconds and
in CPU seconds of the process (the plot shows CPU seconds: the machine is shared, and wall time
mostly measures the other jobs). It then encodes the n rows as prediction context and times
predicting 1,024 query rows (batches of 256, best of 5). Beyond 45,730 rows the table is padded
with synthetic rows of the same width: real rows resampled with Gaussian jitter (0.05 standard
deviations per continuous cell), recorded as ``n_synthetic``.

Matched widths: e = 16 per attribute, 4 heads, 2 attention-between-datapoint blocks each
(NPT: 4 blocks = ABD, ABA, ABD, ABA; SPIN: 2 layers of XABA -> XABD -> ABLA, h = 10 inducing
points, f = 5 latent attributes, as the paper's Protein run). Both use LAMB + Lookahead through the
same ``Trainer``; each model's CPU training preset for masking.

Memory is the process's peak resident set size (``ru_maxrss``), which includes the Python/torch
baseline (reported separately as ``baseline_rss_gib``, measured before the model is built). Each
worker runs under an address-space cap (``--mem-cap-gib``): the machine is shared, and a model that
would need more fails with an out-of-memory result instead of taking the machine down. A size that
runs past ``--timeout`` seconds is recorded as ``timeout``, with the steps it finished before the
limit (warm-up included); once a model fails at some n, larger n are recorded as ``skipped``.

NPT predictions here attend to *all* n context rows (the estimators cap NPT's context at
``max_context_rows`` = 8192 by sampling); SPIN predicts from its h inducing points whatever n is.

Writes ``<out>/scaling.json``, ``<out>/scaling.png`` (log-log) and ``<out>/scaling.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = (1000, 2000, 4000, 8000, 16000, 32000, 64000)
N_QUERIES = 1024  # predicted in batches of 256, the best of 5 repeats
QUERY_BATCH = 256
MODEL_OPTIONS: dict[str, dict[str, Any]] = {
    "npt": {"d_embedding": 16, "n_heads": 4, "n_blocks": 4},
    "spin": {
        "d_embedding": 16,
        "n_heads": 4,
        "n_layers": 2,
        "n_inducing_points": 10,
        "n_latent_attributes": 5,
    },
}


# -- worker: one (model, n) in a fresh process -----------------------------------------------------
def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _table(n: int, seed: int) -> tuple[Any, int]:
    """Protein as an encoded table of n rows (real rows first, then jittered resamples)."""
    import numpy as np

    from semiparam import TableEncoder, infer_schema
    from semiparam.datasets import load

    data = load("protein")
    frame = data.frame
    schema = infer_schema(frame, targets=(data.target,))
    encoded = TableEncoder.fit(frame, schema).transform(frame)
    values, missing = encoded.values, encoded.missing
    rng = np.random.default_rng(seed)
    n_real = min(n, len(values))
    if n <= len(values):
        keep = np.sort(rng.choice(len(values), n, replace=False))
        return (values[keep], missing[keep], schema), 0
    extra = n - len(values)
    picks = rng.integers(0, len(values), extra)
    synthetic = values[picks] + rng.normal(0.0, 0.05, (extra, values.shape[1])).astype(values.dtype)
    values = np.concatenate([values, synthetic])
    missing = np.concatenate([missing, missing[picks]])
    return (values, missing, schema), n - n_real


def worker(model_name: str, n: int, steps: int, seed: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from semiparam import TrainConfig
    from semiparam.bench import Batch, Trainer, get_model, mask_for_inference

    (values_np, missing_np, schema), n_synthetic = _table(n, seed)
    result: dict[str, Any] = {"model": model_name, "n": n, "n_synthetic": n_synthetic}
    result["baseline_rss_gib"] = _rss_gib()
    torch.manual_seed(seed)
    config_cls, module_cls = get_model(model_name)
    config = config_cls.from_dict(MODEL_OPTIONS[model_name], base=config_cls.preset("cpu"))
    layout = schema.layout()
    module = module_cls(config, layout)
    result["n_params"] = sum(p.numel() for p in module.parameters())
    train_config = TrainConfig.preset("cpu", model=model_name).replace(max_steps=steps + 1, batch_size=n)
    target = torch.zeros(layout.n_columns, dtype=torch.bool)
    target[schema.target_indices] = True
    trainer = Trainer(module, layout, target, train_config, generator=torch.Generator().manual_seed(seed))
    values = torch.as_tensor(values_np)
    missing = torch.as_tensor(missing_np)
    batch = Batch(values, missing, torch.ones(n, dtype=torch.bool))

    wall: list[float] = []
    cpu: list[float] = []
    for step in range(steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        stats = trainer.train_step(batch, step)
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        if step > 0:  # step 0 warms up allocator and kernels
            wall.append(seconds)
            cpu.append(cpu_seconds)
        result["loss"] = stats["loss"]
        # a partial record, so that a run cut off by the driver's timeout still reports its steps
        partial = {"partial": True, "step": step, "seconds": seconds, "cpu_seconds": cpu_seconds}
        print(json.dumps({**partial, "peak_rss_gib": _rss_gib()}), flush=True)
    result["step_seconds"] = wall
    result["step_cpu_seconds"] = cpu
    result["step_seconds_median"] = sorted(wall)[len(wall) // 2]
    result["step_cpu_seconds_median"] = sorted(cpu)[len(cpu) // 2]
    result["step_cpu_seconds_min"] = min(cpu)
    result["peak_rss_gib"] = _rss_gib()  # training high-water mark, before prediction
    result["step_rss_gib"] = result["peak_rss_gib"] - result["baseline_rss_gib"]

    # prediction: encode all n rows as context, then 256 query rows with the target hidden
    module.eval()
    hide = target if train_config.p_target >= 1.0 else torch.zeros_like(target)
    ctx_values, ctx_hidden = mask_for_inference(values, missing, hide_columns=hide)
    with torch.no_grad():
        t0 = time.perf_counter()
        state = module.encode_context(ctx_values, ctx_hidden)
        result["encode_seconds"] = time.perf_counter() - t0
        q_values, q_hidden = mask_for_inference(values[:N_QUERIES], missing[:N_QUERIES], hide_columns=target)
        timings = []
        for _ in range(5):
            t0 = time.perf_counter()
            for start in range(0, N_QUERIES, QUERY_BATCH):
                stop = start + QUERY_BATCH
                module.forward_queries(q_values[start:stop], q_hidden[start:stop], state)
            timings.append(time.perf_counter() - t0)
    result["predict_ms_per_row"] = 1000 * min(timings) / N_QUERIES
    result["peak_rss_with_predict_gib"] = _rss_gib()
    result["status"] = "ok"
    return result


# -- driver ----------------------------------------------------------------------------------------
def run_one(model: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        model,
        "--n",
        str(n),
        "--steps",
        str(args.steps),
        "--seed",
        str(args.seed),
        "--mem-cap-gib",
        str(args.mem_cap_gib),
    ]
    return run_worker(cmd, {"model": model, "n": n}, args.timeout, args.mem_cap_gib)


def run_worker(
    cmd: list[str], identity: dict[str, Any], timeout: float, mem_cap_gib: float
) -> dict[str, Any]:
    """Run a worker process that prints ``{"partial": ...}`` lines per step and its result as the
    last JSON line; return that result, or a ``timeout`` (with the steps finished before the
    limit), ``oom`` or ``error`` record carrying ``identity``."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        row: dict[str, Any] = {
            **identity,
            "status": "timeout",
            "limit_seconds": timeout,
            "wall_seconds": time.perf_counter() - start,
        }
        text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        done = [json.loads(line) for line in text.splitlines() if line.startswith('{"partial"')]
        if done:  # the steps that finished before the limit, warm-up step included
            row["finished_steps_seconds"] = [d["seconds"] for d in done]
            row["finished_steps_cpu_seconds"] = [d["cpu_seconds"] for d in done]
            row["peak_rss_gib_so_far"] = done[-1]["peak_rss_gib"]
        return row
    wall = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{") and '"partial"' not in line]
    if proc.returncode == 0 and lines:
        out = json.loads(lines[-1])
        out["wall_seconds"] = wall
        return out
    err = proc.stderr.strip().splitlines()
    tail = err[-1] if err else f"exit code {proc.returncode}"
    oom = any(s in proc.stderr for s in ("can't allocate memory", "MemoryError", "out of memory"))
    return {
        **identity,
        "status": "oom" if oom else "error",
        "error": tail[-300:],
        "mem_cap_gib": mem_cap_gib,
        "wall_seconds": wall,
    }


def machine() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "threads_per_worker": 1,
    }
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = names[0] if names else None
        with open("/proc/meminfo") as f:
            info["mem_total_gib"] = int(f.readline().split()[1]) / 2**20
        info["load_average_at_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def _metric(row: dict[str, Any], key: str) -> float:
    if key == "step_cpu_seconds_min":  # the least-disturbed timed step on a shared machine
        return float(min(row["step_cpu_seconds"]))
    return float(row[key])


def fitted_exponent(ns: list[int], values: list[float], min_n: int = 4000) -> float:
    """Least-squares slope of log(value) on log(n) over the sizes >= ``min_n`` (all when fewer than
    two): 1 = linear growth, 2 = quadratic, 0 = flat."""
    import numpy as np

    pairs = [(n, v) for n, v in zip(ns, values) if n >= min_n] or list(zip(ns, values))
    if len(pairs) < 2:
        return float("nan")
    x, y = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
    return float(np.polyfit(x, y, 1)[0])


def exponents(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Fitted growth exponents in n (sizes >= 4k) of each metric, per model."""
    out: dict[str, dict[str, float]] = {}
    for model in sorted({r["model"] for r in results}):
        ok = [r for r in results if r["model"] == model and r["status"] == "ok"]
        if ok:
            out[model] = {
                key: fitted_exponent([r["n"] for r in ok], [_metric(r, key) for r in ok])
                for key in ("step_rss_gib", "step_cpu_seconds_min", "predict_ms_per_row")
            }
    return out


def write_markdown(report: dict[str, Any], path: Path) -> None:
    """The results as a readable table (one row per n)."""
    rows = report["results"]
    sizes = sorted({r["n"] for r in rows})

    def cell(model: str, n: int) -> list[str]:
        r = next((x for x in rows if x["model"] == model and x["n"] == n), None)
        if r is None:
            return ["–"] * 4
        if r["status"] != "ok":
            done = r.get("finished_steps_cpu_seconds")
            note = f" (1st step {done[0]:.0f} CPU s)" if done else ""
            return [r["status"] + note, "", "", ""]
        return [
            f"{min(r['step_cpu_seconds']):.2f}",
            f"{min(r['step_seconds']):.2f}",
            f"{r['step_rss_gib']:.2f}",
            f"{r['predict_ms_per_row']:.3f}",
        ]

    m = report["machine"]
    lines = [
        "# NPT vs SPIN: cost of a training step and of prediction as the training set grows",
        "",
        f"Protein rows (synthetic jittered rows beyond 45,730), one batch of all n rows per step, e = 16, "
        f"4 heads, 2 datapoint-attention blocks each; SPIN h = 10, f = 5. Machine: {m.get('cpu')}, "
        f"{m.get('cpu_count')} cores shared with other jobs (load average {m.get('load_average_at_start')}), "
        f"{m.get('mem_total_gib', 0):.1f} GiB RAM, torch {m.get('torch')}, 1 thread per run. "
        f"Command: `{report['command']}` ({report.get('total_seconds', 0):.0f} s).",
        "",
        "Per model: CPU s/step (best timed step) | wall s/step | step memory GiB (peak RSS - baseline "
        f"{rows[0].get('baseline_rss_gib', 0):.2f} GiB) | predict ms per query row.",
        "",
        "| n | SPIN CPU s | SPIN wall s | SPIN GiB | SPIN ms/row "
        "| NPT CPU s | NPT wall s | NPT GiB | NPT ms/row |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        lines.append(f"| {n:,} | " + " | ".join(cell("spin", n) + cell("npt", n)) + " |")
    fits = report.get("fitted_exponents", {})
    lines += ["", "Fitted growth exponents over n >= 4,000 (1 = linear, 2 = quadratic, 0 = flat):", ""]
    for model, values in fits.items():
        lines.append(
            f"- {model.upper()}: step memory n^{values['step_rss_gib']:.2f}, step time "
            f"n^{values['step_cpu_seconds_min']:.2f}, predict latency n^{values['predict_ms_per_row']:.2f}"
        )
    path.write_text("\n".join(lines) + "\n")


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("step_rss_gib", "training-step memory: peak RSS - baseline (GiB)"),
        ("step_cpu_seconds_min", "CPU seconds per training step (best timed step)"),
        ("predict_ms_per_row", "predict latency (ms per query row)"),
    ]
    colors = {"npt": "tab:red", "spin": "tab:blue"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for ax, (key, title) in zip(axes, panels):
        for model in ("npt", "spin"):
            rows = [r for r in results if r["model"] == model]
            ok = [r for r in rows if r["status"] == "ok"]
            if ok:
                xs = [r["n"] for r in ok]
                ys = [_metric(r, key) for r in ok]
                slope = fitted_exponent(xs, ys)
                ax.plot(xs, ys, "o-", color=colors[model], label=f"{model.upper()} (fitted n^{slope:.2f})")
                # reference slopes through the first point: linear (and quadratic for NPT time)
                x0, y0 = xs[0], ys[0]
                grid = [x0, max(r["n"] for r in results)]
                ax.plot(grid, [y0 * g / x0 for g in grid], ":", color=colors[model], alpha=0.5)
            failed = [r for r in rows if r["status"] in ("timeout", "oom", "error")]
            for r in failed:
                if key == "step_cpu_seconds_min" and r.get("finished_steps_cpu_seconds"):
                    # a run cut off by the time limit: its first (warm-up) step, as an open marker
                    y = r["finished_steps_cpu_seconds"][0]
                    ax.plot(
                        [r["n"]],
                        [y],
                        "o",
                        mfc="none",
                        color=colors[model],
                        label=f"{model.upper()} warm-up step",
                    )
                ax.axvline(r["n"], color=colors[model], alpha=0.25, linestyle="--")
                ax.annotate(
                    f"{model.upper()} {r['status']}",
                    (r["n"], 0.02),
                    xycoords=("data", "axes fraction"),
                    rotation=90,
                    fontsize=7,
                    color=colors[model],
                    va="bottom",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training rows n (one batch)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes:
        ax.legend(title="dotted: slope 1; fit over n >= 4k", fontsize=7, title_fontsize=7, loc="upper left")
    fig.suptitle("NPT vs SPIN on Protein (9 features + target, e=16, CPU, 1 thread)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--models", default="spin,npt")
    parser.add_argument(
        "--steps", type=int, default=2, help="timed training steps per size (after 1 warm-up)"
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per (model, n) worker")
    parser.add_argument("--mem-cap-gib", type=float, default=14.0, help="address-space cap per worker")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--plot-only", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        cap = int(args.mem_cap_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        print(json.dumps(worker(args.worker, args.n, args.steps, args.seed)), flush=True)
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "scaling.json"
    if args.plot_only:
        report = json.loads(json_path.read_text())
        report["fitted_exponents"] = exponents(report["results"])
        json_path.write_text(json.dumps(report, indent=2))
        plot(report["results"], out / "scaling.png")
        write_markdown(report, out / "scaling.md")
        print(json.dumps(report["fitted_exponents"], indent=1))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    models = [m.strip() for m in args.models.split(",")]
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "settings": {
            "steps": args.steps,
            "timeout_seconds": args.timeout,
            "mem_cap_gib": args.mem_cap_gib,
            "queries": N_QUERIES,
            "model_options": MODEL_OPTIONS,
            "seed": args.seed,
        },
        "results": [],
    }
    failed_at: dict[str, int] = {}
    started = time.perf_counter()
    for n in sizes:
        for model in models:
            if model in failed_at:
                row = {
                    "model": model,
                    "n": n,
                    "status": "skipped",
                    "reason": f"failed at n={failed_at[model]}",
                }
            else:
                row = run_one(model, n, args)
                if row["status"] != "ok":
                    failed_at[model] = n
            report["results"].append(row)
            summary = {
                k: row.get(k)
                for k in ("status", "step_cpu_seconds_min", "step_rss_gib", "predict_ms_per_row")
            }
            print(f"[{time.perf_counter() - started:7.1f}s] {model:4s} n={n:6d} {summary}", flush=True)
            json_path.write_text(json.dumps(report, indent=2))
    report["total_seconds"] = time.perf_counter() - started
    report["fitted_exponents"] = exponents(report["results"])
    json_path.write_text(json.dumps(report, indent=2))
    plot(report["results"], out / "scaling.png")
    write_markdown(report, out / "scaling.md")
    print(f"wrote {json_path}, {out / 'scaling.png'} and {out / 'scaling.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
