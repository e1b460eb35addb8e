"""The one loader from YAML to frozen dataclasses: sourced numbers, unit suffixes, errors by key."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import yaml

from hwmodels.input_files import FileTooLarge, read_regular
from hwmodels.units import SI_SPELLINGS, si_suffix, spellings

T = TypeVar("T")


class SpecError(ValueError):
    """A spec file that cannot be loaded; the message names the file and the key."""

    def __init__(self, path: str | Path, key: str, problem: str):
        self.path, self.key, self.problem = str(path), key, problem
        super().__init__(f"{path}: {key}: {problem}")


# Limits of every YAML file read (scenario, overlay, `--set` value, spec, model, calibration). Assumption: the
# largest committed file is a few kB and a few hundred keys, nested five deep; these leave ample room for
# hand-written files and stop alias bombs (each alias counts the nodes it expands to), deep nesting (the
# composer recurses once per level) and files that take minutes to parse.
YAML_MAX_BYTES = 10_000_000
YAML_MAX_DEPTH = 64
YAML_MAX_NODES = 20_000


class YamlError(ValueError):
    """A YAML text that cannot be read; the message names the file (or key) and the line."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, with nesting depth and expanded node count bounded while composing."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0

    def _count(self, nodes: int, mark: Any) -> None:
        self.nodes += nodes
        if self.nodes > YAML_MAX_NODES:
            raise yaml.YAMLError(_Limit(f"more than {YAML_MAX_NODES} values (aliases counted expanded)", mark))

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            self._count(getattr(target, "expanded", 1), event.start_mark)
            return super().compose_node(parent, index)
        mark = self.peek_event().start_mark
        self.depth += 1
        if self.depth > YAML_MAX_DEPTH:
            raise yaml.YAMLError(_Limit(f"nested more than {YAML_MAX_DEPTH} levels deep", mark))
        before = self.nodes
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        self._count(1, mark)
        node.expanded = self.nodes - before
        return node


class _Limit:
    """A limit hit while composing, shaped like a PyYAML error (problem and problem_mark)."""

    def __init__(self, problem: str, mark: Any):
        self.problem, self.problem_mark = problem, mark


def parse_yaml(text: str | bytes, where: str | Path) -> Any:
    """YAML text (from file or key `where`) with the safe loader and the limits above; every error names `where`
    and, where known, the line."""
    if len(text) > YAML_MAX_BYTES:
        raise YamlError(f"{where}: larger than {YAML_MAX_BYTES} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise YamlError(f"{where}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    loader = None
    try:
        loader = _BoundedLoader(text)  # the reader rejects non-printable characters here
        return loader.get_single_data()
    except yaml.YAMLError as err:
        detail = err.args[0] if err.args and isinstance(err.args[0], _Limit) else err
        mark = getattr(detail, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(detail, "problem", None) or getattr(detail, "reason", None) or str(detail)
        raise YamlError(" ".join(f"{where}: {line}malformed YAML: {problem}".split())) from None
    except (ValueError, OverflowError, RecursionError) as err:  # a scalar PyYAML cannot construct (a date, an int)
        raise YamlError(" ".join(f"{where}: malformed YAML: {type(err).__name__}: {err}".split())[:300]) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml_file(path: str | Path) -> Any:
    """A YAML file's value through `parse_yaml`; a file that cannot be read is named with the reason."""
    path = Path(path)
    try:
        data = read_regular(path, YAML_MAX_BYTES)
    except FileTooLarge:
        raise YamlError(f"{path}: larger than {YAML_MAX_BYTES} bytes") from None
    except OSError as err:
        raise YamlError(f"{path}: cannot read: {err.strerror or err}") from None
    return parse_yaml(data, path)


def read_yaml(path: Path) -> Any:
    """Parse a spec YAML file with the bounded safe loader; an error names the file and line."""
    try:
        return read_yaml_file(path)
    except YamlError as err:
        text = str(err)
        rest = text[len(str(path)) + 2:] if text.startswith(f"{path}: ") else text
        key, sep, problem = rest.partition(": ")
        if not (sep and key.startswith("line ")):
            key, problem = "<file>", rest
        raise SpecError(path, key, problem) from None


@dataclass(frozen=True)
class Range:
    """The valid values of a number field, inclusive, with where the bounds come from."""

    low: float
    high: float
    why: str

    def problem(self, value: Any) -> str | None:
        """None if `value` (a number) lies in the range, else the one-line reason."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value} (valid: {self.valid()})"
        if not self.low <= value <= self.high:
            return f"{shown(value)} is out of range (valid: {self.valid()}; {self.why})"
        return None

    def valid(self) -> str:
        """The range as text, whole bounds as integers ('0..18446744073709551615', '0..1e+18')."""
        return f"{bound_text(self.low)}..{bound_text(self.high)}"


def bound_text(value: float) -> str:
    """A range's bound as an error shows it: a whole number below 2**64 in digits, anything else in %g."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:g}"


def shown(value: Any) -> str:
    """A number as an error message shows it: an integer in digits (up to 20 of them, so any 64-bit value), a larger
    one and a float in %.6g; short even for an integer of thousands of digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        try:
            return f"{float(value):.6g}"
        except OverflowError:
            return f"an integer of {value.bit_length()} bits"
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def ranged(low: float, high: float, why: str, default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field whose loaders (`load_record`, the scenario's `build`) check it against [low, high]."""
    return dataclasses.field(default=default, metadata={"range": Range(low, high, why)})


# Numbers of spec files without a range of their own. Assumption: no node-level quantity in SI units (FLOP/s,
# bytes, bytes/s, Hz, seconds, counts) reaches 1e18 (the largest today, B300 FP4 dense, is ~1.5e16 FLOP/s), and no
# count of a spec needs more than 32 bits.
SPEC_FLOAT_RANGE = Range(0, 1e18, "assumption: no spec quantity in SI units reaches 1e18")
SPEC_INT_RANGE = Range(0, 2**31 - 1, "assumption: no spec count needs more than 32 bits")


def range_problem(f: dataclasses.Field, value: Any, default: Range | None = None) -> str | None:
    """Why `value` of field `f` (a number, or a tuple or mapping of numbers) is out of the field's range, or None."""
    bound = f.metadata.get("range", default)
    if bound is None:
        return None
    items = value if isinstance(value, tuple) else value.values() if isinstance(value, Mapping) else (value,)
    for item in items:
        if _is_number(item):
            use = bound if f.metadata.get("range") or isinstance(item, float) else SPEC_INT_RANGE
            problem = use.problem(item)
            if problem:
                return problem
    return None


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
    if (isinstance(value, int) and abs(value) > 1e300) or (isinstance(value, float) and not math.isfinite(value)):
        raise SpecError(path, key, f"value must be a finite number, got {shown(value)}")
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
        if not isinstance(value, list) or not all(_is_number(v) and math.isfinite(v) and v >= 0 for v in value):
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
        if not math.isfinite(value):
            raise SpecError(path, key, f"value must be a finite number, got {raw['value']!r} ({value} in SI)")
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
        problem = range_problem(fields[name], values[name], SPEC_FLOAT_RANGE)
        if problem:
            raise SpecError(path, f"{prefix}{key}", problem)
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
