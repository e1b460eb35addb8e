"""Where infersim may write: regular files (a link is followed and its target written), and folders it made.

Nothing infersim writes replaces what the path names unless that is a regular file: a device, a named pipe, a socket
or a folder in a file's place is refused with one line, and a link stays a link. A folder is infersim's when it holds
the marker file `.infersim`, which only infersim writes (its version, what wrote the folder, and the files it wrote);
a run replaces such a folder only when it holds nothing else, and a sweep adds to its own folder only.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hwmodels.input_files import kind_of, read_regular
from hwmodels.output_files import signals_held, temporary_file

MARKER = ".infersim"
MARKER_MAX_BYTES = 1_000_000
WRITTEN_BY = "infersim"
RUN, SWEEP = "run", "sweep"  # what wrote a folder


class OutputPathError(ValueError):
    """A path infersim will not write: one line naming the flag, the path and why."""


def _label(flag: str | None, path: str | Path) -> str:
    return f"{flag} {path}" if flag else str(path)


def write_target(path: str | Path, flag: str | None = None) -> Path:
    """The regular file that writing `path` puts in place: a link's target, followed to the end of its chain.

    An OutputPathError when that is something else (a device, a pipe, a socket, a folder), or when its folder does
    not exist or cannot be written. The target need not exist yet."""
    if str(path) == "":
        raise OutputPathError(f"{flag or 'the output'} needs a file name, got ''")
    given = Path(path)
    target = Path(os.path.realpath(given))
    parent = target.parent
    if not parent.is_dir():
        above = parent
        while not above.exists() and above != above.parent:
            above = above.parent
        if above.exists() and not above.is_dir():
            raise OutputPathError(f"{_label(flag, path)}: {above} is not a folder")
        raise OutputPathError(f"{_label(flag, path)}: folder {parent} does not exist")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:
        raise OutputPathError(f"{_label(flag, path)}: cannot use it: {err.strerror or err}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputPathError(f"{_label(flag, path)}: is {kind_of(mode)}; infersim writes only regular files"
                              + (f" (the link leads to {target})" if given.is_symlink() else ""))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{_label(flag, path)}: cannot write in {parent}")
    return target


def atomic_write(path: str | Path, write: Callable[[str], None], flag: str | None = None) -> Path:
    """Write through a temporary file beside the target, then rename it into place: no reader sees half a file.

    The target is `write_target(path)`: a link's target is replaced and the link kept; anything but a regular file is
    refused, checked again just before the rename. Returns the target."""
    target = write_target(path, flag)
    tmp = None
    try:
        with signals_held():  # no signal between making the file and the `finally` that removes it
            fd, tmp = temporary_file(target.parent, f".{target.name}.")
            os.close(fd)
        write(tmp)
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):  # the path changed kind while the file was written
            raise OutputPathError(f"{_label(flag, path)}: is {kind_of(mode)}; infersim writes only regular files")
        os.replace(tmp, target)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return target


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a folder infersim wrote, or None (no marker, or a file of that name infersim did not write)."""
    path = folder / MARKER
    if not path.is_file() or path.is_symlink():
        return None
    try:
        marker = json.loads(read_regular(path, MARKER_MAX_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("written_by") != WRITTEN_BY or marker.get("kind") not in (RUN, SWEEP):
        return None
    files = marker.get("files")
    if not isinstance(files, list) or not all(isinstance(name, str) for name in files):
        return None
    return marker


def infersim_version() -> str:
    """The installed infersim's version, for the files it writes."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("infersim")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def marker_text(kind: str, files: Sequence[str]) -> str:
    """The marker's JSON: who wrote the folder (with the version), what kind of folder, and the files written."""
    return json.dumps({"written_by": WRITTEN_BY, "version": infersim_version(), "kind": kind,
                       "files": sorted(files)}, indent=2) + "\n"


def _foreign(folder: Path, marker: dict[str, Any] | None) -> list[str]:
    """The entries of `folder` that its marker does not list (all of them without a marker)."""
    ours = set(marker["files"]) | {MARKER} if marker else set()
    return sorted(entry.name for entry in folder.iterdir() if entry.name not in ours)


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def check_folder(out_dir: str | Path, flag: str) -> Path:
    """`out_dir` as a Path if it is or can become a folder; an OutputPathError naming it otherwise."""
    if str(out_dir) == "":
        raise OutputPathError(f"{flag} needs a folder name, got ''")
    out = Path(out_dir)
    if out.is_symlink() and not out.exists():
        raise OutputPathError(f"{flag} {out}: is a link to nothing ({os.readlink(out)})")
    if out.exists() and not out.is_dir():
        mode = os.stat(out).st_mode
        raise OutputPathError(f"{flag} {out}: is {kind_of(mode) or 'a file'}, not a folder")
    parent = out.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputPathError(f"{flag} {out}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag} {out}: cannot write in {parent}")
    return out


def check_run_folder(out_dir: str | Path, force: bool = False) -> Path:
    """The folder a run replaces (a link's target), if it may: new, empty, or an infersim run's folder that holds
    nothing but what the run wrote. Anything else needs `force`, which replaces the folder whole."""
    out = check_folder(out_dir, "--out")
    if out.is_symlink():
        out = out.resolve()  # the run replaces the folder the link names; the link stays
    if not out.is_dir():
        return out
    if force:
        _check_forced(out)
        return out
    marker = read_marker(out)
    if marker is not None and marker["kind"] != RUN and any(out.iterdir()):
        raise OutputPathError(f"--out {out}: holds an infersim {marker['kind']}, not a run; give another --out")
    foreign = _foreign(out, marker)
    if foreign:
        what = "holds no infersim run" if marker is None else "holds files the infersim run there did not write"
        raise OutputPathError(f"--out {out}: a non-empty folder that {what} ({_listed(foreign)}); give another "
                              "--out, or --force to replace the folder and everything in it")
    return out


def _check_forced(out: Path) -> None:
    """`--force` replaces a folder whole: never the file system's root, the home folder, or the folder the command
    runs in or one above it (a slip of `--out .` would take the user's work with it)."""
    target = out.resolve()
    cwd = Path.cwd().resolve()
    if target == Path(target.anchor) or target == Path.home().resolve() or cwd.is_relative_to(target):
        where = ("the file system's root" if target == Path(target.anchor) else "your home folder"
                 if target == Path.home().resolve() else "the current folder or one above it")
        raise OutputPathError(f"--out {out}: is {where}; --force replaces a folder whole, so give a folder of the "
                              "run's own")


def claim_sweep_folder(out_dir: str | Path, files: Sequence[str], check_only: bool = False) -> Path:
    """The folder a sweep writes `files` into, if it may: new, empty, or a sweep's folder (anything else there is
    kept: a sweep writes only its own files). Unless `check_only`, the folder is made and marked as a sweep's before
    any other file is written."""
    out = check_folder(out_dir, "--out")
    marker = read_marker(out) if out.is_dir() else None
    if marker is not None and marker["kind"] != SWEEP:
        raise OutputPathError(f"--out {out}: holds an infersim {marker['kind']}, not a sweep; give another --out")
    if marker is None and out.is_dir() and any(out.iterdir()):
        found = _listed(_foreign(out, None))
        raise OutputPathError(f"--out {out}: a non-empty folder that holds no infersim sweep ({found}); give a new "
                              "or empty folder, or the folder of an earlier sweep to resume it")
    if not check_only and marker is None:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / MARKER, lambda tmp: Path(tmp).write_text(marker_text(SWEEP, files), encoding="utf-8"))
    return out
