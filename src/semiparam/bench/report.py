"""Markdown report and plots from the results of :func:`semiparam.bench.runner.run_suite`.

The report puts every reduction next to the number it affects, the paper's numbers beside ours,
average ranks computed as paper Table 1 does (also recomputed from the paper's own numbers on the
datasets and methods we ran, so the two are comparable), and wall time and peak memory per model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import paper
from .baselines import BASELINES
from .models import model_title
from .protocol import HIGHER_IS_BETTER, PRIMARY_METRIC, average_ranks

GROUPS = (
    ("binary", "auroc", "AUROC"),
    ("multiclass", "accuracy", "accuracy"),
    ("regression", "rmse", "RMSE"),
)
METRIC_LABEL = {
    "auroc": "AUROC ↑",
    "accuracy": "accuracy (%) ↑",
    "nll": "NLL ↓",
    "ece": "ECE ↓",
    "rmse": "RMSE ↓",
    "mse": "MSE ↓",
}


def paper_method(model: str) -> str | None:
    """Row name of ``model`` in the paper's tables (None: not in the paper)."""
    if model in BASELINES:
        return BASELINES[model].paper_name
    return "NPT" if model == "npt" else None


def paper_entry(metric: str, dataset_paper_name: str | None, model: str) -> paper.Entry:
    """The published value for ``model`` on a dataset: the NPT paper's tables for NPT and the
    baselines, the SPIN paper's large-table results for SPIN (not used in the rank tables, which
    compare the methods of one paper)."""
    method = paper_method(model) or ("SPIN" if model == "spin" else None)
    if dataset_paper_name is None or method is None:
        return None
    return paper.paper_value(metric, dataset_paper_name, method)


def _fmt(value: float | None, metric: str, se: float | None = None) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    scale = 100.0 if metric == "accuracy" else 1.0
    digits = {"auroc": 3, "accuracy": 2, "nll": 3, "ece": 3, "rmse": 2, "mse": 2, "mae": 2}.get(metric, 3)
    text = f"{value * scale:.{digits}f}"
    if se is not None:
        text += f" ± {se * scale:.{digits}f}"
    return text


def _fmt_paper(metric: str, dataset_paper_name: str | None, model: str) -> str:
    entry = paper_entry(metric, dataset_paper_name, model)
    if entry is None:
        return "–"
    mean, se = entry
    digits = {"auroc": 3, "accuracy": 2, "nll": 3, "rmse": 2}.get(metric, 3)
    return f"{mean:.{digits}f}" + (f" ± {se:.{digits}f}" if se is not None else "")


def _models(results: dict[str, Any]) -> list[str]:
    return [m for m in results["plan"]["models"] if m not in results.get("unavailable", {})]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _steps_text(meta: dict[str, Any], model: str) -> str:
    spec = meta.get("table_specs", {}).get(model)
    if not spec:
        return "–"
    parts = [f"preset {spec['preset']}", f"{spec['max_steps'] or 'preset'} steps"]
    if spec.get("batch_size"):
        parts.append(f"batch {spec['batch_size']}")
    if spec.get("learning_rate"):
        parts.append(f"lr {spec['learning_rate']:g}")
    for key, value in (spec.get("model_options") or {}).items():
        parts.append(f"{key}={value}")
    if spec.get("p_target") is not None:
        parts.append(f"p_target {spec['p_target']}")
    parts.append("transductive" if spec.get("transductive") else "inductive")
    return ", ".join(parts)


