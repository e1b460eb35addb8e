"""Runs suite `codec` (`validation.suites.codec`): QuickReduce quantize and dequantize, checked, then timed.

Each (codec, size) is checked once on fresh inputs: the packed bytes and decoded values equal the numpy
reference of the format on the first and last CHECK_TILES tiles, and every value's round-trip error is within
the codec's bound. Then each direction is timed over its rotated buffer sets.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Sequence

import numpy as np
import torch

from companion.bench.timing import MeasurementError, bench, capture_graph, provenance
from companion.kernels import codecs, codecs_ref
from validation.measure_output import summarize
from validation.suites import case_row
from validation.suites.codec import MIB, NUM_WARPS, QUANTIZE, CodecCase

CHECK_TILES = 16  # tiles at each end compared byte for byte with the numpy reference
BLOCK_SCALE_LOG2 = 4  # inputs: normals times 2^U{-4..4} per 32-value block, so every scale is an fp16 normal


def run(planned: Sequence[CodecCase], env: dict) -> tuple[list[dict], list[str]]:
    """Check each (codec, size) once on fresh inputs, then time its quantize and dequantize cases."""
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
    scales = 2.0 ** torch.randint(-BLOCK_SCALE_LOG2, BLOCK_SCALE_LOG2 + 1, (values // 32, 1), device=device)
    return (torch.randn(values // 32, 32, device=device) * scales).flatten().half()


def checked_pair(codec: str, values: int, device: str = "cuda"):
    """Fresh input and its packed tiles, after checking both kernels: bytes and decoded values equal the numpy
    reference's on the first and last CHECK_TILES tiles, and every value's round-trip error is within bound."""
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
    row = {**case_row(case), **summarize(times), "n_buffer_sets": case.n_buffer_sets, **provenance(env)}
    rate = case.bytes() / row["time_s_median"] / 1e9
    print(f"codec {case.kernel} {case.codec} {2 * case.values // MIB} MiB {case.launch_mode}: "
          f"{row['time_s_median'] * 1e6:.2f} us, {rate:.0f} GB/s", flush=True)
    return row
