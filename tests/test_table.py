"""Schema inference and the fitted encoder."""

import numpy as np
import pandas as pd
import pytest

from semiparam import DataValidationError, TableEncoder, infer_schema


def test_kinds_from_dtypes(mixed_frame):
    frame = mixed_frame.assign(text=["u", "v"] * 30, nullable=pd.array([1, None] * 30, dtype="Int64"))
    frame["s"] = pd.array(["p", "q", None] * 20, dtype="string")
    schema = infer_schema(frame, targets=["target"])
    kinds = {c.name: c.kind for c in schema.columns}
    assert kinds["num"] == kinds["count"] == kinds["nullable"] == "continuous"
    assert kinds["cat"] == kinds["flag"] == kinds["text"] == kinds["s"] == kinds["target"] == "categorical"
    assert schema.column("cat").categories == ("a", "b", "c")
    assert schema.column("flag").categories == (False, True)
    assert schema.targets == ("target",)
    forced = infer_schema(frame, categorical=["count"], continuous=["flag"])
    assert forced.column("count").kind == "categorical" and forced.column("flag").kind == "continuous"


def test_standardisation_fitted_on_training_rows_only(mixed_frame):
    schema = infer_schema(mixed_frame)
    enc = TableEncoder.fit(mixed_frame.iloc[:30], schema)
    assert enc.means["num"] == pytest.approx(mixed_frame["num"].iloc[:30].mean())
    assert enc.stds["num"] == pytest.approx(mixed_frame["num"].iloc[:30].std(ddof=0))
    out = enc.transform(mixed_frame.iloc[:30])
    j = schema.names.index("num")
    assert out.values[:, j].mean() == pytest.approx(0, abs=1e-6)
    assert out.values[:, j].std() == pytest.approx(1, abs=1e-5)


def test_missing_cells_are_masked(mixed_frame):
    frame = mixed_frame.astype({"target": object})
    frame.loc[0, "num"] = np.nan
    frame.loc[1, "target"] = None
    frame.loc[2, "cat"] = np.nan
    frame.loc[3, "target"] = pd.NA
    schema = infer_schema(frame)
    enc = TableEncoder.fit(frame, schema).transform(frame)
    names = schema.names
    assert enc.missing[0, names.index("num")] and enc.missing[2, names.index("cat")]
    assert enc.missing[1, names.index("target")] and enc.missing[3, names.index("target")]
    assert enc.missing.sum() == 4
    assert (enc.values[enc.missing] == 0).all()


def test_unseen_category_is_missing_with_warning(mixed_frame):
    schema = infer_schema(mixed_frame)
    encoder = TableEncoder.fit(mixed_frame, schema)
    new = mixed_frame.iloc[:3].astype({"cat": object})
    new.loc[0, "cat"] = "never-seen"
    with pytest.warns(UserWarning, match="never-seen"):
        enc = encoder.transform(new)
    assert enc.missing[0, schema.names.index("cat")]
    assert not enc.missing[1, schema.names.index("cat")]


def test_infrequent_categories_share_one_level():
    frame = pd.DataFrame(
        {
            "c": ["a"] * 6 + ["b"] * 5 + ["r1", "r2", "r2"],
            "y": ["p", "q"] * 6 + ["rare", "q"],  # a target: never grouped
            "x": np.arange(14.0),
        }
    )
    schema = infer_schema(frame, targets=["y"])
    encoder = TableEncoder.fit(frame, schema, min_category_count=3, group_columns=["c"])
    c = encoder.schema.column("c")
    assert (c.categories, c.infrequent, c.n_levels) == (("a", "b"), ("r1", "r2"), 3)
    assert encoder.schema.column("y").categories == ("p", "q", "rare")
    assert encoder.schema.layout().cardinalities == (3, 3, 0)
    enc = encoder.transform(frame)
    assert enc.values[:, 0].tolist() == [0] * 6 + [1] * 5 + [2] * 3 and not enc.missing[:, 0].any()
    with pytest.warns(UserWarning, match="infrequent level"):  # unseen joins the shared level
        new = encoder.transform(frame.iloc[:2].assign(c=["zz", np.nan]))
    assert new.values[0, 0] == 2 and not new.missing[0, 0] and new.missing[1, 0]
    again = TableEncoder.from_dict(encoder.to_dict())
    np.testing.assert_array_equal(again.transform(frame).values, enc.values)
    # every category rare: one level (observed or missing); a count of 1 groups nothing
    all_rare = TableEncoder.fit(frame, schema, min_category_count=10, group_columns=["c"])
    assert all_rare.schema.column("c").n_levels == 1
    assert TableEncoder.fit(frame, schema, min_category_count=1, group_columns=["c"]).schema == schema
    with pytest.raises(DataValidationError, match="min_category_count"):
        TableEncoder.fit(frame, schema, min_category_count=0, group_columns=["c"])


def test_integer_categories_match_float_cells():
    frame = pd.DataFrame({"c": [1, 2, 3, 1], "x": [0.1, 0.2, 0.3, 0.4]})
    schema = infer_schema(frame, categorical=["c"])
    encoder = TableEncoder.fit(frame, schema)
    enc = encoder.transform(pd.DataFrame({"c": [1.0, 3.0, np.nan], "x": [0.0, 0.0, 0.0]}))
    assert enc.values[:, 0].tolist() == [0, 2, 0] and enc.missing[:, 0].tolist() == [False, False, True]


def test_encoder_round_trips_through_json(mixed_frame):
    import json

    schema = infer_schema(mixed_frame, targets=["target"])
    encoder = TableEncoder.fit(mixed_frame, schema)
    again = TableEncoder.from_dict(json.loads(json.dumps(encoder.to_dict())))
    a, b = encoder.transform(mixed_frame), again.transform(mixed_frame)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.missing, b.missing)


@pytest.mark.parametrize(
    "frame, match",
    [
        (pd.DataFrame({"a": [np.nan, np.nan], "b": [1.0, 2.0]}), "'a' has no observed values"),
        (pd.DataFrame({"a": [1.0, np.inf], "b": [1.0, 2.0]}), "'a' contains inf"),
        (pd.DataFrame({"a": [], "b": []}), "no rows"),
        (pd.DataFrame(index=[0, 1]), "no columns"),
    ],
)
def test_bad_tables(frame, match):
    with pytest.raises(DataValidationError, match=match):
        infer_schema(frame)


def test_string_in_forced_continuous_column():
    frame = pd.DataFrame({"a": ["1.5", "2", "oops"], "b": [1, 2, 3]})
    with pytest.raises(DataValidationError, match="'a' is continuous but holds non-numeric value"):
        infer_schema(frame, continuous=["a"])


def test_unhashable_cell_is_a_type_error():
    frame = pd.DataFrame({"a": [{"x": 1}, "b"], "b": [1, 2]})
    with pytest.raises(TypeError, match="must be a string or a number"):
        infer_schema(frame)


def test_override_names_unknown_column(mixed_frame):
    with pytest.raises(DataValidationError, match="nope"):
        infer_schema(mixed_frame, targets=["nope"])
    with pytest.raises(DataValidationError, match="both"):
        infer_schema(mixed_frame, categorical=["num"], continuous=["num"])
