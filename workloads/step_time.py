"""Time of one engine step: its kernels and collectives in order on every rank, cached by batch shape.

Ranks are symmetric (the busiest DCP rank is the one modelled), so a collective starts when the
modelled rank reaches it and no rank waits on a slower one. Collectives serialize with compute
unless the deployment overlaps them (`KernelOptions.overlap_collectives`): then the step takes the
longer of the two streams, the optimistic bound of a perfect overlap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hwmodels.calibration import Calibration
from hwmodels.interconnect import Fabric
from hwmodels.roofline import kernel_time
from workloads.codecs import Codec
from workloads.collective_policy import collective_time
from workloads.deployment import Deployment
from workloads.kernel_base import KernelKind
from workloads.model import Mixer
from workloads.step import Batch, PrefillChunk, StepPlan


@dataclass(frozen=True)
class StepTime:
    """A step's time and its breakdown, in seconds."""

    total_s: float
    kernel_s: float
    collective_s: float
    by_family_s: dict[str, float]
    by_collective_s: dict[str, float]  # keyed "allreduce:ring", "allgather:ring", ...
    kernel_launches: int


@dataclass
class _Memo:
    """Times of kernels and collectives already costed: a step repeats the same shapes layer after layer."""

    kernels: dict[KernelKind, list[tuple[str, float]]] = field(default_factory=dict)
    collectives: dict[tuple, tuple[str, float]] = field(default_factory=dict)  # by (op, payload, group)
    parts: dict[tuple, StepTime] = field(default_factory=dict)  # layer parts by signature and batch key
    signatures: tuple[dict[tuple, int], dict[tuple, int]] | None = None  # of the one deployment this memo serves
    token_sums: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)  # by (tokens, sampled)


def time_plan(plan: StepPlan, fabric: Fabric, calib: Calibration, quickreduce: Codec | None = None,
              memo: _Memo | None = None) -> StepTime:
    """Every kernel launch and collective of a step plan, timed and summed per family."""
    d = plan.deployment
    mode = d.options.launch
    memo = memo if memo is not None else _Memo()
    by_family: dict[str, float] = {}
    by_collective: dict[str, float] = {}
    kernel_s = collective_s = 0.0
    launches = 0
    for item in plan.items:
        if item.kernel is not None:
            timed = memo.kernels.get(item.kernel)
            if timed is None:
                timed = [(w.family.value if w.family else "other", kernel_time(w, d.gpu, calib, mode).time_s)
                         for w in item.kernel.launches()]
                memo.kernels[item.kernel] = timed
            for family, t in timed:
                by_family[family] = by_family.get(family, 0.0) + t
                kernel_s += t
            launches += len(timed)
        elif item.collective is not None:
            c = item.collective
            entry = memo.collectives.get((c.op, c.payload_bytes, c.group_size))  # the purpose does not time it
            if entry is None:
                result = collective_time(c, fabric, d.gpu, calib, mode=mode, quickreduce=quickreduce)
                entry = (f"{c.op.value}:{result.algorithm.value}", result.time_s)
                memo.collectives[(c.op, c.payload_bytes, c.group_size)] = entry
            by_collective[entry[0]] = by_collective.get(entry[0], 0.0) + entry[1]
            collective_s += entry[1]
    total = max(kernel_s, collective_s) if d.options.overlap_collectives else kernel_s + collective_s
    return StepTime(total, kernel_s, collective_s, by_family, by_collective, launches)


def time_batch(batch: Batch, deployment: Deployment, fabric: Fabric, calib: Calibration,
               quickreduce: Codec | None = None, memo: _Memo | None = None,
               round_tokens: Callable[[int], int] | None = None) -> StepTime:
    """The time of `batch` without listing every layer: layer parts with the same signature cost the same.

    Equals `time_plan(build_step(batch, deployment), ...)`. A layer is three parts: its input (norm or
    AttnRes mixing, by source count), its mixer (by mixer type) and its FFN (MoE or dense). The input
    and FFN parts, and the embedding and LM head around the stack, depend on the batch's token counts
    only, so the memo keeps them by those counts across batches; a mixer part is split the same way
    into its token-count items and the items of the prefills and of the decodes, each memoized.
    `round_tokens` (the step cache's bucketing) times the token-count parts at a rounded count.
    """
    parts, weights = _timed_parts(batch, deployment, fabric, calib, quickreduce, memo, round_tokens)
    return _combine(parts, weights, deployment)


