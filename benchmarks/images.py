#!/usr/bin/env python
"""Images (issue 17): NPT and SPIN image classifiers on the shipped MNIST images, beside a
scikit-learn MLP and a small CNN trained for the same time, and the paper's numbers.

    .venv/bin/python benchmarks/images.py                      # npt, spin, mlp, cnn (about 40 min)
    .venv/bin/python benchmarks/images.py --models npt,mlp,cnn
    .venv/bin/python benchmarks/images.py --memory             # images per training step
    .venv/bin/python benchmarks/images.py --report-only

Data: the MNIST **test** set shipped in ``$SEMIPARAM_DATA_DIR/mnist`` (10,000 images; the 60,000
training images are not in the project's copy). A seeded random split (``--seed``, default 0)
takes ``--train`` images (default 8,000) to fit on and the other images to test on; every model
sees the same split. NOTE[DIFF]: the paper trains on MNIST's 60,000 training images for 500,000
steps on a GPU; its accuracy is printed beside ours, not compared as equal.

Protocol: the image classifiers run at their defaults (only ``random_state`` set). The baselines
then get the NPT fit's wall-clock seconds as their budget: ``MLPClassifier`` (scikit-learn's
defaults, one hidden layer of 100) with ``partial_fit`` epochs, and a small CNN (two 3x3
convolutions of 32 and 64 channels with max-pooling, a 128-unit layer; Adam at 1e-3, batches of
128) trained epoch by epoch, each until the budget is spent; the model after the last epoch is
scored. Pixels are scaled to [0, 1] for the baselines. Each model runs in a fresh process (its
peak memory is that process's); threads: 2, the whole machine, so run it alone.

``--memory``: one training step of the default NPT (and SPIN) image model at growing batches of
images (``--batches``), each in a fresh process: seconds and peak memory per step, with and without
activation checkpointing (``checkpoint_blocks``); the report fits memory against the batch size and
gives the largest batch under ``--cap-gib``.

Every run appends one line to ``<out>/images.jsonl`` (the run resumes: models done with the
current code are skipped); ``images.md`` is generated from it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parent / "results"
MODELS = ("npt", "spin", "mlp", "cnn")
IMAGE_MODELS = ("npt", "spin")
THREADS = 2


def split(n_train: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from semiparam.datasets import load_mnist

    X, y = load_mnist()
    order = np.random.default_rng(seed).permutation(len(X))
    train, test = order[:n_train], order[n_train:]
    return X[train], y[train], X[test], y[test]


def _code() -> str:
    from semiparam.bench.measure import PRESENTATION_ONLY, code_hash

    return code_hash(exclude=PRESENTATION_ONLY)  # the table models and the image modules


# -- the workers (one fresh process each) --------------------------------------------------------
def fit_image_model(model: str, args: argparse.Namespace) -> dict[str, Any]:
    from semiparam import NPTImageClassifier, SPINImageClassifier
    from semiparam.bench.measure import measure

    X, y, X_test, y_test = split(args.train, args.seed)
    cls = NPTImageClassifier if model == "npt" else SPINImageClassifier
    clf = cls(random_state=args.seed, verbose=False)
    with measure() as m:
        clf.fit(X, y)
    start = time.perf_counter()
    proba = clf.predict_proba(X_test)
    predict_seconds = time.perf_counter() - start
    h = clf.history_
    explained = explain_figure(clf, model, X, y, X_test, y_test, Path(args.out))
    return {
        "seconds": m.seconds,
        "peak_rss_gib": m.peak_rss_mb / 1024,
        "predict_seconds": predict_seconds,
        **_scores(proba, clf.classes_, y_test),
        "steps": [mh.n_steps for mh in h.members],
        "best_steps": [mh.best_step for mh in h.members],
        "stop_reasons": [mh.stop_reason for mh in h.members],
        "settings": {"params": {k: repr(v) for k, v in clf.get_params().items()}},
        "explained": explained,
    }


def explain_figure(
    clf: Any, model: str, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, out: Path
) -> dict[str, Any]:
    """``explain_rows`` for the first six test images: a figure of each with the five training
    images its prediction attended to most (``images_explain_<model>.png``), and the share of
    those whose label is the test image's own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queries, top_k = 6, 5
    context = (X, y) if model == "spin" else None  # SPIN keeps only an encoding of its images
    start = time.perf_counter()
    rows = clf.explain_rows(X_test[:queries], top_k=top_k, context=context)
    seconds = time.perf_counter() - start
    pred = clf.predict(X_test[:queries])
    fig, axes = plt.subplots(queries, top_k + 1, figsize=(1.6 * (top_k + 1), 1.7 * queries))
    for q in range(queries):
        axes[q, 0].imshow(X_test[q], cmap="gray_r")
        axes[q, 0].set_title(f"test: {y_test[q]} (pred {pred[q]})", fontsize=7)
        chosen = rows[rows["row"] == q].sort_values("rank")
        for k, (_, r) in enumerate(chosen.iterrows()):
            j = int(r["context_row"])
            axes[q, k + 1].imshow(X[j], cmap="gray_r")
            axes[q, k + 1].set_title(f"train #{j}: {y[j]}\n{r['score']:.2g}", fontsize=7)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{model.upper()}: the training images each test prediction attended to most", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / f"images_explain_{model}.png", dpi=110)
    plt.close(fig)
    ctx = rows["context_row"].to_numpy().astype(int)
    same = float((y[ctx] == y_test[rows["row"].to_numpy().astype(int)]).mean())
    return {"queries": queries, "top_k": top_k, "same_label_share": same, "seconds": seconds}


