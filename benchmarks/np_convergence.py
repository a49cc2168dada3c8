"""Neural processes on GP meta-learning: inducing-point NPs against the attentive baselines.

The SPIN paper's GP meta-learning claim (section 4.2, Figure 4): CIPNP/IPNP reach a target
log-likelihood at least that of CANP/ANP/BANP at most context ranges, at up to half the cost. Here
each model is trained on each context range with several seeds (the report's convergence table
says how near each run is to its plateau; ``--compare-with`` sets a longer schedule's runs beside a
shorter one's), and scored on held-out tasks from three kernels (RBF, the training kernel;
Matern-5/2 and periodic, out of distribution) beside the exact GP posterior. Also: TNP-D, the
current reference model on these tasks, and CIPNP as the paper builds it (``readout="inducing"``,
``summary_encoder="separate"``) beside the library's default (``readout="context"``,
``summary_encoder="shared"``) and the forms in between.

Every cell (model, range, seed) runs in its own subprocess with a training checkpoint, so a killed
run resumes where it stopped (``--resume``); results are written after every cell. Cells run in
priority order: the acceptance pair (CIPNP, CANP) and the paper's CIPNP for every range and seed
first, then the other models. Reproduce, alone on the machine::

    python benchmarks/np_convergence.py --resume

``--device cuda --jobs N --probe-rounds 0`` trains N cells at a time on a GPU; a cell's checkpoints
resume on any device, and each cell records the devices it trained on (the report names them). A
finished cell is known there by its sources' digest (``np_source_digest``: the code hash depends on
the Python that parses the code), so a copy of this tree under another Python trains only the cells
not finished; ``--adopt DIR`` takes the device's cells back in.
``progress`` with a run's own arguments shows where each of its cells stands (finished, training:
steps, lower rates, best validation score, evaluations without gain; not begun) without training.
A run longer than a session: ``keep`` with the run's arguments copies the checkpoints of its
unfinished cells beside the report (``<out-dir>/checkpoints/``, committed; the cell folder under
``tmp/`` is not), and the next driver run on a fresh checkout resumes them from there, with the
finished cells taken back from the committed report.

Outputs: ``benchmarks/results/np_convergence.{json,md,png}``; checkpoints and data under
``benchmarks/results/tmp/np_convergence/``. Uses the public API (``semiparam.neural_processes``) and
``semiparam.bench.measure`` for the machine and code identity.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import semiparam
from semiparam.bench.measure import code_hash, import_closure, machine_info
from semiparam.neural_processes import (
    ANP,
    BANP,
    CANP,
    CIPNP,
    IPNP,
    TNPD,
    GPTaskSampler,
    gp_log_likelihood,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"  # --out-dir changes both (a trial run elsewhere)
TMP = RESULTS / "tmp" / "np_convergence"
# the file a fit's checkpoint folder keeps its training state in: the library's
# semiparam.training.checkpoint.STATE_FILE, which is not public API (benchmarks import only the public
# API, tests/test_layering.py); tests/test_np_convergence.py checks that the two agree
STATE_FILE = "state.pt"
NOISE_STD = 0.02
KERNELS = ("rbf", "matern52", "periodic")
EVAL_SEED, VALIDATION_SEED = 0, 1
# name -> (estimator class, options beyond the widths)
MODELS: dict[str, tuple[Any, dict[str, Any]]] = {
    "CIPNP": (CIPNP, {}),
    "CANP": (CANP, {}),
    # the other CIPNP forms pin summary_encoder="separate" (r' from a second SPIN encoder, the paper's
    # and each form's own from before the shared summary became the default)
    "CIPNP-paper": (CIPNP, {"readout": "inducing", "summary_encoder": "separate"}),
    "CIPNP-separate": (CIPNP, {"summary_encoder": "separate"}),  # the default before "shared"
    # lighter forms of the read-out, for the cost clause (0.6x CANP)
    "CIPNP-ff4": (CIPNP, {"readback_ff": 4, "summary_encoder": "separate"}),  # the first default
    "CIPNP-ff1": (CIPNP, {"readback_ff": 1, "summary_encoder": "separate"}),
    "CIPNP-located": (CIPNP, {"readout": "located", "summary_encoder": "separate"}),
    # twice the default's inducing points (h = the range's smallest context, not half of it): does
    # the inducing bottleneck cap what CIPNP reaches with long training?
    "CIPNP-h=m": (CIPNP, {"n_inducing": "min_ctx"}),
    "IPNP": (IPNP, {}),
    "ANP": (ANP, {}),
    "BANP": (BANP, {}),
    "TNPD": (TNPD, {}),
    # CANP with its attention written out (softmax of Q K^T stored, as the reference code and the
    # paper's measurements have it): PyTorch's math kernel for every attention instead of its fused
    # one; a cost probe only (same maths)
    "CANP-dense": (CANP, {}),
}
PRIORITY = ("CIPNP", "CANP", "CIPNP-paper")
PROBE_ONLY = ("CANP-dense",)
LATENT = ("IPNP", "ANP")
# the code these runs depend on: the neural processes and everything they import
NP_MODULES = ("semiparam.neural_processes",)
# the adaptive schedule's settings, named alike in the arguments and in NPTrainConfig
ADAPTIVE_SETTINGS = ("patience", "anneal_fraction", "smoothing", "min_steps", "lr_drops", "drop_factor")
SCHEDULE_ARGS = ("schedule", *ADAPTIVE_SETTINGS)  # passed on to each cell's worker


def write_atomic(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (beside it, then renamed): a report or cell file read or
    committed while the run goes on is never half written."""
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.write_text(text)
    os.replace(staging, path)


def copy_folder(source: Path, target: Path) -> None:
    """Replace the folder ``target`` with a copy of ``source``, copied beside it first and then
    renamed in: a copy cut short (a session stopping mid-copy) never sits at ``target`` as a
    checkpoint to resume from."""
    staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def flag(name: str) -> str:
    """The command-line flag of an argument: ``"min_steps"`` -> ``"--min-steps"``."""
    return "--" + name.replace("_", "-")


def parse_ranges(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in (part.split(":") for part in text.split(",") if part)]


def cell_name(model: str, lo: int, hi: int, seed: int) -> str:
    return f"{model}_{lo}_{hi}_s{seed}"


def build(model: str, args: argparse.Namespace, seed: int) -> Any:
    cls, extra = MODELS[model]
    options: dict[str, Any] = {"d_model": args.d_model, "n_heads": args.n_heads, **extra}
    if options.get("n_inducing") == "min_ctx":  # resolved per cell: the range's smallest context
        options["n_inducing"] = args.range[0]
    if model in LATENT:
        options["d_latent"] = args.d_model
    return cls(random_state=seed, device=args.device, **options)


def eval_batches(kernel: str, lo: int, hi: int, n: int, seed: int) -> list[Any]:
    return GPTaskSampler(kernel, min_ctx=lo, max_ctx=hi, random_state=seed).eval_set(n, 16, seed=seed)


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


# ---- one cell, in its own process ------------------------------------------------------------------


def cell_fit(
    args: argparse.Namespace, model: str, seed: int, checkpoints: Path
) -> tuple[Any, dict[str, Any]]:
    """A cell's estimator and the arguments of its fit (at ``args.range``, checkpointed in
    ``checkpoints``): the same fit resumes an interrupted cell or restores a finished one."""
    lo, hi = args.range
    # the training draws on the model's device (a CUDA device computes their Cholesky); the held-out
    # batches are drawn on the CPU, the same tasks on every device, and moved by the model
    train = GPTaskSampler("rbf", min_ctx=lo, max_ctx=hi, random_state=1000 + seed, device=args.device)
    fit_args = {
        "tasks": train,
        "max_steps": args.steps,
        "learning_rate": args.lr,
        "batch_size": 16,
        "log_every": 50,
        "validation": eval_batches("rbf", lo, hi, args.validation_batches, VALIDATION_SEED),
        "eval_every": args.eval_every,
        "checkpoint_dir": checkpoints,
    }
    if args.schedule == "adaptive":  # flat until a validation plateau, then anneal; --steps a ceiling
        fit_args.update(lr_schedule="adaptive", **{k: getattr(args, k) for k in ADAPTIVE_SETTINGS})
    return build(model, args, seed), fit_args


def worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    lo, hi = args.range
    checkpoints = TMP / "checkpoints" / cell_name(args.model, lo, hi, args.seed)
    model, fit_args = cell_fit(args, args.model, args.seed, checkpoints)
    devices = record_device(checkpoints, device_name(args.device))
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    model.fit(**fit_args)
    history = model.history_
    result: dict[str, Any] = {
        "model": args.model,
        "range": [lo, hi],
        "seed": args.seed,
        "devices": devices,
        "steps": history.n_steps,
        "n_parameters": model.n_parameters,
        "config": model.config_.to_dict(),
        "train_config": model.train_config_.to_dict(),
        "seconds_per_step": history.seconds_per_step,
        "cpu_seconds_this_process": time.process_time() - cpu_start,
        "wall_seconds_this_process": time.perf_counter() - wall_start,
        "curve": {"steps": history.eval_steps, "val_ll": [-v for v in history.val_loss]},
        "best_step": history.best_step,
        "stop_reason": history.stop_reason,
        # not every history has these (getattr keeps older ones readable)
        "anneal_start": getattr(history, "anneal_start", None),
        "lr_drops": getattr(history, "lr_drops", []),
        "loss_history": {"steps": history.steps, "loss": history.loss},
    }
    scores: dict[str, Any] = {}
    for kernel in KERNELS:
        per_batch = [
            model.evaluate([b], n_samples=50)
            for b in eval_batches(kernel, lo, hi, args.eval_batches, EVAL_SEED)
        ]
        scores[kernel] = per_batch
    result["eval_ll_per_batch"] = scores
    write_atomic(Path(args.result), json.dumps(result, indent=1))
    print(f"[cell] {args.model} [{lo},{hi}] seed {args.seed}: rbf {mean(scores['rbf']):.3f}", flush=True)


def record_device(checkpoints: Path, device: str) -> list[dict[str, Any]]:
    """The devices this cell has trained on, this one appended: a run killed and resumed elsewhere
    (begun on an accelerator, finished on the CPU) says so. Kept beside the cell's checkpoints, in
    ``devices.json``."""
    trail = checkpoints / "devices.json"
    devices = json.loads(trail.read_text()) if trail.exists() else []
    devices.append({"device": device, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    checkpoints.mkdir(parents=True, exist_ok=True)
    trail.write_text(json.dumps(devices, indent=1))
    return devices


class Replay:
    """Hands out batches drawn beforehand, in turn (so drawing them is not timed or counted)."""

    def __init__(self, batches: list[Any], min_ctx: int) -> None:
        self.batches, self.min_ctx, self.position = batches, min_ctx, 0

    def sample(self, batch_size: int) -> Any:
        batch = self.batches[self.position % len(self.batches)]
        self.position += 1
        return batch


def probe(args: argparse.Namespace) -> None:
    """Seconds per optimisation step and peak training memory at the range's largest context
    (m = max_ctx, 64 targets, 16 tasks): the batches are drawn first, a warm-up fit runs on a tiny
    batch, then the peak-RSS mark is reset and a fresh model trains ``probe_steps`` steps. Memory is
    the peak RSS growth over those steps (glibc told to hand freed blocks back, so the peak is the
    live peak: weights, activations, gradients, optimiser state); time is the median of the step
    times after the first two (allocation, first-touch), so one slow step does not move it. The
    driver runs every model's probe ``--probe-rounds`` times, round-robin, and reports the medians
    over rounds: a slow spell of the machine falls on every model alike."""
    torch.set_num_threads(args.threads)
    lo, hi = args.range
    sampler = GPTaskSampler("rbf", min_ctx=hi, max_ctx=hi, min_tgt=64, max_tgt=64, random_state=5)
    batches = [sampler.sample(16) for _ in range(args.probe_steps)]
    kernels = contextlib.ExitStack()  # held until the probe returns
    if args.model == "CANP-dense":  # every attention of this process on the written-out kernel
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kernels.enter_context(sdpa_kernel(SDPBackend.MATH))
    warm = GPTaskSampler("rbf", min_ctx=8, max_ctx=8, min_tgt=4, max_tgt=4, random_state=5)
    build(args.model, args, 0).fit(Replay([warm.sample(16)], lo), max_steps=2, batch_size=16)
    reset_peak_rss()
    before = current_rss_bytes()
    model = build(args.model, args, 0)
    ticks = [time.perf_counter()]
    model.fit(
        Replay(batches, lo),
        max_steps=args.probe_steps,
        batch_size=16,
        lr_schedule="constant",
        callback=lambda step, loss: ticks.append(time.perf_counter()) and None,
    )
    step_times = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    result = {
        "model": args.model,
        "range": [lo, hi],
        "context_size": hi,
        "round": args.seed,
        "peak_memory_mb": (peak_rss_bytes() - before) / 2**20,
        "seconds_per_step_at_max": statistics.median(step_times[2:]),
        "step_seconds": step_times,
        "probe_steps": args.probe_steps,
    }
    if args.model == "CANP-dense":
        result["attention_kernel"] = "math"
    kernels.close()
    write_atomic(Path(args.result), json.dumps(result))


def git_commit() -> str:
    """The commit the caller names in ``BENCH_GIT_COMMIT`` (a copy of the tree on a device machine,
    whose own git, if any, can be stale: one such copy reported the session's first commit), else
    this checkout's."""
    if named := os.environ.get("BENCH_GIT_COMMIT"):
        return named
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    if done.returncode != 0:
        return "unknown (no git)"
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], capture_output=True, text=True, cwd=HERE)
    return done.stdout.strip() + ("+uncommitted src changes" if dirty.stdout.strip() else "")


def device_name(device: str) -> str:
    """``"cpu"``, or the accelerator's name (``"cuda: NVIDIA H200"``)."""
    if device.startswith("cuda"):
        return f"cuda: {torch.cuda.get_device_name(torch.device(device))}"
    return device


# ---- report ----------------------------------------------------------------------------------------


def write_report(results: dict[str, Any], out: Path) -> None:
    write_atomic(out, json.dumps(results, indent=1))
    cells = [c for c in results["cells"] if not c.get("failed")]
    settings = results["settings"]
    ranges = parse_ranges(settings["ranges"])
    models = [m for m in settings["models"] if any(c["model"] == m for c in cells)]
    lines = [
        "# Neural processes on GP meta-learning: inducing-point NPs against the attentive baselines",
        "",
        "SPIN paper section 4.2 / Figure 4 at CPU scale: does CIPNP/IPNP match or beat CANP/ANP/BANP in"
        " target log-likelihood, at what cost? Generated by `benchmarks/np_convergence.py` from"
        " `np_convergence.json`.",
        "",
        f"- Command: `{results['command']}`",
        f"- Code: git {results['git_commit']}, neural-process code hash {results['np_code_hash']}",
        *([f"- How some runs were made: {results['provenance']}"] if results.get("provenance") else []),
        f"- Machine: {results['machine'].get('cpu')}, {results['machine'].get('cpu_count')} cores,"
        f" torch {results['machine']['versions'].get('torch')}, {settings['threads']} thread per run,"
        + (
            " one run at a time, nothing else heavy on the machine"
            if settings.get("jobs", 1) == 1
            else f" {settings['jobs']} runs at a time sharing the machine"
        )
        + f"; training on {results.get('device', 'cpu')}"
        + (
            ""
            if all(trained_on(c) == results.get("device", "cpu") for c in cells)
            else " except the runs the convergence table names (trained on another device, or begun on one)"
        ),
        f"- Training: {'at most ' if adaptive(settings) else ''}{settings['steps']} steps of 16 RBF tasks"
        " (x ~ U(-2,2), lengthscale ~ U(0.1,0.6),"
        f" scale ~ U(0.1,1), noise 0.02; m ~ U[range], n ~ U[4,64]), Adam, lr {settings['lr']:g}"
        f" {schedule_text(settings)},"
        f" width {settings['d_model']}, {settings['n_heads']} heads; each seed its own task stream and"
        f" initialisation; the weights with the best validation score ({settings['validation_batches']}"
        f" batches x 16 tasks, every {settings['eval_every']} steps) are kept.",
        f"- Evaluation: {settings['eval_batches']} held-out batches x 16 tasks per kernel and range;"
        " mean log-likelihood per target point; latent models and BANP average the likelihood over 50"
        " draws. RBF is the training kernel; Matern-5/2 and periodic are out of distribution. The GP"
        " oracle is the exact posterior with the true kernel and hyper-parameters.",
        "- Error bars: ± standard deviation over seeds (n seeds shown); for one seed (a screened"
        " variant, or a run not finished), ± standard error"
        " over the evaluation batches.",
        "- Models (options beyond the widths): "
        + "; ".join(f"{m} = {describe(m)}" for m in settings["models"] if m in MODELS),
        "",
    ]
    for kernel in KERNELS:
        lines += [f"## Target log-likelihood, {kernel} tasks (higher is better)", ""]
        lines += ["| model | " + " | ".join(f"[{lo},{hi}]" for lo, hi in ranges) + " |"]
        lines += ["|---" * (len(ranges) + 1) + "|"]
        for model in models:
            row = []
            for lo, hi in ranges:
                mine = [c for c in cells if c["model"] == model and c["range"] == [lo, hi]]
                row.append(format_score(mine, kernel))
            lines.append(f"| {model} | " + " | ".join(row) + " |")
        oracle_row = [f"{mean(results['oracle'][f'{lo}_{hi}'][kernel]):.3f}" for lo, hi in ranges]
        lines += ["| GP oracle | " + " | ".join(oracle_row) + " |", ""]
    lines += verdict(cells, results["probes"], ranges)
    lines += gap_table(cells, ranges)
    lines += tried_table(results, out)
    probed = [m for m in settings["models"] if m in models or probe_of(results["probes"], m, *ranges[-1])]
    lines += cost_table(cells, results["probes"], ranges, probed)
    lines += (plateau_table if adaptive(settings) else convergence_table)(cells, models, ranges)
    if results.get("compare_with"):
        lines += budget_table(cells, models, ranges, results["compare_with"], settings)
    lines += pending_lines(results)
    write_atomic(out.with_suffix(".md"), "\n".join(lines) + "\n")
    plot(results, cells, ranges, models, out.with_suffix(".png"))


