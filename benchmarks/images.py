#!/usr/bin/env python
"""Images (issue 17): NPT and SPIN image classifiers on the shipped MNIST images, beside a
scikit-learn MLP and a small CNN trained for the same time, and the paper's numbers.

    python benchmarks/images.py                      # npt, spin, mlp, cnn (about 40 min; resumes)
    python benchmarks/images.py --models npt,mlp,cnn
    python benchmarks/images.py --memory --models npt,spin --batches 512,2048,4096,8000
    python benchmarks/images.py --report-only

Data: the MNIST *test* set shipped in ``$SEMIPARAM_DATA_DIR/mnist`` (10,000 images), a seeded split
of ``--train`` images to fit on and the others to test on. NOTE[DIFF]: the paper trains on the
60,000 training images for 500,000 GPU steps; its accuracy is printed beside ours, not as equal.
The image classifiers run at their defaults and draw ``explain_rows`` for six test images
(``images_explain_<model>.png``); the baselines get the NPT fit's seconds: ``MLPClassifier``
(defaults) by ``partial_fit`` epochs, a small CNN (3x3 convolutions of 32 and 64 channels with
max-pooling, a 128-unit layer; Adam 1e-3, batches of 128) epoch by epoch. ``--memory``: one
training step of the default image model on growing batches, with and without activation
checkpointing: seconds, memory, and the largest batch under ``--cap-gib``. Each fit or step is a
fresh process with 2 threads (run it alone); records in ``<out>/images.jsonl``; report
``images.md`` (+ ``.json``).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import harness as h
import numpy as np

MODELS = ("npt", "spin", "mlp", "cnn")
IMAGE_MODELS = ("npt", "spin")
THREADS = 2


def split(train: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from semiparam.datasets import load_mnist

    X, y = load_mnist()
    order = np.random.default_rng(seed).permutation(len(X))
    return X[order[:train]], y[order[:train]], X[order[train:]], y[order[train:]]


def _scores(proba: np.ndarray, classes: np.ndarray, y_test: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import log_loss

    proba = np.clip(proba, 1e-15, 1)
    return {
        "accuracy": float((classes[np.argmax(proba, axis=1)] == y_test).mean()),
        "log_loss": float(log_loss(y_test, proba / proba.sum(axis=1, keepdims=True), labels=classes)),
    }


# -- the cells (each a fresh process, through harness.run_cell) --------------------------------
def fit(model: str, train: int, seed: int, budget: float = 0.0, out: str = ".", **_: Any) -> dict[str, Any]:
    import torch

    torch.set_num_threads(THREADS)
    X, y, X_test, y_test = split(train, seed)
    if model in IMAGE_MODELS:
        from semiparam import NPTImageClassifier, SPINImageClassifier

        clf = {"npt": NPTImageClassifier, "spin": SPINImageClassifier}[model](
            random_state=seed, verbose=False
        )
        with h.measure() as m:
            clf.fit(X, y)
        start = time.perf_counter()
        result = _scores(clf.predict_proba(X_test), clf.classes_, y_test)
        hist = clf.history_.members
        return {
            **result, "seconds": m.seconds, "fit_peak_rss_mb": m.peak_rss_mb,
            "predict_seconds": time.perf_counter() - start, "steps": [mh.n_steps for mh in hist],
            "best_steps": [mh.best_step for mh in hist], "stop_reasons": [mh.stop_reason for mh in hist],
            "explained": explain_figure(clf, model, X, y, X_test, y_test, Path(out)),
        }  # fmt: skip
    if model == "mlp":
        from sklearn.neural_network import MLPClassifier

        net, classes = MLPClassifier(random_state=seed), np.unique(y)
        Xf, Xt = X.reshape(len(X), -1) / 255.0, X_test.reshape(len(X_test), -1) / 255.0
        epoch = lambda: net.partial_fit(Xf, y, classes=classes)  # noqa: E731
        proba = lambda: net.predict_proba(Xt)  # noqa: E731
    else:
        from torch import nn

        torch.manual_seed(seed)
        classes = np.unique(y)
        xs = torch.as_tensor(X[:, None] / 255.0, dtype=torch.float32)
        ys = torch.as_tensor(np.searchsorted(classes, y))
        net = nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 5 * 5, 128), nn.ReLU(), nn.Linear(128, len(classes)),
        )  # fmt: skip
        opt, gen = torch.optim.Adam(net.parameters(), lr=1e-3), torch.Generator().manual_seed(seed)

        def epoch() -> None:
            for idx in torch.randperm(len(xs), generator=gen).split(128):
                opt.zero_grad()
                nn.functional.cross_entropy(net(xs[idx]), ys[idx]).backward()
                opt.step()

        def proba() -> np.ndarray:
            with torch.no_grad():
                x = torch.as_tensor(X_test[:, None] / 255.0, dtype=torch.float32)
                return torch.softmax(net(x), -1).double().numpy()

    epochs, start = 0, time.perf_counter()
    with h.measure() as m:
        while time.perf_counter() - start < budget:
            epoch()
            epochs += 1
    return {**_scores(proba(), classes, y_test), "seconds": m.seconds, "fit_peak_rss_mb": m.peak_rss_mb,
            "epochs": epochs}  # fmt: skip


def explain_figure(
    clf: Any, model: str, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, out: Path
) -> dict[str, Any]:
    """``explain_rows`` for the first six test images, drawn with the five training images each
    prediction attended to most; the share of those whose label is the test image's own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queries, top_k = 6, 5
    start = time.perf_counter()
    rows = clf.explain_rows(X_test[:queries], top_k=top_k, context=(X, y) if model == "spin" else None)
    seconds = time.perf_counter() - start
    pred = clf.predict(X_test[:queries])
    fig, axes = plt.subplots(queries, top_k + 1, figsize=(1.6 * (top_k + 1), 1.7 * queries))
    for q in range(queries):
        axes[q, 0].imshow(X_test[q], cmap="gray_r")
        axes[q, 0].set_title(f"test: {y_test[q]} (pred {pred[q]})", fontsize=7)
        for k, (_, r) in enumerate(rows[rows["row"] == q].sort_values("rank").iterrows()):
            j = int(r["context_row"])
            axes[q, k + 1].imshow(X[j], cmap="gray_r")
            axes[q, k + 1].set_title(f"train #{j}: {y[j]}\n{r['score']:.2g}", fontsize=7)
    for ax in axes.ravel():
        ax.set(xticks=[], yticks=[])
    fig.suptitle(f"{model.upper()}: the training images each test prediction attended to most", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / f"images_explain_{model}.png", dpi=110)
    plt.close(fig)
    same = y[rows["context_row"].to_numpy().astype(int)] == y_test[rows["row"].to_numpy().astype(int)]
    return {"queries": queries, "top_k": top_k, "same_label_share": float(same.mean()), "seconds": seconds}


