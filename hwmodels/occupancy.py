"""Workgroups resident per CU (SM): the smallest of the LDS, register, wave-slot and hardware limits."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hwmodels.spec import GPU


class Limiter(Enum):
    """The resource that caps residency; ties name the first in this order."""

    LDS = "lds"
    VGPRS = "vgprs"
    WAVES = "waves"
    WORKGROUPS = "workgroups"


@dataclass(frozen=True)
class Occupancy:
    """Residency of one workgroup shape on one GPU, with each limit so a report can show all of them."""

    workgroups_per_cu: int
    limiter: Limiter
    waves_per_workgroup: int
    lds_allocated_bytes: int  # per workgroup, rounded up to the allocation granularity
    limits: dict[Limiter, int]

    @property
    def waves_per_cu(self) -> int:
        return self.workgroups_per_cu * self.waves_per_workgroup


def _round_up(value: int, granule: int) -> int:
    return -(-value // granule) * granule


def occupancy(gpu: GPU, *, lds_bytes: int = 0, threads: int = 256, vgprs: int = 0) -> Occupancy:
    """Workgroups of `threads` threads, `lds_bytes` of LDS and `vgprs` registers per thread that fit on one CU.

    LDS is allocated in `lds_granularity_bytes` units. Registers are allocated per lane in
    `register_granule` units out of `registers_per_simd_lane`; waves may sit on any SIMD, so wave and
    register slots are pooled over the CU's SIMDs. lds_bytes=0 and
    vgprs=0 leave that resource out of the limits (vgprs=0 means unknown).
    """
    per_gpu = _CACHE.setdefault(id(gpu), (gpu, {}))[1]  # the GPU is held, so its id is not reused
    found = per_gpu.get((lds_bytes, threads, vgprs))
    if found is None:
        found = per_gpu[(lds_bytes, threads, vgprs)] = _occupancy(gpu, lds_bytes, threads, vgprs)
    return found


# Occupancy results by GPU object (specs hold mappings, so a GPU is not hashable): kernels repeat shapes.
_CACHE: dict[int, tuple[GPU, dict[tuple[int, int, int], Occupancy]]] = {}


def _occupancy(gpu: GPU, lds_bytes: int, threads: int, vgprs: int) -> Occupancy:
    if threads <= 0 or threads > gpu.max_threads_per_workgroup:
        raise ValueError(f"threads must be in 1..{gpu.max_threads_per_workgroup} on {gpu.name}, got {threads}")
    if lds_bytes < 0 or lds_bytes > gpu.lds_max_per_workgroup_bytes:
        raise ValueError(f"lds_bytes must be in 0..{gpu.lds_max_per_workgroup_bytes} on {gpu.name}, "
                         f"got {lds_bytes}")
    if vgprs < 0 or vgprs > gpu.max_registers_per_thread:
        raise ValueError(f"vgprs must be in 0..{gpu.max_registers_per_thread} on {gpu.name}, got {vgprs}")

    waves = -(-threads // gpu.wave_size)
    lds_allocated = _round_up(lds_bytes, gpu.lds_granularity_bytes)

    limits: dict[Limiter, int] = {}
    if lds_allocated:
        limits[Limiter.LDS] = gpu.lds_per_cu_bytes // lds_allocated
    if vgprs:
        waves_by_regs = min(gpu.max_waves_per_simd,
                            gpu.registers_per_simd_lane // _round_up(vgprs, gpu.register_granule))
        limits[Limiter.VGPRS] = waves_by_regs * gpu.simds_per_cu // waves
    limits[Limiter.WAVES] = gpu.max_waves_per_cu // waves
    limits[Limiter.WORKGROUPS] = gpu.max_workgroups_per_cu

    # Report the binding resource; when several bind equally, prefer the one the user sized (LDS, VGPRs).
    limiter = min(limits, key=lambda lim: (limits[lim], list(Limiter).index(lim)))
    if limits[limiter] == 0:
        raise ValueError(f"a workgroup of {threads} threads, {lds_bytes} B LDS and {vgprs} registers per "
                         f"thread does not fit on one {gpu.name} CU ({limiter.value} too large)")
    return Occupancy(
        workgroups_per_cu=limits[limiter],
        limiter=limiter,
        waves_per_workgroup=waves,
        lds_allocated_bytes=lds_allocated,
        limits=limits,
    )