def describe(model: str) -> str:
    """``CIPNP(readout='inducing', ...)``: the estimator and the options a model name stands for."""
    cls, extra = MODELS[model]
    options = ", ".join(f"{k}={v!r}" for k, v in extra.items())
    kernel = " on PyTorch's math attention kernel" if model in PROBE_ONLY else ""
    return f"`{cls.__name__}({options})`{kernel}"


def pending_lines(results: dict[str, Any]) -> list[str]:
    """The cells of the plan that have no result yet, each with the step its saved checkpoint has
    reached (in this run's folder or kept beside the report): they are in none of the tables."""
    done = {(c["model"], *c["range"], c["seed"]) for c in results["cells"]}
    pending = [cell for cell in plan_from_settings(results["settings"]) if cell not in done]
    if not pending:
        return []
    cells = f"{len(pending)} cells of the plan have" if len(pending) > 1 else "1 cell of the plan has"
    head = f"**{cells} not finished**, so none of the tables above includes them"
    lines = ["", f"{head} (the same command resumes them):", ""]
    for model, lo, hi, seed in pending:
        state = furthest_checkpoint(cell_name(model, lo, hi, seed))
        where = "not begun" if state is None else f"trained {state['step'] + 1} steps so far, checkpointed"
        lines.append(f"- {model} [{lo},{hi}] seed {seed}: {where}")
    return [*lines, ""]


