"""The ``semiparam`` command line on a small generated table."""

import json

import numpy as np
import pandas as pd
import pytest

from semiparam.cli.main import main

WIDTHS = ["--set", "model.d_embedding=8", "--set", "model.n_heads=2"]  # NPT's and SPIN's fields
TINY_SETS = [
    "--model",
    "npt",
    *WIDTHS,
    "--set",
    "model.n_blocks=2",
    "--set",
    "train.max_steps=10",
    "--quiet",
]
ONE = ["--n-estimators", "1"]  # one model (the cpu preset trains an ensemble of three)


@pytest.fixture
def csv(tmp_path, mixed_frame):
    path = tmp_path / "table.csv"
    mixed_frame.to_csv(path, index=False)
    return path


def test_fit_predict_round_trip(tmp_path, csv, capsys):
    run = tmp_path / "run"
    assert main(["fit", str(csv), "--target", "target,num", "--out", str(run), *ONE, *TINY_SETS]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["targets"] == ["target", "num"] and config["train_config"]["max_steps"] == 10
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 10 and "fit_seconds" in metrics
    assert (run / "model" / "model.safetensors").exists()
    out = tmp_path / "pred.csv"
    assert main(["predict", str(run), str(csv), "--out", str(out), "--quiet"]) == 0
    preds = pd.read_csv(out)
    assert len(preds) == 60 and {"target", "num"} <= set(preds.columns)


def test_impute(tmp_path, mixed_frame):
    damaged = mixed_frame.copy()
    damaged.loc[::7, "num"] = np.nan
    path = tmp_path / "holes.csv"
    damaged.to_csv(path, index=False)
    out = tmp_path / "filled.csv"
    assert main(["impute", str(path), "--out", str(out), *TINY_SETS]) == 0
    filled = pd.read_csv(out)
    assert filled.isna().sum().sum() == 0 and filled.shape == damaged.shape


def test_parquet_input(tmp_path, mixed_frame):
    pytest.importorskip("pyarrow")
    path = tmp_path / "table.parquet"
    mixed_frame.to_parquet(path)
    assert main(["fit", str(path), "--target", "target", "--out", str(tmp_path / "r"), *TINY_SETS]) == 0


def test_config_file_and_errors(tmp_path, csv, capsys):
    toml = tmp_path / "c.toml"
    toml.write_text(
        "[model]\nd_embedding = 8\nn_heads = 2\n[model.npt]\nn_blocks = 2\n[train]\nmax_steps = 5\n"
    )
    assert (
        main(
            [
                "fit",
                str(csv),
                "--target",
                "target",
                "--config",
                str(toml),
                "--out",
                str(tmp_path / "r"),
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "r" / "config.json").read_text())["train_config"]["max_steps"] == 5
    assert main(["fit", str(csv), "--target", "target", "--set", "train.max_stepz=3"]) == 2
    assert "max_stepz" in capsys.readouterr().err
    assert main(["fit", str(csv), "--target", "nope", *TINY_SETS]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["fit", str(tmp_path / "missing.csv"), "--target", "x"]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[modle]\nx = 1\n")
    assert main(["fit", str(csv), "--target", "target", "--config", str(bad)]) == 2
    assert "modle" in capsys.readouterr().err


def _series_table(n_tasks=8, seed=0):
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(n_tasks):
        t = np.sort(rng.uniform(0, 5, 10))
        parts.append(pd.DataFrame({"series": f"s{k}", "t": t, "value": np.sin(t + k)}))
    return pd.concat(parts, ignore_index=True)


def test_np_fit_then_np_predict(tmp_path, capsys):
    table = _series_table()
    data = tmp_path / "series.csv"
    table.to_csv(data, index=False)
    run = tmp_path / "run"
    fit = ["np-fit", str(data), "--task", "series", "--x", "t", "--y", "value", "--steps", "3"]
    assert main([*fit, "--batch-size", "4", "--out", str(run), "--quiet"]) == 0
    meta = json.loads((run / "np_run.json").read_text())
    assert meta["columns"] == {"task": "series", "x": ["t"], "y": ["value"]} and meta["n_tasks"] == 8
    assert main([*fit, "--out", str(run), "--quiet"]) == 2  # exists: refused without --force
    context = table.groupby("series").head(6)
    targets = table.drop(context.index)
    context.to_csv(tmp_path / "context.csv", index=False)
    targets.to_csv(tmp_path / "targets.csv", index=False)
    out = tmp_path / "pred.csv"
    args = ["np-predict", str(run), str(tmp_path / "context.csv"), str(tmp_path / "targets.csv")]
    assert main([*args, "--out", str(out)]) == 0
    pred = pd.read_csv(out)
    assert len(pred) == len(targets) and (pred["value_std"] > 0).all() and pred["value_mean"].notna().all()
    assert "log-likelihood" in capsys.readouterr().err  # the targets hold the outputs: scored
    # a target task without context points, or a missing column: one line, status 2
    targets.assign(series="unseen").to_csv(tmp_path / "bad.csv", index=False)
    assert main(["np-predict", str(run), str(tmp_path / "context.csv"), str(tmp_path / "bad.csv")]) == 2
    assert "no context points for task(s) ['unseen']" in capsys.readouterr().err
    targets.drop(columns="t").to_csv(tmp_path / "bad.csv", index=False)
    assert main(["np-predict", str(run), str(tmp_path / "context.csv"), str(tmp_path / "bad.csv")]) == 2


def test_np_cli_models_are_the_neural_process_registry() -> None:
    """np-fit's --model choices are the registry's names in lower case, each naming its class."""
    from semiparam.cli.np_cli import MODELS, _model_class
    from semiparam.estimators.neural_process import NEURAL_PROCESSES

    assert sorted(MODELS) == sorted(name.lower() for name in NEURAL_PROCESSES)
    assert all(_model_class(m).__name__.lower() == m for m in MODELS)


def test_overrides_read_toml_values_and_none() -> None:
    from semiparam._config import parse_override

    assert parse_override("train.max_steps=40") == ("train.max_steps", 40)
    assert parse_override("train.lr_schedule='constant'") == ("train.lr_schedule", "constant")
    assert parse_override("train.lr_schedule=constant") == ("train.lr_schedule", "constant")
    assert parse_override("train.patience=none") == ("train.patience", None)
    assert parse_override("train.patience=Null") == ("train.patience", None)
    with pytest.raises(ValueError, match="key=value"):
        parse_override("train.patience")


def test_fit_trains_the_recommended_estimator_by_default(tmp_path, csv, capsys):
    run = tmp_path / "run"
    sets = [*WIDTHS, "--set", "train.max_steps=5", "--quiet"]
    assert main(["fit", str(csv), "--target", "target", "--out", str(run), *ONE, *sets]) == 0
    meta = json.loads((run / "model" / "semiparam.json").read_text())
    assert meta["estimator"]["params"]["model"] == "auto" and meta["n_members"] == 2
    assert "fitted auto" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command",
    [
        ["fit", "t.csv", "--target", "y"],
        ["impute-vcf", "--target", "t.vcf", "--out", "o.vcf"],
        ["tune", "t.csv", "--target", "y", "--out", "o"],
    ],
)
def test_executor_option_and_its_hidden_deprecated_name_backend(command, capsys):
    """``--executor`` says where independent fits run; ``--backend``, its old name, still sets it
    with a FutureWarning and is left out of ``--help``."""
    from semiparam.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(command).executor == "serial"
    assert parser.parse_args([*command, "--executor", "ray"]).executor == "ray"
    with pytest.warns(FutureWarning, match="--backend is deprecated.*use --executor ray"):
        assert parser.parse_args([*command, "--backend", "ray"]).executor == "ray"
    with pytest.raises(SystemExit):
        parser.parse_args([*command, "--backend", "dask"])
    with pytest.raises(SystemExit):
        parser.parse_args([command[0], "--help"])
    shown = capsys.readouterr().out
    assert "--executor" in shown and "--backend" not in shown
