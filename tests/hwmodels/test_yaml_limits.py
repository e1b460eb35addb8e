"""The one YAML loader's limits and the declared ranges: every error is a one-line ValueError naming file and line."""

from __future__ import annotations

import pytest

from hwmodels.specfile import YAML_MAX_DEPTH, YAML_MAX_NODES, Range, YamlError, parse_yaml, read_yaml_file, shown


def test_ordinary_yaml_parses():
    assert parse_yaml("[" * YAML_MAX_DEPTH + "]" * YAML_MAX_DEPTH, "f.yaml") is not None
    assert parse_yaml("a: {b: [1, 2.5, .inf]}\nc: &x [1]\nd: *x\n", "f.yaml") == {
        "a": {"b": [1, 2.5, float("inf")]}, "c": [1], "d": [1]}


@pytest.mark.parametrize(("text", "needle"), [
    ("[" * 50_000, f"f.yaml: line 1: malformed YAML: nested more than {YAML_MAX_DEPTH} levels deep"),
    ("[" * (YAML_MAX_DEPTH + 1) + "]" * (YAML_MAX_DEPTH + 1), "nested more than"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)),
     f"more than {YAML_MAX_NODES} values (aliases counted expanded)"),
    ("\n".join(f"k{i}: {i}" for i in range(100_000)), "f.yaml: line 10001: malformed YAML: more than"),
    ("a: [1", "f.yaml: line 1: malformed YAML: expected ',' or ']'"),
    ("a: 2001-13-45", "f.yaml: malformed YAML: ValueError: month must be in 1..12"),
    ("a: " + "9" * 5000, "f.yaml: malformed YAML: ValueError: Exceeds the limit"),
    ("a: \x08", "f.yaml: malformed YAML: special characters are not allowed"),
    ("a: \x08\nb: 1", "f.yaml: malformed YAML: special characters are not allowed"),
    (b"a: \xff", "f.yaml: not UTF-8 text (byte 3: invalid start byte)"),
])
def test_limits_and_errors_name_the_file(text, needle):
    with pytest.raises(YamlError) as err:
        parse_yaml(text, "f.yaml")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(YamlError, match=r"missing\.yaml: cannot read: No such file"):
        read_yaml_file(tmp_path / "missing.yaml")
    with pytest.raises(YamlError, match="cannot read: is a folder, not a regular file"):
        read_yaml_file(tmp_path)
    with pytest.raises(YamlError, match="cannot read: File name too long"):
        read_yaml_file(tmp_path / ("a" * 300 + ".yaml"))


@pytest.mark.parametrize(("value", "problem"), [
    (0, "0 is out of range (valid: 1..64; why)"), (65, "65 is out of range"), (float("nan"), "must be a finite"),
    (float("inf"), "must be a finite"), (2**64, "18446744073709551616 is out of range (valid: 1..64; why)"),
    (1, None), (64.0, None),
])
def test_a_range_names_the_value_and_the_bounds(value, problem):
    found = Range(1, 64, "why").problem(value)
    assert found == problem if problem is None else problem in found


def test_huge_integers_are_shown_short():
    assert shown(10**5000) == "an integer of 16610 bits" and shown(7) == "7" and shown(0.5) == "0.5"

