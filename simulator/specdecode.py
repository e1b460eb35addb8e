"""Speculative-decoding acceptance: tokens per cycle and what a deeper draft may cost.

Sources: vLLM's spec-decode metrics (vllm/v1/spec_decode/metrics.py) and synthetic acceptance
(vllm/config/speculative.py); Leviathan, Kalman and Matias 2023, "Fast Inference from Transformers via
Speculative Decoding" (arXiv:2211.17192).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def _check_drafts(drafts: object, field: str = "drafts") -> int:
    """Reject a draft count that is not a non-negative integer, naming the field."""
    if isinstance(drafts, bool) or not isinstance(drafts, numbers.Integral) or drafts < 0:
        raise ValueError(f"{field} must be a non-negative integer, got {drafts!r}")
    return int(drafts)


@dataclass(frozen=True)
class Acceptance:
    """Unconditional per-position acceptance rates r_1..r_k of one draft count k."""

    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        """Store the rates as a tuple of floats, so equal schedules compare and hash equal."""
        if isinstance(self.rates, str | bytes) or not isinstance(self.rates, Iterable):
            raise ValueError(f"Acceptance.rates must be a sequence of numbers, got {self.rates!r}")
        rates = tuple(self.rates)
        for position, rate in enumerate(rates, start=1):
            if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
                raise ValueError(f"Acceptance.rates position {position} must be a number, got {rate!r}")
            if not 0.0 <= float(rate) <= 1.0:
                raise ValueError(f"Acceptance.rates position {position} must lie in [0, 1], got {rate!r}")
        rates = tuple(float(rate) for rate in rates)
        for position in range(2, len(rates) + 1):
            if rates[position - 1] > rates[position - 2]:
                raise ValueError(
                    f"Acceptance.rates position {position} ({rates[position - 1]}) exceeds position "
                    f"{position - 1} ({rates[position - 2]}); unconditional rates P(accepted >= i) "
                    "must be non-increasing"
                )
        object.__setattr__(self, "rates", rates)

    @classmethod
    def from_rates(cls, rates: Iterable[float]) -> Acceptance:
        """Build from measured rates, e.g. vLLM's per-position acceptance rates (vllm/v1/spec_decode/metrics.py)."""
        return cls(tuple(rates))

    @classmethod
    def geometric(cls, alpha: float, drafts: int) -> Acceptance:
        """i.i.d. acceptance alpha per position: r_i = alpha**i (Leviathan et al. 2023, Eq. 1)."""
        drafts = _check_drafts(drafts)
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
        return cls(tuple(float(alpha) ** i for i in range(1, drafts + 1)))

    @classmethod
    def min_variance(cls, mean_tokens_per_cycle: float, drafts: int) -> Acceptance:
        """vLLM's synthetic schedule for a mean acceptance length: [1]*floor(AL-1) + [frac(AL-1)] + [0]*rest.

        Source: vllm/config/speculative.py.
        """
        drafts = _check_drafts(drafts)
        mean = mean_tokens_per_cycle
        if isinstance(mean, bool) or not isinstance(mean, numbers.Real) or not 1.0 <= float(mean) <= drafts + 1:
            raise ValueError(f"mean_tokens_per_cycle must lie in [1, drafts + 1] = [1, {drafts + 1}], got {mean!r}")
        # Same arithmetic as vLLM's SpeculativeConfig._acceptance_length_to_rates: the [:drafts] cut drops the
        # trailing zero fraction when AL == drafts + 1.
        accepted = float(mean) - 1.0
        full = int(accepted)
        rates = ([1.0] * full + [accepted - full] + [0.0] * (drafts - full - 1))[:drafts]
        return cls(tuple(rates))

    @property
    def drafts(self) -> int:
        """Number of drafted tokens per cycle, k."""
        return len(self.rates)

    @property
    def expected_tokens_per_cycle(self) -> float:
        """Mean committed tokens per cycle, 1 + sum r_i, the bonus token included (vLLM's mean acceptance length)."""
        return 1.0 + math.fsum(self.rates)

    @property
    def variance_tokens_per_cycle(self) -> float:
        """Variance of committed tokens per cycle, which drives TPOT and ITL tails: sum (2i-1) r_i - (sum r_i)^2."""
        second_moment = math.fsum((2 * i - 1) * r for i, r in enumerate(self.rates, start=1))
        return max(0.0, second_moment - math.fsum(self.rates) ** 2)

    @property
    def committed_probabilities(self) -> tuple[float, ...]:
        """P(committed = 1 + j) for j = 0..k, i.e. r_j - r_{j+1} with r_0 = 1 and r_{k+1} = 0."""
        padded = (1.0, *self.rates, 0.0)
        return tuple(padded[j] - padded[j + 1] for j in range(self.drafts + 1))

    def truncate(self, drafts: int) -> Acceptance:
        """The same drafter stopped after `drafts` drafts: unconditional rates of the first positions are unchanged."""
        drafts = _check_drafts(drafts)
        if drafts > self.drafts:
            raise ValueError(f"drafts must be at most the current drafts {self.drafts}, got {drafts}")
        return Acceptance(self.rates[:drafts])

    @functools.cached_property
    def _negated_rates(self) -> np.ndarray:
        """-rates, ascending, for searchsorted (computed once: sampling runs every engine step)."""
        return -np.asarray(self.rates, dtype=np.float64)

    def keyed_sampler(self, rng: np.random.Generator) -> Callable[[list[int], list[int]], list[int]]:
        """Committed tokens of the serving loop's cycles, each drawn from a uniform keyed by (request id, position).

        One 64-bit key is taken from `rng`; the uniform of a request's cycle that starts at output position p is
        `keyed_uniforms(key, request_id, p)`. A request verifying at the same position in two runs of the same
        seed commits the same tokens there, whatever order or time its cycles run in: common random numbers for
        comparing configurations (one shared stream consumed in event order would hand a request other draws as
        soon as a change reorders the batch).
        """
        negated = self._negated_rates
        key = rng.integers(0, np.iinfo(np.uint64).max, dtype=np.uint64, endpoint=True)

        def draw(request_ids: list[int], positions: list[int]) -> list[int]:
            u = keyed_uniforms(key, request_ids, positions)
            return (np.searchsorted(negated, -u, side="left") + 1).tolist()

        return draw

    def sample_committed(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Committed tokens (1 + accepted drafts) of n independent cycles, drawn by inverse CDF on one uniform each."""
        if type(rng) is not np.random.Generator and not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        if type(n) is not int or n < 0:  # the serving loop's hot path: isinstance on numbers.Integral is slow
            n = _check_drafts(n, field="n")
        u = rng.random(n)
        # Accepted count = #{i : u < r_i}, so P(accepted >= i) = P(u < r_i) = r_i exactly. The rates are
        # non-increasing, so their negations are sorted and searchsorted counts them in O(log k).
        accepted = np.searchsorted(self._negated_rates, -u, side="left")
        return accepted.astype(np.int64, copy=False) + 1


_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment: 2**64 over the golden ratio, odd
_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SHIFTS = tuple(np.uint64(s) for s in (30, 27, 31, 11))


def _mix64(x: np.ndarray) -> None:
    """SplitMix64's output function (Steele, Lea and Flood 2014), in place: a bijection of 64-bit words with full
    avalanche. In place, because the serving loop calls it every step and numpy's per-call cost dominates."""
    s30, s27, s31, _ = _SHIFTS
    x ^= x >> s30
    x *= _MIX_1
    x ^= x >> s27
    x *= _MIX_2
    x ^= x >> s31


def keyed_uniforms(key: np.uint64 | int, ids: Sequence[int] | np.ndarray,
                   positions: Sequence[int] | np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1), one per (id, position) pair, a pure function of (key, id, position).

    Counter-based SplitMix64 (Steele, Lea and Flood 2014, "Fast splittable pseudorandom number generators"): a
    request's state is the id-th output of the generator seeded with `key`, and a position's uniform the
    position-th output of the generator seeded with that state (53 bits, as numpy's `random()`).
    """
    x = np.array((ids, positions), dtype=np.int64).view(np.uint64)  # uint64 arrays wrap modulo 2**64, as SplitMix64
    x += np.uint64(1)
    x *= _GOLDEN_GAMMA
    state, bits = x[0], x[1]
    state += np.uint64(key)
    _mix64(state)
    bits += state
    _mix64(bits)
    bits >>= _SHIFTS[3]
    return bits * 2.0**-53


def useful_rate(acceptance: Acceptance, cycle_s: float) -> float:
    """Committed tokens per second of one sequence: expected tokens per cycle over the full draft-and-verify time."""
    if not isinstance(acceptance, Acceptance):
        raise ValueError(f"acceptance must be an Acceptance, got {type(acceptance).__name__}")
    if isinstance(cycle_s, bool) or not isinstance(cycle_s, numbers.Real) or not 0.0 < float(cycle_s) < math.inf:
        raise ValueError(f"cycle_s must be a positive finite number of seconds, got {cycle_s!r}")
    return acceptance.expected_tokens_per_cycle / float(cycle_s)


def breakeven_cycle_growth(a_short: Acceptance, a_long: Acceptance) -> float:
    """Fractional cycle-time growth at which the longer draft's useful rate only equals the shorter's.

    The draft-depth breakeven of the Kimi K3 study (mechanism 8): 3.36 / 3.00 gives 12%.
    """
    for field, value in (("a_short", a_short), ("a_long", a_long)):
        if not isinstance(value, Acceptance):
            raise ValueError(f"{field} must be an Acceptance, got {type(value).__name__}")
    return a_long.expected_tokens_per_cycle / a_short.expected_tokens_per_cycle - 1.0
