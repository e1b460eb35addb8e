"""The probe derivations recover known constants from synthetic CSVs, and reject malformed ones by name."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from validation import probes

SM = 132
MIB = 1 << 20


def _write(path, probe: str, rows: list[dict]) -> None:
    header = probes.COLUMNS[probe]
    with (path / probes.csv_name(probe)).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for row in rows:
            w.writerow({**{"sm_count": SM, "gpu_name": "NVIDIA H200", "repeats": 20}, **row})


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def _mlp_rows(rng, latency: float, cap: float, noise: float) -> list[dict]:
    rows = []
    for grid_mult in (1, 2, 4, 8, 16, 32):
        for block in (256, 1024, 2048):  # 1, 4 and 8 fp32 per thread at 8 warps: every byte in flight at once
            x = grid_mult * block * 4
            bw = min(x / latency, cap) * math.exp(rng.normal(0, noise))
            rows.append({"grid": SM * grid_mult, "block_elems": block, "num_warps": 8, "active_sms": SM,
                         "bytes_in_flight_per_sm": x, "bytes_per_s_per_sm": bw, "bytes_per_s": bw * SM})
    for grid in (1, 4, 16, 33, 66):
        # 32 fp32 per thread: loads issued one after another, far below the curve; the fit must leave them out
        x = 4096 * 4
        bw = min(x / latency, cap) / 3 * math.exp(rng.normal(0, noise))
        rows.append({"grid": grid, "block_elems": 4096, "num_warps": 4, "active_sms": grid,
                     "bytes_in_flight_per_sm": x, "bytes_per_s_per_sm": bw, "bytes_per_s": bw * grid})
    return rows


@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_mlp_fit_recovers_latency_and_cap(tmp_path, rng, noise):
    latency, cap = 900e-9, 33e9  # a ~30 KB knee, inside the sampled range
    _write(tmp_path, "mlp", _mlp_rows(rng, latency, cap, noise))
    c = probes.probe_constants(tmp_path)
    assert c.loaded_latency_s == pytest.approx(latency, rel=0.04)
    assert c.cu_bandwidth_bytes_per_s == pytest.approx(cap, rel=0.04)
    assert c.mlp_smoothness >= 4  # a hard min is a sharp knee
    best_full = max(r["bytes_per_s"] for r in _mlp_rows(np.random.default_rng(0), latency, cap, 0) if
                    r["active_sms"] == SM)
    assert c.hbm_read_bandwidth_bytes_per_s == pytest.approx(best_full, rel=0.1)
    assert "probe_mlp.csv" in c.sources["loaded_latency_s"]


def test_mlp_fit_recovers_a_smooth_knee(rng):
    latency, cap, n = 700e-9, 40e9, 2.0
    x = np.geomspace(1e3, 1e6, 25)
    y = probes.mlp_curve(x, latency, cap, n) * np.exp(rng.normal(0, 0.01, x.size))
    got_latency, got_cap, got_n = probes.fit_mlp(x, y)
    assert got_latency == pytest.approx(latency, rel=0.03)
    assert got_cap == pytest.approx(cap, rel=0.03)
    assert got_n == pytest.approx(n, rel=0.15)


def test_latency_and_l2_constants(tmp_path, rng):
    lat = {16 << 10: 300, 256 << 10: 300, 4 * MIB: 310, 16 * MIB: 330, 32 * MIB: 360, 256 * MIB: 800,
           2048 * MIB: 950}
    _write(tmp_path, "latency", [{"footprint_bytes": f, "steps": 4096, "ns_per_load": ns} for f, ns in lat.items()])
    l2_bw, hbm_bw, knee = 9e12, 4e12, 40 * MIB
    rows = []
    for f_mib in (1, 4, 8, 16, 24, 32, 40, 48, 56, 64, 96, 128, 512):
        f = f_mib * MIB
        # a smooth drop centred on the knee in log footprint, with 1 % noise
        w = 1 / (1 + (f / knee) ** 8)
        rows.append({"footprint_bytes": f, "bytes_per_s": (hbm_bw + (l2_bw - hbm_bw) * w) * rng.normal(1, 0.01)})
    _write(tmp_path, "l2", rows)
    c = probes.probe_constants(tmp_path)
    assert c.dram_latency_s == pytest.approx(950e-9)
    assert c.l2_latency_s == pytest.approx(320e-9)
    assert c.l2_bandwidth_bytes_per_s == pytest.approx(l2_bw, rel=0.03)
    assert c.l2_reuse_footprint_bytes == pytest.approx(knee, rel=0.05)
    assert "footprint_bytes=2147483648" in c.sources["dram_latency_s"]


def test_table_constants_and_missing_probes(tmp_path):
    _write(tmp_path, "floor", [
        {"variant": "empty", "launch_mode": "graph", "time_s_median": 1.9e-6},  # flushed: not the node's cost
        {"variant": "empty", "launch_mode": "eager", "time_s_median": 14e-6},  # one block: the host probe's instead
        {"variant": "empty", "launch_mode": "eager_hidden", "time_s_median": 3.5e-6},
        {"variant": "empty_grid_4w", "launch_mode": "graph", "programs": 132, "sm_count": 132, "time_s_median": 1.6e-6},
        {"variant": "empty_grid_4w", "launch_mode": "graph", "programs": 1056, "sm_count": 132,
         "time_s_median": 2.3e-6},
        {"variant": "load_store_1", "launch_mode": "graph", "time_s_median": 3e-6},
        {"variant": "tile_4k_sm_release_sys_1", "launch_mode": "graph", "time_s_median": 4.8e-6},
        {"variant": "tile_4k_sm_release_sys_2", "launch_mode": "graph", "time_s_median": 5.4e-6},
        {"variant": "tile_4k_1prog", "launch_mode": "graph", "time_s_median": 3.2e-6},
        {"variant": "tile_4k_sm", "launch_mode": "graph", "time_s_median": 3.9e-6},
    ])
    _write(tmp_path, "host", [{"variant": "empty", "launch_mode": "eager", "time_s_median": 11e-6},
                              {"variant": "torch_add_256", "launch_mode": "eager", "time_s_median": 6e-6}])
    issue = []
    for op, lanes, lat in (("fp32_fma", 126, 4.1), ("int32_mad", 63, 4.5), ("bit", 60, 2.2), ("exp2", 15.8, 18)):
        issue.append({"op": op, "mode": "throughput", "ops_per_clock_per_sm": lanes})
        issue.append({"op": op, "mode": "dependent", "cycles_per_op": lat})
    # one FRND among 16 FFMAs: 17 instructions in 19 scheduler cycles (128 lane-ops a clock per SM over 17 x 128 / 19)
    issue.append({"op": "frnd_mix", "mode": "throughput", "instructions_per_step": 17,
                  "ops_per_clock_per_sm": 128 * 17 / 19})
    # 6 shuffles among 270 instructions in 282 cycles: each shuffle holds the scheduler 3 cycles
    issue.append({"op": "shfl_mix", "mode": "throughput", "instructions_per_step": 270, "probed_per_step": 6,
                  "ops_per_clock_per_sm": 128 * 270 / 282})
    # 8 IMADs among 249 instructions in 257 cycles: each holds the scheduler 2 cycles
    issue.append({"op": "imad_mix", "mode": "throughput", "instructions_per_step": 249, "probed_per_step": 8,
                  "ops_per_clock_per_sm": 128 * 249 / 257})
    _write(tmp_path, "issue", issue)
    _write(tmp_path, "mma", [{"m": 16, "n": 16, "k": 16, "num_warps": 1, "cycles_per_dot": 33},
                             {"m": 64, "n": 64, "k": 16, "num_warps": 4, "cycles_per_dot": 20}])
    _write(tmp_path, "smem", [{"what": "reduce_round_trip", "num_warps": 4, "cycles_per_round": 120},
                              {"what": "reduce_round_trip", "num_warps": 8, "cycles_per_round": 150},
                              {"what": "layout_conversion", "num_warps": 8, "bytes_per_clock_per_sm": 90}])
    c = probes.probe_constants(tmp_path)
    assert (c.launch_graph_node_s, c.kernel_floor_s) == (pytest.approx(1.5e-6), 3e-6)  # the grid line's intercept
    assert c.workgroup_dispatch_s == pytest.approx(0.1e-6)  # its slope: (2.3 - 1.6) us over 7 workgroups per SM
    assert (c.launch_eager_triton_s, c.launch_eager_s, c.launch_eager_gpu_s) == (11e-6, 6e-6, 3.5e-6)
    # the copy per SM (3.9 us) with one system-scope release (4.8), then two (5.4)
    assert (c.system_release_s, c.system_release_next_s) == (pytest.approx(0.9e-6), pytest.approx(0.6e-6))
    assert c.hbm_burst_latency_s == pytest.approx(0.7e-6)  # every SM's tile copy less one alone
    assert (c.fp32_lanes_per_cu, c.int32_lanes_per_cu, c.bit_lanes_per_cu, c.sfu_lanes_per_cu) == (126, 63, 60, 15.8)
    assert (c.alu_latency_cycles, c.int_latency_cycles, c.sfu_latency_cycles) == (4.1, 4.5, 18)
    assert c.xu_issue_cycles == pytest.approx(3.0)  # 19 cycles a step less 16 for its FFMAs
    assert c.shfl_issue_cycles == pytest.approx(3.0)  # (282 - 264) / 6
    assert c.imad_issue_cycles == pytest.approx(2.0)  # (257 - 241) / 8
    assert (c.mma_latency_cycles, c.reduction_latency_cycles, c.lds_bytes_per_clock_per_cu) == (33, 120, 90)
    # No latency, mlp or l2 CSV here: those constants are None and say why.
    assert c.dram_latency_s is None and "probe_latency.csv not found" in c.sources["dram_latency_s"]
    rows = probes.summary(tmp_path)
    assert [r[0] for r in rows] == list(probes.ProbeConstants.names()) and len(rows) == 46
    assert c.grid_stride_efficiency is None and "probe_grid.csv not found" in c.sources["grid_stride_efficiency"]
    assert all(r[2] for r in rows)  # every constant has a note, set or not
    assert "kernel_floor_s" in probes.format_summary(rows)


def test_missing_column_names_file_and_column(tmp_path):
    (tmp_path / "probe_mlp.csv").write_text("grid,bytes_per_s\n132,1e12\n")
    with pytest.raises(ValueError, match=r"probe_mlp\.csv.*'bytes_in_flight_per_sm'"):
        probes.probe_constants(tmp_path)


def test_non_numeric_cell_names_file_line_and_column(tmp_path):
    _write(tmp_path, "latency", [{"footprint_bytes": 4 * MIB, "ns_per_load": 300},
                                 {"footprint_bytes": 8 * MIB, "ns_per_load": "fast"}])
    with pytest.raises(ValueError, match=r"probe_latency\.csv line 3: column 'ns_per_load'"):
        probes.probe_constants(tmp_path)


def test_columns_end_with_timing_then_provenance():
    for probe, cols in probes.COLUMNS.items():
        assert cols[-len(probes.PROVENANCE_COLUMNS):] == probes.PROVENANCE_COLUMNS, probe
        assert set(probes.TIMING_COLUMNS) <= set(cols)
        assert len(set(cols)) == len(cols)


# constant of validation.probes -> (where the H200 spec or calibration holds it)
SPEC_FROM_PROBE = {
    "dram_latency_s": "dram_latency_s", "l2_latency_s": "l2_latency_s",
    "l2_bandwidth_bytes_per_s": "l2_bandwidth_bytes_per_s", "cu_bandwidth_bytes_per_s": "cu_bandwidth_bytes_per_s",
    "launch_graph_node_s": "launch_graph_node_s", "kernel_floor_s": "kernel_floor_s",
    "launch_eager_s": "launch_eager_s", "workgroup_dispatch_s": "workgroup_dispatch_s",
    "launch_eager_gpu_s": "launch_eager_gpu_s", "launch_eager_triton_s": "launch_eager_triton_s",
    "hbm_burst_latency_s": "hbm_burst_latency_s",
    "matmul_clock_hz": "matmul_clock_hz", "copy_clock_hz": "boost_clock_hz",
    "alu_latency_cycles": "alu_latency_cycles", "int_latency_cycles": "int_latency_cycles",
    "sfu_latency_cycles": "sfu_latency_cycles", "mma_latency_cycles": "mma_latency_cycles",
    "shuffle_latency_cycles": "shuffle_latency_cycles", "reduction_latency_cycles": "reduction_latency_cycles",
    "fp32_lanes_per_cu": "fp32_lanes_per_cu", "int32_lanes_per_cu": "int32_lanes_per_cu",
    "bit_lanes_per_cu": "bit_lanes_per_cu", "sfu_lanes_per_cu": "sfu_lanes_per_cu",
    "lds_bytes_per_clock_per_cu": "lds_bytes_per_clock_per_cu", "xu_issue_cycles": "xu_issue_cycles",
}
CALIBRATION_FROM_PROBE = {"loaded_latency_s": "mlp_latency_s", "mlp_smoothness": "mlp_smoothness",
                          "mlp_deep_thread_share": "mlp_deep_thread_share",
                          "grid_stride_efficiency": "grid_stride_efficiency"}
SPEC_FROM_PROBE.update({"dram_load_granule_bytes": "dram_load_granule_bytes", "shfl_issue_cycles": "shfl_issue_cycles",
                        "imad_issue_cycles": "imad_issue_cycles",
                        "partial_sector_store_factor": "partial_sector_store_factor",
                        "lds_latency_cycles": "lds_latency_cycles", "ldsm_latency_cycles": "ldsm_latency_cycles",
                        "lds_128_latency_cycles": "lds_128_latency_cycles"})


def test_the_h200_constants_are_what_the_committed_probes_give():
    from hwmodels.calibration import load_calibration
    from hwmodels.spec import load_gpu
    from hwmodels.units import spellings

    c = probes.probe_constants()
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    for name, field in SPEC_FROM_PROBE.items():
        assert getattr(gpu, field) == pytest.approx(getattr(c, name), rel=5e-3), name
        key = next(k for k in spellings(field) if k in gpu.sources)
        assert "probe" in gpu.sources[key], (field, gpu.sources[key])
    for name, field in CALIBRATION_FROM_PROBE.items():
        assert getattr(calib, field) == pytest.approx(getattr(c, name), rel=5e-3), name


def test_peer_constants_from_a_peer_csv(tmp_path):
    latency, link = 1.5e-6, 390e9
    rows = [{"what": "chase", "location": "peer", "ns_per_load": latency * 1e9, "bytes_per_s": "",
             "bytes_in_flight": 4},
            {"what": "chase", "location": "local", "ns_per_load": 350.0, "bytes_per_s": "", "bytes_in_flight": 4}]
    for grid in (1, 4, 16, 36, 132, 264):
        inflight = grid * 4096
        rows.append({"what": "read", "location": "peer", "ns_per_load": "", "bytes_in_flight": inflight,
                     "bytes_per_s": min(inflight / latency, link)})
    _write(tmp_path, "peer", rows)
    c = probes.probe_constants(tmp_path)
    assert c.peer_load_latency_s == pytest.approx(latency)
    assert c.peer_read_bandwidth_bytes_per_s == pytest.approx(link)
    assert c.peer_loaded_latency_s == pytest.approx(latency)  # the latency-bound rows give it back


def test_grid_stride_efficiency_is_the_median_time_ratio_of_persistent_copies(tmp_path):
    tiles = 65536
    rows = [{"tiles": tiles, "rounds": 0, "programs": tiles, "time_s_median": 100e-6}]
    rows += [{"tiles": tiles, "rounds": 0, "programs": p, "time_s_median": t}
             for p, t in ((528, 125e-6), (1056, 110e-6), (2112, 105e-6))]
    rows.append({"tiles": tiles, "rounds": 128, "programs": 528, "time_s_median": 300e-6})  # compute-bound: not used
    _write(tmp_path, "grid", rows)
    c = probes.probe_constants(tmp_path)
    assert c.grid_stride_efficiency == pytest.approx(100 / 110)
    assert "3 persistent rounds=0 rows" in c.sources["grid_stride_efficiency"]


def test_grid_stride_lowers_only_the_bandwidth_of_grid_stride_programs():
    from dataclasses import replace

    from hwmodels.calibration import load_calibration
    from hwmodels.program import Program
    from hwmodels.roofline import LaunchMode, kernel_time
    from hwmodels.spec import load_gpu
    from hwmodels.work import Work

    gpu, calib = load_gpu("h200"), load_calibration("h200")
    tile = 16384
    base = Work({}, 1 << 30, 1 << 30, workgroups=1056, threads_per_workgroup=128,
                program=Program(trips=(1 << 30) // tile // 1056, trip_load_bytes=tile, trip_store_bytes=tile))
    strided = replace(base, program=replace(base.program, grid_stride=True))
    plain, walked = (kernel_time(w, gpu, calib, LaunchMode.GRAPH) for w in (base, strided))
    assert walked.memory_s == pytest.approx(plain.memory_s / calib.grid_stride_efficiency)
    assert walked.time_s > plain.time_s
    assert calib.grid_stride_efficiency < 1


def test_rows_give_the_load_granule_and_the_partial_store_cost(tmp_path):
    loads = {4: 48e-6, 8: 48.5e-6, 16: 48.4e-6, 32: 48e-6, 64: 46e-6, 128: 62e-6}
    stores = {4: 126e-6, 8: 125e-6, 16: 125e-6, 32: 70e-6, 64: 72e-6, 128: 80e-6}
    rows = [{"mode": "load", "row_bytes": b, "time_s_median": t} for b, t in loads.items()]
    rows += [{"mode": "store", "row_bytes": b, "time_s_median": t} for b, t in stores.items()]
    _write(tmp_path, "rows", rows)
    c = probes.probe_constants(tmp_path)
    assert c.dram_load_granule_bytes == 64  # flat to 64 bytes, 62 us at 128
    assert c.partial_sector_store_factor == pytest.approx(125e-6 / 70e-6)


def test_rows_without_a_whole_sector_store_leave_the_partial_cost_unset(tmp_path):
    # --quick times 4, 16 and 64 bytes: no 32-byte store to compare the partial ones with
    rows = [{"mode": m, "row_bytes": b, "time_s_median": t} for m in ("load", "store")
            for b, t in ((4, 50e-6), (16, 51e-6), (64, 52e-6))]
    _write(tmp_path, "rows", rows)
    c = probes.probe_constants(tmp_path)
    assert c.dram_load_granule_bytes == 64
    assert c.partial_sector_store_factor is None and "32" in c.sources["partial_sector_store_factor"]


def test_queue_constants_from_a_queue_csv(tmp_path, rng):
    # a warp that queues 6 stores at 2 cycles each, then waits for the pipe: 32 wavefronts a store at 1.085 cycles
    per_wavefront, depth = 1.085, 6
    rows = []
    for n in (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64):
        issue = 2 * n if n <= depth else 2 * depth + (n - depth) * 32 * per_wavefront
        drain = 30 + n * 32 * per_wavefront * (1 + rng.normal(0, 0.002))
        rows.append({"num_warps": 1, "stride_words": 32, "wavefronts_per_store": 32, "stores": n, "launches": 15,
                     "issue_cycles": issue, "drain_cycles": drain})
    rows.append({"num_warps": 4, "stride_words": 32, "wavefronts_per_store": 32, "stores": 8, "launches": 15,
                 "issue_cycles": 9999, "drain_cycles": 9999})  # another warp count: not read
    _write(tmp_path, "queue", rows)
    c = probes.probe_constants(tmp_path)
    assert c.shared_queue_stores == depth
    assert c.shared_store_cycles_per_wavefront == pytest.approx(per_wavefront, rel=0.01)
    _write(tmp_path, "queue", rows[:2])
    short = probes.probe_constants(tmp_path)
    assert short.shared_queue_stores is None and "fewer than 3 rows" in short.sources["shared_queue_stores"]


def test_the_queue_probe_ptx_stores_in_one_bank_and_checks_its_arguments():
    pytest.importorskip("triton")
    from companion.kernels.probes import shared_queue_ptx

    ptx = shared_queue_ptx(5, 32)
    assert ptx.count("st.volatile.shared.b32") == 5 and "mul.lo.u32 a, lane, 128;" in ptx
    assert ptx.count("%clock64") == 3 and "bar.sync 0;" in ptx
    for bad in ((0, 32), (4, 0), (4, 33), (4000, 32)):
        with pytest.raises(ValueError):
            shared_queue_ptx(*bad)


def test_each_shared_latency_is_its_one_warp_chain(tmp_path, rng):
    cycles = float(rng.uniform(20, 40))
    rows = [{"form": "ldsm_x4", "num_warps": 1, "steps": 32, "launches": 15, "cycles_per_load": cycles},
            {"form": "ldsm_x4", "num_warps": 4, "steps": 32, "launches": 15, "cycles_per_load": cycles + 9},
            {"form": "lds32", "num_warps": 1, "steps": 32, "launches": 15, "cycles_per_load": cycles - 7}]
    _write(tmp_path, "lds", rows)
    c = probes.probe_constants(tmp_path)
    assert c.ldsm_latency_cycles == pytest.approx(cycles) and c.lds_latency_cycles == pytest.approx(cycles - 7)
    assert "ldsm_x4" in c.sources["ldsm_latency_cycles"] and "lds32" in c.sources["lds_latency_cycles"]
    assert c.lds_128_latency_cycles is None and "no row" in c.sources["lds_128_latency_cycles"]
    _write(tmp_path, "lds", rows[1:])
    assert probes.probe_constants(tmp_path).ldsm_latency_cycles is None


@pytest.mark.parametrize("form", ["lds32", "lds128", "ldsm_x4"])
def test_the_shared_chain_ptx_loads_each_address_from_the_load_before(form):
    pytest.importorskip("triton")
    from companion.kernels.probes import SHARED_CHAIN_FORMS, shared_chain_ptx

    steps = int(np.random.default_rng().integers(3, 40))
    ptx = shared_chain_ptx(form, steps)
    load, _ = SHARED_CHAIN_FORMS[form]
    assert ptx.count(load) == steps and ptx.count("%clock64") == 2 and "bar.sync 0;" in ptx
    # the table each lane writes makes the load return the address it was given (emulated on the words)
    words = {}
    for lane in range(32):
        if form == "ldsm_x4":
            words[4 * lane] = 16 * (lane % 8)
        else:
            slot = 4 * lane if form == "lds32" else 16 * lane
            words[slot] = slot
    for lane in range(32):
        start = 16 * (lane % 8) if form == "ldsm_x4" else (4 if form == "lds32" else 16) * lane
        if form == "ldsm_x4":  # lane l receives word l of matrix 0, whose rows 0-7 lanes 0-7 name
            row_address = 16 * (lane // 4)
            got = words[row_address + 4 * (lane % 4)]
        else:
            got = words[start]
        assert got == start
    for bad in (("lds64", 4), (form, 0), (form, 2000)):
        with pytest.raises(ValueError):
            shared_chain_ptx(*bad)


@pytest.mark.parametrize("form", ["lds32", "ldsm_x4"])
def test_the_shared_chain_compiles_to_a_dependent_chain_of_its_instruction(form):
    """ptxas keeps every load (volatile) and each takes the register the one before wrote as its address."""
    pytest.importorskip("triton")
    import re

    from compiled import triton_build
    from compiled.companion_sources import _companion

    k = _companion("probes")  # compiled, not interpreted, under the test run's TRITON_INTERPRET
    build = triton_build.build(k.shared_chain_kernel, {"out_ptr": "*i64", "PTX": "constexpr", "THREADS": "constexpr"},
                               {"PTX": k.shared_chain_ptx(form, 6), "THREADS": 32}, 1, (), 3,
                               triton_build.Target("cuda", "sm_90"))
    op = k.SHARED_CHAIN_FORMS[form][1]
    loads = re.findall(rf"\b{re.escape(op)} (R\d+), \[(R\d+)\]", build.asm)
    assert len(loads) == 6
    assert all(address == before for (_, address), (before, _) in zip(loads[1:], loads[:-1], strict=True))


def test_the_burst_probe_ptx_copies_every_byte_once_and_checks_its_arguments():
    pytest.importorskip("triton")
    from companion.kernels.probes import async_burst_ptx

    threads = 32 * int(np.random.default_rng().choice([1, 4, 8]))
    nbytes = 16 * threads * int(np.random.default_rng().integers(1, 40 * 1024 // (16 * threads) + 1))
    ptx = async_burst_ptx(nbytes, threads)
    copies = [line for line in ptx.splitlines() if line.startswith("cp.async.cg.shared.global")]
    assert len(copies) * 16 * threads == nbytes
    offsets = sorted(int(line.split("[s+")[1].split("]")[0]) for line in copies)
    assert offsets == list(range(0, nbytes, 16 * threads))  # with the thread's 16 x tid: every 16 bytes once
    assert "cp.async.wait_group 0;" in ptx and ptx.count("%clock64") == 2 and ptx.count("bar.sync 0;") == 2
    for bad in ((100, 128), (0, 128), (48 * 1024, 128), (4096, 100)):
        with pytest.raises(ValueError):
            async_burst_ptx(*bad)


def test_the_burst_compiles_to_the_mla_loops_asynchronous_copies():
    pytest.importorskip("triton")
    from compiled import triton_build
    from compiled.companion_sources import _companion

    k = _companion("probes")
    build = triton_build.build(k.async_burst_kernel, {"src_ptr": "*fp32", "out_ptr": "*i64", "base": "i64",
                                                      "PTX": "constexpr", "THREADS": "constexpr"},
                               {"PTX": k.async_burst_ptx(8192, 128), "THREADS": 128}, 4, ("src_ptr",), 3,
                               triton_build.Target("cuda", "sm_90"))
    assert build.asm.count("LDGSTS.E.BYPASS.128") == 4 and "DEPBAR" in build.asm


def test_a_clock_probe_reads_the_median_of_its_launches_after_the_warmup():
    pytest.importorskip("torch")
    from companion.bench.probes import CLOCK_WARMUP_LAUNCHES, median_after_warmup

    warm = [1e9] * CLOCK_WARMUP_LAUNCHES  # the first launches (code and data coming in) are not read
    read = [float(v) for v in np.random.default_rng().integers(100, 200, size=15)]
    assert median_after_warmup(iter(warm + read).__next__, len(read)) == float(np.median(read))
