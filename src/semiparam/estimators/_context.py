"""What a fitted table model predicts from: :class:`PredictionContext`, the labelled rows and the
model's encoding of them, with one lifecycle.

- **build**: from the rows given to ``fit`` or ``set_context``. A model that keeps rows (NPT) keeps
  them, sampled down to ``max_context_rows``; one that does not (SPIN) encodes them at once and
  keeps only the encoding, so no training row is stored.
- **reuse**: :meth:`PredictionContext.encoding` runs the model's ``encode_context`` once (NPT: the
  keys and values of the context rows in every block; SPIN: the inducing points of the last layer)
  and every query batch reads the same encoding.
- **invalidate**: new rows are a new context; :meth:`PredictionContext.invalidate` drops the
  encoding when the weights it came from change (a model that keeps no rows cannot re-encode).
- **save/load**: :meth:`PredictionContext.to_tensors` / :meth:`PredictionContext.from_tensors`,
  the rows (and their positions among the rows given) or, for SPIN, only the encoding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..data.table import EncodedTable

Encoder = Callable[[EncodedTable], Any]


class PredictionContext:
    """The rows predictions attend to (``rows``; None once a model that keeps no rows has encoded
    them), their positions among the rows they were chosen from (``index``, for explanations), and
    the model's encoding of them, computed on first use."""

    def __init__(
        self, rows: EncodedTable | None, index: np.ndarray | None = None, encoding: Any = None
    ) -> None:
        if rows is None and encoding is None:
            raise ValueError("a prediction context needs its rows or their encoding")
        self.rows = rows
        self.index = index
        self._encoding = encoding

    @classmethod
    def encoded(cls, rows: EncodedTable, encode: Encoder) -> PredictionContext:
        """The context of a model that keeps no rows: ``rows`` encoded now, then dropped."""
        return cls(None, None, encode(rows))

    @property
    def n_rows(self) -> int | None:
        """How many rows it holds (None when only their encoding is kept)."""
        return None if self.rows is None else len(self.rows.values)

    def positions(self) -> np.ndarray:
        """``index``, or ``0..n_rows-1`` when the rows are all those given; needs the rows."""
        if self.rows is None:
            raise ValueError("this context keeps only the encoding of its rows")
        return self.index if self.index is not None else np.arange(len(self.rows.values))

    def encoding(self, encode: Encoder) -> Any:
        """The model's encoding of the rows: ``encode(rows)`` on first use, the same object after."""
        if self._encoding is None:
            if self.rows is None:  # pragma: no cover - __init__ forbids it
                raise RuntimeError("the context has neither rows nor an encoding")
            self._encoding = encode(self.rows)
        return self._encoding

    def invalidate(self) -> None:
        """Forget the encoding (the weights it was computed from changed); the next
        :meth:`encoding` recomputes it from the rows."""
        if self.rows is None:
            raise RuntimeError(
                "this context keeps only the encoding of its rows and cannot re-encode them; "
                "set a new context from labelled rows"
            )
        self._encoding = None

    # -- persistence ------------------------------------------------------------------------------
    def to_tensors(
        self, state_to_tensors: Callable[[Any], dict[str, torch.Tensor]]
    ) -> dict[str, torch.Tensor]:
        """CPU tensors to save: the rows (``values``, ``missing``, ``index``) when kept, else the
        encoding through the model's ``state_to_tensors``."""
        if self.rows is not None:
            out = {"values": torch.as_tensor(self.rows.values), "missing": torch.as_tensor(self.rows.missing)}
            if self.index is not None:
                out["index"] = torch.as_tensor(self.index, dtype=torch.int64)
            return out
        state = state_to_tensors(self._encoding)
        return {k: v.detach().cpu().contiguous() for k, v in state.items()}

    @classmethod
    def from_tensors(
        cls,
        tensors: dict[str, torch.Tensor],
        *,
        keeps_rows: bool,
        state_from_tensors: Callable[[dict[str, torch.Tensor]], Any],
    ) -> PredictionContext:
        """The context saved by :meth:`to_tensors`."""
        if keeps_rows:
            rows = EncodedTable(tensors["values"].cpu().numpy(), tensors["missing"].cpu().numpy())
            index = tensors["index"].cpu().numpy() if "index" in tensors else None
            return cls(rows, index)
        return cls(None, None, state_from_tensors(tensors))


__all__ = ["PredictionContext"]
