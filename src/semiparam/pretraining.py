"""Pretraining the prior-fitted NPT and exporting its weights into the package (issue 51).

``python benchmarks/pretrain.py`` drives it. The model (:func:`build_prior_npt`) is an NPT of
:meth:`~semiparam.models.npt.NPTConfig.prior` over :data:`N_FEATURES` feature slots and up to
:data:`MAX_CLASSES` classes; the prior is :class:`~semiparam.data.prior.TablePrior`; the loop is
:func:`~semiparam.training.pretrain.pretrain`. :func:`continue_pretraining` resumes the state in a
checkpoint directory (weights, optimiser, the prior's random state, history, held-out scores,
seconds by device) on any device; :func:`export_weights` writes ``semiparam/weights/npt_prior.safetensors``
and its card ``npt_prior.json``, which ``NPTClassifier(init="pretrained")`` loads offline.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ._io import file_sha256
from .data.prior import PriorConfig, TablePrior
from .estimators.pretrained import WEIGHTS, weights_dir
from .models.npt import NPT, NPTConfig
from .training.checkpoint import TrainingCheckpoint
from .training.device import resolve_device
from .training.pretrain import PretrainConfig, PretrainRun, draw_task, pretrain, prior_layout
from .training.seeding import seeded_build

__all__ = [
    "MAX_CLASSES",
    "N_FEATURES",
    "PretrainConfig",
    "PriorConfig",
    "TablePrior",
    "build_prior_npt",
    "continue_pretraining",
    "export_weights",
    "held_out_baseline",
    "prior_rate",
    "weights_card",
    "weights_hash",
]

N_FEATURES, MAX_CLASSES = 16, 10
PRIOR = PriorConfig(max_features=N_FEATURES, max_classes=MAX_CLASSES)  # the tasks it pretrains on
TRAINING = PretrainConfig()


def build_prior_npt(device: torch.device | str = "cpu") -> tuple[NPT, NPTConfig]:
    """A freshly initialised prior-fitted NPT (seed 0) and its config."""
    device = resolve_device(device)
    config = NPTConfig.prior()
    module, _ = seeded_build(lambda: NPT(config, prior_layout(N_FEATURES, MAX_CLASSES)), 0, device)
    return module.to(device), config


def _checkpoint(directory: Path, config: NPTConfig) -> TrainingCheckpoint:
    fingerprint = json.dumps(
        [config.to_dict(), PRIOR.to_dict(), TRAINING.to_dict(), N_FEATURES, MAX_CLASSES], sort_keys=True
    )
    return TrainingCheckpoint(
        directory,
        fingerprint,
        every_steps=TRAINING.checkpoint_every_steps,
        every_seconds=TRAINING.checkpoint_every_seconds,
    )


def continue_pretraining(
    checkpoint_dir: str | Path,
    *,
    steps: int = 1_000_000,
    seconds: float | None = None,
    device: str = "auto",
    progress: bool | None = None,
    cooldown_steps: int = 0,
) -> tuple[NPT, PretrainRun]:
    """Resume (or begin) pretraining from ``checkpoint_dir`` until step ``steps`` of the whole
    pretraining or ``seconds`` of this run; returns the model and the run. With ``cooldown_steps``:
    the checkpoint's weights trained that many steps more at a learning rate decaying to zero,
    the checkpoint left as it was (the weights to export; see :mod:`semiparam.training.pretrain`)."""
    module, config = build_prior_npt(device)
    run = pretrain(
        module,
        TablePrior(PRIOR, seed=0),
        TRAINING,
        n_features=N_FEATURES,
        max_steps=steps,
        checkpoint=_checkpoint(Path(checkpoint_dir), config),
        seconds=seconds,
        progress=progress,
        cooldown_steps=cooldown_steps,
    )
    return module, run


def checkpointed_model(checkpoint_dir: str | Path) -> tuple[NPT, int, dict[str, Any]]:
    """The model in ``checkpoint_dir``'s state, its step count and the state's ledger."""
    module, config = build_prior_npt("cpu")
    state = _checkpoint(Path(checkpoint_dir), config).read()
    if state is None:
        raise FileNotFoundError(f"no pretraining checkpoint in {checkpoint_dir}")
    module.load_state_dict(state["model"])
    return module, int(state["step"]) + 1, state["extra"]


def export_weights(
    module: NPT,
    steps: int,
    ledger: dict[str, Any],
    command: str,
    commit: str | None = None,
    directory: Path | None = None,
    machine: str | None = None,
    cooldown_steps: int = 0,
) -> dict[str, Any]:
    """Write the weights (float32 safetensors) and the card into ``directory`` (default: the
    package's ``weights`` folder); returns the card. ``cooldown_steps``: the last steps of
    ``steps`` were a cool-down branched off the checkpoint."""
    directory = directory or weights_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().float().cpu().contiguous() for k, v in module.state_dict().items()}
    save_file(tensors, directory / f"{WEIGHTS}.safetensors")
    card = {
        "model": "npt",
        "model_config": module.config.to_dict(),
        "n_features": N_FEATURES,
        "max_classes": MAX_CLASSES,
        "prior_config": PRIOR.to_dict(),
        "pretrain_config": TRAINING.to_dict(),
        "steps": steps,
        "cooldown_steps": cooldown_steps,
        "tasks_seen": steps * TRAINING.tasks_per_step,
        "parameters": int(sum(p.numel() for p in module.parameters())),
        "seconds_by_device": ledger.get("seconds_by_device", {}),
        "held_out": ledger.get("evaluations", []),
        "exported_at_commit": commit,
        "exported_by": command,
        "machine": machine or platform.processor() or platform.machine(),
    }
    (directory / f"{WEIGHTS}.json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def prior_rate(seconds: float = 10.0, seed: int = 0, device: torch.device | str = "cpu") -> dict[str, float]:
    """How fast the prior feeds pretraining in this process: tasks drawn and encoded as model
    inputs, as the training stream draws them, for about ``seconds``: tasks and rows per second
    (a task the prior rejects and redraws counts in the time, not in the tasks)."""
    import time

    from .training.pretrain import TaskBatches

    stream = TaskBatches(TablePrior(PRIOR, seed=seed), 1, N_FEATURES, resolve_device(device))
    tasks = rows = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or tasks == 0:
        (task,) = stream(tasks)
        tasks += 1
        rows += int(task.values.shape[0])
    return {
        "tasks_per_second": tasks / elapsed,
        "rows_per_second": rows / elapsed,
        "tasks": tasks,
        "seconds": elapsed,
    }


def held_out_baseline() -> dict[str, float]:
    """The held-out prior tasks' loss without looking at features: each query predicted by its
    task's training rows alone (the class shares, add-one smoothed; the mean, 0 in standardised
    units). The floor a pretrained model has to go below, in the units of its held-out loss."""
    import numpy as np

    prior = TablePrior(PRIOR, seed=TRAINING.eval_seed)
    cls, reg, correct, count = [], [], 0, 0
    for _ in range(TRAINING.eval_tasks):
        task, _ = draw_task(prior, N_FEATURES)  # the held-out tasks of pretrain(), drawn as it draws them
        train, query = task.y[: task.n_train], task.y[task.n_train :]
        if task.n_classes:
            counts = np.bincount(train.astype(np.int64), minlength=task.n_classes) + 1.0
            share = counts / counts.sum()
            cls.append(float(-np.log(share[query.astype(np.int64)]).mean()))
            correct += int((query == share.argmax()).sum())
            count += len(query)
        else:
            reg.append(float((((query - train.mean()) / (train.std() + 1e-8)) ** 2).mean()))
    return {
        "loss": float(np.mean(cls + reg)),
        "classification": float(np.mean(cls)),
        "accuracy": correct / max(count, 1),
        "regression": float(np.mean(reg)),
    }


def weights_card() -> dict[str, Any]:
    """The shipped weights' card (``npt_prior.json``)."""
    return json.loads((weights_dir() / f"{WEIGHTS}.json").read_text())


def weights_hash() -> str:
    """The first 16 hex digits of the shipped weights' sha256."""
    return file_sha256(weights_dir() / f"{WEIGHTS}.safetensors")[:16]
