"""Trace files -> `RequestStream`: Mooncake JSONL, the Azure LLM inference CSV, and a plain CSV.

Trace files are untrusted input, so they are read with `json` and `csv` only, one line at a time,
and a bad line raises ValueError naming the file, its 1-based line number and the problem. Rows out
of time order are not an error (merged traces interleave): the stream is sorted by arrival, stably,
and request_id keeps each row's 0-based position in the file. An empty trace is an error.
Formats: Mooncake's FAST25 release (kvcache-ai/Mooncake, FAST25-release/README.md and traces/*.jsonl) and
the Azure LLM inference traces (Azure/AzurePublicDataset, AzureLLMInferenceDataset2023.md and 2024.md).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from hwmodels.input_files import open_regular
from workloads.traces import DEFAULT_BLOCK_TOKENS, RequestStream, mix_hash

MOONCAKE_BLOCK_TOKENS = 512  # tokens per Mooncake hash_id (checked on the FAST25 release files)
_MOONCAKE_TAG = 0x4D4F4F4E  # "MOON": keeps derived hashes apart from the synthetic streams' key space
_EPOCH = datetime(1970, 1, 1)
# Bounds of trace input. Assumptions: a Mooncake line holds at most ~20k hash ids (10M tokens / 512), well under
# 1 MB; a CSV field is at most the csv module's default 131,072 characters; 10M requests and 10M tokens a request
# match the scenario's bounds (simulator/scenario.py); arrival and think times within 1e10 s (~317 years) of the
# trace's start.
MAX_LINE_CHARS = 1_000_000
MAX_ROWS = 10_000_000
MAX_TOKENS = 10_000_000
MAX_SECONDS = 1e10


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and, where known, the line."""


def _fail(path: Path, line: int, problem: str) -> ValueError:
    """The one error shape for bad trace input: file, 1-based line and what is wrong."""
    return TraceError(f"{path}: line {line}: {problem}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _integer(path: Path, line: int, name: str, value: object, minimum: int, maximum: int = MAX_TOKENS) -> int:
    """An integer field >= minimum; JSON numbers like 12.0 pass, strings must spell an integer."""
    if isinstance(value, str):
        try:
            value = int(value) if len(value) <= 40 else value
        except ValueError:
            raise _fail(path, line, f"{name} must be an integer, got {_shown(value)}") from None
    elif isinstance(value, float) and value.is_integer() and abs(value) <= maximum:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, line, f"{name} must be an integer in {minimum}..{maximum}, got {_shown(value)}")
    if value < minimum:
        raise _fail(path, line, f"{name} must be >= {minimum}, got {_shown(value)}")
    if value > maximum:
        raise _fail(path, line, f"{name} must be <= {maximum} (assumption: trace bounds), got {_shown(value)}")
    return value


