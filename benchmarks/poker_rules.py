"""The rules of the UCI Poker Hand data set, to label hands and draw new ones (issue 18).

The UCI file is five cards drawn without replacement from a 52-card deck, each card a suit
(1-4: hearts, spades, diamonds, clubs) and a rank (1 = ace, 2-10, 11-13 = jack, queen, king), and
the class of the hand (0 nothing, 1 one pair, 2 two pairs, 3 three of a kind, 4 straight, 5 flush,
6 full house, 7 four of a kind, 8 straight flush, 9 royal flush; an ace is high or low in a
straight). The class is a function of the cards, so the 1,000,000-hand test file that the project's
data lacks, and the 717K-hand training pool the SPIN paper draws its contexts from, can be drawn
afresh: :func:`draw_hands` draws hands as the UCI file does, :func:`hand_class` labels them (it
reproduces every label of the shipped file, see ``tests/test_poker_rules.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ("S1", "C1", "S2", "C2", "S3", "C3", "S4", "C4", "S5", "C5")
N_CLASSES = 10


def hand_class(suits: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The UCI class (0-9) of each hand from ``suits`` and ``ranks``, both ``(n, 5)`` integers."""
    suits, ranks = np.asarray(suits), np.asarray(ranks)
    if suits.shape != ranks.shape or suits.ndim != 2 or suits.shape[1] != 5:
        raise ValueError(f"suits and ranks must both be (n, 5); got {suits.shape} and {ranks.shape}")
    if suits.size and (suits.min() < 1 or suits.max() > 4 or ranks.min() < 1 or ranks.max() > 13):
        raise ValueError("suits must be in 1-4 and ranks in 1-13")
    counts = np.zeros((len(ranks), 14), dtype=np.int64)  # counts[:, r]: cards of rank r
    np.add.at(counts, (np.arange(len(ranks))[:, None], ranks), 1)
    per_rank = np.sort(counts, axis=1)[:, ::-1]  # largest multiplicities first
    top, second = per_rank[:, 0], per_rank[:, 1]
    flush = (suits == suits[:, :1]).all(axis=1)
    distinct = top == 1
    low, high = ranks.min(axis=1), ranks.max(axis=1)
    ace_high = np.sort(np.where(ranks == 1, 14, ranks), axis=1)  # 10-J-Q-K-A
    royal = distinct & (ace_high[:, 0] == 10) & (ace_high[:, 4] == 14)
    straight = distinct & ((high - low == 4) | royal)
    out = np.zeros(len(ranks), dtype=np.int64)
    out[top == 2] = 1
    out[(top == 2) & (second == 2)] = 2
    out[top == 3] = 3
    out[straight] = 4
    out[flush & ~straight] = 5
    out[(top == 3) & (second == 2)] = 6
    out[top == 4] = 7
    out[straight & flush] = 8
    out[royal & flush] = 9
    return out


def draw_hands(n: int, seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    """``n`` hands of five cards drawn without replacement from a shuffled deck, as the UCI file:
    ``(X, y)`` with the file's columns (categorical, as ``semiparam.datasets.load("poker")``) and
    class."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    cards = np.argsort(rng.random((n, 52)), axis=1)[:, :5]  # five distinct cards of 0..51 per hand
    suits, ranks = cards // 13 + 1, cards % 13 + 1
    X = pd.DataFrame({name: (suits if name[0] == "S" else ranks)[:, int(name[1]) - 1] for name in COLUMNS})
    for name in COLUMNS:
        X[name] = pd.Categorical(X[name], categories=range(1, 5) if name[0] == "S" else range(1, 14))
    return X, pd.Series(hand_class(suits, ranks), name="CLASS")


def frame_cards(X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(suits, ranks)``, each ``(n, 5)`` integers, of a frame with the UCI columns."""
    suits = np.stack([np.asarray(X[f"S{i}"], dtype=np.int64) for i in range(1, 6)], axis=1)
    ranks = np.stack([np.asarray(X[f"C{i}"], dtype=np.int64) for i in range(1, 6)], axis=1)
    return suits, ranks


def frame_class(X: pd.DataFrame) -> np.ndarray:
    """:func:`hand_class` of a frame with the UCI columns."""
    return hand_class(*frame_cards(X))
