"""`infersim sweep --grid KEY=VALUES`: the values of one scenario key, and the points of several keys (their product).

VALUES is a comma-separated list whose items are values as `--set` reads them (YAML scalars: 8, true, 0.5, int4)
or ranges of whole numbers: `0..6` (both ends included), `4..64:4` (a step) and `4..512*2` (a factor).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hwmodels.specfile import YamlError, parse_yaml

MAX_VALUES = 100_000  # values of one key: a typo like 0..10000000 is an error, not an hour of expansion
MAX_POINTS = 1_000_000  # points of a whole grid
RANGE = re.compile(r"^(-?\d{1,18})\.\.(-?\d{1,18})(?:([:*])(-?\d{1,18}))?$")  # 18 digits: any int64
SYNTAX = "a list 1,2,4,8, a range 0..6, a stepped range 4..64:4 or a geometric range 4..512*2"


class GridError(ValueError):
    """A `--grid` that cannot be read; the message names the flag and the spec."""


@dataclass(frozen=True)
class Axis:
    """One `--grid` key and its values, each as the text `--set KEY=TEXT` would read."""

    key: str
    texts: tuple[str, ...]


def _shown(text: str) -> str:
    """A flag's text as an error quotes it: at most 80 characters."""
    return repr(text if len(text) <= 80 else text[:77] + "...")


def parse_axis(spec: str) -> Axis:
    """One `--grid KEY=VALUES` flag."""
    key, sep, values = spec.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise GridError(f"--grid {_shown(spec)}: expected KEY=VALUES with VALUES {SYNTAX}")
    texts: list[str] = []
    for item in values.split(","):
        item = item.strip()
        if not item:
            raise GridError(f"--grid {_shown(spec)}: an empty value between commas")
        texts += _expand(item, spec)
        if len(texts) > MAX_VALUES:
            raise GridError(f"--grid {_shown(spec)}: more than {MAX_VALUES:,} values")
    seen: dict[tuple[bool, Any], str] = {}
    for text in texts:
        try:
            value = parse_yaml(text, f"--grid {key[:80]}")
        except YamlError as err:
            raise GridError(str(err)) from None
        marker = (isinstance(value, bool), value if isinstance(value, int | float | str | bool) else text)
        if marker in seen:
            raise GridError(f"--grid {_shown(spec)}: the value {text} is given twice"
                            + (f" (as {seen[marker]} too)" if seen[marker] != text else ""))
        seen[marker] = text
    return Axis(key, tuple(texts))


def _expand(item: str, spec: str) -> list[str]:
    """A list item: itself, or the whole numbers of a range."""
    match = RANGE.match(item)
    if match is None:
        if ".." in item:
            raise GridError(f"--grid {_shown(spec)}: {_shown(item)} is not a range of whole numbers of at most 18 "
                            f"digits ({SYNTAX})")
        return [item]
    start, stop, kind, by = match.groups()
    first, last = int(start), int(stop)
    if last < first:
        raise GridError(f"--grid {_shown(spec)}: the range {item} is empty (it ends below its start)")
    if kind == "*":
        factor = int(by)
        if factor < 2:
            raise GridError(f"--grid {_shown(spec)}: the factor of {item} must be at least 2, got {factor}")
        if first <= 0:
            raise GridError(f"--grid {_shown(spec)}: a geometric range starts above 0, got {first}")
        values = [first]
        while values[-1] * factor <= last:
            values.append(values[-1] * factor)
        return [str(v) for v in values]
    step = int(by) if kind == ":" else 1
    if step < 1:
        raise GridError(f"--grid {_shown(spec)}: the step of {item} must be at least 1, got {step}")
    if (last - first) // step + 1 > MAX_VALUES:
        raise GridError(f"--grid {_shown(spec)}: {item} has more than {MAX_VALUES:,} values")
    return [str(v) for v in range(first, last + 1, step)]


def parse_grid(specs: Sequence[str], seeds: int = 1) -> tuple[Axis, ...]:
    """Every `--grid` flag, in order; a key given twice, or too many points, is an error."""
    if not specs:
        raise GridError("--grid: give at least one KEY=VALUES")
    axes = tuple(parse_axis(spec) for spec in specs)
    keys = [axis.key for axis in axes]
    for key in keys:
        if keys.count(key) > 1:
            raise GridError(f"--grid {key}: given twice; put every value in one --grid {key}=VALUES")
    points = math.prod(len(axis.texts) for axis in axes)
    if points * seeds > MAX_POINTS:
        raise GridError(f"--grid: {points:,} points x {seeds} seed(s) is more than {MAX_POINTS:,} runs")
    return axes


def points(axes: Sequence[Axis]) -> Iterator[tuple[str, ...]]:
    """Every combination of the axes' values, the last axis varying fastest."""
    return itertools.product(*(axis.texts for axis in axes))
