"""Neural processes on GP meta-learning: the inducing-point NPs against the attentive baselines.

The SPIN paper's claim (section 4.2, Figure 4): CIPNP/IPNP reach a target log-likelihood at least
CANP/ANP/BANP's at most context ranges, at up to half the cost. Each model is trained on RBF GP tasks
per context range and seed, then scored on held-out RBF, Matern-5/2 and periodic tasks beside the exact
GP posterior. The report: log-likelihood per kernel; the verdict (each CIPNP form minus CANP, paired
over seeds; its step's time and memory against CANP's); the head-to-head batch by batch (gaps, wins);
the cost; each run's convergence (its best validation score per stage of its schedule, the last
stage's gain); a figure of the RBF log-likelihood per range (Figure 4).

Each (model, range, seed) trains in its own process (``harness.run_cell``), checkpointed under
``benchmarks/results/tmp/np_convergence/``: a stopped run resumes where it stopped, mid-cell too, and
a failed cell is retried. The cost probes run first, one at a time, on the CPU::

    python benchmarks/np_convergence.py --steps 3000
    python benchmarks/np_convergence.py --out-dir benchmarks/results/np_converged --models CIPNP,CANP \\
        --seeds 2,0,1 --steps 150000 --schedule adaptive --patience 20 --smoothing 0.8 \\
        --min-steps 10000 --lr-drops 2 --drop-factor 0.3 --anneal-fraction 0.1 --jobs 2

Output: ``<out-dir>/np_convergence.{md,json,png}`` and the records, ``.jsonl``. ``--device cuda --jobs N``
trains N cells at a time on a GPU."""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from statistics import fmean as mean
from types import SimpleNamespace
from typing import Any

import harness as h

from semiparam.neural_processes import ANP, BANP, CANP, CIPNP, IPNP, TNPD, GPTaskSampler, gp_log_likelihood

TITLE = "Neural processes on GP meta-learning: inducing-point NPs against the attentive baselines"
CHECKPOINTS = h.RESULTS / "tmp" / "np_convergence"  # one folder per cell, named by its record key
KERNELS = ("rbf", "matern52", "periodic")
NOISE_STD, EVAL_SEED, VALIDATION_SEED = 0.02, 0, 1
MODELS: dict[str, tuple[Any, dict[str, Any]]] = {  # name -> (estimator, options beyond the widths)
    "CIPNP": (CIPNP, {}),
    "CANP": (CANP, {}),
    "CIPNP-paper": (CIPNP, {"readout": "inducing", "summary_encoder": "separate"}),  # the paper's CIPNP
    "IPNP": (IPNP, {}),
    "ANP": (ANP, {}),
    "BANP": (BANP, {}),
    "TNPD": (TNPD, {}),
    # earlier forms of the library's CIPNP (semiparam.models.ipnp)
    "CIPNP-separate": (CIPNP, {"summary_encoder": "separate"}),
    "CIPNP-ff4": (CIPNP, {"readback_ff": 4, "summary_encoder": "separate"}),
    "CIPNP-ff1": (CIPNP, {"readback_ff": 1, "summary_encoder": "separate"}),
    "CIPNP-located": (CIPNP, {"readout": "located", "summary_encoder": "separate"}),
}
# fmt: off
OPTIONS = {  # the other flags and their defaults (--probe-rounds 0: no probes; --jobs: cells at a time)
    "steps": 4000, "lr": 1e-3, "d_model": 64, "n_heads": 4, "eval_every": 250, "validation_batches": 8,
    "eval_batches": 32, "probe_steps": 12, "probe_rounds": 3, "threads": 1, "jobs": 1, "timeout": 7 * 86400.0,
}
# the adaptive schedule (--schedule adaptive): flat until the validation score, smoothed, has not improved
# for `patience` evaluations (none declared before `min_steps`); the first `lr_drops` such plateaus multiply
# the rate by `drop_factor`, the next starts a cosine to 0 over `anneal_fraction` x the steps run
SCHEDULE = {"patience": 20, "anneal_fraction": 0.5, "smoothing": 0.8, "min_steps": 0, "lr_drops": 0,
            "drop_factor": 0.3}
# fmt: on
FIT = ("max_steps", "learning_rate", "lr_schedule", "eval_every", *SCHEDULE)  # settings passed to fit
# glibc hands freed blocks back at once, so a probe's peak RSS is its live peak
PROBE_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "1"}


