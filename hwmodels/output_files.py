"""Files the project writes (calibration overlays, measurement CSVs, reports): written whole or not at all."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then act as usual: a temporary file or folder is made and given
    to the code that removes it with no signal in between.

    In the main thread the signals' Python handlers are swapped for ones that only note the signal, which is raised
    again as the block ends: Python runs its handlers in the main thread whichever thread the kernel hands a
    process-directed signal to, so blocking it in this thread alone would not hold it once the process has other
    threads (a BLAS pool, a worker). Elsewhere, where handlers cannot be set, this thread blocks them."""
    held = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread():
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        return
    noted: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: noted.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(noted):
            signal.raise_signal(s)


def temporary_file(folder: Path, prefix: str) -> tuple[int, str]:
    """A new file in `folder` (its descriptor and path) with the permissions of an ordinary file (mkstemp makes it
    private). Call it with signals held and remove the file in the same try block that follows."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return fd, tmp


def write_text_atomic(path: Path, text: str) -> None:
    """Write text to path unchanged through a temporary file in the same folder, then rename it into place."""
    tmp = None
    try:
        with signals_held():
            fd, tmp = temporary_file(path.parent, f".{path.stem}.")
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise
