"""Frozen, typed configuration dataclasses: unknown keys raise, values are type-checked, and keys
renamed since a release still work through one alias map (:data:`ALIASES`)."""

from __future__ import annotations

import dataclasses
import typing
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar, get_args, get_origin

C = TypeVar("C", bound="FrozenConfig")


class ConfigError(ValueError):
    """A configuration key or value is not valid."""


class Renamed(NamedTuple):
    """An old spelling of a config key: the key's name now, and the configs that had the old one."""

    new: str
    configs: tuple[str, ...]  # class names; their subclasses inherit the alias


class Converted(NamedTuple):
    """An old config key whose value is now said by other keys: ``to_new(old value)`` gives them
    (``{key now: value}``); ``to_old(config)`` reads the old key's value back from a config."""

    new: tuple[str, ...]  # the keys ``to_new`` sets
    configs: tuple[str, ...]
    to_new: Callable[[Any], dict[str, Any]]
    to_old: Callable[[Any], Any]


class OldValue(NamedTuple):
    """An old value of a config key, now said by ``values`` (that key's value and others')."""

    values: dict[str, Any]
    configs: tuple[str, ...]


def _clip_norm_now(clip_norm: Any) -> dict[str, Any]:
    if clip_norm is None:
        return {"clip_mode": "none"}
    return {"clip_mode": "norm", "clip_value": clip_norm}


def _clip_norm_then(config: Any) -> float | None:
    if config.clip_mode == "value":
        raise AttributeError("clip_mode='value' (element-wise clipping) has no clip_norm; read clip_value")
    return config.clip_value if config.clip_mode == "norm" else None


# The one alias map: one name per hyperparameter across models (issue 50), each old spelling -> its
# name now. A config built in any way (constructor, ``from_dict``, ``replace``; so estimators'
# ``model_options`` / ``train_options``, the command line's ``--set`` and settings files) accepts
# the old spelling with a FutureWarning that names the new key, and so does reading
# ``config.<old name>``. Files written before a rename (saved models, ``from_dict(warn=False)``)
# load silently, and checkpoint fingerprints spell the keys as they were first written
# (:meth:`FrozenConfig.fingerprint_dict`), so a fit checkpointed before a rename still resumes.
# A config that others were merged into (``MERGED``, a class attribute: TrainConfig took in the
# neural processes' NPTrainConfig) takes their old spellings too.
ALIASES: dict[str, Renamed | Converted] = {
    # the architecture's repeated block, NPT's name: SPIN's encoder layers (XABA -> XABD -> ABLA)
    # and TNP-D's transformer layers. What one block holds differs by model (see each config)
    "n_layers": Renamed("n_blocks", ("SPINConfig", "TNPDConfig")),
    # h, the learned inducing points, the inducing-point neural processes' name (CIPNP, IPNP)
    "n_inducing_points": Renamed("n_inducing", ("SPINConfig",)),
    # steps between training checkpoints, TrainConfig's name
    "checkpoint_every": Renamed("checkpoint_every_steps", ("NPTrainConfig",)),
    # gradient-norm clipping (None: off), TrainConfig's clip_mode="norm" and clip_value
    "clip_norm": Converted(("clip_mode", "clip_value"), ("NPTrainConfig",), _clip_norm_now, _clip_norm_then),
}

# Old values of a key, (key, old value) -> what says it now; part of the one alias map above
OLD_VALUES: dict[tuple[str, Any], OldValue] = {
    # a cosine anneal to 0 over the whole run: TrainConfig's flat_cosine without its flat part
    ("lr_schedule", "cosine"): OldValue(
        {"lr_schedule": "flat_cosine", "flat_fraction": 0.0}, ("NPTrainConfig",)
    ),
}


def _owners(cls: type, *, merged: bool = True) -> set[str]:
    """The config names whose old spellings config ``cls`` takes: its own and its bases', and
    (``merged``) those of the configs merged into it."""
    names = {c.__name__ for c in cls.__mro__}
    return names | set(getattr(cls, "MERGED", ())) if merged else names


def alias_of(cls: type, key: str, *, merged: bool = True) -> Renamed | Converted | None:
    """The alias entry when ``key`` is an old spelling config ``cls`` takes, else None."""
    alias = ALIASES.get(key)
    if alias is None or not _owners(cls, merged=merged) & set(alias.configs):
        return None
    return alias


def renamed_key(cls: type, key: str) -> str | None:
    """The name now of ``key`` when it is an old spelling that config ``cls`` (or a base) had
    and that is a plain rename, else None."""
    alias = alias_of(cls, key)
    return alias.new if isinstance(alias, Renamed) else None


def _old_value(cls: type, key: str, value: Any) -> OldValue | None:
    for (old_key, old_value), entry in OLD_VALUES.items():
        if key == old_key and type(value) is type(old_value) and value == old_value:
            if _owners(cls) & set(entry.configs):
                return entry
    return None


