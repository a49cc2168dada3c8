"""Hyperparameter search for the table models: Optuna's TPE, serially or as Ray Tune trials.

``tune(frame, targets)`` fits the model on 80% of the labelled rows for each trial and scores it on
the other 20% (log loss for a categorical target, RMSE over the training rows' standard deviation
for a continuous one, averaged over targets; lower is better). The first trial is the current
defaults, so the result is never worse than them on that split. With ``out=DIR`` it writes

- ``trials.csv``: one row per trial (its number, state, score, seconds and every setting),
- ``best.toml``: the best trial's settings as ``[model]`` and ``[train]`` tables, the file that
  ``semiparam fit --config`` (and :func:`load_config`) takes,
- ``tune.json``: what was searched, on which data, with which code, and the best trial,
- ``study.db`` (serial executor): the Optuna study, so that ``resume=True`` continues a killed
  search where it stopped.

Each trial fits ``n_estimators`` members (default 1: single-model settings, a third of the cost of
the default ensemble; the defaults' ensemble then applies on top of the chosen settings).

``executor="ray"`` runs the trials as Ray Tune trials with Optuna as the search algorithm
(``pip install 'semiparam[distributed]'``), on the local machine (``ray.init()``) or on the cluster
at ``ray_address``. With ``max_concurrent=1`` and the same seeds the trials, their settings and
their scores equal the serial executor's (each trial's fit is seeded and runs on ``threads``
threads); with more at once, TPE proposes some trials before earlier ones have reported, so the
search differs (the trials stay seeded and reproducible one by one).
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from ._config import ConfigError, read_settings_file
from ._io import atomic_file
from .parallel import EXECUTORS, resolve_executor  # where trials run: serial (Optuna) or Ray (Ray Tune)

try:  # the search runs on Optuna: pip install 'semiparam[tune]'
    import optuna

    _BaseSampler = optuna.samplers.BaseSampler
except ImportError:  # pragma: no cover - tune() says what to install
    optuna = None
    _BaseSampler = object

# name -> (kind, choices | (low, high)); "model.<key>" is a field of the model's config
# (NPTConfig / SPINConfig), "train.<key>" one of TrainConfig. Kinds: "categorical", "float",
# "log_float", "int".
_COMMON_SPACE: dict[str, tuple[str, Any]] = {
    "model.d_embedding": ("categorical", (8, 16, 32)),
    "model.dropout": ("float", (0.0, 0.3)),
    "model.n_frequencies": ("categorical", (0, 16)),
    "model.frequency_scale": ("log_float", (0.1, 3.0)),
    "model.n_bins": ("categorical", (0, 16)),
    "train.learning_rate": ("log_float", (2e-3, 3e-2)),
    "train.p_feature": ("float", (0.0, 0.3)),
    "train.patience": ("categorical", (4, 8, 16)),
    "train.tradeoff_start": ("float", (0.0, 1.0)),
    "train.tradeoff_steps": ("categorical", (100, 300, 1000)),
    "train.feature_transform": ("categorical", ("standard", "quantile")),
}
SEARCH_SPACES: dict[str, dict[str, tuple[str, Any]]] = {
    "npt": {**_COMMON_SPACE, "model.n_blocks": ("categorical", (2, 4))},
    "spin": {
        **_COMMON_SPACE,
        "model.n_blocks": ("categorical", (1, 2, 3)),
        "train.p_target": ("float", (0.1, 0.9)),
    },
}
KINDS = ("categorical", "float", "log_float", "int")
FILES = ("trials.csv", "best.toml", "tune.json")


def default_search_space(model: str = "npt") -> dict[str, tuple[str, Any]]:
    """The search space :func:`tune` uses for ``model`` unless given one (a copy to edit)."""
    if model not in SEARCH_SPACES:
        raise ConfigError(f"no search space for model {model!r}; choose from {sorted(SEARCH_SPACES)}")
    return dict(SEARCH_SPACES[model])


def _resolved_configs(
    model: str,
    preset: str,
    model_options: Mapping[str, Any] | None = None,
    train_options: Mapping[str, Any] | None = None,
) -> tuple[Any, Any]:
    """The model and training configs an estimator with these arguments resolves."""
    from .estimators.tabular import TablePredictor

    estimator = TablePredictor(
        targets=["y"],
        model=model,
        preset=preset,
        model_options=dict(model_options) if model_options else None,
        train_options=dict(train_options) if train_options else None,
    )
    return estimator.resolved_configs()


def check_search_space(space: Mapping[str, tuple[str, Any]], model: str, preset: str = "cpu") -> None:
    """Raise :class:`ConfigError` naming the first key that the model's configs lack, an unknown
    kind, an empty choice list or a range whose low end is not below its high end."""
    model_config, train_config = _resolved_configs(model, preset)
    if not space:
        raise ConfigError("the search space is empty")
    for name, spec in space.items():
        section, _, key = name.partition(".")
        config = {"model": model_config, "train": train_config}.get(section)
        if config is None or not key:
            raise ConfigError(f"search key {name!r} must be model.<key> or train.<key>")
        if not hasattr(config, key):
            raise ConfigError(f"search key {name!r}: {type(config).__name__} has no field {key!r}")
        if not (isinstance(spec, (tuple, list)) and len(spec) == 2 and spec[0] in KINDS):
            raise ConfigError(f"search key {name!r}: give (kind, values) with kind one of {KINDS}")
        kind, values = spec
        if kind == "categorical":
            if len(values) == 0:
                raise ConfigError(f"search key {name!r}: no choices")
        else:
            low, high = values
            if not low < high or (kind == "log_float" and low <= 0):
                raise ConfigError(f"search key {name!r}: the range ({low}, {high}) is empty or not positive")


def default_settings(
    space: Mapping[str, tuple[str, Any]],
    model: str,
    preset: str = "cpu",
    model_options: Mapping[str, Any] | None = None,
    train_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The value of every key of ``space`` that the estimator resolves from ``preset`` and the
    given options (none given: the current defaults)."""
    model_config, train_config = _resolved_configs(model, preset, model_options, train_options)
    configs = {"model": model_config, "train": train_config}
    out = {}
    for name in space:
        section, _, key = name.partition(".")
        out[name] = getattr(configs[section], key)
    return out


