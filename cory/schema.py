"""The params loader every wing shares: typed sections built from plain mappings, and the errors that name a setting.

Every section of the params tree is a dataclass whose fields carry a one-line docstring (the comment under each
field). `from_dict` builds a section from a plain mapping (e.g. a block of `params.yaml`): unknown keys are errors
(with a "did you mean" hint), wrong types are errors, a float setting must be finite (no .inf or .nan), and each
dataclass validates its values in `__post_init__`.
Every error is a `ConfigError` whose message starts with the dotted path of the offending setting.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import hashlib
import json
import math
import types
import typing
from typing import Any, Callable, Iterable, Literal, TypeVar, get_args, get_origin

import yaml


T = TypeVar("T")


_PATH: contextvars.ContextVar[str | None] = contextvars.ContextVar("config_path", default=None)
"""Dotted path of the section `from_dict` is building, so `__post_init__` errors name the setting as written."""


def section_path(default: str) -> str:
    return _PATH.get() or default


class ConfigError(ValueError):
    """A setting is unknown, mistyped or out of range. The message names it by its dotted path."""


def check(condition: bool, path: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"{path}: {message}")


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Check/convert one value against a (resolved) type annotation."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = get_args(tp)
        if value is None:
            check(type(None) in options, path, "must not be null")
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: {value!r} matches none of {options}")
    if origin is Literal:
        allowed = get_args(tp)
        check(value in allowed, path, f"must be one of {list(allowed)}, got {value!r}")
        return value
    if _is_dataclass_type(tp):
        check(isinstance(value, dict), path, f"must be a mapping, got {type(value).__name__}")
        return from_dict(tp, value, path)
    if origin in (tuple, list):
        check(isinstance(value, (list, tuple)), path, f"must be a list, got {value!r}")
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            check(len(value) == len(args), path, f"must have {len(args)} items, got {len(value)}")
            return tuple(_convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        items = [_convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        check(isinstance(value, dict), path, f"must be a mapping, got {type(value).__name__}")
        key_tp, val_tp = get_args(tp) or (Any, Any)
        return {_convert(k, key_tp, path): _convert(v, val_tp, f"{path}.{k}") for k, v in value.items()}
    if tp is float:
        check(isinstance(value, (int, float)) and not isinstance(value, bool), path, f"must be a number, got {value!r}")
        # every float setting must be finite: YAML's .inf and .nan pass every `> 0` check one way or the other (nan
        # fails none written as `not x <= y`, inf passes every lower bound), and reach the run as NaN losses
        check(math.isfinite(value), path, f"must be a finite number, got {value!r}")
        return float(value)
    if tp is int:
        check(isinstance(value, int) and not isinstance(value, bool), path, f"must be an integer, got {value!r}")
        return value
    if tp is bool:
        check(isinstance(value, bool), path, f"must be true or false, got {value!r}")
        return value
    if tp is str:
        check(isinstance(value, str), path, f"must be a string, got {value!r}")
        return value
    raise TypeError(f"{path}: unsupported annotation {tp!r}")


def from_dict(cls: type[T], data: dict[str, Any] | None, path: str = "") -> T:
    """Build dataclass `cls` from `data`, rejecting unknown keys and checking types; `path` prefixes error names."""
    data = {} if data is None else data
    prefix = f"{path}." if path else ""
    check(isinstance(data, dict), path or cls.__name__, f"must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(fields)}"
            raise ConfigError(f"{prefix}{key}: unknown setting{hint}")
    kwargs = {name: _convert(value, hints[name], f"{prefix}{name}") for name, value in data.items()}
    missing = [
        name
        for name, f in fields.items()
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    check(not missing, path or cls.__name__, f"required setting(s) missing: {', '.join(missing)}")
    token = _PATH.set(path or None)
    try:
        return cls(**kwargs)
    finally:
        _PATH.reset(token)


def to_dict(obj: Any) -> Any:
    """The inverse of `from_dict`: a plain, YAML/JSON-serialisable mapping (tuples become lists)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def dotted_leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"ppo": {"learning_rate": 1e-5}} -> {"ppo.learning_rate": 1e-5}: every leaf of a nested mapping by its dotted
    setting path (values as they are)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(dotted_leaves(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def dotted_tree(items: Iterable[str]) -> dict[str, Any]:
    """["ppo.lam=1", "ppo.speed.compile=false"] -> {"ppo": {"lam": 1, "speed": {"compile": False}}}: dotted
    KEY=VALUE settings as the nested mapping `merge` takes, the inverse of `dotted_leaves`. Each value is read as YAML,
    so it may hold commas ("ppo.generation.response_length=[4, 8]"); empty items are skipped."""
    tree: dict[str, Any] = {}
    for item in filter(None, items):
        key, _, value = item.partition("=")
        *parents, leaf = key.strip().split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return tree


def merge(base: dict[str, Any], override: dict[str, Any] | None,
          replaces: Callable[[dict], bool] = lambda mapping: False) -> dict[str, Any]:
    """Deep-merge `override` into a copy of `base` (mappings merge, everything else replaces; so does a mapping for
    which `replaces` is true: a profile's `!replace`)."""
    out = dict(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and not replaces(value) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value, replaces)
        else:
            out[key] = value
    return out


def digest(obj: Any, length: int | None = None) -> str:
    """The sha256 of `obj` as canonical JSON (keys sorted, no spaces, tuples as lists, anything else by its str), as
    hex digits, the first `length` of them if given: the one hash of a config or a unit's inputs (its fingerprint)."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    digits = hashlib.sha256(canonical.encode()).hexdigest()
    return digits if length is None else digits[:length]