def build(s: dict[str, Any], seed: int, device: str) -> Any:
    cls, extra = MODELS[s["model"]]
    kw = {"d_latent": s["d_model"]} if s["model"] in ("IPNP", "ANP") else {}
    return cls(random_state=seed, device=device, d_model=s["d_model"], n_heads=s["n_heads"], **kw, **extra)


def held_out(kernel: str, lo: int, hi: int, n: int, seed: int) -> list[Any]:
    """The same held-out batches of 16 tasks for every model and device (drawn on the CPU)."""
    return GPTaskSampler(kernel, min_ctx=lo, max_ctx=hi, random_state=seed).eval_set(n, 16, seed=seed)


def train(checkpoint: str, **s: Any) -> dict[str, Any]:
    """Train one cell (the best validation weights kept), then score it on every kernel's batches."""
    lo, hi, seed = s["lo"], s["hi"], s["seed"]
    model = build(s, seed, s["device"])
    sampler = GPTaskSampler("rbf", min_ctx=lo, max_ctx=hi, random_state=1000 + seed, device=s["device"])
    validation = held_out("rbf", lo, hi, s["validation_batches"], VALIDATION_SEED)
    fit = {k: s[k] for k in FIT if k in s}
    if fit.get("lr_schedule") == "cosine":  # TrainConfig's flat_cosine, flat for none of the run (the
        fit["lr_schedule"] = "flat_cosine"  # neural-process preset's flat_fraction): the records' name
    model.fit(sampler, batch_size=16, validation=validation, checkpoint_dir=checkpoint, **fit)
    history, scores = model.history_, {k: held_out(k, lo, hi, s["eval_batches"], EVAL_SEED) for k in KERNELS}
    return {
        # seconds per step: the whole run's (a resumed fit's history goes on from its checkpoint)
        **{k: getattr(history, k) for k in ("n_steps", "seconds_per_step", "best_step", "anneal_start")},
        **{k: getattr(history, k) for k in ("stop_reason", "lr_drops")},
        "n_parameters": model.n_parameters,
        "curve": {"steps": history.eval_steps, "val_ll": [-v for v in history.val_loss]},
        # per held-out batch: the head-to-head pairs the same batches
        "eval_ll": {k: [model.evaluate([b], n_samples=50) for b in bs] for k, bs in scores.items()},
    }


def probe(**s: Any) -> dict[str, float]:
    """Steps of 16 tasks at the range's largest context (m = hi, 64 targets) on the CPU, after a
    warm-up fit: the median step time (the first two steps dropped: allocation, first touch) and
    the peak resident memory above that before the fit (weights, activations, gradients, optimiser)."""
    sampler = GPTaskSampler("rbf", min_ctx=s["hi"], max_ctx=s["hi"], min_tgt=64, max_tgt=64, random_state=5)
    batches = [sampler.sample(16) for _ in range(s["probe_steps"])]
    options, cycle = {"batch_size": 16, "lr_schedule": "constant"}, itertools.cycle(batches)
    replay = SimpleNamespace(min_ctx=s["lo"], sample=lambda batch_size: next(cycle))  # drawn beforehand
    build(s, 0, "cpu").fit(replay, max_steps=2, **options)  # a warm-up
    with open("/proc/self/statm") as f:
        before_mb = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    ticks = [time.perf_counter()]
    with h.measure() as m:
        tick = lambda step, loss: ticks.append(time.perf_counter())  # noqa: E731
        build(s, 0, "cpu").fit(replay, max_steps=len(batches), callback=tick, **options)
    step_seconds = [b - a for a, b in itertools.pairwise(ticks)]
    return {"seconds_per_step": statistics.median(step_seconds[2:]), "peak_mb": m.peak_rss_mb - before_mb}


def gp_ll(kernel: str, lo: int, hi: int, n_batches: int) -> float:
    """The exact GP posterior's mean log-likelihood on the held-out batches."""
    batches = held_out(kernel, lo, hi, n_batches, EVAL_SEED)
    return mean(float(gp_log_likelihood(b, kernel, NOISE_STD).nanmean()) for b in batches)


def sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else math.nan


def runs(records: list[dict], model: str, lo: int, hi: int) -> dict[int, dict]:
    """The records of ``model`` at a range, by seed (cells) or round (probes)."""
    mine = [r for r in records if [r["settings"][k] for k in ("model", "lo", "hi")] == [model, lo, hi]]
    return {r["settings"].get("seed", r["settings"].get("round")): r for r in mine}


