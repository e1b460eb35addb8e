"""Each bad input that once gave a traceback or a hang is a one-line error naming its file or key, exit status 2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from infersim.cli import main
from simulator.scenario import DEFAULT_SCENARIO, Scenario, load_scenario

ROOT = Path(__file__).parents[2]
QUICK = ["--set", "workload.kind=random", "--set", "workload.num_prompts=2", "--set", "workload.input_len=64",
         "--set", "workload.output_len=2", "--set", "workload.arrival=infinite"]
ALIAS_BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True))


def one_line_error(capsys, argv: list[str], *needles: str) -> str:
    """Run `infersim run argv`: exit 2, one line on stderr holding every needle, no traceback."""
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("infersim: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize(("sets", "needles"), [
    ("workload.sessions=[1", ["--set workload.sessions: line 1: malformed YAML"]),
    ("cache.block_tokens=0", ["cache.block_tokens: 0 is out of range (valid: 1..65536"]),
    ("cache.block_tokens=9223372036854775808", ["cache.block_tokens: 9223372036854775808 is out of range"]),
    ("spec_decode.drafts=18446744073709551616",
     ["spec_decode.drafts: 18446744073709551616 is out of range (valid: 0..64"]),
    ("workload.sessions=2147483648", ["workload.sessions: 2147483648 is out of range (valid: 1..10000000"]),
    ("hardware.platform=" + "a" * 300, ["unknown platform (valid: "]),
    ("cache.host_offload_gb_per_gpu=1e308",
     ["cache.host_offload_gb_per_gpu: expected a number, got the text '1e308'", "write 1.0e+308"]),
    ("cache.host_offload_gb_per_gpu=1.0e+308", ["cache.host_offload_gb_per_gpu: 1e+308 is out of range"]),
    ("workload.input_len=9223372036854775807", ["workload.input_len: 9223372036854775807 is out of range"]),
    ("workload.sessions=1000000", ["workload.sessions: the request stream would take ~", "GB of memory"]),
    ("workload.rate_per_s=.nan", ["workload.rate_per_s: expected a finite number, got nan"]),
])
def test_bad_set_values(capsys, sets, needles):
    one_line_error(capsys, ["--set", sets], *needles)


@pytest.mark.parametrize(("text", "needle"), [
    ("[" * 50_000, "line 1: malformed YAML: nested more than 64 levels deep"),
    (ALIAS_BOMB, "more than 20000 values (aliases counted expanded)"),
    ("\n".join(f"k{i}: {i}" for i in range(100_000)), "line 10001: malformed YAML: more than 20000 values"),
])
@pytest.mark.parametrize("role", ["scenario", "overlay", "model", "platform"])
def test_hostile_yaml_files(capsys, tmp_path, text, needle, role):
    path = tmp_path / f"{role}.yaml"
    path.write_text(text)
    argv = {"scenario": [str(path)], "overlay": ["--overlay", str(path)],
            "model": ["--set", f"model.name={path}"], "platform": ["--set", f"hardware.platform={path}"]}[role]
    one_line_error(capsys, argv, str(path), needle)


def test_undecodable_scenario_names_the_file(capsys, tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    one_line_error(capsys, [str(path)], f"{path}: not UTF-8 text")


def _trace(tmp_path: Path, fmt: str, text: str | None, name: str = "trace.txt") -> list[str]:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    return [*QUICK, "--set", "workload.kind=trace", "--set", f"workload.trace_format={fmt}", "--set",
            f"workload.trace_path={path}", "--set", "workload.arrival=trace"]


def test_missing_and_directory_traces(capsys, tmp_path):
    one_line_error(capsys, _trace(tmp_path, "csv", None, "missing.csv"), "missing.csv: cannot read: No such file")
    (tmp_path / "folder").mkdir()
    one_line_error(capsys, _trace(tmp_path, "csv", None, "folder"),
                   "folder: cannot read: is a folder, not a regular file")


@pytest.mark.parametrize(("fmt", "text", "needle"), [
    ("mooncake", json.dumps({"timestamp": 0, "input_length": 1e30, "output_length": 1, "hash_ids": []}),
     "line 1: input_length must be an integer in 1..10000000, got 1e+30"),
    ("mooncake", "[" * 100_000, "line 1: not valid JSON (nested too deeply)"),
    ("mooncake", "1" * 5000, "line 1: not valid JSON"),
    ("csv", "arrival_s,prompt_tokens,output_tokens\n0," + "1" * 140_000 + ",3\n", "line 2: not a CSV row"),
    ("csv", "arrival_s,prompt_tokens,output_tokens\n1e300,5,1\n", "line 2: arrival_s must be within 1e+10"),
])
def test_hostile_traces(capsys, tmp_path, fmt, text, needle):
    one_line_error(capsys, _trace(tmp_path, fmt, text), needle)


def test_undecodable_trace_names_file_and_line(capsys, tmp_path):
    path = tmp_path / "trace.csv"
    path.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,5,\xff\n")
    argv = _trace(tmp_path, "csv", None, "trace.csv")
    one_line_error(capsys, argv, str(path), "line 2: not UTF-8 text")


def _model(tmp_path: Path, edit) -> list[str]:
    raw = yaml.safe_load((ROOT / "workloads" / "models" / "deepseek-v3.yaml").read_text())
    edit(raw)
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(raw))
    return [*QUICK, "--set", f"model.name={path}", "--set", "hardware.platform=h200-8"]


@pytest.mark.parametrize(("where", "value", "needle"), [
    (("mla", "heads"), 1e308, "mla.heads: 1e+308 is out of range (valid: 1..4096"),
    (("moe", "experts"), 1e308, "moe.experts: 1e+308 is out of range (valid: 1..65536"),
    (("mla", "heads"), 0, "mla.heads: 0 is out of range (valid: 1..4096"),
    (("layers",), 0, "layers: 0 is out of range (valid: 1..1000"),
    (("layers",), 1e30, "layers: 1e+30 is out of range (valid: 1..1000"),
    (("layers",), float("nan"), "layers: value must be a finite number"),
])
def test_bad_model_numbers(capsys, tmp_path, where, value, needle):
    def edit(raw):
        node = raw
        for key in where:
            node = node[key]
        node["value"] = value
    one_line_error(capsys, _model(tmp_path, edit), "model.yaml: ", needle)


def _platform(tmp_path: Path, key: str, value) -> list[str]:
    raw = yaml.safe_load((ROOT / "hwmodels" / "specs" / "platforms" / "h200-8.yaml").read_text())
    raw[key]["value"] = value
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(raw))
    return [*QUICK, "--set", f"hardware.platform={path}", "--set", "model.name=qwen3-32b"]


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("gpus", float("inf"), "gpus: value must be a finite number"),
    ("links_per_gpu", 0, "links_per_gpu: 0 is out of range (valid: 1..1024"),
    ("link_bandwidth_gb_per_s", float("nan"), "link_bandwidth_gb_per_s: value must be a finite number"),
    ("link_bandwidth_gb_per_s", float("inf"), "link_bandwidth_gb_per_s: value must be a finite number"),
    ("link_bandwidth_gb_per_s", 0, "link_bandwidth_gb_per_s: 0 is out of range"),
    ("link_latency_us", float("nan"), "link_latency_us: value must be a finite number"),
    ("link_latency_us", float("inf"), "link_latency_us: value must be a finite number"),
    ("link_latency_us", 0, "link_latency_us: 0 is out of range"),
])
def test_bad_platform_numbers(capsys, tmp_path, key, value, needle):
    one_line_error(capsys, _platform(tmp_path, key, value), "platform.yaml: ", needle)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_an_empty_scenario_is_the_default(tmp_path, text):
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    assert load_scenario(path) == load_scenario(DEFAULT_SCENARIO) == load_scenario()


def test_scenario_paths_are_relative_to_the_scenario_file(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "study"
    (folder / "specs").mkdir(parents=True)
    gpu = yaml.safe_load((ROOT / "hwmodels" / "specs" / "gpus" / "h200.yaml").read_text())
    (folder / "specs" / "gpu.yaml").write_text(yaml.safe_dump(gpu))
    platform = yaml.safe_load((ROOT / "hwmodels" / "specs" / "platforms" / "h200-8.yaml").read_text())
    (folder / "specs" / "platform.yaml").write_text(yaml.safe_dump({**platform, "gpu": "gpu.yaml"}))
    model = (ROOT / "workloads" / "models" / "qwen3-32b.yaml").read_text()
    (folder / "model.yaml").write_text(model)
    (folder / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,64,2\n0.5,80,2\n")
    (folder / "scenario.yaml").write_text(yaml.safe_dump({
        "hardware": {"platform": "specs/platform.yaml"}, "model": {"name": "model.yaml"},
        "precision": {"kv_cache": "bf16"},
        "workload": {"kind": "trace", "trace_format": "csv", "trace_path": "trace.csv", "arrival": "trace"}}))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--json", str(folder / "scenario.yaml")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests_completed"] == 2


def test_every_scenario_number_has_a_range():
    for section in dataclasses.fields(Scenario):
        if not dataclasses.is_dataclass(section.default_factory if section.default_factory is not dataclasses.MISSING
                                        else None):
            continue
        for f in dataclasses.fields(section.default_factory):
            if f.type in ("int", "float", "tuple[float, ...]"):
                assert "range" in f.metadata, f"{section.name}.{f.name} has no declared range"
