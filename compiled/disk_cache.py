"""Results of slow, deterministic computations kept on disk between processes.

The SASS simulation of the validation rows (`compiled.sass_timing`) takes seconds per kernel in Python, and
every process that predicts the rows (the CLI, the notebooks, the report pages) runs the same ones. A function
wrapped by `kept_on_disk` keeps each result, a tuple of floats, under the user's cache folder in a file named
by a hash of its arguments and of what the caller says the result depends on besides them (its source, its
input tables), so a change to any of those computes afresh. Files are written whole or not at all (a
temporary file renamed into place); a damaged one is computed again and rewritten.

INFERSIM_CACHE_DIR sets the folder (default: $XDG_CACHE_HOME/infersim or ~/.cache/infersim);
INFERSIM_NO_CACHE=1 turns the disk off (results are still kept in memory for the process).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from functools import cache, wraps
from pathlib import Path


def cache_folder(name: str) -> Path | None:
    """The folder of one kind of result, or None when the disk cache is off."""
    if os.environ.get("INFERSIM_NO_CACHE"):
        return None
    root = os.environ.get("INFERSIM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "infersim")
    return Path(root) / name


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write(path: Path, value: object) -> None:
    """Written whole or not at all: a temporary file renamed into place (a failure leaves no file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(value))
        os.replace(temporary, path)
    except OSError:
        pass


def kept_on_disk(name: str, depends_on: Callable[..., object]) -> Callable:
    """Decorator: the wrapped function's results (tuples of floats) kept in memory and in `cache_folder(name)`,
    keyed by its arguments and `depends_on(*args)` (called at each lookup)."""

    def wrap(compute: Callable[..., tuple[float, ...]]) -> Callable[..., tuple[float, ...]]:
        @cache
        @wraps(compute)
        def kept(*args) -> tuple[float, ...]:
            folder = cache_folder(name)
            if folder is None:
                return compute(*args)
            key = hashlib.sha256(repr((depends_on(*args), args)).encode()).hexdigest()
            path = folder / f"{key}.json"
            found = _read(path)
            try:
                return tuple(float(v) for v in found)
            except TypeError:
                pass
            result = compute(*args)
            _write(path, list(result))
            return result

        return kept

    return wrap


def kept_json_on_disk(name: str, key_of: Callable[..., str]) -> Callable:
    """Decorator: the wrapped function's results (JSON objects) kept in memory and in `cache_folder(name)`, keyed
    by `key_of(*args)` alone (the arguments need not be hashable: the key must say everything they hold)."""

    def wrap(compute: Callable[..., dict]) -> Callable[..., dict]:
        memory: dict[str, dict] = {}

        @wraps(compute)
        def kept(*args) -> dict:
            key = hashlib.sha256(key_of(*args).encode()).hexdigest()
            if key in memory:
                return memory[key]
            folder = cache_folder(name)
            found = None if folder is None else _read(folder / f"{key}.json")
            if not isinstance(found, dict):
                found = compute(*args)
                if folder is not None:
                    _write(folder / f"{key}.json", found)
            memory[key] = found
            return found

        return kept

    return wrap
