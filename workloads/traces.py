"""Request streams: what each request asks and when, with the prefix-block hashes a prefix cache keys on.

A stream is a `RequestStream`: one numpy array per field, sorted by arrival, so 10^6 requests cost
megabytes rather than a million objects; iterating it yields frozen `Request`s one at a time.
Generators: `random_stream` (`vllm bench serve --dataset-name random`) and `agentic_stream`
(AgentX-like multi-turn sessions). Readers of trace files live in `workloads.trace_readers`.

Prefix hashes follow vLLM v1's paged KV cache (vllm/v1/core/kv_cache_utils.py): only full blocks of
`block_tokens` are hashed, and a block's hash stands for the whole prefix up to its end, so a cache
hit needs an unbroken run from block 0. Synthetic prompts have no token ids; their content is
append-only per conversation, so a block is identified by (the key of the conversation that wrote
it, its index), and `mix_hash` of that pair plays the part of vLLM's chained hash.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from workloads.arrivals import ArrivalProcess, Infinite, Poisson

DEFAULT_BLOCK_TOKENS = 16  # vLLM v1 CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py)
_CHUNK_BLOCKS = 1 << 22  # hash this many blocks at a time, bounding temporaries to tens of MB
_WINDOW_BLOCKS = 1 << 16  # a ChainPool keeps about this many blocks' hashes (512 KB) made at once
_TAG_SHARED, _TAG_CHAIN = 1, 2  # separate the key spaces of shared prefixes and per-conversation chains
_ALL_AT_ONCE = Infinite()  # random_stream's default, as vllm bench serve's default --request-rate inf
# Assumption: ~0.25 sessions/s keeps ~70 sessions of ~280 s open at once, within the --max-num-seqs
# of 20 to 128 of the InferenceX agentic recipes (Kimi K3 study).
DEFAULT_SESSION_ARRIVALS = Poisson(rate_per_s=0.25)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """Steele et al.'s splitmix64 finalizer on uint64 arrays (wrapping arithmetic is intended)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def mix_hash(a: object, b: object) -> np.ndarray:
    """A 64-bit hash of two uint64 keys (arrays broadcast): synthetic stand-in for hashing block content."""
    a = np.atleast_1d(np.asarray(a, dtype=np.uint64))
    b = np.atleast_1d(np.asarray(b, dtype=np.uint64))
    return _splitmix64(_splitmix64(a) ^ b)


def _check_int(owner: str, name: str, value: object, minimum: int) -> int:
    """Raise ValueError naming owner.name unless value is an integer >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{owner}.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_real(owner: str, name: str, value: object, minimum: float, strict: bool = False) -> float:
    """Raise ValueError naming owner.name unless value is a finite number >= (or > if strict) minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        raise ValueError(f"{owner}.{name} must be {'>' if strict else '>='} {minimum}, got {value}")
    return float(value)


@dataclass(frozen=True)
class Request:
    """One request; session_id, turn and think_time_s let the simulator re-time an agentic turn on completion."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    session_id: int
    turn: int
    prefix_hashes: tuple[int, ...] = ()
    think_time_s: float = 0.0  # pause between the previous turn's completion and this turn (tool run, user)

    def __post_init__(self) -> None:
        for name, minimum in (("request_id", 0), ("prompt_tokens", 1), ("output_tokens", 0), ("session_id", 0)):
            _check_int("Request", name, getattr(self, name), minimum)
        _check_int("Request", "turn", self.turn, 0)
        _check_real("Request", "arrival_s", self.arrival_s, 0.0)
        _check_real("Request", "think_time_s", self.think_time_s, 0.0)
        if not isinstance(self.prefix_hashes, tuple):
            raise ValueError(f"Request.prefix_hashes must be a tuple, got {type(self.prefix_hashes).__name__}")


def _column(name: str, values: object, dtype: type) -> np.ndarray:
    """A read-only 1-D view of a column; integer columns refuse floats rather than truncating them."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"RequestStream.{name} must be one-dimensional, got shape {array.shape}")
    if array.size and np.dtype(dtype).kind in "iu" and array.dtype.kind not in "iu":
        raise ValueError(f"RequestStream.{name} must hold integers, got dtype {array.dtype}")
    view = array.astype(dtype, copy=False).view()
    view.setflags(write=False)
    return view


