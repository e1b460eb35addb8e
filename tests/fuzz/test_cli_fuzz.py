"""Generated scenarios, overlays, `--set` pairs, spec files and traces, valid, mutated and hostile, through
`infersim run` in process: every example exits 0 with finite metrics or 2 with one line on stderr, in time."""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infersim.cli import main

SPECS = Path(__file__).parents[2] / "hwmodels" / "specs"
MODELS = Path(__file__).parents[2] / "workloads" / "models"
EXAMPLE_LIMIT_S = 20  # a run of a few tiny requests takes well under a second
QUICK = {"workload": {"kind": "random", "num_prompts": 2, "input_len": 64, "output_len": 2, "arrival": "infinite"}}
KEYS = [
    "hardware.platform", "model.name", "parallel.tp", "parallel.dcp", "parallel.ep", "serving.max_num_seqs",
    "serving.max_num_batched_tokens", "serving.gpu_memory_utilization", "serving.max_concurrency",
    "serving.max_model_len", "cache.block_tokens", "cache.prefix_caching", "cache.host_offload_gb_per_gpu",
    "cache.kda_checkpoint_interval", "spec_decode.drafts", "spec_decode.acceptance_rates",
    "spec_decode.acceptance_alpha", "spec_decode.mean_tokens_per_cycle", "collectives.quickreduce",
    "kernels.mla_pad_heads_to", "kernels.mla_num_splits", "kernels.kda_verify_tile_cols", "workload.kind",
    "workload.seed", "workload.sessions", "workload.turns_mean", "workload.num_prompts", "workload.input_len",
    "workload.output_len", "workload.range_ratio", "workload.arrival", "workload.rate_per_s", "workload.burstiness",
    "workload.duration_s", "cost.usd_per_gpu_hour", "cost.model", "precision.kv_cache", "name", "nonsense.key",
]
HOSTILE_NUMBERS = [0, -1, 1, 2, 3, 7, 64, 65, 65536, 2**31, 2**63, 2**64, 10**30, -(10**30), 0.5, -0.0, 1e-300,
                   1e308, float("inf"), float("-inf"), float("nan")]
HOSTILE_TEXT = ["[1", "{", "&a [*a]", "[" * 200, "*x", "!!python/object:os.system", "1e308", "0x10", "~", "", "\x00",
                "é", "a" * 300, "../../etc/passwd", "/nonexistent.yaml", "mooncake", "csv", "infinite", "trace",
                ".nan", ".inf", "2001-13-45", "9" * 5000]

scalars = st.one_of(st.sampled_from(HOSTILE_NUMBERS), st.integers(-10, 10**6), st.booleans(), st.none(),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(HOSTILE_TEXT),
                    st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                            max_size=4), max_leaves=8)


class Hang(Exception):
    """An example that ran past its time limit."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"no result within {EXAMPLE_LIMIT_S} s")


def _finite(value: Any, where: str = "summary") -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _finite(item, f"{where}.{key}")
    elif isinstance(value, list):
        for item in value:
            _finite(item, where)
    elif isinstance(value, float):
        assert math.isfinite(value), f"{where} is {value}"


def run_cli(argv: list[str]) -> None:
    """Run `infersim` on argv; fail on an escaped exception, a hang, a multi-line error or a non-finite metric."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(EXAMPLE_LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", "--json", *argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    message = err.getvalue()
    assert code in (0, 2), (argv, code, message)
    if code == 2:
        assert message.startswith("infersim: error: ") and message.count("\n") == 1, (argv, message)
        assert "Traceback" not in message
    else:
        _finite(json.loads(out.getvalue()))


def _write(folder: Path, name: str, data: Any) -> Path:
    path = folder / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    elif isinstance(data, str):
        path.write_text(data, encoding="utf-8", errors="surrogatepass")
    else:
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def _set(raw: dict, dotted: str, value: Any) -> dict:
    node = raw
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else node
    node[parts[-1]] = value
    return raw