def _said(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


def canonical_keys(
    cls: type, values: Mapping[str, Any], *, warn: bool = True, stacklevel: int = 2
) -> dict[str, Any]:
    """``values`` with the old spellings of config ``cls``'s keys and values (:data:`ALIASES`,
    :data:`OLD_VALUES`) replaced by those of now, each with a FutureWarning unless ``warn`` is
    False (``stacklevel`` as ``warnings.warn``'s, counted from the caller). Both spellings of
    one setting raise :class:`ConfigError`."""
    out = dict(values)
    for key, value in values.items():
        alias = alias_of(cls, key)
        if isinstance(alias, Renamed):
            if alias.new in values:
                raise ConfigError(
                    f"{cls.__name__}: {key!r} is the old name of {alias.new!r}; give only {alias.new!r}"
                )
            message = f"{cls.__name__} key {key!r} is deprecated; it is now {alias.new!r}"
            out[alias.new] = out.pop(key)
        elif isinstance(alias, Converted):
            given = [k for k in alias.new if k in values]
            if given:
                raise ConfigError(
                    f"{cls.__name__}: {key!r} is the old spelling of {list(alias.new)}; give only {given}"
                )
            now = alias.to_new(value)
            message = f"{cls.__name__} key {key!r} is deprecated; {key}={value!r} is now {_said(now)}"
            del out[key]
            out.update(now)
        else:
            entry = _old_value(cls, key, value)
            if entry is None:
                continue
            clash = {
                k: values[k] for k, v in entry.values.items() if k != key and k in values and values[k] != v
            }
            if clash:
                raise ConfigError(
                    f"{cls.__name__}: {key}={value!r} is the old spelling of {_said(entry.values)}; "
                    f"it contradicts {_said(clash)}"
                )
            message = f"{cls.__name__} {key}={value!r} is deprecated; it is now {_said(entry.values)}"
            out.update(entry.values)
        if warn:
            warnings.warn(message, FutureWarning, stacklevel=stacklevel + 1)
    return out


def legacy_keys(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (keys as they are named now) with the keys config ``cls`` has had renamed
    spelt the old way: what checkpoint fingerprints hash, so that they survive a rename. The old
    keys of the configs merged into ``cls`` are not its own: its fingerprints never spelt them."""
    old = {}
    for key, alias in ALIASES.items():
        if isinstance(alias, Renamed) and alias_of(cls, key, merged=False) is not None:
            old[alias.new] = key
    return {old.get(k, k): v for k, v in values.items()}


class _AliasedKeys(type):
    """The metaclass of the configs: their constructor takes old key spellings (:data:`ALIASES`)."""

    if not TYPE_CHECKING:  # type checkers see the dataclass's own signature

        def __call__(cls, *args, **kwargs):
            return super().__call__(*args, **canonical_keys(cls, kwargs, stacklevel=2))


@dataclasses.dataclass(frozen=True)
class FrozenConfig(metaclass=_AliasedKeys):
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
    def from_dict(cls: type[C], values: Mapping[str, Any], *, base: C | None = None, warn: bool = True) -> C:
        """Build from a dict; keys not in the dataclass raise :class:`ConfigError`. Old key
        spellings (:data:`ALIASES`) are accepted, with a FutureWarning unless ``warn`` is
        False (a file written before the rename)."""
        values = canonical_keys(cls, values, warn=warn, stacklevel=2)
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

    # fields added after fits were first checkpointed: they enter a checkpoint's fingerprint only
    # when set away from their defaults, so the checkpoints made before them still resume
    LATER_FIELDS: typing.ClassVar[tuple[str, ...]] = ()

    @classmethod
    def field_defaults(cls) -> dict[str, Any]:
        """Each field's default value."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    def fingerprint_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` with renamed keys spelt as before their rename (:func:`legacy_keys`),
        for checkpoint fingerprints: a rename must not orphan the checkpoints made before it; the
        ``LATER_FIELDS`` left at their defaults are left out."""
        defaults = self.field_defaults()
        return {
            k: v
            for k, v in legacy_keys(type(self), self.to_dict()).items()
            if k not in self.LATER_FIELDS or v != defaults[k]
        }

    if not TYPE_CHECKING:  # type checkers keep flagging unknown attributes

        def __getattr__(self, name):  # only called when ``name`` is not a field
            alias = alias_of(type(self), name)
            if alias is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            now = repr(alias.new) if isinstance(alias, Renamed) else " and ".join(map(repr, alias.new))
            warnings.warn(
                f"{type(self).__name__}.{name} is deprecated; it is now {now}",
                FutureWarning,
                stacklevel=2,
            )
            return getattr(self, alias.new) if isinstance(alias, Renamed) else alias.to_old(self)


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
