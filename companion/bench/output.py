"""Where a bench command writes its files, the GPU it runs on, and its exit status when cases failed."""

from __future__ import annotations

import json
import os
import sys
import tempfile
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


def cuda_environment(prog: str) -> dict | None:
    """The provenance of the CUDA GPU a timing command runs on (`timing.environment`), printed with the SM clocks,
    after warming the clocks; None, with the reason on stderr prefixed by prog, without torch or a CUDA GPU."""
    try:
        import torch
    except ImportError:
        print(f"{prog}: torch is not installed; this needs a CUDA GPU with PyTorch", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{prog}: no CUDA GPU visible (torch.cuda.is_available() is False)", file=sys.stderr)
        return None
    from companion.bench import timing

    env = timing.environment()
    print("environment:", env, flush=True)
    print("nvidia-smi:", timing.smi_clocks(), flush=True)
    timing.warm_clocks()
    return env


def start_timing(out: Path | None, prog: str) -> tuple[Path, dict] | int:
    """The output folder and the CUDA GPU's provenance of a timing command, or the exit status when either is
    missing (2 without a folder, 1 without a GPU; the reason is on stderr)."""
    folder = output_folder(out, prog)
    if folder is None:
        return 2
    env = cuda_environment(prog)
    return 1 if env is None else (folder, env)


def report_failures(prog: str, failures: Sequence[str]) -> int:
    """Print failed cases to stderr; the exit status of a run (1 if any case failed)."""
    if not failures:
        return 0
    print(f"{prog}: {len(failures)} case(s) failed:", file=sys.stderr)
    for failure in failures:
        print("  " + failure, file=sys.stderr)
    return 1


def trace_events(prof) -> list[dict]:
    """The events of a finished PyTorch profiler session, as its Chrome trace holds them (kernels carry `cat`
    "kernel", their grid, block, registers, shared memory and CUPTI correlation id in `args`)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())["traceEvents"]
