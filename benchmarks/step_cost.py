"""Cost of one training step per model, attention backend and table size, against the machine's
matmul rate measured in the same process.

    python benchmarks/step_cost.py                                   # cpu widths, 1k-64k rows
    python benchmarks/step_cost.py --widths official --sizes 4096,8192 --models npt --backends sdpa
    python benchmarks/step_cost.py --device cuda --widths official --models npt --backends sdpa \
        --sizes 4096,16384 --steps 5 --timeout 120 --out /tmp/step    # on a GPU, under bf16 autocast
    python benchmarks/step_cost.py --report-only                     # the report from the records

Each (model, backend, n) runs in a fresh process (``harness.run_cell``: its peak memory is its own)
that builds the model with ``row_attention=backend`` (``sdpa+dropout``: the paper's attention dropout
0.1) at the ``--widths`` (``cpu``: each model's cpu preset; ``official``: the reference code's Protein
widths; ``matched``: ``scaling.py``'s) and trains on **one batch of n Protein rows** (jittered
resamples past 45,730): a warm-up step, then ``--steps`` timed ones. Recorded: wall and CPU seconds
per step; the step's FLOPs (``FlopCounterMode`` over one more step: matrix products and attention,
not element-wise work); the matmul rate probed before each step and after the last (fp32 on a CPU,
the autocast dtype on a GPU); each step's achieved fraction FLOPs / seconds / the mean rate around
it. Step memory: on a CPU peak RSS minus the baseline before the model was built, under an
address-space cap (``--mem-cap-gib``); on a GPU the most PyTorch allocated. After a failure (out of
memory, past ``--timeout``) a backend's larger sizes are not run.

Records: ``<out>/step_cost.jsonl``. Report: ``<out>/step_cost.{md,json,png}``: seconds, memory and
achieved fraction per n and backend; the largest n trained and the memory growth; the price of
attention dropout; seconds and memory against n (log-log).
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path
from typing import Any

import harness as h

SIZES = "1000,2000,4000,8000,16000,32000,64000"
BACKENDS = "sdpa,sdpa+dropout,chunked,performer,topk"
WIDTHS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"npt": {}, "spin": {}},
    # the official Protein scripts; SPIN's depth 8 is 4 XABA/ABLA + 4 XABD: our 4 layers
    "official": {
        "npt": dict(d_embedding=64, n_heads=8, n_blocks=8, max_row_width=None),
        "spin": dict(d_embedding=128, n_heads=16, n_blocks=4, n_inducing=10, n_latent_attributes=10),
    },
    # e = 16, 4 heads, 2 datapoint-attention blocks each; SPIN h = 10, f = 5 (the paper's Protein run)
    "matched": {
        "npt": dict(d_embedding=16, n_heads=4, n_blocks=4),
        "spin": dict(d_embedding=16, n_heads=4, n_blocks=2, n_inducing=10, n_latent_attributes=5),
    },
}
N_QUERIES, QUERY_BATCH = 1024, 256  # predict latency: 1,024 query rows in batches of 256, best of 5


def model_options(model: str, backend: str, widths: str) -> dict[str, Any]:
    name, _, variant = backend.partition("+")
    if variant not in ("", "dropout"):
        raise SystemExit(f"unknown backend variant {backend!r} (only '+dropout')")
    options = {**WIDTHS[widths][model], "row_attention": name}
    return {**options, "attention_dropout": 0.1} if variant else options


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def protein_rows(n: int, seed: int = 0) -> tuple[Any, Any, Any, int]:
    """Protein as an encoded table of n rows (real rows first, then resamples with Gaussian jitter
    of 0.05 standard deviations per continuous cell), its schema, and how many rows are synthetic."""
    import numpy as np

    from semiparam import TableEncoder, infer_schema
    from semiparam.datasets import load

    data = load("protein")
    schema = infer_schema(data.frame, targets=(data.target,))
    encoded = TableEncoder.fit(data.frame, schema).transform(data.frame)
    values, missing = encoded.values, encoded.missing
    rng = np.random.default_rng(seed)
    if n <= len(values):
        keep = np.sort(rng.choice(len(values), n, replace=False))
        return values[keep], missing[keep], schema, 0
    extra = n - len(values)
    picks = rng.integers(0, len(values), extra)
    synthetic = values[picks] + rng.normal(0.0, 0.05, (extra, values.shape[1])).astype(values.dtype)
    return np.concatenate([values, synthetic]), np.concatenate([missing, missing[picks]]), schema, extra


def matmul_rate(device: str, dtype: str, seconds: float = 0.5) -> float:
    """Best GFLOP/s of square products of random ``dtype`` operands on ``device`` over ``seconds``
    (2048 x 2048 on a CPU, 8192 x 8192 to fill a card), each timed between synchronisations."""
    import torch

    on_gpu = torch.device(device).type != "cpu"
    size = 8192 if on_gpu else 2048
    a, b = (torch.randn(size, size, device=device, dtype=getattr(torch, dtype)) for _ in range(2))
    for _ in range(3 if on_gpu else 1):  # warm-up (the card's clocks rise under load)
        torch.mm(a, b)
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        torch.mm(a, b)
        if on_gpu:
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


def count_cpu_attention() -> None:
    """Teach ``FlopCounterMode`` PyTorch's CPU fused attention kernels (it knows the CUDA ones only,
    and counts the CPU ones as zero), with the CUDA kernels' formulas."""
    import torch
    from torch.utils import flop_counter

    aten = torch.ops.aten

    def forward(q, k, v, *args, out_shape=None, **kwargs) -> int:  # noqa: ANN001, ANN003, ARG001
        return flop_counter.sdpa_flop_count(q, k, v)

    def backward(grad, q, k, v, *args, out_shape=None, **kwargs) -> int:  # noqa: ANN001, ANN003, ARG001
        return flop_counter.sdpa_backward_flop_count(grad, q, k, v)

    flop_counter.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu)(forward)
    flop_counter.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward)(backward)


