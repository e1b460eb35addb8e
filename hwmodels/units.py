"""Unit suffixes: how a spec key spelled in human units maps to an SI field, and size parsing."""

from __future__ import annotations

import re

# SI suffix of a dataclass field -> {spelling in a spec key: factor to SI}. Longest SI suffix first,
# so that `_bytes_per_s` is not mistaken for `_s`.
SI_SPELLINGS: dict[str, dict[str, float]] = {
    "_bytes_per_s": {
        "_bytes_per_s": 1.0,
        "_gb_per_s": 1e9,
        "_tb_per_s": 1e12,
        "_gib_per_s": 2.0**30,
    },
    "_flop_per_s": {
        "_flop_per_s": 1.0,
        "_gflop_per_s": 1e9,
        "_tflop_per_s": 1e12,
        "_pflop_per_s": 1e15,
    },
    "_usd_per_gpu_hour": {"_usd_per_gpu_hour": 1.0},
    "_bytes": {
        "_bytes": 1.0,
        "_kb": 1e3,
        "_mb": 1e6,
        "_gb": 1e9,
        "_tb": 1e12,
        "_kib": 2.0**10,
        "_mib": 2.0**20,
        "_gib": 2.0**30,
    },
    "_hz": {"_hz": 1.0, "_mhz": 1e6, "_ghz": 1e9},
    "_s": {"_s": 1.0, "_ms": 1e-3, "_us": 1e-6, "_ns": 1e-9},
}


def si_suffix(field_name: str) -> str | None:
    """The SI suffix a field name ends with, or None for a plain count or ratio."""
    for suffix in SI_SPELLINGS:
        if field_name.endswith(suffix):
            return suffix
    return None


def spellings(field_name: str) -> dict[str, float]:
    """Every spec key that may set this field, with its factor to SI."""
    suffix = si_suffix(field_name)
    if suffix is None:
        return {field_name: 1.0}
    stem = field_name[: -len(suffix)]
    return {stem + spelled: factor for spelled, factor in SI_SPELLINGS[suffix].items()}


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_FACTOR = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_size_bytes(text: str) -> int:
    """Bytes from '4KiB', '1MiB', '1GB', '1e6' or '4096'; KB/MB/GB are decimal, KiB/MiB/GiB binary."""
    match = _SIZE.match(str(text))
    if match is None:
        raise ValueError(f"cannot read size {text!r}: use a number with an optional unit, e.g. 4KiB, 1MB, 1e6")
    number, unit = match.groups()
    value = float(number) * _SIZE_FACTOR[(unit or "b").lower()]
    if value < 0 or value != int(value):
        raise ValueError(f"size {text!r} is not a whole, non-negative number of bytes")
    return int(value)
