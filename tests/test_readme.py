"""The README's Python and command-line examples run as written (issue 48), on small generated
tables and with a step ceiling of a few steps put in for the test's sake (the README's own fits
run to convergence): what a user copies first works."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from semiparam.cli.main import main
from semiparam.estimators.base import TableEstimatorMixin

README = Path(__file__).resolve().parents[1] / "README.md"
STEPS = 3  # the step ceiling every fit of this test gets
SKIPPED = ("impute-vcf", "demo")  # VCF inputs (tests/test_genomics_*), and the main job itself


def section_blocks(title: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of the README section ``## title`` (up to the next ``## ``)."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(rf"```{language}\n(.*?)```", text[start : end if end > 0 else None], re.S)


@pytest.fixture
def few_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = TableEstimatorMixin._configs

    def capped(self: TableEstimatorMixin) -> tuple:
        model_config, train_config = configs(self)
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
    block = section_blocks("Python", "python")[0]  # the first: the estimators
    exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - the README's own code
    assert namespace["proba"].shape == (30, 2) and not namespace["filled"]["hours"].isna().any()


def test_the_command_line_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
    block = section_blocks("Command line", "bash")[0]  # the first: fit, predict, ...
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
    assert ran >= 8
    assert pd.read_csv("predictions.csv")["customer_id"].tolist() == test["customer_id"].tolist()
