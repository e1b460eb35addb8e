"""Every shipped spec loads; bad specs fail with an error naming the file and the key."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hwmodels.calibration import load_calibration
from hwmodels.dtypes import Dtype
from hwmodels.spec import CYCLE_MODEL_FIELDS, GPU, SPEC_DIR, Platform, load_gpu, load_platform, spec_names
from hwmodels.specfile import SpecError, load_record
from hwmodels.units import spellings
from hwmodels.work import Family

GPUS = spec_names("gpus")
PLATFORMS = spec_names("platforms")


def test_the_catalog_holds_every_supported_gpu_and_platform():
    assert set(GPUS) == {"mi355x", "mi325x", "mi300x", "b300", "b200", "h200", "h100"}
    assert {"mi355x-8", "mi325x-8", "mi300x-8", "b300-8", "b200-8", "h200-8", "h100-8", "h200-2"} <= set(PLATFORMS)


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_loads_with_a_source_for_every_number(name):
    gpu = load_gpu(name)
    assert gpu.name == name
    raw = yaml.safe_load((SPEC_DIR / "gpus" / f"{name}.yaml").read_text())
    numbers = [k for k, v in raw.items() if isinstance(v, dict) and "value" in v]
    numbers += [f"peak_dense_tflop_per_s.{d}" for d in raw["peak_dense_tflop_per_s"]]
    assert set(numbers) == set(gpu.sources)
    assert all(s.strip() for s in gpu.sources.values())
    assert gpu.peak_flop_per_s(Dtype.BF16) > 1e14
    assert 1e12 < gpu.hbm_bandwidth_bytes_per_s < 2e13
    assert gpu.tco_usd_per_gpu_hour > 0


@pytest.mark.parametrize("name", PLATFORMS)
def test_every_platform_loads_and_names_a_known_gpu(name):
    platform = load_platform(name)
    assert platform.gpu in GPUS
    assert platform.gpu_link_bytes_per_s > 0


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_has_a_calibration(name):
    calib = load_calibration(name)
    assert 0 < calib.memory_efficiency_for(None) <= 1


def test_kimi_k3_study_numbers_match():
    mi355x, b300 = load_gpu("mi355x"), load_gpu("b300")
    assert mi355x.peak_flop_per_s(Dtype.MXFP4) == pytest.approx(10.1e15, rel=0.01)
    assert b300.peak_flop_per_s(Dtype.NVFP4) == pytest.approx(13.5e15)
    assert mi355x.hbm_capacity_bytes == b300.hbm_capacity_bytes == 288e9
    assert mi355x.tco_usd_per_gpu_hour == 1.50 and b300.tco_usd_per_gpu_hour == 2.26
    assert mi355x.lds_per_cu_bytes == 160 * 1024 and mi355x.lds_granularity_bytes == 1280
    assert load_gpu("mi300x").lds_granularity_bytes == 512
    pair = load_platform("h200-2")
    assert pair.links_per_gpu == 18 and pair.link_bandwidth_bytes_per_s == pytest.approx(26.56e9)


def test_mi325x_is_the_mi300x_die_with_more_and_faster_hbm():
    mi300x, mi325x = load_gpu("mi300x"), load_gpu("mi325x")
    assert mi325x.arch == mi300x.arch == "cdna3 (gfx942)"
    assert mi325x.compute_units == mi300x.compute_units == 304
    for dtype in (Dtype.FP32, Dtype.TF32, Dtype.BF16, Dtype.FP16, Dtype.FP8, Dtype.INT8):
        assert mi325x.peak_flop_per_s(dtype) == mi300x.peak_flop_per_s(dtype)
    assert mi325x.peak_flop_per_s(Dtype.BF16) == pytest.approx(1307.4e12)
    assert mi325x.peak_flop_per_s(Dtype.FP8) == pytest.approx(2614.9e12)
    assert not any(mi325x.supports(d) for d in (Dtype.MXFP6, Dtype.MXFP4, Dtype.NVFP4))
    assert mi325x.hbm_capacity_bytes == 256e9 and mi325x.hbm_bandwidth_bytes_per_s == 6.0e12
    carried = [k for k, s in mi325x.sources.items() if "assumption: same CDNA3 die as MI300X" in s]
    assert "kernel_floor_us" in carried
    # its latencies are its own pointer chase's ([S66]), within 3 % of the MI300X's
    assert all("[S66] measured on the MI325X" in mi325x.sources[k] for k in ("dram_latency_ns", "l2_latency_ns"))
    assert mi325x.dram_latency_s == pytest.approx(mi300x.dram_latency_s, rel=0.03)
    # its own measured matmul rate ([S3]: 784.9 of 1307.4 TFLOP/s), not MI300X's
    assert load_calibration("mi325x").compute_efficiency_for(Family.GEMM, Dtype.BF16) == pytest.approx(0.60)
    node = load_platform("mi325x-8")
    assert node.gpu == "mi325x" and node.gpus == 8 and node.links_per_gpu == 7


def test_a_kernel_runs_on_mi325x_and_its_faster_hbm_shows():
    from infersim.queries import kernel_query

    params = {"m": "4", "n": "7168", "k": "7168", "dtype": "bf16"}  # a decode GEMM: weight-streaming bound
    on_325, on_300 = kernel_query("mi325x", "gemm", params), kernel_query("mi300x", "gemm", params)
    assert on_325["calibration"] == "mi325x" and on_325["tiles"]["family"] == "cdna3"
    assert on_325["flop"] == on_300["flop"] == 2 * 4 * 7168 * 7168
    assert 0 < on_325["time_s"] < on_300["time_s"]


# Peak rates each GPU's datasheet gives: every GPU has the formats its math units support, with a source.
SUPPORTED_FORMATS = {
    "h100": {Dtype.FP8}, "h200": {Dtype.FP8}, "mi300x": {Dtype.FP8}, "mi325x": {Dtype.FP8},
    "b200": {Dtype.FP8, Dtype.MXFP6, Dtype.MXFP4, Dtype.NVFP4},
    "b300": {Dtype.FP8, Dtype.MXFP6, Dtype.MXFP4, Dtype.NVFP4},
    "mi355x": {Dtype.FP8, Dtype.MXFP6, Dtype.MXFP4},
}


@pytest.mark.parametrize("name", GPUS)
def test_low_precision_peaks_are_given_where_the_gpu_supports_the_format(name):
    gpu = load_gpu(name)
    narrow = {Dtype.FP8, Dtype.MXFP6, Dtype.MXFP4, Dtype.NVFP4}
    assert {d for d in narrow if gpu.supports(d)} == SUPPORTED_FORMATS[name]
    for dtype in SUPPORTED_FORMATS[name]:
        assert gpu.peak_flop_per_s(dtype) >= gpu.peak_flop_per_s(Dtype.BF16)
        assert gpu.sources[f"peak_dense_tflop_per_s.{dtype.value}"].strip()


def test_unsupported_datatype_names_the_supported_ones():
    with pytest.raises(ValueError, match=r"h200 has no mxfp4 math units \(supported: .*bf16"):
        load_gpu("h200").peak_flop_per_s(Dtype.MXFP4)


def _h200_raw() -> dict:
    return yaml.safe_load((SPEC_DIR / "gpus" / "h200.yaml").read_text())


def _load(raw, write_yaml):
    path = write_yaml(raw)
    return load_record(GPU, yaml.safe_load(path.read_text()), path), path


def test_missing_key_is_named(write_yaml):
    raw = _h200_raw()
    del raw["hbm_bandwidth_tb_per_s"]
    with pytest.raises(SpecError, match=r"spec\.yaml: hbm_bandwidth_bytes_per_s: missing"):
        _load(raw, write_yaml)


def test_unknown_key_is_named_with_the_valid_keys(write_yaml):
    raw = _h200_raw()
    raw["hbm_colour"] = {"value": 1, "source": "x"}
    with pytest.raises(SpecError, match=r"spec\.yaml: hbm_colour: unknown key \(valid keys: name, vendor"):
        _load(raw, write_yaml)


def test_negative_value_is_named(write_yaml):
    raw = _h200_raw()
    raw["compute_units"]["value"] = -132
    with pytest.raises(SpecError, match=r"spec\.yaml: compute_units: value must not be negative"):
        _load(raw, write_yaml)


def test_unknown_unit_suffix_is_named_with_the_valid_spellings(write_yaml):
    raw = _h200_raw()
    raw["hbm_bandwidth_furlongs_per_s"] = raw.pop("hbm_bandwidth_tb_per_s")
    with pytest.raises(SpecError, match=r"hbm_bandwidth_furlongs_per_s: unknown unit suffix .*tb_per_s"):
        _load(raw, write_yaml)


def test_number_without_source_is_rejected(write_yaml):
    raw = _h200_raw()
    raw["clock_mhz"] = 1830
    with pytest.raises(SpecError, match=r"clock_mhz: must be a mapping \{value"):
        _load(raw, write_yaml)


def test_missing_datatype_in_peak_table_is_named(write_yaml):
    raw = _h200_raw()
    del raw["peak_dense_tflop_per_s"]["int8"]
    with pytest.raises(SpecError, match=r"peak_dense_tflop_per_s: missing datatypes .*int8"):
        _load(raw, write_yaml)


def test_malformed_yaml_names_the_file_and_line(write_yaml):
    path = write_yaml("name: h200\ncompute_units: {value: 132, source: [unclosed\n")
    with pytest.raises(SpecError, match=r"spec\.yaml: line \d+: malformed YAML"):
        load_gpu(str(path))


def test_unknown_gpu_lists_the_valid_ones():
    with pytest.raises(SpecError, match=r"unknown GPU \(valid: b200, b300, h100, h200, mi300x, mi325x, mi355x\)"):
        load_gpu("a100")


def test_platform_with_a_bad_efficiency_is_named(write_yaml):
    raw = yaml.safe_load((SPEC_DIR / "platforms" / "h200-2.yaml").read_text())
    raw["link_efficiency"]["value"] = 1.5
    path = write_yaml(raw)
    with pytest.raises(SpecError, match=r"spec\.yaml: link_efficiency: must be in \(0, 1\]"):
        load_record(Platform, raw, path)


@given(factor=st.sampled_from([("tb_per_s", 1.0), ("gb_per_s", 1e3), ("bytes_per_s", 1e12)]),
       lds=st.sampled_from([("kib", 1.0), ("bytes", 1024.0)]))
def test_two_unit_spellings_load_to_the_same_object(factor, lds):
    base = _h200_raw()
    path = SPEC_DIR / "gpus" / "h200.yaml"
    original = load_record(GPU, base, path)
    raw = copy.deepcopy(base)
    bw = raw.pop("hbm_bandwidth_tb_per_s")
    raw[f"hbm_bandwidth_{factor[0]}"] = {"value": bw["value"] * factor[1], "source": bw["source"]}
    cap = raw.pop("lds_per_cu_kib")
    raw[f"lds_per_cu_{lds[0]}"] = {"value": cap["value"] * lds[1], "source": cap["source"]}
    respelled = load_record(GPU, raw, path)
    assert respelled.hbm_bandwidth_bytes_per_s == pytest.approx(original.hbm_bandwidth_bytes_per_s)
    assert respelled.lds_per_cu_bytes == original.lds_per_cu_bytes
    assert replace(respelled, hbm_bandwidth_bytes_per_s=original.hbm_bandwidth_bytes_per_s) == original


def test_same_quantity_twice_under_two_units_is_rejected(write_yaml):
    raw = _h200_raw()
    raw["hbm_bandwidth_gb_per_s"] = {"value": 4800, "source": "x"}
    with pytest.raises(SpecError, match="a second time"):
        _load(raw, write_yaml)


def test_calibration_rejects_efficiency_above_one(write_yaml):
    overlay = write_yaml({"compute_efficiency": {"gemm": {"bf16": {"value": 1.2, "source": "x"}}}})
    with pytest.raises(SpecError, match=r"compute_efficiency\.gemm\.bf16: must be in \(0, 1\]"):
        load_calibration("h200", str(overlay))


def test_calibration_rejects_unknown_family(write_yaml):
    overlay = write_yaml({"compute_efficiency": {"gemmm": {"bf16": {"value": 0.5, "source": "x"}}}})
    with pytest.raises(SpecError, match=r"compute_efficiency\.gemmm: unknown name \(valid: .*gemm"):
        load_calibration("h200", str(overlay))


def test_an_overlay_replaces_every_spelling_of_a_field(write_yaml):
    overlay = write_yaml({"launch_eager_s": {"value": 7.0e-6, "source": "measured"}})
    calib = load_calibration("h200", str(overlay))
    assert calib.launch_eager_s == pytest.approx(7e-6)
    assert calib.sources["launch_eager_s"] == "measured"


CYCLE_MODEL_KEYS = {  # YAML key -> dataclass field, for the cycle-level cost model's constants
    "boost_clock_mhz": "boost_clock_hz",
    "matmul_clock_mhz": "matmul_clock_hz",
    "workgroup_dispatch_ns": "workgroup_dispatch_s",
    "hbm_burst_latency_ns": "hbm_burst_latency_s",
    "memory_sector_bytes": "memory_sector_bytes",
    "dram_latency_ns": "dram_latency_s",
    "l2_latency_ns": "l2_latency_s",
    "l2_bandwidth_tb_per_s": "l2_bandwidth_bytes_per_s",
    "cu_bandwidth_gb_per_s": "cu_bandwidth_bytes_per_s",
    "kernel_floor_us": "kernel_floor_s",
    **{k: k for k in ("alu_latency_cycles", "int_latency_cycles", "sfu_latency_cycles", "mma_latency_cycles",
                      "lds_latency_cycles", "shuffle_latency_cycles", "reduction_latency_cycles", "fp32_lanes_per_cu",
                      "int32_lanes_per_cu", "bit_lanes_per_cu", "sfu_lanes_per_cu", "lds_bytes_per_clock_per_cu")},
}


def test_cycle_model_keys_cover_the_validated_fields():
    assert set(CYCLE_MODEL_KEYS.values()) == set(CYCLE_MODEL_FIELDS)


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_has_sourced_positive_cycle_model_constants(name):
    gpu = load_gpu(name)
    raw = yaml.safe_load((SPEC_DIR / "gpus" / f"{name}.yaml").read_text())
    for key, field_name in CYCLE_MODEL_KEYS.items():
        value = getattr(gpu, field_name)
        assert math.isfinite(value) and value > 0, (name, field_name, value)
        assert isinstance(raw[key], dict) and str(raw[key]["source"]).strip(), (name, key)
        assert gpu.sources[key] == raw[key]["source"]
    # Plausibility in SI units: catches a value written in the wrong unit.
    assert 1e9 < gpu.boost_clock_hz < 3e9 and gpu.boost_clock_hz >= gpu.clock_hz
    assert 5e-8 < gpu.l2_latency_s < gpu.dram_latency_s < 2e-6
    assert gpu.hbm_bandwidth_bytes_per_s < gpu.l2_bandwidth_bytes_per_s < 1e14
    assert 1e10 < gpu.cu_bandwidth_bytes_per_s < gpu.hbm_bandwidth_bytes_per_s
    assert 5e-7 < gpu.kernel_floor_s < 2e-5
    assert gpu.fp32_lanes_per_cu >= gpu.sfu_lanes_per_cu


@pytest.mark.parametrize("key", sorted(CYCLE_MODEL_KEYS))
def test_missing_cycle_model_key_is_named(write_yaml, key):
    raw = _h200_raw()
    del raw[key]
    with pytest.raises(SpecError, match=rf"spec\.yaml: {CYCLE_MODEL_KEYS[key]}: missing"):
        _load(raw, write_yaml)


def test_negative_dram_latency_is_named(write_yaml):
    raw = _h200_raw()
    raw["dram_latency_ns"]["value"] = -1
    with pytest.raises(SpecError, match=r"spec\.yaml: dram_latency_ns: value must not be negative"):
        _load(raw, write_yaml)


@pytest.mark.parametrize("bad", [0, float("inf"), float("nan")])
def test_zero_or_infinite_cycle_model_constant_is_named(write_yaml, bad):
    raw = _h200_raw()
    raw["dram_latency_ns"]["value"] = bad
    problem = r"dram_latency_s: must be positive and finite|dram_latency_ns: value must be a finite number"
    with pytest.raises(SpecError, match=rf"spec\.yaml: ({problem})"):
        _load(raw, write_yaml)


def test_the_h100_takes_its_own_probes_and_the_h200_probe_only_where_its_own_cannot_see():
    """H100 and H200 SXM are one GH100 die (132 SMs, 50 MB L2) with different HBM stacks. The H100's spec holds
    what its own probes measured (validation/data/h100/), and says so; the SM's path to L2 its MLP probe cannot
    show (its HBM3 saturates first), so that one value is the H200 probe's, and says why."""
    from validation.probes import probe_constants

    h100, h200 = load_gpu("h100"), load_gpu("h200")
    c = probe_constants(Path(__file__).parents[2] / "validation" / "data" / "h100")
    own = ("dram_latency_s", "l2_latency_s", "l2_bandwidth_bytes_per_s", "launch_graph_node_s", "kernel_floor_s",
           "workgroup_dispatch_s", "launch_eager_gpu_s", "hbm_burst_latency_s", "alu_latency_cycles",
           "int_latency_cycles", "sfu_latency_cycles", "mma_latency_cycles", "shuffle_latency_cycles",
           "reduction_latency_cycles", "fp32_lanes_per_cu", "int32_lanes_per_cu", "bit_lanes_per_cu",
           "sfu_lanes_per_cu", "lds_bytes_per_clock_per_cu", "xu_issue_cycles", "shfl_issue_cycles",
           "imad_issue_cycles", "dram_load_granule_bytes", "partial_sector_store_factor", "lds_latency_cycles",
           "ldsm_latency_cycles", "lds_128_latency_cycles")
    for field in own:
        assert getattr(h100, field) == pytest.approx(getattr(c, field), rel=5e-3), field
        key = next(k for k in spellings(field) if k in h100.sources)
        assert "validation/data/h100/" in h100.sources[key], (field, h100.sources[key])
    assert h100.cu_bandwidth_bytes_per_s == h200.cu_bandwidth_bytes_per_s
    why = h100.sources["cu_bandwidth_gb_per_s"]
    assert "H200 probe" in why and "saturates" in why
    assert h100.hbm_bandwidth_bytes_per_s < 0.75 * h200.hbm_bandwidth_bytes_per_s


