"""Request streams: what each request asks and when, with the prefix-block hashes a prefix cache keys on.

A stream is a `RequestStream`: one numpy array per field, sorted by arrival, so 10^6 requests cost
megabytes rather than a million objects; iterating it yields frozen `Request`s one at a time.
Generators: `random_stream` (`vllm bench serve --dataset-name random`) and `agentic_stream`
(AgentX-like multi-turn sessions). Readers of trace files live in `workloads.trace_readers`.

Prefix hashes follow vLLM's paged KV cache (reference/formats_and_tools.md §2.7): only full blocks of
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

from workloads.arrivals import ArrivalProcess, Infinite

DEFAULT_BLOCK_TOKENS = 16  # vLLM v1 CacheConfig.DEFAULT_BLOCK_SIZE (reference/formats_and_tools.md §2.7)
_CHUNK_BLOCKS = 1 << 22  # hash this many blocks at a time, bounding temporaries to tens of MB
_TAG_SHARED, _TAG_CHAIN = 1, 2  # separate the key spaces of shared prefixes and per-conversation chains


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


@dataclass(frozen=True, eq=False)
class RequestStream:
    """Requests in arrival order, one numpy array per field (request i is index i of every array).

    Request i's prefix hashes are `hash_pool[hash_start[i] : hash_start[i] + hash_count[i]]`; the turns
    of an agentic session point into one chain, so a conversation's blocks are stored once.
    """

    request_id: np.ndarray
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    session_id: np.ndarray
    turn: np.ndarray
    think_time_s: np.ndarray
    hash_pool: np.ndarray = field(repr=False)
    hash_start: np.ndarray = field(repr=False)
    hash_count: np.ndarray = field(repr=False)
    block_tokens: int = DEFAULT_BLOCK_TOKENS

    def __post_init__(self) -> None:
        _check_int("RequestStream", "block_tokens", self.block_tokens, 1)
        dtypes = {"arrival_s": np.float64, "think_time_s": np.float64, "hash_pool": np.uint64}
        for name in ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "session_id", "turn",
                     "think_time_s", "hash_pool", "hash_start", "hash_count"):
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


def _chain_pool(chain_keys: np.ndarray, chain_blocks: np.ndarray, shared_key: np.ndarray,
                shared_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of many conversations' blocks, the first `shared_blocks` common to all; and each one's start."""
    starts = np.zeros(chain_blocks.size, dtype=np.int64)
    np.cumsum(chain_blocks[:-1], out=starts[1:])
    pool = np.empty(int(chain_blocks.sum()), dtype=np.uint64)
    first = 0
    while first < chain_blocks.size:  # chunks of whole chains, so temporaries stay small at 10^6 requests
        last = max(first + 1, int(np.searchsorted(starts, starts[first] + _CHUNK_BLOCKS, side="right")))
        owner = np.repeat(np.arange(first, last), chain_blocks[first:last])
        index = np.arange(owner.size, dtype=np.int64) + starts[first] - starts[owner]
        keys = np.where(index < shared_blocks, shared_key, chain_keys[owner])
        pool[starts[first] : starts[first] + owner.size] = mix_hash(keys, index)
        first = last
    return pool, starts


def _keys(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Fresh per-stream salts for shared and per-conversation content, so different seeds never collide."""
    salt = rng.integers(0, np.iinfo(np.int64).max, dtype=np.int64)
    return mix_hash(salt, _TAG_SHARED), mix_hash(salt, _TAG_CHAIN)


def random_stream(num_prompts: int, input_len: int, output_len: int, range_ratio: float = 0.0, prefix_len: int = 0,
                  *, arrivals: ArrivalProcess = Infinite(), rng: np.random.Generator,
                  block_tokens: int = DEFAULT_BLOCK_TOKENS) -> RequestStream:
    """`vllm bench serve --dataset-name random`: prompt = shared prefix_len tokens + a uniform random length.

    Input lengths are uniform integers in [floor(input_len*(1-r)), ceil(input_len*(1+r))], output
    lengths likewise; as in vLLM, both low ends are clamped to 1 token. Each request is its own session.
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
    pool, starts = _chain_pool(mix_hash(chain_key, np.arange(n)), counts, shared_key, prefix_len // block_tokens)
    ids = np.arange(n)
    return RequestStream(request_id=ids, arrival_s=arrival_s, prompt_tokens=prompt_tokens, output_tokens=lengths[1],
                         session_id=ids, turn=np.zeros(n, dtype=np.int64), think_time_s=np.zeros(n),
                         hash_pool=pool, hash_start=starts, hash_count=counts, block_tokens=block_tokens)
