"""The serving simulation: simpy processes for arrivals and the engine loop; one row per request and per step.

The engine loop asks the scheduler for a batch, asks the cost layer how long that cycle takes
(`CycleCost.cycle_s`, one question per cycle), waits that long in simulated time and commits the
tokens. Agentic sessions run closed-loop: a session's next turn arrives its think time after the
previous turn finishes (`vllm bench serve`-style streams arrive at their own times). Under
`serving.max_concurrency` the client holds an arrived request until one of its slots frees, as the semaphore of
`vllm bench serve --max-concurrency` does; each request's row keeps both its arrival and when it was sent.
Speculative decoding commits a sampled number of tokens per cycle.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from simulator.cost.cycle import CycleCost, CycleShape
from simulator.kvcache import KVCache
from simulator.scheduler import Budget, Sequence, schedule
from simulator.specdecode import Acceptance
from workloads.traces import RequestStream


@dataclass(frozen=True)
class EngineConfig:
    """What the engine loop needs beyond the cost layer."""

    budget: Budget
    closed_loop: bool  # agentic: a session's next turn waits for the previous turn's completion
    max_concurrency: int = 0  # requests in flight at most (0: no cap), as vllm bench serve --max-concurrency
    acceptance: Acceptance | None = None  # speculative decoding acceptance (None: off)
    admit_until_s: float = 0.0  # stop releasing new requests after this time (0: never)
    prefix_caching: bool = True  # False: requests carry no block hashes, so nothing is ever a hit


_NO_HASHES = np.empty(0, dtype=np.uint64)


@dataclass
class _State:
    stream: RequestStream
    waiting: deque[Sequence]
    running: list[Sequence]
    pending: list[tuple[float, int]]  # (arrival time, stream index) heap
    next_turn: dict[int, int]  # stream index -> index of the same session's next turn
    in_flight: int = 0
    done: int = 0
    # Under serving.max_concurrency: slots never taken yet, and a heap of the times the others came free. A
    # request is sent at max(arrival, the earliest free slot's time), as the client's FIFO semaphore lets it go.
    fresh_slots: int = 0
    freed_at: list[float] = field(default_factory=list)


def _sessions(stream: RequestStream) -> tuple[list[int], dict[int, int]]:
    """First turns of every session, and each turn's successor in its session."""
    order = np.lexsort((stream.turn, stream.session_id))
    first, successor = [], {}
    previous_session, previous = -1, -1
    for i in order.tolist():
        if stream.session_id[i] != previous_session:
            first.append(i)
        else:
            successor[previous] = i
        previous_session, previous = int(stream.session_id[i]), i
    return first, successor