def score(cells: list[dict], model: str, lo: int, hi: int, kernel: str) -> str | None:
    """Mean ± sd over seeds; one seed: ± the standard error over the held-out batches."""
    mine = [c["eval_ll"][kernel] for c in runs(cells, model, lo, hi).values()]
    if len(mine) > 1:
        per_seed = [mean(b) for b in mine]
        return f"{mean(per_seed):.3f} ± {sd(per_seed):.3f} (n={len(mine)})"
    return f"{mean(mine[0]):.3f} ± {sd(mine[0]) / math.sqrt(len(mine[0])):.3f} (1 seed)" if mine else None


def paired_gap(cells: list[dict], form: str, lo: int, hi: int) -> str | None:
    """``form`` - CANP in RBF log-likelihood over the seeds both ran, e.g. "+0.003 (beats; 3 seeds)";
    "within sd": behind by less than the larger seed sd of the two; None when no seed is shared."""
    mine, base = runs(cells, form, lo, hi), runs(cells, "CANP", lo, hi)
    common = sorted(set(mine) & set(base))
    if not common:
        return None
    a, b = ([mean(r[s]["eval_ll"]["rbf"]) for s in common] for r in (mine, base))
    diff, spread = mean(a) - mean(b), max([0.0, *(sd(v) for v in (a, b) if len(v) > 1)])
    text = "beats" if diff >= 0 else ("within sd" if diff > -spread else "behind")
    return f"{diff:+.3f} ({text}; {len(common)} seed{'s' if len(common) != 1 else ''})"


def batch_gaps(cells: list[dict], model: str, lo: int, hi: int) -> list[float]:
    """``model`` - CANP in RBF log-likelihood batch by batch (the same held-out tasks), pooled over
    the seeds both ran."""
    mine, base = runs(cells, model, lo, hi), runs(cells, "CANP", lo, hi)
    seeds = sorted(set(mine) & set(base))
    pairs = (zip(mine[s]["eval_ll"]["rbf"], base[s]["eval_ll"]["rbf"], strict=True) for s in seeds)
    return [a - b for seed in pairs for a, b in seed]


def probe_of(probes: list[dict], model: str, lo: int, hi: int) -> dict[str, float] | None:
    """A model's probe at a range: the medians over the rounds (None: not probed)."""
    mine, keys = list(runs(probes, model, lo, hi).values()), ("seconds_per_step", "peak_mb")
    return {k: statistics.median(p[k] for p in mine) for k in keys} if mine else None


def stage_bests(cell: dict) -> list[float]:
    """The best validation score in each stage of a run's schedule: adaptive, the flat rate, each
    lower rate and the anneal; cosine, the first and the second half of the steps."""
    if cell["anneal_start"] is None:  # an evaluation at the half-way step closes the first half
        bounds = [0, cell["n_steps"] / 2 + 1, math.inf]
    else:
        bounds = [0, *cell["lr_drops"], cell["anneal_start"], math.inf]
    curve = list(zip(cell["curve"]["steps"], cell["curve"]["val_ll"], strict=True))
    return [max((v for s, v in curve if a <= s < b), default=math.nan) for a, b in itertools.pairwise(bounds)]


def section(title: str, text: str, columns: list[str], rows: list[list]) -> list[str]:
    return [f"## {title}", "", text, "", *h.md_table(columns, rows), ""] if rows else []


def verdict(cells: list[dict], probes: list[dict], ranges: list[tuple[int, int]]) -> list[str]:
    """Each CIPNP form against CANP: accuracy per range, time and memory at the largest range."""
    lo, hi = ranges[-1]
    base, rows = probe_of(probes, "CANP", lo, hi), []
    for form in [m for m in MODELS if m.startswith("CIPNP") and any(runs(cells, m, *r) for r in ranges)]:
        gaps = [paired_gap(cells, form, *r) for r in ranges]
        rows.append([form, *[g or "not run" for g in gaps], None, None, "no probe"])
        if (mine := probe_of(probes, form, lo, hi)) and base:
            t, m = (mine[k] / base[k] for k in ("seconds_per_step", "peak_mb"))
            accurate = all(g is not None and "(behind" not in g for g in gaps)
            rows[-1][-3:] = [f"{t:.2f}x", f"{m:.2f}x", "yes" if accurate and t <= 0.6 and m <= 0.6 else "no"]
    columns = ["CIPNP form", *[f"[{a},{b}] vs CANP" for a, b in ranges], "time / CANP", "memory / CANP"]
    text = (
        "Accuracy: the form minus CANP in RBF log-likelihood (mean over the seeds both ran, paired;"
        ' "within sd" = behind by less than the larger seed sd of the two). Cost: a training step at'
        f" m = {hi} (the largest range) as a multiple of CANP's (the goal: at most 0.6x each)."
    )
    return section("Verdict (each CIPNP form against CANP)", text, [*columns, "all clauses?"], rows)


