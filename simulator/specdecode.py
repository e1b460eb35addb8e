"""Speculative-decoding acceptance: tokens per cycle and what a deeper draft may cost.

Sources: vLLM's spec-decode metrics (vllm/v1/spec_decode/metrics.py) and synthetic acceptance
(vllm/config/speculative.py); Leviathan, Kalman and Matias 2023, "Fast Inference from Transformers via
Speculative Decoding" (arXiv:2211.17192).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable, Sequence
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

    def keyed_sampler(self, rng: np.random.Generator) -> KeyedSampler:
        """Committed tokens of the serving loop's cycles, each drawn from a uniform keyed by (request id, position).

        One 64-bit key is taken from `rng`; the uniform of a request's cycle that starts at output position p is
        `keyed_uniforms(key, request_id, p)`. A request verifying at the same position in two runs of the same
        seed commits the same tokens there, whatever order or time its cycles run in: common random numbers for
        comparing configurations (one shared stream consumed in event order would hand a request other draws as
        soon as a change reorders the batch).
        """
        return KeyedSampler(self, rng.integers(0, np.iinfo(np.uint64).max, dtype=np.uint64, endpoint=True))

    @functools.cached_property
    def _bit_thresholds(self) -> np.ndarray:
        """ceil(rate * 2**53) of each rate, ascending: a uniform u = b / 2**53 of 53 random bits b lies below a rate
        exactly when b lies below its threshold (b is an integer, and rate * 2**53 is exact in binary)."""
        return np.array(sorted(math.ceil(rate * 2.0**53) for rate in self.rates), dtype=np.uint64)

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


class KeyedSampler:
    """`Acceptance.keyed_sampler`: called with request ids and their output positions, it gives the tokens each
    request commits in a cycle starting there (`keyed_uniforms`, compared with the rates).

    The serving loop asks every step for its running requests, and numpy's cost per call, not per value, would
    dominate a pass a step. So the requests of a `plan` (a stream's, in its order) have the draws of all their output
    positions taken a block at a time (`_PLAN_REQUESTS` requests, about `_PLAN_POSITIONS` positions at most), in one
    pass, when the first of a block is asked about, and read back step by step; any other request is drawn in a pass
    of the call. Either way the uniforms' 53 bits are compared with `Acceptance._bit_thresholds` instead of the
    uniforms with the rates (the same counts). `release` forgets a finished request's draws.
    """

    def __init__(self, acceptance: Acceptance, key: np.uint64):
        self.key = key
        self._thresholds = acceptance._bit_thresholds
        self._most = acceptance.drafts + 1  # committed tokens when every draft is accepted
        self._plan_ids = self._plan_positions = self._plan_blocks = np.empty(0, dtype=np.int64)
        self._planned: dict[int, int] = {}  # request id -> its index in the plan
        self._blocks: set[int] = set()  # the plan's blocks drawn
        # request id -> committed tokens at its output positions 0, 1, ... (bytes where they fit one a position)
        self._drawn: dict[int, bytes | list[int]] = {}

    def plan(self, request_ids: Sequence[int] | np.ndarray, positions: Sequence[int] | np.ndarray) -> None:
        """The requests the sampler will be asked about, in about that order, each at output positions below its
        count in `positions`: their draws are taken ahead, a block at a time."""
        self._plan_ids = np.array(request_ids, dtype=np.int64)
        self._plan_positions = np.array(positions, dtype=np.int64)
        self._planned = dict(zip(self._plan_ids.tolist(), range(self._plan_ids.size), strict=True))
        # a request's block, non-decreasing along the plan: a new one every _PLAN_REQUESTS requests and wherever the
        # positions before it pass another multiple of _PLAN_POSITIONS
        before = np.cumsum(self._plan_positions) - self._plan_positions
        self._plan_blocks = np.arange(self._plan_ids.size) // _PLAN_REQUESTS + before // _PLAN_POSITIONS
        self._blocks.clear()

    def __call__(self, request_ids: Sequence[int], positions: Sequence[int]) -> list[int]:
        """Committed tokens of each request's cycle at its position."""
        drawn = self._drawn
        if min(positions, default=0) >= 0:  # a negative index would read a request's draws from their end
            try:
                return [drawn[i][p] for i, p in zip(request_ids, positions, strict=True)]
            except (KeyError, IndexError):
                if self._draw_blocks(request_ids):
                    try:
                        return [drawn[i][p] for i, p in zip(request_ids, positions, strict=True)]
                    except (KeyError, IndexError):
                        pass
        return self._committed(position_bits(request_states(self.key, request_ids), positions)).tolist()

    def release(self, request_id: int) -> None:
        """Forget a request's draws (a later call draws them again, the same)."""
        self._drawn.pop(request_id, None)

    def _draw_blocks(self, request_ids: Sequence[int]) -> bool:
        """Draw the plan's blocks that hold requests not drawn yet; whether there were any."""
        drew = False
        for request_id in request_ids:
            index = self._planned.get(request_id)
            if index is not None and request_id not in self._drawn:
                block = int(self._plan_blocks[index])
                if block not in self._blocks:
                    self._draw_block(block)
                    drew = True
        return drew

    def _draw_block(self, block: int) -> None:
        """Every output position of the plan's requests in `block`, in one pass."""
        self._blocks.add(block)
        first, end = np.searchsorted(self._plan_blocks, (block, block + 1))
        ids, counts = self._plan_ids[first:end], self._plan_positions[first:end]
        ends = np.cumsum(counts)
        # each request's positions 0 .. count - 1, back to back, beside its state
        positions = np.arange(ends[-1], dtype=np.int64) - np.repeat(ends - counts, counts)
        committed = self._committed(position_bits(np.repeat(request_states(self.key, ids), counts), positions))
        # one byte a position where the counts fit (a request may run to a long output)
        flat = committed.astype(np.uint8).tobytes() if self._most < 256 else committed.tolist()
        if len(self._drawn) + ids.size > _DRAWN_KEPT:  # requests never released: start afresh
            self._drawn.clear()
        for request_id, end, count in zip(ids.tolist(), ends.tolist(), counts.tolist(), strict=True):
            self._drawn[request_id] = flat[end - count:end]

    def _committed(self, bits: np.ndarray) -> np.ndarray:
        """Committed tokens of cycles with these uniform bits: 1 and the drafts accepted, i.e. the thresholds above
        the bits (the rates above the uniform)."""
        return self._most - np.searchsorted(self._thresholds, bits, side="right")


_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment: 2**64 over the golden ratio, odd
_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SHIFTS = tuple(np.uint64(s) for s in (30, 27, 31, 11))
_DRAWN_KEPT = 1 << 16  # requests a keyed sampler keeps the draws of when none are released
# a keyed sampler's pass over planned requests: this many requests at most, about this many positions at most
_PLAN_REQUESTS, _PLAN_POSITIONS = 256, 1 << 16


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
    request's state is the id-th output of the generator seeded with `key` (`request_states`), and a position's
    uniform the position-th output of the generator seeded with that state (`position_bits`: 53 bits, as numpy's
    `random()`).
    """
    return position_bits(request_states(key, ids), positions) * 2.0**-53


def request_states(key: np.uint64 | int, ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """The generator state of each request id: the id-th SplitMix64 output of the generator seeded with `key`."""
    state = np.array(ids, dtype=np.int64).view(np.uint64)  # uint64 arrays wrap modulo 2**64, as SplitMix64
    state += np.uint64(1)
    state *= _GOLDEN_GAMMA
    state += np.uint64(key)
    _mix64(state)
    return state


def position_bits(states: np.ndarray, positions: Sequence[int] | np.ndarray) -> np.ndarray:
    """53 random bits per (request state, position): the position-th output of the generator seeded with the state,
    its top 53 bits."""
    bits = np.array(positions, dtype=np.int64).view(np.uint64)
    bits += np.uint64(1)
    bits *= _GOLDEN_GAMMA
    bits += states
    _mix64(bits)
    bits >>= _SHIFTS[3]
    return bits


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
