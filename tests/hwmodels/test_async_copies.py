"""cp.async loads whose loaded latency falls as fewer SMs stream: the constant refitted from the async probe."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hwmodels.cycle_time import MemoryCurve, trip_s
from hwmodels.program import Program
from hwmodels.spec import load_gpu
from workloads.attention_kernels import MlaDecode

ASYNC = Path(__file__).parents[2] / "validation" / "data" / "h200" / "probe_async.csv"


def test_the_h200_constant_is_the_probes_rate_all_sms_over_alone():
    with ASYNC.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle)
                if (r["rows"], r["cols"], r["num_stages"], r["num_warps"]) == ("32", "256", "2", "4")]
    rate = {int(r["grid"]): float(r["bytes_per_s_per_sm"]) for r in rows if r["grid"] in ("1", "132")}
    assert load_gpu("h200").async_copy_latency_alone == pytest.approx(rate[132] / rate[1], abs=0.002)


def test_only_asynchronous_loads_on_a_gpu_that_measured_it_wait_less_alone():
    h200, b200 = load_gpu("h200"), load_gpu("b200")  # the B200 has measured neither
    curve = MemoryCurve(h200.dram_latency_s, 4.0)
    copy = Program(trips=64, trip_load_bytes=16384, trip_instructions=100, prefetch=1, async_loads=True)
    register = Program(trips=64, trip_load_bytes=16384, trip_instructions=100, prefetch=1)
    full = h200.compute_units

    def trip(program, gpu, streaming):
        return trip_s(program, gpu, 1, 4, streaming, curve, gpu.hbm_bandwidth_bytes_per_s)

    # with every SM streaming both wait the same; alone, the copies wait 0.871 of it, the register loads all of it
    assert trip(copy, h200, full) == trip(register, h200, full)
    assert trip(copy, h200, 1) < 0.95 * trip(register, h200, 1)
    assert trip(copy, b200, 1) == trip(register, b200, 1)


def test_the_mla_split_loop_and_the_kda_scan_are_marked_asynchronous():
    from workloads.kda_kernels import KdaPrefill

    split, merge = MlaDecode(seqs=1, context=32768, heads=16, num_splits=4).launches()
    assert split.program.async_loads and not merge.program.async_loads
    intra, scan = KdaPrefill(seqs=1, tokens=1024, heads=12).launches()
    assert scan.program.async_loads and not intra.program.async_loads


def test_the_flagged_loops_are_those_whose_compiled_code_waits_on_async_copies():
    """The analytic programs mark cp.async by hand (they must without Triton); the shipped sm_90 code agrees."""
    from compiled.kernel_code import TABLES, _table

    records = _table(TABLES["sm_90"])
    waiting = {kernel for (kernel, _), code in records.items()
               if any(w[0] == "async_copy" for w in ((code.get("timeline") or {}).get("loop") or {}).get("waits", ()))}
    assert waiting == {"mla_decode", "kda_scan"}
