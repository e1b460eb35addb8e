"""Paired deltas of a sweep: each point against its baseline point, seed by seed (common random numbers).

The baseline of a point is the point with the same grid values except one key, the baseline key, held at the
baseline value (by default the last grid key's first value: DCP1 in `--grid spec_decode.drafts=0..7 --grid
parallel.dcp=1,2,4,8`). A seed draws the same request stream at every point (`workload.seed`), so the difference of
two points run on the same seed holds no workload noise of its own: the interval of the mean paired difference is
far narrower than the two points' own intervals, and a 2 % change is visible when it is real. A delta is in percent
of the baseline's mean; its 95 % Student t interval decides: above zero it beats the baseline, below it loses, and
an interval that crosses zero is not significant ("n.s.").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.replicates import t_interval

METRIC = "total_tok_per_s_per_gpu"  # the headline a sweep decides on: throughput per GPU
# Adaptive seeds (`infersim sweep` and `compare`, `--seeds auto`)
START_SEEDS = 2  # the first round: the fewest seeds that give an interval
MAX_AUTO_SEEDS = 10  # --max-seeds default (assumption: 10 runs a point keep a 32-point sweep within minutes)
TARGET_PCT = 3.0  # --target-pct default: a paired delta's 95 % half-width, in % of its baseline


def adaptive_problem(max_seeds: int, target_pct: float, most: int) -> str | None:
    """What is wrong with an adaptive rule's cap and target (`most`: the largest seed count allowed), or None."""
    if not START_SEEDS <= max_seeds <= most:
        return f"--max-seeds must lie in {START_SEEDS}..{most}, got {max_seeds!r}"
    if not (math.isfinite(target_pct) and target_pct > 0):
        return f"--target-pct must be a finite, positive percentage, got {target_pct}"
    return None


@dataclass(frozen=True)
class Baseline:
    """The grid key and value every point is compared against."""

    key: str
    value: Any

    @property
    def label(self) -> str:
        return f"{self.key}={self.value}"


def default_baseline(grid_keys: Sequence[str], grids: Mapping[int, Mapping[str, Any]]) -> Baseline | None:
    """The last grid key at its first value (the points' order), or None when no key has two values."""
    for key in reversed(grid_keys):
        values = list(dict.fromkeys(grid[key] for grid in grids.values()))
        if len(values) > 1:
            return Baseline(key, values[0])
    return None


def parse_baseline(text: str, grid_keys: Sequence[str], grids: Mapping[int, Mapping[str, Any]]) -> Baseline:
    """`--baseline KEY=VALUE`: a grid key and one of its values (as the grid resolved them)."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or key not in grid_keys:
        raise ValueError(f"--baseline {text}: expected KEY=VALUE with KEY a grid key ({', '.join(grid_keys)})")
    values = list(dict.fromkeys(grid[key] for grid in grids.values()))
    for held in values:
        if str(held) == value or (isinstance(held, int | float) and _number(value) == held):
            return Baseline(key, held)
    raise ValueError(f"--baseline {text}: {key} takes {', '.join(map(str, values))} in this grid")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def paired(rows: Sequence[Mapping[str, Any]], grid_keys: Sequence[str], baseline: Baseline,
           metric: str = METRIC) -> list[dict[str, Any]]:
    """One record per point off the baseline: its grid, baseline point, seeds paired, the mean delta in % of the
    baseline's mean with its 95 % half-width, and the verdict. `rows`: the sweep's ok rows (point, seed, grid,
    metrics)."""
    by_point: dict[int, dict[int, float]] = {}
    grids: dict[int, Mapping[str, Any]] = {}
    for row in rows:
        value = row["metrics"].get(metric)
        if value is None or not math.isfinite(value):
            continue
        by_point.setdefault(row["point"], {})[row["seed"]] = float(value)
        grids[row["point"]] = row["grid"]
    others = [k for k in grid_keys if k != baseline.key]
    base_of = {tuple(grids[p][k] for k in others): p for p in grids if grids[p][baseline.key] == baseline.value}
    out = []
    for point in sorted(grids):
        grid = grids[point]
        base = base_of.get(tuple(grid[k] for k in others))
        if grid[baseline.key] == baseline.value or base is None:
            continue
        seeds = sorted(set(by_point[point]) & set(by_point[base]))
        if not seeds:
            continue
        base_mean = math.fsum(by_point[base][s] for s in seeds) / len(seeds)
        deltas = [(by_point[point][s] - by_point[base][s]) / base_mean * 100 for s in seeds]
        interval = t_interval(deltas)
        half = None if interval.hi is None else interval.hi - interval.mean
        out.append({"point": point, "grid": dict(grid), "baseline_point": base, "seeds": len(seeds),
                    "delta_pct": interval.mean, "half_width_pct": half, "verdict": verdict(interval.mean, half)})
    return out


def verdict(mean: float, half: float | None) -> str:
    """beats (interval above zero), loses (below), n.s. (it crosses zero), or one seed (no interval)."""
    if half is None:
        return "one seed"
    if mean - half > 0:
        return "beats"
    if mean + half < 0:
        return "loses"
    return "n.s."


def unsettled(records: Sequence[Mapping[str, Any]], target_pct: float) -> set[int]:
    """The points, and their baseline points, whose delta's half-width is above `target_pct` (or has none)."""
    points: set[int] = set()
    for record in records:
        half = record["half_width_pct"]
        if half is None or half > target_pct:
            points |= {record["point"], record["baseline_point"]}
    return points


def add_panel(figure: Any, records: Sequence[Mapping[str, Any]], grid_keys: Sequence[str], baseline: Baseline,
              row: int, col: int) -> None:
    """The deltas against the baseline: one series per value of the baseline key, the other grid values along x,
    95 % intervals as error bars, and a zero line; hover says beats, loses or n.s."""
    from plotly.colors import qualitative

    others = [k for k in grid_keys if k != baseline.key]
    values = list(dict.fromkeys(r["grid"][baseline.key] for r in records))
    for i, value in enumerate(values):
        members = [r for r in records if r["grid"][baseline.key] == value]
        x = [", ".join(f"{k}={r['grid'][k]}" for k in others) or "all" for r in members]
        figure.add_scatter(
            x=x, y=[r["delta_pct"] for r in members], mode="markers+lines", name=f"{baseline.key}={value}",
            legendgroup=f"delta-{value}", marker={"size": 9, "color": qualitative.Dark24[i % len(qualitative.Dark24)]},
            error_y={"type": "data", "visible": True,
                     "array": [0.0 if r["half_width_pct"] is None else r["half_width_pct"] for r in members]},
            text=[f"{r['verdict']} ({r['seeds']} seeds paired)" for r in members],
            hovertemplate=(f"{baseline.key}={value} vs {baseline.label}<br>%{{x}}<br>delta %{{y:+.2f}} %<br>"
                           "%{text}<extra></extra>"), row=row, col=col)
    figure.add_hline(y=0.0, line_color="black", line_width=1, row=row, col=col)
    figure.update_yaxes(title_text=f"throughput per GPU vs {baseline.label} (%)", row=row, col=col)
    figure.update_xaxes(title_text=f"{', '.join(others) or 'point'} (grid values)", type="category", row=row,
                        col=col)
