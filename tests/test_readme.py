"""The Python and command-line examples of the README and of the user guide (``docs/``) run as
written (issue 48), on small generated tables and with a step ceiling of a few steps put in for the
test's sake (the pages' own fits run to convergence): what a user copies works. Every block is
either run here or named in ``EXAMPLES`` with the test that runs it elsewhere or why it cannot run
on a test machine."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from semiparam.cli.main import main
from semiparam.estimators.base import TableEstimatorMixin

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = (README, *sorted((ROOT / "docs").rglob("*.md")))  # the README and the documentation site
STEPS = 3  # the step ceiling every fit of this test gets
SKIPPED = ("impute-vcf", "demo")  # VCF inputs (tests/test_genomics_*), and the main job itself


@pytest.fixture
def few_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = TableEstimatorMixin._configs

    def capped(self: TableEstimatorMixin, model_name: str | None = None) -> tuple:
        model_config, train_config = configs(self, model_name)
        return model_config, train_config.replace(max_steps=min(train_config.max_steps, STEPS), min_steps=0)

    monkeypatch.setattr(TableEstimatorMixin, "_configs", capped)


def frames(n: int = 80, seed: int = 0) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {"age": rng.integers(18, 80, n), "hours": rng.normal(40, 8, n), "job": rng.choice(["a", "b", "c"], n)}
    )
    income = np.where(X["hours"] + rng.normal(0, 5, n) > 40, ">50K", "<=50K")
    y = X["hours"] * 2 + rng.normal(size=n)
    return X, pd.Series(income, name="income"), pd.Series(y, name="y")


def test_the_python_examples_run(few_steps: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    X, labels, y = frames()
    holes = X.copy()
    holes.loc[::5, "hours"] = np.nan
    namespace = {
        "X_train": X[:50], "y_train": labels[:50], "X_test": X[50:],
        "X_val": X[50:65], "y_val": labels[50:65], "w": np.linspace(0.5, 2.0, 50),
        "X": X, "y": y, "X_new": X[60:], "df_with_missing_cells": holes,
        "X_more": X[20:], "y_more": labels[20:],
    }  # fmt: skip
    for section in ("A first fit", "Tables in Python"):  # the README's and the guide's
        (tmp_path / section).mkdir()
        monkeypatch.chdir(tmp_path / section)  # each saves its own model_dir
        ns = dict(namespace)
        exec(compile(example(section), section, "exec"), ns)  # noqa: S102 - the pages' own code
        assert ns["proba"].shape == (30, 2) and not ns["filled"]["hours"].isna().any()


@pytest.mark.parametrize("section, at_least", [("Command line", 8), ("On the command line", 4)])
def test_the_command_line_examples_run(
    section: str, at_least: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    X, labels, y = frames()
    table = X.assign(income=labels, y=y, weight=np.linspace(0.5, 2.0, len(X)))
    table[:60].to_csv("train.csv", index=False)
    test = table[60:].copy()
    test.insert(0, "customer_id", [f"c{k}" for k in range(len(test))])
    test.to_csv("test.csv", index=False)
    test.to_csv("labelled.csv", index=False)
    test.head(4).to_csv("few_rows.csv", index=False)
    holes = table.copy()
    holes.loc[::5, "hours"] = np.nan
    holes.to_csv("table_with_holes.csv", index=False)
    Path("settings.toml").write_text("[model]\nn_heads = 2\n\n[train]\nlearning_rate = 0.005\n")
    block = example(section)  # the first: fit, predict, ...
    ran = 0
    for line in block.splitlines():
        args = shlex.split(line, comments=True)
        if not args or args[0] != "semiparam" or args[1] in SKIPPED:
            continue
        args = args[1:]
        if args[0] in ("fit", "impute"):
            args += ["--set", f"train.max_steps={STEPS}", "--quiet"]
        if args[0] == "fit":
            args += ["--n-estimators", "1"]
        assert main(args) == 0, line
        ran += 1
    assert ran >= at_least
    assert pd.read_csv("predictions.csv")["customer_id"].tolist() == test["customer_id"].tolist()


# -- every other example ---------------------------------------------------------------------------

# Every fenced python/bash block of the pages, by (section, position in it): the test that runs
# it, or why no test runs it here. A new block fails test_every_example_is_accounted_for until it
# is entered here.
HEAVY = "a benchmark of minutes to hours; its scripts are tested in tests/test_bench.py and test_devsuite.py"
EXAMPLES = {
    ("semiparam", 0): "the two commands of a fresh machine (CI runs the second)",
    ("Getting started", 0): "the two commands of a fresh machine (CI runs the second)",
    ("Install", 0): "pip installs (CI installs the package and its test extra)",
    ("A first fit", 0): "test_the_python_examples_run",
    ("On the command line", 0): "test_the_command_line_examples_run",
    ("Documentation", 0): "the documentation build: tests/test_docs.py",
    ("Tables in Python", 0): "test_the_python_examples_run",
    ("Command line", 0): "test_the_command_line_examples_run",
    ("Neural processes (`semiparam.neural_processes`)", 0): "test_the_neural_process_examples_run",
    ("Neural processes (`semiparam.neural_processes`)", 1): "test_the_neural_process_examples_run",
    ("Neural processes (`semiparam.neural_processes`)", 2): "test_the_neural_process_examples_run",
    ("Neural processes (`semiparam.neural_processes`)", 3): HEAVY,  # the converged benchmark run
    (
        "Genotype imputation (`semiparam.genomics`)",
        0,
    ): "VCF files: tests/test_genomics_pipeline.py runs these commands",
    (
        "Genotype imputation (`semiparam.genomics`)",
        1,
    ): "VCF files: tests/test_genomics_pipeline.py runs impute_vcf",
    (
        "SPIN: train on large tables, predict without the training data",
        0,
    ): "test_the_spin_and_explanation_examples_run",
    ("Images: NPT and SPIN over image patches", 0): "test_the_image_example_runs",
    ("The prior-fitted NPT: predictions with no training", 0): "test_the_pretrained_example_runs",
    ("How it was made", 0): "an hour of pretraining and the suite; tests/test_pretrained.py runs the "
    "loop, its resume and the prediction at tiny sizes",
    (
        "Attention backends: exact, chunked, random features, top-k",
        0,
    ): "test_the_spin_and_explanation_examples_run",
    (
        "Explanations: which rows and which features drove a prediction",
        0,
    ): "test_the_spin_and_explanation_examples_run",
    ("Tuning: `semiparam tune`", 0): "test_the_tuning_examples_run (the Ray line: tests/test_tuning.py)",
    ("Tuning: `semiparam tune`", 1): "test_the_tuning_examples_run",
    ("More than one machine or process", 0): "Ray: tests/test_parallel.py and tests/test_tuning.py",
    ("More than one machine or process", 1): "Ray: tests/test_parallel.py",
    (
        "More than one machine or process",
        2,
    ): "torchrun: tests/test_distributed.py (GPUs and two machines: none here)",
    ("Datasets and benchmarks", 0): "test_the_dataset_example_runs",
    ("Datasets and benchmarks", 1): HEAVY,
    ("Development suite: models at their defaults", 0): HEAVY,
}


def all_blocks() -> dict[tuple[str, int], str]:
    """Every fenced python or bash block of the pages, keyed by its section's title and position
    in it (section titles are unique across the pages)."""
    blocks: dict[tuple[str, int], str] = {}
    for page in PAGES:
        section, count = "", 0
        for part in re.split(
            r"(^#{1,3} [^\n]*$|^```(?:python|bash)\n.*?^```$)", page.read_text(), flags=re.M | re.S
        ):
            if re.match(r"#{1,3} ", part):
                section, count = part.lstrip("#").strip(), 0
            elif part.startswith("```"):
                assert (section, count) not in blocks, f"two sections titled {section!r}"
                blocks[(section, count)] = part.split("\n", 1)[1].rsplit("```", 1)[0]
                count += 1
    return blocks


def example(section: str, index: int = 0, **replace: str) -> str:
    """A block's code with a few values replaced (a step count or a row count, for the test)."""
    code = all_blocks()[(section, index)]
    for old, new in replace.items():
        assert old in code, f"{old!r} is no longer in the {section!r} example"
        code = code.replace(old, new)
    return code


