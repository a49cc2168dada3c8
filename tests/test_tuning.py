"""semiparam.tuning.tune and ``semiparam tune``: Optuna search over a table model's settings, serial
or as Ray Tune trials, writing trials.csv, best.toml (for ``fit --config``) and tune.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import log_loss

from semiparam import ConfigError, TablePredictor
from semiparam.cli.main import main
from semiparam.tuning import (
    _torch_threads,
    default_search_space,
    default_settings,
    load_config,
    to_toml,
    tune,
)

# every trial: a small, fast model; the search moves the learning rate and the dropout
MODEL = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2}
TRAIN = {"max_steps": 12, "eval_every": 4, "min_steps": 0, "min_anneal_steps": 2}
SPACE = {
    "train.learning_rate": ("log_float", (1e-3, 3e-2)),
    "model.dropout": ("float", (0.0, 0.3)),
}


def table(n: int = 100, seed: int = 0, classification: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(["x", "y", "z"], n)}
    )
    signal = 2 * frame["a"] - frame["b"] + (frame["c"] == "x") + 0.1 * rng.normal(size=n)
    frame["y"] = np.where(signal > 0, "up", "down") if classification else signal
    return frame


def small_tune(frame: pd.DataFrame, **kwargs):
    args = dict(
        model_options=MODEL,
        train_options=TRAIN,
        search_space=SPACE,
        n_trials=3,
        random_state=0,
        threads=1,
    )
    args.update(kwargs)
    return tune(frame, "y", **args)


def test_tune_runs_the_defaults_first_and_writes_its_files(tmp_path: Path) -> None:
    frame = table()
    result = small_tune(frame, out=tmp_path / "search")
    trials = result.trials
    assert list(trials["trial"]) == [0, 1, 2]
    assert (trials["state"] == "COMPLETE").all()
    first = trials.iloc[0]
    assert bool(first["defaults"]) and not trials["defaults"].iloc[1:].any()
    defaults = default_settings(SPACE, "npt", "cpu", MODEL, TRAIN)
    assert first["params.train.learning_rate"] == defaults["train.learning_rate"]
    assert result.defaults_score == pytest.approx(first["score"])
    assert result.best_score == pytest.approx(trials["score"].min())
    assert result.best_score <= result.defaults_score
    best = trials.loc[trials["score"].idxmin()]
    assert result.best_params == {k: best[f"params.{k}"] for k in SPACE}
    # the files: trials.csv as the frame, best.toml with the fixed settings too, tune.json
    out = tmp_path / "search"
    on_disk = pd.read_csv(out / "trials.csv")
    np.testing.assert_allclose(on_disk["score"], trials["score"])
    model_options, train_options = load_config(out / "best.toml")
    assert model_options == {**MODEL, "dropout": result.best_params["model.dropout"]}
    assert train_options == {**TRAIN, "learning_rate": result.best_params["train.learning_rate"]}
    assert (model_options, train_options) == (result.model_options, result.train_options)
    summary = json.loads((out / "tune.json").read_text())
    assert summary["best"]["score"] == pytest.approx(result.best_score)
    assert summary["rows"] == {"train": 80, "valid": 20}
    assert summary["trials"] == {"COMPLETE": 3}
    assert summary["settings"]["executor"] == "serial" and "backend" not in summary["settings"]


def fit_as_a_trial(
    frame: pd.DataFrame, fraction: float, stratify: bool
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The defaults' trial by hand: (train, held-out rows, predictions of the held-out rows)."""
    from sklearn.model_selection import train_test_split

    train, valid = train_test_split(
        frame, test_size=fraction, random_state=0, stratify=frame["y"] if stratify else None
    )
    train, valid = train.reset_index(drop=True), valid.reset_index(drop=True)
    with _torch_threads(1):  # as the trial ran
        estimator = TablePredictor(
            targets=["y"],
            n_estimators=1,
            model_options=MODEL,
            train_options=TRAIN,
            random_state=0,
            verbose=False,
        ).fit(train)
        return train, valid, estimator.predict(valid)


def test_the_score_is_the_held_out_rmse_in_training_standard_deviations() -> None:
    frame = table()
    result = small_tune(frame, n_trials=1)
    train, valid, pred = fit_as_a_trial(frame, 0.2, stratify=False)
    rmse = np.sqrt(np.mean((pred["y"].to_numpy() - valid["y"].to_numpy()) ** 2))
    assert result.best_score == pytest.approx(rmse / train["y"].std(), rel=1e-6)


def test_a_categorical_target_is_scored_by_log_loss() -> None:
    frame = table(classification=True)
    result = small_tune(frame, n_trials=1, validation_fraction=0.25)
    _, valid, pred = fit_as_a_trial(frame, 0.25, stratify=True)
    expected = log_loss(valid["y"], pred[["y_proba_down", "y_proba_up"]].to_numpy(), labels=["down", "up"])
    assert result.best_score == pytest.approx(expected, rel=1e-6)


def test_the_same_seed_gives_the_same_search() -> None:
    frame = table()
    a = small_tune(frame).trials
    b = small_tune(frame).trials
    columns = ["score", *[f"params.{k}" for k in SPACE]]
    pd.testing.assert_frame_equal(a[columns], b[columns])


