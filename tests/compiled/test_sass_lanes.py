"""Shared-memory wavefronts read off SASS by the lane evaluator (`compiled.sass_lanes`)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from companion.bench.profile_targets import source_pages
from compiled.sass_counts import DATA_DIR
from compiled.sass_lanes import (
    hgmma_wavefronts,
    ideal_wavefronts,
    lane_wavefronts,
    matrix_wavefronts,
    wavefronts,
)
from tests.conftest import ROOT

NCU = ROOT / "validation" / "data" / "h200" / "ncu"


def _strided(stride: int, op: str = "STS", extra: tuple[str, ...] = ()) -> list[str]:
    """A thread's byte address = tid * stride, then one shared access of `op` there."""
    access = f"{op} [R1], R2" if op.startswith("ST") else f"{op} R2, [R1]"
    return ["S2R R0, SR_TID.X", f"IMAD.SHL.U32 R1, R0, {stride:#x}, RZ", *extra, access]


@pytest.mark.parametrize(("stride", "op", "expected"), [
    (4, "STS", 1),  # 32 lanes, 32 banks
    (8, "STS", 2),  # two lanes a bank, different words
    (128, "STS", 32),  # every lane in bank 0: a 32-way conflict
    (0, "LDS", 1),  # one word for all: a broadcast
    (8, "LDS.64", 2),  # two phases of 16 lanes, conflict-free
    (16, "LDS.128", 4),  # four phases of 8 lanes, conflict-free
    (32, "STS.128", 8),  # each phase's 8 lanes span 256 bytes: 2-way
])
def test_strided_accesses_take_the_wavefronts_of_their_banks(stride, op, expected):
    for threads in (32, 256):  # every warp of the workgroup the same
        *_, last = lane_wavefronts(_strided(stride, op), threads)
        assert last == expected


def test_a_predicate_known_per_lane_leaves_lanes_out():
    # lanes 0..15 store at a 128-byte stride: a 16-way conflict, not 32
    code = _strided(128, "STS", ("ISETP.GE.U32.AND P0, PT, R0, 0x10, PT",))
    code[-1] = "@!P0 " + code[-1]
    assert lane_wavefronts(code, 32)[-1] == 16


def test_an_address_it_cannot_know_is_none_and_spills_carry_known_values():
    unknown = ["LDC R1, c[0x0][0x210]", "STS [R1], R2"]
    assert lane_wavefronts(unknown, 32) == [0.0, None]
    spilled = ["S2R R0, SR_TID.X", "IMAD.SHL.U32 R1, R0, 0x80, RZ", "STL [R1+0x10], R1", "MOV R1, RZ",
               "LDL R5, [R1+0x10]", "STS [R5], R2"]
    assert lane_wavefronts(spilled, 32)[-1] == 32


def test_integer_semantics_match_numpy_on_random_values():
    rng = random.Random()
    for _ in range(20):
        shift, mul, add = rng.randrange(1, 8), rng.randrange(1, 64), rng.randrange(0, 4096) * 4
        code = ["S2R R0, SR_TID.X", f"SHF.L.U32 R1, R0, {shift:#x}, RZ", f"IMAD R2, R1, {mul:#x}, {add:#x}",
                "LOP3.LUT R3, R2, 0xfffc, RZ, 0xc0, !PT", "LEA R4, R0, R3, 0x2", "STS [R4], R5"]
        tid = np.arange(32)
        addr = (((tid << shift) * mul + add) & 0xFFFC) + (tid << 2)
        words = addr // 4
        expected = max(len({w for w in words if w % 32 == b}) for b in range(32))
        assert lane_wavefronts(code, 32)[-1] == expected


def test_matrix_loads_count_a_wavefront_per_conflict_free_matrix():
    rows = np.arange(32) * 16  # 8 rows of 16 bytes a matrix, consecutive: all 32 banks
    assert matrix_wavefronts(rows, np.ones(32, bool), 4) == 4
    assert matrix_wavefronts(rows * 8, np.ones(32, bool), 4) == 4 * 8  # 128-byte row stride: 8-way
    assert ideal_wavefronts("LDSM.16.M88.4") == 4 and ideal_wavefronts("LDSM.16.M88.2") == 2
    assert wavefronts(np.zeros(32, np.int64), np.zeros(32, bool), 4) == 0  # no lane on


def test_warpgroup_mma_reads_its_shared_operands_as_wavefronts():
    # B of a 64x32x8 tf32 MMA is 32 x 8 x 4 bytes = 8 wavefronts for the warpgroup, 2 a warp; A from registers
    assert hgmma_wavefronts("HGMMA.64x32x8.F32.TF32 R88, R152, gdesc[UR8], R88, gsb0") == 2
    # A too, from shared memory (one descriptor operand): 64 x 8 x 4 bytes more
    assert hgmma_wavefronts("HGMMA.64x32x8.F32.TF32 R88, gdesc[UR8], R88, gsb0") == 2 + 4


def _ncu_per_warp(kernel: str, page: str, trips: int) -> dict[str, float]:
    """Shared wavefronts a warp takes outside the loop (the instructions each warp ran once) and in one of its
    `trips` trips, and the set-up's conflict-free count, from the profiler's source page."""
    rows = source_pages(str(NCU / page))[kernel]

    def column(name: str) -> list[float]:
        return [float(r[name].replace(",", "") or 0) for r in rows]

    executed, fronts, ideal = column("Instructions Executed"), column("L1 Wavefronts Shared"), \
        column("L1 Wavefronts Shared Ideal")
    warps = min(e for e in executed if e > 0)
    most = warps * trips
    once = [i for i, e in enumerate(executed) if e == warps]
    return {"setup": sum(fronts[i] for i in once) / warps, "setup_ideal": sum(ideal[i] for i in once) / warps,
            "trip": sum(f for e, f in zip(executed, fronts, strict=True) if e == most) / most}


def _timing(kernel: str, config: str) -> dict:
    rows = json.loads((DATA_DIR / "h200_timing.json").read_text())["rows"]
    return next(r for r in rows if (r["kernel"], r["config"]) == (kernel, config))


@pytest.mark.parametrize(("kernel", "config", "page", "name", "trips"), [
    ("kda_intra", "chunk=64", "kda_source.csv.gz", "kda_intra_kernel", 63),  # the substitution's 63 steps
    ("mla_decode", "splits=1 even=False", "mla_1_8192_1_source.csv.gz", "mla_decode_kernel", 8192 // 32),
])
def test_the_evaluated_wavefronts_are_what_the_profiler_counted(kernel, config, page, name, trips):
    # the timing table's wavefronts (the lane evaluator on the compiled code, no GPU) against Nsight Compute's
    # count of one launch on the H200
    row = _timing(kernel, config)
    counted = _ncu_per_warp(name, page, trips)
    # (within 3 %: a loop's predicates that depend on the trip are evaluated as the first trip has them)
    assert sum(n for _, n in row["loop"]["shared"]) == pytest.approx(counted["trip"], rel=0.03)
    if kernel == "kda_intra":  # its set-up runs once a warp (MLA's prologue has per-split branches)
        evaluated = sum(n for _, n in row["prologue"]["shared"])
        assert evaluated == pytest.approx(counted["setup"], rel=0.02)
        # the bank conflicts of its layout conversions: 2.2 times the conflict-free count
        assert evaluated > 2 * counted["setup_ideal"]