def _real(path: Path, line: int, name: str, value: object, minimum: float | None = None,
          maximum: float = MAX_SECONDS) -> float:
    """A finite number field (JSON's NaN and Infinity are rejected) in [minimum, maximum]."""
    try:
        number = float(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else math.nan
    except (ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number):
        raise _fail(path, line, f"{name} must be a finite number, got {_shown(value)}")
    if minimum is not None and number < minimum:
        raise _fail(path, line, f"{name} must be >= {minimum}, got {_shown(value)}")
    if abs(number) > maximum:
        raise _fail(path, line, f"{name} must be within {maximum:g} (assumption: ~317 years), got {_shown(value)}")
    return number


def _lines(path: Path, stream: Any) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of a binary stream read as UTF-8 (a leading byte order mark dropped), each line
    at most MAX_LINE_CHARS bytes and at most MAX_ROWS lines."""
    line_no = 0
    while True:
        line_no += 1
        data = stream.readline(MAX_LINE_CHARS + 1)
        if not data:
            return
        if len(data) > MAX_LINE_CHARS and not data.endswith(b"\n"):
            raise _fail(path, line_no, f"longer than {MAX_LINE_CHARS} bytes")
        try:
            text = data.decode("utf-8-sig" if line_no == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise _fail(path, line_no, f"not UTF-8 text (byte {err.start + 1}: {err.reason})") from None
        if line_no > MAX_ROWS:
            raise _fail(path, line_no, f"more than {MAX_ROWS} lines (assumption: 10M requests at most)")
        yield line_no, text


def _stream(path: Path, arrival_s: list[float], prompt: list[int], output: list[int], *, block_tokens: int,
            session: list[int] | None = None, turn: list[int] | None = None, think_s: list[float] | None = None,
            pool: np.ndarray | None = None, counts: np.ndarray | None = None) -> RequestStream:
    """Assemble columns read in file order into a stream sorted (stably) by arrival."""
    n = len(arrival_s)
    if n == 0:
        raise TraceError(f"{path}: the trace has no requests")
    counts = np.zeros(n, dtype=np.int64) if counts is None else counts
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    order = np.argsort(np.asarray(arrival_s, dtype=np.float64), kind="stable")
    ids = np.arange(n)
    return RequestStream(
        request_id=ids[order], arrival_s=np.asarray(arrival_s)[order], prompt_tokens=np.asarray(prompt)[order],
        output_tokens=np.asarray(output)[order], session_id=(ids if session is None else np.asarray(session))[order],
        turn=np.zeros(n, dtype=np.int64) if turn is None else np.asarray(turn)[order],
        think_time_s=np.zeros(n) if think_s is None else np.asarray(think_s)[order],
        hash_pool=np.zeros(0, dtype=np.uint64) if pool is None else pool, hash_start=starts[order],
        hash_count=counts[order], block_tokens=block_tokens,
    )


def _mooncake_hashes(ids: list[int], id_counts: list[int], hashed: np.ndarray, per_id: int) -> np.ndarray:
    """Re-block Mooncake ids: id j gives `per_id` hashes chained from it; keep each request's first `hashed`."""
    derived = np.empty((len(ids), per_id), dtype=np.uint64)
    h = mix_hash(_MOONCAKE_TAG, np.asarray(ids, dtype=np.uint64))
    for k in range(per_id):
        h = mix_hash(h, k)
        derived[:, k] = h
    counts = np.asarray(id_counts, dtype=np.int64)
    first = np.repeat((np.cumsum(counts) - counts) * per_id, counts * per_id)  # where each one's request begins
    keep = np.arange(derived.size) - first < np.repeat(hashed, counts * per_id)
    return derived.ravel()[keep]


def read_mooncake(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                  trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> RequestStream:
    """Read a Mooncake JSONL trace: timestamp (ms), input_length, output_length, hash_ids (512-token blocks).

    Arrivals are seconds after the earliest timestamp. Each Mooncake block expands to
    trace_block_tokens / block_tokens engine blocks whose hashes chain from its id (so a shared id
    means shared engine blocks); the prompt's partial tail block is not hashed, nor are tokens that
    hash_ids do not cover. Other keys (AIPerf's messages, tools, ...) are ignored.
    """
    path = Path(path)
    sizes = (block_tokens, trace_block_tokens)
    if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in sizes) or trace_block_tokens % block_tokens:
        raise ValueError(f"block_tokens = {block_tokens} must divide trace_block_tokens = {trace_block_tokens}")
    per_id = trace_block_tokens // block_tokens
    stamps_s: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    ids: list[int] = []
    id_counts: list[int] = []
    with _open(path) as lines:
        for line_no, text in _lines(path, lines):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as err:
                raise _fail(path, line_no, f"not valid JSON ({err.msg})") from None
            except RecursionError:
                raise _fail(path, line_no, "not valid JSON (nested too deeply)") from None
            except ValueError as err:  # a number of more digits than Python converts
                raise _fail(path, line_no, f"not valid JSON ({str(err)[:80]})") from None
            if not isinstance(record, dict):
                raise _fail(path, line_no, f"expected a JSON object, got {type(record).__name__}")
            for key in ("timestamp", "input_length", "output_length", "hash_ids"):
                if key not in record:
                    raise _fail(path, line_no, f"missing key {key!r}")
            stamps_s.append(_real(path, line_no, "timestamp", record["timestamp"]) / 1000.0)  # written in ms
            prompt.append(_integer(path, line_no, "input_length", record["input_length"], 1))
            output.append(_integer(path, line_no, "output_length", record["output_length"], 0))
            hash_ids = record["hash_ids"]
            if not isinstance(hash_ids, list):
                raise _fail(path, line_no, f"hash_ids must be a list, got {type(hash_ids).__name__}")
            if len(hash_ids) > -(-prompt[-1] // trace_block_tokens):
                raise _fail(path, line_no, f"{len(hash_ids)} hash_ids for {prompt[-1]} tokens "
                                           f"(at most one per {trace_block_tokens}-token block)")
            for h in hash_ids:
                ids.append(_integer(path, line_no, "each of hash_ids", h, 0, 2**64 - 1))
                if ids[-1] >= 2**64:
                    raise _fail(path, line_no, f"hash_ids must be below 2**64, got {_shown(h)}")
            id_counts.append(len(hash_ids))
    hashed = np.minimum(np.asarray(prompt, dtype=np.int64) // block_tokens, np.asarray(id_counts) * per_id)
    pool = _mooncake_hashes(ids, id_counts, hashed, per_id) if prompt else None
    start_s = min(stamps_s, default=0.0)
    arrival_s = [t - start_s for t in stamps_s]
    return _stream(path, arrival_s, prompt, output, block_tokens=block_tokens, pool=pool, counts=hashed)


def _csv_rows(path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Iterator[tuple[int, dict]]:
    """(line number, row as a dict) of a CSV whose header has all required columns and only known ones."""
    with _open(path) as stream:
        reader = csv.reader(text for _, text in _lines(path, stream))
        try:
            yield from _csv_checked(path, reader, required, optional)
        except csv.Error as err:
            raise _fail(path, max(reader.line_num, 1), f"not a CSV row ({err})") from None


def _open(path: Path) -> Any:
    """A trace file opened for `_lines`; a file that cannot be opened is named with the reason."""
    try:
        return open_regular(path)
    except OSError as err:
        raise TraceError(f"{str(path)[:200]}: cannot read: {err.strerror or err}") from None


def _csv_checked(path: Path, reader: Any, required: tuple[str, ...],
                 optional: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """The rows of `_csv_rows`, from an open reader."""
    header = next(reader, None)
    if header is None:
        raise TraceError(f"{path}: the trace has no requests (empty file)")
    columns = [name.strip() for name in header]
    missing = [name for name in required if name not in columns]
    unknown = [name for name in columns if name not in required + optional]
    if missing or unknown or len(set(columns)) != len(columns):
        expected = ",".join(required) + (f" (optional: {','.join(optional)})" if optional else "")
        raise _fail(path, 1, f"unexpected columns {_shown(columns)} (missing {missing}, unknown {_shown(unknown)}); "
                             f"expected {expected}")
    for row in reader:
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) != len(columns):
            raise _fail(path, reader.line_num, f"expected {len(columns)} fields, got {len(row)}")
        yield reader.line_num, dict(zip(columns, (cell.strip() for cell in row), strict=True))


def _azure_ticks(path: Path, line: int, text: str) -> int:
    """Integer 1 ns ticks since 1970 of an Azure TIMESTAMP such as '2023-11-16 18:15:46.6805900' (7 digits kept)."""
    base, _, fraction = text.partition(".")
    try:
        moment = datetime.fromisoformat(base)
        if fraction and not fraction.isdigit():
            raise ValueError(fraction)
    except ValueError:
        raise _fail(path, line, f"TIMESTAMP is not a date and time: {text!r}") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    whole_s = (moment - _EPOCH) // timedelta(seconds=1)
    return whole_s * 10**9 + int((fraction + "000000000")[:9])


def read_azure(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> RequestStream:
    """Read an Azure LLM inference trace (TIMESTAMP,ContextTokens,GeneratedTokens); it has no prefix hashes.

    Arrivals are seconds after the earliest TIMESTAMP, computed in integer 1 ns ticks so that the
    trace's 100 ns ticks survive.
    """
    path = Path(path)
    ticks: list[int] = []
    prompt: list[int] = []
    output: list[int] = []
    for line, row in _csv_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        ticks.append(_azure_ticks(path, line, row["TIMESTAMP"]))
        prompt.append(_integer(path, line, "ContextTokens", row["ContextTokens"], 1))
        output.append(_integer(path, line, "GeneratedTokens", row["GeneratedTokens"], 0))
    first_tick = min(ticks, default=0)
    arrival_s = [(t - first_tick) / 1e9 for t in ticks]
    return _stream(path, arrival_s, prompt, output, block_tokens=block_tokens)


def read_csv_trace(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> RequestStream:
    """Read our plain CSV: arrival_s,prompt_tokens,output_tokens, optionally session_id,turn and think_time_s.

    Arrival times are kept as written (seconds, not shifted). Without session_id and turn, each row
    is its own session; the two come together or not at all. It has no prefix hashes.
    """
    path = Path(path)
    columns: dict[str, list] = {name: [] for name in ("arrival_s", "prompt", "output", "session", "turn", "think")}
    optional = ("session_id", "turn", "think_time_s")
    with_sessions: bool | None = None
    for line, row in _csv_rows(path, ("arrival_s", "prompt_tokens", "output_tokens"), optional):
        if with_sessions is None:
            with_sessions = "session_id" in row
            if with_sessions != ("turn" in row):
                raise _fail(path, 1, "session_id and turn must be given together")
        columns["arrival_s"].append(_real(path, line, "arrival_s", row["arrival_s"], 0.0))
        columns["prompt"].append(_integer(path, line, "prompt_tokens", row["prompt_tokens"], 1))
        columns["output"].append(_integer(path, line, "output_tokens", row["output_tokens"], 0))
        if with_sessions:
            columns["session"].append(_integer(path, line, "session_id", row["session_id"], 0, MAX_ROWS))
            columns["turn"].append(_integer(path, line, "turn", row["turn"], 0, MAX_ROWS))
        if "think_time_s" in row:
            columns["think"].append(_real(path, line, "think_time_s", row["think_time_s"], 0.0))
    return _stream(path, columns["arrival_s"], columns["prompt"], columns["output"], block_tokens=block_tokens,
                   session=columns["session"] if with_sessions else None,
                   turn=columns["turn"] if with_sessions else None, think_s=columns["think"] or None)


class TraceFormat(Enum):
    """The trace formats infersim reads, each with its reader."""

    MOONCAKE = "mooncake"
    AZURE = "azure"
    CSV = "csv"

    @property
    def reader(self) -> Callable[..., RequestStream]:
        """The function that reads this format."""
        return {TraceFormat.MOONCAKE: read_mooncake, TraceFormat.AZURE: read_azure,
                TraceFormat.CSV: read_csv_trace}[self]

    @classmethod
    def parse(cls, text: str) -> TraceFormat:
        """The format named `text`; the error lists the valid names."""
        try:
            return cls(str(text).lower())
        except ValueError:
            raise ValueError(f"unknown trace format {text!r} (valid: {', '.join(f.value for f in cls)})") from None


def read_trace(path: str | Path, trace_format: TraceFormat | str,
               block_tokens: int = DEFAULT_BLOCK_TOKENS) -> RequestStream:
    """Read a trace file of the given format (a TraceFormat or its name, as a scenario spells it)."""
    fmt = trace_format if isinstance(trace_format, TraceFormat) else TraceFormat.parse(trace_format)
    return fmt.reader(path, block_tokens=block_tokens)