def test_resume_continues_a_search_and_an_existing_one_is_not_overwritten(tmp_path: Path) -> None:
    frame = table()
    out = tmp_path / "search"
    first = small_tune(frame, n_trials=2, out=out).trials
    with pytest.raises(FileExistsError, match="overwrite"):
        small_tune(frame, n_trials=2, out=out)
    assert len(pd.read_csv(out / "trials.csv")) == 2  # untouched
    resumed = small_tune(frame, n_trials=3, out=out, resume=True).trials
    assert len(resumed) == 3
    pd.testing.assert_frame_equal(resumed.iloc[:2][first.columns], first, check_dtype=False)
    whole = small_tune(frame, n_trials=3).trials  # an uninterrupted search of three trials
    np.testing.assert_allclose(resumed["score"], whole["score"])
    again = small_tune(frame, n_trials=1, out=out, overwrite=True).trials
    assert len(again) == 1 and len(pd.read_csv(out / "trials.csv")) == 1


def test_bad_searches_are_refused_with_the_reason() -> None:
    frame = table()
    with pytest.raises(ConfigError, match="has no field 'no_such'"):
        small_tune(frame, search_space={"model.no_such": ("float", (0, 1))})
    with pytest.raises(ConfigError, match="model.<key> or train.<key>"):
        small_tune(frame, search_space={"dropout": ("float", (0, 1))})
    with pytest.raises(ConfigError, match="kind one of"):
        small_tune(frame, search_space={"model.dropout": ("gaussian", (0, 1))})
    with pytest.raises(ConfigError, match="empty"):
        small_tune(frame, search_space={"model.dropout": ("float", (0.3, 0.1))})
    with pytest.raises(ValueError, match=r"\['nope'\] not in the table"):
        tune(frame, "nope", search_space=SPACE)
    with pytest.raises(ConfigError, match="executor must be one of"):
        small_tune(frame, executor="dask")
    # backend=, the old name of executor: still read, with a FutureWarning naming executor=
    with pytest.warns(FutureWarning, match="use executor='dask'"):
        with pytest.raises(ConfigError, match="executor must be one of"):
            small_tune(frame, backend="dask")
    with pytest.raises(ConfigError, match="resume needs out"):
        small_tune(frame, resume=True)


def test_default_search_space_keys_exist_for_both_models() -> None:
    for model in ("npt", "spin"):
        space = default_search_space(model)
        defaults = default_settings(space, model)
        assert set(defaults) == set(space)
    with pytest.raises(ConfigError, match="no search space"):
        default_search_space("xgboost")


def test_to_toml_round_trips_through_the_cli_reader(tmp_path: Path) -> None:
    params = {"model.d_embedding": 16, "model.dropout": 0.125, "train.feature_transform": 'quan"tile'}
    path = tmp_path / "c.toml"
    path.write_text(to_toml(params, comment="a\nb"))
    assert load_config(path) == ({"d_embedding": 16, "dropout": 0.125}, {"feature_transform": 'quan"tile'})


def test_cli_tune_then_fit_with_the_best_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "table.csv"
    table().to_csv(data, index=False)
    out = tmp_path / "search"
    sets = [f"--set=model.{k}={v}" for k, v in MODEL.items()] + [
        f"--set=train.{k}={v}" for k, v in TRAIN.items()
    ]
    argv = ["tune", str(data), "--target", "y", "--trials", "2", "--out", str(out), "--threads", "1", *sets]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "2 of 2 trials finished" in printed and "--model npt --config" in printed
    assert main(argv) == 2  # the directory exists: refused without --force
    assert "already exists" in capsys.readouterr().err
    run = tmp_path / "run"
    assert (
        main(
            [
                "fit",
                str(data),
                "--target",
                "y",
                "--model",
                "npt",
                "--config",
                str(out / "best.toml"),
                "--out",
                str(run),
                "--quiet",
            ]
        )
        == 0
    )
    config = json.loads((run / "config.json").read_text())
    best = pd.read_csv(out / "trials.csv").sort_values("score").iloc[0]
    assert config["train_config"]["learning_rate"] == pytest.approx(best["params.train.learning_rate"])
    assert config["model_config"]["d_embedding"] == best["params.model.d_embedding"]  # searched
    assert config["model_config"]["n_heads"] == MODEL["n_heads"]  # set for every trial, not searched
    assert config["train_config"]["max_steps"] == TRAIN["max_steps"]


def test_ray_executor_matches_the_serial_search(ray_cluster, tmp_path: Path) -> None:
    pytest.importorskip("ray.tune")
    frame = table()
    # two trials: the defaults and one sampled point (each Ray trial is an actor start on two cores)
    serial = small_tune(frame, n_trials=2).trials
    ray = small_tune(frame, n_trials=2, executor="ray", max_concurrent=1, cpus_per_trial=1).trials
    columns = ["score", *[f"params.{k}" for k in SPACE]]
    pd.testing.assert_frame_equal(serial[columns], ray[columns], check_exact=False, rtol=1e-9)
    assert bool(ray["defaults"].iloc[0])
