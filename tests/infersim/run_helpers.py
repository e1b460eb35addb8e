"""Helpers of the command-line tests that start `infersim` as a process (signals, pipes, kills)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

QUICK = ["--set", "workload.sessions=4", "--set", "workload.turns_mean=4"]


def _interruptible() -> None:
    """In the child before it starts: SIGINT acts as usual. A test run started in the background by a
    non-interactive shell ignores SIGINT, its children inherit that, and Python then leaves SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(argv: list[str], delay_s: float = 0.0, **popen) -> subprocess.Popen:
    """`infersim ARGV` as a child process; `delay_s` pauses after each file of --out (a wider window to hit)."""
    env = {**os.environ, "INFERSIM_WRITE_DELAY_S": str(delay_s)}
    return subprocess.Popen([sys.executable, "-m", "infersim.cli", *argv], env=env, stderr=subprocess.PIPE,
                            preexec_fn=_interruptible, **{"stdout": subprocess.DEVNULL, **popen})


def staging(out: Path) -> list[Path]:
    """The temporary folders a run keeps beside `out`."""
    return [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.infersim-")]


def wait_for_staging(process: subprocess.Popen, out: Path, timeout_s: float = 60.0) -> bool:
    """Wait until the run has begun writing `out` (its temporary folder exists); False if it ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if staging(out):
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.002)
    raise TimeoutError(f"no temporary folder beside {out} after {timeout_s} s")
