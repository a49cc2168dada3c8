"""Where a training step's time goes: torch.profiler over a few steps of one model on n Protein rows,
operators grouped into what the issue calls matmul or attention and everything else.

    python benchmarks/step_profile.py --model npt --n 4096 --widths official
    python benchmarks/step_profile.py --model spin --n 8192 --widths official --steps 3
    python benchmarks/step_profile.py --model npt --n 1000                   # the cpu preset

The model and batch are built as in ``benchmarks/step_cost.py`` (same widths, same table); one
warm-up step, then ``--steps`` profiled steps (forward, backward and the optimiser). Self CPU time
of every operator is summed by group (``GROUPS``: the first pattern an operator name matches), so
the report shows the share of the step spent outside matrix products and attention. Writes
``<out>/step_profile_<model>_<widths>_<n>.{json,md}`` with the command, code hash and machine.
Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import scaling
from matmul_rate import matmul_rate
from step_cost import RESULTS, model_options

from semiparam.bench.measure import code_hash, machine_info

# (group, regular expression on the aten operator name); the first match wins
GROUPS: list[tuple[str, str]] = [
    ("matmul", r"^aten::(mm|addmm|bmm|matmul|linear|baddbmm|addbmm|einsum|_efficientzerotensor)$"),
    ("attention", r"scaled_dot_product|flash_attention|efficient_attention|_softmax|softmax"),
    ("layer norm", r"layer_norm"),
    ("dropout", r"dropout|bernoulli"),
    ("activations", r"gelu|relu|sigmoid|tanh|softplus|exp$|exp_|sin|cos"),
    (
        "copies and layout",
        r"copy_|contiguous|clone|cat|stack|to_copy|_to_copy|index|gather|scatter|"
        r"embedding|reshape|view|permute|transpose|expand|slice|select|empty|zeros|fill_",
    ),
    ("reductions", r"sum|mean|norm|max|min|argmax|topk"),
    (
        "elementwise",
        r"^aten::(add|sub|mul|div|addcmul|addcdiv|sqrt|rsqrt|pow|neg|where|masked_fill|"
        r"lerp|clamp|abs|sign|log|maximum|minimum|eq|ne|lt|gt|le|ge|bitwise)",
    ),
]


def group_of(name: str) -> str:
    for group, pattern in GROUPS:
        if re.search(pattern, name):
            return group
    return "other"


def profile(
    model_name: str, n: int, widths: str, steps: int, threads: int, seed: int, backend: str = "sdpa"
) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from semiparam import TrainConfig
    from semiparam.bench import Batch, Trainer, get_model

    torch.set_num_threads(threads)
    rate = matmul_rate(threads)
    (values_np, missing_np, schema), _ = scaling._table(n, seed)
    torch.manual_seed(seed)
    config_cls, module_cls = get_model(model_name)
    options = model_options(model_name, backend, widths)
    config = config_cls.from_dict(options, base=config_cls.preset("cpu"))
    layout = schema.layout()
    module = module_cls(config, layout)
    train_config = TrainConfig.preset("cpu", model=model_name).replace(max_steps=steps + 2, batch_size=n)
    target = torch.zeros(layout.n_columns, dtype=torch.bool)
    target[schema.target_indices] = True
    trainer = Trainer(module, layout, target, train_config, generator=torch.Generator().manual_seed(seed))
    batch = Batch(torch.as_tensor(values_np), torch.as_tensor(missing_np), torch.ones(n, dtype=torch.bool))
    trainer.train_step(batch, 0)  # warm-up
    start = time.perf_counter()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(1, steps + 1):
            trainer.train_step(batch, step)
    seconds = (time.perf_counter() - start) / steps
    ops = []
    for event in prof.key_averages():
        ops.append(
            {
                "name": event.key,
                "calls": int(event.count) // steps,
                "self_cpu_seconds": event.self_cpu_time_total / 1e6 / steps,
                "group": group_of(event.key),
            }
        )
    ops.sort(key=lambda o: -o["self_cpu_seconds"])
    total = sum(o["self_cpu_seconds"] for o in ops) or 1.0
    groups: dict[str, float] = {}
    for o in ops:
        groups[o["group"]] = groups.get(o["group"], 0.0) + o["self_cpu_seconds"]
    return {
        "model": model_name,
        "backend": backend,
        "n": n,
        "widths": widths,
        "model_options": options,
        "steps_profiled": steps,
        "threads": threads,
        "step_seconds_profiled": seconds,
        "matmul_gflops": rate,
        "self_cpu_seconds_per_step": total,
        "groups": {
            g: {"seconds": s, "share": s / total} for g, s in sorted(groups.items(), key=lambda x: -x[1])
        },
        "top_ops": ops[:40],
    }


def write_report(result: dict[str, Any], path: Path) -> None:
    lines = [
        f"# Training-step profile: {result['model']} ({result['widths']} widths, backend "
        f"`{result['backend']}`), {result['n']} rows",
        "",
        f"Command: `{result['command']}`; code `{result['code_hash']}`; machine: "
        f"{result['machine']['cpu']}, {result['threads']} threads; matmul rate "
        f"{result['matmul_gflops']:.1f} GFLOP/s (fp32, same process).",
        "",
        f"Seconds per step under the profiler: {result['step_seconds_profiled']:.3f} (profiling adds "
        "overhead; `benchmarks/step_cost.py` times steps without it). Self CPU time per step, summed "
        f"over threads: {result['self_cpu_seconds_per_step']:.3f} s.",
        "",
        "| group | self CPU s per step | share |",
        "|---|---|---|",
    ]
    for g, v in result["groups"].items():
        lines.append(f"| {g} | {v['seconds']:.4f} | {100 * v['share']:.1f}% |")
    lines += ["", "| operator | group | calls per step | self CPU s per step |", "|---|---|---|---|"]
    for o in result["top_ops"][:25]:
        lines.append(f"| `{o['name']}` | {o['group']} | {o['calls']} | {o['self_cpu_seconds']:.4f} |")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="npt", choices=["npt", "spin"])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--widths", default="official", choices=["cpu", "official"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--backend", default="sdpa", help="row-attention backend, as in step_cost.py (e.g. sdpa+dropout)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = profile(args.model, args.n, args.widths, args.steps, args.threads, args.seed, args.backend)
    result["command"] = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    result["code_hash"] = code_hash()
    result["machine"] = machine_info()
    suffix = "" if args.backend == "sdpa" else "_" + args.backend.replace("+", "_")
    stem = args.out / f"step_profile_{args.model}_{args.widths}_{args.n}{suffix}"
    args.out.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    write_report(result, stem.with_suffix(".md"))
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
