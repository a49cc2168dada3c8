"""The lookup check of issue 49, item 4, shared by the tests of the models that read their context."""

from typing import Any

import numpy as np
import pandas as pd


def lookup_task(seed: int = 1) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, np.ndarray]:
    """150 rows of 5 features twice, each pair with a random label unrelated to the features:
    ``(rows, twice, labels, new_labels)``; the queries are the rows themselves."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(150, 5)), columns=[f"x{i}" for i in range(5)])
    twice, y, y_new = pd.concat([X, X], ignore_index=True), rng.normal(size=150), rng.normal(size=150)
    return X, twice, y, y_new


def assert_reads_its_context(
    model: Any, X: pd.DataFrame, twice: pd.DataFrame, y: np.ndarray, y_new: np.ndarray, context: Any = None
) -> None:
    """A model fitted on ``twice`` with labels ``np.tile(y, 2)``: its attention ranks one of a
    query's copies first for at least 90% of the queries, its predictions follow the labels, and
    after ``set_context`` with new labels for the same rows they follow the new ones
    (correlation >= 0.8), not the old."""
    ranked = model.explain_rows(X, top_k=1, context=context)
    first = ranked[ranked["rank"] == 1].sort_values("row")["context_row"].to_numpy()
    assert np.mean(first % len(X) == np.arange(len(X))) >= 0.9
    assert np.corrcoef(model.predict(X), y)[0, 1] >= 0.8
    model.set_context(twice, np.tile(y_new, 2))
    moved = model.predict(X)
    assert np.corrcoef(moved, y_new)[0, 1] >= 0.8 > 2 * np.corrcoef(moved, y)[0, 1]
