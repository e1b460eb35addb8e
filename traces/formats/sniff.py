"""`read_trace`: which profiler wrote a file, told from its content, and the reader for that format.

The content decides, not the file name: gzip (magic 1f 8b) is opened and its content looked at again, an
SQLite database (magic "SQLite format 3") is nsys's export when it has CUPTI tables and rocpd when it has rocpd's,
JSON is a PyTorch profiler trace when it has "traceEvents" (or is a bare list of events) and rocprofv3 output when
it has "rocprofiler-sdk-tool", and CSV is told by its header. Trace files are untrusted input: whatever a file
holds, `read_trace` returns a `Trace` or raises `TraceError`, one line naming the file and the record.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import sqlite3
import tempfile
import zlib
from pathlib import Path

from hwmodels.input_files import open_regular, read_at_most
from traces.formats.kineto import read_kineto
from traces.formats.nsys import find_csv_header, nsys_tables, read_nsys_csv, read_nsys_sqlite
from traces.formats.records import Trace, TraceError, fail, shown
from traces.formats.rocprof import csv_kind, is_rocpd, read_rocpd, read_rocprof_csv, read_rocprof_json

FORMATS = ("kineto", "nsys-sqlite", "nsys-csv", "rocprofv3-csv", "rocprofv3-json", "rocpd")
GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
# Larger files (or gzip contents) are refused before they are read: a JSON parse needs several times the text in
# memory, and a gzip bomb should fail with a message, not take the machine's memory.
MAX_TRACE_BYTES = 4 << 30
_SNIFF_LINES = 64  # a CSV's header is within its first lines (nsys prints a few notices before it)


def read_trace(path: str | os.PathLike, format: str | None = None) -> Trace:
    """Read a profiler's GPU trace; `format` (one of FORMATS) is sniffed from the content when None."""
    try:
        name = os.fspath(path)
    except TypeError:
        raise TraceError(f"{shown(path)}: not a file path") from None
    if format is not None and format not in FORMATS:
        raise fail(name, f"unknown format {shown(format)} (known: {', '.join(FORMATS)})")
    try:
        return _read(name, format)
    except OSError as error:
        raise fail(name, f"cannot be read: {error.strerror or error}") from None
    except sqlite3.Error as error:
        raise fail(name, f"is not a readable SQLite database: {error}") from None
    except (RecursionError, MemoryError) as error:
        raise fail(name, f"is too large or too deeply nested to read ({type(error).__name__})") from None


def _read(name: str, format: str | None) -> Trace:
    """Open, sniff and read one file (a regular file only: a pipe or a device is refused before it is read)."""
    with open_regular(name) as handle:
        size = os.fstat(handle.fileno()).st_size  # a regular file's size is known: refuse a huge one unread
        if size > MAX_TRACE_BYTES:
            raise fail(name, f"is {size} bytes, more than the {MAX_TRACE_BYTES} this reader takes")
        head = handle.read(len(SQLITE_MAGIC))
        if head.startswith(SQLITE_MAGIC):
            return _read_sqlite(name, name, format)
        raw = head + read_at_most(handle, MAX_TRACE_BYTES)
    if len(raw) > MAX_TRACE_BYTES:
        raise fail(name, f"holds more than the {MAX_TRACE_BYTES} bytes this reader takes")
    if raw.startswith(GZIP_MAGIC):
        raw = _gunzip(name, raw)
        if raw.startswith(SQLITE_MAGIC):
            with tempfile.TemporaryDirectory() as folder:
                copy = Path(folder) / "trace.sqlite"
                copy.write_bytes(raw)
                return _read_sqlite(name, str(copy), format)
    return _read_text(name, raw, format)