def _in_space(value: Any, spec: tuple[str, Any]) -> bool:
    kind, values = spec
    if kind == "categorical":
        return value in tuple(values)
    return values[0] <= value <= values[1]


def optuna_distributions(space: Mapping[str, tuple[str, Any]]) -> dict[str, Any]:
    """The space as Optuna distributions (what Ray Tune's OptunaSearch takes)."""
    od = optuna.distributions

    out: dict[str, Any] = {}
    for name, (kind, values) in space.items():
        if kind == "categorical":
            out[name] = od.CategoricalDistribution(list(values))
        elif kind == "int":
            out[name] = od.IntDistribution(int(values[0]), int(values[1]))
        else:
            out[name] = od.FloatDistribution(float(values[0]), float(values[1]), log=kind == "log_float")
    return out


def split_settings(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``{"model.d_embedding": 8, "train.learning_rate": 0.01}`` -> (model_options, train_options)."""
    model: dict[str, Any] = {}
    train: dict[str, Any] = {}
    for name, value in params.items():
        section, _, key = name.partition(".")
        (model if section == "model" else train)[key] = value
    return model, train


def to_toml(params: Mapping[str, Any], comment: str = "") -> str:
    """Settings as TOML ``[model]`` and ``[train]`` tables (the ``semiparam fit --config`` file)."""
    model, train = split_settings(params)
    lines = [f"# {line}" for line in comment.splitlines()]
    for title, table in (("model", model), ("train", train)):
        lines += ["", f"[{title}]"] if lines else [f"[{title}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in sorted(table.items())]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise ConfigError(f"cannot write the non-finite value {value} to TOML")
        return repr(float(value))
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    raise ConfigError(f"cannot write {value!r} ({type(value).__name__}) to TOML")


# -- one trial ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Problem:
    """What every trial fits and scores: the data split once, the fixed estimator arguments."""

    train: pd.DataFrame
    valid: pd.DataFrame
    targets: tuple[str, ...]
    model: str
    preset: str
    n_estimators: int
    categorical_features: tuple[str, ...] | None
    seed: int
    device: str
    threads: int | None
    model_options: dict[str, Any] = field(default_factory=dict)  # every trial's, under its own
    train_options: dict[str, Any] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)  # training std of continuous targets

    def score(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Fit with ``params`` on the training part, score the held-out part."""
        from .estimators.tabular import TablePredictor

        searched_model, searched_train = split_settings(params)
        model_options = {**self.model_options, **searched_model}
        train_options = {**self.train_options, **searched_train}
        estimator = TablePredictor(
            targets=list(self.targets),
            model=self.model,
            preset=self.preset,
            n_estimators=self.n_estimators,
            categorical_features=list(self.categorical_features) if self.categorical_features else None,
            model_options=model_options or None,
            train_options=train_options or None,
            device=self.device,
            random_state=self.seed,
            verbose=False,
        )
        start = time.perf_counter()
        with _torch_threads(self.threads):
            estimator.fit(self.train)
            predictions = estimator.predict(self.valid)
        seconds = time.perf_counter() - start
        per_target = {t: self._target_score(t, predictions) for t in self.targets}
        history = estimator.learner_.history
        return {
            "score": float(np.mean(list(per_target.values()))),
            "per_target": per_target,
            "seconds": seconds,
            "best_step": history.best_step,
            "stop_reason": history.stop_reason,
        }

    def _target_score(self, target: str, predictions: pd.DataFrame) -> float:
        truth = self.valid[target]
        if target in self.scales:  # continuous: RMSE in training standard deviations
            err = predictions[target].to_numpy(float) - truth.to_numpy(float)
            return float(np.sqrt(np.mean(err**2)) / self.scales[target])
        prefix = f"{target}_proba_"
        columns = [c for c in predictions.columns if c.startswith(prefix)]
        classes = [c[len(prefix) :] for c in columns]
        proba = np.clip(predictions[columns].to_numpy(float), 1e-12, 1.0)
        index = {c: k for k, c in enumerate(classes)}
        labels = truth.astype(str).map(index)
        # a held-out class the model never saw gets the floor probability
        p = np.where(labels.notna(), proba[np.arange(len(truth)), labels.fillna(0).astype(int)], 1e-12)
        return float(-np.mean(np.log(p)))


class _torch_threads:
    """Run a block on ``n`` torch threads (None: leave the setting alone)."""

    def __init__(self, n: int | None) -> None:
        self.n = n

    def __enter__(self) -> None:
        import torch

        self.before = torch.get_num_threads()
        if self.n is not None:
            torch.set_num_threads(self.n)

    def __exit__(self, *exc: Any) -> None:
        import torch

        torch.set_num_threads(self.before)


def _make_problem(
    frame: pd.DataFrame,
    targets: Sequence[str],
    *,
    model: str,
    preset: str,
    n_estimators: int,
    categorical_features: Sequence[str] | None,
    validation_fraction: float,
    random_state: int,
    device: str,
    threads: int | None,
    model_options: Mapping[str, Any] | None,
    train_options: Mapping[str, Any] | None,
) -> _Problem:
    from sklearn.model_selection import train_test_split

    from .data.table import DataValidationError, infer_schema

    if not isinstance(frame, pd.DataFrame):
        raise TypeError("tune takes a DataFrame that holds the feature and the target columns")
    frame = frame.rename(columns=str)
    targets = [str(t) for t in ([targets] if isinstance(targets, str) else targets)]
    if not targets:
        raise DataValidationError("give at least one target column")
    missing = [t for t in targets if t not in frame.columns]
    if missing:
        raise DataValidationError(
            f"target column(s) {missing} not in the table; it has {list(frame.columns)}"
        )
    if frame[targets].isna().any().any():
        bad = [t for t in targets if frame[t].isna().any()]
        raise DataValidationError(f"target column(s) {bad} have missing values; drop those rows first")
    if not 0.0 < validation_fraction < 1.0:
        raise ConfigError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    categorical = list(categorical_features) if categorical_features else None
    schema = infer_schema(
        frame[targets], categorical=[t for t in targets if categorical and t in categorical]
    )
    kinds = {c.name: c.kind for c in schema.columns}
    stratify = None
    first_categorical = next((t for t in targets if kinds[t] != "continuous"), None)
    if first_categorical is not None:
        counts = frame[first_categorical].astype(str).value_counts()
        # stratify when every class can be on both sides (scikit-learn raises otherwise)
        if counts.min() >= 2 and round(validation_fraction * len(frame)) >= len(counts):
            stratify = frame[first_categorical].astype(str)
    train, valid = train_test_split(
        frame, test_size=validation_fraction, random_state=random_state, stratify=stratify
    )
    scales = {}
    for t in targets:
        if kinds[t] == "continuous":
            std = float(train[t].astype(float).std())
            scales[t] = std if std > 0 else 1.0
    return _Problem(
        train=train.reset_index(drop=True),
        valid=valid.reset_index(drop=True),
        targets=tuple(targets),
        model=model,
        preset=preset,
        n_estimators=n_estimators,
        categorical_features=tuple(categorical) if categorical else None,
        seed=random_state,
        device=device,
        threads=threads,
        model_options=dict(model_options or {}),
        train_options=dict(train_options or {}),
        scales=scales,
    )


# -- the search -----------------------------------------------------------------------------------


class TrialSeededTPE(_BaseSampler):  # type: ignore[misc,valid-type]
    """Optuna's TPE sampler reseeded for every trial from ``(seed, trial number)``.

    A plain seeded sampler keeps its random state in memory: a search resumed from its database,
    or run by Ray Tune's OptunaSearch, would draw other settings than an uninterrupted serial one.
    Here trial ``k``'s draws depend on the seed, ``k`` and the trials before it only."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._per_trial: dict[int, Any] = {}

    def _inner(self, trial: Any) -> Any:
        number = trial.number
        if number not in self._per_trial:
            state = np.random.SeedSequence([self.seed, number]).generate_state(1)[0]
            self._per_trial = {number: optuna.samplers.TPESampler(seed=int(state))}
        return self._per_trial[number]

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return self._inner(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return self._inner(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        return self._inner(trial).sample_independent(study, trial, name, distribution)

    def before_trial(self, study: Any, trial: Any) -> None:
        self._inner(trial).before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._inner(trial).after_trial(study, trial, state, values)


@dataclass
class TuneResult:
    """What :func:`tune` found: ``best_params`` (search key -> value), ``best_score`` (lower is
    better), ``defaults_score`` (the first trial: the current defaults) and ``trials`` (one row per
    trial). ``model_options`` / ``train_options`` are ``best_params`` as estimator arguments."""

    best_params: dict[str, Any]
    best_score: float
    defaults_score: float | None
    trials: pd.DataFrame
    out: Path | None = None
    fixed: dict[str, Any] = field(default_factory=dict)  # the options every trial had ("model.x")

    @property
    def model_options(self) -> dict[str, Any]:
        """The best trial's model options (the fixed ones included), for the estimator."""
        return split_settings({**self.fixed, **self.best_params})[0]

    @property
    def train_options(self) -> dict[str, Any]:
        """The best trial's training options (the fixed ones included), for the estimator."""
        return split_settings({**self.fixed, **self.best_params})[1]

    def to_toml(self) -> str:
        """The best trial's settings (the fixed ones included) as ``semiparam fit --config`` reads
        them."""
        return to_toml(
            {**self.fixed, **self.best_params}, comment=f"semiparam tune: best score {self.best_score:.6g}"
        )


def tune(
    frame: pd.DataFrame,
    targets: str | Sequence[str],
    *,
    model: str = "npt",
    preset: str = "cpu",
    n_trials: int = 20,
    timeout: float | None = None,
    search_space: Mapping[str, tuple[str, Any]] | None = None,
    n_estimators: int = 1,
    model_options: Mapping[str, Any] | None = None,
    train_options: Mapping[str, Any] | None = None,
    categorical_features: Sequence[str] | None = None,
    validation_fraction: float = 0.2,
    random_state: int = 0,
    device: str = "auto",
    threads: int | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    executor: Literal["serial", "ray"] = "serial",
    ray_address: str | None = None,
    max_concurrent: int = 1,
    cpus_per_trial: float | None = None,
    verbose: bool = False,
    backend: Literal["serial", "ray"] | None = None,
) -> TuneResult:
    """Search the settings of ``model`` for the table ``frame`` with target column(s) ``targets``.

    ``n_trials`` counts the defaults' trial; ``timeout`` (seconds) ends the search early (a
    running trial finishes). ``search_space``: name -> (kind, values) as
    :func:`default_search_space` returns. ``model_options`` / ``train_options``: settings every
    trial starts from (as the estimators take them; a searched key overrides its entry), e.g. a
    step ceiling. ``threads``: torch threads per trial (None: as set;
    with Ray, ``cpus_per_trial`` rounded down, at least 1). ``out``: the directory for the files
    the module docstring lists; an existing one is refused unless ``resume`` (continue its study,
    serial executor) or ``overwrite``. ``verbose``: a line on standard error as each trial of the
    serial executor ends. See the module docstring for the executors. ``backend``: the old name
    of ``executor`` (deprecated).
    """
    executor = resolve_executor(executor, backend)
    if optuna is None:
        raise ImportError("semiparam tune needs Optuna: pip install 'semiparam[tune]'")
    if executor not in EXECUTORS:
        raise ConfigError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if n_trials < 1:
        raise ConfigError(f"n_trials must be >= 1, got {n_trials}")
    if n_estimators < 1:
        raise ConfigError(f"n_estimators must be >= 1, got {n_estimators}")
    if max_concurrent < 1:
        raise ConfigError(f"max_concurrent must be >= 1, got {max_concurrent}")
    if resume and executor != "serial":
        raise ConfigError("resume continues an Optuna study on disk: the serial executor only")
    space = dict(search_space) if search_space is not None else default_search_space(model)
    check_search_space(space, model, preset)
    defaults = default_settings(space, model, preset, model_options, train_options)
    off_space = [k for k, v in defaults.items() if not _in_space(v, space[k])]
    out_dir = _prepare_out(out, resume=resume, overwrite=overwrite)
    if executor == "ray":
        per_trial = cpus_per_trial if cpus_per_trial is not None else float(threads or 1)
        threads = threads if threads is not None else max(1, int(per_trial))
    problem = _make_problem(
        frame,
        targets,
        model=model,
        preset=preset,
        n_estimators=n_estimators,
        categorical_features=categorical_features,
        validation_fraction=validation_fraction,
        random_state=random_state,
        device=device,
        threads=threads,
        model_options=model_options,
        train_options=train_options,
    )
    # the defaults go first (when the space can express them); Optuna samples the rest
    first = None if off_space else defaults
    start = time.perf_counter()
    search = _Search(problem, space, first, n_trials, timeout, random_state, verbose)
    if executor == "serial":
        rows = _run_serial(search, out_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="semiparam-ray-") as scratch:
            # Ray Tune's experiment files: in OUT/ray when there is an OUT, else thrown away
            storage = out_dir / "ray" if out_dir is not None else Path(scratch)
            rows = _run_ray(search, ray_address, max_concurrent, per_trial, storage)
    trials = pd.DataFrame(rows).sort_values("trial").reset_index(drop=True)
    done = trials[trials["state"] == "COMPLETE"]
    if done.empty:
        raise RuntimeError(f"no trial finished; the first error: {trials['error'].dropna().iloc[0]}")
    best = done.loc[done["score"].idxmin()]
    best_params = {k: _plain(best[f"params.{k}"]) for k in space}
    defaults_row = done[done["defaults"]] if "defaults" in done else done.iloc[:0]
    result = TuneResult(
        best_params=best_params,
        best_score=float(best["score"]),
        defaults_score=float(defaults_row["score"].iloc[0]) if len(defaults_row) else None,
        trials=trials,
        out=out_dir,
        fixed={
            **{f"model.{k}": v for k, v in (model_options or {}).items()},
            **{f"train.{k}": v for k, v in (train_options or {}).items()},
        },
    )
    if out_dir is not None:
        _write_outputs(
            out_dir,
            result,
            problem,
            space,
            off_space,
            {
                "model": model,
                "preset": preset,
                "n_trials": n_trials,
                "timeout": timeout,
                "n_estimators": n_estimators,
                "model_options": dict(model_options or {}),
                "train_options": dict(train_options or {}),
                "validation_fraction": validation_fraction,
                "random_state": random_state,
                "device": device,
                "threads": threads,
                "executor": executor,
                "max_concurrent": max_concurrent,
                "seconds": time.perf_counter() - start,
            },
        )
    return result


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def _prepare_out(out: str | Path | None, *, resume: bool, overwrite: bool) -> Path | None:
    if out is None:
        if resume:
            raise ConfigError("resume needs out: the directory of the search to continue")
        return None
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a directory")
    if resume:
        if not (path / "study.db").exists():
            raise FileNotFoundError(f"{path}: no search to resume (study.db is absent)")
        return path
    if path.exists() and any(path.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{path} already exists and is not empty; pass overwrite=True (--force)")
        for name in (*FILES, "study.db"):
            (path / name).unlink(missing_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _trial_row(
    number: int, params: Mapping[str, Any], outcome: Mapping[str, Any] | None, **extra: Any
) -> dict:
    row: dict[str, Any] = {"trial": number, **extra}
    row.update({f"params.{k}": v for k, v in params.items()})
    if outcome is not None:
        row["score"] = outcome["score"]
        row["seconds"] = outcome["seconds"]
        row["best_step"] = outcome["best_step"]
        row["stop_reason"] = outcome["stop_reason"]
        row.update({f"score.{t}": s for t, s in outcome["per_target"].items()})
    return row


@dataclass(frozen=True)
class _Search:
    """What both executors run: ``n_trials`` trials of ``problem`` over ``space``, ``first`` (the
    defaults) first, sampled by :class:`TrialSeededTPE` with ``seed``."""

    problem: _Problem
    space: Mapping[str, tuple[str, Any]]
    first: Mapping[str, Any] | None
    n_trials: int
    timeout: float | None
    seed: int
    verbose: bool = False


def _run_serial(search: _Search, out: Path | None) -> list[dict[str, Any]]:
    problem, space, first = search.problem, search.space, search.first
    n_trials, timeout, seed = search.n_trials, search.timeout, search.seed
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{(out / 'study.db').resolve()}" if out is not None else None
    study = optuna.create_study(
        study_name="semiparam-tune",
        storage=storage,
        load_if_exists=True,
        direction="minimize",
        sampler=TrialSeededTPE(seed),
    )
    # a trial left running by a killed search: failed, so that TPE and the report see finished ones
    for stale in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(stale.number, state=optuna.trial.TrialState.FAIL)
    if first is not None and not study.trials:
        study.enqueue_trial(dict(first), user_attrs={"defaults": True})
    distributions = optuna_distributions(space)
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    deadline = None if timeout is None else time.perf_counter() + timeout
    while len(study.get_trials(deepcopy=False, states=finished)) < n_trials:
        if deadline is not None and time.perf_counter() >= deadline:
            break
        trial = study.ask(distributions)
        params = {k: trial.params[k] for k in space}
        try:
            outcome = problem.score(params)
        except Exception as err:  # noqa: BLE001 - a failed setting is a failed trial, not the end
            trial.set_user_attr("error", f"{type(err).__name__}: {err}")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            if search.verbose:
                print(f"trial {trial.number + 1} of {n_trials}: failed ({err})", file=sys.stderr)
            continue
        for key in ("seconds", "best_step", "stop_reason", "per_target"):
            trial.set_user_attr(key, outcome[key])
        study.tell(trial, outcome["score"])
        if search.verbose:
            print(
                f"trial {trial.number + 1} of {n_trials}: score {outcome['score']:.6g} "
                f"in {outcome['seconds']:.1f}s (best so far {study.best_value:.6g})",
                file=sys.stderr,
            )
    rows = []
    for t in study.get_trials(deepcopy=False, states=finished):
        outcome = None
        if t.state == optuna.trial.TrialState.COMPLETE:
            outcome = {"score": t.value, **{k: t.user_attrs.get(k) for k in _OUTCOME_ATTRS}}
            outcome["per_target"] = outcome["per_target"] or {}
        rows.append(
            _trial_row(
                t.number,
                t.params,
                outcome,
                state=t.state.name,
                defaults=bool(t.user_attrs.get("defaults", False)),
                error=t.user_attrs.get("error"),
            )
        )
    return rows


_OUTCOME_ATTRS = ("seconds", "best_step", "stop_reason", "per_target")


def _run_ray(
    search: _Search, address: str | None, max_concurrent: int, cpus_per_trial: float, storage: Path
) -> list[dict[str, Any]]:
    problem, space, first = search.problem, search.space, search.first
    n_trials, timeout, seed = search.n_trials, search.timeout, search.seed
    try:
        import ray
        from ray import tune as ray_tune
        from ray.tune.search.optuna import OptunaSearch
    except ImportError as err:
        raise ImportError(
            f"executor='ray' needs Ray Tune and Optuna ({err}): pip install 'semiparam[distributed]'"
        ) from err

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        search = OptunaSearch(
            space=optuna_distributions(space),
            metric="score",
            mode="min",
            sampler=TrialSeededTPE(seed),
            points_to_evaluate=[dict(first)] if first is not None else None,
        )

        def trainable(config: dict[str, Any], problem: _Problem) -> dict[str, Any]:
            outcome = problem.score({k: config[k] for k in space})
            return {
                "score": outcome["score"],
                **{k: outcome[k] for k in ("seconds", "best_step", "stop_reason")},
                "per_target": json.dumps(outcome["per_target"]),
            }

        tuner = ray_tune.Tuner(
            ray_tune.with_resources(
                ray_tune.with_parameters(trainable, problem=problem), {"cpu": cpus_per_trial}
            ),
            tune_config=ray_tune.TuneConfig(
                search_alg=search,
                num_samples=n_trials,
                max_concurrent_trials=max_concurrent,
                time_budget_s=timeout,
            ),
            run_config=_ray_run_config(storage),
        )
        grid = tuner.fit()
    finally:
        if started_here:
            ray.shutdown()
    rows = []
    results = sorted((r for r in grid if r.config is not None), key=_ray_trial_order)
    for number, r in enumerate(results):
        params = {k: r.config[k] for k in space}
        if r.error is None and r.metrics and "score" in r.metrics:
            m = r.metrics
            outcome = {
                "score": float(m["score"]),
                "seconds": m.get("seconds"),
                "best_step": m.get("best_step"),
                "stop_reason": m.get("stop_reason"),
                "per_target": json.loads(m.get("per_target", "{}")),
            }
            rows.append(
                _trial_row(
                    number,
                    params,
                    outcome,
                    state="COMPLETE",
                    defaults=first is not None and params == dict(first),
                    error=None,
                )
            )
        else:
            rows.append(_trial_row(number, params, None, state="FAIL", defaults=False, error=str(r.error)))
    return rows


def _ray_trial_order(result: Any) -> int:
    """The order Ray created a trial in: the counter that ends its id ("1a2b3_00002" -> 2), read
    from its metrics or, for a failed trial without any, its directory name."""
    trial_id = (result.metrics or {}).get("trial_id") or ""
    match = re.search(r"_(\d+)$", trial_id) or re.search(r"_(\d{5})_", Path(str(result.path)).name)
    return int(match.group(1)) if match else 0


def _ray_run_config(storage: Path) -> Any:
    """Ray's run settings: quiet, its experiment files under ``storage``."""
    try:
        from ray.tune import RunConfig
    except ImportError:  # older Ray
        from ray.air import RunConfig  # type: ignore[no-redef]
    return RunConfig(verbose=0, storage_path=str(storage.resolve()), name="semiparam-tune")


def _write_outputs(
    out: Path,
    result: TuneResult,
    problem: _Problem,
    space: Mapping[str, tuple[str, Any]],
    off_space: list[str],
    settings: dict[str, Any],
) -> None:
    from ._provenance import code_hash, machine_info

    with atomic_file(out / "trials.csv", overwrite=True) as tmp:
        result.trials.to_csv(tmp, index=False)
    with atomic_file(out / "best.toml", overwrite=True) as tmp:
        Path(tmp).write_text(result.to_toml())
    summary = {
        "settings": settings,
        "targets": list(problem.targets),
        "rows": {"train": len(problem.train), "valid": len(problem.valid)},
        "columns": list(problem.train.columns),
        "metric": "mean over targets of log loss (categorical) or RMSE / training std (continuous)",
        "search_space": {k: [v[0], list(v[1])] for k, v in space.items()},
        "defaults_outside_space": off_space,
        "best": {"params": result.best_params, "score": result.best_score},
        "defaults_score": result.defaults_score,
        "trials": {state: int(n) for state, n in result.trials["state"].value_counts().items()},
        "code": code_hash(),
        "machine": machine_info(),
    }
    with atomic_file(out / "tune.json", overwrite=True) as tmp:
        Path(tmp).write_text(json.dumps(summary, indent=2, default=str))


def load_config(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(model_options, train_options)`` of a ``best.toml`` (or any ``[model]``/``[train]`` TOML),
    read as ``semiparam fit --config`` reads it."""
    return read_settings_file(path)


__all__ = [
    "SEARCH_SPACES",
    "TuneResult",
    "check_search_space",
    "default_search_space",
    "default_settings",
    "load_config",
    "optuna_distributions",
    "to_toml",
    "tune",
]
