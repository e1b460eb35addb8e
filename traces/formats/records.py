"""The record every trace reader returns (`TracedKernel`, `Trace`), its one error (`TraceError`), and the checks
the readers share: numbers that must be finite, durations that must be positive, names that must be text.

A reader checks each GPU record on its own. A bad record raises `BadRecord` with what is wrong; the reader's
`Collector` counts it, keeps up to five examples, and goes on. When no record is good, the first bad one becomes
the `TraceError`, so a file whose every kernel is broken fails with a message naming that kernel.
"""

from __future__ import annotations

import math
import reprlib
from collections import defaultdict
from dataclasses import dataclass

KINDS = ("kernel", "memcpy", "memset")
MAX_REASONS = 5
_NAME_CHARS = 60  # a kernel name in a message is cut here: templated names run to kilobytes
_SHORT = reprlib.Repr()  # values in messages: never the whole of a big one
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel = 80, 80, 3


class TraceError(ValueError):
    """A trace file that cannot be read: one line naming the file and the record."""


class BadRecord(Exception):
    """One GPU record of a trace that cannot be used; the message says what is wrong with it."""


@dataclass(frozen=True)
class TracedKernel:
    """One GPU activity (kernel, copy or fill) as a profiler recorded it."""

    name: str  # as the profiler wrote it (demangled where the format has it)
    start_s: float  # on the GPU clock, absolute as in the file: only differences matter
    duration_s: float
    stream: str  # stream or queue id as text, "" if unknown
    device: int  # GPU index, 0 if unknown
    op: str | None = None  # the CPU-side op that launched it (Kineto: e.g. "aten::mm"), if known
    shapes: tuple | None = None  # that op's input shapes, e.g. ((16, 5120), (5120, 1024)), if recorded
    dtypes: tuple | None = None  # that op's input types as the profiler wrote them, if recorded
    grid: tuple[int, int, int] | None = None  # workgroups (blocks) per dimension
    block: tuple[int, int, int] | None = None  # threads per workgroup per dimension
    kind: str = "kernel"  # "kernel", "memcpy" or "memset": copies and fills are GPU time too
    bytes: int | None = None  # a copy's or fill's bytes, where the profiler records them

    def __post_init__(self):
        if not (math.isfinite(self.start_s) and math.isfinite(self.duration_s) and self.duration_s > 0
                and math.isfinite(self.start_s + self.duration_s)):
            raise ValueError(f"{self.name!r}: start {self.start_s} s, duration {self.duration_s} s (need finite, "
                             f"duration > 0)")
        if self.kind not in KINDS:
            raise ValueError(f"{self.name!r}: kind {self.kind!r} is not one of {KINDS}")

    @property
    def end_s(self) -> float:
        """When it finished, on the same clock as start_s."""
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class Trace:
    """The GPU activities of one trace file, sorted by start, with the records that were dropped."""

    path: str
    format: str  # "kineto", "nsys-sqlite", "nsys-csv", "rocprofv3-csv", "rocprofv3-json" or "rocpd"
    kernels: tuple[TracedKernel, ...]
    skipped: int = 0  # records dropped as malformed
    skipped_reasons: tuple[str, ...] = ()  # up to five examples, each naming its record
    gpu_name: str = ""  # the GPU the file names (Kineto's deviceProperties, Nsight's TARGET_INFO_GPU), "" if none

    def busy_s(self) -> float:
        """GPU-busy time: the union of the activities' intervals on each device, summed over devices."""
        by_device: dict[int, list[TracedKernel]] = defaultdict(list)
        for k in self.kernels:
            by_device[k.device].append(k)
        total = 0.0
        for kernels in by_device.values():
            # from the device's first start: clocks since 1970 leave a float no digits for short kernels' ends
            origin = min(k.start_s for k in kernels)
            intervals = sorted((k.start_s - origin, k.start_s - origin + k.duration_s) for k in kernels)
            begin, end = intervals[0]
            for start, stop in intervals[1:]:
                if start > end:
                    total += end - begin
                    begin, end = start, stop
                else:
                    end = max(end, stop)
            total += end - begin
        return total

    def devices(self) -> tuple[int, ...]:
        """The GPU indices the trace holds activities of."""
        return tuple(sorted({k.device for k in self.kernels}))


class Collector:
    """Gathers a reader's kernels and its dropped records, and makes the `Trace` (or the error) at the end."""

    def __init__(self, path: str, fmt: str):
        self.path, self.format = path, fmt
        self.kernels: list[TracedKernel] = []
        self.skipped = 0
        self.reasons: list[str] = []
        self.gpu_name = ""  # the GPU the file says it was recorded on, where it says

    def add(self, kernel: TracedKernel) -> None:
        """Keep one good record."""
        self.kernels.append(kernel)

    def skip(self, reason: str) -> None:
        """Drop one bad record; `reason` names the record and what is wrong with it."""
        self.skipped += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(one_line(reason))

    def trace(self, nothing: str = "has no GPU kernels") -> Trace:
        """The trace; a TraceError when no record was good (the first bad one, or `nothing` when there was none)."""
        if not self.kernels:
            if self.skipped:
                more = f" (and {self.skipped - 1} more bad records)" if self.skipped > 1 else ""
                raise fail(self.path, self.reasons[0] + more)
            raise fail(self.path, nothing)
        ordered = sorted(self.kernels, key=lambda k: (k.start_s, k.device, k.stream, k.name))
        return Trace(self.path, self.format, tuple(ordered), self.skipped, tuple(self.reasons), self.gpu_name)