def reductions_section(results: dict[str, Any]) -> list[str]:
    table_models = [m for m in _models(results) if m not in BASELINES]
    header = [
        "dataset",
        "rows used / official",
        "protocol (paper)",
        "folds run / paper",
        "train / val / test rows per fold (the protocol's split of the full copy)",
    ]
    header += [f"{model_title(m)} training (paper)" for m in table_models]
    header += ["baseline search per fold"]
    rows = []
    for name, meta in results["datasets"].items():
        s, p = meta["sizes"], meta["paper_sizes"]
        official = meta.get("official_rows")
        pname = meta.get("paper_name")
        setup = paper.PAPER_SETUP.get(pname or "", {})
        row = [
            f"{name}" + (f" (paper: {pname})" if pname else " (not in the paper)"),
            f"{meta['rows']:,} / {official:,}" if official else f"{meta['rows']:,}",
            f"{meta['protocol']} ({setup.get('protocol', '–')})",
            f"{meta['folds_run']} / {meta['paper_folds']}"
            + ("" if meta["protocol"] == "cv" else " (single split)"),
            f"{s['train']:,} / {s['val']:,} / {s['test']:,} ({p['train']:,} / {p['val']:,} / {p['test']:,})",
        ]
        for m in table_models:
            row.append(
                f"{_steps_text(meta, m)}" + (f" ({setup['npt']})" if m == "npt" and setup.get("npt") else "")
            )
        plan = meta["plan"]
        row.append(
            f"{plan['n_configs']} random settings, n_estimators ≤ {plan['max_estimators']} "
            "(paper: grid of 24–11,340)"
        )
        rows.append(row)
    notes = []
    for name, meta in results["datasets"].items():
        setup = paper.PAPER_SETUP.get(meta.get("paper_name") or "", {})
        fallback = meta["protocol"] == "holdout" and str(setup.get("protocol", "")).startswith(
            ("fixed", "official")
        )
        text = meta.get("notes") or ""
        if fallback:
            text += " (no official test set here: the paper's fixed split falls back to 0.7/0.1/0.2)"
        if text.strip():
            notes.append(f"- {name}: {text.strip()}")
    baselines = [m for m in _models(results) if m in BASELINES]
    tuning = []
    if baselines:
        tuning = [
            "Baselines: on each fold, a random search over the paper's spaces (spec-npt 7.3, Tables 17-25) "
            "instead of its grids; each setting is fitted on the training rows and the best by the "
            "validation metric (AUROC / accuracy / RMSE) predicts the test rows, without refitting, as "
            "in the reference code. Trees capped as in the table; the MLP (scikit-learn, Adam) runs at "
            "most 100 epochs with early stopping on 10% of its training rows; threads as below. "
            "Library models select their checkpoint on their own stratified hold-out of the same size "
            "drawn from the train + validation rows (the estimators take no explicit validation set) "
            "and predict from all of those rows; transductive = the test rows' features (never their "
            "labels) join training, the paper's default.",
            "",
        ]
    return ["## Reductions from the paper's protocol", "", *_table(header, rows), "", *notes, "", *tuning]


def results_section(results: dict[str, Any]) -> list[str]:
    lines = ["## Test metrics (mean ± s.e. over the folds run; paper's value in brackets)", ""]
    summary = results["summary"]
    models = _models(results)
    for name, meta in results["datasets"].items():
        task = meta["task"]
        metrics = (
            ["rmse", "mse"]
            if task == "regression"
            else (["auroc", "accuracy", "nll", "ece"] if task == "binary" else ["accuracy", "nll", "ece"])
        )
        header = (
            ["model"]
            + [METRIC_LABEL[m] for m in metrics]
            + ["s / fold (CPU s)", "s / step", "peak RSS MB (+ above start)"]
        )
        rows = []
        for model in models:
            entry = summary.get(name, {}).get(model)
            if entry is None:
                continue
            row = [model_title(model)]
            for metric in metrics:
                ours = _fmt(entry[metric]["mean"], metric, entry[metric]["se"]) if metric in entry else "–"
                ref = _fmt_paper(metric, meta.get("paper_name"), model) if metric != "mse" else "–"
                row.append(ours + (f" [{ref}]" if ref != "–" else ""))
            cpu = entry.get("cpu_seconds_per_fold")
            row.append(f"{entry['seconds_per_fold']:.1f}" + (f" ({cpu:.1f})" if cpu is not None else ""))
            row.append(f"{entry['seconds_per_step']:.3f}" if "seconds_per_step" in entry else "–")
            above = max(0.0, entry["peak_above_start_mb"])  # < 0 when memory was freed meanwhile
            row.append(f"{entry['peak_rss_mb']:.0f} (+{above:.0f})")
            rows.append(row)
        folds = meta["folds_run"]
        lines += [
            f"### {meta['title']} — {folds} fold(s), {meta['sizes']['train']:,} training rows per fold",
            "",
            *_table(header, rows),
            "",
        ]
    return lines