def _rss_mb() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def memory(model: str, batch: int, checkpoint: bool, train: int, seed: int, **_: Any) -> dict[str, Any]:
    """One training step of the default image model on ``batch`` images (the model and step that
    ``fit`` runs, built through the estimator's own settings): seconds of the second step, and the
    first step's memory (peak resident memory minus that before it)."""
    import torch

    from semiparam import NPTImageClassifier, SPINImageClassifier
    from semiparam.models.registry import get_model
    from semiparam.training.trainer import Batch, Trainer

    torch.set_num_threads(THREADS)
    X, y, _, _ = split(train, seed)
    reps = int(np.ceil(batch / len(X)))
    X, y = np.concatenate([X] * reps)[:batch], np.concatenate([y] * reps)[:batch]
    cls = NPTImageClassifier if model == "npt" else SPINImageClassifier
    clf = cls(random_state=0, verbose=False, model_options={"checkpoint_blocks": checkpoint})
    encoder, enc = clf.encode_for_fit(X, y)
    model_config, train_config = clf.resolved_configs()
    layout = encoder.schema.layout()
    target = torch.zeros(layout.n_columns, dtype=torch.bool)
    target[-1] = True
    module = get_model(model)[1](model_config, layout)
    trainer = Trainer(module, layout, target, train_config.replace(batch_size=batch))
    b = Batch(torch.as_tensor(enc.values), torch.as_tensor(enc.missing), torch.ones(batch, dtype=torch.bool))
    before = _rss_mb()
    with h.measure() as first:  # memory: the first step (later ones reuse what it allocated)
        trainer.train_step(b, 0)
    with h.measure() as second:  # time: the second
        trainer.train_step(b, 1)
    return {"seconds": second.seconds, "step_mb": first.peak_rss_mb - before,
            "step_peak_rss_mb": max(first.peak_rss_mb, second.peak_rss_mb)}  # fmt: skip


