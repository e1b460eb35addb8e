"""`infersim` has one error boundary: user errors are one line and exit 2, SIGINT 130, SIGTERM 143, a closed pipe a
quiet exit, a bug one line that names the saved traceback (exit 1); nothing is left half written."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infersim import cli, outputs, progress
from infersim.cli import main
from tests.infersim.run_helpers import QUICK, start, wait_for_staging


def _one_line_error(capsys, argv: list[str], code: int = 2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_out_at_a_file_is_refused_before_simulating(capsys, tmp_path, monkeypatch):
    target = tmp_path / "file"
    target.write_text("x")
    monkeypatch.setattr(progress, "run_with_progress", _never)
    err = _one_line_error(capsys, ["run", *QUICK, "--out", str(target)])
    assert "is a file, not a folder" in err and target.read_text() == "x"


def _never(*args, **kwargs):
    raise AssertionError("simulated although --out was bad")


@pytest.mark.parametrize("make", ["empty", "dangling", "parent_is_file"])
def test_bad_out_paths_are_one_line_errors(capsys, tmp_path, make):
    if make == "empty":
        out = ""
    elif make == "dangling":
        (tmp_path / "link").symlink_to(tmp_path / "nowhere")
        out = str(tmp_path / "link")
    else:
        (tmp_path / "file").write_text("x")
        out = str(tmp_path / "file" / "out")
    _one_line_error(capsys, ["run", *QUICK, "--out", out])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"empty": [], "dangling": ["link"],
                                                                 "parent_is_file": ["file"]}[make])


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_read_only_parent_is_refused(capsys, tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        assert "cannot write in" in _one_line_error(capsys, ["run", *QUICK, "--out", str(parent / "out")])
    finally:
        parent.chmod(0o755)


def test_summary_json_that_is_a_folder_is_not_a_run(capsys, tmp_path):
    out = tmp_path / "out"
    (out / "summary.json").mkdir(parents=True)
    assert "holds no infersim run" in _one_line_error(capsys, ["run", *QUICK, "--out", str(out)])
    assert (out / "summary.json").is_dir()
    assert main(["run", *QUICK, "--out", str(out), "--force", "--json"]) == 0
    assert (out / "summary.json").is_file()


def test_a_full_disk_is_one_line_and_leaves_the_old_run(capsys, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert main(["run", *QUICK, "--out", str(out), "--json"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "scenario_yaml", full)
    err = _one_line_error(capsys, ["run", *QUICK, "--set", "workload.seed=1", "--out", str(out)])
    assert "No space left on device" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder


def test_an_internal_error_names_its_saved_traceback(capsys, monkeypatch):
    def bug(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "_dispatch", bug)
    err = _one_line_error(capsys, ["hw", "list"], code=1)
    assert err.startswith("infersim: internal error: RuntimeError: a bug (traceback: ")
    saved = Path(err.split("(traceback: ")[1].rstrip(")\n"))
    try:
        assert "Traceback" in saved.read_text() and "RuntimeError: a bug" in saved.read_text()
    finally:
        saved.unlink()


def test_a_closed_pipe_exits_quietly():
    process = subprocess.Popen([sys.executable, "-m", "infersim.cli", "hw", "list", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first byte is written, as in `infersim ... | true`
    err = process.stderr.read()
    assert process.wait(timeout=60) == cli.EXIT_BROKEN_PIPE
    assert err == b""


@pytest.mark.parametrize(("signum", "code", "line"), [
    (signal.SIGINT, 130, b"infersim: interrupted\n"),
    (signal.SIGTERM, 143, b"infersim: terminated (SIGTERM)\n"),
])
def test_a_signal_is_one_line_and_leaves_nothing(tmp_path, signum, code, line):
    out = tmp_path / "out"
    process = start(["run", *QUICK, "--out", str(out)], delay_s=5.0)
    assert wait_for_staging(process, out)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code
    assert err.endswith(line) and b"Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []  # no OUT, no temporary folder
