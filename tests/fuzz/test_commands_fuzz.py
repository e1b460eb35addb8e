"""Every command (`kernel`, `step`, `collective`, `memory`, `occupancy`, `trace predict`, `calibrate`, `sweep`,
`validate`, `run`, `compare`, `hw`, `model`, `codec`) with generated flags, valid, out of range and hostile, and every
output flag pointed at what infersim must not replace: device nodes made here with mknod (never the machine's own),
named pipes, sockets, links to them, a foreign folder, a run's and a sweep's folder, a path under a file.

Every example exits 0 with finite numbers in its JSON or 2 with one line on stderr, within its time limit, and leaves
every node, link and foreign file as it was."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import signal
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infersim.cli import main
from tests.conftest import ROOT
from tests.fuzz.test_cli_fuzz import Hang, _finite
from workloads.deployment import KernelOptions
from workloads.kernels import KERNEL_KINDS

LIMIT_S = {"validate": 300, "sweep": 120, "compare": 120}  # the rest: DEFAULT_LIMIT_S
DEFAULT_LIMIT_S = 60  # a query answers in well under a second, a tiny run in about one; a hang is a failure
STEPS = ROOT / "validation" / "data" / "h200" / "engine_step"
TINY = ["--set", "workload.kind=random", "--set", "workload.num_prompts=2", "--set", "workload.input_len=64",
        "--set", "workload.output_len=2", "--set", "workload.arrival=infinite"]
TINY_AGENTIC = ["--set", "workload.sessions=1", "--set", "workload.turns_mean=1"]

NUMBERS = ["0", "-1", "1", "2", "3", "7", "8", "16", "64", "65", "1024", "65536", "2147483648",
           "9223372036854775808", "18446744073709551616", "1e3", "1e30", "-1e30", "0.5", "-0.0", "1e-300", "1e308",
           "1e400", "inf", "-inf", "nan", "9" * 5000, "", " ", "0x10", "1_000", "4KiB", "1MiB", "1GiB", "1e6"]
TEXT = ["", "a", "h200", "mi355x", "kimi-k3", "qwen3-32b", "../../etc/passwd", "é", "a" * 300, "\x00", "-", "--json",
        "=", "x=y", "[1", "{", "*x", "~", ".nan", "int4", "fp8", "ring", "quickreduce"]
numbers = st.one_of(st.sampled_from(NUMBERS), st.integers(-10, 10**6).map(str), st.text(max_size=12))
texts = st.one_of(st.sampled_from(TEXT), st.text(max_size=16))

# Paths inside the arena, by token: "@name" in an argv becomes ARENA/name when the example runs.
INPUTS = ["@trace1.json.gz", "@trace2.json.gz", "@steps.csv", "@calibration.yaml", "@fifo", "@fifo.yaml",
          "@zero", "@urandom", "@folder", "@link-to-fifo", "@link-to-zero", "@dangling", "@empty", "@junk",
          "@notes/notes.txt", "@missing"]
OUTPUTS = ["@new-file.html", "@fifo", "@full", "@sock", "@link-to-fifo", "@link-to-full", "@link-to-file",
           "@dangling", "@notes", "@notes/notes.txt", "@notes/notes.txt/under", "@run-folder", "@sweep-folder",
           "@new-folder", "@folder", "@missing/deeper/file", ""]
inputs, outputs = st.sampled_from(INPUTS), st.sampled_from(OUTPUTS)


def flag(name: str, values: st.SearchStrategy) -> st.SearchStrategy:
    """`[--name, value]` or nothing."""
    return st.one_of(st.just([]), values.map(lambda v: [name, v]))


def flags(*parts: st.SearchStrategy) -> st.SearchStrategy:
    """The flags of `parts` (each a list), in a drawn order."""
    return st.tuples(*parts).flatmap(lambda lists: st.permutations([x for x in lists if x])).map(
        lambda groups: [item for group in groups for item in group])


hw = st.one_of(st.sampled_from(["h200", "mi355x", "b200", "h100", "mi300x", "b300"]), texts)
models = st.one_of(st.sampled_from(["kimi-k3", "qwen3-32b", "deepseek-v3"]), texts, inputs)
cost_model = flag("--cost-model", st.one_of(st.sampled_from(["cycle", "roofline"]), texts))
counts = st.one_of(st.sampled_from(["1", "2", "4", "8", "16"]), numbers)
shapes = st.one_of(st.tuples(counts, numbers).map("x".join), st.sampled_from(["4x1024", "1x8192@4096", "2x64"]),
                   st.tuples(counts, numbers, numbers).map(lambda t: f"{t[0]}x{t[1]}@{t[2]}"), texts)


def _kernel_params(kind: str) -> st.SearchStrategy:
    names = [f.name for f in dataclasses.fields(KERNEL_KINDS[kind]) if f.init]
    pair = st.tuples(st.one_of(st.sampled_from(names), texts), st.one_of(numbers, texts))
    return st.lists(pair, max_size=len(names) + 1).map(lambda ps: [x for k, v in ps for x in ("--param", f"{k}={v}")])


kernel = st.tuples(hw, st.one_of(st.sampled_from(sorted(KERNEL_KINDS)), texts)).flatmap(lambda t: st.tuples(
    st.just(["kernel", "--hw", t[0], t[1]]),
    _kernel_params(t[1]) if t[1] in KERNEL_KINDS else st.just([]),
    flags(flag("--launch", st.sampled_from(["eager", "graph", "x"])), flag("--calibration", inputs), cost_model)))
options = st.tuples(st.sampled_from([f.name for f in dataclasses.fields(KernelOptions)] + ["nonsense"]),
                    st.one_of(numbers, st.sampled_from(["true", "false", "eager", "graph"]), texts))
step = st.tuples(st.just(["step"]), flags(
    st.tuples(models).map(lambda m: ["--model", m[0]]), st.tuples(hw).map(lambda h: ["--hw", h[0]]),
    flag("--tp", counts), flag("--dcp", counts), flag("--ep", counts), flag("--decode", shapes),
    flag("--prefill", shapes), flag("--verify", shapes), flag("--drafts", counts),
    st.lists(options, max_size=2).map(lambda os_: [x for k, v in os_ for x in ("--option", f"{k}={v}")]),
    flag("--platform", st.one_of(st.sampled_from(["h200-8", "mi355x-8", "h200-2"]), texts)),
    flag("--quickreduce", st.one_of(st.sampled_from(["int4", "int3", "fp", "fp4"]), texts)),
    flag("--trace", outputs), flag("--calibration", inputs), cost_model))
collective = st.tuples(st.just(["collective"]), flags(
    st.tuples(hw).map(lambda h: ["--hw", h[0]]), st.tuples(counts).map(lambda c: ["--tp", c[0]]),
    flag("--op", st.one_of(st.sampled_from(["allreduce", "allgather", "reducescatter", "alltoall"]), texts)),
    flag("--algo", st.one_of(st.sampled_from(["ring", "oneshot", "twoshot", "quickreduce"]), texts)),
    flag("--codec", st.one_of(st.sampled_from(["int4", "int8", "fp"]), texts)),
    st.one_of(flag("--bytes", numbers), flag("--sweep", st.tuples(numbers, numbers).map(":".join))),
    flag("--launch", st.sampled_from(["eager", "graph"])), flag("--out", outputs)))
memory = st.tuples(st.just(["memory"]), flags(
    st.tuples(models).map(lambda m: ["--model", m[0]]), st.tuples(hw).map(lambda h: ["--hw", h[0]]),
    flag("--tp", counts), flag("--dcp", counts), flag("--ep", counts), flag("--context", numbers),
    flag("--mem-fraction", numbers), flag("--max-num-seqs", numbers), flag("--max-num-batched-tokens", numbers),
    flag("--kda-checkpoint-tokens", numbers), st.sampled_from([[], ["--row-only-weights"]])))
occupancy = st.tuples(st.just(["occupancy"]), flags(
    st.tuples(hw).map(lambda h: ["--hw", h[0]]), flag("--lds-bytes", numbers), flag("--vgprs", numbers),
    flag("--threads", numbers)))
trace_predict = st.tuples(st.just(["trace", "predict"]), st.lists(inputs, min_size=0, max_size=3), flags(
    st.tuples(hw).map(lambda h: ["--hw", h[0]]), flag("--step-times", inputs), flag("--html", outputs),
    flag("--group-size", numbers), flag("--calibration", inputs), cost_model))
calibrate = st.tuples(st.just(["calibrate"]), st.lists(inputs, min_size=0, max_size=3), flags(
    st.tuples(hw).map(lambda h: ["--hw", h[0]]), flag("--out", outputs), flag("--step-times", inputs),
    flag("--train-share", numbers)))
grid_keys = st.one_of(st.sampled_from(["parallel.dcp", "serving.max_concurrency", "spec_decode.drafts",
                                       "workload.seed", "nonsense.key"]), texts)
grid_values = st.one_of(st.sampled_from(["1,2", "1..2", "1..4*2", "0..2:1", "1,1"]),
                        st.tuples(numbers, numbers).map(lambda t: f"{t[0]}..{t[1]}"), numbers, texts)
sweep = st.tuples(st.just(["sweep", "default", *TINY_AGENTIC]), flags(
    st.lists(st.tuples(grid_keys, grid_values), max_size=2).map(
        lambda gs: [x for k, v in gs for x in ("--grid", f"{k}={v}")]),
    st.tuples(outputs).map(lambda o: ["--out", o[0]]), flag("--seeds", numbers),
    st.sampled_from([["--jobs", "1"], ["--jobs", "0"], ["--jobs", "inf"]]), flag("--at-interactivity", numbers),
    flag("--calibration", inputs), flag("--executor", st.sampled_from(["process", "x"]))))
validate = st.tuples(st.just(["validate"]), flags(
    flag("--hw", st.one_of(st.sampled_from(["h200", "mi355x"]), texts)), st.sampled_from([[], ["--rows"]]),
    flag("--links", st.one_of(st.sampled_from(["h200-2", "h200-8"]), texts)), st.sampled_from([[], ["--published"]]),
    cost_model))
run = st.tuples(st.just(["run", *TINY]), flags(
    flag("--out", outputs), flag("--trace", outputs),
    flag("--trace-steps", numbers), flag("--seeds", st.one_of(st.sampled_from(["1", "2"]), numbers)),
    flag("--jobs", st.sampled_from(["1", "0", "inf", "2"])), flag("--format", st.sampled_from(["json", "vllm"])),
    flag("--overlay", inputs), flag("--calibration", inputs)))
compare = st.tuples(st.just(["compare", "default"]), st.lists(st.one_of(inputs, st.just(
    str(ROOT / "simulator" / "scenarios" / "changes" / "dcp8.yaml"))), max_size=2), st.just([*TINY]), flags(
    flag("--seeds", st.one_of(st.sampled_from(["1", "2"]), numbers)), flag("--jobs", st.sampled_from(["1", "0"]))))
names = st.one_of(st.tuples(st.sampled_from([["hw", "show"], ["model", "show"], ["codec"]]),
                            st.one_of(texts, inputs).map(lambda n: [n])),
                  st.sampled_from([(["hw", "list"],), (["model", "list"],)]))
commands = st.one_of(kernel, step, collective, memory, occupancy, trace_predict, calibrate, sweep, validate, run,
                     compare, names).map(lambda parts: [x for part in parts for x in part])


def _alarm(signum: int, frame: Any) -> None:
    raise Hang("no result within the example's time limit")


def _node(path: Path, major: int, minor: int) -> bool:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:  # not root: the pipes, sockets and links still stand in for them
        return False
    return True


@pytest.fixture(scope="module")
def arena(tmp_path_factory) -> Path:
    """The folder every example's paths point into: valid inputs, hostile nodes, foreign and infersim folders."""
    folder = tmp_path_factory.mktemp("arena")
    shutil.copy(STEPS / "qwen3-32b_decode_1x1024.trace.json.gz", folder / "trace1.json.gz")
    shutil.copy(STEPS / "qwen3-32b_decode_8x1024.trace.json.gz", folder / "trace2.json.gz")
    rows = (STEPS / "engine_step.csv").read_text().splitlines()
    (folder / "steps.csv").write_text("trace,time_s_median\n" + "".join(
        f"trace{i}.json.gz,{row.split(',')[8]}\n" for i, row in ((1, rows[1]), (2, rows[2]))))
    (folder / "calibration.yaml").write_text("name: fuzz-overlay\n")
    os.mkfifo(folder / "fifo")
    os.mkfifo(folder / "fifo.yaml")
    _node(folder / "zero", 1, 5) or (folder / "zero").symlink_to(folder / "fifo")
    _node(folder / "urandom", 1, 9) or (folder / "urandom").symlink_to(folder / "fifo")
    _node(folder / "full", 1, 7) or (folder / "full").symlink_to(folder / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock"))
    server.close()
    (folder / "folder").mkdir()
    (folder / "notes").mkdir()
    (folder / "notes" / "notes.txt").write_text("mine")  # may be named as an output file (and then replaced)
    (folder / "notes" / "keep.txt").write_text("mine")  # never named: no command may remove it
    (folder / "file.html").write_text("a file of the user's")
    for link, target in (("link-to-fifo", "fifo"), ("link-to-zero", "zero"), ("link-to-full", "full"),
                         ("link-to-file", "file.html"), ("dangling", "nowhere/at/all")):
        (folder / link).symlink_to(folder / target)
    (folder / "empty").write_bytes(b"")
    (folder / "junk").write_bytes(bytes(range(256)) * 4)
    assert main(["run", *TINY, "--out", str(folder / "run-folder")]) == 0
    assert main(["sweep", "default", *TINY_AGENTIC, "--grid", "parallel.dcp=1", "--jobs", "1", "--out",
                 str(folder / "sweep-folder")]) == 0
    return folder


def _intact(folder: Path) -> None:
    """What no command may replace: the nodes, the links, the user's files."""
    for name in ("fifo", "fifo.yaml"):
        assert stat.S_ISFIFO(os.lstat(folder / name).st_mode), f"{name} was replaced"
    for name in ("zero", "urandom", "full"):
        mode = os.lstat(folder / name).st_mode
        assert stat.S_ISCHR(mode) or stat.S_ISLNK(mode), f"{name} was replaced"
    assert stat.S_ISSOCK(os.lstat(folder / "sock").st_mode)
    for name in ("link-to-fifo", "link-to-zero", "link-to-full", "link-to-file", "dangling"):
        assert (folder / name).is_symlink(), f"{name} is no longer a link"
    assert (folder / "notes" / "keep.txt").read_text() == "mine"
    assert (folder / "folder").is_dir()


def check_command(argv: list[str], folder: Path) -> None:
    """Run `infersim ARGV --json` in process: 0 with finite JSON, or 2 with one line; in time; nothing replaced."""
    argv = [str(folder / a[1:]) if a.startswith("@") else a for a in argv] + ["--json"]
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S.get(argv[0], DEFAULT_LIMIT_S))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    message = err.getvalue()
    assert code in (0, 2), (argv[:12], code, message[-2000:])
    if code == 2:
        assert message.startswith("infersim: error: ") and message.count("\n") == 1, (argv[:12], message[-2000:])
        assert "Traceback" not in message
    else:
        _finite(json.loads(out.getvalue()), argv[0])
    _intact(folder)