def test_every_example_is_accounted_for() -> None:
    assert set(all_blocks()) == set(EXAMPLES)


def test_the_neural_process_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    section = "Neural processes (`semiparam.neural_processes`)"
    ns: dict = {}
    exec(example(section, 0, **{"max_steps=2000": "max_steps=3"}), ns)  # noqa: S102
    assert ns["pred"].mean.shape == ns["batch"].target_y.shape and ns["ll"].shape == (16,)
    rng = np.random.default_rng(0)
    series = [(np.sort(rng.uniform(0, 5, (12, 1)), 0), rng.normal(size=(12, 1))) for _ in range(6)]
    df = pd.concat(
        pd.DataFrame({"series": k, "t": t[:, 0], "value": y[:, 0]}) for k, (t, y) in enumerate(series)
    )
    t, y = series[0]
    ns = {"CIPNP": ns["CIPNP"], "series": series, "df": df, "t_seen": t[:8], "y_seen": y[:8]}
    ns.update(t_new=t[8:], y_new=y[8:])
    exec(example(section, 1, **{"max_steps=2000": "max_steps=3"}), ns)  # noqa: S102
    assert ns["pred"].mean.shape == (4, 1) and np.isfinite(ns["ll"])
    df.to_csv("series.csv", index=False)
    df[df["t"] < 2.5].to_csv("context.csv", index=False)
    df[df["t"] >= 2.5].drop(columns="value").to_csv("targets.csv", index=False)
    for line in example(section, 2, **{"--steps 2000": "--steps 3"}).splitlines():
        args = shlex.split(line, comments=True)[1:]
        assert main(args + ["--quiet"] if args[0] == "np-fit" else args) == 0, line
    assert {"value_mean", "value_std"} <= set(pd.read_csv("predictions.csv").columns)


