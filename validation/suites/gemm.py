"""Suite `gemm`: cuBLAS bf16 matmuls and fp8 scaled-mm at 70B-class layer shapes, prefill and decode.

Out = A @ Wᵀ with A (m, k) and W (n, k) both row-major (nn.Linear's weight layout). Counts, made before
timing: flop = 2mnk; bytes = (mk + kn)·elem + 2mn (both inputs read once, the bf16 output written once;
elem 2 for bf16, 1 for fp8). Square and prefill shapes run eagerly, one op per sample, host gaps hidden;
skinny (decode) shapes run twice: 20 matmuls issued back to back per eager sample (host gaps included) and
the same 20 captured in one CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.dtypes import Dtype
from hwmodels.spec import load_gpu
from validation.comparison import TORCH_DTYPES, Comparison
from validation.comparison import compare as compare_row
from validation.suites import BF16, EAGER, ELEMENT_BYTES, FP8, LAUNCH_MODES
from workloads.tiles import blas_gemm

SUITE = "gemm"
SHAPE_COLUMNS = ("m", "n", "k")
METHOD_COLUMNS = ("n_input_sets",)

GEMM_OUT_ELEMENT_BYTES = 2  # both GEMM kernels write bf16 outputs
# Shapes (assumption: representative of 70B-class layers).
GEMM_SQUARE = (1024, 2048, 4096, 8192, 16384)
GEMM_FP8_SQUARE = (2048, 4096, 8192, 16384)
GEMM_WEIGHTS_NK = ((7168, 7168), (28672, 8192), (8192, 28672))
GEMM_PREFILL_M = (2048, 8192)
GEMM_DECODE_M = (1, 8, 32, 64, 128, 256)
GEMM_OPS_PER_GRAPH = 20  # matmuls captured in one CUDA graph, and issued per eager sample
GEMM_EAGER_BATCH_BELOW_M = 1024  # skinny shapes: time both eagerly (host gaps in) and in a graph


def gemm_flop(m: int, n: int, k: int) -> int:
    """FLOP of one m×k by k×n matrix product (a multiply and an add per term)."""
    return 2 * m * n * k


def gemm_bytes(m: int, n: int, k: int, in_element_bytes: int) -> int:
    """Minimal HBM bytes of one product: both inputs read once, the bf16 output written once."""
    return (m * k + k * n) * in_element_bytes + m * n * GEMM_OUT_ELEMENT_BYTES


@dataclass(frozen=True)
class GemmCase:
    """One timed GEMM configuration; B is an (n, k) row-major weight used transposed (nn.Linear)."""

    kernel: str
    dtype: str
    m: int
    n: int
    k: int
    launch_mode: str
    ops_per_sample: int

    @property
    def suite(self) -> str:
        return SUITE

    @property
    def host_gaps(self) -> str:
        return "included" if self.launch_mode == EAGER and self.ops_per_sample > 1 else "hidden"

    def flop(self) -> int:
        return gemm_flop(self.m, self.n, self.k)

    def bytes(self) -> int:
        return gemm_bytes(self.m, self.n, self.k, ELEMENT_BYTES[self.dtype])

    def input_set_bytes(self) -> int:
        """Bytes of one (A, B) input pair, for sizing the rotation."""
        return (self.m * self.k + self.n * self.k) * ELEMENT_BYTES[self.dtype]

    def shape(self) -> dict[str, object]:
        return {"m": self.m, "n": self.n, "k": self.k}


def cases() -> list[GemmCase]:
    """bf16 cuBLAS and fp8 scaled-mm cases; shapes sharing inputs are adjacent."""
    out: list[GemmCase] = []
    for s in GEMM_SQUARE:
        out.append(GemmCase("torch_matmul", BF16, s, s, s, EAGER, 1))
    for m in GEMM_PREFILL_M:
        for n, k in GEMM_WEIGHTS_NK:
            out.append(GemmCase("torch_matmul", BF16, m, n, k, EAGER, 1))
    for m in GEMM_DECODE_M:
        for n, k in GEMM_WEIGHTS_NK:
            for mode in LAUNCH_MODES:
                out.append(GemmCase("torch_matmul", BF16, m, n, k, mode, GEMM_OPS_PER_GRAPH))
    for s in GEMM_FP8_SQUARE:
        out.append(GemmCase("torch_scaled_mm", FP8, s, s, s, EAGER, 1))
    for m in GEMM_PREFILL_M:
        for n, k in GEMM_WEIGHTS_NK:
            out.append(GemmCase("torch_scaled_mm", FP8, m, n, k, EAGER, 1))
    return out


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """The model's Gemm of the row's shape and dtype; m >= 1024 is prefill, smaller m decode."""
    m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
    dtype = TORCH_DTYPES.get(row["dtype"], row["dtype"])
    regime = "prefill" if m >= 1024 else "decode"
    gemm = blas_gemm(load_gpu(gpu_name), m, n, k, Dtype(dtype))  # the tiles and split the engine would use
    return compare_row(row, gemm, gpu_name, f"{m}x{n}x{k}", f"gemm {dtype} {regime}")
