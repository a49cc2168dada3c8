"""Frozen, typed configuration dataclasses: unknown keys raise, values are type-checked."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

C = TypeVar("C", bound="FrozenConfig")


class ConfigError(ValueError):
    """A configuration key or value is not valid."""


@dataclasses.dataclass(frozen=True)
class FrozenConfig:
    """Base class: subclasses are ``@dataclass(frozen=True)`` and implement ``validate``."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            coerced = _coerce(type(self).__name__, field.name, hints[field.name], value)
            if coerced is not value:
                object.__setattr__(self, field.name, coerced)
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` on values that are well-typed but invalid."""

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls: type[C], values: dict[str, Any], *, base: C | None = None) -> C:
        """Build from a dict; keys not in the dataclass raise :class:`ConfigError`."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} key(s) {unknown}; valid keys are {cls.field_names()}")
        if base is None:
            return cls(**values)
        return dataclasses.replace(base, **values)

    def replace(self: C, **changes: Any) -> C:
        return type(self).from_dict(changes, base=self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _coerce(owner: str, name: str, hint: Any, value: Any) -> Any:
    """Check ``value`` against a simple type hint (int, float, bool, str, Literal, Optional)."""
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{owner}.{name} must be one of {list(args)}, got {value!r}")
        return value
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        last_error: ConfigError | None = None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(owner, name, arg, value)
            except ConfigError as err:
                last_error = err
        assert last_error is not None
        raise last_error
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{owner}.{name} must be a bool, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{owner}.{name} must be an int, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{owner}.{name} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{owner}.{name} must be a string, got {value!r}")
        return value
    return value


def parse_override(text: str) -> tuple[str, Any]:
    """Parse a command-line ``key=value`` override; the value is read as TOML (numbers, bools,
    quoted strings) and falls back to a plain string; ``none`` (or ``null``) is None, which TOML
    cannot say."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if raw.strip().lower() in ("none", "null"):
        return key, None
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def read_settings_file(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(model, train)`` tables of a TOML settings file (``semiparam fit --config``, the
    ``best.toml`` of ``semiparam tune``); any other table raises :class:`ConfigError`."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from err
    unknown = sorted(set(data) - {"model", "train"})
    if unknown:
        raise ConfigError(f"unknown section(s) {unknown} in {path}; use [model] and [train]")
    return dict(data.get("model", {})), dict(data.get("train", {}))