def plan_from_settings(settings: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    return plan(argparse.Namespace(**settings))


def format_score(mine: list[dict[str, Any]], kernel: str) -> str:
    if not mine:
        return "–"
    per_seed = [mean(c["eval_ll_per_batch"][kernel]) for c in mine]
    if len(per_seed) > 1:
        return f"{mean(per_seed):.3f} ± {sd(per_seed):.3f} (n={len(per_seed)})"
    batches = mine[0]["eval_ll_per_batch"][kernel]
    return f"{per_seed[0]:.3f} ± {sd(batches) / math.sqrt(len(batches)):.3f} (1 seed)"


def seed_means(cells: list[dict[str, Any]], model: str, lo: int, hi: int) -> list[float]:
    return [
        mean(c["eval_ll_per_batch"]["rbf"]) for c in cells if c["model"] == model and c["range"] == [lo, hi]
    ]


def seed_batches(cells: list[dict[str, Any]], model: str, lo: int, hi: int) -> dict[int, list[float]]:
    """RBF log-likelihood of each held-out batch, per seed's run of ``model`` at a range."""
    return {
        c["seed"]: c["eval_ll_per_batch"]["rbf"]
        for c in cells
        if c["model"] == model and c["range"] == [lo, hi]
    }


def seed_scores(cells: list[dict[str, Any]], model: str, lo: int, hi: int) -> dict[int, float]:
    """Mean RBF log-likelihood of each seed's run of ``model`` at a range."""
    return {seed: mean(batches) for seed, batches in seed_batches(cells, model, lo, hi).items()}


def probe_of(probes: list[dict[str, Any]], model: str, lo: int, hi: int) -> dict[str, Any] | None:
    """A model's probe at a range: the medians of its seconds per step and peak memory over rounds."""
    mine = [
        p for p in probes if p.get("model") == model and p.get("range") == [lo, hi] and not p.get("failed")
    ]
    if not mine:
        return None
    return {
        "seconds_per_step_at_max": statistics.median(p["seconds_per_step_at_max"] for p in mine),
        "peak_memory_mb": statistics.median(p["peak_memory_mb"] for p in mine),
        "rounds": len(mine),
    }


def paired_gap(cells: list[dict[str, Any]], form: str, lo: int, hi: int) -> str | None:
    """``form`` - CANP in RBF log-likelihood at a range, the mean over the seeds both ran (paired),
    as "+0.003 (beats; 3 seeds)"; "within sd" = behind by less than the larger seed sd of the two;
    None where they share no seed."""
    mine_by_seed, base_by_seed = seed_scores(cells, form, lo, hi), seed_scores(cells, "CANP", lo, hi)
    common = sorted(set(mine_by_seed) & set(base_by_seed))
    a, b = [mine_by_seed[k] for k in common], [base_by_seed[k] for k in common]
    if not a:
        return None
    diff = mean(a) - mean(b)
    spread = max(sd(a) if len(a) > 1 else 0.0, sd(b) if len(b) > 1 else 0.0)
    text = "beats" if diff >= 0 else ("within sd" if diff > -spread else "behind")
    return f"{diff:+.3f} ({text}; {len(a)} seed{'s' if len(a) != 1 else ''})"


def other_runs(out: Path) -> list[Path]:
    """The results of every other run of this benchmark: the report at the results folder's root
    and those in its sub-folders (``--out-dir``), this run's own excepted."""
    root = HERE / "results"
    found = [root / "np_convergence.json", *sorted(root.glob("*/np_convergence.json"))]
    return [f for f in found if f.exists() and f.resolve() != out.resolve()]


def tried_table(results: dict[str, Any], out: Path) -> list[str]:
    """What was tried, run by run, the shortest training first: every CIPNP form any run of this
    benchmark trained, against CANP at each range, under that run's budget and code, and this run's
    own rows last."""
    runs = [(f"`{f.relative_to(HERE.parent)}`", json.loads(f.read_text())) for f in other_runs(out)]
    runs.sort(key=lambda run: (adaptive(run[1]["settings"]), run[1]["settings"]["steps"]))  # shortest first
    runs.append(("this report", results))
    rows, ranges = [], []
    for name, run in runs:
        cells = [c for c in run.get("cells", []) if not c.get("failed") and "eval_ll_per_batch" in c]
        forms = list(dict.fromkeys(c["model"] for c in cells if c["model"].startswith("CIPNP")))
        code = run.get("np_code_hash", "?")
        code = f"{code} (this code)" if code == results["np_code_hash"] else code
        run_ranges = parse_ranges(run["settings"]["ranges"])
        for form in forms:
            gaps = {(lo, hi): g for lo, hi in run_ranges if (g := paired_gap(cells, form, lo, hi))}
            if gaps:
                rows.append((name, code, budget_label(run["settings"]), form, gaps))
                ranges += [r for r in gaps if r not in ranges]
    if not rows:
        return []
    ranges.sort()
    lines = [
        "## What was tried (every run of this benchmark)",
        "",
        "Each CIPNP form any run of `benchmarks/np_convergence.py` in `benchmarks/results/` trained,"
        " minus CANP in RBF log-likelihood at each range (paired over the seeds both ran, as in the"
        " verdict), under that run's training budget and neural-process code; runs of other code than"
        " this report's are history, kept to show what each change bought. The forms are described in"
        " `benchmarks/np_convergence.py` (MODELS) and in each run's own report.",
        "",
        "| run | NP code | budget | CIPNP form | " + " | ".join(f"[{lo},{hi}]" for lo, hi in ranges) + " |",
        "|---" * (len(ranges) + 4) + "|",
    ]
    for name, code, budget, form, gaps in rows:
        cols = " | ".join(gaps.get(r, "–") for r in ranges)
        lines.append(f"| {name} | {code} | {budget} | {form} | {cols} |")
    return lines + [""]


def verdict(
    cells: list[dict[str, Any]], probes: list[dict[str, Any]], ranges: list[tuple[int, int]]
) -> list[str]:
    """The acceptance, for every CIPNP form run (the default first): RBF log-likelihood against
    CANP's per range, and time and memory against CANP's at the largest range."""
    forms = [m for m in MODELS if m.startswith("CIPNP") and any(c["model"] == m for c in cells)]
    lo_max, hi_max = ranges[-1]
    base_probe = probe_of(probes, "CANP", lo_max, hi_max)
    lines = ["## Verdict on the issue's acceptance (CIPNP against CANP)", ""]
    lines += [
        "Accuracy: CIPNP - CANP in RBF log-likelihood (mean over the seeds both ran, paired;"
        ' "within sd" = behind by less than the larger seed sd of the two). Cost: a training step at'
        f" m = {hi_max} (the largest range), as a multiple of CANP's (goal: at most 0.6x each).",
        "",
        "| CIPNP form | "
        + " | ".join(f"[{lo},{hi}] vs CANP" for lo, hi in ranges)
        + " | time / CANP | memory / CANP | all clauses? |",
        "|---" * (len(ranges) + 4) + "|",
    ]
    for form in forms:
        row, accurate = [], True
        for lo, hi in ranges:
            gap = paired_gap(cells, form, lo, hi)
            accurate &= gap is not None and " (behind;" not in gap
            row.append(gap or "not run yet")
        mine = probe_of(probes, form, lo_max, hi_max)
        if mine and base_probe:
            t = mine["seconds_per_step_at_max"] / base_probe["seconds_per_step_at_max"]
            m = mine["peak_memory_mb"] / base_probe["peak_memory_mb"]
            row += [f"{t:.2f}x", f"{m:.2f}x", "yes" if accurate and t <= 0.6 and m <= 0.6 else "no"]
        else:
            row += ["–", "–", "no probe"]
        label = f"{form} (default)" if form == "CIPNP" else form
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    dense, mine = probe_of(probes, "CANP-dense", lo_max, hi_max), probe_of(probes, "CIPNP", lo_max, hi_max)
    if dense and mine and base_probe:
        lines += [
            "",
            "CANP above attends with PyTorch's fused kernel, which never stores the m x m attention"
            " matrix, so its memory is linear in m too. Written out as the reference code has it"
            f" (CANP-dense, a cost probe only), CANP takes {dense['seconds_per_step_at_max']:.3f} s"
            f" and {dense['peak_memory_mb']:.0f} MB per step at m = {hi_max}; against that the default"
            f" CIPNP takes {mine['seconds_per_step_at_max'] / dense['seconds_per_step_at_max']:.2f}x the"
            f" time and {mine['peak_memory_mb'] / dense['peak_memory_mb']:.2f}x the memory.",
        ]
    return lines + [""]


def batch_gaps(cells: list[dict[str, Any]], model: str, lo: int, hi: int) -> list[float]:
    """``model`` - CANP in RBF log-likelihood, batch by batch (the held-out batches are the same
    tasks for every model), pooled over the seeds both ran."""
    mine, base = seed_batches(cells, model, lo, hi), seed_batches(cells, "CANP", lo, hi)
    return [
        a - b for seed in sorted(set(mine) & set(base)) for a, b in zip(mine[seed], base[seed], strict=True)
    ]


def gap_table(cells: list[dict[str, Any]], ranges: list[tuple[int, int]]) -> list[str]:
    """Whether the default CIPNP's difference from CANP is spread over the tasks or made by a few:
    the mean of the paired per-batch differences beside their median and extremes."""
    rows = [(lo, hi, gaps) for lo, hi in ranges if (gaps := batch_gaps(cells, "CIPNP", lo, hi))]
    if not rows:
        return []
    lines = [
        "## Where the difference lies (CIPNP - CANP, batch by batch)",
        "",
        "RBF log-likelihood of the default CIPNP minus CANP's on the same held-out batch (16 tasks"
        " each), pooled over the seeds both ran. A mean far below the median means a few batches"
        " make the difference; a median near the mean means it is spread over the tasks.",
        "",
        "| range | batches | mean | median | worst | best | batches CIPNP ahead |",
        "|---|---|---|---|---|---|---|",
    ]
    for lo, hi, gaps in rows:
        ahead = sum(g > 0 for g in gaps)
        lines.append(
            f"| [{lo},{hi}] | {len(gaps)} | {mean(gaps):+.3f} | {statistics.median(gaps):+.3f}"
            f" | {min(gaps):+.3f} | {max(gaps):+.3f} | {ahead} of {len(gaps)} |"
        )
    return lines + [""]


def cost_table(cells, probes, ranges, models) -> list[str]:  # noqa: ANN001
    lines = [
        "## Cost",
        "",
        "Probe: optimisation steps of 16 tasks at the range's largest context (m = max, 64 targets),"
        " drawn beforehand, fresh process, after a warm-up; the median step time (the first two steps"
        " dropped) and the peak RSS growth (glibc"
        " returns freed blocks); medians over the probe rounds, all run in one invocation, so these columns"
        " compare models. Training: mean seconds per optimisation step over the whole run (m varies;"
        " drawing the GP tasks excluded), seed 0, as its own run measured it: runs of different"
        " invocations may have had different machines, so compare models by the probe columns.",
        "",
        "| range | model | params | probe s/step | / CANP | probe peak MB | / CANP | training s/step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lo, hi in ranges:
        base = probe_of(probes, "CANP", lo, hi)
        for model in models:
            p = probe_of(probes, model, lo, hi)
            run = next((c for c in cells if c["model"] == model and c["range"] == [lo, hi]), None)
            if p is None and run is None:
                continue
            cols = [f"[{lo},{hi}]", model, f"{run['n_parameters']:,}" if run else "–"]
            if p:
                cols.append(f"{p['seconds_per_step_at_max']:.3f}")
                cols.append(
                    f"{p['seconds_per_step_at_max'] / base['seconds_per_step_at_max']:.2f}" if base else "–"
                )
                cols.append(f"{p['peak_memory_mb']:.0f}")
                cols.append(f"{p['peak_memory_mb'] / base['peak_memory_mb']:.2f}" if base else "–")
            else:
                cols += ["–"] * 4
            where = trained_on(run) if run else "cpu"
            if run and where != "cpu":  # an accelerator's time, or several devices' together
                mixed = " then " in where
                cols.append("– (mixed)" if mixed else f"{run['seconds_per_step']:.3f} ({where})")
            else:
                cols.append(f"{run['seconds_per_step']:.3f}" if run else "–")
            lines.append("| " + " | ".join(cols) + " |")
    return lines + [""]


def trained_on(cell: dict[str, Any]) -> str:
    """The device(s) a cell trained on, in order (``cpu``; ``cuda: NVIDIA H200 then cpu``)."""
    devices = [d["device"] for d in cell.get("devices", [])] or ["cpu"]  # cells from before: the CPU
    return " then ".join(d for k, d in enumerate(devices) if k == 0 or d != devices[k - 1])


def adaptive(settings: dict[str, Any]) -> bool:
    return settings.get("schedule", "cosine") == "adaptive"  # runs from before the option: cosine


def schedule_text(settings: dict[str, Any]) -> str:
    """The learning-rate schedule of a run's settings, in words."""
    if not adaptive(settings):
        return "cosine to 0"
    drops = settings.get("lr_drops", 0)  # runs from before the option: none
    steps_down = (
        f"; each of the first {drops} such plateaus multiplies the rate by {settings['drop_factor']:g}"
        " and the plateau rule starts afresh on the lower rate's scores, the next one"
        if drops
        else ", then"
    )
    return (
        f"flat until the validation score (smoothed: EMA weight {settings['smoothing']:g} on the past) has"
        f" not improved by 0.1% for {settings['patience']} evaluations (none declared before step"
        f" {settings['min_steps']}){steps_down} starts a cosine to 0 over {settings['anneal_fraction']:g}"
        f" x the steps run (a plateau stop); at {settings['steps']} steps at most (the anneal starts in"
        " time to end there: a ceiling stop, not converged)"
    )


def budget_label(settings: dict[str, Any]) -> str:
    """A run's training budget in a column head: "20000 steps" or "plateau (<= 100000)"."""
    return f"plateau (<= {settings['steps']})" if adaptive(settings) else f"{settings['steps']} steps"


def runs_in_order(cells, models, ranges):  # noqa: ANN001, ANN201
    """``(model, lo, hi, cell)`` for each run, model by model, range by range, in the cells' order."""
    for model in models:
        for lo, hi in ranges:
            for c in cells:
                if c["model"] == model and c["range"] == [lo, hi]:
                    yield model, lo, hi, c


def stage_bests(cell: dict[str, Any]) -> list[float]:
    """The best validation log-likelihood at each learning rate of an adaptive run, in order: the
    flat rate, each lower rate (``lr_drops``), then the anneal."""
    steps, ll = cell["curve"]["steps"], cell["curve"]["val_ll"]
    bounds = [0, *cell.get("lr_drops", []), cell["anneal_start"], math.inf]
    return [
        max((v for s, v in zip(steps, ll, strict=True) if a <= s < b), default=float("nan"))
        for a, b in itertools.pairwise(bounds)
    ]


def plateau_table(cells, models, ranges) -> list[str]:  # noqa: ANN001
    """The adaptive schedule's convergence: why each run stopped (a plateau, or the step ceiling),
    the best validation score at each learning rate, and what the last change of rate bought."""
    lines = [
        "## Convergence",
        "",
        "Each run trained at a flat learning rate until its validation log-likelihood (RBF) stopped"
        " improving, stepped the rate down at each such plateau while steps down were left, and then"
        ' annealed. Stop "plateau": it stopped improving at its last rate (the anneal then settles the'
        ' weights); "max_steps": the ceiling came first, so the run may be short of convergence. Best'
        " per rate: the best validation score at the flat rate, at each lower rate and in the anneal;"
        " last gain: what the last change of rate bought (small: converged).",
        "",
        "| model | range | seed | stop | lower rate from step | anneal from step | best per rate"
        " | last gain | best step / steps | trained on |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, lo, hi, c in runs_in_order(cells, models, ranges):
        if not c["curve"]["steps"] or c.get("anneal_start") is None:
            continue
        bests = stage_bests(c)
        drops = ", ".join(map(str, c.get("lr_drops", []))) or "–"
        lines.append(
            f"| {model} | [{lo},{hi}] | {c['seed']} | {c['stop_reason'].split(',')[0]} | {drops} |"
            f" {c['anneal_start']} | {' / '.join(f'{b:.3f}' for b in bests)} |"
            f" {bests[-1] - bests[-2]:+.3f} | {c['best_step']} / {c['steps']} | {trained_on(c)} |"
        )
    return lines + [""]


def convergence_table(cells, models, ranges) -> list[str]:  # noqa: ANN001
    lines = [
        "## Convergence",
        "",
        "Validation log-likelihood (RBF) at the half-way point and at the end, the gain over the second half,"
        " and the step of the weights kept, per run. A small second-half gain against the first half's"
        " means the run is near its plateau under this schedule.",
        "",
        "| model | range | seed | val ll at 1/2 | val ll at end | 2nd-half gain | best step / steps"
        " | trained on |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, lo, hi, c in runs_in_order(cells, models, ranges):
        steps, ll = c["curve"]["steps"], c["curve"]["val_ll"]
        if not steps:
            continue
        half = min(range(len(steps)), key=lambda i: abs(steps[i] - steps[-1] / 2))
        lines.append(
            f"| {model} | [{lo},{hi}] | {c['seed']} | {ll[half]:.3f} | {ll[-1]:.3f} |"
            f" {ll[-1] - ll[half]:+.3f} | {c['best_step']} / {c['steps']} | {trained_on(c)} |"
        )
    return lines + [""]


def budget_table(cells, models, ranges, other: str, settings: dict[str, Any]) -> list[str]:  # noqa: ANN001
    """This run's RBF log-likelihood beside another run's of the same models, ranges and seeds
    (e.g. a shorter schedule): what the longer training bought, per seed and on average."""
    path = Path(other) if Path(other).is_absolute() else HERE.parent / other
    theirs = json.loads(path.read_text())
    other_cells = [c for c in theirs["cells"] if not c.get("failed")]
    before, now = budget_label(theirs["settings"]), budget_label(settings)
    lines = [
        f"## Against the runs of `{other}` ({before})",
        "",
        "RBF target log-likelihood of the same model, range and seed (same initialisation and task"
        f" stream) after {before}, {schedule_text(theirs['settings'])}, and after {now},"
        f" {schedule_text(settings)}: the gain is what the other training bought. Mean ± sd over the"
        " seeds both ran. The CIPNP - CANP rows: the acceptance's paired difference at each budget,"
        " over the seeds all four runs share, and how the other training changed it.",
        "",
        f"| model | range | seeds | {before} | {now} | gain |",
        "|---|---|---|---|---|---|",
    ]
    for model in models:
        for lo, hi in ranges:
            mine, short = seed_scores(cells, model, lo, hi), seed_scores(other_cells, model, lo, hi)
            common = sorted(set(mine) & set(short))
            if not common:
                continue
            a, b = [short[k] for k in common], [mine[k] for k in common]
            gains = [y - x for x, y in zip(a, b, strict=True)]
            cols = [f"{mean(v):{sign}.3f}" + (f" ± {sd(v):.3f}" if len(v) > 1 else "") for v, sign in
                    ((a, ""), (b, ""), (gains, "+"))]  # fmt: skip
            lines.append(f"| {model} | [{lo},{hi}] | {len(common)} | " + " | ".join(cols) + " |")
    if "CIPNP" in models and "CANP" in models:  # the acceptance's difference at both budgets
        for lo, hi in ranges:
            runs = [seed_scores(c, m, lo, hi) for c in (other_cells, cells) for m in ("CIPNP", "CANP")]
            common = sorted(set.intersection(*(set(r) for r in runs)))
            if not common:
                continue
            short, long = ([r[0][k] - r[1][k] for k in common] for r in (runs[:2], runs[2:]))
            cols = [f"{mean(v):+.3f}" + (f" ± {sd(v):.3f}" if len(v) > 1 else "") for v in (short, long)]
            change = [y - x for x, y in zip(short, long, strict=True)]
            label = f"| CIPNP - CANP | [{lo},{hi}] | {len(common)} | "
            lines.append(label + f"{cols[0]} | {cols[1]} | {mean(change):+.3f} |")
    return lines + [""]


def plot(results, cells, ranges, models, path: Path) -> None:  # noqa: ANN001
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 1 + len(ranges), figsize=(5.2 * (1 + len(ranges)), 4))
    labels = [f"[{lo},{hi}]" for lo, hi in ranges]
    for k, model in enumerate(models):
        ys, es = [], []
        for lo, hi in ranges:
            v = seed_means(cells, model, lo, hi)
            ys.append(mean(v) if v else float("nan"))
            es.append(sd(v) if len(v) > 1 else 0.0)
        xs = [i + 0.06 * (k - len(models) / 2) for i in range(len(ranges))]
        axes[0].errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=model)
    axes[0].plot(
        range(len(ranges)),
        [mean(results["oracle"][f"{lo}_{hi}"]["rbf"]) for lo, hi in ranges],
        "k--",
        label="GP oracle",
    )
    axes[0].set_xticks(range(len(ranges)), labels)
    axes[0].set_xlabel("context range")
    axes[0].set_ylabel("target log-likelihood, RBF (held out)")
    axes[0].legend(fontsize=7)
    for ax, (lo, hi) in zip(axes[1:], ranges, strict=True):
        for k, model in enumerate(models):
            for j, c in enumerate(c for c in cells if c["model"] == model and c["range"] == [lo, hi]):
                ax.plot(
                    c["curve"]["steps"],
                    c["curve"]["val_ll"],
                    color=f"C{k}",
                    alpha=0.8,
                    lw=1,
                    label=model if j == 0 else None,
                )
        ax.set_title(f"validation curves, context [{lo},{hi}]")
        ax.set_xlabel("training step")
        ax.set_ylim(bottom=0.0)
        if ax.get_legend_handles_labels()[0]:  # a range with no finished cell yet has no curves
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- the driver ------------------------------------------------------------------------------------


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def sd(values: list[float]) -> float:
    if len(values) < 2:
        return float("nan")
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def plan(args: argparse.Namespace) -> list[tuple[str, int, int, int]]:
    """Every (model, range, seed) to run, in order: the ``first`` models for every seed, then the
    others; within a seed, model by model in ``models`` order, every range; models named in
    ``screened`` (a screening of a variant) run on the first seed only."""
    ranges = parse_ranges(args.ranges)
    screened = set(getattr(args, "screened", None) or [])
    first_names = getattr(args, "first", None) or PRIORITY
    first = [m for m in args.models if m in first_names]
    rest = [m for m in args.models if m not in first_names and m not in PROBE_ONLY]
    cells = []
    for group in (first, rest):
        for seed in args.seeds:
            for m in group:
                if seed == args.seeds[0] or m not in screened:
                    cells += [(m, lo, hi, seed) for lo, hi in ranges]
    return cells


def checkpoint_state(directory: Path) -> dict[str, Any] | None:
    """The training state saved in a cell's checkpoint folder, or None when it has none. Read without
    :meth:`TrainingCheckpoint.read`'s fingerprint check: ``progress`` does not rebuild each fit."""
    path = directory / STATE_FILE
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)["state"]


def progress_table(args: argparse.Namespace) -> list[str]:
    """Where each cell of the plan stands, for a run that spans sessions: finished (why it stopped),
    in training (steps done, the steps of its lower rates and anneal, its best validation score,
    evaluations since the plateau rule last saw a gain, out of ``--patience``) or not begun. It reads
    the cell files and checkpoints; nothing trains. A checkpoint of other settings is listed as it
    stands, although the run would set it aside and start the cell again."""
    lines = [
        "| model | range | seed | state | steps | lower rate from step | anneal from step"
        " | best val ll (step) | evals without gain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    finished = finished_cells(args, "worker", plan(args))
    for model, lo, hi, seed in plan(args):
        name = cell_name(model, lo, hi, seed)
        head = f"| {model} | [{lo},{hi}] | {seed} |"
        if cell := finished.get((model, lo, hi, seed)):
            best = max(cell["curve"]["val_ll"], default=float("nan"))
            drops = ", ".join(map(str, cell.get("lr_drops", []))) or "–"
            lines.append(
                f"{head} finished ({cell.get('stop_reason') or 'max_steps'}) | {cell['steps']} | {drops} |"
                f" {cell.get('anneal_start') or '–'} | {best:.3f} ({cell['best_step']}) | – |"
            )
            continue
        if (state := furthest_checkpoint(name)) is None:
            lines.append(f"{head} not begun | 0 | – | – | – | – |")
            continue
        history = state["history"]  # 0-based steps in the checkpoint; the report's are 1-based
        drops = ", ".join(str(s + 1) for s in state.get("lr_drops", [])) or "–"
        anneal = "–" if state.get("anneal_start") is None else state["anneal_start"] + 1
        stopper = next((c for c in state.get("callbacks", []) if c and "bad_evals" in c), {})
        waiting = f"{stopper['bad_evals']} of {args.patience}" if "bad_evals" in stopper else "–"
        best = (
            f"{-history['best_val_loss']:.3f} ({history['best_step'] + 1})"
            if history.get("best_step") is not None
            else "–"
        )
        done = "trained, not collected" if state.get("finished") else "training"
        lines.append(f"{head} {done} | {state['step'] + 1} | {drops} | {anneal} | {best} | {waiting} |")
    return lines


def furthest_checkpoint(name: str) -> dict[str, Any] | None:
    """The training state of cell ``name``: this run's checkpoint, or the one a past session kept
    (:func:`kept_checkpoints`) if it is further on; None when it has neither."""
    saved = [checkpoint_state(d) for d in (TMP / "checkpoints" / name, kept_checkpoints() / name)]
    return max(saved, key=lambda state: -1 if state is None else int(state["step"]))


def kept_checkpoints() -> Path:
    """Where ``keep`` puts the checkpoints of unfinished cells: beside the report, in git (the cell
    folder under ``tmp/`` is not), so a run spanning sessions survives a fresh checkout."""
    return RESULTS / "checkpoints"


def saved_step(directory: Path) -> int:
    """The last step (0-based) of the checkpoint in ``directory``; -1 when it has none."""
    state = checkpoint_state(directory)
    return -1 if state is None else int(state["step"])


def keep(args: argparse.Namespace) -> list[str]:
    """Copy the checkpoint folder of every unfinished cell of the plan into :func:`kept_checkpoints`
    (to be committed when a session stops mid-run) and drop the kept copies of cells since finished
    (their result is in the report). A kept copy is replaced only by a later step. Returns one line
    per cell it touched."""
    lines, finished = [], finished_cells(args, "worker", plan(args))
    for model, lo, hi, seed in plan(args):
        name = cell_name(model, lo, hi, seed)
        kept, live = kept_checkpoints() / name, TMP / "checkpoints" / name
        if (model, lo, hi, seed) in finished:
            if kept.exists():
                shutil.rmtree(kept)
                lines.append(f"{name}: finished; its kept checkpoint removed")
            continue
        step = saved_step(live)
        if step < 0 or step <= saved_step(kept):
            continue
        copy_folder(live, kept)
        lines.append(f"{name}: kept at step {step + 1}")
    return lines


def current_or_set_aside(path: Path, checkpoints: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """The finished result at ``path`` when it is current (``cell_is_current``); else None, and a
    stale result is set aside (``*.stale.json``, kept to read) with the checkpoints of the run that
    made it, so that its cell trains again from the first step."""
    if not path.exists():
        return None
    if cell_is_current(cell := json.loads(path.read_text()), args):
        return cell
    path.replace(path.with_suffix(".stale.json"))
    shutil.rmtree(checkpoints, ignore_errors=True)
    return None


def restore_checkpoints(args: argparse.Namespace) -> None:
    """The kept checkpoints (``keep``) of cells this checkout has not finished with this code and
    settings, where its own checkpoint is missing or earlier: a fresh checkout goes on from the step
    the last session kept. A stale result of such a cell is set aside first (as ``run_cell`` would,
    which would then drop the restored checkpoint with the stale run's)."""
    for kept in sorted(kept_checkpoints().glob("*")):
        if not kept.is_dir() or kept.name.startswith("."):
            continue
        live = TMP / "checkpoints" / kept.name
        if current_or_set_aside(TMP / f"worker_{kept.name}.json", live, args) is not None:
            continue
        if (step := saved_step(kept)) > saved_step(live):
            copy_folder(kept, live)
            print(f"[restore] {kept.name}: resumes from the kept checkpoint, step {step + 1}")


def restore_cells(out: Path, args: argparse.Namespace) -> None:
    """The cell files of the committed results, where this checkout has none (the cell folder is not
    in git): a run resumed on a fresh checkout keeps the cells already finished, and a cell
    interrupted mid-training resumes from the checkpoint ``keep`` committed, if any."""
    if out.exists():
        restore_report_cells(out)
    restore_checkpoints(args)


def restore_report_cells(out: Path) -> None:
    """Write the finished cells of the report ``out`` into the cell folder, where it has none."""
    previous = json.loads(out.read_text())
    for kind, key in (("worker", "cells"), ("probe", "probes")):
        for cell in previous.get(key, []):
            if cell.get("failed") or "np_code_hash" not in cell:
                continue
            lo, hi = cell["range"]
            slot = cell.get("round", cell.get("seed", 0))  # a probe's round, a cell's seed
            path = TMP / f"{kind}_{cell_name(cell['model'], lo, hi, slot)}.json"
            if not path.exists():
                path.write_text(json.dumps(cell, indent=1))


def finished_cells(
    args: argparse.Namespace, kind: str, todo: list[tuple[str, int, int, int]]
) -> dict[tuple[str, int, int, int], dict[str, Any]]:
    """The cells of ``todo`` (``kind`` worker or probe) whose finished result is current, in order."""
    out = {}
    for model, lo, hi, slot in todo:
        path = TMP / f"{kind}_{cell_name(model, lo, hi, slot)}.json"
        if path.exists() and cell_is_current(cell := json.loads(path.read_text()), args):
            out[(model, lo, hi, slot)] = cell
    return out


def np_package() -> Path:
    """The folder of the imported ``semiparam`` package: the sources this process runs, which
    ``np_source_digest`` hashes and ``adopt`` compares (``PYTHONPATH`` may point at another tree
    than the one holding this script)."""
    return Path(semiparam.__file__).resolve().parent


def np_source_digest() -> str:
    """sha256 (16 hex digits) of the paths and bytes of every file ``code_hash`` reads for
    ``NP_MODULES`` in the imported package. Unlike ``code_hash``, which hashes the running Python's
    syntax trees, it is the same under any Python: a copy of this tree on a machine with another
    Python (a device machine) knows the finished cells of this code for its own, instead of setting
    them aside as stale and training them again."""
    root = np_package()
    h = hashlib.sha256()
    for path in import_closure(root, NP_MODULES):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def stamp_source_digest(args: argparse.Namespace) -> None:
    """Give every finished cell file of this code (its ``np_code_hash`` is this run's) that lacks it
    this checkout's ``np_source_digest``: the report then carries it, and a run of this tree under
    another Python reuses the cell (``cell_is_current``). The digest names the sources of the
    checkout that recognised the cell by its hash, which strips docstrings: a cell made at an
    earlier commit differing only in docstrings carries this checkout's digest."""
    for path in sorted(TMP.glob("*.json")):
        cell = json.loads(path.read_text())
        if cell.get("np_code_hash") == args.np_code_hash and "np_source_digest" not in cell:
            cell["np_source_digest"] = args.np_source_digest
            write_atomic(path, json.dumps(cell, indent=1))


def cell_is_current(cell: dict[str, Any], args: argparse.Namespace) -> bool:
    """A finished cell is reused only when the code it ran and its settings are this invocation's.
    The code is this one's when its hash is this Python's hash of it, or its sources' digest is
    this checkout's (the same files under another Python, whose syntax trees hash differently)."""
    same_hash = cell.get("np_code_hash") == args.np_code_hash
    if not same_hash and cell.get("np_source_digest") != args.np_source_digest:
        return False
    if "train_config" not in cell:  # a probe: timed as the median of per-step times since "round"
        return (
            cell.get("widths") == [args.d_model, args.n_heads]
            and "round" in cell
            and cell.get("probe_steps") == args.probe_steps
            and (cell.get("model") != "CANP-dense" or cell.get("attention_kernel") == "math")
        )
    train, config = cell["train_config"], cell["config"]
    adaptive_same = all(train.get(k) == getattr(args, k) for k in ADAPTIVE_SETTINGS)
    return (
        train["max_steps"] == args.steps
        and math.isclose(train["learning_rate"], args.lr)
        and train["eval_every"] == args.eval_every
        and [config["d_model"], config["n_heads"]] == [args.d_model, args.n_heads]
        and train.get("lr_schedule", "cosine") == args.schedule  # cells from before the option: cosine
        and (args.schedule != "adaptive" or adaptive_same)
    )


def cell_command(
    kind: str, model: str, lo: int, hi: int, seed: int, result: Path, options: list[str]
) -> list[str]:
    """The command line of one cell's subprocess (``kind`` worker or probe)."""
    cell = ["--model", model, "--range", str(lo), str(hi), "--seed", str(seed), "--result", str(result)]
    return [sys.executable, __file__, kind, *cell, *options]


def run_cell(args: argparse.Namespace, kind: str, model: str, lo: int, hi: int, seed: int) -> dict[str, Any]:
    """Run one cell in a subprocess, or reuse its finished result when it is current; a result of
    other code or settings is set aside (``*.stale.json``) and the cell runs again."""
    name = cell_name(model, lo, hi, seed)
    path = TMP / f"{kind}_{name}.json"
    if (cell := current_or_set_aside(path, TMP / "checkpoints" / name, args)) is not None:
        return cell
    command = cell_command(kind, model, lo, hi, seed, path, sys.argv_worker)  # type: ignore[attr-defined]
    env = dict(os.environ)
    if kind == "probe":
        env.update(MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0", MALLOC_ARENA_MAX="1")
    done = subprocess.run(command, check=False, env=env)
    if done.returncode != 0:
        return {
            "model": model,
            "range": [lo, hi],
            "seed": seed,
            "failed": True,
            "returncode": done.returncode,
        }
    cell = json.loads(path.read_text())
    cell.update(
        np_code_hash=args.np_code_hash,
        np_source_digest=args.np_source_digest,
        git_commit=args.git_commit,
        widths=[args.d_model, args.n_heads],
    )
    write_atomic(path, json.dumps(cell, indent=1))
    return cell


def adopt(args: argparse.Namespace, source: Path) -> None:
    """Take in the cells of a run made elsewhere (a device machine's copy of this tree): ``source``
    is that run's cell folder (``.../tmp/np_convergence``). A cell's neural-process sources (every
    file ``code_hash`` reads for ``NP_MODULES``) must equal this checkout's, byte for byte: its
    ``np_source_digest`` is this checkout's, or else its commit's files are; then each finished cell
    is restamped with this checkout's hash, keeping the device's hash and commit under
    ``restamped`` (another Python hashes the same syntax differently, see ``code_hash``), and the
    checkpoints of unfinished cells are copied so that ``--resume`` goes on from them here. Cells
    this folder already has are kept as they are."""
    package = np_package()
    top = ["git", "rev-parse", "--show-toplevel"]
    root = Path(subprocess.run(top, cwd=package, capture_output=True, text=True, check=True).stdout.strip())
    files = [str(f.relative_to(root)) for f in import_closure(package, NP_MODULES)]
    finished = {f.name: json.loads(f.read_text()) for f in sorted(source.glob("worker_*.json"))}
    finished = {n: c for n, c in finished.items() if "." not in n.removesuffix(".json")}  # not set aside
    # a cell whose sources' digest is this checkout's needs no comparison; else one per commit
    compare = {n: c for n, c in finished.items() if c.get("np_source_digest") != args.np_source_digest}
    differs = {
        commit: subprocess.run(["git", "diff", "--quiet", commit, "--", *files], cwd=root).returncode != 0
        for commit in {cell.get("git_commit", "") for cell in compare.values()}
    }
    for name, cell in finished.items():
        commit = cell.get("git_commit", "")
        if name in compare and differs[commit]:
            print(f"[adopt] {name}: NP sources at {commit!r} differ from this checkout's; not adopted")
            continue
        if (TMP / name).exists():
            print(f"[adopt] {name}: this folder has the cell already; kept")
            continue
        if cell["np_code_hash"] != args.np_code_hash:
            cell["restamped"] = {
                "np_code_hash_on_device": cell["np_code_hash"],
                "git_commit_on_device": commit,
                "why": f"trained from commit {commit}, whose NP sources are byte-identical to this"
                " checkout's: the hashes differ by the Python that parsed them",
            }
            cell["np_code_hash"] = args.np_code_hash
        write_atomic(TMP / name, json.dumps(cell, indent=1))
        # a local start of the same cell, if any, is superseded by the finished one
        local_start = TMP / "checkpoints" / name.removeprefix("worker_").removesuffix(".json")
        shutil.rmtree(local_start, ignore_errors=True)
        print(f"[adopt] {name}: adopted")
    for checkpoints in sorted((source / "checkpoints").glob("*")):
        cell_file = f"worker_{checkpoints.name}.json"
        if cell_file in finished or (TMP / cell_file).exists():
            continue
        copy_folder(checkpoints, TMP / "checkpoints" / checkpoints.name)
        print(f"[adopt] {checkpoints.name}: unfinished; its checkpoints copied to resume here")


def oracle(ranges: list[tuple[int, int]], n: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for lo, hi in ranges:
        out[f"{lo}_{hi}"] = {
            kernel: [
                float(gp_log_likelihood(b, kernel, NOISE_STD).nanmean())
                for b in eval_batches(kernel, lo, hi, n, EVAL_SEED)
            ]
            for kernel in KERNELS
        }
    return out


def main() -> None:
    global RESULTS, TMP
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kinds = ("driver", "worker", "probe", "report", "progress", "keep")
    parser.add_argument("kind", nargs="?", default="driver", choices=kinds)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--ranges", default="64:128,128:256")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--screened", default="", help="models (of --models) run on the first seed only, a screening"
    )
    parser.add_argument(
        "--first", default=",".join(PRIORITY), help="models (of --models) run on every seed before the others"
    )
    parser.add_argument("--steps", type=int, default=4000, help="steps (with --schedule adaptive: a ceiling)")
    parser.add_argument(
        "--schedule",
        choices=("cosine", "adaptive"),
        default="cosine",
        help="cosine to 0 over --steps, or flat until a validation plateau and then an anneal",
    )
    parser.add_argument("--patience", type=int, default=20, help="adaptive: evaluations without improvement")
    parser.add_argument("--anneal-fraction", type=float, default=0.5, help="adaptive: anneal / steps run")
    parser.add_argument("--smoothing", type=float, default=0.8, help="adaptive: EMA weight, plateau rule")
    parser.add_argument("--min-steps", type=int, default=0, help="adaptive: no plateau before this step")
    parser.add_argument(
        "--lr-drops", type=int, default=0, help="adaptive: plateaus that lower the rate first"
    )
    parser.add_argument("--drop-factor", type=float, default=0.3, help="adaptive: the rate's factor per drop")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--validation-batches", type=int, default=8)
    parser.add_argument("--eval-batches", type=int, default=32)
    parser.add_argument("--probe-steps", type=int, default=12)
    parser.add_argument("--probe-rounds", type=int, default=3, help="round-robin repeats of every probe")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="where cells train (cuda needs --probe-rounds 0)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="cells run at a time (1 for timings; more shares the machine)"
    )
    parser.add_argument("--resume", action="store_true", help="keep finished cells (always on for cells)")
    parser.add_argument(
        "--adopt",
        type=Path,
        metavar="DIR",
        help="take in the cells of a run made elsewhere (DIR: its tmp/np_convergence folder), then stop",
    )
    parser.add_argument("--probes-only", action="store_true", help="run the cost probes, not the cells")
    parser.add_argument(
        "--provenance",
        metavar="TEXT",
        help="with report: how runs begun elsewhere were made (machine, command), printed in the report",
    )
    parser.add_argument(
        "--compare-with",
        metavar="JSON",
        help="another run's results (e.g. benchmarks/results/np_convergence.json): the report sets this"
        " run's log-likelihoods beside its own, model by model",
    )
    parser.add_argument(
        "--out-dir", type=Path, default=RESULTS, help="where results go (default: benchmarks/results)"
    )
    # worker-only
    parser.add_argument("--model")
    parser.add_argument("--range", type=int, nargs=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--result")
    args = parser.parse_args()
    RESULTS, TMP = args.out_dir, args.out_dir / "tmp" / "np_convergence"
    if args.kind in ("worker", "probe"):
        (worker if args.kind == "worker" else probe)(args)
        return
    previous = RESULTS / "np_convergence.json"
    if args.kind == "report" and previous.exists():  # the settings of the run being reported
        for key, value in json.loads(previous.read_text())["settings"].items():
            listed = key in ("models", "seeds", "screened", "first")
            setattr(args, key, ",".join(map(str, value)) if listed else value)
    args.models = [m for m in args.models.split(",") if m]
    args.screened = [m for m in args.screened.split(",") if m]
    args.first = [m for m in args.first.split(",") if m]
    if stray := sorted(set(args.screened) - set(args.models)):
        parser.error(f"--screened names models not in --models: {stray}")
    unknown = (set(args.models) | set(args.first)) - set(MODELS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; choose from {list(MODELS)}")
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.device != "cpu" and args.probe_rounds and args.kind == "driver":
        parser.error("--device other than cpu needs --probe-rounds 0 (the probes measure the CPU's memory)")
    sys.argv_worker = [  # type: ignore[attr-defined]
        "--steps", str(args.steps), "--lr", str(args.lr), "--d-model", str(args.d_model),
        "--n-heads", str(args.n_heads), "--eval-every", str(args.eval_every),
        *itertools.chain.from_iterable((flag(k), str(getattr(args, k))) for k in SCHEDULE_ARGS),
        "--validation-batches", str(args.validation_batches), "--eval-batches", str(args.eval_batches),
        "--probe-steps", str(args.probe_steps), "--threads", str(args.threads), "--device", args.device,
        "--out-dir", str(args.out_dir),
    ]  # fmt: skip
    TMP.mkdir(parents=True, exist_ok=True)
    skip = ("kind", "model", "range", "seed", "result", "out_dir")
    skip += ("probes_only", "compare_with", "provenance", "adopt")
    settings = {k: v for k, v in vars(args).items() if k not in skip}
    args.np_code_hash, args.git_commit = code_hash(modules=NP_MODULES), git_commit()
    args.np_source_digest = np_source_digest()
    meta = {
        "git_commit": args.git_commit,
        "command": "python benchmarks/np_convergence.py " + " ".join(sys.argv[1:]),
        "settings": settings,
        "machine": machine_info(),
        "np_code_hash": args.np_code_hash,
        "np_source_digest": args.np_source_digest,
        "compare_with": args.compare_with,
    }
    if args.kind == "progress":  # the invocation's own plan and settings, as the driver would run them
        print("\n".join(progress_table(args)))
        return
    if args.kind == "keep":
        print("\n".join(keep(args)) or "[keep] nothing to keep")
        return
    if args.kind == "report" and previous.exists():  # the run's command, commit and machine, not ours
        old = json.loads(previous.read_text())
        meta.update({k: old[k] for k in ("git_commit", "command", "machine")})
        meta["device"] = old.get("device", "cpu")
        meta["provenance"] = args.provenance or old.get("provenance")
        meta["compare_with"] = args.compare_with or old.get("compare_with")
    else:
        meta["device"] = device_name(args.device)
    if args.adopt:
        adopt(args, args.adopt)
        return
    ranges = parse_ranges(args.ranges)
    out = RESULTS / "np_convergence.json"
    restore_cells(out, args)
    stamp_source_digest(args)
    started = time.time()
    results: dict[str, Any] = {**meta, "cells": [], "probes": [], "oracle": oracle(ranges, args.eval_batches)}
    order = {cell: k for k, cell in enumerate(plan(args))}
    # the finished cells go in every report from the first, not when a pool thread reaches them
    # behind the cells in training: a report committed mid-run is then whole, and a fresh checkout
    # takes them back from it (restore_cells)
    finished = finished_cells(args, "worker", list(order))
    results["cells"] = list(finished.values())
    if args.kind == "driver":
        for round_ in range(args.probe_rounds):
            for lo, hi in ranges:
                for model in args.models:
                    results["probes"].append(run_cell(args, "probe", model, lo, hi, round_))
                    write_report(results, out)
        if args.probes_only:
            return
    if args.kind == "report":  # the finished, current cells only; nothing runs
        probes = [(m, lo, hi, r) for r in range(args.probe_rounds) for lo, hi in ranges for m in args.models]
        results["probes"] = list(finished_cells(args, "probe", probes).values())
        write_report(results, out)
        return
    write_report(results, out)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:  # subprocesses do the work
        running = [pool.submit(run_cell, args, "worker", *cell) for cell in order if cell not in finished]
        for done in concurrent.futures.as_completed(running):
            results["cells"].append(done.result())
            results["cells"].sort(key=lambda c: order[(c["model"], *c["range"], c["seed"])])
            results["wall_seconds_this_invocation"] = time.time() - started
            write_report(results, out)


if __name__ == "__main__":
    main()