def _settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, derandomize=examples < 1000, database=None,
                    suppress_health_check=list(HealthCheck))


COMMAND_COUNTS = [pytest.param(100, id="quick"), pytest.param(3000, id="fuzz", marks=pytest.mark.fuzz)]
PATH_COUNTS = [pytest.param(40, id="quick"), pytest.param(1000, id="fuzz", marks=pytest.mark.fuzz)]


@pytest.mark.parametrize("examples", COMMAND_COUNTS)
def test_every_command(arena, examples):
    @_settings(examples)
    @given(commands)
    def check(argv):
        check_command(argv, arena)

    check()


# Every output flag of every command, pointed at each hostile target, with inputs that would otherwise succeed.
output_commands = st.sampled_from([
    ["run", *TINY, "--out"], ["run", *TINY, "--trace"],
    ["step", "--model", "qwen3-32b", "--hw", "h200", "--decode", "2x1024", "--trace"],
    ["trace", "predict", "@trace1.json.gz", "--hw", "h200", "--html"],
    ["calibrate", "@trace1.json.gz", "@trace2.json.gz", "--hw", "h200", "--out"],
    ["collective", "--hw", "h200", "--tp", "8", "--sweep", "4KiB:64KiB", "--out"],
    ["sweep", "default", *TINY_AGENTIC, "--grid", "parallel.dcp=1", "--jobs", "1", "--out"],
])


@pytest.mark.parametrize("examples", PATH_COUNTS)
def test_output_paths(arena, examples):
    @_settings(examples)
    @given(output_commands, outputs)
    def check(command, target):
        check_command([*command, target], arena)

    check()