class ChainPool:
    """Prefix hashes of many conversations' chains, made when they are read instead of stored (8 bytes a block).

    Chain c's blocks lie at [starts[c], starts[c] + blocks[c]); block j of a chain hashes as `mix_hash(shared_key,
    j)` below `shared_blocks` (the prefix common to all chains) and as `mix_hash(mix_hash(chain_key, c), j)` after.
    Slicing gives those values; the window of whole chains made for the last slice is kept, so reading requests in
    order costs one vectorized hashing per window. `np.asarray` gives the whole pool, stored.
    """

    def __init__(self, starts: np.ndarray, blocks: np.ndarray, chain_key: np.ndarray, shared_key: np.ndarray,
                 shared_blocks: int) -> None:
        self._starts, self._blocks = starts, blocks
        self._chain_key, self._shared_key, self._shared_blocks = chain_key, shared_key, shared_blocks
        self.size = int(starts[-1] + blocks[-1]) if blocks.size else 0
        self._window_start = 0
        self._window = np.empty(0, dtype=np.uint64)

    def __getitem__(self, part: slice) -> np.ndarray:
        """The hashes at [part.start, part.stop), read-only (contiguous slices only)."""
        if not isinstance(part, slice) or part.step not in (None, 1):
            raise TypeError("ChainPool takes contiguous slices only")
        start, stop, _ = part.indices(self.size)
        stop = max(start, stop)
        offset = start - self._window_start
        if offset < 0 or stop - self._window_start > self._window.size:
            self._fill(start, stop)
            offset = start - self._window_start
        return self._window[offset : offset + stop - start]

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        """The whole pool, stored (built a chunk of chains at a time)."""
        pool = np.empty(self.size, dtype=np.uint64)
        first = 0
        while first < self._blocks.size:
            last = self._chains_after(first, _CHUNK_BLOCKS)
            pool[self._starts[first] : self._starts[first] + self._chain_blocks(first, last)] = self._hash(first, last)
            first = last
        return pool if dtype is None else pool.astype(dtype)

    def _fill(self, start: int, stop: int) -> None:
        """Make the window: the chains holding [start, stop), and later ones up to _WINDOW_BLOCKS blocks."""
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        last = max(int(np.searchsorted(self._starts, stop, side="left")), self._chains_after(first, _WINDOW_BLOCKS))
        window = self._hash(first, last)
        window.setflags(write=False)
        self._window_start, self._window = int(self._starts[first]), window

    def _chains_after(self, first: int, blocks: int) -> int:
        """The end of the run of whole chains from `first` that holds about `blocks` blocks (at least one chain)."""
        end = int(np.searchsorted(self._starts, self._starts[first] + blocks, side="right"))
        return min(max(first + 1, end), self._blocks.size)

    def _chain_blocks(self, first: int, last: int) -> int:
        """Blocks in chains [first, last)."""
        return int(self._starts[last - 1] + self._blocks[last - 1] - self._starts[first])

    def _hash(self, first: int, last: int) -> np.ndarray:
        """The hashes of chains [first, last), in pool order."""
        owner = np.repeat(np.arange(first, last), self._blocks[first:last])
        index = np.arange(owner.size, dtype=np.int64) + self._starts[first] - self._starts[owner]
        chain_keys = mix_hash(self._chain_key, np.arange(first, last))
        return mix_hash(np.where(index < self._shared_blocks, self._shared_key, chain_keys[owner - first]), index)

    def repeats(self) -> int | None:
        """Entries equal to an earlier entry, when the keys settle it without hashing the pool; else None.

        `mix_hash(k, j)` is `splitmix64(splitmix64(k) ^ j)` and splitmix64 is a bijection, so two blocks share a
        hash exactly when their `splitmix64(k) ^ j` agree, and that needs their keys' `splitmix64` to agree above
        the bits an index takes. When those top bits differ between every chain and the shared prefix, the only
        repeats are the shared prefix's blocks in every chain after the first that reaches them.
        """
        if not self.size:
            return 0
        bits = np.uint64(int(self._blocks.max() - 1).bit_length())
        tops = _splitmix64(mix_hash(self._chain_key, np.arange(self._blocks.size))) >> bits
        if self._shared_blocks:
            tops = np.append(tops, _splitmix64(self._shared_key) >> bits)
        tops.sort()
        if (tops[1:] == tops[:-1]).any():
            return None
        shared = np.minimum(self._blocks, self._shared_blocks)
        return int(shared.sum() - shared.max())


