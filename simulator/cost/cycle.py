"""The one question the serving loop asks per engine cycle: how long does a cycle of this shape take?

A cycle is one engine step (prefill chunks and decodes), the KV blocks copied to or from the host
tier and, with speculative decoding (`drafts` > 0, spec_decode.drafts), the drafter's `drafts`
passes over the decoding sequences, each of which then verifies its drafts (drafts + 1 positions). Cycles are
memoized by a bucketed shape: counts of prefills, decodes and verifies stay exact, and their mean
token counts and context lengths round to the nearest power of `bucket_ratio` (1.04: within about
2%), which is how the step model aggregates them anyway. Under an engine's launch policy
(`simulator.cost.launch_policy.LaunchPolicy`) a cycle the engine does not replay as captured graphs is timed with
eager launches at the engine's host cost per launch. Everything behind `cycle_s` (buckets, memos, parts) is this
module's and `step_parts`' business; the serving loop sees a duration.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace

from hwmodels.calibration import Calibration, chosen
from hwmodels.interconnect import Fabric
from hwmodels.roofline import LaunchMode
from simulator.cost.launch_policy import LaunchPolicy
from simulator.cost.step_parts import StepParts
from workloads.codecs import Codec
from workloads.deployment import Deployment

# Assumption: an MTP draft token costs about one layer of the main model's decode step (the MTP
# head is one transformer block and shares the LM head); a drafter pass costs this share of a step.
DRAFT_LAYERS = 1.0


@dataclass(frozen=True, slots=True)
class CycleShape:
    """What one engine cycle computes, as counts and token sums (no per-sequence lists)."""

    prefills: int = 0
    prefill_tokens: int = 0  # new tokens of all prefill chunks
    prefill_cached: int = 0  # tokens already cached before those chunks
    decodes: int = 0  # decoding sequences (verifying their drafts when the cost has drafts)
    decode_context: int = 0  # history tokens of all decoding sequences
    host_blocks: int = 0  # KV blocks copied to or from host DRAM during the cycle
    decode_context_max: int = 0  # the longest history among them (0: not given, all at the mean)


@dataclass(frozen=True)
class HostCopies:
    """The PCIe copies of the host KV tier: bytes per block, usable bandwidth, and whether they overlap compute."""

    bytes_per_block: float = 0.0
    link_bytes_per_s: float = 0.0
    overlap: bool = True  # True: copies run beside compute; False: they add to the cycle


def bucket(value: float, ratio: float) -> int:
    """`value` rounded to the nearest power of `ratio` (exact up to 64): a relative error of at most ~ratio/2."""
    if value <= 64:
        return round(value)
    return round(ratio ** round(math.log(value) / math.log(ratio)))


class CycleCost:
    """Cycle times of one deployment. Counts its memo hits, misses and the wall seconds spent on misses.

    With `launches` (an engine's policy) and the deployment's launches in graphs (`KernelOptions.launch`, the
    default), a cycle the policy does not graph is timed with eager launches, each at the policy's host cost;
    without it every cycle is timed in the deployment's launch mode."""

    def __init__(self, deployment: Deployment, fabric: Fabric, calib: Calibration, quickreduce: Codec | None = None,
                 host: HostCopies = HostCopies(), drafts: int = 0, bucket_ratio: float = 1.04,
                 launches: LaunchPolicy | None = None):
        self.deployment, self.host, self.drafts, self.bucket_ratio = deployment, host, drafts, bucket_ratio
        self.launches = launches if deployment.options.launch is LaunchMode.GRAPH else None
        self.draft_fraction = DRAFT_LAYERS / deployment.model.layers
        self.hits = self.misses = 0
        self.miss_wall_s = 0.0
        eager = None
        if self.launches is not None:
            eager = (replace(deployment, options=replace(deployment.options, launch=LaunchMode.EAGER)),
                     calib if self.launches.eager_launch_host_s is None
                     else replace(calib, launch_eager_s=self.launches.eager_launch_host_s))
        if _SHARING.get():
            memos = _shared((deployment, fabric, calib, quickreduce, bucket_ratio, self.launches), eager)
        else:
            parts = StepParts(deployment, fabric, calib, quickreduce)
            memos = _Memos(parts, {}, {}, StepParts(eager[0], fabric, eager[1], quickreduce, parts) if eager else None)
        self.parts, self._cycles, self._steps, self._eager_parts = (memos.parts, memos.cycles, memos.steps,
                                                                    memos.eager_parts)

    def cycle_s(self, shape: CycleShape) -> float:
        """Seconds of one engine cycle of this shape."""
        r = self.bucket_ratio
        mean = shape.decode_context / max(1, shape.decodes)
        # one sequence much longer than the mean makes the decode grid irregular: kept apart in the key
        longest = bucket(shape.decode_context_max, r) if shape.decode_context_max > mean * r * r else 0
        decodes = (shape.decodes, bucket(mean, r), longest if shape.decodes > 1 else 0)
        key = ((shape.prefills, bucket(shape.prefill_tokens / max(1, shape.prefills), r),
                bucket(shape.prefill_cached / max(1, shape.prefills), r)),
               *(((0, 0, 0), decodes, self.drafts) if self.drafts and shape.decodes else (decodes, (0, 0, 0), 0)))
        total = self._cycles.get(key)
        if total is None:
            start = time.perf_counter()
            total = self._step_s(key)
            if key[3]:  # the drafter decodes the verifying sequences once per draft token
                total += key[3] * self.draft_fraction * self._step_s(((0, 0, 0), key[2], (0, 0, 0), 0))
            self._cycles[key] = total
            self.misses += 1
            self.miss_wall_s += time.perf_counter() - start
        else:
            self.hits += 1
        if shape.host_blocks:
            copy_s = shape.host_blocks * self.host.bytes_per_block / self.host.link_bytes_per_s
            total = max(total, copy_s) if self.host.overlap else total + copy_s
        return total

    def _step_s(self, key: tuple) -> float:
        """The step of a bucketed key: every sequence of a kind at the kind's bucketed mean, except a longest
        one kept apart (the rest then at the mean of the others)."""
        total = self._steps.get(key)
        if total is None:
            (prefills, tokens, cached), decodes, verifies, drafts = key
            tokens = max(1, tokens)
            sampled = prefills + decodes[0] + verifies[0] * (drafts + 1)
            step_tokens = prefills * tokens + decodes[0] + verifies[0] * (drafts + 1)
            parts = self.parts
            if self.launches is not None and not self.launches.graphed(
                    prefills * tokens, decodes[0] + verifies[0], 1 + (drafts if verifies[0] else 0)):
                parts = self._eager_parts
            total = self._steps[key] = parts.total_s(
                ((tokens, cached),) * prefills, _contexts(*decodes), _contexts(*verifies), drafts,
                max(sampled, bucket(step_tokens, self.bucket_ratio)))
        return total

    @property
    def hit_rate(self) -> float:
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0


@dataclass(frozen=True)
class _Memos:
    """What a CycleCost memoizes: step parts, cycle times and step times, each a function of its key alone."""

    parts: StepParts
    cycles: dict[tuple, float]
    steps: dict[tuple, float]
    eager_parts: StepParts | None = None  # the steps an engine's launch policy runs eagerly


SHARED_DEPLOYMENTS = 32  # memos a process keeps under `shared_memos` (the least recently used go first)
_SHARING: ContextVar[bool] = ContextVar("cycle_memos_shared", default=False)
_SHARED: list[tuple[tuple, _Memos]] = []  # (what the memos are a function of, the memos), most recent last


@contextlib.contextmanager
def shared_memos() -> Iterator[None]:
    """Within the block, a CycleCost of the same deployment, fabric, calibration, QuickReduce codec and bucket ratio
    as an earlier one in this process reuses its memos, so that runs of one deployment on one process (a sweep's
    points) time each cycle shape once. A memo entry is a function of those and its key alone (the drafts are in
    the key), so no result changes; hits, misses and miss time stay each run's own."""
    token = _SHARING.set(True)
    try:
        yield
    finally:
        _SHARING.reset(token)


def _shared(identity: tuple, eager: tuple[Deployment, Calibration] | None) -> _Memos:
    """The memos of an earlier CycleCost built from equal arguments, or fresh ones kept for the next; `eager`: the
    deployment and calibration of the steps run eagerly (a function of the identity's launch policy)."""
    identity = (*identity, chosen())  # a calibration chosen by context reaches the parts' timing too
    for i, (held, memos) in enumerate(_SHARED):
        if held == identity:
            _SHARED.append(_SHARED.pop(i))
            return memos
    fabric, quickreduce = identity[1], identity[3]
    parts = StepParts(*identity[:4])
    memos = _Memos(parts, {}, {}, StepParts(eager[0], fabric, eager[1], quickreduce, parts) if eager else None)
    _SHARED.append((identity, memos))
    del _SHARED[:-SHARED_DEPLOYMENTS]
    return memos


def _contexts(count: int, mean: int, longest: int) -> tuple[int, ...]:
    """`count` histories of mean `mean`: all equal, or, with `longest`, that one and the rest at their mean."""
    if not longest or count < 2:
        return (mean,) * count
    rest = max(0, round((count * mean - longest) / (count - 1)))
    return (rest,) * (count - 1) + (longest,)
