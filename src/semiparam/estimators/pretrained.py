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

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file

from .._io import ModelFileError, file_sha256
from ..data.columns import CATEGORICAL
from ..data.table import DataValidationError, TableSchema
from ..models.npt import NPT, NPTConfig
from ..nn.columns import ColumnOutputs
from ..nn.modes import set_training
from ..training.config import TrainConfig
from ..training.device import resolve_device
from ..training.engine import BestCheckpoint, ProgressBar, TrainHistory
from ..training.pretrain import (
    EncodedTask,
    PretrainConfig,
    PriorTrainer,
    encode_prior_task,
    prior_layout,
    task_loss,
)
from .model_dir import SavedModel, module_tensors, save_model_dir

WEIGHTS = "npt_prior"
# views averaged by default; ``benchmarks/pretrained_eval.py --views N`` sets another count beside
# it over the development suite (results/pretrained/views4/: 4 views with the shipped weights)
N_ENSEMBLE = 8
# NOTE[DIFF]: each view reads at most this many context rows, a random sample of its own (the views
# together read more of a large table): the model was meta-trained on tables of at most a few
# hundred rows, and a context's attention cost grows with the square of its rows
MAX_CONTEXT_ROWS = 2048
# fine-tuning (init="pretrained" with max_steps > 0): tasks per step, rows per task (context and
# queries: the prior's largest tasks, so a step costs what a pretraining task does), and Adam's
# learning rate (pretraining's). Trials on a few development tables: a tenth of it barely moved
# the held-out loss in a few hundred steps; whatever the rate, the pretrained weights are kept
# when no step beats them on the held-out rows (:meth:`PriorFittedLearner.fine_tune`).
# ``benchmarks/pretrained_eval.py --variants fine_tuned`` measures the result over the suite.
TASKS_PER_STEP = 4
FINE_TUNE_ROWS = 256
FINE_TUNE_LR = 1e-3


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
        self,
        *,
        device: str | torch.device = "auto",
        seed: int = 0,
        n_ensemble: int = N_ENSEMBLE,
        fine_tune_steps: int = 0,
        time_budget: float | None = None,
        verbose: bool | None = None,
    ) -> None:
        """``fine_tune_steps`` > 0: fine-tune the weights on the table first (:meth:`fine_tune`),
        for at most that many steps (and ``time_budget`` seconds)."""
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.n_ensemble = int(n_ensemble)
        self.fine_tune_steps = int(fine_tune_steps)
        self.time_budget = time_budget
        self.verbose = verbose
        self.module, self.card = load_prior_npt(self.device)
        self.n_features = int(self.card["n_features"])
        self.max_classes = int(self.card["max_classes"])
        self.schema: TableSchema | None = None
        self.history = None  # set by fine_tune

    @property
    def n_classes(self) -> int:
        """The target's classes (0: a continuous target)."""
        assert self.schema is not None
        target = self.schema.columns[self.schema.target_indices[0]]
        return len(target.categories) if target.kind == CATEGORICAL else 0

    # -- the EnsembleLearner surface the estimators use ---------------------------------------------
    @property
    def members(self) -> list[Any]:
        return [self]

    validation_index = None

    def use_executor(self, executor: str, address: str | None = None) -> None:
        if executor != "serial":
            raise ValueError(
                f"init='pretrained' predicts in this process; executor={executor!r} is not supported"
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
            "eval_set": evaluation is not None and not self.fine_tune_steps,
            "sample_weight": sample_weight is not None,
        }
        if named := [k for k, v in refused.items() if v]:
            raise ValueError(
                f"init='pretrained' does not support {named} (use init='random' to train from scratch)"
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
        if self.fine_tune_steps:
            self.fine_tune(evaluation)
        return self

    @staticmethod
    def _context_rows(n: int, rng: np.random.Generator) -> np.ndarray:
        """The rows of an ``n``-row context a view reads: all, or a random ``MAX_CONTEXT_ROWS``."""
        if n <= MAX_CONTEXT_ROWS:
            return np.arange(n)
        return np.sort(rng.choice(n, size=MAX_CONTEXT_ROWS, replace=False))

    # -- fine-tuning ----------------------------------------------------------------------------------
    def _view(self, rng: np.random.Generator | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One view of the table: the features it reads (a subset past the model's slots), the
        slots they take, and the class numbering (class c is shown as ``perm[c]``); random, or
        without ``rng`` the plain one (the first features in the first slots, classes as numbered)."""
        f = self.context_X.shape[1]
        if rng is None:
            used = np.arange(min(f, self.n_features))
            return used, used, np.arange(max(self.n_classes, 1))
        chosen = np.arange(f)
        if f > self.n_features:
            chosen = np.sort(rng.choice(f, size=self.n_features, replace=False))
        positions = rng.permutation(self.n_features)[: len(chosen)]
        perm = rng.permutation(self.n_classes) if self.n_classes else np.zeros(1, dtype=np.int64)
        return chosen, positions, perm

    def _task(self, rows: np.ndarray, queries: np.ndarray, rng: np.random.Generator | None) -> EncodedTask:
        """The context rows ``rows`` and query rows ``queries`` (positions in the context table) as a
        task, through a random view (the plain one without ``rng``)."""
        X, y = self.context_X, self.context_y
        return self._encode(X[rows], y[rows], X[queries], y[queries], self._view(rng))

    def _encode(
        self,
        context_X: np.ndarray,
        context_y: np.ndarray,
        query_X: np.ndarray,
        query_y: np.ndarray,
        view: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> EncodedTask:
        """Context rows (with labels) and query rows as one task through ``view`` (:meth:`_view`);
        the queries' labels are only scored, never shown."""
        chosen, positions, perm = view
        y = np.concatenate([context_y, query_y])
        if self.n_classes:
            y = perm[y.astype(np.int64)].astype(np.float64)
        X = np.concatenate([context_X, query_X])[:, chosen]
        return encode_prior_task(
            X, y, len(context_X), self.n_classes, self.n_features, positions, self.device
        )

    def fine_tune(self, evaluation: pd.DataFrame | None = None) -> None:
        """Fine-tune a copy of the pretrained weights on this table with pretraining's loss: each
        step, ``TASKS_PER_STEP`` tasks, each a random share of the training rows as context and
        the rest of a random subset as queries, through a random view. A tenth of the rows (or
        ``evaluation``, an eval_set) is held out: its loss, predicted from the other rows, picks
        the best weights and stops the adaptive schedule when it stops improving. It is measured
        before the first step too: when no step beats the pretrained weights, they are kept
        (``history_.best_step`` is then None and ``stop_reason`` says so), so fine-tuning never
        ends worse on the held-out rows than predicting zero-shot."""
        self.module = copy.deepcopy(self.module)
        rng = np.random.default_rng(self.seed)
        n = len(self.context_X)
        if evaluation is None:
            held_out = np.sort(rng.choice(n, size=max(1, n // 10), replace=False))
            train = np.setdiff1d(np.arange(n), held_out)
        else:
            train, held_out = np.arange(n), None
        if len(train) < 4:
            raise DataValidationError(f"fine-tuning needs at least 5 training rows; the table has {n}")
        if held_out is not None:
            context = train[np.sort(rng.permutation(len(train))[:MAX_CONTEXT_ROWS])]
            validation = self._task(context, held_out, None)
        else:
            validation = self._evaluation_task(evaluation)

        def batch(step: int) -> list[EncodedTask]:
            tasks = []
            for _ in range(TASKS_PER_STEP):
                rows = rng.permutation(train)[:FINE_TUNE_ROWS]
                n_ctx = int(round(len(rows) * rng.uniform(0.5, 0.9)))
                n_ctx = min(max(n_ctx, 2), len(rows) - 1)
                tasks.append(self._task(rows[:n_ctx], rows[n_ctx:], rng))
            return tasks

        def evaluate() -> float:
            with torch.no_grad():
                return float(task_loss(set_training(self.module, False), validation))

        config = PretrainConfig(learning_rate=FINE_TUNE_LR)
        engine_config = TrainConfig.cpu().replace(
            max_steps=self.fine_tune_steps,
            learning_rate=FINE_TUNE_LR,
            time_budget=self.time_budget,
            clip_mode="norm",
            clip_value=config.clip_norm,
        )
        callbacks = [
            ProgressBar(self.verbose, f"fine-tuning the pretrained NPT on {self.device}"),
            BestCheckpoint(engine_config.patience, engine_config.smoothing),
        ]
        start_loss = evaluate()
        start = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        trainer = PriorTrainer(
            self.module, config, engine_config.max_steps, callbacks, engine_config=engine_config
        )
        history = trainer.fit(batch, evaluate)
        if history.best_val_loss is None or not history.best_val_loss < start_loss:
            self.module.load_state_dict(start)
            history.best_step, history.best_val_loss = None, start_loss
            history.stop_reason += "; no step beat the pretrained weights on the held-out rows: kept"
        self.history = history
        set_training(self.module, False)

    def _evaluation_task(self, evaluation: pd.DataFrame) -> EncodedTask:
        """An eval_set's rows as queries of the whole context (the plain view)."""
        assert self.schema is not None
        target = self.schema.columns[self.schema.target_indices[0]]
        eval_y = self._column(evaluation[target.name], target)
        if np.isnan(eval_y).any():
            raise DataValidationError(f"eval_set's target {target.name!r} has missing values")
        rows = self._context_rows(len(self.context_X), np.random.default_rng(self.seed))
        context = (self.context_X[rows], self.context_y[rows])
        return self._encode(*context, self._features(evaluation), eval_y, self._view(None))

    def refresh_context(self, table: pd.DataFrame) -> None:
        assert self.schema is not None
        self.context_X = self._features(table)
        target = self.schema.columns[self.schema.target_indices[0]]
        self.context_y = self._column(table[target.name], target)
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
            rows = self._context_rows(len(self.context_X), rng)
            context_y = self.context_y[rows]
            view = self._view(rng)
            perm = view[2]  # class c is shown to the model as perm[c]
            task = self._encode(self.context_X[rows], context_y, queries, np.zeros(len(queries)), view)
            out = self._query_outputs(task, len(rows))
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
    def _query_outputs(self, task: EncodedTask, n_context: int, chunk: int = 1024) -> ColumnOutputs:
        """The outputs for ``task``'s query rows, predicted from its ``n_context`` context rows
        encoded once, queries ``chunk`` at a time."""
        v, h = task.values, task.hidden
        cache = self.module.encode_context(v[:n_context], h[:n_context])
        pieces = [
            self.module.forward_queries(v[start : start + chunk], h[start : start + chunk], cache)
            for start in range(n_context, len(v), chunk)
        ]
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

    # -- persistence ----------------------------------------------------------------------------------
    def save(self, path: str | Path, extra: dict[str, Any] | None = None, *, overwrite: bool = False) -> Path:
        """A model directory of kind ``prior-fitted`` (``estimators.model_dir``): ``semiparam.json``
        (the schema, views, the shipped weights' sha256 and the estimator's state),
        ``context.safetensors`` (the context rows as the model reads them) and, when fine-tuned,
        ``model.safetensors``. No pickle; written aside and renamed into place."""
        if self.schema is None:
            raise RuntimeError("nothing to save: the model is not fitted")
        context = {"X": torch.tensor(self.context_X), "y": torch.tensor(self.context_y)}
        tensors = {"context.safetensors": context}
        if self.history is not None:  # fine-tuned: its own weights
            tensors["model.safetensors"] = module_tensors(self.module)
        meta = {
            "weights_sha256": file_sha256(weights_dir() / f"{WEIGHTS}.safetensors"),
            "schema": self.schema.to_dict(),
            "seed": self.seed,
            "n_ensemble": self.n_ensemble,
            "history": None if self.history is None else self.history.to_dict(),
            "estimator": extra or {},
        }
        return save_model_dir(path, "prior-fitted", meta, tensors=tensors, overwrite=overwrite)

    @classmethod
    def load(
        cls, saved: SavedModel, *, device: str | torch.device | None = None
    ) -> tuple[PriorFittedLearner, dict[str, Any]]:
        """The learner :meth:`save` wrote (read by ``model_dir.read_model_dir``). A model saved
        with other shipped weights than the installed ones is refused, unless it was fine-tuned
        (then it carries its own)."""
        meta = saved.meta
        learner = cls(device=device or "cpu", seed=meta["seed"], n_ensemble=meta["n_ensemble"])
        installed = file_sha256(weights_dir() / f"{WEIGHTS}.safetensors")
        if meta["history"] is not None:
            saved.load_weights(learner.module, device=learner.device)
            learner.history = TrainHistory(**meta["history"])
        elif meta["weights_sha256"] != installed:
            raise ModelFileError(
                f"{saved.path} was saved with other pretrained weights (sha256 "
                f"{meta['weights_sha256'][:16]}) than the installed ones ({installed[:16]}); fit it "
                "again with this version"
            )
        learner.schema = TableSchema.from_dict(meta["schema"])
        context = saved.tensors("context.safetensors")
        learner.context_X = context["X"].numpy()
        learner.context_y = context["y"].numpy()
        return learner, meta["estimator"]


__all__ = ["PriorFittedLearner", "load_prior_npt"]