def _gunzip(name: str, raw: bytes) -> bytes:
    """The content of a gzip file, refused beyond MAX_TRACE_BYTES."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unzipped:
            content = read_at_most(unzipped, MAX_TRACE_BYTES)
    except (OSError, EOFError, zlib.error) as error:
        raise fail(name, f"is a damaged or truncated gzip file ({error or type(error).__name__})") from None
    if len(content) > MAX_TRACE_BYTES:
        raise fail(name, f"holds more than {MAX_TRACE_BYTES} bytes of gzip content")
    return content


def _read_sqlite(name: str, file: str, format: str | None) -> Trace:
    """Read an SQLite database (nsys export or rocpd), opened read-only."""
    if format not in (None, "nsys-sqlite", "rocpd"):
        raise fail(name, f"is an SQLite database, not {format}")
    uri = Path(file).resolve().as_uri() + "?mode=ro&immutable=1"
    connection = sqlite3.connect(uri, uri=True)
    try:
        # names with bytes that are not UTF-8 are kept (replaced), not a failure of the whole file
        connection.text_factory = lambda value: value.decode("utf-8", "replace")
        tables = nsys_tables(connection)
        nsys = any(t.startswith("cupti_activity_kind_") for t in tables) or "stringids" in tables
        if format == "nsys-sqlite" or (format is None and nsys):
            return read_nsys_sqlite(name, connection)
        if format == "rocpd" or is_rocpd(tables):
            return read_rocpd(name, connection, tables)
        raise fail(name, "is an SQLite database with neither nsys tables (CUPTI_ACTIVITY_KIND_KERNEL, StringIds) "
                         "nor rocpd's (kernels)")
    finally:
        connection.close()


def _read_text(name: str, raw: bytes, format: str | None) -> Trace:
    """Read a JSON or CSV trace."""
    if format in ("nsys-sqlite", "rocpd"):
        raise fail(name, f"is not an SQLite database, so not {format}")
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise fail(name, f"is not a known trace format (neither gzip, SQLite nor UTF-8 text: byte {error.start} "
                         f"is {raw[error.start]:#04x})") from None
    stripped = content.lstrip()
    if not stripped:
        raise fail(name, "is empty")
    if format in ("kineto", "rocprofv3-json") or (format is None and stripped[0] in "{["):
        return _read_json(name, stripped, format)
    if format == "nsys-csv":
        return read_nsys_csv(name, content)
    if format == "rocprofv3-csv":
        return read_rocprof_csv(name, content)
    head = content[:1 << 16].splitlines()[:_SNIFF_LINES]
    try:
        rows = list(csv.reader(head))
    except csv.Error:
        rows = []
    if find_csv_header(rows) is not None:
        return read_nsys_csv(name, content)
    first = next((row for row in rows if any(c.strip() for c in row)), None)
    if first is not None and csv_kind(first) is not None:
        return read_rocprof_csv(name, content)
    raise fail(name, "is not a known trace format (no PyTorch profiler JSON, nsys cuda_gpu_trace CSV or rocprofv3 "
                     "CSV header in its first lines)")


def _read_json(name: str, content: str, format: str | None) -> Trace:
    """Parse JSON and read it as a PyTorch profiler trace or rocprofv3 output."""
    try:
        data = json.loads(content)
    except json.JSONDecodeError as error:
        raise fail(name, f"is not valid JSON: {error.msg} at line {error.lineno} column {error.colno} "
                         f"(truncated?)") from None
    except ValueError as error:  # e.g. an integer beyond int()'s digit limit
        raise fail(name, f"is not readable JSON: {error}") from None
    rocprof = isinstance(data, dict) and "rocprofiler-sdk-tool" in data
    if format == "rocprofv3-json" or (format is None and rocprof):
        if not isinstance(data, dict):
            raise fail(name, f"is JSON {type(data).__name__}, not rocprofv3's object")
        return read_rocprof_json(name, data)
    if format is None and not (isinstance(data, list) or (isinstance(data, dict) and "traceEvents" in data)):
        raise fail(name, "is JSON but neither a PyTorch profiler trace (traceEvents) nor rocprofv3 output "
                         "(rocprofiler-sdk-tool)")
    return read_kineto(name, data)
