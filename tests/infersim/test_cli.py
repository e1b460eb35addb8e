"""The CLI contract: --json prints one object; user errors are one line on stderr and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.spec import load_gpu, load_platform
from infersim.cli import main
from workloads.deployment import Deployment
from workloads.layers import build_step
from workloads.model import load_model
from workloads.step import Batch


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


def test_occupancy_reports_the_kimi_k3_study_lds_cases(capsys):
    result = run_json(capsys, "occupancy", "--hw", "mi355x", "--lds-bytes", "81408")
    assert (result["workgroups_per_cu"], result["limiter"]) == (2, "lds")
    result = run_json(capsys, "occupancy", "--hw", "mi355x", "--lds-bytes", str(81408 + 4096))
    assert (result["workgroups_per_cu"], result["limiter"]) == (1, "lds")


KDA_VERIFY = ["kernel", "--hw", "mi355x", "kda-verify", "--param", "heads=12", "--param", "head_dim=128",
              "--param", "seqs=1", "--param", "positions=4"]


def test_kda_verify_narrow_tiles_give_384_workgroups(capsys):
    wide = run_json(capsys, *KDA_VERIFY, "--param", "tile_cols=32")
    narrow = run_json(capsys, *KDA_VERIFY, "--param", "tile_cols=4")
    assert (wide["workgroups"], narrow["workgroups"]) == (48, 384)
    assert wide["time_s"] >= wide["floor_s"] > 0


@pytest.mark.xfail(strict=True, reason=(
    "known gap: timed from the gfx950 code, 4 value columns come out 8 % faster than 32 on the MI355X (11.8 against "
    "12.8 us at one sequence), where the H200 measured 29 % (7.4 against 10.4 us) and the model has 25 % there "
    "(7.6 against 10.2): no measurement on an MI355X says how its L2 and Infinity Cache pass 16-byte pieces "
    "(validation/NOTES.md)"))
def test_kda_verify_narrow_tiles_take_less_time(capsys):
    wide = run_json(capsys, *KDA_VERIFY, "--param", "tile_cols=32")
    narrow = run_json(capsys, *KDA_VERIFY, "--param", "tile_cols=4")
    assert narrow["time_s"] < 0.9 * wide["time_s"]


def test_gemm_json_has_the_contract_keys(capsys):
    result = run_json(capsys, "kernel", "--hw", "h200", "gemm", "--param", "m=8192", "--param", "n=8192",
                      "--param", "k=8192", "--param", "dtype=bf16")
    assert {"time_s", "flop", "bytes", "workgroups", "waves", "bound"} <= set(result)
    assert result["flop"] == 2 * 8192**3
    assert result["bound"] == "compute"
    assert result["time_s"] >= result["floor_s"]


def test_hw_list_and_show(capsys):
    listing = run_json(capsys, "hw", "list")
    assert {g["name"] for g in listing["gpus"]} == {"mi355x", "mi325x", "mi300x", "b300", "b200", "h200", "h100"}
    shown = run_json(capsys, "hw", "show", "mi355x")
    assert shown["compute_units"] == 256 and "1,280" in shown["sources"]["lds_granularity_bytes"]
    assert run_json(capsys, "hw", "show", "h200-2")["links_per_gpu"] == 18


def test_table_output_is_readable(capsys):
    assert main(["kernel", "--hw", "h200", "copy", "--param", "size_bytes=1GiB"]) == 0
    out = capsys.readouterr().out
    assert "µs" in out and "memory" in out
    assert run_json(capsys, "kernel", "--hw", "h200", "copy", "--param", "size_bytes=1GiB")["bytes"] == 2 * 2**30
    assert main(["kernel", "--hw", "h200", "copy", "--param", "size_bytes=1.5B"]) == 2
    assert "not a whole" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["occupancy", "--hw", "a100", "--lds-bytes", "0"],
     "unknown GPU (valid: b200, b300, h100, h200, mi300x, mi325x, mi355x)"),
    (["kernel", "--hw", "h200", "gemmm"], "unknown kernel kind 'gemmm' (valid: "),
    (["kernel", "--hw", "h200", "gemm", "--param", "m=1"], "missing parameter(s) n, k"),
    (["kernel", "--hw", "h200", "gemm", "--param", "m=1", "--param", "n=2", "--param", "k=3", "--param", "x=1"],
     "unknown parameter 'x' (valid: m, n, k, dtype"),
    (["kernel", "--hw", "h200", "gemm", "--param", "m=-1", "--param", "n=2", "--param", "k=3"],
     "gemm: --param m: -1 is out of range (valid: 0..2147483647"),
    (["kernel", "--hw", "h200", "gemm", "--param", "m=1", "--param", "n=2", "--param", "k=3",
      "--param", "dtype=fp5"], "dtype='fp5' is not one of fp32, tf32, bf16"),
    (["kernel", "--hw", "h200", "gemm", "--param", "m=1", "--param", "n=2", "--param", "k=3",
      "--param", "dtype=mxfp4"], "h200 has no mxfp4 math units"),
    (["kernel", "--hw", "h200", "gemm", "--param", "m"], "expected KEY=VALUE"),
    (["occupancy", "--hw", "mi355x", "--lds-bytes", "999999"], "lds_bytes must be in 0..163840 on mi355x"),
])
def test_user_errors_are_one_line_and_exit_2(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("infersim: error: ")
    assert message in captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_a_bad_calibration_file_is_named(capsys, write_yaml):
    bad = write_yaml({"memory_efficiency": {"default": {"value": 2.0, "source": "x"}}}, name="calib.yaml")
    argv = ["kernel", "--hw", "h200", "copy", "--param", "size_bytes=4096", "--calibration", str(bad)]
    assert main(argv) == 2
    assert "calib.yaml: memory_efficiency.default: must be in (0, 1]" in capsys.readouterr().err


def test_negative_lds_is_refused_by_the_parser(capsys):
    assert main(["occupancy", "--hw", "mi355x", "--lds-bytes", "-5"]) == 2
    err = capsys.readouterr().err
    assert "argument --lds-bytes: -5 is out of range (valid: 0..2147483647" in err and err.count("\n") == 1


def test_model_show_reports_kimi_k3_structure(capsys):
    result = run_json(capsys, "model", "show", "kimi-k3")
    assert (result["mla_layers"], result["kda_layers"], result["moe_layers"]) == (24, 69, 92)
    assert (result["experts"], result["top_k"]) == (896, 16)
    assert abs(result["params"] / 2.8e12 - 1) < 0.03
    listed = {m["name"] for m in run_json(capsys, "model", "list")["models"]}
    catalog = {path.stem for path in (Path(__file__).parents[2] / "workloads" / "models").glob("*.yaml")}
    assert listed == catalog and {"kimi-k3", "deepseek-v3", "qwen3-8b", "gpt-oss-20b"} <= listed


def test_memory_reports_weights_and_mla_history(capsys):
    base = ["memory", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8", "--context", "142000"]
    result = run_json(capsys, *base)
    assert abs(result["weights_bytes_per_gpu"] / (1.561e12 / 8) - 1) < 0.05
    assert abs(result["mla_kv_bytes_per_gpu"] / (24 * 142000 * 576) - 1) < 0.01
    assert result["kv_capacity_tokens"] > 0 and result["kda_state_bytes_per_seq"] == 69 * 12 * 128 * 128 * 4
    dcp = run_json(capsys, *base, "--dcp", "8")
    assert dcp["mla_kv_bytes_per_gpu"] == result["mla_kv_bytes_per_gpu"] / 8


def test_step_prints_families_flop_bytes_and_times(capsys):
    result = run_json(capsys, "step", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8", "--decode", "64x32768")
    assert {"gemm", "moe_gemm", "mla_decode", "kda_decode", "norm", "copy"} <= set(result["families"])
    for family in result["families"].values():
        assert family["launches"] > 0 and family["time_s"] > 0
    assert result["kernel_time_s"] == pytest.approx(sum(f["time_s"] for f in result["families"].values()))
    assert result["families"]["copy"]["launches"] >= 69  # the dispatcher copies, one per KDA layer
    fused = run_json(capsys, "step", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8", "--decode", "64x32768",
                     "--option", "kda_decode_fused=true", "--option", "dispatcher_copies=false")
    assert fused["kernel_launches"] < result["kernel_launches"] - 69 * 4
    assert fused["kernel_time_s"] < result["kernel_time_s"]
    # where each launch's program came from: the fused KDA recurrence is the companion kernel, compiled for gfx950
    for step in (result, fused):
        assert sum(step["programs"].values()) == step["kernel_launches"]
        assert step["programs"]["compiled"] == sum(f["compiled_launches"] for f in step["families"].values())
    assert result["families"]["kda_decode"]["compiled_launches"] == 0
    assert fused["families"]["kda_decode"]["compiled_launches"] == fused["families"]["kda_decode"]["launches"] > 0


def test_step_says_which_gemms_are_timed_from_aiter_s_compiled_kernel(capsys):
    """SGLang's v0.5.9 ROCm GEMMs (`fp8_gemm_configs: generic`) are AITER's Triton kernel, timed from its gfx942
    code; the product's own FP8 tiles are not."""
    argv = ("step", "--model", "deepseek-r1", "--hw", "mi300x", "--tp", "8", "--decode", "4x1500")
    generic = run_json(capsys, *argv, "--option", "fp8_gemm_configs=generic")
    tuned = run_json(capsys, *argv)
    assert generic["families"]["gemm"]["compiled_launches"] > 0 == tuned["families"]["gemm"]["compiled_launches"]
    assert generic["tiles"]["mla.qkv_a"]["aiter_triton"] is True
    assert generic["families"]["gemm"]["time_s"] > tuned["families"]["gemm"]["time_s"]


