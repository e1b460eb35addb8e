"""Process pools whose workers die with the infersim process that started them, however it ends.

A pool worker blocks on its task queue, and it holds that queue's writing end itself, so when its parent is killed
(SIGKILL leaves no chance to shut the pool down) it would wait for ever, and with it multiprocessing's forkserver
and resource tracker, which live as long as a worker holds their pipes. Each worker therefore watches the parent's
process: a thread waits on a pidfd of it (Linux 5.3+; elsewhere it polls the pid) and ends the worker at once when
the parent is gone. The forkserver and the tracker then see their pipes close and exit by themselves.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

MAX_JOBS = 1024  # assumption: no machine runs one pool of more than 1,024 worker processes
POLL_S = 0.2  # where no pidfd can be had: how often a worker checks that its parent lives
EXIT_PARENT_GONE = 70  # a worker's exit status when it ends because its parent did (EX_SOFTWARE)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def process_pool(jobs: int, mp_context: Any = None, initializer: Callable[[], None] | None = None) -> Any:
    """A ProcessPoolExecutor of `jobs` workers, each of which exits as soon as this process does."""
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=jobs, mp_context=mp_context, initializer=start_worker,
                               initargs=(os.getpid(), initializer))


def start_worker(parent_pid: int, initializer: Callable[[], None] | None = None) -> None:
    """A pool worker's start: watch `parent_pid`, then run the pool's own initializer."""
    threading.Thread(target=_exit_with, args=(parent_pid,), name="infersim-parent-watch", daemon=True).start()
    if initializer is not None:
        initializer()


def _exit_with(parent_pid: int) -> None:
    """Return never: wait for `parent_pid` to end, then end this process without cleanup (its parent is gone)."""
    try:
        descriptor = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        os._exit(EXIT_PARENT_GONE)
    except (AttributeError, OSError):  # no pidfd here: poll
        while alive(parent_pid):
            time.sleep(POLL_S)
        os._exit(EXIT_PARENT_GONE)
    select.select([descriptor], [], [])  # readable once the process has ended
    os._exit(EXIT_PARENT_GONE)


def alive(pid: int) -> bool:
    """Whether a process of this pid exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
