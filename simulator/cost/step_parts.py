"""A step's time from memoized parts: layers that share a signature cost the same, and each part is
keyed by exactly what its items' costs depend on (the `Depends` tag every step item carries).

A layer is three signatures: its input (norm or AttnRes mixing, by source count), its mixer (by
mixer type and attention window) and its FFN (MoE or dense). Each signature's items split by tag
into a token part (keyed by the batch's token count), a prefill part (keyed by the prefill chunks,
with their cached prefix only where an item reads it) and a decode part (keyed by the decodes,
verifies and drafts, with their contexts only where an item reads them). Around the stack, the
embedding and final norm are a token part and the LM head, logits gather and sampling a part keyed
by the sampled positions.
`step_time` equals `time_plan(build_step(batch))`; tests hold the two together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from hwmodels.calibration import Calibration
from hwmodels.interconnect import Fabric
from hwmodels.roofline import LaunchMode
from simulator.cost.step_time import (
    PlacedLaunch,
    StepTime,
    TimedItems,
    place,
    step_total_s,
    time_plan,
    timed_launches,
    weighted_sum,
)
from workloads import layers
from workloads.codecs import Codec
from workloads.deployment import Deployment
from workloads.step import Batch, Depends, PrefillChunk, StepItem, StepPlan

Chunks = tuple[tuple[int, int], ...]  # (new tokens, cached tokens) of each prefill chunk

TOKEN_TAGS = frozenset({Depends.TOKENS})
PREFILL_TAGS = frozenset({Depends.PREFILLS, Depends.PREFILL_HISTORY})
DECODE_TAGS = frozenset({Depends.DECODES, Depends.DECODE_HISTORY})
# A batch with every kind of sequence, long enough for any split option: its items show each signature's tags.
PROBE = Batch(prefills=(PrefillChunk(64, 64),), decodes=(1 << 16,), verifies=(1 << 16,), drafts=1)


@dataclass(frozen=True)
class Signature:
    """Layers whose items are the same for every batch: how many, the first one, and what their parts read."""

    key: tuple  # plain values: ("input", sources), ("mixer", "mla", window), ("ffn", is_moe); hashed at every miss
    layers: int
    first_layer: int
    items: Callable[[int, Batch, Deployment], Iterator[StepItem]]
    # the items that depend on the sequences alone, in order (None: `items`, filtered by the part's tags)
    sequence_items: Callable[[int, Batch, Deployment], Iterator[StepItem]] | None
    prefills: bool  # has items of the prefill chunks
    prefill_history: bool  # one of them reads the cached prefix
    decodes: bool  # has items of the decodes and verifies
    decode_history: bool  # one of them reads the contexts


def signatures(deployment: Deployment) -> tuple[Signature, ...]:
    """The deployment's layer signatures, in order of first appearance, with their tags read off a probe batch."""
    m = deployment.model
    counts: dict[tuple, list] = {}
    for layer in range(1, m.layers + 1):
        for key, maker, sequence_maker in (
                (("input", layers.attnres_sources(layer, deployment)), layers.input_items, None),
                (("mixer", m.mixer(layer).value, m.attention_window(layer)), layers.mixer_items,
                 layers.mixer_sequence_items),
                (("ffn", m.is_moe_layer(layer)), layers.ffn_items, None)):
            counts.setdefault(key, [0, layer, maker, sequence_maker])[0] += 1
    found = []
    for key, (count, first, maker, sequence_maker) in counts.items():
        try:
            tags = {item.depends for item in maker(first, PROBE, deployment)}
        except ValueError:  # the probe breaks an option's limits: key by everything (exact, less sharing)
            tags = set(Depends) - {Depends.SAMPLED}
        if Depends.SAMPLED in tags:
            raise ValueError(f"layer items of {key} depend on sampled positions, which only the LM head may")
        found.append(Signature(key, count, first, maker, sequence_maker, bool(tags & PREFILL_TAGS),
                               Depends.PREFILL_HISTORY in tags,
                               bool(tags & DECODE_TAGS), Depends.DECODE_HISTORY in tags))
    return tuple(found)


def token_stand_in(tokens: int, sampled: int) -> Batch:
    """A batch with these token and sampled-position counts, for parts that depend on nothing else.

    Prefill chunks only (each samples its last position): decode kernels of made-up contexts could be
    invalid for a deployment's options (more KV splits than context), and their items are dropped anyway.
    """
    return Batch(prefills=(PrefillChunk(1, 0),) * (sampled - 1) + (PrefillChunk(tokens - sampled + 1, 0),))


