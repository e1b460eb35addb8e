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

import array
import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from simulator.cost.cycle import CycleCost, CycleShape
from simulator.engine_profiles import FrontEnd, RecvSkipper
from simulator.kvcache import KVCache
from simulator.scheduler import Budget, Sequence, schedule
from simulator.specdecode import Acceptance, KeyedSampler
from workloads.traces import RequestStream

NO_FRONT_END = FrontEnd()  # a bare engine: the client sees tokens as they are made


@dataclass(frozen=True)
class EngineConfig:
    """What the engine loop needs beyond the cost layer."""

    budget: Budget
    closed_loop: bool  # agentic: a session's next turn waits for the previous turn's completion
    max_concurrency: int = 0  # requests in flight at most (0: no cap), as vllm bench serve --max-concurrency
    acceptance: Acceptance | None = None  # speculative decoding acceptance (None: off)
    admit_until_s: float = 0.0  # requests arriving after this time are cut, never sent (0: none are)
    prefix_caching: bool = True  # False: requests carry no block hashes, so nothing is ever a hit
    max_model_len: int = 0  # a request whose prompt + output exceeds it is rejected, as vLLM does (0: no limit)
    recv_interval: int = 1  # while decoding, new requests are taken every this many steps (SGLang's recv skipper)
    # step boundaries a request sent while the engine is busy waits before a step can take it (_receive_cutoff)
    receive_lag_steps: int = 1
    # the serving front end's time around the engine (engine_profiles.FrontEnd): the client sees each request's
    # tokens this long after the engine made them; the engine takes the request as it is sent (the few
    # milliseconds it spends in the front end before are counted after, where the client sees them)
    front_end: FrontEnd = NO_FRONT_END

    def __post_init__(self) -> None:
        if not 0 <= self.admit_until_s < float("inf"):  # NaN fails this too
            raise ValueError(f"admit_until_s must be finite and non-negative, got {self.admit_until_s}")


_NO_HASHES = np.empty(0, dtype=np.uint64)


class Columns:
    """Rows of fixed numeric columns in numpy arrays grown in chunks: a few bytes a row, not a dict per row.

    Rows are appended as tuples to a short buffer and moved into the arrays a chunk at a time, which costs less per
    row than a numpy assignment per value. `rows`, the most rows expected, sizes the arrays at once, so that they
    are not copied as they grow (pages no row reaches are never touched, so they take no memory)."""

    def __init__(self, schema: dict[str, str], chunk: int = 4096, rows: int = 0) -> None:
        self._arrays = [np.empty(max(chunk, rows), dtype=dtype) for dtype in schema.values()]
        self._names = list(schema)
        self._chunk = chunk
        self._buffer: list[tuple[Any, ...]] = []
        self._stored = 0

    def append(self, *values: Any) -> None:
        """One row, its values in the schema's column order."""
        self._buffer.append(values)
        if len(self._buffer) >= self._chunk:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        end = self._stored + len(self._buffer)
        if end > self._arrays[0].size:  # doubling keeps appends amortized O(1)
            size = max(end, 2 * self._arrays[0].size)
            for j, column in enumerate(self._arrays):
                grown = np.empty(size, dtype=column.dtype)
                grown[:self._stored] = column[:self._stored]
                self._arrays[j] = grown
        for column, values in zip(self._arrays, zip(*self._buffer, strict=True), strict=True):
            column[self._stored:end] = values
        self._stored = end
        self._buffer.clear()

    def __len__(self) -> int:
        return self._stored + len(self._buffer)

    def columns(self) -> dict[str, np.ndarray]:
        """The filled part of every column (views, no copy)."""
        self._flush()
        return {name: column[:self._stored] for name, column in zip(self._names, self._arrays, strict=True)}


REQUEST_FIELDS = {
    "request_id": "int64", "session_id": "int64", "turn": "int64", "arrival_s": "float64", "sent_s": "float64",
    "scheduled_s": "float64", "first_token_s": "float64", "finish_s": "float64", "prompt_tokens": "int64",
    "cached_tokens": "int64", "output_tokens": "int64", "preemptions": "int64",
}
STEP_FIELDS = {
    "start_s": "float64", "end_s": "float64", "prefill_tokens": "int64", "decode_seqs": "int64",
    "verify_seqs": "int64", "committed_tokens": "int64", "spec_cycles": "int64", "spec_committed_tokens": "int64",
    "kv_blocks_used": "int64", "kv_blocks_total": "int64", "in_system": "int64", "in_system_end": "int64",
}


