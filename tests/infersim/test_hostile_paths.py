"""Paths that are not what infersim writes or reads: device nodes (made here with mknod, never the machine's own),
named pipes, sockets, links, foreign folders. Each is one line and exit 2, and nothing is replaced or left behind."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from infersim import output_paths
from infersim.cli import main
from tests.conftest import ROOT

QUICK = ["--set", "workload.kind=random", "--set", "workload.num_prompts=2", "--set", "workload.input_len=64",
         "--set", "workload.output_len=2", "--set", "workload.arrival=infinite"]
STEP = ["step", "--model", "qwen3-32b", "--hw", "h200", "--decode", "2x1024"]
TRACE = str(ROOT / "validation" / "data" / "h200" / "engine_step" / "qwen3-32b_decode_1x1024.trace.json.gz")
TRACES = [str(ROOT / "validation" / "data" / "h200" / "engine_step" / f"qwen3-32b_decode_{s}.trace.json.gz")
          for s in ("1x1024", "8x1024")]
LIMIT_S = 60  # every command here refuses at once; a hang (a pipe waited on) fails instead of blocking the run


def one_line_error(capsys, argv: list[str], *needles: str) -> str:
    """Run `infersim ARGV` in this process under a time limit: exit 2, one line naming every needle."""
    result: dict[str, int] = {}
    worker = threading.Thread(target=lambda: result.setdefault("code", main(argv)), daemon=True)
    worker.start()
    worker.join(LIMIT_S)
    assert not worker.is_alive(), f"infersim {' '.join(argv)} still running after {LIMIT_S} s"
    err = capsys.readouterr().err
    assert result["code"] == 2, err
    assert err.startswith("infersim: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def _node(folder: Path, name: str, major: int, minor: int) -> Path:
    """A character device node of our own in `folder` (as /dev/full is 1,7 and /dev/zero 1,5); skip where the test
    may not make one (not root)."""
    path = folder / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD)")
    return path


def _is_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


@pytest.fixture
def nodes(tmp_path) -> dict[str, Path]:
    """A device node like /dev/full, a FIFO, a socket and a link to each, all inside the test's own folder."""
    made = {"device": _node(tmp_path, "full", 1, 7), "fifo": tmp_path / "fifo", "socket": tmp_path / "sock"}
    os.mkfifo(made["fifo"])
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(made["socket"]))
    server.close()
    for kind in ("device", "fifo", "socket"):
        made[f"link-to-{kind}"] = tmp_path / f"link-to-{kind}.html"
        made[f"link-to-{kind}"].symlink_to(made[kind])
    return made


WHAT = {"device": "is a character device", "fifo": "is a named pipe (FIFO)", "socket": "is a socket"}


@pytest.mark.parametrize("kind", ["device", "fifo", "socket", "link-to-device", "link-to-fifo", "link-to-socket"])
def test_no_output_flag_replaces_a_device_a_pipe_or_a_socket(capsys, tmp_path, nodes, kind):
    target = nodes[kind]
    what = WHAT[kind.removeprefix("link-to-")]
    one_line_error(capsys, ["trace", "predict", TRACE, "--hw", "h200", "--html", str(target)], "--html", what)
    one_line_error(capsys, ["calibrate", *TRACES, "--hw", "h200", "--out", str(target)], "--out", what)
    one_line_error(capsys, [*STEP, "--trace", str(target)], "--trace", what)
    one_line_error(capsys, ["run", *QUICK, "--trace", str(target)], "--trace", what)
    for name in ("device", "fifo", "socket"):
        assert not stat.S_ISREG(os.stat(nodes[name]).st_mode), f"{name} was replaced"
    assert _is_device(nodes["device"]) and stat.S_ISFIFO(os.lstat(nodes["fifo"]).st_mode)
    assert all(nodes[k].is_symlink() for k in nodes if k.startswith("link-to-"))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_node_as_an_output_folder_is_refused(capsys, tmp_path, nodes):
    for kind in ("device", "fifo"):
        one_line_error(capsys, ["run", *QUICK, "--out", str(nodes[kind])], "--out", "not a folder")
        one_line_error(capsys, ["sweep", "default", "--grid", "parallel.dcp=1,2", "--out", str(nodes[kind])],
                       "--out", "not a folder")
        one_line_error(capsys, ["collective", "--hw", "h200", "--tp", "8", "--sweep", "4KiB:64KiB", "--out",
                                str(nodes[kind])], "--out", "not a folder")
    assert _is_device(nodes["device"])


def test_a_link_to_a_file_is_written_through_and_stays_a_link(capsys, tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert main(["run", *QUICK, "--trace", str(link)]) == 0
    assert link.is_symlink() and json.loads(real.read_text())["traceEvents"]
    chain = tmp_path / "chain.json"
    chain.symlink_to(link)
    assert main([*STEP, "--trace", str(chain)]) == 0
    assert chain.is_symlink() and link.is_symlink() and "infersim predicted step" in real.read_text()
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "made.json")
    assert main([*STEP, "--trace", str(dangling)]) == 0
    assert dangling.is_symlink() and (tmp_path / "made.json").is_file()
    capsys.readouterr()


def test_a_folder_with_a_stale_summary_and_notes_is_kept(capsys, tmp_path):
    out = tmp_path / "a"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    one_line_error(capsys, ["run", *QUICK, "--out", str(out)], "--out", "holds no infersim run", "notes.txt",
                   "--force")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "summary.json"]
    assert (out / "notes.txt").read_text() == "mine"


