"""Cost of one training step per model, attention backend and table size, against the machine's
matmul rate measured in the same process.

    python benchmarks/step_cost.py                                   # cpu widths, 1k-64k rows
    python benchmarks/step_cost.py --widths official --sizes 4096,8192 --models npt --backends sdpa
    python benchmarks/step_cost.py --sizes 1000,2000 --steps 2 --out /tmp/step_cost
    python benchmarks/step_cost.py --report-only                     # rebuild the report
    python benchmarks/step_cost.py --widths official --sizes 4096,8192 --models spin \
        --backends sdpa,sdpa+dropout --official-spin /tmp/offvenv/bin/python /tmp/spin_official
                                                        # beside the official SPIN code (see below)

For each (model, backend, n) a fresh Python process (so that its peak RSS is its own) builds the
model with ``row_attention=backend`` (``semiparam.nn.backends``; ``sdpa+dropout`` is the default
backend with the paper's attention dropout 0.1, which its fused kernels do not support), and trains
on **one batch of n Protein rows** (``benchmarks/scaling.py`` builds the table: real rows, then
jittered resamples past 45,730): one warm-up step, then ``--steps`` timed steps. Recorded: wall and
CPU seconds per step (median), the step's floating-point operations counted by PyTorch's
``FlopCounterMode`` over one extra step (matrix products and the attention kernels, the CPU fused
ones taught to it here; element-wise work is not counted), the fp32 matmul rate of the same process
(best of several 2048 x 2048 products on the same threads), and the achieved fraction ``FLOPs / step
seconds / matmul rate``. Memory: peak resident set size minus the baseline before the model was
built; each worker runs under an address-space cap (``--mem-cap-gib``, default 16), so the largest n
that trains under the cap is the largest ``ok`` row of a backend. A worker past ``--timeout``
seconds is recorded as ``timeout``; after a failure a backend's larger sizes are ``skipped``.

Widths: ``cpu`` = each model's cpu preset (NPT e=16, 4 blocks, 4 heads; SPIN e=16, h=f=10,
2 layers); ``official`` = the reference implementations' Protein widths (NPT e=64, 8 heads,
8 blocks; SPIN e=128, 16 heads, 4 layers, h=f=10, as the official Protein SPIN script). A row made
at other options under the same widths name (SPIN's official widths once left e and heads at the
cpu preset) is not reused.

``--official-spin PYTHON ROOT`` (with ``--widths official``) also times the SPIN authors' code at each
size, in the same invocation (``official_spin_step.py``, run by the interpreter of an environment
with its dependencies), and the report sets our SPIN beside it at equal machine speed.

Results go to ``<out>/step_cost.jsonl`` line by line (a stopped run resumes: rows of the same
code, widths, threads, steps and model options are kept), then ``step_cost.json``, ``step_cost.md`` and
``step_cost.png`` (seconds and memory against n, log-log, one line per model and backend).
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import scaling
from matmul_rate import RATE_PROBE_SECONDS, matmul_rate

from semiparam.bench.measure import code_hash

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_SIZES = (1000, 2000, 4000, 8000, 16000, 32000, 64000)
DEFAULT_BACKENDS = ("sdpa", "sdpa+dropout", "chunked", "performer", "topk")
WIDTHS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"npt": {}, "spin": {}},
    "official": {
        "npt": {"d_embedding": 64, "n_heads": 8, "n_blocks": 8, "max_row_width": None},
        # the official Protein SPIN script: e = 128, 16 heads, depth 8 (4 XABA/ABLA + 4 XABD: our
        # 4 layers), h = f = 10 (see official_spin_step.py, which builds it from that script)
        "spin": {
            "d_embedding": 128,
            "n_heads": 16,
            "n_layers": 4,
            "n_inducing_points": 10,
            "n_latent_attributes": 10,
        },
    },
}


def model_options(model: str, backend: str, widths: str) -> dict[str, Any]:
    name, _, variant = backend.partition("+")
    options = {**WIDTHS[widths][model], "row_attention": name}
    if variant == "dropout":
        options["attention_dropout"] = 0.1
    elif variant:
        raise SystemExit(f"unknown backend variant {backend!r} (only '+dropout')")
    return options


def count_cpu_attention() -> None:
    """Teach ``FlopCounterMode`` PyTorch's CPU fused attention kernels: it knows the CUDA flash and
    memory-efficient kernels only, and counted the CPU ones (forward and backward of SDPA without
    a mask, most of an NPT step's attention) as zero. Same formulas as the CUDA kernels'."""
    import torch
    from torch.utils import flop_counter

    aten = torch.ops.aten

    def forward(q, k, v, *args, out_shape=None, **kwargs) -> int:  # noqa: ANN001, ANN003, ARG001
        return flop_counter.sdpa_flop_count(q, k, v)

    def backward(grad, q, k, v, *args, out_shape=None, **kwargs) -> int:  # noqa: ANN001, ANN003, ARG001
        return flop_counter.sdpa_backward_flop_count(grad, q, k, v)

    flop_counter.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu)(forward)
    flop_counter.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward)(backward)


def worker(
    model_name: str, backend: str, n: int, steps: int, threads: int, widths: str, seed: int, device: str
) -> dict[str, Any]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from semiparam import TrainConfig
    from semiparam.bench import Batch, Trainer, get_model

    (values_np, missing_np, schema), n_synthetic = scaling._table(n, seed)
    result: dict[str, Any] = {
        "model": model_name,
        "backend": backend,
        "n": n,
        "n_synthetic": n_synthetic,
        "baseline_rss_gib": scaling._rss_gib(),
    }
    torch.manual_seed(seed)
    config_cls, module_cls = get_model(model_name)
    options = model_options(model_name, backend, widths)
    config = config_cls.from_dict(options, base=config_cls.preset("cpu"))
    layout = schema.layout()
    where = torch.device(device)
    module = module_cls(config, layout).to(where)
    result["model_options"] = options
    result["n_params"] = sum(p.numel() for p in module.parameters())
    train_config = TrainConfig.preset("cpu", model=model_name).replace(max_steps=steps + 2, batch_size=n)
    target = torch.zeros(layout.n_columns, dtype=torch.bool, device=where)
    target[schema.target_indices] = True
    generator = torch.Generator(where).manual_seed(seed)
    trainer = Trainer(module, layout, target, train_config, generator=generator, dropout_generator=generator)
    # the step's matrix products run in the trainer's autocast dtype (bf16 on CUDA by default): the
    # rate it is set against is that dtype's
    precision = trainer.autocast_dtype
    rate_dtype = str(precision or torch.float32).removeprefix("torch.")
    result.update(device=str(where), autocast=rate_dtype if precision else None)
    if where.type == "cuda":
        result["card"] = torch.cuda.get_device_name(where)
    batch = Batch(
        torch.as_tensor(values_np, device=where),
        torch.as_tensor(missing_np, device=where),
        torch.ones(n, dtype=torch.bool, device=where),
    )

    def sync() -> None:
        if where.type == "cuda":
            torch.cuda.synchronize(where)

    wall: list[float] = []
    cpu: list[float] = []
    rates: list[float] = []  # the matmul rate probed before each timed step and after the last
    for step in range(steps + 1):
        if step > 0:
            rates.append(matmul_rate(threads, RATE_PROBE_SECONDS, str(where), rate_dtype))
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train_step(batch, step)
        sync()
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        if step > 0:  # step 0 warms up the allocator and kernels
            wall.append(seconds)
            cpu.append(cpu_seconds)
        partial = {"partial": True, "step": step, "seconds": seconds, "cpu_seconds": cpu_seconds}
        print(json.dumps({**partial, "peak_rss_gib": scaling._rss_gib()}), flush=True)
    rates.append(matmul_rate(threads, RATE_PROBE_SECONDS, str(where), rate_dtype))
    result["peak_rss_gib"] = scaling._rss_gib()
    result["step_rss_gib"] = result["peak_rss_gib"] - result["baseline_rss_gib"]
    if where.type == "cuda":  # the step's memory is the card's: what PyTorch allocated at most
        result["step_rss_gib"] = torch.cuda.max_memory_allocated(where) / 2**30
    count_cpu_attention()
    counter = FlopCounterMode(display=False)
    with counter:
        trainer.train_step(batch, steps + 1)
    result["flops_per_step"] = int(counter.get_total_flops())
    result["step_seconds"] = wall
    result["step_cpu_seconds"] = cpu
    median = sorted(wall)[len(wall) // 2]
    result["step_seconds_median"] = median
    result["step_cpu_seconds_median"] = sorted(cpu)[len(cpu) // 2]
    result["achieved_gflops"] = result["flops_per_step"] / median / 1e9
    # each step against the rate around it (the mean of the probes before and after it): on a shared
    # machine whose speed drifts, a rate measured minutes earlier misstates the fraction
    result.update(rate_fields(result["flops_per_step"], wall, rates), status="ok")
    return result


def rate_fields(flops: int, wall: list[float], rates: list[float]) -> dict[str, Any]:
    """Each timed step against the matmul rate around it (``rates``: probed before each step and
    after the last; the mean of the two probes around a step): on a shared machine whose speed
    drifts, a rate measured minutes earlier misstates the fraction."""
    around = [(rates[i] + rates[i + 1]) / 2 for i in range(len(wall))]
    fractions = [flops / seconds / 1e9 / rate for seconds, rate in zip(wall, around)]
    return {
        "matmul_gflops_around_steps": rates,
        "fraction_per_step": fractions,
        "fraction_of_matmul_rate": sorted(fractions)[len(fractions) // 2],
        # seconds at a common machine speed (1 TFLOP/s of matmul): compares rows of different runs
        "step_seconds_at_unit_rate": sorted(s * r / 1000 for s, r in zip(wall, around))[len(wall) // 2],
    }


OFFICIAL = ("spin", "official code")  # the (model, backend) of the official SPIN code's rows
OFFICIAL_KEPT = ("harness", "official_commit", "torch", "loss", "optimizer", "gradient_clipping")


def official_row(out: dict[str, Any], identity: dict[str, Any]) -> dict[str, Any]:
    """A row of this table from ``official_spin_step.py``'s output (or its failure record)."""
    if "step_seconds" not in out:
        return out
    wall = out["step_seconds"]
    return {
        **identity,
        "step_seconds": wall,
        "step_seconds_median": sorted(wall)[len(wall) // 2],
        "flops_per_step": out["flops_per_step"],
        "step_rss_gib": out["peak_rss_rise_mib"] / 1024,
        "peak_rss_gib": out["peak_rss_mib"] / 1024,
        "n_params": out["parameters"],
        "official": {k: out.get(k) for k in (*OFFICIAL_KEPT, "not_in_step", "stubbed_imports", "settings")},
        "wall_seconds": out.get("wall_seconds"),
        **rate_fields(out["flops_per_step"], wall, out["matmul_gflops_around_steps"]),
        "status": "ok",
    }


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut off by a kill
            continue
    return rows


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "–"
    if row["status"] != "ok":
        return row["status"]
    return (
        f"{row['step_seconds_median']:.2f} s, {row['step_rss_gib']:.2f} GiB, "
        f"{row['fraction_of_matmul_rate']:.0%}"
    )


def _from_runs(rows: list[dict[str, Any]], field: Callable[[dict[str, Any]], str]) -> list[str]:
    """``field`` of the meta of the runs that made ``rows``, each once, in order: the report names
    the runs' machines and commands, not those of the invocation that rebuilds it."""
    return list(dict.fromkeys(field(r["meta"]) for r in rows if "meta" in r))


def _rate_dtype(rows: list[dict[str, Any]]) -> str:
    """The dtype(s) of the matmul rate the rows are set against: fp32, or the GPU step's autocast."""
    return "/".join(sorted({r.get("autocast") or "fp32" for r in rows if r.get("status") == "ok"})) or "fp32"


def _row(rows: list[dict[str, Any]], model: str, backend: str, n: int) -> dict[str, Any] | None:
    """The row of (model, backend, n), or None."""
    return next((r for r in rows if (r["model"], r["backend"], r["n"]) == (model, backend, n)), None)


def _ok_rows(rows: list[dict[str, Any]], model: str, backend: str) -> list[dict[str, Any]]:
    ok = [r for r in rows if (r["model"], r["backend"]) == (model, backend) and r["status"] == "ok"]
    return sorted(ok, key=lambda r: r["n"])


def write_report(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    combos = sorted({(r["model"], r["backend"]) for r in rows})
    sizes = sorted({r["n"] for r in rows})
    rate = [g for r in rows for g in r.get("matmul_gflops_around_steps", [])]
    lines = [
        "# Cost of a training step by model, attention backend and n",
        "",
        "Generated by `benchmarks/step_cost.py` from `step_cost.jsonl`. One batch of n Protein rows per "
        f"step, widths `{meta['widths']}`, {meta['threads']} thread(s), median of {meta['steps']} timed "
        f"steps after a warm-up. Machine (as each command found it): "
        + "; ".join(f"`{m}`" for m in _from_runs(rows, lambda m: json.dumps(m["machine"], sort_keys=True)))
        + f". Code: `{meta['code']}`. Commands: "
        + "; ".join(f"`{c}`" for c in _from_runs(rows, lambda m: m["command"]))
        + ".",
        "",
        f"The {_rate_dtype(rows)} matmul rate measured in the same processes: "
        + (f"{min(rate):.1f}-{max(rate):.1f} GFLOP/s." if rate else "–")
        + "".join(f" Card: {c}." for c in sorted({r["card"] for r in rows if r.get("card")})),
        "",
        "Each cell: wall seconds per step, step memory (on a CPU: peak RSS minus the baseline before "
        "the model was built; on a GPU: the most PyTorch allocated on the card), achieved share of the "
        "matmul rate (FLOPs counted by PyTorch's FlopCounterMode / seconds / rate). "
        + ("" if meta.get("device", "cpu") != "cpu" else f"Memory cap per worker {meta['mem_cap_gib']} GiB."),
        "",
        "| n | " + " | ".join(f"{m} {b}" for m, b in combos) + " |",
        "|---|" + "---|" * len(combos),
    ]

    for n in sizes:
        lines.append(f"| {n:,} | " + " | ".join(_cell(_row(rows, m, b, n)) for m, b in combos) + " |")
    lines += ["", "## Largest n under the memory cap, and memory growth", ""]
    lines += [
        "| model | backend | largest n trained | what stopped the next size "
        "| memory ~ n^k (fit over n >= 4,000) |",
        "|---|---|---|---|---|",
    ]
    for m, b in combos:
        ok = _ok_rows(rows, m, b)
        largest = f"{ok[-1]['n']:,}" if ok else "–"
        failed = [
            r for r in rows if (r["model"], r["backend"]) == (m, b) and r["status"] not in ("ok", "skipped")
        ]
        stopped = "; ".join(f"{r['status']} at {r['n']:,}" for r in failed) or "nothing (largest size run)"
        if any(r["status"] == "timeout" for r in failed):
            stopped += (
                f" (worker time limit {max(r.get('wall_seconds', 0) for r in failed):.0f} s, not memory)"
            )
        k = scaling.fitted_exponent([r["n"] for r in ok], [r["step_rss_gib"] for r in ok])
        lines.append(f"| {m} | {b} | {largest} | {stopped} | {k:.2f} |")
    lines += dropout_cost_lines(rows)
    lines += official_lines(rows)
    (out / "step_cost.md").write_text("\n".join(lines) + "\n")
    (out / "step_cost.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    plot(rows, combos, out / "step_cost.png")


def dropout_cost_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Attention dropout's price per model and n where both ``sdpa`` and ``sdpa+dropout`` ran: the
    ratio of step memory, and of step time at equal machine speed (each step's seconds times the
    matmul rate around it, i.e. the ratio of achieved fractions inverted)."""
    lines = []
    for model in sorted({r["model"] for r in rows}):
        for n in sorted({r["n"] for r in rows}):
            pair = [_row(rows, model, b, n) for b in ("sdpa", "sdpa+dropout")]
            if any(r is None or r["status"] != "ok" for r in pair):
                continue
            off, on = pair
            lines.append(
                f"| {model} | {n:,} | {off['fraction_of_matmul_rate']:.0%} | "
                f"{on['fraction_of_matmul_rate']:.0%} | "
                f"{off['fraction_of_matmul_rate'] / on['fraction_of_matmul_rate']:.2f}x | "
                f"{on['step_rss_gib'] / off['step_rss_gib']:.2f}x |"
            )
    if not lines:
        return []
    return [
        "",
        "## The price of attention dropout (the paper presets' 0.1)",
        "",
        "| model | n | share of the matmul rate, sdpa | with dropout | step time with / without "
        "(at equal machine speed) | step memory with / without |",
        "|---|---|---|---|---|---|",
        *lines,
    ]


def official_lines(rows: list[dict[str, Any]]) -> list[str]:
    """SPIN against the official code at each n where both ran: the time ratio at equal machine
    speed (each side's seconds times the matmul rate around its steps), the wall-clock ratio, the
    step-memory ratio and the parameter counts."""
    lines = []
    for n in sorted({r["n"] for r in rows}):
        theirs = _row(rows, *OFFICIAL, n)
        if theirs is None or theirs["status"] != "ok":
            continue
        for backend in ("sdpa+dropout", "sdpa"):
            ours = _row(rows, "spin", backend, n)
            if ours is None or ours["status"] != "ok":
                continue
            lines.append(
                f"| {n:,} | {backend} | {ours['step_seconds_median']:.2f} s, {ours['step_rss_gib']:.2f} GiB, "
                f"{ours['n_params'] / 1e6:.1f}M | {theirs['step_seconds_median']:.2f} s, "
                f"{theirs['step_rss_gib']:.2f} GiB, {theirs['n_params'] / 1e6:.1f}M | "
                f"{ours['step_seconds_at_unit_rate'] / theirs['step_seconds_at_unit_rate']:.2f}x | "
                f"{ours['step_seconds_median'] / theirs['step_seconds_median']:.2f}x | "
                f"{ours['step_rss_gib'] / theirs['step_rss_gib']:.2f}x |"
            )
    if not lines:
        return []
    first = next(r for r in rows if (r["model"], r["backend"]) == OFFICIAL and r["status"] == "ok")
    info = first["official"]
    return [
        "",
        "## SPIN against the official code",
        "",
        f"The official SPIN (github.com/RichRast/SPIN at {str(info['official_commit'])[:10]}, torch "
        f"{info['torch']}) timed by `benchmarks/official_spin_step.py` in the same invocation, at its "
        "Protein script's settings (e = 128, 16 heads, 4 attribute and 4 row layers, h = f = 10, hidden "
        "and attention dropout 0.1); step: "
        f"{info['loss']}, {info['optimizer']}, {info['gradient_clipping']}. Left out of its step: "
        f"{'; '.join(info['not_in_step'])}. Ours: the same widths and dropouts (`--widths official`), "
        "our loss, optimizer and clipping. Time at equal machine speed: each side's median of "
        "(step seconds x the matmul rate around the step), so that a drift of the shared machine "
        "between the runs does not count.",
        "",
        "| n | our backend | ours: s, step GiB, parameters | official: s, step GiB, parameters "
        "| time ours / official (equal machine speed) | wall ours / official | memory ours / official |",
        "|---|---|---|---|---|---|---|",
        *lines,
    ]


def plot(rows: list[dict[str, Any]], combos: list[tuple[str, str]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    for ax, key, title in (
        (axes[0], "step_seconds_median", "wall seconds per training step"),
        (axes[1], "step_rss_gib", "step memory: peak RSS - baseline (GiB)"),
    ):
        for m, b in combos:
            ok = _ok_rows(rows, m, b)
            if ok:
                ax.plot([r["n"] for r in ok], [max(r[key], 1e-3) for r in ok], "o-", label=f"{m} {b}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rows n (one batch)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def worker_command(args: argparse.Namespace, model: str, backend: str, n: int) -> list[str]:
    options = {
        "--steps": args.steps,
        "--threads": args.threads,
        "--widths": args.widths,
        "--mem-cap-gib": args.mem_cap_gib,
        "--seed": args.seed,
        "--device": args.device,
    }
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", model, backend, str(n)]
    for flag, value in options.items():
        cmd += [flag, str(value)]
    return cmd


def official_command(args: argparse.Namespace, n: int) -> list[str]:
    harness = Path(__file__).resolve().parent / "official_spin_step.py"
    python, root = args.official_spin
    options = [
        "--official-root",
        root,
        "--n",
        str(n),
        "--steps",
        str(args.steps),
        "--threads",
        str(args.threads),
    ]
    return [python, str(harness), *options]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--models", default="npt,spin")
    parser.add_argument("--backends", default=",".join(DEFAULT_BACKENDS))
    parser.add_argument("--widths", default="cpu", choices=sorted(WIDTHS))
    parser.add_argument(
        "--official-spin",
        nargs=2,
        metavar=("PYTHON", "ROOT"),
        help="also time the official SPIN code (its folder ROOT, run by the interpreter PYTHON of an "
        "environment that has its dependencies) at each size, with --widths official: see "
        "official_spin_step.py",
    )
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per worker")
    parser.add_argument("--mem-cap-gib", type=float, default=16.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device", default="cpu", help="where the step runs ('cuda': under the default bf16 autocast)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--worker", nargs=3, metavar=("MODEL", "BACKEND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.official_spin and args.widths != "official":
        parser.error("--official-spin compares at the official widths: add --widths official")
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        if args.device == "cpu":  # CUDA reserves far more address space than it uses: no cap there
            cap = int(args.mem_cap_gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        model, backend, n = args.worker
        result = worker(model, backend, int(n), args.steps, args.threads, args.widths, args.seed, args.device)
        print(json.dumps(result), flush=True)
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = args.out / "step_cost.jsonl"
    meta = {
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "code": code_hash(),  # of the semiparam package imported
        "widths": args.widths,
        "threads": args.threads,
        "steps": args.steps,
        "device": args.device,
        "mem_cap_gib": args.mem_cap_gib,
        "machine": scaling.machine(),
        "flop_count": "with CPU fused attention",  # rows counted before it are not reused
        "rate": "probed around each step",
    }
    same = ("code", "widths", "threads", "steps", "flop_count", "rate")
    rows = [
        r
        for r in read_rows(jsonl)
        if all(r.get("meta", {}).get(k) == meta[k] for k in same)
        and r["meta"].get("device", "cpu") == args.device
        # a row made before its widths changed (the name kept, the options not)
        and r.get("model_options", model_options(r["model"], r["backend"], args.widths))
        == model_options(r["model"], r["backend"], args.widths)
    ]
    if not args.report_only:
        sizes = [int(s) for s in args.sizes.split(",")]
        for model in args.models.split(","):
            for backend in args.backends.split(","):
                failed = False
                for n in sizes:
                    done = [r for r in rows if (r["model"], r["backend"], r["n"]) == (model, backend, n)]
                    if done:
                        failed = failed or any(r["status"] != "ok" for r in done)
                        continue
                    identity = {"model": model, "backend": backend, "n": n}
                    if failed:
                        row = {**identity, "status": "skipped"}
                    else:
                        cmd = worker_command(args, model, backend, n)
                        row = scaling.run_worker(cmd, identity, args.timeout, args.mem_cap_gib)
                        failed = row["status"] != "ok"
                    row["meta"] = meta
                    rows.append(row)
                    with jsonl.open("a") as fh:
                        fh.write(json.dumps(row, default=str) + "\n")
                    print(f"{model} {backend} n={n}: {_cell(row)}", flush=True)
        if args.official_spin:
            for n in sizes:
                if _row(rows, *OFFICIAL, n) is None:
                    identity = dict(zip(("model", "backend", "n"), (*OFFICIAL, n)))
                    cmd = official_command(args, n)
                    row = official_row(
                        scaling.run_worker(cmd, identity, args.timeout, args.mem_cap_gib), identity
                    )
                    row["meta"] = {**meta, "command": " ".join(shlex.quote(a) for a in cmd)}
                    rows.append(row)
                    with jsonl.open("a") as fh:
                        fh.write(json.dumps(row, default=str) + "\n")
                    print(f"official SPIN n={n}: {_cell(row)}", flush=True)
    if rows:
        write_report(rows, meta, args.out)
        print(f"wrote {args.out / 'step_cost.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