def rate_fields(flops: int, wall: list[float], rates: list[float]) -> dict[str, Any]:
    """Each timed step against the mean of the matmul rates probed before and after it: on a shared
    machine whose speed drifts, a rate measured minutes earlier misstates the fraction."""
    around = [(rates[i] + rates[i + 1]) / 2 for i in range(len(wall))]
    fractions = [flops / seconds / 1e9 / rate for seconds, rate in zip(wall, around)]
    return {
        "matmul_gflops_around_steps": rates,
        "fraction_per_step": fractions,
        "fraction_of_matmul_rate": median(fractions),
        # seconds at a common machine speed (1 TFLOP/s of matmul): compares rows of different runs
        "step_seconds_at_unit_rate": median([s * r / 1000 for s, r in zip(wall, around)]),
    }


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]  # the upper median of an even count


def cell(
    model: str, backend: str, n: int, widths: str, steps: int, threads: int, device: str,
    mem_cap_gib: float, rate: bool = True, predict: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Train ``steps`` timed steps on one batch of n rows; with ``rate``, count the step's FLOPs
    and probe the matmul rate around each step; with ``predict``, time predicting query rows."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from semiparam import TrainConfig
    from semiparam.models.registry import get_model
    from semiparam.training.masking import mask_for_inference
    from semiparam.training.trainer import Batch, Trainer

    torch.set_num_threads(threads)
    where = torch.device(device)
    if where.type == "cpu":  # CUDA reserves far more address space than it uses: no cap there
        resource.setrlimit(resource.RLIMIT_AS, (int(mem_cap_gib * 2**30),) * 2)
    values_np, missing_np, schema, n_synthetic = protein_rows(n)
    out: dict[str, Any] = {"n_synthetic": n_synthetic, "baseline_rss_gib": rss_gib()}
    torch.manual_seed(0)
    config_cls, module_cls = get_model(model)
    out["model_options"] = options = model_options(model, backend, widths)
    layout = schema.layout()
    module = module_cls(config_cls.from_dict(options, base=config_cls.preset("cpu")), layout).to(where)
    out["n_params"] = sum(p.numel() for p in module.parameters())
    train_config = TrainConfig.preset("cpu", model=model).replace(max_steps=steps + 2, batch_size=n)
    target = torch.zeros(layout.n_columns, dtype=torch.bool, device=where)
    target[schema.target_indices] = True
    generator = torch.Generator(where).manual_seed(0)
    trainer = Trainer(module, layout, target, train_config, generator=generator, dropout_generator=generator)
    # the step's matrix products run in the trainer's autocast dtype (bf16 on CUDA by default)
    dtype = str(trainer.autocast_dtype or torch.float32).removeprefix("torch.")
    out.update(autocast=dtype if trainer.autocast_dtype else None, rate_dtype=dtype)
    if where.type == "cuda":
        out["card"] = torch.cuda.get_device_name(where)
    values, missing = torch.as_tensor(values_np, device=where), torch.as_tensor(missing_np, device=where)
    batch = Batch(values, missing, torch.ones(n, dtype=torch.bool, device=where))

    sync = (lambda: torch.cuda.synchronize(where)) if where.type == "cuda" else (lambda: None)
    wall, cpu, rates = [], [], []  # rates: the matmul rate probed before each timed step and after the last
    for step in range(steps + 1):  # step 0 warms up the allocator and kernels
        if rate and step > 0:
            rates.append(matmul_rate(device, dtype))
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train_step(batch, step)
        sync()
        if step > 0:
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    out.update(step_seconds=wall, step_cpu_seconds=cpu, step_seconds_median=median(wall))
    out["peak_rss_gib"] = rss_gib()  # the training high-water mark
    out["step_rss_gib"] = out["peak_rss_gib"] - out["baseline_rss_gib"]
    if where.type == "cuda":  # the step's memory is the card's
        out["step_rss_gib"] = torch.cuda.max_memory_allocated(where) / 2**30
    if rate:
        rates.append(matmul_rate(device, dtype))
        count_cpu_attention()
        with FlopCounterMode(display=False) as counter:
            trainer.train_step(batch, steps + 1)
        out["flops_per_step"] = int(counter.get_total_flops())
        out.update(rate_fields(out["flops_per_step"], wall, rates))
    if predict:  # encode all n rows as context, then time predicting query rows, the target hidden
        module.eval()
        hide = target if train_config.p_target >= 1.0 else torch.zeros_like(target)
        with torch.no_grad():
            t0 = time.perf_counter()
            state = module.encode_context(*mask_for_inference(values, missing, hide_columns=hide))
            out["encode_seconds"] = time.perf_counter() - t0
            queries = mask_for_inference(values[:N_QUERIES], missing[:N_QUERIES], hide_columns=target)
            timings = []
            for _ in range(5):
                t0 = time.perf_counter()
                for start in range(0, len(queries[0]), QUERY_BATCH):
                    module.forward_queries(*(q[start : start + QUERY_BATCH] for q in queries), state)
                timings.append(time.perf_counter() - t0)
        out["predict_ms_per_row"] = 1000 * min(timings) / len(queries[0])
    return out


def status(rec: dict[str, Any]) -> str:
    if rec["ok"]:
        return "ok"
    oom = any(s in rec["error"] for s in ("can't allocate memory", "MemoryError", "out of memory"))
    return "timeout" if rec.get("timed_out") else "oom" if oom else "error"


def series(
    records: h.Records, grid: list[dict[str, Any]], timeout: float, run: bool, retry: bool = False
) -> list[dict[str, Any]]:
    """The rows (settings and result) of one series of cells in growing n, each run in a fresh
    process when ``run`` and not yet recorded; after a failure the larger sizes are not run."""
    rows: list[dict[str, Any]] = []
    for settings in grid:
        if rows and rows[-1]["status"] != "ok":
            break
        compute = lambda s: h.run_cell("step_cost:cell", s, timeout=timeout, threads=s["threads"])
        rec = records.run(settings, compute, retry_errors=retry) if run else records.get(settings)
        if rec is not None:
            rows.append({**rec["settings"], **rec, "status": status(rec)})
            print(f"{settings['model']} {settings['backend']} n={settings['n']}: {cell_text(rows[-1])}")
    return rows


def fitted_exponent(ns: list[int], values: list[float], min_n: int = 4000) -> float:
    """Least-squares slope of log(value) on log(n) over the sizes >= ``min_n`` (all when fewer than
    two): 1 = linear growth, 2 = quadratic, 0 = flat."""
    import numpy as np

    pairs = [(n, v) for n, v in zip(ns, values) if n >= min_n] or list(zip(ns, values))
    if len(pairs) < 2:
        return float("nan")
    return float(np.polyfit(np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs]), 1)[0])