def ranks_section(results: dict[str, Any]) -> list[str]:
    summary = results["summary"]
    models = _models(results)
    lines = [
        "## Average rank (± s.e. over datasets), computed as paper Table 1",
        "",
        "Within each dataset the models are ranked by the group's metric (1 = best, ties share the mean, "
        "a missing entry ranks last); then mean ± sample std / √#datasets. *Ours* ranks every model of "
        "this run; *ours, paper's methods* leaves out the models the paper does not have (SPIN, ...); "
        "*paper, same subset* recomputes the paper's ranks from its Tables 8–11 on the datasets and "
        "methods of this run, so it compares with the column before it directly; *paper Table 1* "
        "ranks 9 methods over all its datasets.",
        "",
    ]
    for task, metric, label in GROUPS:
        names = [n for n, meta in results["datasets"].items() if meta["task"] == task]
        if not names:
            continue
        ours_table = {
            n: {m: summary.get(n, {}).get(m, {}).get(metric, {}).get("mean") for m in models} for n in names
        }
        ours = average_ranks(ours_table, higher_is_better=HIGHER_IS_BETTER[metric], methods=models)
        in_paper = [m for m in models if paper_method(m)]
        ours_paper_methods = average_ranks(
            {n: {m: row[m] for m in in_paper} for n, row in ours_table.items()},
            higher_is_better=HIGHER_IS_BETTER[metric],
            methods=in_paper,
        )
        paper_table = {}
        for n in names:
            pname = results["datasets"][n].get("paper_name")
            if pname is None:
                continue
            row = {}
            for m in in_paper:
                entry = paper.paper_value(metric, pname, paper_method(m) or "")
                row[m] = entry[0] if entry else None
            paper_table[n] = row
        paper_same = (
            average_ranks(paper_table, higher_is_better=HIGHER_IS_BETTER[metric], methods=in_paper)
            if paper_table
            else {}
        )
        rows = []

        def cell(rank: tuple[float, float | None] | None) -> str:
            if rank is None:
                return "–"
            return f"{rank[0]:.2f}" + (f" ± {rank[1]:.2f}" if rank[1] is not None else "")

        for m in sorted(models, key=lambda k: ours.get(k, (99, None))[0]):
            full = paper.RANKS[metric].get(paper_method(m) or "")
            rows.append(
                [
                    model_title(m),
                    cell(ours.get(m)),
                    cell(ours_paper_methods.get(m)),
                    cell(paper_same.get(m)),
                    cell(full),
                ]
            )
        lines += [
            f"### {label} ({task}: {', '.join(names)})",
            "",
            *_table(["model", "ours", "ours, paper's methods", "paper, same subset", "paper Table 1"], rows),
            "",
        ]
    return lines


def _members(details: dict[str, Any]) -> list[dict[str, Any]]:
    """The trained networks of one record: each member of an ensemble, or the single model."""
    return details.get("members") or [details]


def _late_best(fits: list[dict[str, Any]]) -> int:
    """How many of ``fits`` chose a checkpoint in the last tenth of the steps they ran."""
    return sum(1 for d in fits if d.get("best_step") is not None and d["best_step"] >= 0.9 * (d["steps"] - 1))


