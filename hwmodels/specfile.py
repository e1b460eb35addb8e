"""The one loader from YAML to frozen dataclasses: sourced numbers, unit suffixes, errors by key."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import yaml

from hwmodels.units import SI_SPELLINGS, si_suffix, spellings

T = TypeVar("T")


class SpecError(ValueError):
    """A spec file that cannot be loaded; the message names the file and the key."""

    def __init__(self, path: str | Path, key: str, problem: str):
        self.path, self.key, self.problem = str(path), key, problem
        super().__init__(f"{path}: {key}: {problem}")


def read_yaml(path: Path) -> Any:
    """Parse a YAML file with the safe loader; a syntax error names the file and line."""
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecError(path, "<file>", f"cannot read: {err.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<file>"
        raise SpecError(path, where, f"malformed YAML: {getattr(err, 'problem', err)}") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_sourced(path: Path, key: str, raw: Any, *, nullable: bool = False) -> tuple[float | None, str]:
    """A `{value: X, source: "..."}` entry -> (X, source); every number must say where it comes from."""
    if not isinstance(raw, Mapping) or set(raw) != {"value", "source"}:
        raise SpecError(path, key, "must be a mapping {value: NUMBER, source: \"where it comes from\"}")
    value, source = raw["value"], raw["source"]
    if not isinstance(source, str) or not source.strip():
        raise SpecError(path, key, "source must be a non-empty string (datasheet, paper, or 'assumption: ...')")
    if value is None:
        if not nullable:
            raise SpecError(path, key, "value is null but this quantity is required")
        return None, source
    if not _is_number(value):
        hint = ""
        if isinstance(value, str) and "e" in value.lower():
            hint = " (YAML 1.1 reads 2.8e12 as text: write 2.8e+12)"
        raise SpecError(path, key, f"value must be a number, got {value!r}{hint}")
    if value < 0:
        raise SpecError(path, key, f"value must not be negative, got {value}")
    return float(value), source


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """(inner type, nullable) of `X | None`."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(hint))
    return hint, False


def _convert(path: Path, key: str, hint: Any, raw: Any, factor: float, sources: dict[str, str]) -> Any:
    """One YAML value -> the field's type, in SI."""
    inner, nullable = _unwrap_optional(hint)
    if nullable and raw is None:
        return None
    if dataclasses.is_dataclass(inner):
        return _load_fields(inner, raw, path, f"{key}.", sources)
    if inner is bool:
        if not isinstance(raw, bool):
            raise SpecError(path, key, f"must be true or false, got {raw!r}")
        return raw
    if typing.get_origin(inner) is tuple:
        value = raw.get("value") if isinstance(raw, Mapping) else None
        if not isinstance(value, list) or not all(_is_number(v) and v >= 0 for v in value):
            raise SpecError(path, key, "must be {value: [non-negative numbers], source: \"...\"}")
        read_sourced(path, key, {**raw, "value": 0})
        sources[key] = raw["source"]
        element = typing.get_args(inner)[0]
        if element is int and any(v != int(v) for v in value):
            raise SpecError(path, key, "must hold whole numbers")
        return tuple(element(v) for v in value)
    if inner is str:
        if not isinstance(raw, str):
            raise SpecError(path, key, f"must be a string, got {raw!r}")
        return raw
    if isinstance(inner, type) and issubclass(inner, Enum):
        try:
            return inner(raw)
        except ValueError:
            choices = ", ".join(str(m.value) for m in inner)
            raise SpecError(path, key, f"unknown value {raw!r} (valid: {choices})") from None
    if typing.get_origin(inner) in (dict, Mapping):
        key_type, value_type = typing.get_args(inner)
        if not isinstance(raw, Mapping):
            raise SpecError(path, key, "must be a mapping")
        out = {}
        for sub, sub_raw in raw.items():
            sub_key = _convert(path, f"{key}.{sub}", key_type, sub, 1.0, sources)
            out[sub_key] = _convert(path, f"{key}.{sub}", value_type, sub_raw, factor, sources)
        return types.MappingProxyType(out)
    if inner in (int, float):
        value, source = read_sourced(path, key, raw, nullable=nullable)
        sources[key] = source
        if value is None:
            return None
        value *= factor
        if inner is int:
            if value != round(value):
                raise SpecError(path, key, f"must be a whole number, got {value}")
            return round(value)
        return value
    raise TypeError(f"unsupported field type {hint!r} for {key}")  # a programming error, not user input


def load_record(cls: type[T], raw: Any, path: str | Path) -> T:
    """Build the frozen dataclass `cls` from a parsed YAML mapping; unknown, missing and bad keys raise."""
    return _load_fields(cls, raw, Path(path), "", {})


def _load_fields(cls: type[T], raw: Any, path: Path, prefix: str, sources: dict[str, str]) -> T:
    """Load one record (a nested one under `prefix`), gathering every number's source into `sources`."""
    if not isinstance(raw, Mapping):
        raise SpecError(path, prefix.rstrip(".") or "<top>", "must be a YAML mapping of keys to values")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "sources"}
    by_spelling: dict[str, tuple[str, float]] = {}
    for name in fields:
        for spelled, factor in spellings(name).items():
            by_spelling[spelled] = (name, factor)
    values: dict[str, Any] = {}
    for key, item in raw.items():
        if key not in by_spelling:
            raise SpecError(path, f"{prefix}{key}", _unknown_key_message(str(key), fields))
        name, factor = by_spelling[key]
        if name in values:
            raise SpecError(path, f"{prefix}{key}", f"sets {name!r} a second time under another unit")
        values[name] = _convert(path, f"{prefix}{key}", hints[name], item, factor, sources)
    missing = [
        _primary_spelling(n) for n, f in fields.items()
        if n not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SpecError(path, prefix + missing[0], "missing (required keys not set: " + ", ".join(missing) + ")")
    if "sources" in {f.name for f in dataclasses.fields(cls)}:
        values["sources"] = types.MappingProxyType(sources)
    try:
        return cls(**values)
    except ValueError as err:
        raise SpecError(path, prefix + getattr(err, "key", "<record>"), str(err)) from None


def _primary_spelling(name: str) -> str:
    return next(iter(spellings(name)))


def _unknown_key_message(key: str, fields: Mapping[str, Any]) -> str:
    for name in fields:
        suffix = si_suffix(name)
        if suffix is None:
            continue
        stem = name[: -len(suffix)]
        if key.startswith(stem + "_"):
            valid = ", ".join(stem + s for s in SI_SPELLINGS[suffix])
            return f"unknown unit suffix {key[len(stem):]!r} (valid spellings: {valid})"
    valid = ", ".join(_primary_spelling(n) for n in fields)
    return f"unknown key (valid keys: {valid})"


class FieldError(ValueError):
    """A bad value found by a record's own checks; carries the key for the loader's message."""

    def __init__(self, key: str, problem: str):
        self.key = key
        super().__init__(f"{problem}")


def overlay_keys(cls: type, base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`base` updated by `top` at the top level, where a key of `top` replaces any spelling of its field."""
    field_of = {spelled: name for f in dataclasses.fields(cls) for name in [f.name] for spelled in spellings(name)}
    replaced = {field_of.get(key, key) for key in top}
    merged = {key: value for key, value in base.items() if field_of.get(key, key) not in replaced}
    merged.update(top)
    return merged
