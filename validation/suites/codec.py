"""Suite `codec`: QuickReduce quantize and dequantize (`companion/kernels/codecs.py`) on fp16 activations.

Cases: every codec, both directions, at 1, 8, 64 and 256 MiB of fp16 input (48 rows); one program of 256 threads
per 2048-value tile. Counts, made before timing:
- bytes: the fp16 values read plus the packed tiles written (quantize), the packed tiles read plus the fp16 values
  written (dequantize), with tiles of `workloads.codecs.Codec.tile_bytes`; each byte once, which is what the
  kernel moves (sizes are whole tiles, so there is no padding);
- FLOP: 5 per value to quantize (the absmax comparison, the multiply by the encode scale, two clip comparisons,
  the rounding) and 2 per value to dequantize (unbias, multiply by the scale), 0 for the FP codec (a cast);
  the 3 scale operations per 32-value block are left out, as in `workloads.kernels.Quantize`.
Launch modes: 1 MiB in a CUDA graph, because serving engines call codecs inside graphs and a ~1 us kernel is
shorter than the host's launch gap; 8 MiB and up eagerly, one launch per sample with the host gap hidden, as
their GPU time (>= ~3 us) is what the model's kernel time describes. Inputs rotate over `n_buffer_sets` sets
(each with its own output) whose inputs total at least ROTATION_BYTES, twice a 64 MiB L2, unless one launch
reads that much; a graph captures one launch per set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from validation.comparison import Comparison
from validation.comparison import compare as compare_row
from workloads.codecs import Codec

SUITE = "codec"
SHAPE_COLUMNS = ("codec", "values", "num_warps")
METHOD_COLUMNS = ("n_buffer_sets",)

CODECS = ("fp", "int8", "int6", "int4", "int3", "fp4")  # companion.kernels.codecs.CODECS, without triton
QUANTIZE = "triton_quantize"
DEQUANTIZE = "triton_dequantize"
FP16 = "float16"
MIB = 1 << 20
INPUT_MIB = (1, 8, 64, 256)  # fp16 bytes per call; vLLM's quantized path starts near 1 MB (the QuickReduce study)
GRAPH_BELOW_MIB = 8
NUM_WARPS = 8  # 256 threads per tile, QuickReduce's workgroup; passed to the launchers
ROTATION_BYTES = 128 * MIB  # >= 2 x the H200 L2 (50 MB datasheet, 60 MiB as torch reports it)
QUANTIZE_FLOP_PER_VALUE = 5
DEQUANTIZE_FLOP_PER_VALUE = 2


@dataclass(frozen=True)
class CodecCase:
    """One direction of one codec on `values` fp16 values."""

    kernel: str
    codec: str
    values: int
    launch_mode: str
    ops_per_sample: int
    n_buffer_sets: int
    dtype: str = FP16
    num_warps: int = NUM_WARPS
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return SUITE

    def wire_bytes(self) -> int:
        return Codec(self.codec).wire_bytes(self.values)

    def input_bytes(self) -> int:
        """Bytes one launch reads."""
        return 2 * self.values if self.kernel == QUANTIZE else self.wire_bytes()

    def flop(self) -> int:
        per_value = QUANTIZE_FLOP_PER_VALUE if self.kernel == QUANTIZE else DEQUANTIZE_FLOP_PER_VALUE
        return 0 if self.codec == "fp" else per_value * self.values

    def bytes(self) -> int:
        return 2 * self.values + self.wire_bytes()

    def shape(self) -> dict[str, object]:
        return {"codec": self.codec, "values": self.values, "num_warps": self.num_warps}


def _case(kernel: str, codec: str, values: int) -> CodecCase:
    read = 2 * values if kernel == QUANTIZE else Codec(codec).wire_bytes(values)
    sets = 1 if read >= ROTATION_BYTES else math.ceil(ROTATION_BYTES / read)
    graph = 2 * values < GRAPH_BELOW_MIB * MIB
    return CodecCase(kernel, codec, values, "graph" if graph else "eager", sets if graph else 1, sets)


def cases() -> list[CodecCase]:
    """Both directions of each codec and size; the two directions of one (codec, size) are adjacent."""
    return [_case(k, c, mib * MIB // 2) for mib in INPUT_MIB for c in CODECS for k in (QUANTIZE, DEQUANTIZE)]


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """The model's Quantize or Dequantize of the row's values and codec, with the kernel's threads per tile and
    the warp instructions and registers of its compiled code (`compiled.companion`): the codecs issue far more
    instructions per value (bit packing, rounding, IEEE division) than their FLOP count."""
    from workloads.kernels import Dequantize, Quantize

    kind = Quantize if row["kernel"] == QUANTIZE else Dequantize
    kernel = kind(values=int(row["values"]), codec=row["codec"], threads=int(row["num_warps"]) * 32)
    label = f"{kind.kind} {row['codec']} {2 * int(row['values']) // MIB} MiB"
    return compare_row(row, kernel, gpu_name, label, f"codec {kind.kind}")