@pytest.mark.parametrize(("argv", "message"), [
    (["memory", "--model", "kimi-k3", "--hw", "h100", "--tp", "8"], "kimi-k3 does not fit on h100 at tp=8"),
    (["memory", "--model", "qwen3-32b", "--hw", "h200", "--tp", "5"], "tp=5 does not divide qwen3-32b's 64 gqa heads"),
    (["memory", "--model", "gpt-5", "--hw", "h200"], "unknown model (valid: deepseek-r1, deepseek-v3"),
    (["step", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8"], "give at least one of --decode"),
    (["step", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8", "--decode", "64"], "expected COUNTxLENGTH"),
    (["step", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8", "--decode", "1x5", "--option", "fast=1"],
     "kernels: unknown key 'fast' (valid keys: mla_pad_heads_to"),
    (["step", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8", "--verify", "1x5", "--drafts", "3",
      "--option", "kda_verify_tile_cols=200"],
     "--option kda_verify_tile_cols: 200 exceeds kimi-k3's KDA head_dim 128 (valid: 1..128)"),
    (["step", "--model", "kimi-k3", "--hw", "mi355x", "--tp", "8", "--verify", "1x5"], "--verify needs --drafts"),
    (["step", "--model", "deepseek-r1", "--hw", "h100", "--tp", "1", "--decode", "4x100"],
     "deepseek-r1 does not fit on h100 at tp=1: its weights take 672.9 GB a GPU"),
])
def test_workload_user_errors(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_step_is_timed_at_its_exact_shape_and_a_repeat_gives_the_same_time(capsys):
    from simulator.cost.step_time import time_plan

    argv = ("step", "--model", "qwen3-32b", "--hw", "h200", "--tp", "2", "--platform", "h200-2", "--decode", "8x32768")
    first = run_json(capsys, *argv)
    second = run_json(capsys, *argv)
    assert first["step_time_s"] == second["step_time_s"] > 0
    # exact, not bucketed: the full plan of 8 decodes at context 32768 (bucketing would give 32646)
    d = Deployment(load_model("qwen3-32b"), load_gpu("h200"), tp=2)
    plan = build_step(Batch(decodes=(32768,) * 8), d)
    exact = time_plan(plan, build_fabric(load_platform("h200-2"), d.gpu), load_calibration("h200")).total_s
    assert second["step_time_s"] == pytest.approx(exact, rel=1e-12)
    assert second["collective_time_s"] > 0 and "allreduce:oneshot" in second["collectives"]
    assert second["step_time_s"] == pytest.approx(second["kernel_time_s"] + second["collective_time_s"])


def test_collective_and_codec_commands(capsys, tmp_path):
    assert run_json(capsys, "codec", "int3")["tile_bytes"] == 896
    one = run_json(capsys, "collective", "--hw", "mi355x", "--tp", "8", "--op", "allreduce", "--algo", "quickreduce",
                   "--codec", "int4", "--bytes", "64MiB")
    assert one["wire_bytes_per_rank"] == pytest.approx(2 * 7 / 8 * (64 * 2**20 / 4096) * 1152)
    sweep = run_json(capsys, "collective", "--hw", "h200-2", "--tp", "2", "--sweep", "4KiB:1MiB",
                     "--out", str(tmp_path))
    assert [r["bytes"] for r in sweep["rows"]] == [2**e for e in range(12, 21)]
    assert all(r["ring_speedup"] == 1.0 for r in sweep["rows"])
    chart = tmp_path / "collective-h200-2-tp2-allreduce.html"
    assert chart.exists() and "plotly" in chart.read_text()[:20000].lower()
    assert not list(tmp_path.glob("*.tmp"))


def test_collective_reports_bus_bandwidth_and_the_library_that_priced_the_ring(capsys):
    eight = run_json(capsys, "collective", "--hw", "h100", "--tp", "8", "--bytes", "1GiB", "--algo", "ring")
    assert eight["busbw_bytes_per_s"] == pytest.approx(eight["algbw_bytes_per_s"] * 2 * 7 / 8)
    assert eight["library"] == "default"
    two = run_json(capsys, "collective", "--hw", "h100", "--tp", "2", "--bytes", "64MiB", "--algo", "ring")
    assert two["library"] == "h200-2 (2 ranks of h100-8)"
    assert two["busbw_bytes_per_s"] == pytest.approx(two["algbw_bytes_per_s"])
    gather = run_json(capsys, "collective", "--hw", "h100", "--tp", "4", "--op", "allgather", "--bytes", "64MiB")
    assert gather["busbw_bytes_per_s"] == pytest.approx(gather["algbw_bytes_per_s"] * 3 / 4)
    small = run_json(capsys, "collective", "--hw", "mi355x", "--tp", "8", "--bytes", "64KiB")
    assert small["algorithm"] == "oneshot" and small["library"] is None


@pytest.mark.parametrize(("argv", "message"), [
    (["collective", "--hw", "h200-2", "--tp", "4", "--bytes", "1MiB"], "--tp must be in 2..2 on h200-2"),
    (["collective", "--hw", "mi355x", "--tp", "8", "--op", "allreduce", "--algo", "quickreduce", "--bytes", "1MiB"],
     "--algo quickreduce needs --codec"),
    (["collective", "--hw", "mi355x", "--tp", "8", "--bytes", "1MiB", "--algo", "tree"], "unknown algorithm 'tree'"),
    (["collective", "--hw", "mi355x", "--tp", "8", "--bytes", "1XB"], "cannot read size '1XB'"),
    (["collective", "--hw", "mi355x", "--tp", "8"], "give exactly one of --bytes SIZE or --sweep LOW:HIGH"),
    (["codec", "int5"], "unknown codec 'int5' (valid: fp, int8, int6, int4, int3, fp4)"),
    (["collective", "--hw", "a100", "--tp", "8", "--bytes", "1MiB"], "no platform for 'a100'"),
])
def test_collective_user_errors(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [[], ["run"], ["compare"], ["hw"], ["model"], ["memory"], ["step"], ["codec"],
                                  ["collective"], ["kernel"], ["occupancy"]])
def test_every_help_page_prints(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "usage: infersim" in capsys.readouterr().out


def test_the_kernel_table_shows_shapes_as_counts_and_flop_in_gflop(capsys):
    assert main(["kernel", "--hw", "h200", "mla-decode", "--param", "seqs=1", "--param", "context=32768",
                 "--param", "heads=12"]) == 0
    out = capsys.readouterr().out
    assert "32,768" in out and "GFLOP" in out
    assert "0.00 B" not in out  # shape parameters are not model parameter counts


def test_the_kernel_json_shows_the_cost_model_and_each_launchs_program(capsys):
    cycle = run_json(capsys, "kernel", "--hw", "h200", "mla-decode", "--param", "seqs=1", "--param", "context=32768",
                     "--param", "heads=12", "--launch", "graph")
    roofline = run_json(capsys, "kernel", "--hw", "h200", "mla-decode", "--param", "seqs=1", "--param",
                        "context=32768", "--param", "heads=12", "--launch", "graph", "--cost-model", "roofline")
    assert (cycle["cost_model"], roofline["cost_model"]) == ("cycle", "roofline")
    program = cycle["launches"][0]["program"]
    assert program["trips"] == 32768 // cycle["params"]["block_n"] and program["trip_chain"]["reduction"] == 2
    assert cycle["bound"] == "latency" and cycle["time_s"] > roofline["time_s"]


def test_kernel_says_the_sm_clock_each_launch_is_timed_at(capsys):
    # an MLA decode launch issues matrix instructions (its QK and PV dots), its split merge none
    args = ["kernel", "--hw", "h200", "mla-decode", "--param", "seqs=32", "--param", "context=8192", "--param",
            "num_splits=16", "--param", "heads=12", "--launch", "graph", "--json"]
    assert main(args) == 0
    launches = json.loads(capsys.readouterr().out)["launches"]
    h200 = load_gpu("h200")
    assert [row["sm_clock_mhz"] for row in launches] == [pytest.approx(h200.matrix_boost_clock_hz / 1e6),
                                                          pytest.approx(h200.boost_clock_hz / 1e6)]
