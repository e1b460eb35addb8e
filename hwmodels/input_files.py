"""Untrusted input files (scenarios, overlays, specs, calibrations, request and profiler traces, CSVs): opened only
when they are regular files, and read only up to a bound of the bytes actually read.

A named pipe blocks its reader until a writer comes, and a device (`/dev/zero`, `/dev/urandom`) never ends while its
`st_size` says 0, so neither the open nor a size check from `stat` can be trusted with them: the kind of file is
checked before it is opened, again on the open descriptor, and the read stops one chunk past the bound.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

CHUNK_BYTES = 16 << 20  # read in bounded pieces: read(n) may set aside n bytes before it reads any


class NotRegularFile(OSError):
    """An input path that names something other than a regular file: a folder, a pipe, a device or a socket."""


class FileTooLarge(OSError):
    """An input file that holds more bytes than its reader takes."""


def kind_of(mode: int) -> str | None:
    """What a file of `mode` is, in words, when it is not a regular file (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse(path: str, mode: int) -> NotRegularFile:
    what = kind_of(mode)
    return NotRegularFile(errno.EINVAL, f"is {what}, not a regular file (infersim reads only regular files)", path)


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """`path` opened to read bytes, if it is a regular file (after links); a NotRegularFile otherwise.

    The kind is checked before the open (which blocks on a pipe and may act on a device) and again on the descriptor,
    so that a path swapped in between is refused too."""
    name = os.fspath(path)
    mode = os.stat(name).st_mode
    if not stat.S_ISREG(mode):
        raise _refuse(name, mode)
    descriptor = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(name, mode)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_at_most(stream: BinaryIO, limit_bytes: int) -> bytes:
    """The rest of `stream`, stopping one chunk past `limit_bytes` (the caller compares the length to its bound)."""
    chunks, total = [], 0
    while total <= limit_bytes:
        chunk = stream.read(min(CHUNK_BYTES, limit_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def too_large(path: str | os.PathLike, limit_bytes: int) -> FileTooLarge:
    return FileTooLarge(errno.EFBIG, f"holds more than {limit_bytes} bytes, the most this reader takes",
                        os.fspath(path))


def read_regular(path: str | os.PathLike, limit_bytes: int) -> bytes:
    """A regular file's bytes; a FileTooLarge when it holds more than `limit_bytes`: at once when its size says
    so (a regular file's size is known), else when as many were read (a file that grows while it is read)."""
    with open_regular(path) as stream:
        if os.fstat(stream.fileno()).st_size > limit_bytes:
            raise too_large(path, limit_bytes)
        data = read_at_most(stream, limit_bytes)
    if len(data) > limit_bytes:
        raise too_large(path, limit_bytes)
    return data
