"""Front doors of the neural processes: CIPNP, IPNP (inducing points) and the baselines CANP, ANP
(attentive NPs), BANP (bootstrapping attentive NP) and TNPD (transformer NP, diagonal Gaussian).

Each estimator is meta-trained over many tasks drawn from a task sampler, then conditions on the
context set of a new task at prediction time::

    sampler = GPTaskSampler(kernel="rbf", min_ctx=64, max_ctx=128, random_state=0)
    model = CIPNP(random_state=0).fit(sampler, max_steps=2000)
    pred = model.predict(context_x, context_y, target_x)         # pred.mean, pred.std (, pred.samples)
    ll = model.log_likelihood(context_x, context_y, target_x, target_y)   # per target point
    model.save("cipnp"); CIPNP.load("cipnp")                       # safetensors + JSON, no pickle

Inputs may be one task -- arrays ``(m,)`` or ``(m, x_dim)`` -- or a batch of tasks ``(B, m, x_dim)``
with optional ``context_mask (B, m)`` / ``target_mask (B, n)`` (True = real point), or lists of
per-task arrays of different lengths, which are padded here. Outputs are torch tensors on the
model's device, shaped like the input (one task: no leading B); padded targets are NaN.
``__init__`` stores parameters only; ``fit`` builds and trains the module and returns ``self``;
fitted state ends in ``_``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from .._config import ConfigError
from .._io import ModelFileError
from ..data.task_collection import TaskCollection
from ..data.tasks import TaskBatch
from ..models.anp import ANPConfig, ANPModule
from ..models.banp import BANPConfig, BANPModule
from ..models.canp import CANPConfig, CANPModule
from ..models.ipnp import CIPNPConfig, CIPNPModule, IPNPConfig, IPNPModule
from ..models.np_base import NeuralProcess, NPConfig
from ..models.tnpd import TNPDConfig, TNPDModule
from ..training.checkpoint import TrainingCheckpoint, fingerprint
from ..training.config import TrainConfig
from ..training.device import resolve_device
from ..training.np_loop import NPTrainHistory, TaskSource, fingerprint_settings, train_neural_process
from ..training.seeding import seeded_build
from ._np_inputs import ArrayLike, Tasks, check_samples, returns_numpy, validate_tasks
from .model_dir import module_tensors, read_model_dir, save_model_dir

_DEFAULT_SAMPLES = 50  # latent draws when predicting or scoring (the paper evaluates with 50)

NPModule = NeuralProcess | TNPDModule  # what the estimators build: the NP skeleton, or TNP-D


class NPPrediction(NamedTuple):
    """Predictive ``mean`` and ``std`` (``(n, y_dim)`` or ``(B, n, y_dim)``); ``samples`` are the
    decoder means under S latent draws or S bootstrap contexts (``(S, ...)``, sampled functions) for
    the stochastic models (IPNP, ANP, BANP), else None."""

    mean: Tensor
    std: Tensor
    samples: Tensor | None = None


class NeuralProcessEstimator:
    """Shared behaviour of the neural processes; use :class:`CIPNP`, :class:`IPNP`, :class:`CANP`,
    :class:`ANP`, :class:`BANP` or :class:`TNPD`.

    Parameters: ``config`` (the model's config dataclass; keyword ``options`` override its fields,
    e.g. ``d_model=64``), ``random_state`` (seeds weight initialisation, training noise and the
    latent or bootstrap draws of prediction), ``device`` (``"auto"``: CUDA, then MPS, else the
    CPU; ``"cpu"``, ``"cuda"``, ...).
    """

    _config_cls: type[NPConfig] = NPConfig
    _module_cls: type[NeuralProcess] | type[TNPDModule] = NeuralProcess
    _stochastic = False  # predictions mix random draws without a latent z (BANP's bootstrap)

    def __init__(
        self,
        config: NPConfig | None = None,
        *,
        random_state: int | None = None,
        device: str | torch.device = "auto",
        **options: Any,
    ) -> None:
        if config is not None and not isinstance(config, self._config_cls):
            raise ConfigError(
                f"{type(self).__name__} needs a {self._config_cls.__name__}, got {type(config).__name__}"
            )
        base = config if config is not None else self._config_cls()
        self.config = self._config_cls.from_dict(options, base=base) if options else base
        self.random_state = random_state
        self.device = resolve_device(device)
        self.module_: NPModule | None = None
        self.config_: NPConfig | None = None  # resolved config the module was built with
        self.train_config_: TrainConfig | None = None
        self.history_: NPTrainHistory | None = None
        self.seed_: int | None = None

    # -- building and training ----------------------------------------------------------------------
    @property
    def is_latent(self) -> bool:
        return getattr(self.config, "d_latent", None) is not None

    @property
    def is_stochastic(self) -> bool:
        """Whether predictions are a mixture over random draws (latent z, or BANP's bootstrap
        contexts) seeded by ``random_state``; then ``predict`` also returns ``samples``."""
        return self.is_latent or self._stochastic

    def _n_samples(self, n_samples: int | None) -> int:
        """The draws to predict with: ``n_samples``, else the model's own (BANP's
        ``n_bootstrap_eval``, or 50)."""
        if n_samples is None:
            n_samples = getattr(self.config_ or self.config, "n_bootstrap_eval", _DEFAULT_SAMPLES)
        check_samples(n_samples)
        return n_samples

    @property
    def n_parameters(self) -> int:
        module = self._fitted()
        return sum(p.numel() for p in module.parameters())

    def _resolve_config(self, sampler: TaskSource) -> NPConfig:
        """Fill settings left to fit time (the inducing-point count, h = floor(min_ctx / 2))."""
        config = self.config
        if isinstance(config, CIPNPConfig) and config.n_inducing is None:
            min_ctx = getattr(sampler, "min_ctx", None)
            if not isinstance(min_ctx, int) or min_ctx < 1:
                raise ConfigError(
                    f"n_inducing is None and the sampler has no usable min_ctx ({min_ctx!r}); "
                    "pass n_inducing explicitly"
                )
            config = config.replace(n_inducing=max(1, min_ctx // 2))
        return config

    def _build(self, config: NPConfig, seed: int) -> NPModule:
        # weights drawn on the CPU from the seeded global generator, which is left as it was; the
        # neural processes have no dropout, so the dropout generator is not needed
        module, _ = seeded_build(lambda: self._module_cls(config), seed, torch.device("cpu"))  # type: ignore[arg-type]
        return module.to(self.device)

    def _generator(self, seed: int) -> torch.Generator:
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed)
        return generator

    def fit(
        self,
        tasks: TaskSource | Sequence[tuple[Any, Any]] | pd.DataFrame,
        max_steps: int | None = None,
        *,
        train_config: TrainConfig | None = None,
        callback: Callable[[int, float], bool | None] | None = None,
        task_column: str = "task",
        x_columns: str | Sequence[str] | None = None,
        y_columns: str | Sequence[str] | None = None,
        validation: Sequence[TaskBatch] | None = None,
        checkpoint_dir: str | Path | None = None,
        **train_options: Any,
    ) -> NeuralProcessEstimator:
        """Meta-train on batches of ``tasks``: a task sampler (anything with ``sample(batch_size) ->
        TaskBatch``, e.g. :class:`~semiparam.neural_processes.GPTaskSampler` or a
        :class:`~semiparam.neural_processes.TaskCollection`), a list of ``(x, y)`` series (one per task), or a
        DataFrame with one task per value of ``task_column``, inputs ``x_columns`` (default: every
        other column but the last) and outputs ``y_columns`` (default: the last column); lists and
        tables become a :class:`~semiparam.neural_processes.TaskCollection` seeded by ``random_state``.
        ``max_steps`` and ``train_options`` override fields of ``train_config`` (a
        :class:`~semiparam.training.config.TrainConfig`, by default
        :meth:`TrainConfig.neural_process() <semiparam.training.config.TrainConfig.neural_process>`:
        batch_size (tasks per step), learning_rate, lr_schedule, ...; the table models' settings, such
        as the masking objective, raise). ``callback(step, loss)`` runs
        after each step (the model in training can be scored from it, e.g. with :meth:`evaluate`);
        returning True stops early. ``validation``: held-out task batches, scored every
        ``eval_every`` steps (mean target log-likelihood); the best weights are kept, and
        ``patience`` evaluations without improvement stop the fit. ``checkpoint_dir``: the whole
        training state is written there every few hundred steps or minutes, and a fit started again
        with the same directory, data, settings and seed resumes from it and ends with the weights
        an uninterrupted fit would have (the task source's random state included, for samplers with
        ``state_dict``). Returns self."""
        sampler = self._task_source(tasks, task_column, x_columns, y_columns)
        overrides = dict(train_options)
        if max_steps is not None:
            overrides["max_steps"] = max_steps
        config = TrainConfig.from_dict(overrides, base=train_config or TrainConfig.neural_process())
        config.check_for("neural_process")
        seed = (
            int(self.random_state)
            if self.random_state is not None
            else int(torch.randint(0, 2**31 - 1, ()).item())
        )
        model_config = self._resolve_config(sampler)
        module = self._build(model_config, seed)

        def draw_batch() -> tuple[Tensor | None, ...]:
            batch = sampler.sample(config.batch_size)
            if not isinstance(batch, TaskBatch):
                raise TypeError(f"sampler.sample() must return a TaskBatch, got {type(batch).__name__}")
            tasks = self._validate(
                batch.context_x,
                batch.context_y,
                batch.target_x,
                batch.target_y,
                batch.context_mask,
                batch.target_mask,
            )
            return (
                tasks.context_x,
                tasks.context_y,
                tasks.context_mask,
                tasks.target_x,
                tasks.target_y,
                tasks.target_mask,
            )

        # fitted state is set before training, so a callback can score the model in progress
        self.module_, self.config_, self.train_config_, self.seed_ = module, model_config, config, seed
        self.history_ = None
        evaluate = None
        if validation is not None:
            validation = list(validation)
            if not validation:
                raise ValueError("validation is empty; pass at least one TaskBatch, or None")
            evaluate = lambda: -self.evaluate(validation)  # noqa: E731 - the model's own draws
        checkpoint, resume = None, None
        if checkpoint_dir is not None:
            checkpoint = TrainingCheckpoint(
                checkpoint_dir,
                fingerprint(
                    type(self).__name__,
                    model_config.fingerprint_dict(),
                    fingerprint_settings(config),
                    seed,
                    getattr(sampler, "settings", lambda: repr(sampler))(),
                    _batches_digest(validation or []),
                ),
                every_steps=config.checkpoint_every_steps,
                every_seconds=config.checkpoint_every_seconds,
            )
            resume = checkpoint.read()
        try:
            self.history_ = train_neural_process(
                module,
                draw_batch,
                config,
                generator=self._generator(seed + 1),
                callback=callback,
                evaluate=evaluate,
                checkpoint=checkpoint,
                resume=resume,
                task_source=sampler,
            )
        except BaseException:
            self.module_ = None  # a failed fit leaves no half-trained model behind
            raise
        return self

    def _task_source(
        self,
        tasks: Any,
        task_column: str,
        x_columns: str | Sequence[str] | None,
        y_columns: str | Sequence[str] | None,
    ) -> TaskSource:
        if isinstance(tasks, pd.DataFrame):  # before the sampler test: a DataFrame has .sample too
            if task_column not in tasks.columns:
                raise KeyError(
                    f"the table has no task column {task_column!r} (columns: {list(tasks.columns)}); "
                    "name it with task_column="
                )
            rest = [c for c in tasks.columns if c != task_column]
            y_cols = y_columns if y_columns is not None else rest[-1:]
            y_list = [y_cols] if isinstance(y_cols, str) else list(y_cols)
            x_cols = x_columns if x_columns is not None else [c for c in rest if c not in y_list]
            source = TaskCollection.from_frame(
                tasks, task=task_column, x=x_cols, y=y_list, random_state=self.random_state
            )
        elif isinstance(tasks, (list, tuple)):
            source = TaskCollection(tasks, random_state=self.random_state)
        elif callable(getattr(tasks, "sample", None)):
            source = tasks
        else:
            raise TypeError(
                "tasks must be a task sampler (with sample(batch_size)), a list of (x, y) series or a "
                f"DataFrame with a task column, got {type(tasks).__name__}"
            )
        config = self.config
        for name in ("x_dim", "y_dim"):
            have = getattr(source, name, None)
            if isinstance(have, int) and have != getattr(config, name):
                raise ConfigError(
                    f"the tasks have {name} = {have} but the model has {name} = {getattr(config, name)}; "
                    f"pass {name}={have}"
                )
        return source

    # -- prediction ---------------------------------------------------------------------------------
    def _fitted(self) -> NPModule:
        if self.module_ is None:
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet; call fit() or load() first")
        return self.module_

    @torch.no_grad()
    def predict(
        self,
        context_x: ArrayLike,
        context_y: ArrayLike,
        target_x: ArrayLike,
        *,
        context_mask: ArrayLike | None = None,
        target_mask: ArrayLike | None = None,
        n_samples: int | None = None,
        random_state: int = 0,
    ) -> NPPrediction:
        """Predictive mean and std at ``target_x`` given the context (and, for the stochastic
        models, ``n_samples`` sampled functions: latent draws, or BANP's bootstrap contexts; None =
        the model's default, 50). ``random_state`` seeds those draws. numpy arrays (or lists) in,
        numpy arrays out; torch tensors in, tensors on the model's device out."""
        module = self._fitted()
        tasks = self._validate(context_x, context_y, target_x, None, context_mask, target_mask)
        n_draws = self._n_samples(n_samples)
        mean, std, samples = module.predict(
            tasks.context_x,
            tasks.context_y,
            tasks.context_mask,
            tasks.target_x,
            n_samples=n_draws,
            generator=self._generator(random_state),
        )
        if tasks.target_mask is not None:
            pad = ~tasks.target_mask[..., None]  # (B, n, 1)
            mean, std = mean.masked_fill(pad, math.nan), std.masked_fill(pad, math.nan)
            samples = None if samples is None else samples.masked_fill(pad[None], math.nan)
        if tasks.single:
            mean, std = mean[0], std[0]
            samples = None if samples is None else samples[:, 0]
        if returns_numpy(context_x, context_y, target_x):
            return NPPrediction(_numpy(mean), _numpy(std), None if samples is None else _numpy(samples))
        return NPPrediction(mean, std, samples)

    @torch.no_grad()
    def log_likelihood(
        self,
        context_x: ArrayLike,
        context_y: ArrayLike,
        target_x: ArrayLike,
        target_y: ArrayLike,
        *,
        context_mask: ArrayLike | None = None,
        target_mask: ArrayLike | None = None,
        n_samples: int | None = None,
        random_state: int = 0,
        per_point: bool = False,
    ) -> Any:
        """Mean log p(y_t | x_t, context) over each task's target points: a float for one task, a
        ``(B,)`` array for a batch. ``per_point``: every target point's instead, ``(n,)`` for one
        task, ``(B, n)`` for a batch, NaN at padded targets. Latent models average the likelihood
        over ``n_samples`` draws of z from p(z | context), BANP over ``n_samples`` bootstrap
        contexts (logmeanexp, as the papers evaluate; None = the model's default, 50).
        numpy (or lists) in, numpy out; torch tensors in, tensors on the model's device out."""
        module = self._fitted()
        tasks = self._validate(context_x, context_y, target_x, target_y, context_mask, target_mask)
        n_draws = self._n_samples(n_samples)
        assert tasks.target_y is not None
        ll = module.target_log_likelihood(
            tasks.context_x,
            tasks.context_y,
            tasks.context_mask,
            tasks.target_x,
            tasks.target_y,
            n_samples=n_draws,
            generator=self._generator(random_state),
        )  # (B, n)
        if tasks.target_mask is not None:
            ll = ll.masked_fill(~tasks.target_mask, math.nan)
        if not per_point:  # (B,): the mean over real targets (a NaN of the model's stays visible)
            mask = tasks.target_mask
            ll = ll.mean(dim=1) if mask is None else torch.where(mask, ll, 0.0).sum(1) / mask.sum(1)
        ll = ll[0] if tasks.single else ll
        if returns_numpy(context_x, context_y, target_x, target_y):
            return float(ll) if ll.ndim == 0 else _numpy(ll)
        return ll

    def evaluate(
        self, batches: Iterable[TaskBatch], *, n_samples: int | None = None, random_state: int = 0
    ) -> float:
        """Mean target log-likelihood over ``batches``: per batch the mean over its real target
        points, then the mean over batches (the paper's ``tar_ll``)."""
        scores = []
        for i, batch in enumerate(batches):
            ll = self.log_likelihood(
                batch.context_x,
                batch.context_y,
                batch.target_x,
                batch.target_y,
                context_mask=batch.context_mask,
                target_mask=batch.target_mask,
                n_samples=n_samples,
                random_state=random_state + i,
                per_point=True,
            )
            mask = batch.target_mask.to(ll.device)
            scores.append(float(ll[mask].mean()))  # a NaN from the model itself stays visible
        if not scores:
            raise ValueError("evaluate() got no batches")
        return float(np.mean(scores))

    def _validate(
        self,
        context_x: ArrayLike,
        context_y: ArrayLike,
        target_x: ArrayLike,
        target_y: ArrayLike | None,
        context_mask: ArrayLike | None,
        target_mask: ArrayLike | None,
    ) -> Tasks:
        config = self.config_ or self.config
        return validate_tasks(
            context_x,
            context_y,
            target_x,
            target_y,
            context_mask,
            target_mask,
            x_dim=config.x_dim,
            y_dim=config.y_dim,
            device=self.device,
        )

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """A model directory of kind ``neural-process`` (``estimators.model_dir``):
        ``neural_process.json`` (model name, configs, seed, history) and ``model.safetensors``
        (weights). No pickle. Written aside and renamed into place; an existing ``path`` raises
        :class:`FileExistsError` unless ``overwrite``."""
        module = self._fitted()
        assert self.config_ is not None
        meta = {
            "model": type(self).__name__,
            "config": self.config_.to_dict(),
            "train_config": None if self.train_config_ is None else self.train_config_.to_dict(),
            "random_state": self.random_state,
            "seed": self.seed_,
            "history": None if self.history_ is None else self.history_.to_dict(),
        }
        tensors = {"model.safetensors": module_tensors(module)}
        return save_model_dir(path, "neural-process", meta, tensors=tensors, overwrite=overwrite)

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device = "auto") -> NeuralProcessEstimator:
        """Read a model written by :meth:`save`. Called on this base class it returns whichever
        model was saved; on a subclass the saved model must be of that class."""
        saved = read_model_dir(path, "neural-process")
        meta = saved.meta
        model = NEURAL_PROCESSES.get(meta.get("model", ""))
        if model is None:
            raise ValueError(
                f"unknown model {meta.get('model')!r} in {saved.meta_file}; known: {sorted(NEURAL_PROCESSES)}"
            )
        if cls is not NeuralProcessEstimator and model is not cls:
            raise ValueError(f"{path} holds a {model.__name__}, not a {cls.__name__}")
        # saved before the read-out choice existed (the paper's form), before readback_ff (a
        # read-back with the MAB's 4x feed-forward), or before summary_encoder
        missing = {"readout": "inducing", "readback_ff": 4, "summary_encoder": "separate"}
        if not issubclass(model._config_cls, CIPNPConfig):
            missing = {}
        config = saved.config(model._config_cls, "config", missing=missing)
        estimator = model(config, random_state=meta.get("random_state"), device=device)
        module = saved.load_weights(estimator._build(config, seed=0), device=estimator.device).eval()
        estimator.module_, estimator.config_, estimator.seed_ = module, config, meta.get("seed")
        train_config = meta.get("train_config")
        if train_config is not None:
            if not isinstance(train_config, dict):
                raise ModelFileError(
                    f"{saved.meta_file}: 'train_config' is not a mapping of TrainConfig settings"
                )
            # saved before the neural processes trained on TrainConfig: the settings of their own config
            # (clip_norm, checkpoint_every, "cosine"), through the alias map, over its defaults
            estimator.train_config_ = TrainConfig.from_dict(
                train_config, base=TrainConfig.neural_process(), warn=False
            )
        if meta.get("history") is not None:
            estimator.history_ = NPTrainHistory(**meta["history"])
        return estimator

    def __repr__(self) -> str:
        fitted = "fitted" if self.module_ is not None else "not fitted"
        return (
            f"{type(self).__name__}({self.config!r}, random_state={self.random_state},"
            f" device='{self.device}', {fitted})"
        )