def _yaml_text(value: Any) -> str:
    try:
        return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip().removesuffix("...").strip()
    except (yaml.YAMLError, ValueError):
        return str(value)


# A scenario: the quick one with some keys set to generated values (valid, mutated or hostile).
scenarios = st.builds(lambda pairs: json.loads(json.dumps(QUICK)) | {} if not pairs else
                      _pairs_onto(pairs), st.lists(st.tuples(st.sampled_from(KEYS), values), max_size=3))


def _pairs_onto(pairs: list[tuple[str, Any]]) -> dict:
    raw = json.loads(json.dumps(QUICK))
    for key, value in pairs:
        _set(raw, key, value)
    return raw


hostile_yaml = st.one_of(
    st.sampled_from(["[" * 50000, "{a: " * 2000, "a: &a [1, 2]\nb: &b [*a, *a, *a, *a]\n" + "".join(
        f"c{i}: &c{i} [*{'b' if i == 0 else f'c{i - 1}'}, *{'b' if i == 0 else f'c{i - 1}'}, "
        f"*{'b' if i == 0 else f'c{i - 1}'}, *{'b' if i == 0 else f'c{i - 1}'}]\n" for i in range(12)),
                     "\n".join(f"k{i}: {i}" for i in range(30000)), "# only a comment\n", "", "- 1\n- 2\n",
                     "workload: {sessions: 1e308}\n", "workload: !!binary aGVsbG8=\n", "a: b: c\n"]),
    st.binary(max_size=200), st.text(max_size=200),
)


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def _settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, derandomize=examples < 1000, database=None,
                    suppress_health_check=list(HealthCheck))


COUNTS = [pytest.param(100, id="quick"), pytest.param(1200, id="fuzz", marks=pytest.mark.fuzz)]


@pytest.mark.parametrize("examples", COUNTS)
def test_scenario_files_and_overlays(folder, examples):
    @_settings(examples)
    @given(scenarios, st.one_of(st.none(), scenarios.map(lambda raw: raw.get("workload", {}))))
    def check(raw, overlay):
        argv = [str(_write(folder, "scenario.yaml", raw))]
        if overlay is not None:
            argv += ["--overlay", str(_write(folder, "overlay.yaml", {"workload": overlay}))]
        run_cli(argv)

    check()


@pytest.mark.parametrize("examples", COUNTS)
def test_set_expressions(folder, examples):
    quick = [f"--set=workload.{key}={value}" for key, value in QUICK["workload"].items()]

    @_settings(examples)
    @given(st.lists(st.tuples(st.one_of(st.sampled_from(KEYS), st.text(max_size=30)),
                              st.one_of(values.map(_yaml_text), st.sampled_from(HOSTILE_TEXT), st.text(max_size=40))),
                    min_size=1, max_size=3))
    def check(pairs):
        run_cli([*quick, *(f"--set={key}={value}" for key, value in pairs)])

    check()


@pytest.mark.parametrize("examples", COUNTS)
def test_hostile_yaml_files(folder, examples):
    @_settings(examples)
    @given(hostile_yaml, st.sampled_from(["scenario", "overlay", "platform", "model"]))
    def check(data, role):
        path = str(_write(folder, f"{role}.yaml", data))
        quick = [f"--set=workload.{key}={value}" for key, value in QUICK["workload"].items()]
        argv = {"scenario": [path], "overlay": ["--overlay", path], "platform": [f"--set=hardware.platform={path}"],
                "model": [f"--set=model.name={path}"]}[role]
        run_cli([*argv, *quick])

    check()


def _numbers(raw: Any) -> list[tuple[Any, ...]]:
    """Paths to every sourced number (a {value: ...} mapping) of a spec file."""
    found = []
    if isinstance(raw, dict):
        if "value" in raw:
            return [()]
        for key, item in raw.items():
            found += [(key, *rest) for rest in _numbers(item)]
    return found


def _mutated(raw: dict, where: tuple, value: Any) -> dict:
    raw = json.loads(json.dumps(raw))
    node = raw
    for key in where:
        node = node[key]
    node["value"] = value
    return raw


