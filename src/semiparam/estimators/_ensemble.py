"""An ensemble of table models that share one fitted encoder and one encoded table.

``EnsembleLearner`` is what the estimators hold as ``learner_``: ``n_members`` :class:`TableLearner`
members, each trained with its own seed, hence its own validation split, weight initialisation,
masks and minibatch order (and, above ``max_context_rows``, its own context sample). The encoder
is fitted once and the table encoded once; every member reads the same arrays. Predictions are
averaged in probability for categorical columns; for continuous columns the mean of the members'
means, and with a Gaussian head the standard deviation of the mixture of the members'
Gaussians. Every member weighs the same, unless ``TrainConfig.ensemble_selection`` asks for the
families of an ensemble of several (NPT and SPIN, ``model="auto"``) to be weighed by ensemble
selection on the validation rows they all held out (:meth:`EnsembleLearner.select_weights`). One
member is exactly the single model of the paper.

NOTE[DIFF]: the papers train one model. A few members trained on different validation splits
together see every row and average out the variance of a small-table fit (the cheap-ensemble
recipe of TabM / RealMLP); ``n_estimators`` chooses how many.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..data.table import EncodedTable, TableEncoder, TableSchema
from ..parallel import check_executor, map_tasks
from ..training.config import TrainConfig
from ..training.device import autocast_dtype
from ..training.distributed import current_group
from ..training.members import MemberPlan, train_members
from ..training.seeding import seeded_build
from ..training.trainer import ProgressBar, TrainHistory
from ._context import PredictionContext
from .learner import TableLearner, prediction_loss
from .model_dir import read_model_dir, save_model_dir


def member_seeds(seed: int, n_members: int) -> list[int]:
    """Member 0 keeps ``seed`` (one member = the single model); the others draw from it."""
    extra = np.random.SeedSequence(seed).generate_state(max(n_members - 1, 0), dtype=np.uint32)
    return [int(seed)] + [int(s) % (2**31 - 1) for s in extra]


@dataclasses.dataclass
class EnsembleHistory:
    """Training histories of the members. The attributes of a single :class:`TrainHistory`
    (``steps``, ``val_loss``, ``best_step``, ``stop_reason``, ...) read member 0's, so code
    written for one model keeps working; ``members`` holds all of them."""

    members: list[TrainHistory]
    seconds: float = 0.0  # whole fit: encoder, every member, context encoding

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "members":
            raise AttributeError(name)
        return getattr(self.members[0], name)

    @property
    def n_members(self) -> int:
        return len(self.members)

    @property
    def seconds_per_member(self) -> list[float]:
        return [m.seconds for m in self.members]

    @property
    def best_steps(self) -> list[int | None]:
        return [m.best_step for m in self.members]

    @property
    def stop_reasons(self) -> list[str]:
        return [m.stop_reason for m in self.members]

    def summary(self) -> dict[str, Any]:
        """Short per-member facts (no per-step curves): for reports and run directories."""
        return {
            "n_members": self.n_members,
            "seconds": self.seconds,
            "members": [
                {
                    "steps": m.n_steps,
                    "best_step": m.best_step,
                    "best_val_loss": m.best_val_loss,
                    "stop_reason": m.stop_reason,
                    "anneal_start": m.anneal_start,
                    "seconds": m.seconds,
                    "eval_seconds": m.eval_seconds,
                }
                for m in self.members
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "members": [m.to_dict() for m in self.members]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnsembleHistory:
        return cls([TrainHistory(**m) for m in d["members"]], d.get("seconds", 0.0))


@dataclasses.dataclass
class _MemberFit:
    """Fit one member on the shared encoded rows and return it packed (a Ray task's body)."""

    encoder: TableEncoder
    enc: EncodedTable
    enc_u: EncodedTable | None
    resume: bool

    def __call__(self, job: tuple[TableLearner, Path | None]) -> dict[str, bytes]:
        member, member_dir = job
        member.fit_encoded(self.encoder, self.enc, self.enc_u, checkpoint_dir=member_dir, resume=self.resume)
        return member.to_files()


def _predict_shard(
    learner: EnsembleLearner, columns: tuple[str, ...], shard: EncodedTable
) -> dict[str, dict[str, np.ndarray]]:
    """One shard of query rows predicted (the body of a Ray task of sharded prediction)."""
    return learner.predict_columns(shard, columns)


@dataclasses.dataclass(frozen=True)
class Family:
    """The members of one model family in an ensemble: ``n_members`` models of ``model_name``
    under ``model_config``, trained under ``train_config``."""

    model_name: str
    model_config: Any
    train_config: TrainConfig
    n_members: int


# TrainConfig fields that decide how a table is encoded: every family of an ensemble reads one
# encoding, so they must agree
ENCODING_FIELDS = ("feature_transform", "min_category_count")


class EnsembleLearner:
    """``n_members`` table models over one encoder (see the module docstring); with
    ``more_families``, members of several model families (NPT and SPIN), which may be weighed by
    ensemble selection (:meth:`select_weights`)."""

    # with executor="ray", predictions for more query rows than this are sharded over Ray tasks
    predict_shard_rows = 50_000

    def __init__(
        self,
        model_name: str,
        model_config: Any,
        train_config: TrainConfig,
        *,
        n_members: int = 1,
        more_families: Sequence[Family] = (),
        device: str | torch.device = "auto",
        seed: int = 0,
        verbose: bool | None = None,
        executor: str = "serial",
        ray_address: str | None = None,
    ) -> None:
        families = [Family(model_name, model_config, train_config, n_members), *more_families]
        for family in families:
            if family.n_members < 1:
                raise ValueError(f"n_estimators must be >= 1, got {family.n_members}")
            for name in ENCODING_FIELDS:
                if getattr(family.train_config, name) != getattr(train_config, name):
                    raise ValueError(
                        f"the {family.model_name} and {model_name} members read one encoding of the "
                        f"table, but their {name} differ: {getattr(family.train_config, name)!r} and "
                        f"{getattr(train_config, name)!r}"
                    )
        check_executor(executor, ray_address)
        self.executor = executor
        self.ray_address = ray_address
        self.model_name = "+".join(dict.fromkeys(f.model_name for f in families))
        self.model_config = model_config
        self.train_config = train_config
        self.seed = int(seed)
        self.verbose = verbose
        total = sum(f.n_members for f in families)
        seeds = iter(member_seeds(self.seed, total))
        self.members = []
        for family in families:
            config = family.train_config
            if config.time_budget is not None:  # the budget is the whole fit's: a share each
                config = config.replace(time_budget=config.time_budget / total)
            self.members += [
                TableLearner(
                    family.model_name,
                    family.model_config,
                    config,
                    device=device,
                    seed=next(seeds),
                    verbose=verbose,
                )
                for _ in range(family.n_members)
            ]
        if total > 1:
            for k, member in enumerate(self.members):
                member.label = f"member {k + 1} of {total}"
        # member k of every other family holds out the rows of the first family's member k, where
        # that family has a k-th member: every family then predicts the rows they held out, from
        # rows it did not train on, and select_weights weighs the families there. A member
        # beyond the first family's size keeps a split of its own (model="auto" on a large
        # table: 1 NPT + 2 SPIN), so that no two members of one family hold out the same rows
        lead = self.members[: families[0].n_members]
        start = len(lead)
        for family in families[1:]:
            for member, leader in zip(self.members[start : start + family.n_members], lead, strict=False):
                member.split_seed = leader.seed
            start += family.n_members
        self.encoder: TableEncoder | None = None
        self.history: EnsembleHistory | None = None
        # whether predictions weigh the members by their ensemble_weights (False: all the same)
        self.weighted = True

    # -- the attributes code written for one TableLearner reads --------------------------------
    @property
    def schema(self) -> TableSchema:
        assert self.encoder is not None
        return self.encoder.schema

    @property
    def device(self) -> torch.device:
        return self.members[0].device

    @property
    def module(self) -> torch.nn.Module | None:
        return self.members[0].module

    @property
    def context(self) -> PredictionContext | None:
        """Member 0's context (every member's holds the same rows)."""
        return self.members[0].context

    @property
    def keeps_training_rows(self) -> bool:
        """Whether every member predicts from stored rows (NPT); False where any predicts from an
        encoding of them (SPIN)."""
        return all(m.keeps_training_rows for m in self.members)

    def validation_summary(self) -> dict[str, Any]:
        """Each member's scores on its own validation rows (:attr:`TableLearner.validation_scores`:
        rows that member never trained on, predicted from the rows it trained on) and, per target
        and score, their mean over the members that have one. Empty without validation rows."""
        members = [m.validation_scores for m in self.members]
        mean: dict[str, dict[str, float]] = {}
        for target in dict.fromkeys(t for scores in members for t in scores):
            entries = [scores[target] for scores in members if target in scores]
            mean[target] = {k: float(np.mean([e[k] for e in entries])) for k in entries[0] if k != "rows"}
        return {"mean": mean, "members": members} if mean else {}

    # -- fitting --------------------------------------------------------------------------------
    def fit(
        self,
        frame: pd.DataFrame,
        schema: TableSchema,
        *,
        unlabeled: pd.DataFrame | None = None,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
        evaluation: pd.DataFrame | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> EnsembleLearner:
        """Fit the encoder once, then every member. ``checkpoint_dir``: each member checkpoints
        into ``member_<k>/`` under it; ``resume`` continues a killed fit (members that finished
        are not trained again). ``evaluation``: labelled rows (an estimator's ``eval_set``) that
        every member validates on instead of its own held-out share. ``sample_weight``: the
        rows' weights in the training and validation losses (None: every row 1). See
        :meth:`TableLearner.fit_encoded`."""
        start = time.perf_counter()
        first = self.members[0]
        enc, enc_u = first.encode_for_fit(frame, schema, unlabeled)
        if sample_weight is not None:
            enc = dataclasses.replace(enc, weights=np.asarray(sample_weight, dtype=np.float32))
        assert first.encoder is not None
        if evaluation is not None:
            rows = first.encoder.transform(evaluation)
            for member in self.members:
                member.eval_rows = rows
        return self.fit_encoded(
            first.encoder, enc, enc_u, checkpoint_dir=checkpoint_dir, resume=resume, started=start
        )

    def fit_encoded(
        self,
        encoder: TableEncoder,
        enc: EncodedTable,
        enc_u: EncodedTable | None = None,
        *,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
        started: float | None = None,
    ) -> EnsembleLearner:
        """Fit every member on rows already encoded by ``encoder`` (the image estimators encode
        their pixels themselves). ``started``: the ``time.perf_counter()`` the fit's clock starts
        at (default: now)."""
        start = time.perf_counter() if started is None else started
        self.encoder = encoder
        if self.verbose:
            print(f"semiparam: {self.describe_fit(checkpoint_dir)}", file=sys.stderr, flush=True)
        member_dirs = [
            None if checkpoint_dir is None else Path(checkpoint_dir) / f"member_{k}"
            for k in range(len(self.members))
        ]
        workers = self.concurrent_workers(checkpoint_dir)
        if self.trains_together(checkpoint_dir):
            self._fit_together(enc, enc_u)
        elif workers > 1:
            self._fit_concurrently(enc, enc_u, member_dirs, resume, workers)
        elif self.executor == "serial" or len(self.members) == 1:
            overhead = 0.0  # seconds a member's fit spends outside its training steps, as measured
            for k, (member, member_dir) in enumerate(zip(self.members, member_dirs, strict=True)):
                budget = self._member_budget(k, time.perf_counter() - start, overhead)
                if budget is not None:
                    member.train_config = member.train_config.replace(time_budget=budget)
                began = time.perf_counter()
                member.fit_encoded(self.encoder, enc, enc_u, checkpoint_dir=member_dir, resume=resume)
                assert member.history is not None
                overhead = max(overhead, time.perf_counter() - began - member.history.seconds)
        else:
            # one Ray task per member; each returns its fitted member in the saved format
            fit = _MemberFit(self.encoder, enc, enc_u, resume)
            packed = map_tasks(
                fit,
                list(zip(self.members, member_dirs, strict=True)),
                executor=self.executor,
                address=self.ray_address,
                threads=self.member_threads(checkpoint_dir),
            )
            self.members = [
                TableLearner.from_files(f, device=m.device) for f, m in zip(packed, self.members, strict=True)
            ]
            for m in self.members:
                m.encoder = self.encoder  # one encoder, as when fitted here
        self.select_weights()
        self.history = EnsembleHistory(
            [m.history for m in self.members if m.history is not None], time.perf_counter() - start
        )
        return self

    def families(self) -> dict[str, list[TableLearner]]:
        """The members by model family, in the order the families came."""
        groups: dict[str, list[TableLearner]] = {}
        for member in self.members:
            groups.setdefault(member.model_name, []).append(member)
        return groups

    def select_weights(self) -> None:
        """Weigh the model families by ensemble selection (``TrainConfig.ensemble_selection``
        rounds of Caruana et al. 2004's greedy forward selection with replacement; each member
        of a family then weighs its family's weight over the family's size), per target, on the
        validation rows that every family held out: there a family's prediction of a row is the
        mean of its members that did not train on it, so the families are compared on the same
        rows, none of which any of them trained on (the members of the later families hold out
        the first family's rows; see ``__init__``). Fewer than ``MIN_SELECTION_ROWS`` such rows,
        one family, or no rounds: every member weighs the same.

        NOTE[DIFF]: the papers train one model; the ensembles of the AutoML systems (AutoGluon's
        weighted ensemble) weigh their models this way on out-of-fold predictions."""
        for member in self.members:
            member.ensemble_weights = {}
        rounds = self.train_config.ensemble_selection
        groups = list(self.families().values())
        if rounds == 0 or len(groups) < 2:
            return
        for name in dict.fromkeys(t for m in self.members for t in m.held_out):
            entries = [[m.held_out[name] for m in group if name in m.held_out] for group in groups]
            if not all(entries):
                continue
            rows = functools.reduce(
                np.intersect1d, [np.unique(np.concatenate([e["rows"] for e in es])) for es in entries]
            )
            if len(rows) < MIN_SELECTION_ROWS:
                continue
            key = "proba" if "proba" in entries[0][0] else "mean"
            reference = {field: _rows_mean(entries[0], rows, field) for field in ("truth", "weight")}
            reference["truth"] = reference["truth"].astype(entries[0][0]["truth"].dtype)
            candidates = [_rows_mean(es, rows, key) for es in entries]
            weights = greedy_selection(candidates, functools.partial(prediction_loss, reference), rounds)
            for group, weight in zip(groups, weights, strict=True):
                for member in group:
                    member.ensemble_weights[name] = float(weight) / len(group)

    def member_weights(self, name: str) -> np.ndarray | None:
        """The members' weights in the prediction of column ``name`` (:func:`member_weights`), or
        None with ``weighted`` off."""
        return member_weights(self.members, name) if self.weighted else None

    def _member_budget(self, k: int, spent: float, overhead: float) -> float | None:
        """Seconds of training for member ``k`` when the fit has a ``time_budget``: what is left of
        the budget after ``spent`` seconds, shared among the members still to train, less each
        one's ``overhead`` outside its steps (validation split, context encoding, calibration;
        the first member's guess: 5% of the budget), so that the whole fit ends near the budget.
        Every member gets at least a tenth of an even share, to take a few steps."""
        budget = self.train_config.time_budget
        if budget is None:
            return None
        left = len(self.members) - k
        guess = overhead if k > 0 else 0.05 * budget / len(self.members)
        share = (budget - spent) / left - guess
        return max(share, 0.1 * budget / len(self.members))

    def trains_together(self, checkpoint_dir: str | Path | None = None) -> bool:
        """Whether the members train as one stacked model (``TrainConfig.members_together``, see
        ``training.members``) rather than one after another."""
        c = self.train_config
        wanted = c.members_together == "always" or (
            c.members_together == "auto" and self.device.type != "cpu"
        )
        return (
            wanted
            and len(self.members) > 1
            and self.executor == "serial"
            and checkpoint_dir is None
            and current_group().world_size == 1
            and c.shards in (None, 1)
            and c.clip_mode != "norm"  # a norm clip would mix the members' gradients
            and c.training_task == "masked"
            and not c.compile
            # images: their patch embeddings are not written for torch.func (not measured either)
            and getattr(self.model_config, "image_channels", 0) == 0
        )

    def concurrent_workers(self, checkpoint_dir: str | Path | None = None) -> int:
        """How many members train at once in threads of this process (``TrainConfig.
        concurrent_members``), each on one PyTorch thread; 1: one after another. All members at
        once up to one more than PyTorch's threads (so a core does not idle while a member's
        Python holds the interpreter lock), and never on a GPU unless asked ("always")."""
        if self.executor != "serial" or self.member_threads(checkpoint_dir) is None:
            return 1
        return min(len(self.members), torch.get_num_threads() + 1)

    def member_threads(self, checkpoint_dir: str | Path | None = None) -> int | None:
        """The PyTorch threads each member trains on: 1 where the members train at once (see
        :meth:`concurrent_workers`; Ray tasks then use 1 too, so that they compute what the
        fit in this process would), None for PyTorch's setting as it stands."""
        c = self.train_config
        wanted = c.concurrent_members == "always" or (
            c.concurrent_members == "auto" and self.device.type == "cpu" and torch.get_num_threads() > 1
        )
        if (
            not wanted
            or len(self.members) == 1
            or self.trains_together(checkpoint_dir)
            or current_group().world_size > 1
        ):
            return None
        return 1

    def _fit_concurrently(
        self,
        enc: EncodedTable,
        enc_u: EncodedTable | None,
        member_dirs: Sequence[Path | None],
        resume: bool,
        workers: int,
    ) -> None:
        """Every member's ordinary fit, ``workers`` at a time in threads, PyTorch on one thread
        (restored afterwards). A member's error is raised here once the others have stopped."""
        from concurrent.futures import ThreadPoolExecutor

        budget = self.train_config.time_budget
        if budget is not None:  # members in rounds of `workers`, each round a share of the budget
            rounds = -(-len(self.members) // workers)
            share = 0.95 * budget / rounds
            for member in self.members:
                member.train_config = member.train_config.replace(time_budget=share)
        for k, member in enumerate(self.members):
            member.bar_position = k

        def fit(k: int) -> None:
            self.members[k].fit_encoded(
                self.encoder, enc, enc_u, checkpoint_dir=member_dirs[k], resume=resume
            )

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with ThreadPoolExecutor(workers, thread_name_prefix="semiparam-member") as pool:
                futures = [pool.submit(fit, k) for k in range(len(self.members))]
                try:
                    for future in futures:
                        future.result()
                except BaseException:
                    for future in futures:  # members not yet started do not start
                        future.cancel()
                    raise
        finally:
            torch.set_num_threads(before)
            for member in self.members:
                member.bar_position = None

    def _fit_together(self, enc: EncodedTable, enc_u: EncodedTable | None) -> None:
        assert self.encoder is not None
        # one stack per model family (a stack is one architecture), the families one after the
        # other, each with its share of a time budget
        budget = self.train_config.time_budget
        for group in self.families().values():
            for member in group:  # on the whole table, so the members of a stack agree
                member.encoder = self.encoder
                member.fix_for_table(enc)
            config = group[0].train_config
            if budget is not None:  # the members of a stack train at once: the stack's share each
                config = config.replace(time_budget=budget * len(group) / len(self.members))
            plans, setups = [], []
            for member in group:
                member.train_config = config
                setup = member.training_setup(self.encoder, enc, enc_u)
                if member is not self.members[0]:  # one progress bar, the first member's
                    setup.callbacks[0] = ProgressBar(False)
                member.module, _ = seeded_build(member._build_module, member.seed, member.device)
                plans.append(
                    MemberPlan(member.module, setup.sampler, setup.generator, setup.evaluate, setup.callbacks)
                )
                setups.append(setup)
            # one dropout stream for the stack, from the ensemble's seed and the stack's first member
            dropout = torch.Generator(device=self.device).manual_seed(
                self.seed + self.members.index(group[0])
            )
            first = group[0]
            histories = train_members(plans, first.schema.layout(), first.target_mask(), config, dropout)
            for member, setup, history in zip(group, setups, histories, strict=True):
                member.history = history
                member.finish_fit(setup, enc)

    def describe_fit(self, checkpoint_dir: str | Path | None = None) -> str:
        """Where and how the members train, e.g. ``"3 npt members on cuda, bf16 autocast"``."""
        n = len(self.members)
        precision = autocast_dtype(self.device, self.train_config.mixed_precision)
        how = "float32" if precision is None else f"{str(precision).removeprefix('torch.')} autocast"
        workers = self.concurrent_workers(checkpoint_dir)
        if self.trains_together(checkpoint_dir):
            together = ", trained together"
        elif workers > 1:
            together = f", {workers} at a time in threads of one PyTorch thread each"
        else:
            together = ""
        counts: dict[str, int] = {}
        for m in self.members:
            counts[m.model_name] = counts.get(m.model_name, 0) + 1
        who = " + ".join(f"{k} {name}" for name, k in counts.items())
        return f"{who} member{'s' if n > 1 else ''} on {self.device}, {how}{together}"

    def use_executor(self, executor: str, ray_address: str | None = None) -> None:
        """Where later fits and large predictions run (``"serial"`` or ``"ray"``)."""
        check_executor(executor, ray_address)
        self.executor, self.ray_address = executor, ray_address

    def set_context(self, context: EncodedTable) -> None:
        for member in self.members:
            member.set_context(context)

    def refresh_context(self, frame: pd.DataFrame) -> None:
        """Replace every member's context with the rows of ``frame``, encoded once."""
        assert self.encoder is not None
        self.set_context(self.encoder.transform(frame))

    # -- prediction -----------------------------------------------------------------------------
    def predict_columns(
        self, frame: pd.DataFrame | EncodedTable, columns: Sequence[str], *, absent: Sequence[str] = ()
    ) -> dict[str, dict[str, np.ndarray]]:
        """As :meth:`TableLearner.predict_columns`, the members' predictions combined: averaged
        under their weights (:meth:`member_weights`; the mixture of their Gaussians)."""
        assert self.encoder is not None
        queries = frame if isinstance(frame, EncodedTable) else self.encoder.transform(frame, absent=absent)
        if self.executor == "ray" and len(queries.values) > self.predict_shard_rows:
            return _finite(self._predict_sharded(queries, columns))
        outs = [m.predict_columns(queries, columns) for m in self.members]
        if len(outs) == 1:
            return _finite(outs[0])
        result: dict[str, dict[str, np.ndarray]] = {}
        for name in columns:
            entries = [o[name] for o in outs]
            weights = self.member_weights(name)
            if "proba" in entries[0]:
                result[name] = {"proba": weighted_mean([e["proba"] for e in entries], weights)}
                continue
            means = np.stack([e["mean"] for e in entries])  # (members, n)
            mean = weighted_mean(means, weights)
            entry = {"mean": mean}
            if "std" in entries[0]:
                stds = np.stack([e["std"] for e in entries])
                second = weighted_mean(stds**2 + means**2, weights)  # the mixture's second moment
                entry["std"] = np.sqrt(np.maximum(second - mean**2, 0.0))
            result[name] = entry
        return _finite(result)

    def _predict_sharded(
        self, queries: EncodedTable, columns: Sequence[str]
    ) -> dict[str, dict[str, np.ndarray]]:
        """Query rows in shards of ``predict_shard_rows``, each a Ray task. The context is encoded
        once, here (NPT: the keys and values of the context rows in every block; SPIN: its
        inducing points), and the model with that encoding goes to Ray's object store once; every
        task reads it. Each query row attends to the context and itself only, so a row's
        prediction does not depend on the shard it falls in."""
        for member in self.members:
            member.context_state()  # encode the context now, once for every shard
        local = copy.copy(self)
        local.executor = "serial"  # the tasks predict their shard here, not on Ray again
        step = self.predict_shard_rows
        shards = [
            EncodedTable(queries.values[i : i + step], queries.missing[i : i + step])
            for i in range(0, len(queries.values), step)
        ]
        from tqdm.auto import tqdm

        verbose = self.members[0].verbose
        enabled = sys.stderr.isatty() if verbose is None else bool(verbose)
        bar = tqdm(total=len(shards), desc="predicting (shards)", leave=False, disable=not enabled)
        try:
            parts = map_tasks(
                functools.partial(_predict_shard, local, tuple(columns)),
                shards,
                executor="ray",
                address=self.ray_address,
                on_result=lambda i, _: bar.update(),
            )
        finally:
            bar.close()
        return {
            name: {key: np.concatenate([part[name][key] for part in parts]) for key in parts[0][name]}
            for name in columns
        }

    # -- persistence ----------------------------------------------------------------------------
    def save(self, path: str | Path, extra: dict[str, Any] | None = None, *, overwrite: bool = False) -> Path:
        """One member: the single model's layout (:meth:`TableLearner.save`, kind ``table``).
        Several: kind ``ensemble``, ``semiparam.json`` (estimator state, histories) and one
        directory per member (``member_0/`` ...) in the single model's layout."""
        if self.history is None or self.encoder is None:
            raise RuntimeError("nothing to save: the model is not fitted")
        if len(self.members) == 1:
            return self.members[0].save(path, extra, overwrite=overwrite)
        meta = {
            "n_members": len(self.members),
            "seed": self.seed,
            "history": self.history.to_dict(),
            "estimator": extra or {},
        }
        parts = {f"member_{k}": member.save for k, member in enumerate(self.members)}
        return save_model_dir(path, "ensemble", meta, parts=parts, overwrite=overwrite)

    @classmethod
    def load(
        cls, path: str | Path, *, device: str | torch.device | None = None
    ) -> tuple[EnsembleLearner, dict[str, Any]]:
        saved = read_model_dir(path, "table", "ensemble", "prior-fitted")
        if saved.kind == "prior-fitted":  # init="pretrained": the prior-fitted NPT
            from .pretrained import PriorFittedLearner

            return PriorFittedLearner.load(saved, device=device)  # type: ignore[return-value]
        # a single model (or one saved before ensembles existed) has the single model's layout
        if saved.kind == "table":
            learner, extra = TableLearner.load(saved, device=device)
            members, history = [learner], EnsembleHistory([learner.history])  # type: ignore[list-item]
        else:
            meta = saved.meta
            dirs = [saved.path / f"member_{k}" for k in range(meta["n_members"])]
            members = [TableLearner.load(d, device=device)[0] for d in dirs]
            extra, history = meta["estimator"], EnsembleHistory.from_dict(meta["history"])
        first = members[0]
        ens = cls.__new__(cls)
        ens.model_name = "+".join(dict.fromkeys(m.model_name for m in members))
        ens.model_config = first.model_config
        ens.train_config, ens.seed = first.train_config, first.seed
        ens.members, ens.encoder, ens.history = members, first.encoder, history
        ens.executor, ens.ray_address = "serial", None  # how it was fitted is not part of the model
        ens.weighted = True
        for m in members[1:]:
            m.encoder = first.encoder  # one encoder, as when fitted
        return ens, extra


# the fewest validation rows held out by every family that ensemble selection weighs them on
MIN_SELECTION_ROWS = 20


def member_weights(members: Sequence[TableLearner], name: str) -> np.ndarray | None:
    """The weights of ``members`` (an ensemble's, or some of them) in the prediction of column
    ``name``: their ``ensemble_weights`` renormalised to sum to 1; None where they all weigh the
    same (no selection, a column it did not weigh, weights that are all 0 or all equal)."""
    weights = np.array([m.ensemble_weights.get(name, np.nan) for m in members])
    if np.isnan(weights).any() or not weights.sum() > 0 or np.allclose(weights, weights[0]):
        return None
    return weights / weights.sum()


def weighted_mean(stack: np.ndarray | Sequence[np.ndarray], weights: np.ndarray | None) -> np.ndarray:
    """The members' mean of ``stack`` (members first) under ``weights`` (None: the plain mean)."""
    stack = np.asarray(stack)
    return stack.mean(axis=0) if weights is None else np.tensordot(weights, stack, axes=1)


def greedy_selection(
    candidates: Sequence[np.ndarray], loss: Callable[[np.ndarray], float], rounds: int
) -> np.ndarray:
    """Ensemble selection (Caruana et al. 2004): ``rounds`` times, add to the ensemble (with
    replacement) the candidate prediction whose addition gives the lowest ``loss`` of the
    ensemble's mean; the weights are the times each was added over ``rounds``. The first round
    picks the best candidate alone; a tie goes to the earlier candidate."""
    counts = np.zeros(len(candidates))
    total = np.zeros_like(candidates[0], dtype=np.float64)
    for t in range(rounds):
        losses = [loss((total + c) / (t + 1)) for c in candidates]
        best = int(np.argmin(losses))
        counts[best] += 1
        total = total + candidates[best]
    return counts / rounds


def _rows_mean(entries: Sequence[dict[str, np.ndarray]], rows: np.ndarray, field: str) -> np.ndarray:
    """``field`` of held-out entries at ``rows`` (sorted ids each entry or some hold): the mean
    over the entries that hold each row."""
    first = entries[0][field]
    total = np.zeros((len(rows), *first.shape[1:]), dtype=np.float64)
    count = np.zeros(len(rows))
    for entry in entries:
        pos = np.searchsorted(rows, entry["rows"])
        inside = pos < len(rows)
        inside[inside] = rows[pos[inside]] == entry["rows"][inside]
        np.add.at(total, pos[inside], entry[field][inside])
        np.add.at(count, pos[inside], 1.0)
    return total / count.reshape(-1, *([1] * (total.ndim - 1)))


def _finite(result: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """``result``, refused when a prediction is NaN or infinite: a confident label read off NaN
    probabilities would be a silent failure (weights altered on disk, a diverged model)."""
    for name, entry in result.items():
        for key, values in entry.items():
            bad = ~np.isfinite(values)
            if bad.any():
                rows = np.flatnonzero(bad.reshape(len(values), -1).any(axis=1))
                raise FloatingPointError(
                    f"the model's {key} for {name!r} is not finite (NaN or inf) in {len(rows)} row(s), "
                    f"first row {int(rows[0])}: its weights are damaged or it diverged in training"
                )
    return result
