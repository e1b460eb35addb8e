"""`infersim run`: the JSON summary contract, files written atomically, and one-line errors for bad scenarios."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from infersim.cli import main
from simulator.scenario import SCENARIO_DIR, Scenario, build, load_scenario, to_mapping

SUMMARY_KEYS = {
    "requests_completed", "simulated_s", "wall_s", "sim_speedup", "gpus", "ttft_s", "tpot_s", "itl_s",
    "interactivity_tok_per_s_per_user", "output_tok_per_s", "total_tok_per_s", "output_tok_per_s_per_gpu",
    "total_tok_per_s_per_gpu", "tokens_per_dollar", "prefix_hit_rate", "spec_tokens_per_cycle",
}
QUICK = ["--set", "workload.sessions=4", "--set", "workload.turns_mean=4"]


def test_run_json_reports_every_summary_key_and_writes_its_files(capsys, tmp_path):
    assert main(["run", *QUICK, "--json", "--out", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) >= SUMMARY_KEYS
    for key in ("ttft_s", "tpot_s", "itl_s"):
        assert set(summary[key]) == {"p50", "p90", "p99", "mean"}
    assert summary["gpus"] == 8 and summary["requests_completed"] > 0
    assert summary["tokens_per_dollar"] == pytest.approx(summary["total_tok_per_s_per_gpu"] * 3600 / 1.50)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".infersim", "report.html", "requests.csv", "scenario.yaml", "steps.csv", "summary.json"]
    assert json.loads((tmp_path / "summary.json").read_text())["requests_completed"] == summary["requests_completed"]


@pytest.mark.parametrize(("sets", "message"), [
    (["serving.max_num_seq=8"], "serving: unknown key 'max_num_seq' (valid keys: max_num_seqs"),
    (["servings.x=1"], "scenario: unknown key 'servings' (valid keys: name, hardware, model"),
    (["serving.max_num_seqs=many"], "serving.max_num_seqs: expected a whole number, got 'many'"),
    (["parallel.tp=5"], "tp=5 does not divide kimi-k3's 96 mla heads"),
    (["hardware.platform=h100-8"], "kimi-k3 does not fit on h100 at tp=8"),
    (["workload.kind=chat"], "workload.kind: 'chat' is not one of agentic, random, trace"),
    (["parallel.tp=16"], "parallel.tp=16 needs more GPUs than mi355x-8 has (8)"),
    (["precision.experts=fp8"], "precision.experts"),
    (["kernels.kda_verify_tile_cols=200"], "kernels.kda_verify_tile_cols: 200 exceeds kimi-k3's KDA head_dim 128"),
    (["kernels.mla_num_splits=-1"], "kernels.mla_num_splits: -1 is out of range (valid: 0..4096"),
    (["kernels.mla_backend=cutlass"], "kernels.mla_backend: 'cutlass' is not one of auto, flashmla"),
    (["serving.engine=tgi"], "serving.engine: 'tgi' is not one of vllm, sglang, trtllm"),
    (["serving.engine=trtllm"], "serving.engine: TensorRT-LLM runs on NVIDIA GPUs; mi355x-8 has mi355x"),
    (["parallel.dcp=3"], "parallel.dcp: dcp=3 must divide tp=8"),
    (["cache.block_tokens=0"], "cache.block_tokens: 0 is out of range (valid: 1..65536"),
    (["spec_decode.drafts=100"], "spec_decode.drafts: 100 is out of range (valid: 0..64"),
    (["serving.gpu_memory_utilization=1.5"], "serving.gpu_memory_utilization: 1.5 is out of range (valid: 0.01..1"),
    (["serving.max_model_len=1000"], "serving.max_model_len: "),
    (["workload.rate_per_s=0"], "workload.rate_per_s: must be positive for poisson arrivals"),
])
def test_bad_scenarios_get_one_line_errors(capsys, tmp_path, sets, message):
    argv = ["run", *QUICK]
    for item in sets:
        argv += ["--set", item]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written for a failed run


def test_a_malformed_scenario_file_is_named(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("serving: [1, 2\n")
    assert main(["run", str(bad)]) == 2
    assert "bad.yaml: line" in capsys.readouterr().err


def test_the_written_scenario_reproduces_the_run_bit_for_bit(capsys, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    change = SCENARIO_DIR / "changes" / "mla-pad-split.yaml"
    assert main(["run", *QUICK, "--overlay", str(change), "--set", "spec_decode.acceptance_rates=[0.8, 0.5]",
                 "--json", "--out", str(first)]) == 0
    written = yaml.safe_load((first / "scenario.yaml").read_text())
    assert written["spec_decode"]["acceptance_rates"] == [0.8, 0.5]  # a tuple as a list
    assert written["kernels"]["launch"] == "graph"  # an enum as its value
    assert written["workload"]["kind"] == "agentic" and written["workload"]["sessions"] == 4
    assert main(["run", str(first / "scenario.yaml"), "--json", "--out", str(second)]) == 0
    capsys.readouterr()
    for name in ("requests.csv", "steps.csv", "scenario.yaml"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


@pytest.mark.parametrize("change", [None, *sorted((SCENARIO_DIR / "changes").glob("*.yaml"))],
                         ids=lambda c: "default" if c is None else c.stem)
def test_to_mapping_round_trips_every_key(change):
    scenario = load_scenario(None, [change] if change else [])
    mapping = to_mapping(scenario)
    assert build(Scenario, yaml.safe_load(yaml.safe_dump(mapping))) == scenario
    assert set(mapping) == {f.name for f in dataclasses.fields(Scenario)}
    assert set(mapping["kernels"]) == {f.name for f in dataclasses.fields(scenario.kernels)}


def test_out_naming_a_file_fails_before_simulating(capsys, tmp_path, monkeypatch):
    import infersim.progress

    def no_run(scenario):
        raise AssertionError("simulated although --out is unusable")

    monkeypatch.setattr(infersim.progress, "run_with_progress", no_run)
    existing = tmp_path / "results.txt"
    existing.write_text("keep me\n")
    for out in (existing, existing / "sub"):
        assert main(["run", *QUICK, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert str(existing) in err and err.count("\n") == 1 and "Traceback" not in err
    assert existing.read_text() == "keep me\n"
    assert main(["run", *QUICK, "--out", ""]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and err.count("\n") == 1


@pytest.mark.parametrize("path", sorted((SCENARIO_DIR / "study").glob("*.yaml")), ids=lambda p: p.stem)
def test_platform_study_scenarios_run(capsys, path):
    """Each platform of the Kimi K3 study has a scenario of its recipe, and it runs (on a small workload)."""
    assert main(["run", str(path), "--set", "workload.sessions=3", "--set", "workload.turns_mean=3", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests_completed"] > 0 and summary["gpus"] == 8
    scenario = load_scenario(path, [])
    assert scenario.parallel.tp == 8 and scenario.cache.host_offload_gb_per_gpu > 0