def findings_section(results: dict[str, Any]) -> list[str]:
    """One line per dataset and library model: where it stands against the best model of this run
    and against the paper's number, on the dataset's primary metric (computed, not hand-written)."""
    summary = results["summary"]
    models = _models(results)
    lines = ["## Findings (generated from the numbers above)", ""]
    for name, meta in results["datasets"].items():
        metric = PRIMARY_METRIC[meta["task"]]
        higher = HIGHER_IS_BETTER[metric]
        entries = {m: summary[name][m][metric] for m in models if metric in summary.get(name, {}).get(m, {})}
        if not entries:
            continue
        best = (max if higher else min)(entries, key=lambda m: entries[m]["mean"])
        for model in [m for m in models if m not in BASELINES and m in entries]:
            ours = entries[model]
            text = f"- {name}, {model_title(model)}: {metric} {_fmt(ours['mean'], metric, ours['se'])}"
            if model == best:
                text += ", best of this run"
            else:
                ref = entries[best]
                diff = ours["mean"] - ref["mean"]
                se = math.sqrt((ours["se"] or 0.0) ** 2 + (ref["se"] or 0.0) ** 2)
                scale = 100.0 if metric == "accuracy" else 1.0
                text += f"; best is {model_title(best)} {_fmt(ref['mean'], metric, ref['se'])}"
                text += f" (difference {diff * scale:+.3g}" + (
                    f", {abs(diff) / se:.1f} s.e.)" if se > 0 else ")"
                )
            entry = paper_entry(metric, meta.get("paper_name"), model)
            if entry:
                text += f"; paper {_fmt_paper(metric, meta.get('paper_name'), model)}"
            fits = [  # every trained network: each member of an ensemble counts as one
                member
                for r in results["records"]
                if r.get("status") == "ok" and r["dataset"] == name and r["model"] == model
                for member in _members(r["details"])
            ]
            late = _late_best(fits)
            if late:
                text += f"; best checkpoint in the last 10% of steps in {late}/{len(fits)} fit(s)"
                text += " (still improving: more steps should help)"
            lines.append(text)
    return lines + [""]


def stopping_section(results: dict[str, Any]) -> list[str]:
    """Where each library model's training stopped, fold by fold: the steps each ensemble member
    ran, its best (chosen) checkpoint and why it stopped. Empty when no record has them."""
    rows = []
    for r in results["records"]:
        details = r.get("details") or {}
        if r.get("status") != "ok" or r["model"] in BASELINES or "steps" not in details:
            continue
        members = _members(details)
        rows.append(
            [
                r["dataset"],
                model_title(r["model"]),
                str(r["fold"]),
                ", ".join(str(m.get("steps", "–")) for m in members),
                ", ".join(str(m.get("best_step", "–")) for m in members),
                "; ".join(sorted({str(m.get("stop_reason") or "–") for m in members})),
                f"{_late_best(members)} of {len(members)}",
                f"{details.get('train_seconds', float('nan')):.1f}",
            ]
        )
    if not rows:
        return []
    header = ["dataset", "model", "fold", "steps run", "best step", "stop reason", "best in last 10%",
              "train s"]  # fmt: skip
    return [
        "## When each neural fit stopped",
        "",
        'One entry per ensemble member (comma-separated, member 0 first). "plateau, annealed": the '
        "smoothed validation loss stopped improving, then the learning rate was annealed over a share "
        'of the steps run and training ended; "max_steps" or "time_budget" would mean a fit was '
        "cut off. A best checkpoint in the last tenth of a run falls in that final anneal.",
        "",
        *_table(header, rows),
        "",
    ]


