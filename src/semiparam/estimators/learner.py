"""The learner layer: the model-agnostic core behind every table estimator, public.

``TableLearner`` owns one fitted table model: its schema and encoder (fitted on training rows
only), the ``nn.Module``, the context it predicts from (a :class:`~._context.PredictionContext`),
and save/load. Estimators are thin shells that turn user input into a DataFrame and a list of
target columns and decode the outputs. Which rows each training step sees is
:mod:`._sampling`'s.

A table model (``models.registry``) provides::

    forward(values, hidden) -> ColumnOutputs                        # training: rows attend freely
    encode_context(values, hidden) -> state                         # once per fitted context
    forward_queries(values, hidden, state) -> ColumnOutputs         # query rows from the context

Fitting: :meth:`TableLearner.fit` (a frame and its schema: encoder, validation split, ensemble-free
training, calibration), :meth:`TableLearner.fit_encoded` (an encoded table), or
:meth:`TableLearner.fit_batches` (any source of encoded batches, e.g. genomics' windows: one model
over many tables of one layout). Then ``set_context``, ``predict_outputs`` / ``predict_columns``,
``save`` / ``load``. The tabular estimators (through ``_ensemble.EnsembleLearner``), the image
estimators and genomics all train and predict through it; nothing outside ``estimators/`` needs
``training/``.
"""

from __future__ import annotations

import copy
import io
import json
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from .._config import ConfigError, FrozenConfig
from .._io import available_device
from ..data.table import DataValidationError, EncodedTable, TableEncoder, TableSchema
from ..models.registry import get_model
from ..models.spin import TWINS_READER_MAX_ROWS
from ..nn.columns import CATEGORICAL, ColumnOutputs
from ..nn.modes import set_training
from ..training.checkpoint import TrainingCheckpoint, fingerprint
from ..training.config import TrainConfig
from ..training.device import predict_dtype, resolve_device
from ..training.distributed import current_group, local_shards, make_shards, resolve_shards
from ..training.losses import cell_losses, gaussian_std
from ..training.masking import mask_for_inference
from ..training.seeding import seeded_build
from ..training.trainer import Batch, BestCheckpoint, CostWarning, ProgressBar, Trainer, TrainHistory
from ._context import PredictionContext
from ._sampling import (
    BatchSource,
    DuplicateLookup,
    LookupPairs,
    LookupSteps,
    RowSampler,
    RowSource,
    TwinNoise,
    permute_targets,
    split_validation,
    stratified_order,
    twin_groups,
)
from .model_dir import SavedModel, module_tensors, read_model_dir, save_model_dir


@dataclass
class TrainingSetup:
    """What one learner's training reads (:meth:`TableLearner.training_setup`)."""

    sampler: BatchSource
    generator: torch.Generator  # masking draws
    callbacks: list[Any]
    evaluate: Callable[[], float] | None = None
    validation: tuple[EncodedTable, EncodedTable] | None = None  # (context, validation rows)


def prediction_loss(entry: dict[str, np.ndarray], prediction: np.ndarray) -> float:
    """The loss of ``prediction`` (probabilities (k, C), or means (k,)) of the held-out rows
    ``entry`` (:meth:`TableLearner.held_out_rows`): weighted log loss, or weighted mean squared
    error in the target's units."""
    if prediction.ndim == 2:
        picked = np.clip(prediction[np.arange(len(entry["truth"])), entry["truth"]], 1e-15, 1.0)
        return float(np.average(-np.log(picked), weights=entry["weight"]))
    return float(np.average((prediction - entry["truth"]) ** 2, weights=entry["weight"]))


def validation_scores(held: dict[str, dict[str, np.ndarray]], n_rows: int) -> dict[str, dict[str, float]]:
    """Per target, the scores of held-out rows (:meth:`TableLearner.held_out_rows`) in the
    target's own terms: ``rmse`` and ``mae`` (original units) of a continuous target,
    ``accuracy`` and ``log_loss`` (calibrated) of a categorical one; weighted by the rows' sample
    weights; ``rows``: the ``n_rows`` validation rows."""
    scores: dict[str, dict[str, float]] = {}
    for name, entry in held.items():
        if "proba" in entry:
            proba, weight = entry["proba"], entry["weight"]
            scores[name] = {
                "accuracy": float(np.average(proba.argmax(1) == entry["truth"], weights=weight)),
                "log_loss": prediction_loss(entry, proba),
            }
        else:
            error = entry["mean"] - entry["truth"]
            scores[name] = {
                "rmse": math.sqrt(prediction_loss(entry, entry["mean"])),
                "mae": float(np.average(np.abs(error), weights=entry["weight"])),
            }
        scores[name]["rows"] = int(n_rows)
    return scores


# the file of :meth:`TableLearner.to_files` that carries its held-out predictions
HELD_OUT_FILE = "held_out.npz"


