"""Files written whole or not at all: a failure or a signal leaves no temporary file behind."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hwmodels import output_files
from hwmodels.output_files import signals_held, write_text_atomic


def test_a_signal_waits_until_the_held_block_ends():
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("still running")  # the signal is pending, not delivered
        steps.append("not reached")  # delivered as the block ends
    assert steps == ["still running"]


def test_a_signal_is_held_while_the_process_has_other_threads():
    """A process-directed signal may go to any thread that does not block it; Python still runs the handler in the
    main thread, so the hold must not depend on which thread the kernel picked."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    steps = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # long enough for the other thread to take it and the main loop to look
                steps.append("still running")
            steps.append("not reached")
    finally:
        stop.set()
        other.join()
    assert steps == ["still running"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the usual handler is back


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "data.csv"
    path.write_text("old\n")

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(output_files.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


def test_a_written_file_is_an_ordinary_file(tmp_path):
    path = tmp_path / "data.csv"
    write_text_atomic(path, "a,b\n1,2\n")
    umask = os.umask(0)
    os.umask(umask)
    assert path.read_text() == "a,b\n1,2\n"
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]