def _scores(proba: np.ndarray, classes: np.ndarray, y_test: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import log_loss

    pred = classes[np.argmax(proba, axis=1)]
    proba = np.clip(proba, 1e-15, 1)
    return {
        "accuracy": float((pred == y_test).mean()),
        "log_loss": float(log_loss(y_test, proba / proba.sum(axis=1, keepdims=True), labels=classes)),
    }


def fit_mlp(args: argparse.Namespace, budget: float) -> dict[str, Any]:
    from sklearn.neural_network import MLPClassifier

    from semiparam.bench.measure import measure

    X, y, X_test, y_test = split(args.train, args.seed)
    Xf, Xt = X.reshape(len(X), -1) / 255.0, X_test.reshape(len(X_test), -1) / 255.0
    clf = MLPClassifier(random_state=args.seed)
    classes = np.unique(y)
    epochs = 0
    with measure() as m:
        start = time.perf_counter()
        while time.perf_counter() - start < budget:
            clf.partial_fit(Xf, y, classes=classes)
            epochs += 1
    return {
        "seconds": m.seconds,
        "peak_rss_gib": m.peak_rss_mb / 1024,
        **_scores(clf.predict_proba(Xt), clf.classes_, y_test),
        "epochs": epochs,
        "settings": {"MLPClassifier": "defaults (100 hidden units, adam 1e-3, batch 200)", "budget": budget},
    }


def fit_cnn(args: argparse.Namespace, budget: float) -> dict[str, Any]:
    import torch
    from torch import nn

    from semiparam.bench.measure import measure

    torch.manual_seed(args.seed)
    X, y, X_test, y_test = split(args.train, args.seed)
    classes = np.unique(y)
    xs = torch.as_tensor(X[:, None] / 255.0, dtype=torch.float32)
    ys = torch.as_tensor(np.searchsorted(classes, y))
    net = nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 5 * 5, 128),
        nn.ReLU(),
        nn.Linear(128, len(classes)),
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(args.seed)
    epochs = 0
    with measure() as m:
        start = time.perf_counter()
        while time.perf_counter() - start < budget:
            net.train()
            for idx in torch.randperm(len(xs), generator=gen).split(128):
                opt.zero_grad()
                nn.functional.cross_entropy(net(xs[idx]), ys[idx]).backward()
                opt.step()
            epochs += 1
    net.eval()
    with torch.no_grad():
        proba = torch.softmax(net(torch.as_tensor(X_test[:, None] / 255.0, dtype=torch.float32)), -1)
    return {
        "seconds": m.seconds,
        "peak_rss_gib": m.peak_rss_mb / 1024,
        **_scores(proba.double().numpy(), classes, y_test),
        "epochs": epochs,
        "settings": {"cnn": "conv32-pool-conv64-pool-fc128, adam 1e-3, batch 128", "budget": budget},
    }


