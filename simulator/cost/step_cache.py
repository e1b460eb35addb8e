"""The step-time cache of the serving loop: steps keyed by a bucketed shape, timed from memoized parts.

The key keeps the counts of prefills, decodes and verifies exactly and rounds their mean token counts
and context lengths to the nearest power of `bucket_ratio`; `simulator.cost.step_time` computes the times.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from hwmodels.calibration import Calibration
from hwmodels.interconnect import Fabric
from simulator.cost.step_time import StepMemo, StepTime, sequence_part_keys, time_batch, time_batch_s
from workloads.codecs import Codec
from workloads.deployment import Deployment
from workloads.step import Batch, PrefillChunk


def _representative(key: tuple) -> Batch:
    """The batch a step-cache key stands for: every sequence of a kind at the kind's bucketed mean."""
    prefills, decodes, verifies, depth = key
    return Batch(
        prefills=(PrefillChunk(max(1, prefills[1]), prefills[2]),) * prefills[0],
        decodes=(decodes[1],) * decodes[0],
        verifies=(verifies[1],) * verifies[0],
        spec_depth=depth,
    )



def _geometric(value: float, ratio: float) -> int:
    """`value` rounded to the nearest power of `ratio` (exact up to 64): a relative error of at most ~ratio/2."""
    if value <= 64:
        return round(value)
    return round(ratio ** round(math.log(value) / math.log(ratio)))


@dataclass
class StepTimer:
    """Step times of one deployment, cached by a bucketed batch shape so the serving loop stays fast.

    The key keeps the counts of prefills, decodes and verifies exactly and rounds their mean token
    counts and context lengths to the nearest power of `bucket_ratio` (1.04: within about 2%), which
    is how the step model aggregates them anyway; steps whose rounded shapes agree share one time.
    The hit count, miss count and the wall seconds spent on misses are kept for the benchmark report.
    """

    deployment: Deployment
    fabric: Fabric
    calib: Calibration
    quickreduce: Codec | None = None
    bucket_ratio: float = 1.04
    hits: int = 0
    misses: int = 0
    miss_wall_s: float = 0.0
    _cache: dict[tuple, StepTime] = field(default_factory=dict, repr=False)
    _memo: StepMemo = field(default_factory=StepMemo, repr=False)
    _cycles: dict[tuple, float] = field(default_factory=dict, repr=False)
    _totals: dict[tuple, float] = field(default_factory=dict, repr=False)

    def key(self, batch: Batch) -> tuple:
        """The bucketed shape of a batch: what a cached step time is looked up by."""
        return self.shape_key(len(batch.prefills), sum(c.tokens for c in batch.prefills),
                              sum(c.cached for c in batch.prefills), len(batch.decodes), sum(batch.decodes),
                              len(batch.verifies), sum(batch.verifies), batch.spec_depth)

    def shape_key(self, prefills: int, prefill_tokens: int, prefill_cached: int, decodes: int, decode_context: int,
                  verifies: int, verify_context: int, depth: int) -> tuple:
        """`key` from a batch's counts and sums (tokens, cached tokens, context tokens), without the batch."""
        r = self.bucket_ratio
        return ((prefills, _geometric(prefill_tokens / max(1, prefills), r),
                 _geometric(prefill_cached / max(1, prefills), r)),
                (decodes, _geometric(decode_context / max(1, decodes), r)),
                (verifies, _geometric(verify_context / max(1, verifies), r)), depth)

    def step_time(self, batch: Batch) -> StepTime:
        """The step's time: a dict lookup on a hit, the full kernel list on a miss."""
        return self._step_time(self.key(batch))

    def _step_time(self, key: tuple) -> StepTime:
        cached = self._cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        start = time.perf_counter()
        result = time_batch(_representative(key), self.deployment, self.fabric, self.calib, self.quickreduce,
                            self._memo, round_tokens=lambda t: _geometric(t, self.bucket_ratio))
        self._cache[key] = result
        self.misses += 1
        self.miss_wall_s += time.perf_counter() - start
        return result

    def step_time_s(self, batch: Batch) -> float:
        return self.step_time(batch).total_s

    def _total_s(self, key: tuple) -> float:
        """`_step_time(key).total_s`, without building the step's breakdown."""
        found = self._cache.get(key)
        if found is not None:
            self.hits += 1
            return found.total_s
        total = self._totals.get(key)
        if total is None:
            start = time.perf_counter()
            total = self._from_parts(key)
            if total is None:  # a part is new: time it (and the rest) through the representative batch
                total = time_batch_s(_representative(key), self.deployment, self.fabric, self.calib,
                                     self.quickreduce, self._memo,
                                     round_tokens=lambda t: _geometric(t, self.bucket_ratio))
            self._totals[key] = total
            self.misses += 1
            self.miss_wall_s += time.perf_counter() - start
        else:
            self.hits += 1
        return total

    def _from_parts(self, key: tuple) -> float | None:
        """`time_batch_s` of the key's representative batch from memoized parts alone; None if one is missing.

        Same parts, same order of additions as `time_batch_s`, so the same float; but no batch is built.
        """
        memo = self._memo
        if memo.signatures is None:
            return None
        (prefills, tok, cached), (decodes, decode_ctx), (verifies, verify_ctx), depth = key
        tok = max(1, tok)
        sampled = prefills + decodes + verifies * (depth + 1)
        tokens = prefills * tok + decodes + verifies * (depth + 1)
        sums = memo.token_sums.get((max(sampled, _geometric(tokens, self.bucket_ratio)), sampled))
        if sums is None:
            return None
        chunks = ((tok, cached),) * prefills
        dec, ver = (decode_ctx,) * decodes, (verify_ctx,) * verifies
        kernel_s = collective_s = 0
        counts = memo.signatures[0]
        for signature, weight in counts.items():
            if signature[0] != "mixer":
                continue
            for part_key in sequence_part_keys(signature, chunks, dec, ver, depth):
                if part_key is None:
                    continue
                part = memo.parts.get(part_key)
                if part is None:
                    return None
                kernel_s += weight * part.kernel_s
                collective_s += weight * part.collective_s
        kernel_s, collective_s = kernel_s + sums[0], collective_s + sums[1]
        return max(kernel_s, collective_s) if self.deployment.options.overlap_collectives else kernel_s + collective_s

    def cycle_time_s(self, batch: Batch, draft_steps: float = 0.0) -> float:
        """A step plus `draft_steps` decode steps of its verifying sequences (the drafter), in one cache look-up."""
        return self.cycle_time_s_of(self.key(batch), draft_steps)

    def cycle_time_s_of(self, key: tuple, draft_steps: float = 0.0) -> float:
        """`cycle_time_s` of a `key` or `shape_key` result (the serving loop builds no Batch on a hit)."""
        total = self._cycles.get((key, draft_steps))
        if total is None:
            total = self._total_s(key)
            verifies = key[2]
            if draft_steps and verifies[0]:  # the drafter decodes the verifying sequences
                total += draft_steps * self._total_s(((0, 0, 0), verifies, (0, 0), 0))
            self._cycles[(key, draft_steps)] = total
        else:
            self.hits += 1
        return total

    @property
    def hit_rate(self) -> float:
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0
