"""The Pareto frontier of sweep points, InferenceX style: the most throughput at each interactivity.

A point is (x, y) with both better when higher: x the P90 interactivity (tok/s/user), y the throughput per GPU
(tok/s/GPU) or the tokens per dollar. The frontier keeps the points no other point matches or beats in both; read
at an interactivity X it is linear between the two frontier points that bracket X, and the configuration that
delivers it is the nearest frontier point at or above X (it meets X; the interpolated value is a promise of the
frontier, not of one configuration). Pure functions of numbers: no tables, no files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def frontier(xs: Sequence[float | None], ys: Sequence[float | None]) -> list[int]:
    """Indices of the points that no other point matches or beats in both x and y, by x ascending (y descending).

    Points with a missing or non-finite coordinate are left out; of identical points the first is kept."""
    if len(xs) != len(ys):
        raise ValueError(f"frontier needs as many x as y values, got {len(xs)} and {len(ys)}")
    usable = [i for i in range(len(xs)) if _finite(xs[i]) and _finite(ys[i])]
    kept: list[int] = []
    best_y = -math.inf
    for i in sorted(usable, key=lambda i: (-xs[i], -ys[i], i)):  # from the most interactive down
        if ys[i] > best_y:
            kept.append(i)
            best_y = ys[i]
    return kept[::-1]


@dataclass(frozen=True)
class Reading:
    """The frontier read at one x: the interpolated y and the frontier point whose configuration meets x."""

    at: float  # the x asked for
    value: float  # the frontier's y at `at`: linear between the bracketing frontier points
    point: int  # index of the nearest frontier point at or above `at` (its configuration)
    below: int | None  # index of the frontier point below `at` that the value is interpolated from (None: exact
    # at a frontier point, or `at` below the frontier's range, where the slowest frontier point's y is the value)


def read_frontier(xs: Sequence[float | None], ys: Sequence[float | None], at: float) -> Reading | None:
    """The frontier of (xs, ys) read at x = `at`; None when no point reaches `at`."""
    if not math.isfinite(at):
        raise ValueError(f"the frontier is read at a finite x, got {at}")
    front = frontier(xs, ys)
    above = [k for k, i in enumerate(front) if xs[i] >= at]
    if not above:
        return None
    k = above[0]
    upper = front[k]
    if k == 0 or xs[upper] == at:
        return Reading(at=at, value=float(ys[upper]), point=upper, below=None)
    lower = front[k - 1]
    return Reading(at=at, value=interpolate((xs[lower], ys[lower]), (xs[upper], ys[upper]), at), point=upper,
                   below=lower)


def interpolate(low: tuple[float, float], high: tuple[float, float], at: float) -> float:
    """y on the straight line through the points `low` and `high` (distinct x), at x = `at`."""
    (x0, y0), (x1, y1) = low, high
    if x0 == x1:
        raise ValueError(f"interpolate needs two distinct x, got {x0} twice")
    return float(y0 + (y1 - y0) * (at - x0) / (x1 - x0))


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