def test_the_spin_and_explanation_examples_run(
    few_steps: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    X, labels, y = frames()
    ns = {
        "X_train": X[:50], "y_train": labels[:50], "X_test": X[50:], "y_test": labels[50:],
        "X_more": X[20:], "y_more": labels[20:], "df": X.assign(income=labels),
    }  # fmt: skip
    exec(example("SPIN: train on large tables, predict without the training data"), ns)  # noqa: S102
    from semiparam import NPTRegressor, SPINClassifier

    ns.update(NPTRegressor=NPTRegressor, spin=ns["clf"])
    exec(example("Attention backends: exact, chunked, random features, top-k"), ns)  # noqa: S102
    code = example("Explanations: which rows and which features drove a prediction")
    exec("from semiparam import NPTClassifier\n" + code, ns)  # noqa: S102
    assert isinstance(ns["spin"], SPINClassifier)


def test_the_pretrained_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the shipped weights; the fine-tuning line with a few steps."""
    monkeypatch.chdir(tmp_path)
    X, labels, y = frames()
    ns = {"X_train": X[:50], "y_train": labels[:50], "X_test": X[50:], "X": X, "y": y}
    section = "The prior-fitted NPT: predictions with no training"
    exec(example(section, 0, **{"max_steps=200": f"max_steps={STEPS}"}), ns)  # noqa: S102
    assert ns["proba"].shape == (30, 2) and ns["tuned"].history_.n_steps <= STEPS


def test_the_tuning_examples_run(few_steps: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    X, _, y = frames(60)
    X.assign(y=y).to_csv("train.csv", index=False)
    cap = ["--set", f"train.max_steps={STEPS}", "--quiet"]
    ran = 0
    for line in example("Tuning: `semiparam tune`", 0, **{"--trials 30": "--trials 2"}).splitlines():
        args = shlex.split(line, comments=True)[1:]
        if "--executor" in args:  # Ray: tests/test_tuning.py
            continue
        if args[0] == "fit":
            args += ["--n-estimators", "1"]
        assert main(args + cap) == 0, line
        ran += 1
    assert ran == 3
    from semiparam import NPTRegressor

    ns = {"frame": X.assign(y=y), "NPTRegressor": NPTRegressor}
    code = example(
        "Tuning: `semiparam tune`", 1, **{"n_trials=30": "n_trials=2", 'out="tuned"': 'out="tuned2"'}
    )
    exec(code, ns)  # noqa: S102
    assert len(ns["result"].trials) == 2


def test_the_image_example_runs(few_steps: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from semiparam.datasets import load_mnist

    try:
        load_mnist()
    except (FileNotFoundError, OSError) as err:
        pytest.skip(f"the shipped MNIST test set is not here: {err}")
    monkeypatch.chdir(tmp_path)
    code = example(
        "Images: NPT and SPIN over image patches",
        **{"X[:8000], y[:8000]": "X[:60], y[:60]", "X[8000:]": "X[60:70]", "X[8000:8005]": "X[60:63]"},
    )
    ns: dict = {}
    exec(code, ns)  # noqa: S102


def test_the_dataset_example_runs() -> None:
    from semiparam.datasets import load

    try:
        load("boston")
    except (FileNotFoundError, OSError) as err:
        pytest.skip(f"the shipped UCI tables are not here: {err}")
    ns: dict = {}
    exec(example("Datasets and benchmarks"), ns)  # noqa: S102
    assert ns["ds"].task == "regression"