def test_force_never_replaces_the_current_folder_or_above(capsys, tmp_path, monkeypatch):
    work = tmp_path / "project"
    work.mkdir()
    (work / "mine.py").write_text("keep")
    monkeypatch.chdir(work)
    for out in (".", str(work), str(tmp_path), "/"):
        one_line_error(capsys, ["run", *QUICK, "--out", out, "--force"], "--force replaces a folder whole")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes").write_text("keep")
    one_line_error(capsys, ["run", *QUICK, "--out", str(tmp_path / "home"), "--force"], "your home folder")
    assert (work / "mine.py").read_text() == "keep" and (tmp_path / "home" / "notes").read_text() == "keep"


def test_a_file_added_to_a_run_folder_is_not_deleted_by_the_next_run(capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["run", *QUICK, "--out", str(out)]) == 0
    marker = json.loads((out / output_paths.MARKER).read_text())
    assert marker["written_by"] == "infersim" and marker["kind"] == "run" and marker["version"]
    assert set(marker["files"]) == {p.name for p in out.iterdir()} - {output_paths.MARKER}
    assert main(["run", *QUICK, "--set", "workload.seed=1", "--out", str(out)]) == 0  # its own run: replaced
    capsys.readouterr()
    (out / "notes.txt").write_text("mine")
    one_line_error(capsys, ["run", *QUICK, "--out", str(out)], "--out", "did not write", "notes.txt")
    assert (out / "notes.txt").read_text() == "mine"
    (out / output_paths.MARKER).write_text('{"written_by": "someone else"}')  # a marker infersim did not write
    (out / "notes.txt").unlink()
    one_line_error(capsys, ["run", *QUICK, "--out", str(out)], "--out", "holds no infersim run")


def test_sweep_writes_only_into_a_new_an_empty_or_its_own_folder(capsys, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "scenario.yaml").write_text("mine: true\n")
    one_line_error(capsys, ["sweep", "default", "--grid", "parallel.dcp=1,2", "--out", str(foreign)],
                   "--out", "holds no infersim sweep", "scenario.yaml")
    assert (foreign / "scenario.yaml").read_text() == "mine: true\n" and len(list(foreign.iterdir())) == 1
    run = tmp_path / "run"
    assert main(["run", *QUICK, "--out", str(run)]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    one_line_error(capsys, ["sweep", "default", "--grid", "parallel.dcp=1,2", "--out", str(run)],
                   "--out", "holds an infersim run, not a sweep")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    sweep_out = tmp_path / "sweep"
    argv = ["sweep", "default", "--set", "workload.sessions=2", "--set", "workload.turns_mean=2", "--grid",
            "parallel.dcp=1,2", "--out", str(sweep_out), "--jobs", "1", "--json"]
    assert main(argv) == 0
    (sweep_out / "notes.txt").write_text("kept")
    assert main(argv) == 0  # a rerun resumes its own folder and keeps what else is there
    assert (sweep_out / "notes.txt").read_text() == "kept"
    capsys.readouterr()
    one_line_error(capsys, ["run", *QUICK, "--out", str(sweep_out)], "--out", "holds an infersim sweep, not a run")


def test_input_paths_that_never_end_are_refused_at_once(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    one_line_error(capsys, ["trace", "predict", str(fifo), "--hw", "h200"], "named pipe")
    one_line_error(capsys, ["run", str(fifo)], "named pipe")
    one_line_error(capsys, ["run", *QUICK, "--overlay", str(fifo)], "named pipe")
    one_line_error(capsys, ["run", "--set", "workload.kind=trace", "--set", f"workload.trace_path={fifo}",
                            "--set", "workload.trace_format=csv", "--set", "workload.arrival=trace"], "named pipe")
    one_line_error(capsys, ["kernel", "--hw", "h200", "gemm", "--param", "m=4", "--param", "n=4", "--param", "k=4",
                            "--calibration", str(fifo)], "named pipe")
    one_line_error(capsys, ["trace", "predict", TRACE, "--hw", "h200", "--step-times", str(fifo)], "named pipe")
    zero, urandom = _node(tmp_path, "zero", 1, 5), _node(tmp_path, "urandom", 1, 9)
    for node in (zero, urandom):
        one_line_error(capsys, ["trace", "predict", str(node), "--hw", "h200"], "character device")
        one_line_error(capsys, ["run", str(node)], "character device")
        one_line_error(capsys, ["run", "--set", "workload.kind=trace", "--set", f"workload.trace_path={node}",
                                "--set", "workload.trace_format=mooncake", "--set", "workload.arrival=trace"],
                       "character device")
    assert time.monotonic() - started < 30  # nothing read a device's endless stream first


def test_the_input_reader_counts_bytes_read_not_the_size_stat_reports(tmp_path):
    from hwmodels.input_files import FileTooLarge, read_regular

    path = tmp_path / "data"
    path.write_bytes(b"x" * 1000)
    assert read_regular(path, 1000) == b"x" * 1000
    with pytest.raises(FileTooLarge):
        read_regular(path, 999)


def test_a_regular_file_larger_than_its_reader_takes_is_refused_unread(tmp_path):
    from hwmodels.input_files import FileTooLarge, read_regular

    sparse = tmp_path / "sparse"
    with sparse.open("wb") as handle:  # 1 GiB that takes no disk: its size alone refuses it
        handle.truncate(1 << 30)
    with pytest.raises(FileTooLarge, match="holds more than 1000 bytes"):
        read_regular(sparse, 1000)
