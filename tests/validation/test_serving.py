"""Published end-to-end serving results against the simulator (validation/serving.py, `infersim validate --serving`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from validation import serving
from workloads.model import load_model


def _rows() -> list[dict[str, str]]:
    with serving.TABLE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_table_has_sources_and_at_least_sixty_usable_points_on_four_platforms():
    rows = _rows()
    assert all(r["source_id"] and r["source_url"].startswith("https://") for r in rows)
    kept, left = serving.points()
    assert len(kept) >= 60 and len(kept) + len(left) == len(rows)
    assert len({p.platform for p in kept} & {"h100", "h200", "b200", "mi300x", "mi355x"}) >= 4
    assert all(why for _, _, why in left)


def test_a_row_sets_only_what_it_states():
    row = next(r for r in _rows() if r["platform"] == "mi355x" and r["concurrency"] == "4" and r["isl"] == "1024")
    sets = serving.scenario_sets(row)
    assert sets["hardware.platform"] == "mi355x-8" and sets["model.name"] == "deepseek-r1"
    assert sets["serving.max_concurrency"] == 4 and sets["workload.arrival"] == "infinite"
    assert sets["precision.kv_cache"] == "fp8"  # --kv-cache-dtype fp8_e4m3
    # SGLang's aiter backend with an fp8 cache: AITER's persistent decode
    assert sets["kernels.mla_backend"] == "aiter-persistent" and sets["serving.engine"] == "sglang"
    assert sets["collectives.quickreduce"] == "int4"  # ROCM_QUICK_REDUCE_QUANTIZATION=INT4
    assert sets["cache.prefix_caching"] is False  # --disable-radix-cache
    # InferenceX's lengths are uniform in [0.8 L, L]: the scenario's range around the mean covers the same interval
    mean, ratio = sets["workload.input_len"], sets["workload.range_ratio"]
    assert mean * (1 - ratio) == pytest.approx(0.8 * 1024, abs=1) and mean * (1 + ratio) == pytest.approx(1024, abs=1)


def test_an_sglang_image_whose_aiter_holds_only_its_generic_config_runs_generic_fp8_tiles():
    rows = [r for r in _rows() if r["platform"] in ("mi300x", "mi325x")]
    old = [r for r in rows if "v0.5.9-rocm700-mi30x" in r["engine_version"]]
    new = [r for r in rows if "v0.5.12-rocm700-mi30x" in r["engine_version"]]
    assert old and new
    assert all(serving.scenario_sets(r)["kernels.fp8_gemm_configs"] == "generic" for r in old)
    assert all("kernels.fp8_gemm_configs" not in serving.scenario_sets(r) for r in new)
    assert not any("kernels.fp8_gemm_configs" in serving.scenario_sets(r) for r in _rows()
                   if r["platform"] not in ("mi300x", "mi325x") and _usable(r))


def _usable(row: dict[str, str]) -> bool:
    try:
        serving.scenario_sets(row)
    except serving.Excluded:
        return False
    return True


def test_a_row_without_a_kv_cache_flag_keeps_the_checkpoints_kv_dtype_not_the_default_scenarios():
    row = next(r for r in _rows() if r["platform"] == "h200" and r["engine"] == "sglang")
    assert "--kv-cache-dtype" not in row["recipe_flags"]
    assert serving.scenario_sets(row)["precision.kv_cache"] == "bf16"  # DeepSeek-R1's checkpoint: no KV quantization
    flagged = {**row, "recipe_flags": row["recipe_flags"] + " --kv-cache-dtype fp8_e4m3"}
    assert serving.scenario_sets(flagged)["precision.kv_cache"] == "fp8"
    with pytest.raises(serving.Excluded, match="unknown model"):
        serving.scenario_sets({**row, "model": "not-a-model"})


def test_tensorrt_llms_free_memory_fraction_leaves_the_kv_cache_that_share_of_what_the_weights_leave():
    from hwmodels.dtypes import Dtype
    from hwmodels.spec import load_gpu
    from simulator.scenario import load_scenario
    from workloads.deployment import Deployment
    from workloads.memory import plan_memory

    row = next(r for r in _rows() if r["engine"] == "trtllm" and "free_gpu_memory_fraction 0.75" in r["recipe_flags"])
    sets = serving.scenario_sets(row)
    scenario = load_scenario(None, sets=[f"{k}={v}" for k, v in sets.items()])
    gpu = load_gpu(row["platform"])
    deployment = Deployment(load_model(row["model"]), gpu, tp=int(row["tp"]), kv_cache=Dtype.FP8)
    limits = {"max_num_seqs": scenario.serving.max_num_seqs,
              "max_batched_tokens": scenario.serving.max_num_batched_tokens}
    plan = plan_memory(deployment, mem_fraction=scenario.serving.gpu_memory_utilization, **limits)
    everything = plan_memory(deployment, mem_fraction=1.0, **limits)
    assert plan.kv_budget_bytes == pytest.approx(0.75 * everything.kv_budget_bytes)
    unstated = {**row, "recipe_flags": row["recipe_flags"].replace("free_gpu_memory_fraction 0.75", "")}
    assert serving.scenario_sets(unstated)["serving.gpu_memory_utilization"] > sets["serving.gpu_memory_utilization"]


@pytest.mark.parametrize(("change", "why"), [
    ({"notes": "spec-decode: MTP"}, "speculative decoding"),
    ({"dp": "8"}, "attention data parallelism"),
    ({"num_prompts": ""}, "no stated prompt count"),
    ({"request_rate": "4"}, "request rate"),
])
def test_rows_the_simulator_cannot_stand_for_are_left_out_with_why(change, why):
    row = {**next(r for r in _rows() if r["platform"] == "h200"), **change}
    with pytest.raises(serving.Excluded, match=why):
        serving.scenario_sets(row)


def test_each_point_is_simulated_and_compared_with_its_published_numbers():
    kept, _ = serving.points()
    chosen = [next(p for p in kept if p.platform == gpu and p.concurrency == 4 and p.isl == p.osl == 1024)
              for gpu in ("h200", "mi355x")]
    compared, _ = serving.compare(chosen)
    assert [c.point for c in compared] == chosen
    for c in compared:
        for metric, published in c.point.published.items():
            assert c.errors[metric] == pytest.approx(c.predicted[metric] / published - 1)
        # same seed, same prediction: the comparison is reproducible
        assert serving.predict(c.point) == c.predicted
    table = serving.summary(compared)
    assert {t["platform"] for t in table} == {"h200", "mi355x", "all"}
    assert table[-1]["points"] == 2 and "tpot_ms_median" in table[-1]
    html = serving.figure_html(compared)
    assert "plotly" in html and "h200" in html and "mi355x" in html


def test_the_command_reports_per_platform_and_writes_its_plot(tmp_path, capsys, monkeypatch):
    from infersim.cli import main

    kept, left = serving.points()
    few = [next(p for p in kept if p.platform == gpu and p.concurrency == 4 and p.osl == 1024)
           for gpu in ("mi325x", "h200")]
    monkeypatch.setattr(serving, "points", lambda table=serving.TABLE: (few, list(left)))
    page = tmp_path / "serving.html"
    assert main(["validate", "--serving", "--platform", "mi325x", "--json", "--html", str(page)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [p["platform"] for p in result["platforms"]] == ["mi325x", "all"]
    assert result["platforms"][0]["points"] == len(result["every_row"]) >= 1
    assert all(r["configuration"].startswith("mi325x") for r in result["every_row"])
    assert "<html>" in page.read_text() and "mi325x" in page.read_text()
    assert main(["validate", "--serving", "--platform", "a100"]) == 2
    assert "a100" in capsys.readouterr().err


def test_sglang_aiter_at_sixteen_heads_over_a_bf16_cache_runs_the_non_persistent_decode():
    row = next(r for r in _rows() if r["platform"] == "mi355x" and "--tensor-parallel-size 8" in r["recipe_flags"])
    bf16 = {**row, "recipe_flags": row["recipe_flags"].replace("--kv-cache-dtype fp8_e4m3", "")}
    assert serving.scenario_sets(row)["kernels.mla_backend"] == "aiter-persistent"
    assert serving.scenario_sets(bf16)["kernels.mla_backend"] == "aiter"  # DeepSeek-R1 at TP8: 16 heads


def test_the_shipped_summary_covers_every_platform_with_its_points_and_run_shows_the_gpus_check():
    shipped = json.loads(serving.SUMMARY.read_text())
    kept, _ = serving.points()
    counts = {gpu: sum(1 for p in kept if p.platform == gpu) for gpu in {p.platform for p in kept}}
    by_platform = {entry["platform"]: entry for entry in shipped["platforms"]}
    # every point the table stands for is scored (none refused), per platform and in all
    assert {gpu: by_platform[gpu]["points"] for gpu in counts} == counts
    assert by_platform["all"]["points"] == len(kept)
    check = serving.published_check("mi355x")
    entry = by_platform["mi355x"]
    assert check["points"] == entry["points"] and check["models"] == ["deepseek-r1"]
    for metric in serving.METRICS:
        assert check[f"{metric}_median_abs_pct"] == round(entry[metric]["median_abs_pct"], 1)
        assert check[f"{metric}_p90_abs_pct"] >= check[f"{metric}_median_abs_pct"] > 0
    assert serving.published_check("b300") is None  # no published point runs on it


def test_run_reports_the_published_check_of_its_gpu(capsys):
    from infersim.cli import main

    assert main(["run", "--set", "workload.duration_s=20", "--json"]) == 0
    check = json.loads(capsys.readouterr().out)["published_serving_check"]
    assert check == serving.published_check("mi355x") and check["points"] >= 10
    b300 = Path(serving.__file__).parents[1] / "simulator" / "scenarios" / "study" / "kimi-k3-b300.yaml"
    assert main(["run", str(b300), "--set", "workload.duration_s=20", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["published_serving_check"] is None


def test_write_report_with_serving_summarizes_every_platform_only():
    from infersim.cli import main

    assert main(["validate", "--serving", "--platform", "h200", "--write-report"]) == 2


@pytest.mark.slow
def test_the_shipped_summary_is_what_validate_scores_now():
    compared, _ = serving.compare()
    assert serving.summary_json(compared) == serving.SUMMARY.read_text(), (
        "the model moved: run `infersim validate --serving --write-report` and commit the summary")