class TableLearner:
    """One fitted table model (see module docstring)."""

    def __init__(
        self,
        model_name: str,
        model_config: FrozenConfig,
        train_config: TrainConfig,
        *,
        device: str | torch.device = "auto",
        seed: int = 0,
        verbose: bool | None = None,
    ) -> None:
        train_config.check_for("table")  # the neural processes' settings would do nothing here
        self.model_name = model_name
        self.model_config = model_config
        self.train_config = train_config
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.verbose = verbose
        self.label = ""  # shown in the progress bar: "member 2 of 3" for an ensemble's member
        self.bar_position: int | None = None  # the bar's line when members train at once
        # the caller's validation rows (an estimator's ``eval_set``), encoded: when set, they pick
        # the best checkpoint and every training row trains (no internal validation split)
        self.eval_rows: EncodedTable | None = None
        self.validation_index: np.ndarray | None = None  # set by training_setup
        # the seed the validation split is drawn from (None: this learner's own seed): the members
        # of an ensemble's other families hold out the rows of its first family's members, so
        # that the ensemble can weigh the families on rows none of them trained on
        self.split_seed: int | None = None
        # per target, this fit's predictions of its validation rows (:meth:`held_out_rows`): read
        # by the ensemble's selection after the fit, never saved (they are training labels)
        self.held_out: dict[str, dict[str, np.ndarray]] = {}
        # per target, this member's weight in its ensemble's prediction (set by the ensemble's
        # selection; empty: every member weighs the same)
        self.ensemble_weights: dict[str, float] = {}
        # per target, scores on the validation rows after training (finish_fit; saved with the model)
        self.validation_scores: dict[str, dict[str, float]] = {}
        self.encoder: TableEncoder | None = None
        self.module: torch.nn.Module | None = None
        self.context: PredictionContext | None = None  # set by fit, set_context and load
        self.history: TrainHistory | None = None
        self.temperatures: dict[str, float] = {}  # categorical target -> softmax temperature
        self._inference_copy: torch.nn.Module | None = None

    # -- fitting ------------------------------------------------------------------------------
    @property
    def schema(self) -> TableSchema:
        assert self.encoder is not None
        return self.encoder.schema

    def target_mask(self) -> torch.Tensor:
        """``(d,)`` bool: the target columns."""
        d = len(self.schema.columns)
        mask = torch.zeros(d, dtype=torch.bool, device=self.device)
        mask[self.schema.target_indices] = True
        return mask

    def _strata(self, enc: EncodedTable) -> np.ndarray | None:
        """Class labels of the first categorical target (missing = its own stratum), if any."""
        for j in self.schema.target_indices:
            if self.schema.columns[j].kind == CATEGORICAL:
                return np.where(enc.missing[:, j], -1, enc.values[:, j]).astype(np.int64)
        return None

    def _build_module(self) -> torch.nn.Module:
        _, module_cls = get_model(self.model_name)
        return module_cls(self.model_config, self.schema.layout()).to(self.device)

    def fit_encoder(self, frame: pd.DataFrame, schema: TableSchema, unlabeled: pd.DataFrame | None) -> None:
        """Fit the table encoder on the training-visible rows (``frame`` and the unlabelled rows'
        features), never on a held-out target (spec-npt section 9, item 10)."""
        stats_frame = frame
        if unlabeled is not None:
            stats_frame = pd.concat([frame, unlabeled.reindex(columns=frame.columns)], ignore_index=True)
        quantile_columns: list[str] = []
        if self.train_config.feature_transform == "quantile":
            quantile_columns = [
                c.name for c in schema.columns if c.kind != CATEGORICAL and c.name not in schema.targets
            ]
        features = [c.name for c in schema.columns if c.kind == CATEGORICAL and c.name not in schema.targets]
        if not schema.targets and features and self.train_config.min_category_count > 1:
            # without targets (the imputer) every column is one the model outputs, and it must
            # output a category it saw, never a shared infrequent level
            raise ConfigError(
                f"min_category_count={self.train_config.min_category_count} would group categories of "
                f"{features}, but a model without targets imputes every column with a category it "
                "saw; use min_category_count=1"
            )
        self.encoder = TableEncoder.fit(
            stats_frame,
            schema,
            quantile_columns=quantile_columns,
            min_category_count=self.train_config.min_category_count,
            group_columns=features,
        )

    def fit(
        self,
        frame: pd.DataFrame,
        schema: TableSchema,
        *,
        unlabeled: pd.DataFrame | None = None,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
    ) -> TableLearner:
        """Train on ``frame`` (all schema columns). ``unlabeled`` rows (features only) join
        training with their targets hidden: the paper's transductive mode. ``checkpoint_dir``,
        ``resume``: see :meth:`fit_encoded`."""
        enc, enc_u = self.encode_for_fit(frame, schema, unlabeled)
        assert self.encoder is not None
        return self.fit_encoded(self.encoder, enc, enc_u, checkpoint_dir=checkpoint_dir, resume=resume)

    def _fingerprint(self, encoder: TableEncoder, enc: EncodedTable, enc_u: EncodedTable | None) -> str:
        """What a checkpoint must have been made from: the encoded rows, the encoder, the
        settings (but how often checkpoints are written and the shard count) and the seed."""
        # how often checkpoints are written, and the row shards (checked against the checkpoint's
        # own count when resuming, so that a fit of two processes resumes in one)
        cadence = {"checkpoint_every_steps", "checkpoint_every_seconds", "shards"}
        train = {k: v for k, v in self.train_config.fingerprint_dict().items() if k not in cadence}
        arrays = [enc.values, enc.missing] + ([enc_u.values, enc_u.missing] if enc_u is not None else [])
        if enc.weights is not None:
            arrays.append(enc.weights)
        if self.eval_rows is not None:
            arrays += [self.eval_rows.values, self.eval_rows.missing]
        return fingerprint(
            *arrays,
            encoder.to_dict(),
            self.model_name,
            self.model_config.fingerprint_dict(),
            train,
            self.seed,
            *([] if self.split_seed is None else [{"split_seed": self.split_seed}]),
        )

    def encode_for_fit(
        self, frame: pd.DataFrame, schema: TableSchema, unlabeled: pd.DataFrame | None
    ) -> tuple[EncodedTable, EncodedTable | None]:
        """Fit the encoder (:meth:`fit_encoder`) and encode the training rows and the unlabelled
        rows (their targets absent): the arrays :meth:`fit_encoded` trains on."""
        self.fit_encoder(frame, schema, unlabeled)
        assert self.encoder is not None
        enc = self.encoder.transform(frame)
        enc_u = None
        if unlabeled is not None and len(unlabeled):
            enc_u = self.encoder.transform(unlabeled, absent=schema.targets)
        return enc, enc_u

    def fit_batches(
        self,
        encoder: TableEncoder,
        next_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
        context: EncodedTable,
        *,
        label: str = "",
    ) -> TableLearner:
        """Train on batches from a source of the caller's making: ``next_batch(step)`` returns
        ``(values, missing)``, each ``(rows, columns)`` on this learner's device, already encoded
        in ``encoder``'s layout (e.g. one random window of genotypes per step). No validation
        split, calibration or best checkpoint: the run is ``train_config``'s schedule. ``context``
        (encoded) is what the fitted model predicts from until :meth:`set_context` replaces it.
        The masks and the model's seeded weights and dropout come from ``seed``, as in :meth:`fit`."""
        self.encoder = encoder
        self.module, dropout_generator = seeded_build(self._build_module, self.seed, self.device)
        trainer = Trainer(
            self.module,
            self.schema.layout(),
            self.target_mask(),
            self.train_config,
            callbacks=[ProgressBar(self.verbose, label or f"{self.model_name} fit")],
            generator=torch.Generator(device=self.device).manual_seed(self.seed),
            dropout_generator=dropout_generator,
        )

        def batch(step: int) -> Batch:
            values, missing = next_batch(step)
            return Batch(values, missing, torch.ones(len(values), dtype=torch.bool, device=values.device))

        self.history = trainer.fit(batch)
        self.module.eval()
        self.set_context(context)
        return self

    def fit_encoded(
        self,
        encoder: TableEncoder,
        enc: EncodedTable,
        enc_u: EncodedTable | None = None,
        *,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
    ) -> TableLearner:
        """Train on rows already encoded by ``encoder`` (shared by the members of an ensemble);
        ``enc_u``: unlabelled rows (targets missing) that join training.

        ``checkpoint_dir``: write the training state there every ``checkpoint_every_steps`` steps
        or ``checkpoint_every_seconds`` (see ``training.checkpoint``); an existing checkpoint
        raises :class:`FileExistsError` unless ``resume``, which continues it (to the result of
        an uninterrupted fit with the same seed) or starts afresh when there is none. A checkpoint
        of other data, settings or seed raises ``CheckpointMismatchError``."""
        self.encoder = encoder
        self.fix_for_table(enc)
        cfg = self.train_config
        setup = self.training_setup(encoder, enc, enc_u)
        checkpoint, state = None, None
        if checkpoint_dir is not None:
            checkpoint = TrainingCheckpoint(
                checkpoint_dir,
                self._fingerprint(encoder, enc, enc_u),
                every_steps=cfg.checkpoint_every_steps,
                every_seconds=cfg.checkpoint_every_seconds,
            )
            if checkpoint.path.exists() and not resume:
                raise FileExistsError(
                    f"{checkpoint.path} holds the checkpoint of an earlier fit; pass resume=True "
                    "(--resume) to continue it, or remove it to start afresh"
                )
            state = checkpoint.read(map_location=self.device) if resume else None
        self.module, dropout_generator = seeded_build(self._build_module, self.seed, self.device)
        # row shards of each step and the processes sharing them (training.distributed)
        group = current_group()
        resumed_shards = None
        if state is not None and not state["finished"]:
            resumed_shards = int(state.get("n_shards", 1))
        n_shards = resolve_shards(cfg.shards, group, resumed_shards)
        generator = setup.generator
        shards = make_shards(
            local_shards(n_shards, group), self.seed, self.device, lambda: (generator, dropout_generator)
        )
        callbacks = setup.callbacks if group.is_main else [ProgressBar(False), *setup.callbacks[1:]]
        trainer = Trainer(
            self.module,
            self.schema.layout(),
            self.target_mask(),
            cfg,
            callbacks=callbacks,
            shards=shards,
            n_shards=n_shards,
            group=group,
        )
        self.history = trainer.fit(setup.sampler, setup.evaluate, checkpoint=checkpoint, resume=state)
        self.finish_fit(setup, enc)
        return self

    def twin_noise_acts(self, enc: EncodedTable) -> bool:
        """Whether twin noise (``TrainConfig.twin_noise``) acts on the table ``enc`` under this
        learner's settings: masked reconstruction that shows labels, a continuous target and two
        or more rows of the same features (:func:`._sampling.twin_groups`, over all of its rows,
        so that members of other validation splits agree)."""
        cfg, schema = self.train_config, self.schema
        if not (cfg.twin_noise > 0 and cfg.p_target < 1 and schema.targets):
            return False
        if cfg.training_task != "masked":
            return False
        cards = schema.layout().cardinalities
        continuous = [j for j in schema.target_indices if int(cards[j]) == 0]
        if not continuous:
            return False
        values, missing = torch.as_tensor(enc.values), torch.as_tensor(enc.missing)
        labelled = torch.ones(len(values), dtype=torch.bool)
        return twin_groups(values, missing, labelled, schema.target_indices) is not None

    def fix_for_table(self, enc: EncodedTable) -> None:
        """Fix the settings that depend on the table fitted, before its training, so that they
        are saved as they acted: where twin noise acts (:meth:`twin_noise_acts`) the model's
        ``predictor_rows="twins"`` becomes True (on tables of up to
        :data:`~semiparam.models.spin.TWINS_READER_MAX_ROWS` rows; beyond them it becomes False
        and twin noise does not act) and ``min_steps`` at least ``twin_min_steps`` (up
        to ``max_steps``); elsewhere ``"twins"`` becomes False, and ``twin_noise`` and
        ``twin_min_steps``, which do nothing there, become 0 (so a checkpoint of such a fit made
        before them resumes). Called once per fit, by :meth:`fit_encoded` and by an ensemble
        training its members together."""
        cfg = self.train_config
        acts = self.twin_noise_acts(enc)
        if getattr(self.model_config, "predictor_rows", None) == "twins":
            acts = acts and len(enc.values) <= TWINS_READER_MAX_ROWS
            self.model_config = self.model_config.replace(predictor_rows=acts)
            # without its reader SPIN's predictor reads no twin: the noise would be noise only
        floor = min(cfg.twin_min_steps, cfg.max_steps)  # a shorter fit asked for stays short
        if acts and floor > cfg.min_steps:
            self.train_config = cfg.replace(min_steps=floor)
        elif not acts and (cfg.twin_noise or cfg.twin_min_steps):
            # settings that cannot act on this table, saved (and fingerprinted) as what they did
            self.train_config = cfg.replace(twin_noise=0.0, twin_min_steps=0)

    def training_setup(
        self, encoder: TableEncoder, enc: EncodedTable, enc_u: EncodedTable | None
    ) -> TrainingSetup:
        """What this learner's training reads, drawn from its seed: the validation split, the
        rows of every step, the masking generator, the validation loss and the callbacks (progress
        bar first, then the best checkpoint when there is a validation split)."""
        cfg = self.train_config
        self.encoder = encoder
        schema = encoder.schema
        rng = np.random.default_rng(self.seed)
        strata = self._strata(enc)
        has_targets = bool(schema.targets)
        # NOTE[DIFF]: the paper selects checkpoints on the benchmark's own validation split; an
        # estimator gets one table, so a stratified share of it is held out for that.
        fraction = cfg.validation_fraction if has_targets and self.eval_rows is None else 0.0
        split_rng = rng if self.split_seed is None else np.random.default_rng(self.split_seed)
        train_idx, val_idx = split_validation(len(enc.values), fraction, strata, split_rng)
        self.validation_index = val_idx  # positions of the held-out rows (feature_importances_)
        train_values = enc.values[train_idx]
        train_missing = enc.missing[train_idx]
        labelled = np.ones(len(train_idx), dtype=bool)
        weights = None if enc.weights is None else enc.weights[train_idx]
        if enc_u is not None:
            train_values = np.concatenate([train_values, enc_u.values])
            train_missing = np.concatenate([train_missing, enc_u.missing])
            labelled = np.concatenate([labelled, np.zeros(len(enc_u.values), dtype=bool)])
            if weights is not None:  # unlabelled rows count once (their features are scored)
                weights = np.concatenate([weights, np.ones(len(enc_u.values), dtype=weights.dtype)])
        train_strata = None
        if strata is not None and cfg.class_balance:
            train_strata = np.concatenate(
                [strata[train_idx], np.full(len(train_values) - len(train_idx), -2)]
            )

        rows = RowSampler(
            torch.as_tensor(train_values, device=self.device),
            torch.as_tensor(train_missing, device=self.device),
            torch.as_tensor(labelled, device=self.device),
            cfg.batch_size,
            train_strata,
            rng,
            None if weights is None else torch.as_tensor(weights, device=self.device),
            cfg.full_batch_rows,
        )
        sampler: BatchSource = rows
        lookup = cfg.training_task == "duplicate_lookup"
        if lookup:
            sampler = DuplicateLookup(rows, schema.target_indices, cfg.lookup_shuffle_targets)
        else:
            source: RowSource = rows
            if cfg.twin_noise > 0 and cfg.p_target < 1 and has_targets:
                cards = schema.layout().cardinalities
                source = sampler = TwinNoise(rows, schema.target_indices, cards, cfg.twin_noise)
            if cfg.lookup_pairs > 0 and has_targets:
                sampler = LookupPairs(source, schema.target_indices, cfg.lookup_pairs)
            elif cfg.lookup_every > 0 and has_targets:
                sampler = LookupSteps(source, schema.target_indices, cfg.lookup_every)
        bar = " ".join(filter(None, [self.model_name, self.label, f"on {self.device}"]))
        setup = TrainingSetup(
            sampler=sampler,
            generator=torch.Generator(device=self.device).manual_seed(self.seed),
            callbacks=[ProgressBar(self.verbose, bar, self.bar_position), CostWarning()],
        )
        if self.eval_rows is not None and has_targets:
            setup.callbacks.append(BestCheckpoint(cfg.patience, cfg.smoothing))
            val, ctx = self.eval_rows, EncodedTable(enc.values, enc.missing)
            setup.validation = (ctx, val)
        elif len(val_idx):
            setup.callbacks.append(BestCheckpoint(cfg.patience, cfg.smoothing))
            val_weights = None if enc.weights is None else enc.weights[val_idx]
            val = EncodedTable(enc.values[val_idx], enc.missing[val_idx], val_weights)
            ctx = EncodedTable(enc.values[train_idx], enc.missing[train_idx])
            if lookup:  # each validation row is predicted from its duplicate
                if cfg.lookup_shuffle_targets:
                    perm = rng.permutation(len(val_idx))
                    shuffled = permute_targets(val.values, val.missing, schema.target_indices, perm)
                    val = EncodedTable(*shuffled, val.weights)
                ctx = val
            setup.validation = (ctx, val)
        if setup.validation is not None:
            ctx, val = setup.validation
            # the loss that picks the checkpoint may read a sample of the context (the final
            # calibration and scores read setup.validation, every training row); a lookup
            # task's context is its validation rows' duplicates, all of them
            eval_ctx = ctx if lookup else self._validation_context(ctx)
            setup.evaluate = lambda: self._target_loss(eval_ctx, val)
        return setup

    def finish_fit(self, setup: TrainingSetup, enc: EncodedTable) -> None:
        """After training: temperature scaling on the validation rows, then the context (every
        labelled row, train and validation, as the paper's test mode)."""
        self._inference_copy = None
        self.temperatures = {}
        self.validation_scores = {}
        self.held_out = {}
        if setup.validation is not None:
            # the trained model's outputs for its validation rows, predicted from the rows it
            # validated against: read by the calibration and the scores
            context, queries = setup.validation
            assert self.module is not None
            outputs = self.query_outputs(queries, self.encode(context, self.module), self.module)
            if self.train_config.calibrate:
                self._calibrate(outputs, queries)
            # the rows' ids: positions in the fitted table, or after it for an eval_set's rows
            if self.eval_rows is None:
                assert self.validation_index is not None
                ids = self.validation_index
            else:
                ids = len(enc.values) + np.arange(len(queries.values))
            self.held_out = self.held_out_rows(outputs, queries, ids)
            self.validation_scores = validation_scores(self.held_out, len(queries.values))
        self.set_context(EncodedTable(enc.values, enc.missing))

    def held_out_rows(
        self, outputs: ColumnOutputs, queries: EncodedTable, ids: np.ndarray
    ) -> dict[str, dict[str, np.ndarray]]:
        """Per target, the validation rows ``queries`` (rows the model never trained on, with
        ids ``ids``) whose label is known, from their ``outputs``: ``rows`` (their ids),
        ``truth`` (class index, or the value in original units), ``weight`` (sample weights, 1
        without) and the decoded prediction (``proba`` (k, C) calibrated, or ``mean``). A target
        whose rows weigh nothing is left out."""
        assert self.encoder is not None
        names = [self.schema.names[j] for j in self.schema.target_indices]
        decoded = self.decode_outputs(outputs, names)
        held: dict[str, dict[str, np.ndarray]] = {}
        for name, j in zip(names, self.schema.target_indices, strict=True):
            seen = ~queries.missing[:, j]
            weight = np.ones(int(seen.sum())) if queries.weights is None else queries.weights[seen]
            if not seen.any() or not weight.sum() > 0:
                continue
            truth = queries.values[seen, j].astype(np.float64)
            entry = {"rows": np.asarray(ids)[seen], "weight": weight.astype(np.float64)}
            if "proba" in decoded[name]:
                entry.update(truth=truth.astype(np.int64), proba=decoded[name]["proba"][seen])
            else:
                truth = self.encoder.decode_continuous(name, truth)
                entry.update(truth=truth, mean=decoded[name]["mean"][seen])
            held[name] = entry
        return held

    @property
    def keeps_training_rows(self) -> bool:
        """NPT predicts from stored training rows; a model whose class sets
        ``keeps_training_rows = False`` (SPIN) predicts from an encoding of them, and the rows are
        dropped once encoded. Such a module also provides ``state_to_tensors(state)`` and
        ``state_from_tensors(tensors)`` so the encoding can be saved."""
        return bool(getattr(type(self.module), "keeps_training_rows", True))

    def set_context(self, context: EncodedTable) -> None:
        """Rows predictions attend to (a new :class:`PredictionContext`). Models that keep rows
        sample them (stratified, seeded) down to ``max_context_rows``; the others encode all of
        them now and drop the rows."""
        if not self.keeps_training_rows:
            self.context = PredictionContext.encoded(context, self.encode)
            return
        context, keep = self._sample_rows(context, self.train_config.max_context_rows, self.seed + 1)
        self.context = PredictionContext(context, keep)  # keep: their positions among the rows given

    def _validation_context(self, ctx: EncodedTable) -> EncodedTable:
        """The rows the validation loss reads during training (``validation_context_rows``)."""
        return self._sample_rows(ctx, self.train_config.validation_context_rows, self.seed + 2)[0]

    def _sample_rows(
        self, rows: EncodedTable, limit: int | None, seed: int
    ) -> tuple[EncodedTable, np.ndarray]:
        """``rows``, or a stratified sample of ``limit`` of them drawn with ``seed``, and their
        positions among ``rows``."""
        keep = np.arange(len(rows.values))
        if limit is None or len(rows.values) <= limit:
            return rows, keep
        order = stratified_order(len(rows.values), self._strata(rows), np.random.default_rng(seed))
        keep = np.sort(order[np.linspace(0, len(order) - 1, limit).astype(np.int64)])
        return EncodedTable(rows.values[keep], rows.missing[keep]), keep

    def refresh_context(self, frame: pd.DataFrame) -> None:
        """Replace the context with the rows of ``frame`` (all schema columns), without retraining."""
        assert self.encoder is not None
        self.set_context(self.encoder.transform(frame))

    # -- prediction ---------------------------------------------------------------------------
    def context_inputs(self, context: EncodedTable) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's inputs for context rows: target cells shown only to a model trained to
        read them."""
        values = torch.as_tensor(context.values, device=self.device)
        missing = torch.as_tensor(context.missing, device=self.device)
        # Training labels are visible context only if the model was trained to read them
        # (stochastic target masking, or the lookup task); with p_target = 1 the model never saw
        # a label as input.
        reads = self.train_config.reads_context_labels
        hide = torch.zeros_like(self.target_mask()) if reads else self.target_mask()
        return mask_for_inference(values, missing, hide_columns=hide)

    def inference_module(self) -> torch.nn.Module:
        """The module predictions run on: the trained one, or a copy of it in the dtype of
        ``predict_dtype`` (``"auto"``: float64 on the CPU, float32 on a GPU). In float64 a row's
        prediction agrees to ~1e-12 whatever rows share its batch; float32 matrix products round
        differently with the batch size (~1e-7)."""
        assert self.module is not None
        dtype = predict_dtype(self.device, self.train_config.predict_dtype)
        if dtype == next(self.module.parameters()).dtype:
            return set_training(self.module, False)
        if self._inference_copy is None:
            self._inference_copy = copy.deepcopy(self.module).to(dtype).eval()
        return self._inference_copy

    @torch.no_grad()
    def encode(self, context: EncodedTable, module: torch.nn.Module | None = None) -> Any:
        """The model's encoding of context rows (``encode_context``), by default with the
        inference module."""
        module = set_training(module or self.inference_module(), False)
        dtype = next(module.parameters()).dtype
        values, hidden = self.context_inputs(context)
        return module.encode_context(values.to(dtype), hidden)

    @torch.no_grad()
    def query_outputs(
        self, queries: EncodedTable, state: Any, module: torch.nn.Module | None = None
    ) -> ColumnOutputs:
        """Raw outputs for encoded query rows predicted from an encoded context ``state``."""
        module = set_training(module or self.inference_module(), False)
        dtype = next(module.parameters()).dtype
        pieces: list[ColumnOutputs] = []
        bs = self.train_config.predict_batch_size
        hide = self.target_mask()
        for start in range(0, len(queries.values), bs):
            values = torch.as_tensor(queries.values[start : start + bs], device=self.device)
            missing = torch.as_tensor(queries.missing[start : start + bs], device=self.device)
            v, h = mask_for_inference(values.to(dtype), missing, hide_columns=hide)
            pieces.append(module.forward_queries(v, h, state))
        return ColumnOutputs(
            torch.cat([p.continuous for p in pieces]),
            [torch.cat([p.categorical[k] for p in pieces]) for k in range(len(pieces[0].categorical))],
        )

    def _calibrate(self, outputs: ColumnOutputs, queries: EncodedTable) -> None:
        """Temperature scaling (Guo et al. 2017) of each categorical target on the validation rows
        ``queries`` (their ``outputs``): the one scalar T in [``min_temperature``, ``MAX_TEMPERATURE``] that
        minimises their log loss of softmax(logits / T). It changes no predicted class, only how
        sure the model says it is.

        NOTE[DIFF]: not in the papers; an NPT picks its checkpoint on the same rows but its
        probabilities come out over-confident on small tables, which log loss punishes."""
        from scipy.optimize import minimize_scalar

        layout = self.schema.layout()
        for j in self.schema.target_indices:
            if layout.kinds[j] != CATEGORICAL:
                continue
            seen = ~queries.missing[:, j]
            if seen.sum() < 2:
                continue
            logits = outputs.categorical[layout.categorical.index(j)].double().cpu()[torch.as_tensor(seen)]
            labels = torch.as_tensor(queries.values[seen, j], dtype=torch.long)
            weights = (
                torch.ones(len(labels), dtype=torch.float64)
                if queries.weights is None
                else torch.as_tensor(queries.weights[seen], dtype=torch.float64)
            )
            if not weights.sum() > 0:
                continue

            def nll(
                log_t: float,
                logits: torch.Tensor = logits,
                labels: torch.Tensor = labels,
                weights: torch.Tensor = weights,
            ) -> float:
                each = torch.nn.functional.cross_entropy(logits / math.exp(log_t), labels, reduction="none")
                return float((each * weights).sum() / weights.sum())

            # a floor on T: a small validation split the model gets all right would otherwise
            # drive T towards 0 and make the model surer still
            low = math.log(self.train_config.min_temperature)
            high = math.log(self.train_config.MAX_TEMPERATURE)
            best = minimize_scalar(nll, bounds=(low, high), method="bounded")
            self.temperatures[self.schema.names[j]] = float(math.exp(best.x))

    def _target_loss(self, context: EncodedTable, queries: EncodedTable) -> float:
        """Mean target loss of ``queries`` predicted from ``context`` (validation), weighted by
        the queries' sample weights when they have them."""
        assert self.module is not None
        was_training = self.module.training
        outputs = self.query_outputs(queries, self.encode(context, self.module), self.module)
        true = torch.as_tensor(queries.values, device=self.device)
        scored = (~torch.as_tensor(queries.missing, device=self.device) & self.target_mask()).to(true.dtype)
        if queries.weights is not None:
            scored = scored * torch.as_tensor(queries.weights, device=self.device)[:, None]
        losses = cell_losses(outputs, true, self.schema.layout())
        set_training(self.module, was_training)
        return float((losses * scored).sum() / scored.sum().clamp(min=1e-12))

    def context_state(self) -> Any:
        """The encoding of the context, computed once (:meth:`PredictionContext.encoding`)."""
        if self.context is None:  # pragma: no cover - fit always sets one
            raise RuntimeError("the model has no context; fit it first")
        return self.context.encoding(self.encode)

    def predict_outputs(
        self, frame: pd.DataFrame | EncodedTable, *, absent: Sequence[str] = ()
    ) -> ColumnOutputs:
        """Raw outputs for the query rows ``frame`` (a table, or one already encoded)."""
        assert self.encoder is not None
        queries = frame if isinstance(frame, EncodedTable) else self.encoder.transform(frame, absent=absent)
        return self.query_outputs(queries, self.context_state())

    def predict_columns(
        self, frame: pd.DataFrame | EncodedTable, columns: Sequence[str], *, absent: Sequence[str] = ()
    ) -> dict[str, dict[str, np.ndarray]]:
        """Decoded predictions per column: ``{"mean": ..., "std": ...}`` for continuous columns
        (original units; std only with a Gaussian head), ``{"proba": (n, C)}`` for categorical.
        ``frame`` may be a table or an :class:`EncodedTable` (then ``absent`` does not apply)."""
        return self.decode_outputs(self.predict_outputs(frame, absent=absent), columns)

    def decode_outputs(
        self, outputs: ColumnOutputs, columns: Sequence[str]
    ) -> dict[str, dict[str, np.ndarray]]:
        """Raw outputs -> the decoded predictions of :meth:`predict_columns`."""
        assert self.encoder is not None
        layout = self.schema.layout()
        result: dict[str, dict[str, np.ndarray]] = {}
        for name in columns:
            j = self.schema.names.index(name)
            if layout.kinds[j] == CATEGORICAL:
                k = layout.categorical.index(j)
                temperature = self.temperatures.get(name, 1.0)
                proba = torch.softmax(outputs.categorical[k].double() / temperature, -1)
                result[name] = {"proba": proba.cpu().numpy()}
            else:
                k = layout.continuous.index(j)
                out = outputs.continuous[:, k].cpu().double()
                mean = self.encoder.decode_continuous(name, out[:, 0].numpy().astype(np.float64))
                entry = {"mean": mean}
                if out.shape[1] == 2:
                    entry["std"] = (
                        gaussian_std(out[:, 1]).numpy().astype(np.float64) * self.encoder.stds[name]
                    )
                result[name] = entry
        return result

    # -- persistence --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        assert self.encoder is not None and self.history is not None
        return {
            "model_name": self.model_name,
            "model_config": self.model_config.to_dict(),
            "train_config": self.train_config.to_dict(),
            "encoder": self.encoder.to_dict(),
            "seed": self.seed,
            "device": str(self.device),
            "history": self.history.to_dict(),
            "temperatures": self.temperatures,
            "validation_scores": self.validation_scores,
            "ensemble_weights": self.ensemble_weights,
        }

    def save(self, path: str | Path, extra: dict[str, Any] | None = None, *, overwrite: bool = False) -> Path:
        """Save a model directory of kind ``table`` (``estimators.model_dir``): ``semiparam.json``
        (configs, schema, encoder, history; ``extra``: the estimator's state), ``model.safetensors``
        (weights) and ``context.safetensors`` (the encoded context rows). No pickle; written aside
        and renamed into place (an existing ``path`` raises :class:`FileExistsError` unless
        ``overwrite``, and survives any failed save)."""
        if self.module is None or self.context is None:
            raise RuntimeError("nothing to save: the model is not fitted")
        # the rows (NPT), or only their encoding: then the saved model holds no training row
        context = self.context.to_tensors(getattr(self.module, "state_to_tensors", None))
        tensors = {"model.safetensors": module_tensors(self.module), "context.safetensors": context}
        meta = {**self.state_dict(), "estimator": extra or {}}
        return save_model_dir(path, "table", meta, tensors=tensors, overwrite=overwrite)

    def to_files(self) -> dict[str, bytes]:
        """The files :meth:`save` writes, as ``{name: bytes}``: a fitted learner shipped between
        processes (a Ray task's result) in the saved format, no pickle of live objects."""
        with tempfile.TemporaryDirectory(prefix="semiparam-learner-") as tmp:
            path = self.save(Path(tmp) / "learner")
            files = {f.name: f.read_bytes() for f in sorted(path.iterdir())}
        # the held-out predictions travel too (the ensemble's selection reads them), not saved
        flat = {f"{k}/{key}": a for k, entry in enumerate(self.held_out.values()) for key, a in entry.items()}
        buffer = io.BytesIO()
        np.savez(buffer, **flat)  # type: ignore[arg-type]  # the stub types **kwds as its own flags
        files[HELD_OUT_FILE] = buffer.getvalue()
        files[HELD_OUT_FILE + ".json"] = json.dumps(list(self.held_out)).encode()
        return files

    @classmethod
    def from_files(cls, files: dict[str, bytes], *, device: str | torch.device | None = None) -> TableLearner:
        """The learner :meth:`to_files` packed (as :meth:`load` of the saved directory)."""
        files = dict(files)
        held = files.pop(HELD_OUT_FILE, None)
        names = json.loads(files.pop(HELD_OUT_FILE + ".json", b"[]"))
        with tempfile.TemporaryDirectory(prefix="semiparam-learner-") as tmp:
            for name, data in files.items():
                (Path(tmp) / Path(name).name).write_bytes(data)
            learner = cls.load(tmp, device=device)[0]
        if held is not None:
            with np.load(io.BytesIO(held), allow_pickle=False) as arrays:
                for key in arrays.files:
                    k, field = key.split("/")
                    learner.held_out.setdefault(names[int(k)], {})[field] = arrays[key]
        return learner

    @classmethod
    def load(
        cls, path: str | Path | SavedModel, *, device: str | torch.device | None = None
    ) -> tuple[TableLearner, dict[str, Any]]:
        """The learner :meth:`save` wrote to ``path`` (or read already), and the ``extra`` it was
        saved with."""
        saved = path if isinstance(path, SavedModel) else read_model_dir(path, "table")
        meta = saved.meta
        config_cls, _ = get_model(meta["model_name"])
        learner = cls(
            meta["model_name"],
            saved.config(config_cls, "model_config"),
            saved.config(TrainConfig, "train_config"),
            device=device or available_device(meta["device"]),  # a GPU model loads on a CPU machine
            seed=meta["seed"],
        )
        learner.encoder = TableEncoder.from_dict(meta["encoder"])
        learner.history = TrainHistory(**meta["history"])
        learner.temperatures = dict(meta.get("temperatures", {}))
        learner.validation_scores = dict(meta.get("validation_scores", {}))  # absent in older files
        learner.ensemble_weights = dict(meta.get("ensemble_weights", {}))  # absent in older files
        learner.module = saved.load_weights(learner._build_module(), device=learner.device).eval()
        keeps_rows = learner.keeps_training_rows
        device = "cpu" if keeps_rows else str(learner.device)  # rows stay on the CPU until used
        learner.context = PredictionContext.from_tensors(
            saved.tensors("context.safetensors", device=device),
            keeps_rows=keeps_rows,
            state_from_tensors=getattr(learner.module, "state_from_tensors", None),
        )
        return learner, meta["estimator"]


__all__ = ["TableLearner", "DataValidationError", "resolve_device"]
