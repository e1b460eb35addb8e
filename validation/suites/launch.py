"""Suite `launch`: the cost of launching a kernel that does (almost) nothing, eagerly and from a CUDA graph.

`triton_empty`: a Triton kernel with one pointer argument and an empty body, grid (1,). `torch_add_`:
`x.add_(1)` on 256 float32 (flop = 256, bytes = 2048). `eager`: 1000 launches back to back per sample (host
gaps included), so the time is the host's launch cost per kernel; `graph`: 100 launches captured in one CUDA
graph, replayed (host gaps hidden), so the time is the GPU's cost per graph node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from hwmodels.program import Program
from hwmodels.work import Work
from validation.comparison import Comparison
from validation.comparison import compare as compare_row
from validation.suites import EAGER, ELEMENT_BYTES, FP32, GRAPH
from workloads.kernel_base import KernelKind
from workloads.kernels import Elementwise

SUITE = "launch"
SHAPE_COLUMNS = ("numel",)
METHOD_COLUMNS = ()

LAUNCH_NUMEL = 256
LAUNCH_EAGER_OPS = 1000
LAUNCH_GRAPH_OPS = 100


@dataclass(frozen=True)
class LaunchCase:
    """Launch cost of a kernel that does (almost) nothing: empty Triton kernel or a tiny add_."""

    kernel: str
    dtype: str
    numel: int
    launch_mode: str
    ops_per_sample: int

    @property
    def suite(self) -> str:
        return SUITE

    @property
    def host_gaps(self) -> str:
        return "included" if self.launch_mode == EAGER else "hidden"

    def flop(self) -> int:
        return self.numel if self.kernel == "torch_add_" else 0

    def bytes(self) -> int:
        return 2 * self.numel * ELEMENT_BYTES[self.dtype] if self.kernel == "torch_add_" else 0

    def shape(self) -> dict[str, object]:
        return {"numel": self.numel}


def cases() -> list[LaunchCase]:
    """Empty Triton kernel and tiny torch add_, eager back to back and replayed in a graph."""
    out = []
    for kernel in ("triton_empty", "torch_add_"):
        out.append(LaunchCase(kernel, FP32, LAUNCH_NUMEL, EAGER, LAUNCH_EAGER_OPS))
        out.append(LaunchCase(kernel, FP32, LAUNCH_NUMEL, GRAPH, LAUNCH_GRAPH_OPS))
    return out


@dataclass(frozen=True)
class EmptyKernel(KernelKind):
    """A Triton kernel whose body does nothing: one workgroup of one warp, no FLOP, no bytes; launched eagerly
    through Triton's launcher."""

    kind: ClassVar[str] = "empty"

    def launches(self) -> tuple[Work, ...]:
        return (Work({}, 0.0, 0.0, workgroups=1, threads_per_workgroup=32, triton_launch=True),)


@dataclass(frozen=True)
class InPlaceAdd(KernelKind):
    """`x.add_(1)` on a small tensor, back to back: each launch reads what the one before wrote, so its input
    sits in L2 (`Program.fresh_input_bytes`)."""

    kind: ClassVar[str] = "add_"

    numel: int

    def launches(self) -> tuple[Work, ...]:
        (work,) = Elementwise(elements=self.numel, inputs=1, dtype="fp32").launches()
        share = 1 / work.workgroups
        program = Program(trips=1, trip_load_bytes=work.read_bytes * share, trip_store_bytes=work.write_bytes * share,
                          fresh_input_bytes=work.read_bytes)
        return (replace(work, program=program),)


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """The model's kernel for the row, in the row's launch mode: `triton_empty` is an empty Triton kernel,
    `torch_add_` a one-input fp32 Elementwise of the row's size whose input the launch before wrote."""
    kernel = EmptyKernel() if row["kernel"] == "triton_empty" else InPlaceAdd(int(row["numel"]))
    return compare_row(row, kernel, gpu_name, f"{row['kernel']} {row['launch_mode']}", f"launch {row['launch_mode']}")