@dataclass(frozen=True, eq=False)
class RequestStream:
    """Requests in arrival order, one numpy array per field (request i is index i of every array).

    Request i's prefix hashes are `hash_pool[hash_start[i] : hash_start[i] + hash_count[i]]`; the turns
    of an agentic session point into one chain, so a conversation's blocks are stored once. The pool is a uint64
    array, or a `ChainPool` that makes the hashes when they are read.
    """

    request_id: np.ndarray
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    session_id: np.ndarray
    turn: np.ndarray
    think_time_s: np.ndarray
    hash_pool: np.ndarray | ChainPool = field(repr=False)
    hash_start: np.ndarray = field(repr=False)
    hash_count: np.ndarray = field(repr=False)
    block_tokens: int = DEFAULT_BLOCK_TOKENS

    def __post_init__(self) -> None:
        _check_int("RequestStream", "block_tokens", self.block_tokens, 1)
        dtypes = {"arrival_s": np.float64, "think_time_s": np.float64, "hash_pool": np.uint64}
        for name in ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "session_id", "turn",
                     "think_time_s", "hash_pool", "hash_start", "hash_count"):
            if not (name == "hash_pool" and isinstance(self.hash_pool, ChainPool)):
                object.__setattr__(self, name, _column(name, getattr(self, name), dtypes.get(name, np.int64)))
        n = self.request_id.size
        for name in ("arrival_s", "prompt_tokens", "output_tokens", "session_id", "turn", "think_time_s",
                     "hash_start", "hash_count"):
            if getattr(self, name).size != n:
                raise ValueError(f"RequestStream.{name} has {getattr(self, name).size} entries, expected {n}")
        for name, minimum in (("request_id", 0), ("prompt_tokens", 1), ("output_tokens", 0), ("session_id", 0),
                              ("turn", 0), ("hash_start", 0), ("hash_count", 0)):
            if n and getattr(self, name).min() < minimum:
                raise ValueError(f"RequestStream.{name} must be >= {minimum}, got {getattr(self, name).min()}")
        for name in ("arrival_s", "think_time_s"):
            values = getattr(self, name)
            if n and not (np.all(np.isfinite(values)) and values.min() >= 0):
                raise ValueError(f"RequestStream.{name} must be finite and non-negative")
        if np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("RequestStream.arrival_s must be sorted (non-decreasing)")
        if np.unique(self.request_id).size != n:
            raise ValueError("RequestStream.request_id must be unique")
        if n and np.max(self.hash_start + self.hash_count) > self.hash_pool.size:
            raise ValueError("RequestStream.hash_start + hash_count runs past the end of hash_pool")
        if np.any(self.hash_count * self.block_tokens > self.prompt_tokens):
            raise ValueError("RequestStream.hash_count: more full blocks than the prompt has tokens")

    def __len__(self) -> int:
        return int(self.request_id.size)

    def hashes(self, i: int) -> np.ndarray:
        """Request i's prefix hashes as a read-only uint64 view: what a simulator should use in its loop."""
        start = int(self.hash_start[i])
        return self.hash_pool[start : start + int(self.hash_count[i])]

    def request(self, i: int) -> Request:
        """Request i as a frozen object (its hashes copied into a tuple of Python ints)."""
        return Request(int(self.request_id[i]), float(self.arrival_s[i]), int(self.prompt_tokens[i]),
                       int(self.output_tokens[i]), int(self.session_id[i]), int(self.turn[i]),
                       tuple(self.hashes(i).tolist()), float(self.think_time_s[i]))

    def __iter__(self) -> Iterator[Request]:
        return (self.request(i) for i in range(len(self)))

    @classmethod
    def from_requests(cls, requests: Sequence[Request], block_tokens: int = DEFAULT_BLOCK_TOKENS) -> RequestStream:
        """A stream of hand-made requests, stably sorted by arrival; their ids are kept."""
        ordered = sorted(requests, key=lambda r: r.arrival_s)
        counts = np.array([len(r.prefix_hashes) for r in ordered], dtype=np.int64)
        try:
            pool = np.fromiter(chain.from_iterable(r.prefix_hashes for r in ordered), np.uint64, int(counts.sum()))
        except (OverflowError, TypeError, ValueError):
            raise ValueError("Request.prefix_hashes must be integers in [0, 2**64)") from None
        starts = np.zeros_like(counts)
        np.cumsum(counts[:-1], out=starts[1:])
        return cls(
            request_id=[r.request_id for r in ordered], arrival_s=[r.arrival_s for r in ordered],
            prompt_tokens=[r.prompt_tokens for r in ordered], output_tokens=[r.output_tokens for r in ordered],
            session_id=[r.session_id for r in ordered], turn=[r.turn for r in ordered],
            think_time_s=[r.think_time_s for r in ordered], hash_pool=pool, hash_start=starts,
            hash_count=counts, block_tokens=block_tokens,
        )

    def with_arrivals(self, arrivals: ArrivalProcess, rng: np.random.Generator) -> RequestStream:
        """The same requests in the same order, re-timed by `arrivals` (replaying a trace at another rate)."""
        if len(self) and self.turn.max() > 0:
            raise ValueError("with_arrivals: the stream has multi-turn sessions, whose turns the simulator times")
        return _replace_arrivals(self, arrivals.sample(len(self), rng))