def time_batch_s(batch: Batch, deployment: Deployment, fabric: Fabric, calib: Calibration,
                 quickreduce: Codec | None = None, memo: _Memo | None = None,
                 round_tokens: Callable[[int], int] | None = None) -> float:
    """`time_batch(...).total_s` without merging the per-family breakdowns (the serving loop's miss path).

    The parts that depend on token counts alone are summed once per (tokens, sampled) pair, so a new
    batch shape costs a few look-ups: that sum, and its prefill and decode mixer parts.
    """
    memo = memo if memo is not None else _Memo()
    sampled = batch.sampled_tokens
    t = batch.tokens if round_tokens is None else max(sampled, round_tokens(batch.tokens))
    sums = memo.token_sums.get((t, sampled))
    if sums is None:
        parts, weights = _timed_parts(batch, deployment, fabric, calib, quickreduce, memo, round_tokens, "tokens")
        sums = memo.token_sums[(t, sampled)] = _pair(parts, weights)
    parts, weights = _timed_parts(batch, deployment, fabric, calib, quickreduce, memo, round_tokens, "sequences")
    kernel_s, collective_s = _pair(parts, weights)
    kernel_s, collective_s = kernel_s + sums[0], collective_s + sums[1]
    return max(kernel_s, collective_s) if deployment.options.overlap_collectives else kernel_s + collective_s


def _pair(parts: list[StepTime], weights: list[int]) -> tuple[float, float]:
    """(kernel seconds, collective seconds) of weighted parts."""
    return (sum(w * p.kernel_s for p, w in zip(parts, weights, strict=True)),
            sum(w * p.collective_s for p, w in zip(parts, weights, strict=True)))


def _timed_parts(batch: Batch, deployment: Deployment, fabric: Fabric, calib: Calibration,
                 quickreduce: Codec | None, memo: _Memo | None,
                 round_tokens: Callable[[int], int] | None, which: str = "all") -> tuple[list[StepTime], list[int]]:
    """The step's parts (see `time_batch`), each timed once per memo, and how many layers repeat each.

    `which`: "all", "tokens" (the parts that depend on token counts alone) or "sequences" (the rest).
    """
    from workloads import layers

    memo = memo if memo is not None else _Memo()
    if memo.signatures is None:
        memo.signatures = _layer_signatures(deployment, layers.attnres_sources)
    counts, first = memo.signatures
    sampled = batch.sampled_tokens
    t = batch.tokens if round_tokens is None else max(sampled, round_tokens(batch.tokens))
    sequences = layers.PREFILL_ITEMS | layers.DECODE_ITEMS
    stand_in: list[Batch] = []

    def by_tokens() -> Batch:
        """The batch the token-count parts are timed on: built on the first miss only."""
        if not stand_in:
            stand_in.append(batch if t == batch.tokens else _with_tokens(t, sampled))
        return stand_in[0]
    parts, weights = [], []
    get = memo.parts.get

    def add(key: tuple, weight: int, build: Callable[[], tuple[Batch, tuple]], keep=None) -> None:
        """The part of `key`; on a miss, `build` gives the batch and the items to time (called only then)."""
        part = get(key)
        if part is None:
            by, items = build()
            items = tuple(i for i in items if keep is None or keep(i.name))
            part = memo.parts[key] = time_plan(StepPlan(deployment, by, items), fabric, calib, quickreduce, memo)
        parts.append(part)
        weights.append(weight)

    def around(b: Batch) -> tuple[Batch, tuple]:
        return b, (*layers.pre_stack_items(b, deployment), *layers.post_stack_items(b, deployment))

    tokens, seqs = which in ("all", "tokens"), which in ("all", "sequences")
    if tokens:
        add(("stack", t), 1, lambda: around(by_tokens()), lambda n: n not in layers.SAMPLED_ITEMS)
        add(("sampled", sampled), 1, lambda: around(by_tokens() if t == sampled else _with_tokens(sampled, sampled)),
            layers.SAMPLED_ITEMS.__contains__)
    chunks = tuple((c.tokens, c.cached) for c in batch.prefills) if seqs else ()  # hashes faster than chunks
    mixed = seqs and (batch.decodes or batch.verifies)
    for signature, weight in counts.items():
        kind, layer = signature[0], first[signature]
        if kind != "mixer":
            if tokens:
                maker = layers.input_items if kind == "input" else layers.ffn_items
                add((*signature, t), weight,
                    lambda m=maker, la=layer: (by_tokens(), tuple(m(la, by_tokens(), deployment))))
            continue
        if tokens:
            add((*signature, "tokens", t), weight,
                lambda la=layer: (by_tokens(), tuple(layers.mixer_items(la, by_tokens(), deployment))),
                lambda n: n not in sequences)
        pre_key, dec_key = _sequence_keys(signature, chunks, batch.decodes if mixed else (),
                                          batch.verifies if mixed else (), batch.spec_depth)
        if pre_key is not None:
            add(pre_key, weight,
                lambda la=layer, c=pre_key[3]: _only(la, Batch(prefills=tuple(PrefillChunk(*x) for x in c)),
                                                     deployment),
                layers.PREFILL_ITEMS.__contains__)
        if dec_key is not None:
            add(dec_key, weight,
                lambda la=layer, d=dec_key[3], v=dec_key[4]: _only(
                    la, Batch(decodes=d, verifies=v, spec_depth=batch.spec_depth), deployment),
                layers.DECODE_ITEMS.__contains__)
    return parts, weights