class CIPNP(NeuralProcessEstimator):
    """Conditional Inducing Point Neural Process: SPIN (XABD) encoder over the context, targets
    cross-attend to h inducing points, Gaussian head (sigma = 0.1 + 0.9 softplus). Options: the
    fields of :class:`~semiparam.models.ipnp.CIPNPConfig` (``n_inducing=None`` -> min_ctx // 2)."""

    _config_cls = CIPNPConfig
    _module_cls = CIPNPModule


class IPNP(NeuralProcessEstimator):
    """Inducing Point Neural Process with a global latent z, trained by the ELBO. Options: the fields
    of :class:`~semiparam.models.ipnp.IPNPConfig`."""

    _config_cls = IPNPConfig
    _module_cls = IPNPModule


class CANP(NeuralProcessEstimator):
    """Conditional Attentive Neural Process (Kim et al. 2019): self-attention over the context.
    Options: the fields of :class:`~semiparam.models.canp.CANPConfig`."""

    _config_cls = CANPConfig
    _module_cls = CANPModule


class ANP(NeuralProcessEstimator):
    """Attentive Neural Process (Kim et al. 2019) with a global latent, trained by the ELBO. Options:
    the fields of :class:`~semiparam.models.anp.ANPConfig`."""

    _config_cls = ANPConfig
    _module_cls = ANPModule


