"""Arrival processes: when requests (or agentic sessions) reach the server, in seconds from t = 0.

The set is closed: `Poisson`, `Gamma`, `FixedRate`, `Infinite` and `TraceTimestamps`, each a frozen class with
`sample(n, rng) -> np.ndarray` of non-decreasing arrival times in seconds. Like `vllm bench serve`,
the first request of a rate-driven process is sent at t = 0 and each later one after a gap.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np


def _check_count(n: object) -> int:
    """A request count must be a non-negative integer (a float such as 1e3 is rejected, not truncated)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValueError(f"n must be an integer, got {n!r}")
    if n < 0:
        raise ValueError(f"n must not be negative, got {n}")
    return int(n)


def _check_rate(owner: str, rate_per_s: object) -> None:
    """A rate must be a positive, finite number; `Infinite` is the way to ask for no spacing."""
    if isinstance(rate_per_s, bool) or not isinstance(rate_per_s, numbers.Real):
        raise ValueError(f"{owner}.rate_per_s must be a number, got {rate_per_s!r}")
    if not math.isfinite(rate_per_s) or rate_per_s <= 0:
        raise ValueError(f"{owner}.rate_per_s must be positive and finite, got {rate_per_s} (use Infinite())")


@dataclass(frozen=True)
class Poisson:
    """Memoryless arrivals at `rate_per_s` on average: exponential gaps, as `vllm bench serve --request-rate R`."""

    rate_per_s: float

    def __post_init__(self) -> None:
        _check_rate("Poisson", self.rate_per_s)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Arrival times (s): 0, then cumulative exponential gaps of mean 1 / rate_per_s."""
        n = _check_count(n)
        times = np.zeros(n)
        if n > 1:
            np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=n - 1), out=times[1:])
        return times


@dataclass(frozen=True)
class Gamma:
    """Gamma-distributed gaps of mean 1 / rate_per_s, as `vllm bench serve --request-rate R --burstiness B`.

    The shape is `burstiness` and the scale 1 / (rate_per_s * burstiness) (vLLM's `get_request`,
    vllm/benchmarks/serve.py): below 1 the arrivals come in bursts, above 1 they are more even; 1 is the
    exponential gap of `Poisson`, which a scenario uses for it. vLLM also rescales its gaps so that the last
    request goes at exactly n / rate; these gaps are not rescaled, as `Poisson`'s are not.
    """

    rate_per_s: float
    burstiness: float

    def __post_init__(self) -> None:
        _check_rate("Gamma", self.rate_per_s)
        b = self.burstiness
        if isinstance(b, bool) or not isinstance(b, numbers.Real) or not math.isfinite(b) or b <= 0:
            raise ValueError(f"Gamma.burstiness must be positive and finite, got {b!r}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Arrival times (s): 0, then cumulative gamma gaps of mean 1 / rate_per_s."""
        n = _check_count(n)
        times = np.zeros(n)
        if n > 1:
            scale = 1.0 / (self.rate_per_s * self.burstiness)
            np.cumsum(rng.gamma(self.burstiness, scale, size=n - 1), out=times[1:])
        return times


@dataclass(frozen=True)
class FixedRate:
    """Deterministic arrivals exactly 1 / rate_per_s apart, for load without burstiness."""

    rate_per_s: float

    def __post_init__(self) -> None:
        _check_rate("FixedRate", self.rate_per_s)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Arrival times (s) i / rate_per_s; `rng` is unused but kept so every process samples alike."""
        return np.arange(_check_count(n)) / self.rate_per_s


@dataclass(frozen=True)
class Infinite:
    """Every request at t = 0, as `vllm bench serve --request-rate inf`.

    How many run at once is a serving-side limit (`--max-concurrency N`), so the simulator applies
    the concurrency cap; this process only says that nobody waits to send.
    """

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Arrival times (s): all zero."""
        return np.zeros(_check_count(n))


@dataclass(frozen=True, eq=False)
class TraceTimestamps:
    """Recorded arrival times (s), replayed as they are, e.g. an Azure trace's clock with other lengths."""

    arrival_s: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        times = np.array(self.arrival_s, dtype=np.float64, copy=True).reshape(-1)
        if times.size and not np.all(np.isfinite(times)):
            raise ValueError("TraceTimestamps.arrival_s must be finite")
        if times.size and times[0] < 0:
            raise ValueError(f"TraceTimestamps.arrival_s must not be negative, got {times[0]}")
        if np.any(np.diff(times) < 0):
            raise ValueError("TraceTimestamps.arrival_s must be sorted (non-decreasing)")
        times.setflags(write=False)
        object.__setattr__(self, "arrival_s", times)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The first n recorded times (s); asking for more than were recorded is an error."""
        n = _check_count(n)
        if n > self.arrival_s.size:
            raise ValueError(f"n = {n} exceeds the {self.arrival_s.size} recorded TraceTimestamps.arrival_s")
        return self.arrival_s[:n].copy()


ArrivalProcess = Poisson | Gamma | FixedRate | Infinite | TraceTimestamps