# -- the report --------------------------------------------------------------------------------
def report_lines(fits: dict[str, dict[str, Any]], steps: list[dict[str, Any]], cap_gib: float) -> list[str]:
    from semiparam.bench.paper import IMAGE_ACCURACY

    lines = []
    if fits:
        s = next(iter(fits.values()))["settings"]
        lines += [
            f"Split: the shipped MNIST test set (10,000 images), a random {s['train']:,} to train on "
            f"(seed {s['seed']}), the other {10000 - s['train']:,} to test on. Baselines trained for "
            "the NPT fit's seconds.",
            "",
        ]
        rows = []
        for name, r in fits.items():
            if not r["ok"]:
                rows.append([name, f"failed: {r['error'][-100:]}", "", "", "", ""])
                continue
            if name in IMAGE_MODELS:
                how = f"steps {r['steps']}, best {r['best_steps']}, {', '.join(r['stop_reasons'])}"
            else:
                how = f"{r['epochs']} epochs in a {r['settings']['budget']:.0f} s budget"
            rows.append([name, round(r["accuracy"], 4), round(r["log_loss"], 4), round(r["seconds"]),
                         round(r["fit_peak_rss_mb"] / 1024, 2), how])  # fmt: skip
        heads = ["model", "test accuracy", "log loss", "fit seconds", "peak memory (GiB)", "training"]
        lines += [*h.md_table(heads, rows), ""]
        for name in IMAGE_MODELS:
            ex = fits.get(name, {}).get("explained")
            if ex:
                lines.append(
                    f"- `explain_rows` ({name}): `images_explain_{name}.png` shows {ex['queries']} test "
                    f"images with the {ex['top_k']} training images each prediction attended to most "
                    "and their attention (a weight of 1 / context images would be uniform attention); "
                    f"{ex['same_label_share']:.0%} of those carry the test image's own label "
                    f"({ex['seconds']:.1f} s)."
                )
        paper = [[k, f"{v:.1f}%"] for k, v in IMAGE_ACCURACY.items()]
        lines += [
            "",
            "The paper's image results (NPT paper, appendix B.8; spec-npt 5.11), for reference:",
            "",
        ]
        lines += [*h.md_table(["setting", "accuracy"], paper), ""]
    if steps:
        lines += [
            "## Images per training step",
            "",
            "One training step of the default image model (forward, backward, optimiser) on a batch of "
            "n images, each in a fresh process: seconds (the second step), and the first step's "
            "memory (peak resident memory minus that before it; the model's weights are in the "
            "baseline, the optimiser state it creates is not).",
            "",
        ]
        rows = [
            [r["settings"][k] for k in ("model", "checkpoint", "batch")]
            + ([round(r["seconds"], 2), round(r["step_mb"] / 1024, 2), round(r["step_peak_rss_mb"] / 1024, 2)]
               if r["ok"] else [f"failed: {r['error'][-100:]}", "", ""])
            for r in steps
        ]  # fmt: skip
        heads = ["model", "checkpointing", "n", "seconds", "step memory (GiB)", "peak RSS (GiB)"]
        lines += h.md_table(heads, rows)
        lines += [
            "",
            f"Largest batch under {cap_gib:g} GiB of peak memory (a least-squares line of peak memory "
            "against n over the batches measured, extrapolated where none reached the cap):",
            "",
        ]
        groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
        for r in (r for r in steps if r["ok"]):
            groups.setdefault((r["settings"]["model"], r["settings"]["checkpoint"]), []).append(r)
        for key, ok in ((k, g) for k, g in groups.items() if len(g) >= 2):
            n = np.array([r["settings"]["batch"] for r in ok], dtype=float)
            mem = np.array([r["step_peak_rss_mb"] / 1024 for r in ok])
            slope, intercept = np.polyfit(n, mem, 1)
            measured = max((int(b) for b, g in zip(n, mem) if g <= cap_gib), default=0)
            lines.append(
                f"- {key[0]}, checkpointing {key[1]}: {slope * 1024:.2f} MiB per image; largest measured "
                f"batch under the cap {measured:,}; the line reaches {cap_gib:g} GiB at about "
                f"{int((cap_gib - intercept) / slope):,} images."
                if slope > 0
                else f"- {key[0]}, checkpointing {key[1]}: memory does not grow."
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--train", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per fit or step")
    parser.add_argument("--memory", action="store_true", help="images per step instead of the fits")
    parser.add_argument("--batches", default="512,2048,4096,8000")
    parser.add_argument("--cap-gib", type=float, default=16.0)
    parser.add_argument("--out", type=Path, default=h.RESULTS)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    records = h.Records(args.out / "images.jsonl")
    models = args.models.split(",")
    if unknown := set(models) - set(MODELS):
        raise SystemExit(f"unknown models {sorted(unknown)}; choose from {MODELS}")
    base = {"train": args.train, "seed": args.seed}
    grid = [{"kind": "fit", "model": m, **base} for m in models]
    if args.memory:
        sizes = [int(b) for b in args.batches.split(",")]
        grid = [{"kind": "memory", "model": m, "batch": b, "checkpoint": c, **base}
                for m in models if m in IMAGE_MODELS for c in (False, True) for b in sizes]  # fmt: skip

    def cell(s: dict[str, Any]) -> dict[str, Any]:  # the figures of explain_rows go to --out
        return h.run_cell(f"images:{s['kind']}", {**s, "out": str(args.out)}, timeout=args.timeout)

    for s in [] if args.report_only else grid:
        if s["kind"] == "fit" and s["model"] not in IMAGE_MODELS:  # the NPT fit's seconds as budget
            ref = records.get({"kind": "fit", "model": "npt", **base})
            if ref is None or not ref["ok"]:
                raise SystemExit(f"{s['model']} takes the NPT fit's seconds as its budget: run npt first")
            s["budget"] = round(ref["seconds"], 1)
        rec = records.run(s, cell)
        print(f"{s}: {rec.get('accuracy', rec.get('seconds', rec.get('error')))}", flush=True)
    current = [r for r in records.current() if all(r["settings"][k] == v for k, v in base.items())]
    fits = {r["settings"]["model"]: r for r in current if r["settings"]["kind"] == "fit"}
    fits = {m: fits[m] for m in MODELS if m in fits}
    steps = [r for r in current if r["settings"]["kind"] == "memory"]
    steps.sort(key=lambda r: (r["settings"]["model"], r["settings"]["checkpoint"], r["settings"]["batch"]))
    lines = report_lines(fits, steps, args.cap_gib)
    path = h.write_report(args.out / "images", "Image classification: MNIST", lines, current, records=current)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