class BANP(NeuralProcessEstimator):
    """Bootstrapping Attentive Neural Process (Lee et al. 2020): a CANP whose predictions mix
    ``n_bootstrap_eval`` residual-bootstrap contexts (resampled from the context, seeded by
    ``random_state``), trained by -(base + bootstrap) log-likelihood with ``n_bootstrap_train``
    bootstrap contexts per task and step. Options: the fields of
    :class:`~semiparam.models.banp.BANPConfig`."""

    _config_cls = BANPConfig
    _module_cls = BANPModule
    _stochastic = True


class TNPD(NeuralProcessEstimator):
    """Transformer Neural Process, diagonal Gaussian (Nguyen & Grover 2022): context and target
    points are tokens of a masked transformer in which every token attends to the context only;
    trained by the target log-likelihood. Options: the fields of
    :class:`~semiparam.models.tnpd.TNPDConfig` (default width 64, 6 layers, 4 heads)."""

    _config_cls = TNPDConfig
    _module_cls = TNPDModule


# The neural processes by name: the one registry of them (saved models name theirs; the command
# line's --model is the name in lower case)
NEURAL_PROCESSES: dict[str, type[NeuralProcessEstimator]] = {
    c.__name__: c for c in (CIPNP, IPNP, CANP, ANP, BANP, TNPD)
}


def _batches_digest(batches: Sequence[TaskBatch]) -> str:
    """A fingerprint of task batches' contents (every tensor's shape, dtype and values)."""
    fields = ("context_x", "context_y", "target_x", "target_y", "context_mask", "target_mask")
    arrays = [getattr(b, f) for b in batches for f in fields]
    return fingerprint(*[None if t is None else _numpy(t) for t in arrays])


def _numpy(t: Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def load_neural_process(path: str | Path, *, device: str | torch.device = "auto") -> NeuralProcessEstimator:
    """Load any saved neural process (CIPNP, IPNP, CANP, ANP, BANP or TNPD)."""
    return NeuralProcessEstimator.load(path, device=device)
