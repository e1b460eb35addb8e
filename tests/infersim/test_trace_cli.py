"""`infersim trace predict` and `infersim calibrate` on committed H200 engine-step traces, and `--calibration`."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from infersim.cli import main
from tests.conftest import ROOT

STEPS = ROOT / "validation" / "data" / "h200" / "engine_step"
STEP_TIMES = str(STEPS / "engine_step.csv")
DECODES = [str(STEPS / f"qwen3-32b_decode_{s}.trace.json.gz") for s in ("1x1024", "8x1024", "16x1024", "32x1024")]


def run_json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def error_of(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    return err


def test_trace_predict_reports_families_traces_and_a_page(capsys, tmp_path):
    page = tmp_path / "predicted.html"
    r = run_json(capsys, "trace", "predict", DECODES[0], "--hw", "h200", "--step-times", STEP_TIMES,
                 "--html", str(page), "--json")
    assert r["traces"] == 1 and r["unmatched_pct"] < 2.0
    (row,) = r["per_trace"]
    assert row["trace"] == "qwen3-32b_decode_1x1024.trace.json.gz" and row["format"] == "kineto"
    assert row["measured_step_s"] == pytest.approx(2.042253e-02)
    assert abs(row["step_error_pct"]) < 15
    families = {f["family"]: f for f in r["families"]}
    assert set(families) == {"gemm", "attention_prefill", "norm", "elementwise", "copy"}
    assert sum(f["traced_s"] for f in r["families"]) == pytest.approx(r["traced_kernels_s"])
    assert page.is_file() and "plotly" in page.read_text(encoding="utf-8")[:20000].lower()


def test_calibrate_fits_on_half_tests_on_the_rest_and_the_file_applies(capsys, tmp_path):
    out = tmp_path / "cal.yaml"
    r = run_json(capsys, "calibrate", *DECODES, "--hw", "h200", "--step-times", STEP_TIMES, "--out", str(out),
                 "--json")
    assert (r["train_traces"], r["test_traces"]) == (2, 2)
    assert {row["set"] for row in r["per_trace"]} == {"train", "test"}
    assert r["test_median_abs_error_pct_after"] < r["test_median_abs_error_pct_before"]
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert doc["gpu"] == "h200" and "fitted on 2 traces" in doc["fitted_on"] and "tested on 2" in doc["fitted_on"]
    assert doc["family_time_scale"]["norm"]["default"]["value"] > 1  # PyTorch's norms are slower than modelled
    assert r["loads_as"] == "h200-fitted"
    base = run_json(capsys, "step", "--model", "qwen3-32b", "--hw", "h200", "--decode", "8x1024", "--json")
    fitted = run_json(capsys, "step", "--model", "qwen3-32b", "--hw", "h200", "--decode", "8x1024", "--json",
                      "--calibration", str(out))
    assert fitted["families"]["norm"]["time_s"] > base["families"]["norm"]["time_s"]
    # the same trace predicted with the fitted calibration is closer to its measured step
    before = run_json(capsys, "trace", "predict", DECODES[1], "--hw", "h200", "--step-times", STEP_TIMES, "--json")
    after = run_json(capsys, "trace", "predict", DECODES[1], "--hw", "h200", "--step-times", STEP_TIMES, "--json",
                     "--calibration", str(out))
    assert abs(after["per_trace"][0]["step_error_pct"]) < abs(before["per_trace"][0]["step_error_pct"])
    # fitted on the H200: refused for another GPU, by name
    err = error_of(capsys, "step", "--model", "qwen3-32b", "--hw", "b200", "--decode", "8x1024",
                   "--calibration", str(out))
    assert "fitted on h200" in err and "b200" in err


def test_bad_inputs_are_one_line_errors_and_write_nothing(capsys, tmp_path):
    out = tmp_path / "cal.yaml"
    assert "at least two traces" in error_of(capsys, "calibrate", DECODES[0], "--hw", "h200", "--out", str(out))
    missing = str(tmp_path / "nope.json")
    assert "nope.json" in error_of(capsys, "trace", "predict", missing, "--hw", "h200")
    bad_csv = tmp_path / "times.csv"
    bad_csv.write_text("trace,seconds\nx,1\n", encoding="utf-8")
    assert "time_s_median" in error_of(capsys, "calibrate", *DECODES[:2], "--hw", "h200", "--step-times",
                                       str(bad_csv), "--out", str(out))
    short = tmp_path / "short.csv"
    short.write_text("trace,time_s_median\nqwen3-32b_decode_1x1024.trace.json.gz,0.02\n", encoding="utf-8")
    assert "no row for qwen3-32b_decode_8x1024" in error_of(capsys, "calibrate", *DECODES[:2], "--hw", "h200",
                                                          "--step-times", str(short), "--out", str(out))
    assert "--out" in error_of(capsys, "calibrate", *DECODES[:2], "--hw", "h200", "--out", str(tmp_path))
    assert "train-share" in error_of(capsys, "calibrate", *DECODES[:2], "--hw", "h200", "--out", str(out),
                                     "--train-share", "1.5")
    assert "no such calibration file" in error_of(capsys, "step", "--model", "qwen3-32b", "--hw", "h200",
                                                  "--decode", "1x1", "--calibration", missing)
    broken = tmp_path / "broken.json.gz"
    shutil.copy(DECODES[0], broken)
    broken.write_bytes(broken.read_bytes()[:5000])
    assert "broken.json.gz" in error_of(capsys, "trace", "predict", str(broken), "--hw", "h200")
    assert not out.exists()


def _kineto(path, device_name: str, events: list[dict]) -> str:
    path.write_text(json.dumps({"deviceProperties": [{"id": 0, "name": device_name}], "traceEvents": events}))
    return str(path)


def test_nothing_matched_is_no_error_and_another_gpu_is_a_warning(capsys, tmp_path):
    # a graph replay: kernels with no operator and no grid, recorded on an H100
    replay = [{"ph": "X", "cat": "kernel", "name": f"_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_{i}",
               "ts": 10.0 * i, "dur": 3.5 + i, "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7}}
              for i in range(3)]
    trace = _kineto(tmp_path / "replay.json", "NVIDIA H100 80GB HBM3", replay)
    assert main(["trace", "predict", trace, "--hw", "h200", "--json"]) == 0
    captured = capsys.readouterr()
    r = json.loads(captured.out)
    assert r["unmatched_pct"] == 100.0 and r["kernels_error_pct"] is None and r["matched_traced_s"] == 0.0
    assert r["per_trace"][0]["kernels_error_pct"] is None and r["matched_by_pct"] == {"name only": 100.0}
    assert r["per_trace"][0]["trace_gpu"] == "NVIDIA H100 80GB HBM3"
    assert "recorded on 'NVIDIA H100 80GB HBM3', predicted here for h200 (--hw h100" in captured.err
    assert r["gpu_warnings"] and "h100" in r["gpu_warnings"][0]
    # on its own GPU, no warning; sized copies match by their bytes, and the error counts only what matched
    sized = [*replay, {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 100.0,
                       "dur": 9.0, "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7, "bytes": 12_582_912}}]
    trace = _kineto(tmp_path / "sized.json", "NVIDIA H100 80GB HBM3", sized)
    assert main(["trace", "predict", trace, "--hw", "h100", "--json"]) == 0
    captured = capsys.readouterr()
    r = json.loads(captured.out)
    assert "warning" not in captured.err and "gpu_warnings" not in r
    assert r["matched_traced_s"] == pytest.approx(9e-6)
    assert r["kernels_error_pct"] == pytest.approx(100 * (r["matched_predicted_s"] / 9e-6 - 1))
    assert r["per_trace"][0]["launch_pct"] == pytest.approx(100 * 9 / (9 + 3.5 + 4.5 + 5.5))


def test_a_graph_replay_is_matched_to_the_named_models_step(capsys, tmp_path):
    # a replay of two layers' worth of a gpt-oss-20b decode: names only, no operator, no grid
    names = ["_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwd", "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256",
             "void vllm::rotary_embedding_kernel<c10::BFloat16, true>", "kernel_unified_attention_3d",
             "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x256", "_topk_forward",
             "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1"]
    events = [{"ph": "X", "cat": "kernel", "name": name, "ts": 20.0 * i, "dur": 4.0 + i % 3, "pid": 0, "tid": 7,
               "args": {"device": 0, "stream": 7}} for i, name in enumerate(names * 2)]
    trace = _kineto(tmp_path / "replay.json", "AMD Instinct MI300X", events)
    r = run_json(capsys, "trace", "predict", trace, "--hw", "mi300x", "--json")
    assert r["unmatched_pct"] == 100.0
    r = run_json(capsys, "trace", "predict", trace, "--hw", "mi300x", "--model", "gpt-oss-20b", "--decode", "32x1024",
                 "--json")
    row = r["per_trace"][0]
    assert row["aligned_pct"] > 80 and r["matched_by_pct"]["model step order"] == row["aligned_pct"]
    assert [u["kernel"] for u in r["unmatched"]] == ["_topk_forward"]  # what the plan does not hold
    assert r["kernels_error_pct"] is not None


@pytest.mark.parametrize(("extra", "message"), [
    (["--decode", "8x1024"], "--decode, --prefill and --option describe the traced step of --model: give --model"),
    (["--model", "gpt-oss-20b"], "--model needs the traced step's batch: --decode NxCONTEXT and/or --prefill"),
    (["--model", "gpt-5", "--decode", "8x1024"], "gpt-5"),
])
def test_the_traced_step_is_named_whole(capsys, tmp_path, extra, message):
    trace = _kineto(tmp_path / "t.json", "AMD Instinct MI300X", [
        {"ph": "X", "cat": "kernel", "name": "kernel_unified_attention_3d", "ts": 0.0, "dur": 5.0, "pid": 0,
         "tid": 7, "args": {"device": 0, "stream": 7}}])
    assert message in error_of(capsys, "trace", "predict", trace, "--hw", "mi300x", *extra)
