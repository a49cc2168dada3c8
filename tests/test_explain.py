"""Explanations: which context rows and which features drove a prediction (issue "Explanations")."""

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from semiparam import NPTClassifier, NPTRegressor, SPINClassifier, SPINRegressor, TablePredictor

from .lookup import assert_reads_its_context, lookup_task

TINY = {"d_embedding": 8, "n_heads": 2}


def _features(n: int, p: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(rng.normal(size=(n, p)), columns=[f"x{j}" for j in range(p)])


# -- the acceptance checks -------------------------------------------------------------------------


def test_mask_attribution_finds_the_two_features_the_target_uses():
    """y depends on x0 and x1 only (of ten): the mask decomposition ranks those two first for
    >= 80% of rows and gives the eight others next to nothing. (Not every row: the rows an NPT
    reads for a prediction are chosen by all ten features, so hiding an ignored one moves some
    predictions a little, by seed as much as by row similarity.)"""
    X = _features(400, 10, seed=3)
    y = 2.0 * X["x0"] - 1.5 * X["x1"] + 0.05 * np.random.default_rng(4).normal(size=len(X))
    reg = NPTRegressor(max_steps=300, n_estimators=1, model_options=TINY, random_state=0, verbose=False)
    reg.fit(X, y)  # one member: the ensemble's averaging is checked on the tiny tables below
    X_test = _features(50, 10, seed=5)
    attr = reg.explain_features(X_test, method="mask")
    assert attr.shape == (50, 10) and list(attr.columns) == list(X.columns)
    top2 = np.argsort(-attr.abs().to_numpy(), axis=1)[:, :2]
    assert (np.sort(top2, axis=1) == [0, 1]).all(axis=1).mean() >= 0.8
    relevant = attr[["x0", "x1"]].abs().to_numpy().mean()
    ignored = attr.drop(columns=["x0", "x1"]).abs().to_numpy().mean()
    assert ignored < 0.1 * relevant
    # the global summary agrees: hiding x0 or x1 everywhere costs most
    importances = reg.feature_importances(X_test, 2.0 * X_test["x0"] - 1.5 * X_test["x1"])
    assert set(importances.index[:2]) == {"x0", "x1"}
    assert importances.attrs["metric"] == "rmse" and importances["importance"].iloc[0] > 0


def test_default_npt_reads_its_context_the_copy_of_a_query_and_its_label():
    """Issue 49, item 4: 150 rows twice, each pair with a random label unrelated to the
    features, the queries copies of the rows. The default NPTRegressor (its members too) predicts
    the labels of the context it is given: after ``set_context`` with new random labels for the
    same rows its predictions follow the new labels (correlation >= 0.8), not the old, and its
    (cosine) row attention ranks one of the query's copies first for at least 90% of the queries
    (``benchmarks/context_use.py`` over three seeds, one member and the default ensemble)."""
    X, twice, y, y_new = lookup_task(seed=1)
    reg = NPTRegressor(random_state=1, verbose=False).fit(twice, np.tile(y, 2))
    assert_reads_its_context(reg, X, twice, y, y_new)


# -- each method on tiny tables --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_classifier():
    X = _features(80, 4, seed=11)
    X["c"] = np.where(X["x0"] > 0, "a", "b")
    y = np.where(X["x0"] + 0.3 * X["x1"] > 0, "yes", "no")
    clf = NPTClassifier(max_steps=40, model_options=TINY, random_state=0, verbose=False).fit(X, y)
    return clf, X, y


def test_row_attributions_name_rows_of_the_context(tiny_classifier):
    clf, X, _ = tiny_classifier
    out = clf.explain_rows(X.iloc[:5], top_k=3)
    assert out.shape == (15, 4)
    assert out["context_row"].between(0, len(X) - 1).all()
    assert (out.groupby("row")["rank"].apply(list) == [[1, 2, 3]] * 5).all()
    scores = out["score"].to_numpy().reshape(5, 3)
    assert (np.diff(scores, axis=1) <= 1e-12).all()  # ranked by score
    deletion = clf.explain_rows(X.iloc[:2], top_k=2, method="deletion", n_candidates=4)
    assert np.isfinite(deletion["score"]).all()


def test_feature_attributions_every_method_and_scale(tiny_classifier):
    clf, X, _ = tiny_classifier
    names = ["x0", "x1", "x2", "x3", "c"]
    for scale in ("probability", "information", "log_odds"):
        out = clf.explain_features(X.iloc[:4], scale=scale)
        assert list(out.columns) == names and out.shape == (4, 5) and np.isfinite(out.to_numpy()).all()
    column = clf.explain_features(X.iloc[:4], scope="column")
    assert column.shape == (4, 5)
    lime = clf.explain_features(X.iloc[:3], method="lime", n_samples=64, random_state=0)
    assert lime.shape == (3, 5) and lime.attrs["fidelity"].shape == (3,)
    assert (lime.attrs["fidelity"] <= 1.0 + 1e-9).all()
    same = clf.explain_features(X.iloc[:3], method="lime", n_samples=64, random_state=0)
    pd.testing.assert_frame_equal(lime, same)
    importances = clf.feature_importances(X, clf.predict(X))
    assert sorted(importances.index) == sorted(names) and importances.attrs["metric"] == "log_loss"


def test_gradient_attribution_uses_captum(tiny_classifier):
    pytest.importorskip("captum")
    clf, X, _ = tiny_classifier
    out = clf.explain_features(X.iloc[:4], method="gradient")
    assert out.shape == (4, 5) and np.isfinite(out.to_numpy()).all()
    assert np.abs(out.to_numpy()).sum() > 0


def test_npt_attention_maps_shapes_and_rows_sum_to_one(tiny_classifier):
    clf, X, _ = tiny_classifier
    maps = clf.attention_maps(X.iloc[:3])
    config = clf.learner_.module.config
    blocks = config.n_blocks // 2
    assert maps["rows"].shape == (blocks, 3, 2, len(X) + 1)
    np.testing.assert_allclose(maps["rows"].sum(-1), 1.0, rtol=1e-9)
    cells = config.column_head_count(config.n_heads)  # the heads within a row
    assert maps["columns"].shape == (blocks, 3, cells, 6, 6)  # 5 features + the target
    assert maps["column_names"][-1] == "__target__"
    np.testing.assert_array_equal(maps["context_rows"], np.arange(len(X)))
    with pytest.raises(ValueError, match="max_rows"):
        clf.attention_maps(X, max_rows=10)


def test_spin_needs_its_rows_for_row_explanations():
    X = _features(60, 3, seed=2)
    y = X["x0"].to_numpy()
    reg = SPINRegressor(max_steps=20, n_estimators=2, model_options=TINY, random_state=0, verbose=False)
    reg.fit(X, y)
    with pytest.raises(ValueError, match="context=\\(X_train, y_train\\)"):
        reg.explain_rows(X.iloc[:2])
    out = reg.explain_rows(X.iloc[:2], top_k=2, context=(X, y))
    assert out.shape == (4, 4)
    maps = reg.attention_maps(X.iloc[:2], context=(X, y))
    h = reg.learner_.model_config.n_inducing
    assert maps["inducing_points"].shape[::2] == (2, h)
    np.testing.assert_allclose(maps["composed"].sum(-1), 1.0, rtol=1e-9)
    assert reg.explain_features(X.iloc[:2]).shape == (2, 3)  # needs no rows


def test_table_predictor_explains_a_named_target():
    X = _features(60, 3, seed=4)
    X["label"] = np.where(X["x0"] > 0, "u", "v")
    X["size"] = X["x1"] * 2
    model = TablePredictor(targets=["label", "size"], max_steps=20, model_options=TINY, random_state=0)
    model.fit(X)
    with pytest.raises(ValueError, match="name one with target="):
        model.explain_features(X.iloc[:2])
    out = model.explain_features(X.iloc[:2], target="size")
    assert list(out.columns) == ["x0", "x1", "x2"]


def test_bad_arguments_are_named(tiny_classifier):
    clf, X, y = tiny_classifier
    with pytest.raises(ValueError, match="unknown method"):
        clf.explain_rows(X.iloc[:2], method="shapley")
    with pytest.raises(ValueError, match="unknown method"):
        clf.explain_features(X.iloc[:2], method="shap")
    with pytest.raises(ValueError, match="larger than the context"):
        clf.explain_rows(X.iloc[:2], top_k=len(X) + 1)
    with pytest.raises(ValueError, match="positive integer"):
        clf.explain_rows(X.iloc[:2], top_k=0)
    with pytest.raises(ValueError, match="target_class"):
        clf.explain_features(X.iloc[:2], target_class="maybe")
    with pytest.raises(ValueError, match="unknown scale"):
        clf.explain_features(X.iloc[:2], scale="odds")
    with pytest.raises(ValueError, match="scope='column' applies"):
        clf.explain_features(X.iloc[:2], method="lime", scope="column")
    with pytest.raises(NotFittedError):
        NPTClassifier().explain_rows(X)
    with pytest.raises(NotFittedError):
        SPINClassifier().explain_features(X)
    reg = NPTRegressor(max_steps=5, model_options=TINY, random_state=0, verbose=False).fit(X, X["x0"])
    with pytest.raises(ValueError, match="categorical target"):
        reg.explain_features(X.iloc[:2], scale="log_odds")


# -- the paper's analyses and the command line -----------------------------------------------------


def test_analyses_report_and_command_line(tmp_path, tiny_classifier):
    from semiparam.bench import corruption_test, deletion_test, lookup_test, write_analysis
    from semiparam.cli.main import main as cli_main

    clf, X, y = tiny_classifier
    result = corruption_test(clf, X.iloc[:10], y[:10], seed=0, dataset="Breast Cancer")
    assert set(result["clean"]) == {"accuracy", "log_loss"} and result["paper_change"] == 0.0
    assert result["change_unit"] == "accuracy points"
    deletion = deletion_test(clf, X.iloc[:3], n_rows=3, curve_points=2, max_retry=3)
    assert deletion["curve"]["removed"][0] == 0 and len(deletion["curve"]["by_attention"]) >= 2
    assert deletion["curve"]["by_attention"][0] < 1e-9  # nothing removed, nothing changed
    path = write_analysis(tmp_path / "rep", "corruption", [result], "test")
    assert "Corruption test" in path.read_text() and (tmp_path / "rep" / "corruption.json").exists()

    Xl = _features(40, 3, seed=9)
    yl = np.random.default_rng(2).integers(0, 2, 40)
    model = NPTClassifier(max_steps=10, model_options=TINY, random_state=0, verbose=False)
    lookup = lookup_test(model, Xl.iloc[:30], yl[:30], Xl.iloc[30:], yl[30:], dataset="toy")
    assert 0.0 <= lookup["attention_top1_is_duplicate"] <= 1.0 and lookup["n_test"] == 10
    assert not hasattr(model, "learner_")  # a clone was trained, with the lookup task
    assert lookup["shuffle_targets"] and set(lookup["chance"]) == {"accuracy", "log_loss"}

    data = tmp_path / "train.csv"
    X.assign(label=y).to_csv(data, index=False)
    run = tmp_path / "run"
    assert cli_main(["fit", str(data), "--target", "label", "--model", "npt", "--quiet", "--out", str(run),
                     "--set", "train.max_steps=10", "--set", "model.d_embedding=8",
                     "--set", "model.n_heads=2"]) == 0  # fmt: skip
    few = tmp_path / "few.csv"
    X.iloc[:3].to_csv(few, index=False)
    assert cli_main(["explain", str(run), str(few), "--out", str(tmp_path / "ex"), "--top-k", "2"]) == 0
    assert (tmp_path / "ex" / "features.csv").exists() and (tmp_path / "ex" / "rows.csv").exists()
    rows = pd.read_csv(tmp_path / "ex" / "rows.csv")
    assert len(rows) == 6
    out = tmp_path / "an"
    assert cli_main(["analyze", "corruption", str(run), str(data), "--out", str(out)]) == 0
    assert (out / "corruption.md").exists() and (out / "corruption.json").exists()
    assert cli_main(["analyze", "deletion", str(run), str(few), "--out", str(out), "--rows", "1"]) == 0
    assert (out / "deletion.md").exists()
    assert cli_main(["analyze", "corruption", str(run), "--out", str(out)]) == 2  # DATA missing
