"""The prior-fitted NPT behind ``NPTClassifier(init="pretrained")`` / ``NPTRegressor(init="pretrained")``
(issue 51): an NPT meta-trained on synthetic tables (``training.pretrain``, ``benchmarks/pretrain.py``)
that predicts a new table's rows from its training rows in one forward pass, with no training.

:class:`PriorFittedLearner` stands where an estimator keeps its :class:`~._ensemble.EnsembleLearner`
(``learner_``): ``fit`` stores the table as the context, ``predict_columns`` predicts query rows
from it, ``refresh_context`` replaces it. Each of ``n_ensemble`` views of the table places the
features in other slots of the model (and, past its slots, picks another subset of them) and
numbers the classes in another order; the predictions of the views are averaged (the prior-fitted
networks' ensembling, which removes the model's leftover preference for slots and class numbers).

The weights ship inside the package (``semiparam/weights/npt_prior.safetensors``, its card
``npt_prior.json``) and load offline.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file

from ..data.columns import CATEGORICAL
from ..data.prior import encode_task
from ..data.table import DataValidationError, TableSchema
from ..models.npt import NPT, NPTConfig
from ..training.device import resolve_device
from ..training.pretrain import prior_layout

WEIGHTS = "npt_prior"
N_ENSEMBLE = 4
# NOTE[DIFF]: each view reads at most this many context rows, a random sample of its own (the views
# together read more of a large table): the model was meta-trained on tables of at most a few
# hundred rows, and a context's attention cost grows with the square of its rows
MAX_CONTEXT_ROWS = 2048


def weights_dir() -> Path:
    return Path(str(resources.files("semiparam") / "weights"))


def load_prior_npt(device: torch.device, name: str = WEIGHTS) -> tuple[NPT, dict[str, Any]]:
    """The shipped prior-fitted NPT and its card; a clear error when the weights are missing."""
    folder = weights_dir()
    card_path, tensors_path = folder / f"{name}.json", folder / f"{name}.safetensors"
    if not card_path.exists() or not tensors_path.exists():
        raise FileNotFoundError(
            f"the pretrained NPT weights are not installed ({tensors_path}); run "
            "`python benchmarks/pretrain.py` to make them, or use init='random'"
        )
    card = json.loads(card_path.read_text())
    config = NPTConfig.from_dict(card["model_config"])
    module = NPT(config, prior_layout(card["n_features"], card["max_classes"]))
    module.load_state_dict(load_file(str(tensors_path)))
    return module.to(device).eval(), card


class PriorFittedLearner:
    """Zero-shot prediction of one table by the prior-fitted NPT (see the module docstring)."""

    def __init__(
        self, *, device: str | torch.device = "auto", seed: int = 0, n_ensemble: int = N_ENSEMBLE
    ) -> None:
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.n_ensemble = int(n_ensemble)
        self.module, self.card = load_prior_npt(self.device)
        self.n_features = int(self.card["n_features"])
        self.max_classes = int(self.card["max_classes"])
        self.schema: TableSchema | None = None
        self.history = None  # nothing was trained

    # -- the EnsembleLearner surface the estimators use ---------------------------------------------
    @property
    def members(self) -> list[Any]:
        return [self]

    validation_index = None

    def use_backend(self, backend: str, address: str | None = None) -> None:
        if backend != "serial":
            raise ValueError(
                f"init='pretrained' predicts in this process; backend={backend!r} is not supported"
            )

    def fit(
        self,
        table: pd.DataFrame,
        schema: TableSchema,
        *,
        unlabeled: pd.DataFrame | None = None,
        checkpoint_dir: Any = None,
        resume: bool = False,
        evaluation: pd.DataFrame | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> PriorFittedLearner:
        refused = {
            "X_unlabeled": unlabeled is not None,
            "checkpoint_dir": checkpoint_dir is not None,
            "eval_set": evaluation is not None,
            "sample_weight": sample_weight is not None,
        }
        if named := [k for k, v in refused.items() if v]:
            raise ValueError(
                f"init='pretrained' predicts from the table as given, with no training; {named} "
                "cannot apply (use init='random' to train)"
            )
        if len(schema.targets) != 1:
            raise ValueError(f"init='pretrained' predicts one target; the table has {len(schema.targets)}")
        target = schema.columns[schema.target_indices[0]]
        if target.kind == CATEGORICAL and len(target.categories) > self.max_classes:
            raise DataValidationError(
                f"the pretrained NPT predicts at most {self.max_classes} classes; target "
                f"{target.name!r} has {len(target.categories)} (use init='random')"
            )
        self.schema = schema
        self.refresh_context(table)
        return self

    def refresh_context(self, table: pd.DataFrame) -> None:
        assert self.schema is not None
        self.context_X = self._features(table)
        target = self.schema.columns[self.schema.target_indices[0]]
        self.n_classes = len(target.categories) if target.kind == CATEGORICAL else 0
        self.context_y = self._target(table[target.name], target)
        if np.isnan(self.context_y).any():
            raise DataValidationError(f"target {target.name!r} has missing values in the context rows")

    def predict_columns(
        self, frame: pd.DataFrame, targets: list[str], absent: list[str] | None = None
    ) -> dict[str, dict[str, np.ndarray]]:
        assert self.schema is not None
        queries = self._features(frame)
        rng = np.random.default_rng(self.seed)
        total = np.zeros((len(queries), max(self.n_classes, 1)))
        for _ in range(self.n_ensemble):
            rows = np.arange(len(self.context_X))
            if len(rows) > MAX_CONTEXT_ROWS:
                rows = np.sort(rng.choice(len(rows), size=MAX_CONTEXT_ROWS, replace=False))
            context_y = self.context_y[rows]
            X = np.concatenate([self.context_X[rows], queries])
            y = np.concatenate([context_y, np.zeros(len(queries))])
            n = len(rows)
            f = X.shape[1]
            chosen = (
                np.sort(rng.choice(f, size=self.n_features, replace=False))
                if f > self.n_features
                else np.arange(f)
            )
            positions = rng.permutation(self.n_features)[: len(chosen)]
            labels = y
            perm = np.arange(max(self.n_classes, 1))
            if self.n_classes:
                perm = rng.permutation(self.n_classes)  # class c is shown to the model as perm[c]
                labels = np.concatenate([perm[context_y.astype(np.int64)], np.zeros(len(queries))])
            values, hidden = encode_task(X[:, chosen], labels, n, self.n_classes, self.n_features, positions)
            out = self._query_outputs(values, hidden, n)
            if self.n_classes:
                proba = torch.softmax(out.categorical[0][:, : self.n_classes].double(), dim=1).cpu().numpy()
                total += proba[:, perm]  # back to the table's class order
            else:
                mean, std = context_y.mean(), context_y.std() + 1e-8
                total[:, 0] += out.continuous[:, -1, 0].double().cpu().numpy() * std + mean
        total /= self.n_ensemble
        name = targets[0]
        return {name: {"proba": total} if self.n_classes else {"mean": total[:, 0]}}

    @torch.no_grad()
    def _query_outputs(
        self, values: np.ndarray, hidden: np.ndarray, n_context: int, chunk: int = 1024
    ) -> Any:
        v = torch.as_tensor(values, device=self.device)
        h = torch.as_tensor(hidden, device=self.device)
        cache = self.module.encode_context(v[:n_context], h[:n_context])
        pieces = [
            self.module.forward_queries(v[start : start + chunk], h[start : start + chunk], cache)
            for start in range(n_context, len(v), chunk)
        ]
        from ..nn.columns import ColumnOutputs

        return ColumnOutputs(
            torch.cat([p.continuous for p in pieces]),
            [torch.cat([p.categorical[0] for p in pieces])],
        )

    # -- the table's columns as numbers ---------------------------------------------------------------
    def _features(self, frame: pd.DataFrame) -> np.ndarray:
        """The feature columns as floats, NaN where missing: a categorical column's category codes
        (unseen categories missing), a continuous column's numbers."""
        assert self.schema is not None
        columns = []
        for j, spec in enumerate(self.schema.columns):
            if j in self.schema.target_indices:
                continue
            if spec.name not in frame.columns:
                raise DataValidationError(f"column {spec.name!r} is missing")
            columns.append(self._column(frame[spec.name], spec))
        if not columns:
            return np.zeros((len(frame), 0))
        return np.stack(columns, axis=1)

    @staticmethod
    def _column(values: pd.Series, spec: Any) -> np.ndarray:
        if spec.kind == CATEGORICAL:
            index = {c: i for i, c in enumerate(spec.categories)}
            return np.array([index.get(v, np.nan) for v in values], dtype=np.float64)
        return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)

    def _target(self, values: pd.Series, spec: Any) -> np.ndarray:
        return self._column(values, spec)

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "saving a model with init='pretrained' is not supported yet: it holds no trained weights, "
            "only its context; keep the table and call fit again (no training, a forward pass)"
        )


__all__ = ["PriorFittedLearner", "load_prior_npt"]
