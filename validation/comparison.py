"""One measured row beside the model's prediction for the same kernel launches and launch mode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compiled.launch_time import launch_times
from hwmodels.calibration import load_calibration
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu
from workloads.kernel_base import KernelKind

TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "float32": "fp32"}


@dataclass(frozen=True)
class Comparison:
    """One measured row beside its prediction."""

    label: str
    group: str  # rows summarised together (a kernel family), e.g. "gemm bf16 decode"
    launch_mode: str
    measured_s: float
    predicted_s: float
    bound: str
    fitted: bool = False  # True when a constant of the model was fitted on this row
    kernels: tuple[KernelKind, ...] = ()  # what was priced, to be asked of `infersim kernel` (tests/validation)
    mode: str = ""  # the product's launch mode it was priced in (`launch_mode_of`)

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return (self.predicted_s - self.measured_s) / self.measured_s


def launch_mode_of(row: dict[str, str]) -> LaunchMode:
    """The product's launch mode of a measured row: eager with the host hidden is queued."""
    mode = LaunchMode(row["launch_mode"])
    return LaunchMode.QUEUED if mode is LaunchMode.EAGER and row.get("host_gaps") == "hidden" else mode


def compare(
    row: dict[str, str], kernels: KernelKind | Sequence[KernelKind], gpu_name: str, label: str, group: str,
    fitted: bool = False,
) -> Comparison:
    """Sum of the predicted times of every launch of `kernels`, against the row's median time per op.

    A row timed with `host_gaps=hidden` in eager mode measured the GPU alone, with the host's launches issued
    ahead of it: the product's queued launch mode (`LaunchMode.QUEUED`: the GPU's own cost of a launch, measured by
    the floor probe as one empty kernel between two events). Every other row is timed in its own mode. The sum is
    what `infersim kernel` reports for the same kernels and mode; nothing is re-priced here.
    """
    gpu, calib = load_gpu(gpu_name), load_calibration(gpu_name)
    kernels = (kernels,) if isinstance(kernels, KernelKind) else tuple(kernels)
    mode = launch_mode_of(row)
    total_s, bounds = 0.0, []
    for kernel in kernels:
        for t in launch_times(kernel, gpu, calib, mode):
            total_s += t.time_s
            bounds.append((t.time_s, t.bound.value))
    return Comparison(
        label=label,
        group=group,
        launch_mode=row["launch_mode"],
        measured_s=float(row["time_s_median"]),
        predicted_s=total_s,
        bound=max(bounds)[1],
        fitted=fitted,
        kernels=kernels,
        mode=mode.value,
    )
