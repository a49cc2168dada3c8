"""Column kinds and the column layout: what a model needs to know about a table's columns (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

CONTINUOUS = "continuous"
CATEGORICAL = "categorical"

__all__ = ["CATEGORICAL", "CONTINUOUS", "ColumnLayout"]


@dataclass(frozen=True)
class ColumnLayout:
    """What a model needs to know about the columns: kind and cardinality, in table order."""

    kinds: tuple[str, ...]
    cardinalities: tuple[int, ...]  # number of categories; 0 for continuous columns

    def __post_init__(self) -> None:
        if len(self.kinds) != len(self.cardinalities):
            raise ValueError("kinds and cardinalities must have the same length")
        if not self.kinds:
            raise ValueError("a table needs at least one column")
        for j, (kind, card) in enumerate(zip(self.kinds, self.cardinalities)):
            if kind == CATEGORICAL and card < 1:
                raise ValueError(f"categorical column {j} has {card} categories")
            if kind not in (CONTINUOUS, CATEGORICAL):
                raise ValueError(f"column {j} has unknown kind {kind!r}")

    @property
    def n_columns(self) -> int:
        return len(self.kinds)

    @property
    def continuous(self) -> list[int]:
        return [j for j, k in enumerate(self.kinds) if k == CONTINUOUS]

    @property
    def categorical(self) -> list[int]:
        return [j for j, k in enumerate(self.kinds) if k == CATEGORICAL]