def test_the_matrix_clock_is_the_h100_probes_share_of_the_boost_clock():
    """A kernel that issues matrix instructions runs its SMs below the boost clock (`probe_smclock.csv`, recorded on
    the H100); the H200, the same GH100 SM, takes the H100's value and says so."""
    from validation.probes import probe_constants

    c = probe_constants(Path(__file__).parents[2] / "validation" / "data" / "h100")
    h100, h200 = load_gpu("h100"), load_gpu("h200")
    assert 0.85 < c.matrix_clock_ratio < 1.0
    assert h100.matrix_boost_clock_hz == pytest.approx(h100.boost_clock_hz * c.matrix_clock_ratio, rel=1e-4)
    assert "validation/data/h100/probe_smclock.csv" in h100.sources["matrix_boost_clock_mhz"]
    assert h200.matrix_boost_clock_hz == h100.matrix_boost_clock_hz
    assert h200.sources["matrix_boost_clock_mhz"].startswith("assumption") and "H100" in h200.sources[
        "matrix_boost_clock_mhz"]


def test_a_matrix_clock_above_the_boost_clock_is_refused(write_yaml):
    raw = _h200_raw()
    raw["matrix_boost_clock_mhz"]["value"] = 2100
    with pytest.raises(SpecError, match=r"matrix_boost_clock_hz: must be positive and at most boost_clock_hz"):
        _load(raw, write_yaml)


@pytest.mark.parametrize("key", ["ldsm_latency_cycles", "lds_128_latency_cycles"])
@pytest.mark.parametrize("bad", [0, float("inf")])
def test_a_shared_load_form_latency_must_be_positive_and_finite(write_yaml, key, bad):
    raw = _h200_raw()
    raw[key]["value"] = bad
    with pytest.raises(SpecError, match=rf"spec\.yaml: {key}: (must be positive and finite|value must be a finite)"):
        _load(raw, write_yaml)


def test_a_gpu_without_the_wider_shared_forms_prices_them_as_its_lds():
    from compiled.sass_timing import latencies

    mi355x, h200 = load_gpu("mi355x"), load_gpu("h200")
    assert mi355x.ldsm_latency_cycles is None and mi355x.lds_128_latency_cycles is None
    cycles = latencies(mi355x)
    assert cycles["ldsm"] == cycles["shared_128"] == cycles["shared"] == mi355x.lds_latency_cycles
    cycles = latencies(h200)
    assert (cycles["shared"], cycles["ldsm"], cycles["shared_128"]) == (23, 29, 32)
