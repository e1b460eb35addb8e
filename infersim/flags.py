"""The command line's numbers: every count, size and fraction a flag takes, read as a whole or finite number and
checked against a range before anything is built or allocated.

The ranges are the scenario's own where a flag means a scenario key (`--tp` is `parallel.tp`, `--drafts` is
`spec_decode.drafts`), so that a command refuses what a scenario refuses, with the same words; the rest state their
bounds here with the reason. A refused value is one line that names the flag and prints integers as integers.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from typing import Any

from hwmodels.specfile import Range
from hwmodels.units import parse_size_bytes
from infersim.worker_pool import MAX_JOBS
from simulator.replicates import MAX_REPLICATES

MAX_DIGITS = 40  # longer numbers are refused as text, before Python converts them (its limit is 4,300 digits)
# Assumption: no tensor dimension or element count of one launch needs more than 32 bits (kernels index with int32
# offsets per dimension); a bigger value is a typo, and its time would be a number of no use.
KERNEL_INT = Range(0, 2**31 - 1, "assumption: no dimension or count of one kernel launch needs more than 32 bits")
# Assumption: a message or a buffer of one launch of more than 1 TiB exceeds any GPU node's HBM today (8 x 288 GB).
SIZE_BYTES = Range(0, 2**40, "assumption: no single message or buffer exceeds 1 TiB (more than a node's HBM)")
KERNEL_FLOAT = Range(-1e18, 1e18, "assumption: no kernel option in SI units reaches 1e18")
SEEDS = Range(1, MAX_REPLICATES, "replicates of one scenario (simulator/replicates.py MAX_REPLICATES)")
JOBS = Range(1, MAX_JOBS, "worker processes of one pool (infersim/worker_pool.py MAX_JOBS)")
TRACE_STEPS = Range(1, 10_000_000, "assumption: a Chrome trace of more than 10M steps does not open in a viewer")


class FlagError(ValueError):
    """A flag's value that cannot be used: one line naming the flag."""


def field_range(cls: type, name: str) -> Range:
    """The range a scenario dataclass declares for its field `name` (hwmodels/specfile.py: ranged)."""
    return next(f for f in dataclasses.fields(cls) if f.name == name).metadata["range"]


def _short(text: str) -> str:
    return repr(text if len(text) <= MAX_DIGITS else text[:MAX_DIGITS] + "...")


def whole(text: str, flag: str, bound: Range) -> int:
    """`text` as a whole number within `bound` ('64', '1e6' and '4_096' read; '0.5', 'inf' and 'nan' refused)."""
    text = str(text).strip()
    if len(text) > MAX_DIGITS:
        raise FlagError(f"{flag}: expected a whole number of at most {MAX_DIGITS} digits, got {_short(text)}")
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise FlagError(f"{flag}: expected a whole number, got {_short(text)}") from None
        if not math.isfinite(number) or not number.is_integer():
            raise FlagError(f"{flag}: expected a whole number, got {_short(text)} (valid: {bound.valid()})") from None
        value = int(number)
    problem = bound.problem(value)
    if problem:
        raise FlagError(f"{flag}: {problem}")
    return value


def real(text: str, flag: str, bound: Range) -> float:
    """`text` as a finite number within `bound`."""
    text = str(text).strip()
    try:
        value = float(text)
    except ValueError:
        raise FlagError(f"{flag}: expected a number, got {_short(text)}") from None
    problem = bound.problem(value)
    if problem:
        raise FlagError(f"{flag}: {problem}")
    return value


def size(text: str, flag: str) -> int:
    """A size in bytes ('4KiB', '1e6') within SIZE_BYTES; a one-line error naming `flag` otherwise."""
    if len(str(text)) > MAX_DIGITS:
        raise FlagError(f"{flag}: expected a size of at most {MAX_DIGITS} characters, e.g. 4KiB, 1e6")
    try:
        value = parse_size_bytes(text)
    except ValueError as err:
        raise FlagError(f"{flag}: {err}") from None
    except OverflowError:
        raise FlagError(f"{flag}: expected a finite size, got {_short(str(text))} (valid: {SIZE_BYTES.valid()})"
                        ) from None
    problem = SIZE_BYTES.problem(value)
    if problem:
        raise FlagError(f"{flag}: {problem}")
    return value


def _argparse_type(read: Callable[[str, str, Range], Any], bound: Range) -> Callable[[str], Any]:
    """An argparse `type` of `read` within `bound` (argparse names the flag in its message)."""
    def convert(text: str) -> Any:
        try:
            return read(text, "", bound)
        except FlagError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(": ")) from None
    return convert


def whole_type(bound: Range) -> Callable[[str], int]:
    """An argparse `type` for a whole number within `bound`."""
    return _argparse_type(whole, bound)


def real_type(bound: Range) -> Callable[[str], float]:
    """An argparse `type` for a finite number within `bound`."""
    return _argparse_type(real, bound)
