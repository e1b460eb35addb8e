"""Time of one engine step: its kernels and collectives in order on every rank, timed in memoized layer parts.

Ranks are symmetric (the busiest DCP rank is the one modelled), so a collective starts when the
modelled rank reaches it and no rank waits on a slower one. Collectives serialize with compute
unless the deployment overlaps them (`KernelOptions.overlap_collectives`): then the step takes the
longer of the two streams, the optimistic bound of a perfect overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hwmodels.calibration import Calibration
from hwmodels.interconnect import Fabric
from hwmodels.roofline import kernel_time
from simulator.cost.collective_policy import collective_time
from workloads.codecs import Codec
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
class StepMemo:
    """Times of kernels and collectives already costed: a step repeats the same shapes layer after layer."""

    kernels: dict[KernelKind, list[tuple[str, float]]] = field(default_factory=dict)
    collectives: dict[tuple, tuple[str, float]] = field(default_factory=dict)  # by (op, payload, group)
    parts: dict[tuple, StepTime] = field(default_factory=dict)  # layer parts by signature and batch key
    signatures: tuple[dict[tuple, int], dict[tuple, int]] | None = None  # of the one deployment this memo serves
    token_sums: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)  # by (tokens, sampled)


def time_plan(plan: StepPlan, fabric: Fabric, calib: Calibration, quickreduce: Codec | None = None,
              memo: StepMemo | None = None) -> StepTime:
    """Every kernel launch and collective of a step plan, timed and summed per family."""
    d = plan.deployment
    mode = d.options.launch
    memo = memo if memo is not None else StepMemo()
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
               quickreduce: Codec | None = None, memo: StepMemo | None = None,
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
                 quickreduce: Codec | None = None, memo: StepMemo | None = None,
                 round_tokens: Callable[[int], int] | None = None) -> float:
    """`time_batch(...).total_s` without merging the per-family breakdowns (the serving loop's miss path).

    The parts that depend on token counts alone are summed once per (tokens, sampled) pair, so a new
    batch shape costs a few look-ups: that sum, and its prefill and decode mixer parts.
    """
    memo = memo if memo is not None else StepMemo()
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
                 quickreduce: Codec | None, memo: StepMemo | None,
                 round_tokens: Callable[[int], int] | None, which: str = "all") -> tuple[list[StepTime], list[int]]:
    """The step's parts (see `time_batch`), each timed once per memo, and how many layers repeat each.

    `which`: "all", "tokens" (the parts that depend on token counts alone) or "sequences" (the rest).
    """
    from workloads import layers

    memo = memo if memo is not None else StepMemo()
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
        pre_key, dec_key = sequence_part_keys(signature, chunks, batch.decodes if mixed else (),
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


def sequence_part_keys(signature: tuple, chunks: tuple, decodes: tuple[int, ...], verifies: tuple[int, ...],
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