def cell_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return "–"
    if row["status"] != "ok":
        return row["status"]
    text = f"{row['step_seconds_median']:.2f} s, {row['step_rss_gib']:.2f} GiB"
    return text + (f", {row['fraction_of_matmul_rate']:.0%}" if "fraction_of_matmul_rate" in row else "")


def find(rows: list[dict[str, Any]], model: str, backend: str, n: int) -> dict[str, Any] | None:
    return next((r for r in rows if (r["model"], r["backend"], r["n"]) == (model, backend, n)), None)


def dropout_cost_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Attention dropout's price per model and n where ``sdpa`` and ``sdpa+dropout`` both ran: the
    ratio of step time at equal machine speed (the ratio of achieved fractions inverted) and of
    step memory."""
    table = []
    for model in sorted({r["model"] for r in rows}):
        for n in sorted({r["n"] for r in rows}):
            off, on = (find(rows, model, b, n) for b in ("sdpa", "sdpa+dropout"))
            if off and on and off["status"] == on["status"] == "ok":
                f_off, f_on = off["fraction_of_matmul_rate"], on["fraction_of_matmul_rate"]
                memory = on["step_rss_gib"] / off["step_rss_gib"]
                table.append(
                    [model, f"{n:,}", f"{f_off:.0%}", f"{f_on:.0%}", f"{f_off / f_on:.2f}x", f"{memory:.2f}x"]
                )
    columns = ["model", "n", "share of the matmul rate, sdpa", "with dropout",
               "step time with / without (at equal machine speed)", "step memory with / without"]  # fmt: skip
    title = ["", "## The price of attention dropout (the paper presets' 0.1)", ""]
    return title + h.md_table(columns, table) if table else []


def report_lines(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    combos = list(dict.fromkeys((r["model"], r["backend"]) for r in rows))
    rate = [g for r in rows for g in r.get("matmul_gflops_around_steps", [])]
    dtypes = "/".join(sorted({r["rate_dtype"] for r in rows if r["status"] == "ok"})) or "fp32"
    cards = "".join(f" Card: {c}." for c in sorted({r["card"] for r in rows if r.get("card")}))
    cap = "" if args.device != "cpu" else f" Memory cap per process {args.mem_cap_gib} GiB."
    lines = [
        f"One batch of n Protein rows per step, widths `{args.widths}`, {args.threads} thread(s), "
        f"median of {args.steps} timed steps after a warm-up, on `{args.device}`.",
        "",
        f"The {dtypes} matmul rate measured in the same processes: "
        + (f"{min(rate):.1f}-{max(rate):.1f} GFLOP/s." if rate else "–")
        + cards,
        "",
        "Each cell: wall seconds per step, step memory (on a CPU: peak RSS minus the baseline before "
        "the model was built; on a GPU: the most PyTorch allocated on the card), achieved share of the "
        "matmul rate (FLOPs counted by PyTorch's FlopCounterMode / seconds / rate)." + cap,
        "",
    ]
    table = [
        [f"{n:,}", *(cell_text(find(rows, m, b, n)) for m, b in combos)]
        for n in sorted({r["n"] for r in rows})
    ]
    lines += h.md_table(["n", *(f"{m} {b}" for m, b in combos)], table)
    lines += ["", "## Largest n under the memory cap, and memory growth", ""]
    table = []
    for m, b in combos:
        ok = [r for r in rows if (r["model"], r["backend"]) == (m, b) and r["status"] == "ok"]
        fail = next((r for r in rows if (r["model"], r["backend"]) == (m, b) and r["status"] != "ok"), None)
        stopped = f"{fail['status']} at {fail['n']:,}" if fail else "nothing (largest size run)"
        stopped += f" ({fail['error']}, not memory)" if fail and fail["status"] == "timeout" else ""
        k = fitted_exponent([r["n"] for r in ok], [r["step_rss_gib"] for r in ok])
        table.append([m, b, f"{ok[-1]['n']:,}" if ok else "–", stopped, f"{k:.2f}"])
    columns = [
        "model",
        "backend",
        "largest n trained",
        "what stopped the next size",
        "memory ~ n^k (fit over n >= 4,000)",
    ]
    return lines + h.md_table(columns, table) + dropout_cost_lines(rows)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    for ax, key, title in (
        (axes[0], "step_seconds_median", "wall seconds per training step"),
        (axes[1], "step_rss_gib", "step memory (GiB)"),
    ):
        for m, b in dict.fromkeys((r["model"], r["backend"]) for r in rows):
            ok = [r for r in rows if (r["model"], r["backend"]) == (m, b) and r["status"] == "ok"]
            if ok:
                ax.plot([r["n"] for r in ok], [max(r[key], 1e-3) for r in ok], "o-", label=f"{m} {b}")
        ax.set(xscale="log", yscale="log", xlabel="rows n (one batch)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=SIZES)
    parser.add_argument("--models", default="npt,spin")
    parser.add_argument("--backends", default=BACKENDS)
    parser.add_argument("--widths", default="cpu", choices=sorted(WIDTHS))
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per cell")
    parser.add_argument("--mem-cap-gib", type=float, default=16.0, help="address-space cap of a CPU cell")
    parser.add_argument("--device", default="cpu", help="'cuda': under the trainer's default bf16 autocast")
    parser.add_argument("--out", type=Path, default=h.RESULTS)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--retry-errors", action="store_true", help="rerun failed cells")
    args = parser.parse_args()
    records = h.Records(args.out / "step_cost.jsonl")
    rows = []
    for model in args.models.split(","):
        for backend in args.backends.split(","):
            grid = [
                {"model": model, "backend": backend, "n": int(n), "widths": args.widths, "steps": args.steps,
                 "threads": args.threads, "device": args.device, "mem_cap_gib": args.mem_cap_gib}
                for n in args.sizes.split(",")
            ]  # fmt: skip
            rows += series(records, grid, args.timeout, not args.report_only, args.retry_errors)
    if rows:
        title = "Cost of a training step by model, attention backend and n"
        path = h.write_report(args.out / "step_cost", title, report_lines(rows, args), rows, records=rows)
        plot(rows, args.out / "step_cost.png")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
