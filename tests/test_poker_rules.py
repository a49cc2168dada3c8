"""benchmarks/poker_rules.py: the Poker Hand rules label every hand of the shipped UCI file as the
file does, hands are drawn as the file's are (five distinct cards), bad input is refused."""

from __future__ import annotations

import numpy as np
import poker_rules
import pytest

from semiparam import datasets

from .test_datasets import needs_data


@needs_data
def test_rules_reproduce_every_label_of_the_uci_file() -> None:
    data = datasets.load("poker")
    labels = poker_rules.frame_class(data.X)
    truth = data.y.to_numpy().astype(int)
    assert len(truth) == 25010
    mismatched = np.flatnonzero(labels != truth)
    assert mismatched.size == 0, f"rows {mismatched[:10]} labelled {labels[mismatched[:10]]}"


@pytest.mark.parametrize(
    ("suits", "ranks", "expected"),
    [
        ([1, 1, 1, 1, 1], [10, 11, 12, 13, 1], 9),  # royal flush: the ace is high
        ([2, 2, 2, 2, 2], [1, 2, 3, 4, 5], 8),  # straight flush with the ace low
        ([1, 2, 1, 1, 1], [1, 2, 3, 4, 5], 4),  # straight, ace low
        ([1, 2, 1, 1, 1], [10, 11, 12, 13, 1], 4),  # straight, ace high, not one suit
        ([1, 2, 3, 4, 1], [11, 12, 13, 1, 2], 0),  # no wrap-around straight (J-Q-K-A-2)
        ([3, 3, 3, 3, 3], [2, 4, 6, 8, 10], 5),  # flush
        ([1, 2, 3, 4, 1], [7, 7, 7, 7, 2], 7),  # four of a kind
        ([1, 2, 3, 4, 1], [7, 7, 7, 2, 2], 6),  # full house
        ([1, 2, 3, 4, 1], [7, 7, 7, 2, 3], 3),  # three of a kind
        ([1, 2, 3, 4, 1], [7, 7, 2, 2, 3], 2),  # two pairs
        ([1, 2, 3, 4, 1], [7, 7, 2, 4, 3], 1),  # one pair
        ([1, 2, 3, 4, 1], [7, 9, 2, 4, 3], 0),  # nothing
    ],
)
def test_each_class_by_its_rule(suits: list[int], ranks: list[int], expected: int) -> None:
    assert poker_rules.hand_class(np.array([suits]), np.array([ranks]))[0] == expected


def test_drawn_hands_are_five_distinct_cards_with_the_files_columns() -> None:
    X, y = poker_rules.draw_hands(5000, seed=3)
    assert list(X.columns) == list(poker_rules.COLUMNS)
    suits = np.stack([X[f"S{i}"].astype(int) for i in range(1, 6)], axis=1)
    ranks = np.stack([X[f"C{i}"].astype(int) for i in range(1, 6)], axis=1)
    cards = (suits - 1) * 13 + ranks - 1
    assert all(len(set(row)) == 5 for row in cards)
    np.testing.assert_array_equal(y.to_numpy(), poker_rules.hand_class(suits, ranks))
    # the two commonest classes near their probabilities (0.501 nothing, 0.423 one pair)
    shares = np.bincount(y, minlength=10) / len(y)
    assert abs(shares[0] - 0.501) < 0.03 and abs(shares[1] - 0.423) < 0.03
    X2, _ = poker_rules.draw_hands(5000, seed=3)
    assert X.equals(X2)


def test_bad_hands_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\(n, 5\)"):
        poker_rules.hand_class(np.ones((2, 4), int), np.ones((2, 4), int))
    with pytest.raises(ValueError, match="ranks in 1-13"):
        poker_rules.hand_class(np.ones((1, 5), int), np.full((1, 5), 14))
    with pytest.raises(ValueError, match="n must be"):
        poker_rules.draw_hands(-1)


@needs_data
def test_a_context_beyond_the_file_adds_drawn_hands_none_of_them_a_test_hand() -> None:
    import poker_context

    X_file, y_file, X_test, _ = poker_context.split(0)
    X, y, X_test2, _ = poker_context.split(0, len(y_file) + 3000)
    assert len(y) == len(y_file) + 3000
    assert X.iloc[: len(y_file)].equals(X_file) and X_test.equals(
        X_test2
    )  # contexts within the file unchanged
    drawn = X.iloc[len(y_file) :]
    assert set(poker_context._card_sets(drawn)).isdisjoint(poker_context._card_sets(X_test))
    np.testing.assert_array_equal(y.iloc[len(y_file) :].to_numpy(), poker_rules.frame_class(drawn))
    assert all(isinstance(X[c].dtype, type(X_file[c].dtype)) for c in X.columns)  # still categorical
