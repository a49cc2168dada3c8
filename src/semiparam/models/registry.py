"""Table models by name: each is a frozen config dataclass and an ``nn.Module`` built from
``(config, ColumnLayout)`` with ``forward``, ``encode_context`` and ``forward_queries``."""

from __future__ import annotations

from typing import Any

from .npt import NPT, NPTConfig
from .spin import SPIN, SPINConfig

_MODELS: dict[str, tuple[type[Any], type[Any]]] = {"npt": (NPTConfig, NPT), "spin": (SPINConfig, SPIN)}


def register_model(name: str, config_cls: type[Any], module_cls: type[Any]) -> None:
    _MODELS[name] = (config_cls, module_cls)


def get_model(name: str) -> tuple[type[Any], type[Any]]:
    if name not in _MODELS:
        raise ValueError(f"unknown model {name!r}; available: {sorted(_MODELS)}")
    return _MODELS[name]


def model_names() -> list[str]:
    return sorted(_MODELS)