class _Pending:
    """Requests not yet arrived or not yet released, popped in (arrival, index) order as a heap of tuples would.

    The stream's own arrivals sit in sorted arrays read by a cursor (8 bytes a request, no tuple each), the one at
    the cursor kept as Python numbers for the loop; only the turns a finished turn releases (closed loop) go through
    a small heap."""

    def __init__(self, times: np.ndarray, indices: np.ndarray) -> None:
        order = np.lexsort((indices, times))
        self._times, self._indices = times[order], indices[order]
        self._head = 0
        self._heap: list[tuple[float, int]] = []
        self._next: tuple[float, int] | None = None
        self._advance(0)

    def _advance(self, head: int) -> None:
        self._head = head
        self._next = ((float(self._times[head]), int(self._indices[head])) if head < self._times.size else None)

    def __len__(self) -> int:
        return self._times.size - self._head + len(self._heap)

    def first(self) -> tuple[float, int]:
        """The next (arrival, index), without taking it."""
        static, heap = self._next, self._heap
        if static is None:
            return heap[0]
        return min(static, heap[0]) if heap else static

    def pop(self) -> tuple[float, int]:
        item = self.first()
        if item is self._next:
            self._advance(self._head + 1)
        else:
            heapq.heappop(self._heap)
        return item

    def take_arrived(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """(arrival times, indices) of every stream arrival by `now`, taken at once; only without a heap."""
        if self._next is None or self._next[0] > now:
            return self._times[:0], self._indices[:0]
        end = int(np.searchsorted(self._times, now, side="right"))
        taken = self._times[self._head:end], self._indices[self._head:end]
        self._advance(end)
        return taken

    @property
    def static_only(self) -> bool:
        return not self._heap

    def push(self, time_s: float, index: int) -> None:
        heapq.heappush(self._heap, (time_s, index))

    def arrived(self, now: float) -> int:
        """How many have arrived by `now`: a binary search, and a walk of the heap pruned at later arrivals."""
        count = 0
        if self._next is not None and self._next[0] <= now:
            count = int(np.searchsorted(self._times, now, side="right")) - self._head
        heap = self._heap
        if not heap or heap[0][0] > now:
            return count
        stack = [0]
        while stack:
            i = stack.pop()
            if heap[i][0] <= now:
                count += 1
                stack.extend(j for j in (2 * i + 1, 2 * i + 2) if j < len(heap))
        return count


class _Waiting:
    """The waiting queue: preempted or already built sequences in front, then released requests kept as their
    stream index and send time until the scheduler reaches them (a Sequence is built only when it is looked at)."""

    def __init__(self, stream: RequestStream, prefix_caching: bool) -> None:
        self._stream, self._prefix_caching = stream, prefix_caching
        self._built: deque[Sequence] = deque()
        self._index: array.array = array.array("q")
        self._arrival: array.array = array.array("d")  # a closed loop's turn arrives its think time after the last
        self._sent: array.array = array.array("d")
        self._head = 0
        self._size = 0  # kept, not counted: the scheduler asks at every step

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def release_many(self, indices: np.ndarray, arrival_s: np.ndarray) -> None:
        """Requests sent as they arrive, in order."""
        self._size += int(indices.size)
        self._index.frombytes(indices.astype(np.int64).tobytes())
        times = arrival_s.astype(np.float64).tobytes()
        self._arrival.frombytes(times)
        self._sent.frombytes(times)

    def release(self, index: int, arrival_s: float, sent_s: float) -> None:
        self._size += 1
        self._index.append(index)
        self._arrival.append(arrival_s)
        self._sent.append(sent_s)

    def _build_next(self) -> None:
        i, arrival, sent = self._index[self._head], self._arrival[self._head], self._sent[self._head]
        self._head += 1
        if self._head > 4096 and 2 * self._head > len(self._index):  # drop the consumed front now and then
            del self._index[:self._head], self._arrival[:self._head], self._sent[:self._head]
            self._head = 0
        s = self._stream
        self._built.append(Sequence(
            index=i, request_id=int(s.request_id[i]), session_id=int(s.session_id[i]), turn=int(s.turn[i]),
            arrival_s=arrival, prompt_tokens=int(s.prompt_tokens[i]),
            output_tokens=max(1, int(s.output_tokens[i])),
            hashes=s.hashes(i) if self._prefix_caching else _NO_HASHES, sent_s=sent))

    def __getitem__(self, position: int) -> Sequence:
        if position != 0:
            raise IndexError("only the front of the waiting queue is read")
        if not self._built:
            if self._head >= len(self._index):
                raise IndexError("the waiting queue is empty")
            self._build_next()
        return self._built[0]

    def popleft(self) -> Sequence:
        front = self[0]
        self._built.popleft()
        self._size -= 1
        return front

    def appendleft(self, seq: Sequence) -> None:
        self._built.appendleft(seq)
        self._size += 1


@dataclass
class _State:
    stream: RequestStream
    waiting: _Waiting
    running: list[Sequence]
    pending: _Pending
    next_turn: dict[int, int]  # stream index -> index of the same session's next turn
    in_flight: int = 0
    done: int = 0
    cut: int = 0  # requests that would arrive after admit_until_s: never sent
    rejected: int = 0  # requests longer than max_model_len: refused when sent, as vLLM answers them
    # Under serving.max_concurrency: slots never taken yet, and a heap of the times the others came free. A
    # request is sent at max(arrival, the earliest free slot's time), as the client's FIFO semaphore lets it go.
    fresh_slots: int = 0
    freed_at: list[float] = field(default_factory=list)
    last_seen_s: float = 0.0  # when the client had the last token of any request (front end included)


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


@dataclass(frozen=True)
class StreamRun:
    """What the engine returns: request and step columns, the clock at the end, and the requests never served."""

    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    simulated_s: float
    cut: int  # arrivals after admit_until_s, never sent
    rejected: int  # requests longer than max_model_len


def simulate_stream(stream: RequestStream, cost: CycleCost, kv: KVCache, config: EngineConfig,
                    rng: np.random.Generator, progress: Callable[[int, float], None] | None = None) -> StreamRun:
    """Run the stream to completion (arrivals after `admit_until_s` cut); columns per request and per step."""
    env = simpy.Environment()
    if config.closed_loop:
        first, successor = _sessions(stream)
        indices = np.asarray(first, dtype=np.int64)
    else:
        successor = {}
        indices = np.arange(len(stream), dtype=np.int64)
    times = stream.arrival_s[indices] if indices.size else np.empty(0)
    cut = 0
    if config.admit_until_s:  # the window ends here: later arrivals never come, so the clock stops with the last
        late = times > config.admit_until_s
        cut = sum(_chain_length(int(i), successor) for i in indices[late]) if config.closed_loop else int(late.sum())
        times, indices = times[~late], indices[~late]
    state = _State(stream, _Waiting(stream, config.prefix_caching), [], _Pending(times, indices), successor,
                   fresh_slots=config.max_concurrency, cut=cut)
    request_rows, step_rows = Columns(REQUEST_FIELDS, rows=len(stream)), Columns(STEP_FIELDS)
    env.process(_engine(env, state, cost, kv, config, rng, request_rows, step_rows, progress))
    env.run()
    # the run lasts until the client has its last token: the front end's time after the engine's last step
    return StreamRun(request_rows.columns(), step_rows.columns(), max(env.now, state.last_seen_s), state.cut,
                     state.rejected)


def _chain_length(index: int, successor: dict[int, int]) -> int:
    """Turns from `index` to the end of its session."""
    count = 0
    while index is not None:
        count, index = count + 1, successor.get(index)
    return count


def _release(state: _State, cutoff: float, config: EngineConfig) -> None:
    """Hand the scheduler every request the client sent by `cutoff`, in arrival order."""
    s = state.stream
    if not config.max_concurrency and not config.closed_loop and state.pending.static_only:
        # open loop without a cap: every arrival by the cutoff is sent as it arrived, in order, so take them at once
        arrival, index = state.pending.take_arrived(cutoff)
        if config.max_model_len and index.size:
            fits = s.prompt_tokens[index] + np.maximum(1, s.output_tokens[index]) <= config.max_model_len
            state.rejected += int(index.size - np.count_nonzero(fits))
            arrival, index = arrival[fits], index[fits]
        state.waiting.release_many(index, arrival)
        state.in_flight += int(index.size)
        return
    while state.pending and state.pending.first()[0] <= cutoff:
        if config.max_concurrency and state.in_flight >= config.max_concurrency:
            return
        arrival, i = state.pending.first()
        if config.max_model_len and int(s.prompt_tokens[i]) + max(1, int(s.output_tokens[i])) > config.max_model_len:
            # vLLM answers such a request with an error at once: it takes no slot, and its session goes on
            state.pending.pop()
            state.rejected += 1
            _next_turn(state, i, arrival, config)
            continue
        sent = arrival
        if config.max_concurrency and not state.fresh_slots:
            # every slot freed before now; a request that arrived after its slot freed goes at once
            sent = max(arrival, state.freed_at[0])
            if sent > cutoff:
                return
            heapq.heappop(state.freed_at)
        elif config.max_concurrency:
            state.fresh_slots -= 1
        state.pending.pop()
        state.waiting.release(i, arrival, sent)
        state.in_flight += 1


def _next_send_s(state: _State, config: EngineConfig) -> float:
    """When the client can send its next request: its arrival, or under a concurrency cap with every slot taken
    once, when the earliest slot frees (the client's, after the front end has handed back the last token)."""
    arrival = state.pending.first()[0]
    if config.max_concurrency and not state.fresh_slots and state.freed_at:
        return max(arrival, state.freed_at[0])
    return arrival


def _receive_cutoff(now: float, starts: deque[float], lag: int) -> float:
    """The latest send time a busy engine's scheduler has seen at the step boundary `now`: a request sent at a
    boundary reaches it after the step that boundary started was formed (the client's round trip is never zero),
    and an engine that forms a step while the previous one runs (SGLang's overlap scheduler) sees it one step
    later still. `starts`: the last steps' start times, latest last."""
    boundaries = [now, *reversed(starts)]
    return math.nextafter(boundaries[min(lag, len(boundaries)) - 1], -math.inf)


def _next_turn(state: _State, index: int, done_s: float, config: EngineConfig) -> None:
    """Release the session's next turn its think time after `done_s`, unless it would arrive after the window."""
    successor = state.next_turn.get(index)
    if successor is None:
        return
    arrival = done_s + float(state.stream.think_time_s[successor])
    if config.admit_until_s and arrival > config.admit_until_s:
        state.cut += _chain_length(successor, state.next_turn)
        return
    state.pending.push(arrival, successor)


def _engine(env: simpy.Environment, state: _State, cost: CycleCost, kv: KVCache, config: EngineConfig,
            rng: np.random.Generator, request_rows: Columns, step_rows: Columns,
            progress: Callable[[int, float], None] | None) -> Any:
    spec = config.acceptance is not None  # decoding sequences verify drafts
    sampler = config.acceptance.keyed_sampler(rng) if config.acceptance is not None else None
    if sampler is not None:  # a request's cycles start at output positions 1 .. output - 1
        sampler.plan(state.stream.request_id, state.stream.output_tokens)
    now = env.now  # the engine's clock: steps advance it here, and simpy's clock catches up at each wait
    skipper = RecvSkipper(config.recv_interval)
    starts: deque[float] = deque(maxlen=max(1, config.receive_lag_steps))
    stalled = False  # the last loop ran no step: the scheduler spins, taking requests as they come
    while True:
        idle = stalled or (not state.running and not state.waiting)
        if skipper.due(idle):
            _release(state, now if idle else _receive_cutoff(now, starts, config.receive_lag_steps), config)
        if not state.running and not state.waiting:
            if not state.pending:
                yield env.timeout(now - env.now)
                return
            yield env.timeout(max(now, _next_send_s(state, config)) - env.now)  # idle until the client sends
            now = env.now
            continue
        decision = schedule(state.running, state.waiting, kv, config.budget, now)
        if not decision.prefills and not decision.decodes:
            if not state.pending:
                raise ValueError("the scheduler can make no progress: a running request cannot grow its KV")
            yield env.timeout(max(now, _next_send_s(state, config)) - env.now)
            now = env.now
            stalled = True
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
        skipper.stepped(decode_only=not decision.prefills)
        starts.append(start)
        stalled = False
        committed, cycles, spec_committed = _commit(now, state, decision, kv, config, sampler, request_rows)
        step_rows.append(  # in STEP_FIELDS order
            start, now, prefill_tokens, 0 if spec else decodes, decodes if spec else 0, committed, cycles,
            spec_committed, kv.used_blocks, kv.capacity_blocks, in_system,
            len(state.running) + len(state.waiting) + state.pending.arrived(now))
        if progress is not None:
            progress(state.done, now)


def _commit(now: float, state: _State, decision: Any, kv: KVCache, config: EngineConfig,
            sampler: KeyedSampler | None,
            request_rows: Columns) -> tuple[int, int, int]:
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
        if sampler is not None:
            sampler.release(seq.request_id)
        state.running.remove(seq)
        state.in_flight -= 1
        state.done += 1
        seen = now + config.front_end.seconds(seq.prompt_tokens)  # when the client has the last token
        if config.max_concurrency:
            heapq.heappush(state.freed_at, seen)
        request_rows.append(  # in REQUEST_FIELDS order
            seq.request_id, seq.session_id, seq.turn, seq.arrival_s, seq.sent_s, seq.scheduled_s,
            seq.first_token_s + (seen - now), seen, seq.prompt_tokens, seq.cached_tokens, seq.output_tokens,
            seq.preemptions)
        state.last_seen_s = max(state.last_seen_s, seen)
        _next_turn(state, seq.index, seen, config)
    return committed, cycles, spec_committed


def wall_clock() -> float:
    """Seconds on the host clock, for sim_speedup (kept apart so tests can see what is timed)."""
    return time.perf_counter()