class StepParts:
    """Step times of one deployment, assembled from parts each timed once."""

    def __init__(self, deployment: Deployment, fabric: Fabric, calib: Calibration, quickreduce: Codec | None = None,
                 launched_apart: StepParts | None = None):
        """`launched_apart`: the same deployment's parts in another launch mode (its deployment and calibration equal
        these but for the launch mode and the launch costs). The two share each part's items and each kernel's busy
        time, which no launch mode changes, and time their launches each in its own mode."""
        self.deployment, self.fabric, self.calib, self.quickreduce = deployment, fabric, calib, quickreduce
        self.overlap = deployment.options.overlap_collectives
        self.signatures = signatures(deployment)
        self._timed = TimedItems()
        self._parts: dict[tuple, StepTime] = {}
        self._built: dict[tuple, tuple[Batch, tuple[StepItem, ...]]] = {}  # each part's batch and kept items
        if launched_apart is not None:
            if _launch_free(deployment, calib) != _launch_free(launched_apart.deployment, launched_apart.calib):
                raise ValueError("parts are shared only between timings that differ in how kernels launch")
            self._timed.busy, self._built = launched_apart._timed.busy, launched_apart._built
            self._timed.launch_busy = launched_apart._timed.launch_busy
        self._token_sums: dict[tuple[int, int], tuple[float, float]] = {}  # by (tokens, sampled)

    def total_s(self, chunks: Chunks, decodes: tuple[int, ...], verifies: tuple[int, ...], drafts: int,
                tokens: int) -> float:
        """Seconds of the step; token parts are timed at `tokens` (the exact count, or a bucketed one)."""
        sampled = len(chunks) + len(decodes) + len(verifies) * (drafts + 1)
        sums = self._token_sums.get((tokens, sampled))
        if sums is None:
            sums = self._token_sums[(tokens, sampled)] = _pair(self._token_parts(tokens, sampled))
        kernel_s, collective_s = _pair(self._sequence_parts(chunks, decodes, verifies, drafts))
        return step_total_s(kernel_s + sums[0], collective_s + sums[1], self.overlap)

    def step_time(self, batch: Batch) -> StepTime:
        """The step's time with its per-family breakdown, at its exact token count."""
        chunks = tuple((c.tokens, c.cached) for c in batch.prefills)
        parts = [*self._token_parts(batch.tokens, batch.sampled_tokens),
                 *self._sequence_parts(chunks, batch.decodes, batch.verifies, batch.drafts)]
        return weighted_sum(parts, self.overlap)

    def timeline(self, batch: Batch) -> list[PlacedLaunch]:
        """The step's every launch in plan order, timed as its parts are (one memo) and placed on its stream."""
        plan = layers.build_step(batch, self.deployment)
        return place(timed_launches(plan, self.fabric, self.calib, self.quickreduce, self._timed), self.overlap)

    def _part(self, key: tuple, build: Callable[[], tuple[Batch, list[StepItem]]], tags: frozenset[Depends]
              ) -> StepTime:
        """The part of `key`; on a miss, `build` gives its batch and items, which must carry one of `tags`."""
        part = self._parts.get(key)
        if part is None:
            built = self._built.get(key)
            if built is None:
                batch, items = build()
                built = self._built[key] = (batch, tuple(i for i in items if i.depends in tags))
            part = self._parts[key] = time_plan(StepPlan(self.deployment, *built), self.fabric, self.calib,
                                                self.quickreduce, self._timed)
        return part

    def _token_parts(self, tokens: int, sampled: int) -> list[tuple[StepTime, int]]:
        """The parts that depend on the token count or the sampled positions alone, with their weights."""
        d = self.deployment
        stand_in: list[Batch] = []

        def by_tokens() -> Batch:
            if not stand_in:
                stand_in.append(token_stand_in(tokens, sampled))
            return stand_in[0]

        def around(batch: Batch) -> tuple[Batch, list[StepItem]]:
            return batch, [*layers.pre_stack_items(batch, d), *layers.post_stack_items(batch, d)]

        parts = [(self._part(("stack", tokens), lambda: around(by_tokens()), TOKEN_TAGS), 1),
                 (self._part(("sampled", sampled), lambda: around(token_stand_in(sampled, sampled)),
                             frozenset({Depends.SAMPLED})), 1)]
        for s in self.signatures:
            parts.append((self._part((*s.key, "tokens", tokens),
                                     lambda s=s: (by_tokens(), list(s.items(s.first_layer, by_tokens(), d))),
                                     TOKEN_TAGS), s.layers))
        return parts

    def _sequence_parts(self, chunks: Chunks, decodes: tuple[int, ...], verifies: tuple[int, ...], drafts: int
                        ) -> list[tuple[StepTime, int]]:
        """The parts that depend on the prefill chunks, or on the decodes and verifies, with their weights."""
        d = self.deployment
        parts = []
        for s in self.signatures:
            if chunks and s.prefills:
                keyed = chunks if s.prefill_history else tuple((t, 0) for t, _ in chunks)
                parts.append((self._part((*s.key, "prefills", keyed), lambda s=s, c=keyed: _items(
                    s, Batch(prefills=tuple(PrefillChunk(*x) for x in c)), d), PREFILL_TAGS), s.layers))
            if (decodes or verifies) and s.decodes:
                dec, ver = (decodes, verifies) if s.decode_history else ((0,) * len(decodes), (0,) * len(verifies))
                parts.append((self._part((*s.key, "decodes", dec, ver, drafts), lambda s=s, x=dec, v=ver: _items(
                    s, Batch(decodes=x, verifies=v, drafts=drafts), d), DECODE_TAGS), s.layers))
        return parts


def _launch_free(deployment: Deployment, calib: Calibration) -> tuple[Deployment, Calibration]:
    """The deployment and calibration with their launch mode and launch costs left out."""
    return (replace(deployment, options=replace(deployment.options, launch=LaunchMode.GRAPH)),
            replace(calib, launch_eager_s=None, launch_graph_node_s=None))


def _items(signature: Signature, batch: Batch, d: Deployment) -> tuple[Batch, list[StepItem]]:
    """A sequence part's batch and its signature's items, checked against what the probe batch showed."""
    items = list((signature.sequence_items or signature.items)(signature.first_layer, batch, d))
    tags = {item.depends for item in items}
    if ((Depends.PREFILL_HISTORY in tags and not signature.prefill_history)
            or (Depends.DECODE_HISTORY in tags and not signature.decode_history)):
        raise RuntimeError(f"{signature.key}: an item reads history that the probe batch did not show")
    return batch, items


def _pair(parts: list[tuple[StepTime, int]]) -> tuple[float, float]:
    """(kernel seconds, collective seconds) of weighted parts."""
    kernel_s = collective_s = 0.0
    for part, weight in parts:
        kernel_s += weight * part.kernel_s
        collective_s += weight * part.collective_s
    return kernel_s, collective_s