def memory_step(model: str, batch: int, checkpoint: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Seconds and peak memory of one training step of the default image model on ``batch``
    images (the model and step that ``fit`` runs, built through the estimator's own settings)."""
    import torch

    from semiparam import NPTImageClassifier, SPINImageClassifier
    from semiparam.bench import Batch, Trainer, get_model
    from semiparam.bench.measure import measure

    X, y, _, _ = split(args.train, args.seed)
    reps = int(np.ceil(batch / len(X)))
    X, y = np.concatenate([X] * reps)[:batch], np.concatenate([y] * reps)[:batch]
    cls = NPTImageClassifier if model == "npt" else SPINImageClassifier
    clf = cls(random_state=0, verbose=False, model_options={"checkpoint_blocks": checkpoint})
    clf.classes_ = np.unique(y)
    clf._set_geometry(tuple(X[:, None].shape[1:]))
    clf._pixel_stats(X[:, None] / 255.0)
    model_config, train_config = clf._configs()
    encoder = clf._encoder()
    enc = clf._encode(X[:, None].astype(np.float32) / 255.0, y)
    _, module_cls = get_model(model)
    layout = encoder.schema.layout()
    module = module_cls(model_config, layout)
    target = torch.zeros(layout.n_columns, dtype=torch.bool)
    target[-1] = True
    trainer = Trainer(module, layout, target, train_config.replace(batch_size=batch))
    values, missing = torch.as_tensor(enc.values), torch.as_tensor(enc.missing)
    b = Batch(values, missing, torch.ones(batch, dtype=torch.bool))
    with measure() as first:  # memory: the first step (later ones reuse what it allocated)
        trainer.train_step(b, 0)
    with measure() as m:  # time: the second
        trainer.train_step(b, 1)
    return {
        "seconds": m.seconds,
        "peak_rss_gib": max(first.peak_rss_mb, m.peak_rss_mb) / 1024,
        "step_gib": first.peak_above_start_mb / 1024,
    }


def worker(argv: list[str]) -> None:
    import torch

    torch.set_num_threads(THREADS)
    parser = argparse.ArgumentParser()
    parser.add_argument("kind")
    parser.add_argument("--model")
    parser.add_argument("--budget", type=float, default=0.0)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--checkpoint", action="store_true")
    parser.add_argument("--train", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.kind == "fit":
        if args.model in IMAGE_MODELS:
            out = fit_image_model(args.model, args)
        elif args.model == "mlp":
            out = fit_mlp(args, args.budget)
        else:
            out = fit_cnn(args, args.budget)
    else:
        out = memory_step(args.model, args.batch, args.checkpoint, args)
    print("RESULT " + json.dumps(out))


def _spawn(args: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"over the {timeout:.0f} s limit"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {"error": " | ".join(tail) or f"exit code {done.returncode}"}


# -- the report ----------------------------------------------------------------------------------
def write_report(out: Path, records: list[dict[str, Any]], code: str) -> None:
    from semiparam.bench.paper import IMAGE_ACCURACY

    current = [r for r in records if r.get("code", {}).get("semiparam") == code]
    fits = {r["model"]: r for r in current if r["kind"] == "fit"}
    steps = [r for r in current if r["kind"] == "memory"]
    lines = [
        "# Image classification: MNIST",
        "",
        "Generated by `benchmarks/images.py` from `images.jsonl`. "
        f"Code: `{code}` (table models and image modules); {len(records) - len(current)} line(s) of "
        "other code left out.",
        "",
    ]
    if current:
        any_r = current[0]
        commands = sorted({r["command"] for r in current})
        heads = sorted({f"{str(r['code'].get('git_head'))[:10]}" for r in current})
        m = any_r["machine"]
        lines += [
            "Commands: " + "; ".join(f"`{c}`" for c in commands),
            f"Machine: {m.get('cpu')}, {m.get('cpu_count')} cores, {THREADS} threads; "
            f"git {', '.join(heads)}.",
            "",
        ]
    if fits:
        r0 = next(iter(fits.values()))
        lines += [
            f"Split: the shipped MNIST test set (10,000 images), a random {r0['train']:,} to train on "
            f"(seed {r0['seed']}), the other {10000 - r0['train']:,} to test on. Baselines trained "
            "for the NPT fit's seconds.",
            "",
            "| model | test accuracy | log loss | fit seconds | peak memory (GiB) | training |",
            "|---|---|---|---|---|---|",
        ]
        for name in MODELS:
            r = fits.get(name)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {name} | failed: {r['error']} | | | | |")
                continue
            if name in IMAGE_MODELS:
                how = f"steps {r['steps']}, best {r['best_steps']}, {', '.join(r['stop_reasons'])}"
            else:
                how = f"{r['epochs']} epochs in a {r['settings']['budget']:.0f} s budget"
            lines.append(
                f"| {name} | {r['accuracy']:.4f} | {r['log_loss']:.4f} | {r['seconds']:.0f} | "
                f"{r['peak_rss_gib']:.2f} | {how} |"
            )
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
        lines += [
            "",
            "The paper's image results (NPT paper, appendix B.8; spec-npt 5.11), for reference:",
            "",
        ]
        lines += ["| setting | accuracy |", "|---|---|"]
        for setting, acc in IMAGE_ACCURACY.items():
            lines.append(f"| {setting} | {acc:.1f}% |")
        lines.append("")
    if steps:
        cap = steps[0]["cap_gib"]
        lines += [
            "## Images per training step",
            "",
            "One training step of the default image model (forward, backward, optimiser) on a batch of "
            "n images, each in a fresh process: seconds (the second step), and the first step's "
            "memory (peak resident memory minus that before it; the model's weights are in the "
            "baseline, the optimiser state it creates is not).",
            "",
            "| model | checkpointing | n | seconds | step memory (GiB) | peak RSS (GiB) |",
            "|---|---|---|---|---|---|",
        ]
        for r in sorted(steps, key=lambda r: (r["model"], r["checkpoint"], r["batch"])):
            if "error" in r:
                lines.append(
                    f"| {r['model']} | {r['checkpoint']} | {r['batch']:,} | failed: {r['error']} | | |"
                )
                continue
            lines.append(
                f"| {r['model']} | {r['checkpoint']} | {r['batch']:,} | {r['seconds']:.2f} | "
                f"{r['step_gib']:.2f} | {r['peak_rss_gib']:.2f} |"
            )
        lines += [
            "",
            f"Largest batch under {cap:g} GiB of peak memory (a least-squares line of peak memory "
            "against n over the batches measured, extrapolated where none reached the cap):",
            "",
        ]
        for key in sorted({(r["model"], r["checkpoint"]) for r in steps}):
            ok = [r for r in steps if (r["model"], r["checkpoint"]) == key and "error" not in r]
            if len(ok) < 2:
                continue
            n = np.array([r["batch"] for r in ok], dtype=float)
            mem = np.array([r["peak_rss_gib"] for r in ok])
            slope, intercept = np.polyfit(n, mem, 1)
            largest = int((cap - intercept) / slope) if slope > 0 else None
            measured = max((int(b) for b, g in zip(n, mem) if g <= cap), default=0)
            lines.append(
                f"- {key[0]}, checkpointing {key[1]}: {slope * 1024:.2f} MiB per image; largest measured "
                f"batch under the cap {measured:,}; the line reaches {cap:g} GiB at about "
                f"{largest:,} images."
                if largest
                else f"- {key[0]}, checkpointing {key[1]}: memory does not grow."
            )
        lines.append("")
    (out / "images.md").write_text("\n".join(lines) + "\n")
    (out / "images.json").write_text(json.dumps({"code": code, "records": current}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--worker":
        worker(argv[1:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--train", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per fit or step")
    parser.add_argument("--memory", action="store_true", help="images per step instead of the fits")
    parser.add_argument("--batches", default="512,2048,4096,8000")
    parser.add_argument("--cap-gib", type=float, default=16.0)
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import devsuite

    from semiparam.bench.measure import machine_info

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "images.jsonl"
    records = [json.loads(s) for s in (jsonl.read_text().splitlines() if jsonl.exists() else []) if s.strip()]
    code = _code()
    context = {
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
        "code": {**devsuite.code_version(), "semiparam": code},
        "machine": {k: v for k, v in machine_info().items() if not k.startswith("load")},
        "train": args.train,
        "seed": args.seed,
    }

    def done(**key: Any) -> dict[str, Any] | None:
        for r in records:
            if r.get("code", {}).get("semiparam") == code and all(r.get(k) == v for k, v in key.items()):
                if r["kind"] != "fit" or (r["train"], r["seed"]) == (args.train, args.seed):
                    return r
        return None

    def add(record: dict[str, Any]) -> None:
        records.append(record)
        with jsonl.open("a") as fh:
            fh.write(json.dumps(devsuite.jsonable(record)) + "\n")
        write_report(out, records, code)

    common = ["--train", str(args.train), "--seed", str(args.seed), "--out", str(out)]
    if not args.report_only and not args.memory:
        for model in args.models.split(","):
            if model not in MODELS:
                raise SystemExit(f"unknown model {model!r}; choose from {MODELS}")
            if done(kind="fit", model=model):
                continue
            extra: list[str] = []
            if model not in IMAGE_MODELS:
                ref = done(kind="fit", model="npt")
                if ref is None or "error" in ref:
                    raise SystemExit(f"{model} takes the NPT fit's seconds as its budget: run npt first")
                extra = ["--budget", f"{ref['seconds']:.1f}"]
            print(f"fitting {model} ...", flush=True)
            result = _spawn(["fit", "--model", model, *common, *extra], args.timeout)
            add({"kind": "fit", "model": model, **result, **context})
            print(f"  {model}: {result.get('accuracy', result.get('error'))}", flush=True)
    if not args.report_only and args.memory:
        for model in [m for m in args.models.split(",") if m in IMAGE_MODELS]:
            for checkpoint in (False, True):
                for batch in (int(b) for b in args.batches.split(",")):
                    if done(kind="memory", model=model, batch=batch, checkpoint=checkpoint):
                        continue
                    flag = ["--checkpoint"] if checkpoint else []
                    result = _spawn(
                        ["step", "--model", model, "--batch", str(batch), *flag, *common], args.timeout
                    )
                    add(
                        {
                            "kind": "memory",
                            "model": model,
                            "batch": batch,
                            "checkpoint": checkpoint,
                            "cap_gib": args.cap_gib,
                            **result,
                            **context,
                        }
                    )
                    print(f"  {model} n={batch} checkpoint={checkpoint}: {result}", flush=True)
    write_report(out, records, code)
    print(f"wrote {out / 'images.md'}")


if __name__ == "__main__":
    main()
