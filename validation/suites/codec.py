"""Suite `codec`: QuickReduce quantize and dequantize (`validation/kernels/codecs.py`) on fp16 activations.

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

import itertools
import math
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

from validation.comparison import Comparison
from validation.comparison import compare as compare_row
from workloads.codecs import Codec

SUITE = "codec"
SHAPE_COLUMNS = ("codec", "values", "num_warps")
METHOD_COLUMNS = ("n_buffer_sets",)

CODECS = ("fp", "int8", "int6", "int4", "int3", "fp4")  # validation.kernels.codecs.CODECS, without triton
QUANTIZE = "triton_quantize"
DEQUANTIZE = "triton_dequantize"
FP16 = "float16"
MIB = 1 << 20
INPUT_MIB = (1, 8, 64, 256)  # fp16 bytes per call; vLLM's quantized path starts near 1 MB (BRIEF study A)
GRAPH_BELOW_MIB = 8
NUM_WARPS = 8  # 256 threads per tile, QuickReduce's workgroup; passed to the launchers
ROTATION_BYTES = 128 * MIB  # >= 2 x the H200 L2 (50 MB datasheet, 60 MiB as torch reports it)
QUANTIZE_FLOP_PER_VALUE = 5
DEQUANTIZE_FLOP_PER_VALUE = 2
CHECK_TILES = 16  # tiles at each end compared byte for byte with the numpy reference
BLOCK_SCALE_LOG2 = 4  # inputs: normals times 2^U{-4..4} per 32-value block, so every scale is an fp16 normal


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
    the warp instructions and registers of its compiled code (validation/sass_counts.py): the codecs issue far
    more instructions per value (bit packing, rounding, IEEE division) than their FLOP count."""
    from validation.comparison import Compiled
    from validation.sass_counts import compiled
    from workloads.kernels import Dequantize, Quantize

    kind = Quantize if row["kernel"] == QUANTIZE else Dequantize
    kernel = kind(values=int(row["values"]), codec=row["codec"], threads=int(row["num_warps"]) * 32)
    instructions, registers = compiled(gpu_name, row["kernel"], row["codec"])
    label = f"{kind.kind} {row['codec']} {2 * int(row['values']) // MIB} MiB"
    return compare_row(row, Compiled(kernel, (instructions,), (registers,)), gpu_name, label, f"codec {kind.kind}")


def run(planned: Sequence[CodecCase], env: dict) -> tuple[list[dict], list[str]]:
    """Check each (codec, size) once on fresh inputs, then time its quantize and dequantize cases."""
    import torch

    from validation.measure_suites import MeasurementError

    rows: list[dict] = []
    failures: list[str] = []
    for (codec, values), group in itertools.groupby(planned, key=lambda c: (c.codec, c.values)):
        group = list(group)
        try:
            x, packed = checked_pair(codec, values)
        except Exception as e:  # a failed shape must not stop the others
            failures += [f"{case}: {e}" for case in group]
            traceback.print_exc()
            continue
        for case in group:
            try:
                if case.n_buffer_sets * case.input_bytes() < 2 * env["l2_bytes"]:  # even when one set
                    raise MeasurementError(f"{case}: rotation smaller than 2 x L2 ({env['l2_bytes']} B)")
                rows.append(_timed_row(case, x, packed, env))
            except Exception as e:
                failures.append(f"{case}: {e}")
                traceback.print_exc()
        del x, packed
        torch.cuda.empty_cache()
    return rows, failures


def _fresh_input(values: int, device: str):
    """Random normals times a random power of two per 32-value block, as fp16."""
    import torch

    scales = 2.0 ** torch.randint(-BLOCK_SCALE_LOG2, BLOCK_SCALE_LOG2 + 1, (values // 32, 1), device=device)
    return (torch.randn(values // 32, 32, device=device) * scales).flatten().half()


def checked_pair(codec: str, values: int, device: str = "cuda"):
    """Fresh input and its packed tiles, after checking both kernels: bytes and decoded values equal the numpy
    reference's on the first and last CHECK_TILES tiles, and every value's round-trip error is within bound."""
    import numpy as np
    import torch

    from validation.kernels import codecs, codecs_ref
    from validation.measure_suites import MeasurementError

    x = _fresh_input(values, device)
    packed = codecs.quantize(x, codec, NUM_WARPS)
    y = codecs.dequantize(packed, codec, values, torch.float16, NUM_WARPS)
    size, tiles = codecs.tile_bytes(codec), values // codecs.TILE_VALUES
    for first in (0, tiles - CHECK_TILES):
        vals = slice(first * codecs.TILE_VALUES, (first + CHECK_TILES) * codecs.TILE_VALUES)
        ref = codecs_ref.quantize_ref(x[vals].cpu().numpy(), codec)
        if not np.array_equal(packed[first * size: (first + CHECK_TILES) * size].cpu().numpy(), ref):
            raise MeasurementError(f"{codec} {values}: packed bytes differ from numpy at tile {first}")
        ref_y = torch.from_numpy(codecs_ref.dequantize_ref(ref, codec, vals.stop - vals.start)).half()
        if not torch.equal(y[vals].cpu(), ref_y):
            raise MeasurementError(f"{codec} {values}: decoded values differ from numpy at tile {first}")
    worst = 0.0
    for chunk in range(0, values, 1 << 24):  # float64 temporaries in 16M-value chunks
        part = slice(chunk, chunk + (1 << 24))
        ratio = (y[part].double() - x[part].double()).abs() / codecs_ref.error_bound(x[part], codec)
        worst = max(worst, float(ratio.nan_to_num(nan=0.0).max()))
    if not worst <= 1.0:
        raise MeasurementError(f"{codec} {values}: round-trip error {worst:.3f} x the bound")
    print(f"codec {codec} values={values}: bytes and values equal numpy, error <= {worst:.3f} x bound", flush=True)
    return x, packed


def _timed_row(case: CodecCase, x, packed, env: dict) -> dict[str, object]:
    """Time one case over its rotated buffer sets (each a copy of the checked input with its own output)."""
    import torch

    from validation.kernels import codecs
    from validation.measure import case_row, summarize
    from validation.measure_suites import _provenance, bench, capture_graph

    sets = []
    for _ in range(case.n_buffer_sets):
        if case.kernel == QUANTIZE:
            sets.append((x.clone(), torch.empty_like(packed)))
        else:
            sets.append((packed.clone(), torch.empty_like(x)))
    into = codecs.quantize_into if case.kernel == QUANTIZE else codecs.dequantize_into

    def launch(j: int) -> None:
        into(*sets[j], case.codec, case.num_warps)

    if case.launch_mode == "graph":
        graph = capture_graph(lambda: [launch(j) for j in range(case.ops_per_sample)])
        times = bench(graph.replay, case.ops_per_sample, hide_host_gaps=True)
        del graph
    else:
        order = itertools.cycle(range(case.n_buffer_sets))
        times = bench(lambda: launch(next(order)), case.ops_per_sample, hide_host_gaps=True)
    torch.cuda.synchronize()
    row = {**case_row(case), **summarize(times), "n_buffer_sets": case.n_buffer_sets, **_provenance(env)}
    rate = case.bytes() / row["time_s_median"] / 1e9
    print(f"codec {case.kernel} {case.codec} {2 * case.values // MIB} MiB {case.launch_mode}: "
          f"{row['time_s_median'] * 1e6:.2f} us, {rate:.0f} GB/s", flush=True)
    return row