def _sequence_keys(signature: tuple, chunks: tuple, decodes: tuple[int, ...], verifies: tuple[int, ...],
                   depth: int) -> tuple[tuple | None, tuple | None]:
    """Memo keys of a mixer's prefill part and decode part (None where the batch has none).

    A mixer that reads no history (KDA) shares its parts across cached-prefix and context lengths.
    """
    from workloads.layers import READS_HISTORY

    history = READS_HISTORY[Mixer(signature[1])]
    pre_key = dec_key = None
    if chunks:
        pre_key = (*signature, "prefills", chunks if history else tuple((tokens, 0) for tokens, _ in chunks))
    if decodes or verifies:
        if not history:
            decodes, verifies = (0,) * len(decodes), (0,) * len(verifies)
        dec_key = (*signature, "decodes", decodes, verifies, depth)
    return pre_key, dec_key


def _representative(key: tuple) -> Batch:
    """The batch a step-cache key stands for: every sequence of a kind at the kind's bucketed mean."""
    prefills, decodes, verifies, depth = key
    return Batch(
        prefills=(PrefillChunk(max(1, prefills[1]), prefills[2]),) * prefills[0],
        decodes=(decodes[1],) * decodes[0],
        verifies=(verifies[1],) * verifies[0],
        spec_depth=depth,
    )


def _only(layer: int, batch: Batch, deployment: Deployment) -> tuple[Batch, tuple]:
    """A part's batch and its mixer items (the caller keeps the ones of its kind)."""
    from workloads.layers import mixer_items

    return batch, tuple(mixer_items(layer, batch, deployment))


def _with_tokens(tokens: int, sampled: int) -> Batch:
    """A batch with these token and sampled-position counts, for parts that depend on nothing else.

    Prefill chunks only (each samples its last position): decode kernels of made-up contexts could be
    invalid for a deployment's options (more KV splits than context), and their items are dropped anyway.
    """
    return Batch(prefills=(PrefillChunk(1, 0),) * (sampled - 1) + (PrefillChunk(tokens - sampled + 1, 0),))


def _layer_signatures(deployment: Deployment, attnres_sources) -> tuple[dict[tuple, int], dict[tuple, int]]:
    """Layers per part signature, and the first layer of each: the same for every batch of a deployment."""
    m = deployment.model
    counts: dict[tuple, int] = {}
    first: dict[tuple, int] = {}
    for layer in range(1, m.layers + 1):
        # plain values, not enum members: part keys are hashed at every step-cache miss
        for signature in (("input", attnres_sources(layer, deployment)), ("mixer", m.mixer(layer).value),
                          ("ffn", m.is_moe_layer(layer))):
            counts[signature] = counts.get(signature, 0) + 1
            first.setdefault(signature, layer)
    return counts, first


def _combine(parts: list[StepTime], weights: list[int], deployment: Deployment) -> StepTime:
    kernel_s = sum(w * p.kernel_s for p, w in zip(parts, weights, strict=True))
    collective_s = sum(w * p.collective_s for p, w in zip(parts, weights, strict=True))
    by_family: dict[str, float] = {}
    by_collective: dict[str, float] = {}
    for part, weight in zip(parts, weights, strict=True):
        for key, value in part.by_family_s.items():
            by_family[key] = by_family.get(key, 0.0) + weight * value
        for key, value in part.by_collective_s.items():
            by_collective[key] = by_collective.get(key, 0.0) + weight * value
    launches = sum(w * p.kernel_launches for p, w in zip(parts, weights, strict=True))
    total = max(kernel_s, collective_s) if deployment.options.overlap_collectives else kernel_s + collective_s
    return StepTime(total, kernel_s, collective_s, by_family, by_collective, launches)


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
    _memo: _Memo = field(default_factory=_Memo, repr=False)
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
            for part_key in _sequence_keys(signature, chunks, dec, ver, depth):
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
