"""Every command's numbers go through one bounded conversion before anything is built or allocated: infinite, huge
and fractional values are one line naming the flag, with integers printed as integers, and exit 2."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from infersim.cli import main
from infersim.sweep_table import JOURNAL, open_journal, read_rows
from workloads.kernels import KERNEL_KINDS

STEP = ["step", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8"]
HUGE = "9" * 5000  # past Python's 4,300-digit limit on int(str)


def one_line_error(capsys, argv: list[str], *needles: str) -> str:
    assert main(argv) == 2, capsys.readouterr()
    err = capsys.readouterr().err
    assert err.startswith("infersim: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize(("argv", "needles"), [
    (["kernel", "--hw", "h200", "gemm", "--param", "m=inf", "--param", "n=4096", "--param", "k=4096"],
     ["--param m", "expected a whole number, got 'inf'"]),
    (["kernel", "--hw", "h200", "gemm", "--param", "m=1e30", "--param", "n=4096", "--param", "k=4096"],
     ["--param m", "is out of range (valid: 0..2147483647"]),
    (["kernel", "--hw", "h200", "gemm", "--param", f"m={HUGE}", "--param", "n=4", "--param", "k=4"],
     ["--param m", "at most 40 digits"]),
    ([*STEP, "--decode", "1000000000000x1"], ["--decode", "the count: 1000000000000 is out of range (valid: 1..65536"]),
    ([*STEP, "--decode", "9223372036854775808x1"], ["--decode", "expected COUNTxLENGTH"]),
    ([*STEP, "--decode", "4x100000000"], ["--decode", "the length: 100000000 is out of range (valid: 0..10000000"]),
    ([*STEP, "--prefill", "65536x8192"], ["the step computes 536870912 tokens, more than the 10000000"]),
    ([*STEP, "--verify", "16x4096", "--drafts", "1000000000"],
     ["--drafts", "1000000000 is out of range (valid: 0..64"]),
    ([*STEP, "--tp", "inf", "--decode", "1x1"], ["--tp", "expected a whole number"]),
    (["run", "--seeds", "100000"], ["--seeds", "100000 is out of range (valid: 1..1000"]),
    (["run", "--seeds", "18446744073709551617"], ["--seeds", "18446744073709551617 is out of range"]),
    (["run", "--set", "workload.seed=18446744073709551616"],
     ["workload.seed: 18446744073709551616 is out of range (valid: 0..18446744073709551615"]),
    (["run", "--set", "spec_decode.drafts=18446744073709551616"],
     ["spec_decode.drafts: 18446744073709551616 is out of range (valid: 0..64"]),
    (["run", "--trace", "t.json", "--trace-steps", "1e300"], ["--trace-steps", "out of range"]),
    (["memory", "--model", "kimi-k3", "--hw", "mi355x", "--context", "1e300"], ["--context", "out of range"]),
    (["memory", "--model", "kimi-k3", "--hw", "mi355x", "--mem-fraction", "nan"], ["--mem-fraction", "finite"]),
    (["occupancy", "--hw", "h200", "--lds-bytes", "inf"], ["--lds-bytes", "expected a whole number"]),
    (["collective", "--hw", "h200", "--tp", "8", "--bytes", "1e400"], ["--bytes", "expected a finite size"]),
    (["collective", "--hw", "h200", "--tp", "8", "--bytes", "1e30"], ["--bytes", "out of range"]),
    (["collective", "--hw", "h200", "--tp", "8", "--sweep", "4KiB:1e30"], ["--sweep HIGH", "out of range"]),
    (["collective", "--hw", "h200", "--tp", "99999999999", "--bytes", "1MiB"], ["--tp", "out of range"]),
    (["trace", "predict", "x.json", "--hw", "h200", "--group-size", "inf"], ["--group-size", "whole number"]),
    (["calibrate", "a.json", "b.json", "--hw", "h200", "--out", "c.yaml", "--train-share", "nan"],
     ["--train-share", "finite"]),
    (["sweep", "default", "--grid", f"parallel.dcp=1..{HUGE}", "--out", "never"], ["--grid", "whole numbers"]),
    (["sweep", "default", "--grid", "parallel.dcp=1,2", "--out", "never", "--at-interactivity", "inf"],
     ["--at-interactivity", "finite"]),
    (["sweep", "default", "--grid", "parallel.dcp=1,2", "--out", "never", "--seeds", "1e9"], ["--seeds"]),
    (["kernel", "--hw", "h200", "gemm", "--launch", "bogus"], ["argument --launch", "invalid choice"]),
])
def test_a_value_no_command_can_use_is_one_line_naming_its_flag(capsys, tmp_path, monkeypatch, argv, needles):
    monkeypatch.chdir(tmp_path)
    one_line_error(capsys, argv, *needles)
    assert list(tmp_path.iterdir()) == []  # refused before any file was written


def _int_fields(kind: str) -> list[str]:
    hints = typing.get_type_hints(KERNEL_KINDS[kind])
    return [f.name for f in dataclasses.fields(KERNEL_KINDS[kind]) if f.init and hints[f.name] is int]


@pytest.mark.parametrize("kind", sorted(KERNEL_KINDS))
def test_every_integer_parameter_of_every_kernel_kind_refuses_inf_and_huge(capsys, kind):
    for field in _int_fields(kind):
        for text in ("inf", "nan", "1e30", "0.5"):
            one_line_error(capsys, ["kernel", "--hw", "h200", kind, "--param", f"{field}={text}"], f"--param {field}")


def test_sweep_refuses_a_bad_calibration_before_any_point_runs(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("family_time_scale: [1, 2\n")
    out = tmp_path / "sweep"
    one_line_error(capsys, ["sweep", "default", "--grid", "parallel.dcp=1,2", "--out", str(out), "--calibration",
                            str(bad)], "bad.yaml", "malformed YAML")
    assert not out.exists()
    bad.write_text("no_such_key: 1\n")
    one_line_error(capsys, ["sweep", "default", "--grid", "parallel.dcp=1,2", "--out", str(out), "--calibration",
                            str(bad)], "no_such_key")
    assert not out.exists()


def _row(point: int) -> dict:
    return {"point": point, "seed": 0, "grid": {"parallel.dcp": 1}, "status": "ok", "error": "", "metrics": {},
            "wall_s": 1.0, "base_hash": "h"}


def test_a_torn_last_journal_line_is_cut_before_the_next_row(tmp_path):
    journal = tmp_path / JOURNAL
    whole = json.dumps(_row(0)) + "\n"
    journal.write_text(whole + json.dumps(_row(1))[:37])  # SIGKILL in the middle of the second row
    assert [r["point"] for r in read_rows(tmp_path)] == [0]  # the torn row is not read (it runs again)
    with open_journal(tmp_path) as handle:
        handle.write(json.dumps(_row(2)) + "\n")
    assert journal.read_text().splitlines()[1] == json.dumps(_row(2))
    assert [r["point"] for r in read_rows(tmp_path)] == [0, 2]


def test_a_journal_line_that_is_not_text_names_the_file_and_the_line(capsys, tmp_path):
    journal = tmp_path / JOURNAL
    journal.write_bytes(json.dumps(_row(0)).encode() + b"\n\xff\xfe not utf-8\n" + json.dumps(_row(1)).encode()
                        + b"\n")
    with pytest.raises(ValueError, match=rf"{JOURNAL}: line 2 is not UTF-8 text"):
        read_rows(tmp_path)
    journal.write_bytes(json.dumps(_row(0)).encode() + b"\n{not json\n")
    with pytest.raises(ValueError, match=rf"{JOURNAL}: line 2 is not a JSON row"):
        read_rows(tmp_path)