SPEC_FILES = {"platform": yaml.safe_load((SPECS / "platforms" / "h200-8.yaml").read_text()),
              "gpu": yaml.safe_load((SPECS / "gpus" / "h200.yaml").read_text()),
              "model": yaml.safe_load((MODELS / "qwen3-32b.yaml").read_text())}
spec_mutations = st.sampled_from(sorted(SPEC_FILES)).flatmap(lambda kind: st.tuples(
    st.just(kind), st.sampled_from(_numbers(SPEC_FILES[kind])),
    st.one_of(st.sampled_from(HOSTILE_NUMBERS), st.floats(allow_nan=True, allow_infinity=True), st.integers(),
              st.sampled_from(["", "12", None, [1], {"a": 1}])))).filter(lambda m: bool(m[1]))


@pytest.mark.parametrize("examples", COUNTS)
def test_spec_files(folder, examples):
    quick = [f"--set=workload.{key}={value}" for key, value in QUICK["workload"].items()]

    @_settings(examples)
    @given(spec_mutations)
    def check(mutation):
        kind, where, value = mutation
        raw = _mutated(SPEC_FILES[kind], where, value)
        if kind == "gpu":
            gpu = _write(folder, "gpu.yaml", raw)
            platform = _write(folder, "platform.yaml", {**SPEC_FILES["platform"], "gpu": str(gpu)})
            argv = [f"--set=hardware.platform={platform}", "--set=parallel.tp=8", "--set=model.name=qwen3-32b"]
        elif kind == "platform":
            argv = [f"--set=hardware.platform={_write(folder, 'platform.yaml', raw)}", "--set=parallel.tp=8",
                    "--set=model.name=qwen3-32b"]
        else:
            argv = [f"--set=model.name={_write(folder, 'model.yaml', raw)}", "--set=hardware.platform=h200-8"]
        run_cli([*argv, *quick, "--set=precision.kv_cache=bf16"])

    check()


trace_numbers = st.one_of(st.sampled_from(HOSTILE_NUMBERS), st.integers(-5, 5000), st.sampled_from(HOSTILE_TEXT),
                          st.floats(allow_nan=True, allow_infinity=True))
mooncake_lines = st.lists(st.one_of(
    st.fixed_dictionaries({"timestamp": trace_numbers, "input_length": trace_numbers, "output_length": trace_numbers,
                           "hash_ids": st.one_of(st.lists(trace_numbers, max_size=3), trace_numbers)}).map(
        lambda d: json.dumps(d)),
    st.builds(lambda t, i, o: json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": []}),
              st.integers(0, 10**6), st.integers(1, 600), st.integers(0, 4)),
    st.sampled_from(["[" * 100000, "{}", "", "null", "1" * 5000, '{"timestamp": 1e999}']), st.text(max_size=50),
), min_size=0, max_size=4).map("\n".join)
csv_traces = st.lists(st.one_of(
    st.builds(lambda a, p, o: f"{a},{p},{o}", st.floats(0, 100), st.integers(1, 300), st.integers(0, 4)),
    st.lists(trace_numbers.map(str), min_size=1, max_size=4).map(",".join),
    st.sampled_from(["1" * 140000, "\x00,1,1", '"unclosed,1,1', ",,"]), st.text(max_size=50),
), max_size=4).map(lambda rows: "arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows))


@pytest.mark.parametrize("examples", COUNTS)
def test_trace_files(folder, examples):
    @_settings(examples)
    @given(st.one_of(st.tuples(st.just("mooncake"), mooncake_lines), st.tuples(st.just("csv"), csv_traces),
                     st.tuples(st.sampled_from(["mooncake", "csv", "azure"]), st.binary(max_size=100))))
    def check(trace):
        fmt, data = trace
        path = _write(folder, "trace.txt", data)
        run_cli(["--set=workload.kind=trace", f"--set=workload.trace_format={fmt}",
                 f"--set=workload.trace_path={path}", "--set=workload.arrival=trace",
                 "--set=serving.max_model_len=-1"])

    check()
