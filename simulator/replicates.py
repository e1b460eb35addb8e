"""Replicates of a scenario and intervals over them: replicate k runs seed `workload.seed + k`, and a metric's
replicate values get their mean and a Student t confidence interval of that mean.

Replicate k of any configuration runs the same seed, and `simulate` draws its request stream up front and its
acceptance draws by (request, position), so a base and a change meet the same requests with the same draws
(common random numbers): their difference on one seed is the change's effect, and the differences over seeds
are paired samples (`t_interval` of the per-seed deltas is the paired t interval).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.scenario import MAX_SEED, Scenario

CONFIDENCE = 0.95  # two-sided level of every interval
# Assumption: 1,000 replicates put a mean's 95 % interval within +-0.06 standard deviations; more is a typo, and each
# replicate is a whole simulation.
MAX_REPLICATES = 1000


def replicate_seeds(scenario: Scenario, n: int) -> tuple[int, ...]:
    """The seeds of `n` replicates: the scenario's own seed, then the next n - 1."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REPLICATES:
        raise ValueError(f"replicates must be a whole number in 1..{MAX_REPLICATES}, got {n!r}")
    if scenario.workload.seed + n - 1 > MAX_SEED:
        raise ValueError(f"workload.seed {scenario.workload.seed} + {n - 1} more replicates passes the largest seed, "
                         f"{MAX_SEED}")
    return tuple(scenario.workload.seed + k for k in range(n))


def with_seed(scenario: Scenario, seed: int) -> Scenario:
    """The scenario with `workload.seed` set to `seed` (nothing else changes)."""
    return dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, seed=seed))


@dataclass(frozen=True)
class Interval:
    """The mean of n values and a two-sided Student t confidence interval of it (n - 1 degrees of freedom)."""

    mean: float
    lo: float | None  # None for one value: one value measures no spread
    hi: float | None
    n: int
    confidence: float = CONFIDENCE

    @property
    def significant(self) -> bool | None:
        """Whether the interval excludes zero; None without an interval."""
        if self.lo is None or self.hi is None:
            return None
        return self.lo > 0.0 or self.hi < 0.0


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean +- t_{(1+c)/2, n-1} * s / sqrt(n), s the sample standard deviation (ddof 1)."""
    from scipy.stats import t

    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    n = len(values)
    if n == 0:
        raise ValueError("an interval needs at least one value")
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(float(mean), None, None, 1, confidence)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(t.ppf((1.0 + confidence) / 2.0, n - 1)) * sd / math.sqrt(n)
    return Interval(float(mean), float(mean - half), float(mean + half), n, confidence)


def numeric_leaves(summary: Mapping[str, Any], prefix: str = "") -> dict[str, float | int | None]:
    """Every number of a nested summary by its dotted path (`ttft_s.p90`), in the summary's order; None stays."""
    leaves: dict[str, float | int | None] = {}
    for key, value in summary.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            leaves.update(numeric_leaves(value, f"{path}."))
        elif value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            leaves[path] = value
    return leaves


def summary_intervals(summaries: Sequence[Mapping[str, Any]],
                      confidence: float = CONFIDENCE) -> dict[str, dict[str, Any]]:
    """Per numeric summary metric: its replicate values and their mean and interval (None where a replicate
    leaves the metric undefined)."""
    per_replicate = [numeric_leaves(s) for s in summaries]
    metrics: dict[str, dict[str, Any]] = {}
    for path in per_replicate[0]:
        values = [leaves.get(path) for leaves in per_replicate]
        if any(v is None for v in values):
            metrics[path] = {"mean": None, "lo": None, "hi": None, "values": values}
            continue
        interval = t_interval([float(v) for v in values], confidence)
        metrics[path] = {"mean": interval.mean, "lo": interval.lo, "hi": interval.hi, "values": values}
    return metrics