def simulate_stream(stream: RequestStream, cost: CycleCost, kv: KVCache, config: EngineConfig,
                    rng: np.random.Generator, progress: Callable[[int, float], None] | None = None
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    """Run the stream to completion; returns (request rows, step rows, simulated seconds)."""
    env = simpy.Environment()
    if config.closed_loop:
        first, successor = _sessions(stream)
        pending = [(float(stream.arrival_s[i]), i) for i in first]
    else:
        successor = {}
        pending = [(float(stream.arrival_s[i]), i) for i in range(len(stream))]
    heapq.heapify(pending)
    state = _State(stream, deque(), [], pending, successor, fresh_slots=config.max_concurrency)
    request_rows: list[dict[str, Any]] = []
    step_rows: list[dict[str, Any]] = []
    env.process(_engine(env, state, cost, kv, config, rng, request_rows, step_rows, progress))
    env.run()
    return request_rows, step_rows, env.now


def _release(state: _State, now: float, config: EngineConfig) -> None:
    while state.pending and state.pending[0][0] <= now:
        if config.max_concurrency and state.in_flight >= config.max_concurrency:
            return
        arrival, i = heapq.heappop(state.pending)
        if config.admit_until_s and arrival > config.admit_until_s:
            continue
        sent = arrival
        if config.max_concurrency:
            if state.fresh_slots:
                state.fresh_slots -= 1
            else:  # every slot freed at or before now; a request that arrived after its slot freed goes at once
                sent = max(arrival, heapq.heappop(state.freed_at))
        s = state.stream
        state.waiting.append(Sequence(
            index=i, request_id=int(s.request_id[i]), session_id=int(s.session_id[i]), turn=int(s.turn[i]),
            arrival_s=arrival, prompt_tokens=int(s.prompt_tokens[i]), output_tokens=max(1, int(s.output_tokens[i])),
            hashes=s.hashes(i) if config.prefix_caching else _NO_HASHES, sent_s=sent))
        state.in_flight += 1


def _engine(env: simpy.Environment, state: _State, cost: CycleCost, kv: KVCache, config: EngineConfig,
            rng: np.random.Generator, request_rows: list, step_rows: list,
            progress: Callable[[int, float], None] | None) -> Any:
    spec = config.acceptance is not None  # decoding sequences verify drafts
    sampler = config.acceptance.keyed_sampler(rng) if config.acceptance is not None else None
    now = env.now  # the engine's clock: steps advance it here, and simpy's clock catches up at each wait
    while True:
        _release(state, now, config)
        if not state.running and not state.waiting:
            if not state.pending:
                yield env.timeout(now - env.now)
                return
            yield env.timeout(max(now, state.pending[0][0]) - env.now)  # idle until the next arrival
            now = env.now
            continue
        decision = schedule(state.running, state.waiting, kv, config.budget, now)
        if not decision.prefills and not decision.decodes:
            if not state.pending:
                raise ValueError("the scheduler can make no progress: a running request cannot grow its KV")
            yield env.timeout(max(now, state.pending[0][0]) - env.now)
            now = env.now
            continue
        in_system = len(state.running) + len(state.waiting)
        decodes = len(decision.decodes)
        histories = [s.computed_tokens + s.generated - s.prefill_target + s.prompt_tokens  # Sequence.context_tokens
                     for s in decision.decodes]
        context = sum(histories)
        prefill_tokens = sum(chunk for _, chunk in decision.prefills)
        stored, loaded = kv.take_transfers()
        step_s = cost.cycle_s(CycleShape(
            len(decision.prefills), prefill_tokens, sum(seq.computed_tokens for seq, _ in decision.prefills),
            decodes, context, stored + loaded, max(histories, default=0)))
        # Steps between waits run back to back: nothing else in the simulation moves while a step runs
        # (arrivals sit in a heap the loop reads), so one simpy event per step would only cost time.
        start, now = now, now + step_s
        committed, cycles, spec_committed = _commit(now, state, decision, kv, config, sampler, request_rows)
        step_rows.append({
            "start_s": start, "end_s": now,
            "prefill_tokens": prefill_tokens,
            "decode_seqs": 0 if spec else decodes, "verify_seqs": decodes if spec else 0,
            "committed_tokens": committed, "spec_cycles": cycles, "spec_committed_tokens": spec_committed,
            "kv_blocks_used": kv.used_blocks, "kv_blocks_total": kv.capacity_blocks,
            "in_system": in_system,
            "in_system_end": len(state.running) + len(state.waiting) + _arrived(state, now),
        })
        if progress is not None:
            progress(state.done, now)


def _arrived(state: _State, now: float) -> int:
    """Requests that have arrived but wait to be released (arrivals during the last step).

    A depth-first walk of the heap that prunes at the first later arrival: O(count), not O(pending).
    """
    heap, count, stack = state.pending, 0, [0] if state.pending else []
    while stack:
        i = stack.pop()
        if heap[i][0] <= now:
            count += 1
            stack.extend(j for j in (2 * i + 1, 2 * i + 2) if j < len(heap))
    return count


def _commit(now: float, state: _State, decision: Any, kv: KVCache, config: EngineConfig,
            sampler: Callable[[list[int], list[int]], list[int]] | None,
            request_rows: list) -> tuple[int, int, int]:
    """Advance prefills, commit decode tokens, finish requests and release their sessions' next turns."""
    committed = cycles = spec_committed = 0
    finished: list[Sequence] = []
    for seq, chunk in decision.prefills:
        seq.computed_tokens += chunk
        if not seq.prefilling and seq.generated == 0:
            seq.generated = 1  # the last prefill chunk samples the first token
            seq.first_token_s = now
            committed += 1
        if seq.generated >= seq.output_tokens:
            finished.append(seq)
    if decision.decodes:
        # drawn by (request, output position), not in batch order: a change that reorders or retimes the batch
        # leaves every request the tokens it commits at each position (common random numbers)
        draws = ([1] * len(decision.decodes) if sampler is None else
                 sampler([s.request_id for s in decision.decodes], [s.generated for s in decision.decodes]))
        if sampler is not None:
            cycles, spec_committed = len(draws), sum(draws)
        for seq, draw in zip(decision.decodes, draws, strict=True):
            left = seq.output_tokens - seq.generated
            if draw >= left:
                seq.generated += left
                committed += left
                finished.append(seq)
            else:
                seq.generated += draw
                committed += draw
    for seq in finished:
        kv.free(seq.request_id)
        state.running.remove(seq)
        state.in_flight -= 1
        state.done += 1
        if config.max_concurrency:
            heapq.heappush(state.freed_at, now)
        request_rows.append({
            "request_id": seq.request_id, "session_id": seq.session_id, "turn": seq.turn,
            "arrival_s": seq.arrival_s, "sent_s": seq.sent_s, "scheduled_s": seq.scheduled_s,
            "first_token_s": seq.first_token_s,
            "finish_s": now, "prompt_tokens": seq.prompt_tokens, "cached_tokens": seq.cached_tokens,
            "output_tokens": seq.output_tokens, "preemptions": seq.preemptions,
        })
        successor = state.next_turn.get(seq.index)
        if successor is not None:
            think = float(state.stream.think_time_s[successor])
            heapq.heappush(state.pending, (now + think, successor))
    return committed, cycles, spec_committed


def wall_clock() -> float:
    """Seconds on the host clock, for sim_speedup (kept apart so tests can see what is timed)."""
    return time.perf_counter()