def plots(results: dict[str, Any], out_dir: str | Path, stem: str) -> list[Path]:
    """Dot plots of the primary metric per dataset (paper values as markers) and a time/memory
    scatter. Needs matplotlib (the ``bench`` extra); returns [] without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = results["summary"]
    models = _models(results)
    names = list(results["datasets"])
    written = []
    n = len(names)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        meta = results["datasets"][name]
        metric = PRIMARY_METRIC[meta["task"]]
        scale = 100.0 if metric == "accuracy" else 1.0
        shown = [m for m in models if metric in summary.get(name, {}).get(m, {})]
        means = [summary[name][m][metric]["mean"] * scale for m in shown]
        ses = [(summary[name][m][metric]["se"] or 0.0) * scale for m in shown]
        x = np.arange(len(shown))
        for i, m in enumerate(shown):  # points, not bars: metric axes do not start at zero
            color = "tab:blue" if m in BASELINES else "tab:red"
            ax.errorbar(i, means[i], yerr=ses[i], fmt="o", color=color, capsize=3, markersize=5)
            entry = paper_entry(metric, meta.get("paper_name"), m)
            if entry:
                ax.plot(i, entry[0], marker="_", color="black", markersize=16, mew=2)
        ax.set_xticks(x, [model_title(m) for m in shown], rotation=60, ha="right", fontsize=7)
        ax.set_xlim(-0.6, len(shown) - 0.4)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{name} ({metric}{' ↑' if HIGHER_IS_BETTER[metric] else ' ↓'})", fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(
        "Test metric per dataset: this run, mean ± s.e. (red: library models); black bars: paper", fontsize=10
    )
    fig.tight_layout()
    path = out / f"{stem}_metrics.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for m in models:
        xs = [summary[n][m]["seconds_per_fold"] for n in names if m in summary.get(n, {})]
        ys = [summary[n][m]["peak_above_start_mb"] for n in names if m in summary.get(n, {})]
        ax.scatter(xs, np.maximum(ys, 1.0), label=model_title(m), s=18)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("wall seconds per fold (incl. tuning)")
    ax.set_ylabel("peak RSS above start (MB)")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("Cost per model and dataset", fontsize=10)
    fig.tight_layout()
    path = out / f"{stem}_cost.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


def _compute_text(results: dict[str, Any]) -> str:
    ok = [r for r in results["records"] if r.get("status") == "ok"]
    total = sum(r["seconds"] for r in ok) / 60
    text = f"{len(ok)} (model, fold) runs, {total:.1f} min of wall time in all"
    stamps = sorted(r["finished_at"] for r in ok if r.get("finished_at"))
    if stamps:
        text += f", finished between {stamps[0]} and {stamps[-1]}"
    loads = [r["load_average"][0] for r in ok if r.get("load_average")]
    if loads:
        cores = results["machine"].get("cpu_count")
        text += f"; 1-minute load average {min(loads):.1f}-{max(loads):.1f} on {cores} cores"
    return text


def machine_section(results: dict[str, Any], command: str | None) -> list[str]:
    m = results["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v)
    lines = ["## Machine and run", ""]
    if command:
        lines += [f"Reproduce: `{command}`", ""]
    lines += [
        f"- machine: {m.get('cpu')}, {m.get('cpu_count')} cores, {m.get('memory_gb')} GB RAM, "
        f"{m.get('platform')}",
        f"- threads: {results['plan'].get('threads')} per model (torch threads; the baselines' "
        "n_jobs / thread_count, with the BLAS and OpenMP pools capped to match); timings are wall-clock, "
        "so compare them within this report only (the load average during the run is under compute)",
        f"- versions: {versions}",
        f"- compute: {_compute_text(results)}; seed {results['plan']['seed']}",
        "- peak memory: resident-set high-water mark of the process during each (model, fold), reset "
        'before each one; "above start" subtracts what the process held before (data, libraries)',
    ]
    if "machines" in results:
        cpus = sorted({str(m.get("cpu")) for m in results["machines"]})
        lines.append(
            f"- **machines**: the records were made on {len(cpus)} named machine(s) ({', '.join(cpus)}) "
            f"and {results['records_without_machine']} record(s) do not name theirs; the machine line "
            "above is the one that rebuilt this report, so compare timings with care"
        )
    for model, reason in results.get("unavailable", {}).items():
        lines.append(f"- **{model_title(model)} not run**: {reason}")
    failures = [r for r in results["records"] if r.get("status") == "error"]
    for r in failures:
        lines.append(
            f"- **failure**: {r['dataset']} fold {r['fold']} {model_title(r['model'])}: {r['error']}"
        )
    return lines + [""]


def write_report(
    results: dict[str, Any],
    path: str | Path,
    *,
    title: str,
    command: str | None = None,
    intro: Sequence[str] = (),
    extra_sections: Sequence[str] = (),
    with_plots: bool = True,
) -> Path:
    """Write the markdown report (and PNG plots next to it) for ``results``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", *intro, ""]
    if results["plan"].get("notes"):
        lines += [results["plan"]["notes"], ""]
    lines += machine_section(results, command)
    lines += reductions_section(results)
    lines += results_section(results)
    lines += findings_section(results)
    lines += stopping_section(results)
    tasks = [meta["task"] for meta in results["datasets"].values()]
    if any(tasks.count(t) > 1 for t in set(tasks)):  # ranks over a single dataset say nothing
        lines += ranks_section(results)
    if with_plots:
        written = plots(results, path.parent, path.stem)
        if written:
            lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in written] + [""]
    lines += list(extra_sections)
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
