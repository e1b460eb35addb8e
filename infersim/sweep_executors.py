"""Where a sweep's points run: a local process pool (`--jobs`) or a Dask cluster (`--executor dask`), whose
workers live across points; each yields a point's row as it finishes. The packages each needs are checked first, so
that a missing extra is one line naming it before anything is written."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from infersim.sweep_worker import Task, error_text
from infersim.worker_pool import usable_cpus

EXTRA = "pip install 'infersim[sweep]'"
DASK_CONNECT_S = 10  # how long to try reaching --scheduler


class SweepError(ValueError):
    """A sweep that cannot run as asked: one line, exit status 2."""


def check_installed(executor: str) -> None:
    """The optional packages a sweep needs, each a one-line error naming the extra that brings it."""
    try:
        import pyarrow  # noqa: F401  (the Parquet table)
    except ImportError:
        raise SweepError(f"infersim sweep writes Parquet and needs pyarrow: {EXTRA}") from None
    if executor == "dask":
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            raise SweepError(f"--executor dask needs dask.distributed: {EXTRA}") from None


def start(tasks: Sequence[Task], executor: str, jobs: int | None, scheduler: str | None,
          stack: contextlib.ExitStack) -> Iterator[dict[str, Any]]:
    """Each task's row as it finishes, in any order. A Dask cluster is reached now, so that an unreachable scheduler
    fails before any file is written; `stack` closes it."""
    if not tasks:
        return iter(())
    if executor == "dask":
        return _dask_results(tasks, _dask_client(min(jobs or usable_cpus(), len(tasks)), scheduler, stack))
    return _pool_results(tasks, jobs or usable_cpus())


def _pool_results(tasks: Sequence[Task], jobs: int) -> Iterator[dict[str, Any]]:
    import multiprocessing
    from concurrent.futures import as_completed
    from concurrent.futures.process import BrokenProcessPool

    from infersim.sweep_worker import ignore_interrupts, run_point
    from infersim.worker_pool import process_pool

    # forkserver: workers start from a clean process with the simulator imported once (no fork of our threads)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["infersim.sweep_worker"])
    pool = process_pool(min(jobs, len(tasks)), context, ignore_interrupts)
    try:
        futures = [pool.submit(run_point, task) for task in tasks]
        for future in as_completed(futures):
            yield future.result()
    except BrokenProcessPool as err:
        raise SweepError(f"a worker process died ({error_text(err)}); finished points are kept: run again to "
                         "resume") from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _dask_client(workers: int, scheduler: str | None, stack: contextlib.ExitStack) -> Any:
    """A client of the scheduler at `scheduler`, or of a LocalCluster of `workers` single-threaded processes."""
    import logging

    from dask.distributed import Client, LocalCluster

    try:
        if scheduler is not None:
            return stack.enter_context(Client(scheduler, timeout=DASK_CONNECT_S))
        cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                   dashboard_address=None, silence_logs=logging.ERROR))
        return stack.enter_context(Client(cluster))
    except (OSError, TimeoutError) as err:
        where = f"--scheduler {scheduler}" if scheduler else "a Dask LocalCluster"
        raise SweepError(f"{where}: cannot connect: {error_text(err)}") from None


def _dask_results(tasks: Sequence[Task], client: Any) -> Iterator[dict[str, Any]]:
    from dask.distributed import as_completed

    from infersim.sweep_worker import run_point

    futures = client.map(run_point, tasks, pure=False)
    try:
        for future in as_completed(futures):
            yield future.result()
    except Exception as err:  # a worker lost for good (KilledWorker) or the scheduler gone
        raise SweepError(f"the Dask cluster failed ({error_text(err)}); finished points are kept: run again to "
                         "resume") from None
    finally:
        client.cancel(futures)
