"""`infersim run --out DIR` replaces DIR's run as one set: a failure or a signal (SIGINT, SIGTERM, SIGKILL) at any
moment leaves the previous complete run or the new one, never a mix, and no temporary files."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from infersim import outputs
from infersim.cli import main
from tests.infersim.run_helpers import QUICK, staging, start, wait_for_staging

NAMES = [".infersim", "report.html", "requests.csv", "scenario.yaml", "steps.csv", "summary.json"]
SAME_EVERY_RUN = ("requests.csv", "scenario.yaml", "steps.csv")  # report.html's plot ids and wall_s differ


def _files(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in SAME_EVERY_RUN}


def test_a_rerun_replaces_the_whole_set(capsys, tmp_path):
    out = tmp_path / "out"
    assert main(["run", *QUICK, "--out", str(out)]) == 0
    first = _files(out)
    assert main(["run", *QUICK, "--set", "workload.seed=1", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == NAMES and _files(out) != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_folder_that_holds_no_run_needs_force(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["run", *QUICK, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds no infersim run" in err and "--force" in err and err.count("\n") == 1
    assert (out / "notes.txt").read_text() == "mine"
    assert main(["run", *QUICK, "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == NAMES
    assert main(["run", *QUICK, "--force"]) == 2  # --force without --out


def test_an_empty_folder_and_a_new_path_are_fine(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    assert main(["run", *QUICK, "--out", str(tmp_path / "empty")]) == 0
    assert main(["run", *QUICK, "--out", str(tmp_path / "a" / "b")]) == 0
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == NAMES


def test_a_failure_halfway_leaves_the_old_run(capsys, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert main(["run", *QUICK, "--out", str(out)]) == 0
    before = _files(out)

    def broken(result):
        raise ValueError("cannot draw")

    monkeypatch.setattr(outputs, "report_figure", broken)  # after the CSVs, before the summary
    assert main(["run", *QUICK, "--set", "workload.seed=1", "--out", str(out)]) == 2
    assert _files(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_killed_runs_leftovers_are_removed_by_the_next_run(capsys, tmp_path):
    out = tmp_path / "out"
    dead_pid = 2 ** 22 + 12345  # above Linux's pid_max: no process has it
    left = tmp_path / f".out.infersim-new-{dead_pid}-abcd"
    left.mkdir()
    (left / "requests.csv").write_text("half")
    assert main(["run", *QUICK, "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_old_run_set_aside_by_a_kill_comes_back(tmp_path):
    out = tmp_path / "out"
    aside = tmp_path / f".out.infersim-old-{2 ** 22 + 1}-abcd"
    aside.mkdir()
    (aside / "summary.json").write_text("{}")
    outputs.remove_leftovers(out)
    assert (out / "summary.json").read_text() == "{}" and not aside.exists()


def _reference_runs(tmp_path: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    runs = []
    for seed in (0, 1):
        out = tmp_path / f"ref{seed}"
        process = start(["run", *QUICK, "--set", f"workload.seed={seed}", "--out", str(out)])
        assert process.wait(timeout=120) == 0
        runs.append(_files(out))
    return runs[0], runs[1]


def _kill_and_check(tmp_path: Path, signum: int, when_s: float, old: dict[str, bytes], new: dict[str, bytes],
                    delay_s: float) -> None:
    out = tmp_path / "out"
    if not out.exists():
        assert main(["run", *QUICK, "--out", str(out)]) == 0  # seed 0: the previous run
    process = start(["run", *QUICK, "--set", "workload.seed=1", "--out", str(out)], delay_s=delay_s)
    if wait_for_staging(process, out):
        time.sleep(when_s)
        process.send_signal(signum)
    process.communicate(timeout=120)
    if signum == signal.SIGKILL:
        outputs.remove_leftovers(out)  # what the next run into OUT does first
    assert staging(out) == [], f"temporary folder left after {signum!r} at {when_s:.3f} s"
    assert sorted(p.name for p in out.iterdir()) == NAMES
    held = _files(out)
    assert held in (old, new), f"a mixed set after {signum!r} at {when_s:.3f} s"
    if held == new:  # back to the previous run for the next kill
        assert main(["run", *QUICK, "--out", str(out)]) == 0


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def test_a_signal_while_writing_leaves_one_whole_run(capsys, tmp_path):
    old, new = _reference_runs(tmp_path)
    rng = random.Random(1)
    for signum in SIGNALS:  # one moment per signal; the slow test below tries 20 each
        _kill_and_check(tmp_path, signum, rng.uniform(0, 0.15), old, new, delay_s=0.02)


@pytest.mark.slow
def test_signals_at_20_random_moments_leave_one_whole_run(capsys, tmp_path):
    old, new = _reference_runs(tmp_path)
    rng = random.Random(int(os.environ.get("INFERSIM_KILL_SEED", "0")))
    for signum in SIGNALS:
        for _ in range(20):
            # the six files take about 6 x 20 ms plus their writing; past that lands in the swap and after
            _kill_and_check(tmp_path, signum, rng.uniform(0, 0.25), old, new, delay_s=0.02)


def test_a_link_to_a_run_folder_keeps_the_link(capsys, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for seed in (0, 1):
        assert main(["run", *QUICK, "--set", f"workload.seed={seed}", "--out", str(tmp_path / "link")]) == 0
    assert (tmp_path / "link").is_symlink() and sorted(p.name for p in (tmp_path / "real").iterdir()) == NAMES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