def _replace_arrivals(stream: RequestStream, arrival_s: np.ndarray) -> RequestStream:
    """A copy of `stream` with new arrival times (already sorted)."""
    fields = {name: getattr(stream, name) for name in stream.__dataclass_fields__}
    return RequestStream(**{**fields, "arrival_s": arrival_s})


def _starts(blocks: np.ndarray) -> np.ndarray:
    """Where each of consecutive runs of `blocks` entries starts."""
    starts = np.zeros(blocks.size, dtype=np.int64)
    np.cumsum(blocks[:-1], out=starts[1:])
    return starts


def _keys(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Fresh per-stream salts for shared and per-conversation content, so different seeds never collide."""
    salt = rng.integers(0, np.iinfo(np.int64).max, dtype=np.int64)
    return mix_hash(salt, _TAG_SHARED), mix_hash(salt, _TAG_CHAIN)


def random_stream(num_prompts: int, input_len: int, output_len: int, range_ratio: float = 0.0, prefix_len: int = 0,
                  *, arrivals: ArrivalProcess = _ALL_AT_ONCE, rng: np.random.Generator,
                  block_tokens: int = DEFAULT_BLOCK_TOKENS) -> RequestStream:
    """`vllm bench serve --dataset-name random`: prompt = shared prefix_len tokens + a uniform random length.

    Input lengths are uniform integers in [floor(input_len*(1-r)), ceil(input_len*(1+r))], output
    lengths likewise; the low ends are clamped to 1 token (vLLM clamps the output's; an empty prompt is no
    request). Each request is its own session, and its own hashes follow the shared prefix's.
    """
    n = _check_int("random_stream", "num_prompts", num_prompts, 1)
    _check_int("random_stream", "input_len", input_len, 1)
    _check_int("random_stream", "output_len", output_len, 1)
    _check_int("random_stream", "prefix_len", prefix_len, 0)
    _check_int("random_stream", "block_tokens", block_tokens, 1)
    ratio = _check_real("random_stream", "range_ratio", range_ratio, 0.0)
    if ratio >= 1.0:
        raise ValueError(f"random_stream.range_ratio must be in [0, 1), got {range_ratio}")
    shared_key, chain_key = _keys(rng)
    arrival_s = arrivals.sample(n, rng)
    lengths = []
    for mean in (input_len, output_len):
        low, high = max(math.floor(mean * (1 - ratio)), 1), max(math.ceil(mean * (1 + ratio)), 1)
        lengths.append(rng.integers(low, high + 1, size=n, dtype=np.int64))
    prompt_tokens = prefix_len + lengths[0]
    counts = prompt_tokens // block_tokens
    starts = _starts(counts)
    pool = ChainPool(starts, counts, chain_key, shared_key, prefix_len // block_tokens)
    ids = np.arange(n)
    return RequestStream(request_id=ids, arrival_s=arrival_s, prompt_tokens=prompt_tokens, output_tokens=lengths[1],
                         session_id=ids, turn=np.zeros(n, dtype=np.int64), think_time_s=np.zeros(n),
                         hash_pool=pool, hash_start=starts, hash_count=counts, block_tokens=block_tokens)


def _lognormal_tokens(rng: np.random.Generator, mean: float, sigma: float, size: int) -> np.ndarray:
    """Token counts with the given mean and log-space sigma, rounded, at least 1 (none if the mean is 0)."""
    if mean == 0:
        return np.zeros(size, dtype=np.int64)
    draws = rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, size)
    return np.maximum(np.rint(draws), 1).astype(np.int64)


def _segment_cumsum(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Running sums restarting at every segment; `first[i]` is the index where element i's segment starts."""
    total = np.cumsum(values)
    return total - (total[first] - values[first])


@dataclass(frozen=True)
class AgenticConfig:
    """An AgentX-like agentic coding workload (Kimi K3 study: AgentX has >96% theoretical prefix reuse).

    The defaults are assumptions shaped to that description, not fitted to the AgentX traces: a
    shared 8k-token system prompt (instructions + tool schemas), ~40 turns per session, and each
    turn appends the last answer (~250 tokens), a tool output (~1k) and a short prompt (~150). A
    request's prompt is then ~60k tokens on average, and the longest conversations pass the 142k-token
    decode-context-parallel example of the Kimi K3 study until the context limit ends them. Reuse comes
    out at ~0.97-0.98.
    Lengths are lognormal with the given mean and log-space sigma; turns are geometric.
    """

    sessions: int = 128
    turns_mean: float = 40.0  # geometric number of turns per session (>= 1), mean turns_mean
    max_turns: int = 400
    system_prompt_tokens: int = 8192  # shared by every session
    first_prompt_tokens_mean: float = 1000.0  # the task statement, with any pasted files
    first_prompt_log_sigma: float = 0.8
    tool_output_tokens_mean: float = 1000.0  # file reads, command output, search results
    tool_output_log_sigma: float = 1.0
    prompt_tokens_mean: float = 150.0  # new instructions added each later turn
    prompt_log_sigma: float = 0.8
    output_tokens_mean: float = 250.0  # the assistant's answer or tool call
    output_log_sigma: float = 0.8
    think_time_mean_s: float = 2.0  # exponential pause before each later turn (tool run, user)
    session_arrivals: ArrivalProcess = DEFAULT_SESSION_ARRIVALS  # when sessions start
    assumed_turn_latency_s: float | None = None  # None: output tokens / assumed_decode_tok_per_s
    assumed_decode_tok_per_s: float = 50.0  # the Kimi K3 study's target interactivity
    max_context_tokens: int = 262144  # Kimi K2.5's max_position_embeddings ([S42a][S42b], hwmodels/specs/SOURCES.md)

    def __post_init__(self) -> None:
        _check_int("AgenticConfig", "sessions", self.sessions, 1)
        _check_real("AgenticConfig", "turns_mean", self.turns_mean, 1.0)
        _check_int("AgenticConfig", "max_turns", self.max_turns, 1)
        _check_int("AgenticConfig", "system_prompt_tokens", self.system_prompt_tokens, 0)
        _check_int("AgenticConfig", "max_context_tokens", self.max_context_tokens, 2)
        for name in ("first_prompt", "output"):
            _check_real("AgenticConfig", f"{name}_tokens_mean", getattr(self, f"{name}_tokens_mean"), 1.0)
        for name in ("tool_output", "prompt"):
            _check_real("AgenticConfig", f"{name}_tokens_mean", getattr(self, f"{name}_tokens_mean"), 0.0)
        for name in ("first_prompt", "tool_output", "prompt", "output"):
            _check_real("AgenticConfig", f"{name}_log_sigma", getattr(self, f"{name}_log_sigma"), 0.0)
        _check_real("AgenticConfig", "think_time_mean_s", self.think_time_mean_s, 0.0)
        _check_real("AgenticConfig", "assumed_decode_tok_per_s", self.assumed_decode_tok_per_s, 0.0, strict=True)
        if self.assumed_turn_latency_s is not None:
            _check_real("AgenticConfig", "assumed_turn_latency_s", self.assumed_turn_latency_s, 0.0)
        if not isinstance(self.session_arrivals, ArrivalProcess):
            raise ValueError(f"AgenticConfig.session_arrivals must be an arrival process, "
                             f"got {self.session_arrivals!r}")


def agentic_stream(config: AgenticConfig, rng: np.random.Generator,
                   block_tokens: int = DEFAULT_BLOCK_TOKENS) -> RequestStream:
    """Multi-turn sessions in which each turn's prompt is the whole conversation so far plus new input.

    Turn t arrives at turn t-1's arrival + an assumed service time + think_time_s[t]. That is open
    loop; the closed loop (turn t waits for turn t-1 to really finish) belongs to the simulator, which
    can re-time each turn from its session_id, turn and think_time_s.
    """
    _check_int("agentic_stream", "block_tokens", block_tokens, 1)
    c = config
    shared_key, chain_key = _keys(rng)
    start_s = c.session_arrivals.sample(c.sessions, rng)
    turns = np.minimum(rng.geometric(1.0 / c.turns_mean, size=c.sessions), c.max_turns).astype(np.int64)
    first_prompt = _lognormal_tokens(rng, c.first_prompt_tokens_mean, c.first_prompt_log_sigma, c.sessions)
    total = int(turns.sum())
    tool = _lognormal_tokens(rng, c.tool_output_tokens_mean, c.tool_output_log_sigma, total)
    prompt = _lognormal_tokens(rng, c.prompt_tokens_mean, c.prompt_log_sigma, total)
    output = _lognormal_tokens(rng, c.output_tokens_mean, c.output_log_sigma, total)
    think_s = rng.exponential(c.think_time_mean_s, size=total) if c.think_time_mean_s > 0 else np.zeros(total)

    session = np.repeat(np.arange(c.sessions), turns)
    first = np.repeat(np.cumsum(turns) - turns, turns)  # index of each turn's session's first turn
    turn = np.arange(total) - first
    opening = turn == 0
    previous_output = np.where(opening, 0, np.roll(output, 1))
    added = np.where(opening, c.system_prompt_tokens + first_prompt[session], previous_output + tool + prompt)
    prompt_tokens = _segment_cumsum(added, first)
    think_s = np.where(opening, 0.0, think_s)
    latency_s = output / c.assumed_decode_tok_per_s if c.assumed_turn_latency_s is None else (
        np.full(total, c.assumed_turn_latency_s))
    step_s = np.where(opening, 0.0, np.roll(latency_s, 1) + think_s)
    arrival_s = start_s[session] + _segment_cumsum(step_s, first)

    too_long = (prompt_tokens + output > c.max_context_tokens).astype(np.int64)
    keep = _segment_cumsum(too_long, first) == 0  # a session ends before its first turn that would not fit
    session, turn, prompt_tokens, output, think_s, arrival_s = (
        a[keep] for a in (session, turn, prompt_tokens, output, think_s, arrival_s))
    chain_blocks = np.zeros(c.sessions, dtype=np.int64)
    np.maximum.at(chain_blocks, session, prompt_tokens // block_tokens)
    starts = _starts(chain_blocks)
    pool = np.asarray(ChainPool(starts, chain_blocks, chain_key, shared_key, c.system_prompt_tokens // block_tokens))
    order = np.lexsort((turn, session, arrival_s))
    return RequestStream(request_id=np.arange(order.size), arrival_s=arrival_s[order],
                         prompt_tokens=prompt_tokens[order], output_tokens=output[order], session_id=session[order],
                         turn=turn[order], think_time_s=think_s[order], hash_pool=pool,
                         hash_start=starts[session[order]], hash_count=prompt_tokens[order] // block_tokens,
                         block_tokens=block_tokens)


def theoretical_prefix_reuse(stream: RequestStream | Sequence[Request], block_tokens: int | None = None) -> float:
    """Reused / total prompt tokens with an unlimited cache: full blocks whose hash an earlier request had.

    `block_tokens` defaults to the stream's own (16 for a plain list of requests). Hashes are chained,
    so a block seen before implies its whole prefix was; that lets each request be checked by bisection.
    """
    if not isinstance(stream, RequestStream):
        stream = RequestStream.from_requests(stream, block_tokens or DEFAULT_BLOCK_TOKENS)
    elif block_tokens is not None and block_tokens != stream.block_tokens:
        raise ValueError(f"block_tokens = {block_tokens} differs from the stream's block_tokens = "
                         f"{stream.block_tokens}; synthetic hashes cannot be re-blocked")
    total_tokens = int(stream.prompt_tokens.sum())
    if total_tokens == 0:
        return 0.0
    seen: set[int] = set()
    reused_blocks = 0
    for i in range(len(stream)):
        hashes = stream.hashes(i)
        low, high = 0, hashes.size  # blocks [0, low) were seen; find the first one that was not
        while low < high:
            mid = (low + high) // 2
            if int(hashes[mid]) in seen:
                low = mid + 1
            else:
                high = mid
        reused_blocks += low
        seen.update(hashes[low:].tolist())
    return reused_blocks * stream.block_tokens / total_tokens
