"""SIGKILL to `infersim sweep` and `infersim run --seeds` leaves no process behind: the pool's workers, the
forkserver and the resource tracker are all gone within 3 s (they would otherwise hold the caller's pipes open)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.infersim.run_helpers import start

GONE_WITHIN_S = 3.0
START_LIMIT_S = 120.0


def _children() -> dict[int, list[int]]:
    """Every process's children, read from /proc (pid -> child pids)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, as they are now."""
    children, found, todo = _children(), [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an ended process its new parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_when_busy(argv: list[str], processes: int) -> list[int]:
    """Start `infersim ARGV`, wait until it has `processes` descendants at work, SIGKILL it; the descendants."""
    process = start(argv, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while len(descendants(process.pid)) < processes:
            assert process.poll() is None, f"infersim {' '.join(argv)} ended before its pool started"
            assert time.monotonic() < deadline, f"no {processes} worker processes after {START_LIMIT_S} s"
            time.sleep(0.05)
        time.sleep(0.5)  # the workers are running points now
        pool = descendants(process.pid)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return pool


def left_after(pool: list[int]) -> list[int]:
    """The processes of `pool` still running GONE_WITHIN_S after the kill."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline and any(running(pid) for pid in pool):
        time.sleep(0.05)
    left = [pid for pid in pool if running(pid)]
    for pid in left:  # do not leave them to the rest of the test run
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc (Linux)")
def test_sigkill_to_a_sweep_leaves_no_worker_forkserver_or_tracker(tmp_path):
    argv = ["sweep", "default", "--grid", "parallel.dcp=1,2,4,8", "--grid", "serving.max_num_seqs=32,64",
            "--out", str(tmp_path / "sweep"), "--jobs", "2"]
    pool = kill_when_busy(argv, processes=4)  # the forkserver, the resource tracker and two workers
    assert len(pool) >= 4
    assert left_after(pool) == [], "processes left after SIGKILL to infersim sweep"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc (Linux)")
def test_sigkill_to_run_seeds_leaves_no_worker():
    pool = kill_when_busy(["run", "--seeds", "6", "--jobs", "2"], processes=2)
    assert len(pool) >= 2
    assert left_after(pool) == [], "processes left after SIGKILL to infersim run --seeds"