def make_kernel(**fields) -> TracedKernel:
    """A TracedKernel from a reader; its own checks failing (an end beyond the float range) as BadRecord."""
    try:
        return TracedKernel(**fields)
    except ValueError:
        raise BadRecord(f"has an unusable time: start {shown(fields.get('start_s'))} s, duration "
                        f"{shown(fields.get('duration_s'))} s") from None


def fail(path: str, problem: str) -> TraceError:
    """The one error shape: the file, then the record and what is wrong, on one line."""
    return TraceError(one_line(f"{path}: {problem}"))


def one_line(text: str) -> str:
    """Text with its line breaks and other control characters shown as escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def quoted(name: object) -> str:
    """A record's name for a message: in quotes, cut to a readable length."""
    text = one_line(name[: _NAME_CHARS + 1] if isinstance(name, str) else _SHORT.repr(name))
    return f'"{text[:_NAME_CHARS]}..."' if len(text) > _NAME_CHARS else f'"{text}"'


def shown(value: object) -> str:
    """A field's value for a message, cut to a readable length."""
    text = one_line(_SHORT.repr(value))
    return text[:40] + "..." if len(text) > 40 else text


def number(value: object, what: str) -> float:
    """A finite number from a JSON number, an SQLite value or a numeric string; BadRecord otherwise."""
    if value is None or value == "":
        raise BadRecord(f"has no {what}")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadRecord(f"has a non-numeric {what} {shown(value)}")
    try:
        result = float(value)
    except (ValueError, OverflowError):
        raise BadRecord(f"has a non-numeric {what} {shown(value)}") from None
    if not math.isfinite(result):
        raise BadRecord(f"has a non-finite {what} {shown(value)}")
    return result


def integer(value: object, what: str, minimum: int | None = 0) -> int:
    """An integer (a whole JSON number or numeric string) at least `minimum`; BadRecord otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        result = value
    elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        try:
            result = int(value)
        except ValueError:  # beyond the digit limit of int()
            raise BadRecord(f"has a non-numeric {what} {shown(value)}") from None
    else:
        real = number(value, what)
        if not real.is_integer():
            raise BadRecord(f"has a non-integer {what} {shown(value)}")
        result = int(real)
    if minimum is not None and result < minimum:
        raise BadRecord(f"has a negative {what} {result}")
    return result


def optional_integer(value: object) -> int | None:
    """An integer >= 0 when the value is one, else None (for fields that only describe a record)."""
    try:
        return None if value is None or value == "" else integer(value, "value")
    except BadRecord:
        return None


def triple(values: object) -> tuple[int, int, int] | None:
    """Three integers >= 0 (a grid or block) from a sequence, or None when it is not one."""
    if not isinstance(values, list | tuple) or len(values) != 3:
        return None
    parsed = tuple(optional_integer(v) for v in values)
    return None if None in parsed else parsed  # type: ignore[return-value]


def workgroups(grid: tuple[int, int, int] | None, block: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    """Workgroups per dimension from a grid counted in work-items (HSA's convention) and the workgroup size."""
    if grid is None or block is None or 0 in block:
        return None
    return tuple(-(-g // b) for g, b in zip(grid, block, strict=True))  # type: ignore[return-value]


def seconds(elapsed: float, unit_s: float, what: str = "duration") -> float:
    """A positive time in seconds from a count of `unit_s`; BadRecord when it is zero or negative."""
    if elapsed < 0:
        raise BadRecord(f"has a negative {what} {elapsed:g} {unit_name(unit_s)}")
    if elapsed == 0:
        raise BadRecord(f"has a zero {what}")
    result = elapsed * unit_s
    if not math.isfinite(result) or result <= 0:
        raise BadRecord(f"has an unusable {what} {elapsed:g} {unit_name(unit_s)}")
    return result


def count(value: object, what: str) -> int | float:
    """A timestamp as the file counts it: an exact int when it is whole (ns since 1970 exceed a float's 53 bits)."""
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        try:
            value = int(value)
        except ValueError:  # beyond the digit limit of int()
            raise BadRecord(f"has a non-numeric {what} {shown(value)}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) >= 2**96:  # no clock counts this far: keep products and sums finite
            raise BadRecord(f"has an out-of-range {what} {shown(value)}")
        return value
    return number(value, what)


def span(start: object, end: object, unit_s: float) -> tuple[float, float]:
    """(start_s, duration_s) from a start and an end counted in `unit_s`; the duration is exact for integers."""
    first, last = count(start, "start"), count(end, "end")
    return first * unit_s, seconds(last - first, unit_s)


def text(value: object, what: str = "name") -> str:
    """A non-empty string field; BadRecord otherwise."""
    if not isinstance(value, str):
        raise BadRecord(f"has no {what}" if value is None else f"has a non-text {what} {shown(value)}")
    if not value.strip():
        raise BadRecord(f"has no {what}")
    return value


# the time units of report headers: "Start (ns)", "Duration (us)", and nsys 2021's "Start(sec)", "Duration(nsec)"
UNITS_S = {"ns": 1e-9, "nsec": 1e-9, "us": 1e-6, "usec": 1e-6, "μs": 1e-6, "µs": 1e-6, "ms": 1e-3, "msec": 1e-3,
           "s": 1.0, "sec": 1.0}


def unit_name(unit_s: float) -> str:
    """The short name of a time unit given in seconds."""
    return {1e-9: "ns", 1e-6: "us", 1e-3: "ms", 1.0: "s"}.get(unit_s, f"x {unit_s:g} s")
