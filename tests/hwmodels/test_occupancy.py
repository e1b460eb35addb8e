"""Occupancy: the Kimi K3 study's CDNA4 LDS case (mechanism 6), each limiter, and the granularity rounding."""

from __future__ import annotations

import pytest

from hwmodels.occupancy import Limiter, occupancy
from hwmodels.spec import load_gpu

MI355X = load_gpu("mi355x")
MI300X = load_gpu("mi300x")
H200 = load_gpu("h200")


def test_kda_prologue_lds_fits_twice_on_cdna4_and_a_few_kib_more_only_once():
    # Kimi K3 study, mechanism 6: 79.5 KiB rounds to 64 units of 1280 B = 81,920 B; two fill 160 KiB exactly.
    two = occupancy(MI355X, lds_bytes=81408)
    assert (two.workgroups_per_cu, two.limiter, two.lds_allocated_bytes) == (2, Limiter.LDS, 81920)
    one = occupancy(MI355X, lds_bytes=81408 + 4096)
    assert (one.workgroups_per_cu, one.limiter) == (1, Limiter.LDS)


def test_lds_rounds_up_to_the_granule():
    assert occupancy(MI300X, lds_bytes=1).lds_allocated_bytes == 512
    assert occupancy(MI300X, lds_bytes=513).lds_allocated_bytes == 1024
    assert occupancy(MI300X, lds_bytes=16 * 1024 + 1).workgroups_per_cu == 3  # 16.5 KiB -> 3 in 64 KiB


def test_wave_slots_limit_large_workgroups():
    occ = occupancy(MI355X, threads=1024)  # 16 waves: 4 per SIMD of 8 slots -> 2 workgroups
    assert (occ.workgroups_per_cu, occ.limiter) == (2, Limiter.WAVES)
    occ = occupancy(H200, threads=1024)  # 32 warps of 64 -> 2 blocks
    assert (occ.workgroups_per_cu, occ.limiter) == (2, Limiter.WAVES)


def test_registers_limit_when_given():
    # 256 VGPRs of 512 per lane -> 2 waves per SIMD; a 256-thread workgroup puts 1 wave on each SIMD.
    occ = occupancy(MI355X, threads=256, vgprs=256)
    assert (occ.workgroups_per_cu, occ.limiter) == (2, Limiter.VGPRS)
    # 129 registers round to 136 -> 512 // 136 = 3 waves per SIMD.
    assert occupancy(MI355X, threads=256, vgprs=129).workgroups_per_cu == 3
    # H200: 128 regs/thread x 32 lanes: 4 warps per SMSP; 128-thread blocks (1 warp per SMSP) -> 4.
    occ = occupancy(H200, threads=128, vgprs=128)
    assert (occ.workgroups_per_cu, occ.limiter) == (4, Limiter.VGPRS)


def test_hardware_cap_on_tiny_workgroups():
    occ = occupancy(MI355X, threads=64)  # one wave each: 32 slots, but 16 workgroups at most
    assert (occ.workgroups_per_cu, occ.limiter) == (16, Limiter.WORKGROUPS)
    assert occupancy(H200, threads=32).workgroups_per_cu == 32


def test_impossible_requests_raise_with_the_range():
    with pytest.raises(ValueError, match=r"lds_bytes must be in 0\.\.163840 on mi355x"):
        occupancy(MI355X, lds_bytes=200_000)
    with pytest.raises(ValueError, match=r"threads must be in 1\.\.1024"):
        occupancy(MI355X, threads=2048)
    with pytest.raises(ValueError, match=r"vgprs must be in 0\.\.255 on h200"):
        occupancy(H200, vgprs=300)
    with pytest.raises(ValueError, match="does not fit"):
        occupancy(H200, threads=1024, vgprs=255)
