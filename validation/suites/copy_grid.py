"""Suite `copy_grid`: dst[i] = src[i] over 1 GiB of float32, by a persistent Triton copy at each grid and by torch.

`triton_copy_persistent`: `grid` programs, program p copying blocks p, p + grid, ... of `block` elements; the
last grid is one program per block (the ordinary non-persistent launch). `torch_copy`: `dst.copy_(src)`, its own
grid (shape columns blank). Counts: bytes = 2 · n_elems · 4 (read plus write), flop = 0. Eager, one launch per
sample, host gaps hidden. 1 GiB source and 1 GiB destination are far above the H200's 50-60 MB L2.
"""

from __future__ import annotations

from dataclasses import dataclass

from validation.comparison import Comparison
from validation.comparison import compare as compare_row
from validation.suites import EAGER, ELEMENT_BYTES, FP32
from workloads.kernels import Copy

SUITE = "copy_grid"
SHAPE_COLUMNS = ("grid", "n_elems", "block", "num_warps")
METHOD_COLUMNS = ()

COPY_N_ELEMS = 1 << 28  # float32 elements
COPY_BLOCK = 4096
COPY_NUM_WARPS = 4
COPY_GRIDS = (1, 2, 4, 8, 16, 33, 66, 99, 132, 198, 264, 528, 1056)


@dataclass(frozen=True)
class CopyCase:
    """dst[i] = src[i] over n_elems; grid None means a library copy with its own grid."""

    kernel: str
    dtype: str
    grid: int | None
    n_elems: int
    block: int | None
    num_warps: int | None

    launch_mode: str = EAGER
    ops_per_sample: int = 1
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return SUITE

    def flop(self) -> int:
        return 0

    def bytes(self) -> int:
        return 2 * self.n_elems * ELEMENT_BYTES[self.dtype]

    def shape(self) -> dict[str, object]:
        return {"grid": self.grid, "n_elems": self.n_elems, "block": self.block, "num_warps": self.num_warps}


def cases() -> list[CopyCase]:
    """Persistent Triton copy at each grid, one program per block, and torch's own copy."""
    n_blocks = COPY_N_ELEMS // COPY_BLOCK
    out = [
        CopyCase("triton_copy_persistent", FP32, g, COPY_N_ELEMS, COPY_BLOCK, COPY_NUM_WARPS)
        for g in (*COPY_GRIDS, n_blocks)
    ]
    out.append(CopyCase("torch_copy", FP32, None, COPY_N_ELEMS, None, None))
    return out


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """The model's Copy of the row's bytes, split over the row's grid (torch's copy: the model's own split); a grid
    of fewer programs than blocks is a grid-stride loop."""
    size = int(row["n_elems"]) * 4  # float32
    grid = int(row["grid"]) if row["grid"] else None  # torch's own copy: its own grid
    kernel = Copy(size_bytes=size)
    if grid is not None:
        grid_stride = grid < -(-int(row["n_elems"]) // int(row["block"]))
        kernel = Copy(size_bytes=size, bytes_per_workgroup=-(-size // grid), grid_stride=grid_stride)
    return compare_row(row, kernel, gpu_name, f"{row['kernel']} grid {row['grid'] or '-'}", "copy")
