"""Where a bench command writes its files, and its exit status when cases failed."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path


def output_folder(out: Path | None, prog: str) -> Path | None:
    """`out`, else $OUT, created if missing; None, with the reason on stderr prefixed by prog, if neither is set."""
    out = out if out is not None else (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out is None:
        print(f"{prog}: no output folder: pass --out DIR or set $OUT", file=sys.stderr)
    else:
        out.mkdir(parents=True, exist_ok=True)
    return out


def report_failures(prog: str, failures: Sequence[str]) -> int:
    """Print failed cases to stderr; the exit status of a run (1 if any case failed)."""
    if not failures:
        return 0
    print(f"{prog}: {len(failures)} case(s) failed:", file=sys.stderr)
    for failure in failures:
        print("  " + failure, file=sys.stderr)
    return 1