def gap_table(cells: list[dict], ranges: list[tuple[int, int]]) -> list[str]:
    """The head-to-head: whether CIPNP's difference from CANP is spread over the tasks or made by a few."""
    rows = []
    for lo, hi in ranges:
        if g := batch_gaps(cells, "CIPNP", lo, hi):
            stats = [f"{v:+.3f}" for v in (mean(g), statistics.median(g), min(g), max(g))]
            rows.append([f"[{lo},{hi}]", len(g), *stats, f"{sum(x > 0 for x in g)} of {len(g)}"])
    columns = ["range", "batches", "mean", "median", "worst", "best", "batches CIPNP ahead"]
    text = (
        "RBF log-likelihood of CIPNP minus CANP's on the same held-out batch (16 tasks each), pooled over"
        " the seeds both ran. A mean far below the median means a few batches make the difference; a"
        " median near the mean means it is spread over the tasks."
    )
    return section("Where the difference lies (CIPNP - CANP, batch by batch)", text, columns, rows)


def cost_table(cells: list[dict], probes: list[dict], ranges: list[tuple[int, int]], models: list[str]):
    rows = []
    for (lo, hi), model in itertools.product(ranges, models):
        base, p = probe_of(probes, "CANP", lo, hi), probe_of(probes, model, lo, hi)
        if (mine := list(runs(cells, model, lo, hi).values())) or p:
            rows.append([f"[{lo},{hi}]", model, mine[0]["n_parameters"] if mine else None])
            for k in ("seconds_per_step", "peak_mb"):
                rows[-1] += [p[k], p[k] / base[k] if base else None] if p else [None, None]
            rows[-1].append(mean(c["seconds_per_step"] for c in mine) if mine else None)
            rows[-1].append(max(c["peak_rss_mb"] for c in mine) if mine else None)
    columns = ["range", "model", "params", "probe s/step", "/ CANP", "probe peak MB", "/ CANP"]
    text = (
        "Probe: steps of 16 tasks at the range's largest context (m = max, 64 targets) on the CPU, drawn"
        " beforehand, in a fresh process after a warm-up: the median step time and the peak memory above"
        " that before the fit, medians over the rounds, one probe at a time: these columns compare models."
        " Training: seconds per step of the runs (mean over seeds; drawing tasks and validation excluded)"
        " and the largest peak RSS of their processes, as each run measured them."
    )
    return section("Cost", text, [*columns, "training s/step", "training peak RSS MB"], rows)


def convergence_table(cells: list[dict], models: list[str], ranges: list[tuple[int, int]], adaptive: bool):
    how = (
        "Each run trained at a flat learning rate until its validation log-likelihood (RBF) stopped"
        " improving, stepped the rate down at each such plateau while steps down were left, then"
        ' annealed. Stop "plateau": it stopped improving at its last rate; "max_steps": the ceiling'
        " came first, so the run may be short of convergence. Stages: the flat rate, each lower rate,"
        " the anneal"
        if adaptive
        else "Each run followed a cosine schedule to 0. Stages: the first and the second half of the steps"
    )
    rows = []
    for model, (lo, hi) in itertools.product(models, ranges):
        for seed, c in runs(cells, model, lo, hi).items():
            bests, drops = stage_bests(c), ", ".join(map(str, c["lr_drops"])) or None
            stop = c["stop_reason"].split(",")[0]
            rows.append([model, f"[{lo},{hi}]", seed, stop, drops, c["anneal_start"]])
            rows[-1] += [" / ".join(f"{b:.3f}" for b in bests), f"{bests[-1] - bests[-2]:+.3f}"]
            rows[-1].append(f"{c['best_step']} / {c['n_steps']}")
    columns = ["model", "range", "seed", "stop", "lower rate from step", "anneal from step", "best per stage"]
    how += ". Best per stage: the best validation score (RBF) in each; last gain: what the last stage bought"
    return section(
        "Convergence", how + " (small: converged).", [*columns, "last gain", "best step / steps"], rows
    )


