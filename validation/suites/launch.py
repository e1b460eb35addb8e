"""Suite `launch`: the cost of launching a kernel that does (almost) nothing, eagerly and from a CUDA graph.

`triton_empty`: a Triton kernel with one pointer argument and an empty body, grid (1,). `torch_add_`:
`x.add_(1)` on 256 float32 (flop = 256, bytes = 2048). `eager`: 1000 launches back to back per sample (host
gaps included), so the time is the host's launch cost per kernel; `graph`: 100 launches captured in one CUDA
graph, replayed (host gaps hidden), so the time is the GPU's cost per graph node.
"""

from __future__ import annotations

from dataclasses import dataclass

from validation.comparison import Comparison
from validation.comparison import compare as compare_row
from validation.suites import EAGER, ELEMENT_BYTES, FP32, GRAPH
from workloads.kernels import Elementwise, EmptyKernel

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


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """The product's kernel for the row, in the row's launch mode: `triton_empty` is `EmptyKernel`, `torch_add_` a
    one-input fp32 `Elementwise` of the row's size whose input the launch before wrote (`input_in_l2`)."""
    kernel = (EmptyKernel() if row["kernel"] == "triton_empty" else
              Elementwise(elements=int(row["numel"]), inputs=1, dtype="fp32", input_in_l2=True))
    return compare_row(row, kernel, gpu_name, f"{row['kernel']} {row['launch_mode']}", f"launch {row['launch_mode']}")
