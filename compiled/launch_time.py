"""The one prediction of a kernel's launches, which every command asks: `infersim kernel`, the engine's steps
(`step`, `run`, `compare`, `sweep`), `trace predict`, `calibrate` and `validate`.

A kernel that is a companion kernel at a compiled configuration is timed from its compiled code
(`compiled.companion`); any other from its kind's analytic program. Either way each launch goes through
`hwmodels.roofline.kernel_time` in the launch mode asked for. Validation compares this with measurements and
never times a kernel any other way.
"""

from __future__ import annotations

from enum import Enum

from compiled.companion import compiled_kernel
from hwmodels.calibration import Calibration
from hwmodels.roofline import Dispatch, KernelTime, LaunchMode, kernel_time
from hwmodels.spec import GPU
from hwmodels.work import Work
from workloads.kernel_base import KernelKind


class ProgramSource(Enum):
    """Where a launch's workgroup program comes from."""

    COMPILED = "compiled"  # the kernel's compiled code: instruction counts, registers, the simulated timeline
    ANALYTIC = "analytic"  # the kernel kind's own estimate


def timed_kernel(kernel: KernelKind, gpu: GPU) -> tuple[KernelKind, ProgramSource]:
    """The kernel as it is timed on `gpu`, and where its program comes from (ValueError for a kind that does not
    model that GPU)."""
    kernel.check_gpu(gpu)
    counted = compiled_kernel(kernel, gpu.name)
    return (kernel, ProgramSource.ANALYTIC) if counted is None else (counted, ProgramSource.COMPILED)


def launch_works(kernel: KernelKind, gpu: GPU) -> tuple[Work, ...]:
    """The launches of `kernel` as they are timed on `gpu` (compiled programs where the kernel has them)."""
    return timed_kernel(kernel, gpu)[0].launches()


def launch_times(kernel: KernelKind, gpu: GPU, calib: Calibration, mode: LaunchMode,
                 dispatch: Dispatch | None = None) -> list[KernelTime]:
    """Each launch of `kernel` on `gpu` in `mode`: the prediction every command reports."""
    return [kernel_time(work, gpu, calib, mode, dispatch) for work in launch_works(kernel, gpu)]