def plot(cells: list[dict], oracle: dict, models: list[str], ranges: list[tuple[int, int]], path: Path):
    """RBF log-likelihood per range (mean ± sd over seeds) beside the GP oracle, as Figure 4."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for k, model in enumerate(models):
        per_range = [[mean(c["eval_ll"]["rbf"]) for c in runs(cells, model, *r).values()] for r in ranges]
        xs = [i + 0.05 * (k - len(models) / 2) for i in range(len(ranges))]
        ys, errors = [mean(v) if v else math.nan for v in per_range], [sd(v) for v in per_range]
        ax.errorbar(xs, ys, [0 if math.isnan(e) else e for e in errors], marker="o", capsize=3, label=model)
    ax.plot(range(len(ranges)), [oracle[f"{lo}_{hi}"]["rbf"] for lo, hi in ranges], "k--", label="GP oracle")
    ax.set_xticks(range(len(ranges)), [f"[{lo},{hi}]" for lo, hi in ranges])
    ax.set(xlabel="context range", ylabel="target log-likelihood, RBF (held out)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(args: argparse.Namespace, cells: list, probes: list, missing: list, oracle: dict) -> None:
    ranges, adaptive = args.ranges, args.schedule == "adaptive"
    models = [m for m in args.models if any(runs(cells, m, *r) for r in ranges)]
    schedule = (
        f"flat until the validation score (smoothed: EMA weight {args.smoothing:g} on the past) has not"
        f" improved by 0.1% for {args.patience} evaluations (none declared before step {args.min_steps});"
        f" each of the first {args.lr_drops} such plateaus multiplies the rate by {args.drop_factor:g},"
        f" the next starts a cosine to 0 over {args.anneal_fraction:g} x the steps run; at most"
    )
    described = [f"{m} = `{cls.__name__}({', '.join(f'{k}={v!r}' for k, v in extra.items())})`"
                 for m in args.models for cls, extra in [MODELS[m]]]  # fmt: skip
    lines = [
        "SPIN paper section 4.2 / Figure 4: does CIPNP/IPNP match or beat CANP/ANP/BANP in target"
        " log-likelihood, and at what cost?",
        "",
        f"- Training: 16 RBF tasks a step (x ~ U(-2,2), lengthscale ~ U(0.1,0.6), scale ~ U(0.1,1), noise"
        f" {NOISE_STD}; m ~ U[range], n ~ U[4,64]), Adam, lr {args.lr:g}"
        f" {schedule if adaptive else 'cosine to 0 over'} {args.steps} steps; width {args.d_model},"
        f" {args.n_heads} heads; on {args.device}, {args.threads} thread(s) a run, {args.jobs} run(s) at a"
        " time; each seed its own task stream and initialisation; the weights with the best validation"
        f" score ({args.validation_batches} batches x 16 tasks, every {args.eval_every} steps) are kept.",
        f"- Evaluation: {args.eval_batches} held-out batches x 16 tasks per kernel and range; mean"
        " log-likelihood per target point; latent models and BANP average the likelihood over 50 draws."
        " RBF is the training kernel; Matern-5/2 and periodic are out of distribution. The GP oracle is"
        " the exact posterior with the true kernel and hyper-parameters.",
        "- Error bars: ± sd over seeds (n seeds); for one seed, ± standard error over the batches.",
        "- Models (options beyond the widths): " + "; ".join(described),
        "",
    ]
    for kernel in KERNELS:
        rows = [[m, *[score(cells, m, *r, kernel) for r in ranges]] for m in models]
        rows.append(["GP oracle", *[f"{oracle[f'{lo}_{hi}'][kernel]:.3f}" for lo, hi in ranges]])
        lines += [f"## Target log-likelihood, {kernel} tasks (higher is better)", ""]
        lines += [*h.md_table(["model", *[f"[{lo},{hi}]" for lo, hi in ranges]], rows), ""]
    lines += verdict(cells, probes, ranges) + gap_table(cells, ranges)
    lines += cost_table(cells, probes, ranges, args.models)
    lines += convergence_table(cells, models, ranges, adaptive)
    lines += ["## Cells without a result (the same command resumes them)", ""] if missing else []
    lines += [f"- {s['model']} [{s['lo']},{s['hi']}] seed {s['seed']}: {m.get('error', 'not run yet')}"
              for m in missing for s in [m["settings"]]]  # fmt: skip
    stem = args.out_dir / "np_convergence"
    data = {"settings": vars(args) | {"out_dir": str(args.out_dir)}, "oracle": oracle}
    h.write_report(stem, TITLE, lines, data | {"cells": cells, "probes": probes}, records=cells + probes)
    if cells:
        plot(cells, oracle, models, ranges, stem.with_suffix(".png"))


def main() -> None:
    p = argparse.ArgumentParser(description=TITLE)
    p.add_argument("--models", default="CIPNP,CANP,CIPNP-paper,IPNP,ANP,BANP,TNPD", help=f"of {list(MODELS)}")
    p.add_argument("--ranges", default="64:128,256:512", help="context ranges, lo:hi,...")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--schedule", choices=("cosine", "adaptive"), default="cosine")
    p.add_argument("--device", default="cpu", help="where the cells train (the probes run on the CPU)")
    p.add_argument("--out-dir", type=Path, default=h.RESULTS)
    for name, default in (OPTIONS | SCHEDULE).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    args = p.parse_args()
    args.models, args.seeds = args.models.split(","), [int(s) for s in args.seeds.split(",")]
    if unknown := set(args.models) - set(MODELS):
        p.error(f"unknown models {sorted(unknown)}; choose from {list(MODELS)}")
    args.ranges = ranges = [tuple(map(int, r.split(":"))) for r in args.ranges.split(",")]
    records = h.Records(args.out_dir / "np_convergence.jsonl")
    a, adaptive = vars(args), tuple(SCHEDULE) if args.schedule == "adaptive" else ()
    widths = {k: a[k] for k in ("d_model", "n_heads", "threads")}
    run = widths | {k: a[k] for k in ("eval_every", "validation_batches", "eval_batches", "device")}
    run |= {k: a[k] for k in adaptive}
    run |= {"kind": "train", "max_steps": args.steps, "learning_rate": args.lr, "lr_schedule": args.schedule}
    probe_, rounds = widths | {"kind": "probe", "probe_steps": args.probe_steps}, range(args.probe_rounds)
    probes = [probe_ | {"model": m, "lo": lo, "hi": hi, "round": k}
              for k, (lo, hi), m in itertools.product(rounds, ranges, args.models)]  # fmt: skip
    cells = [run | {"model": m, "lo": lo, "hi": hi, "seed": s}
             for s, m, (lo, hi) in itertools.product(args.seeds, args.models, ranges)]  # fmt: skip
    oracle = {f"{lo}_{hi}": {k: gp_ll(k, lo, hi, args.eval_batches) for k in KERNELS} for lo, hi in ranges}
    probe_cell = partial(h.run_cell, "np_convergence:probe", threads=args.threads, env=PROBE_ENV)
    for s in probes:  # one at a time: the timings compare models
        records.run(s, probe_cell, retry_errors=True)

    def train_cell(s: dict[str, Any]) -> dict[str, Any]:  # the checkpoint folder is not a setting
        cell = s | {"checkpoint": str(CHECKPOINTS / records.key(s))}
        return h.run_cell("np_convergence:train", cell, timeout=args.timeout, threads=args.threads)

    def write() -> None:
        done = [records.get(s) for s in cells]
        missing = [r or {"settings": s} for r, s in zip(done, cells, strict=True) if not (r and r["ok"])]
        finished_probes = [r for r in map(records.get, probes) if r and r["ok"]]
        report(args, [r for r in done if r and r["ok"]], finished_probes, missing, oracle)

    pool = ThreadPoolExecutor(max_workers=args.jobs)  # the subprocesses do the work
    todo = {pool.submit(train_cell, s): s for s in cells if not (r := records.get(s)) or not r["ok"]}
    try:
        for job in as_completed(todo):
            if records.add(todo[job], job.result())["ok"]:  # the record holds the result now
                shutil.rmtree(CHECKPOINTS / records.key(todo[job]), ignore_errors=True)
            write()
    finally:
        pool.shutdown(cancel_futures=True)  # a stopped run starts no further cell
    write()


if __name__ == "__main__":
    main()
