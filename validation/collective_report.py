"""Predicted against measured for the two-GPU all-reduce sweeps: NCCL (ring) and the QuickReduce kernels.

NCCL's library protocols were fitted on the all-reduce's even powers of two (`validation.calibrate_links`),
so those rows are marked fitted; its odd powers, its all-gather and reduce-scatter, and every QuickReduce
row (our Triton two-shot kernels, each codec) are held out: nothing of the model was fitted to them.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from compiled.kernel import Compiled
from compiled.sass_counts import compiled, cycles_of, per_thread
from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu, load_platform
from hwmodels.work import Work
from simulator.cost.collective_algorithms import Algorithm, KernelAs, Phase
from simulator.cost.collective_policy import collective_time
from validation.collective_sweep import NCCL_CSV, QUICKREDUCE_CSV
from validation.comparison import Comparison
from workloads.codecs import Codec
from workloads.collectives import Collective, CollectiveOp
from workloads.kernel_base import KernelKind
from workloads.kernels import Dequantize, Quantize

DATA_DIR = Path(__file__).parent / "data"
FILES = (NCCL_CSV, QUICKREDUCE_CSV)
NCCL_OPS = {"nccl_all_reduce": CollectiveOp.ALL_REDUCE, "nccl_all_gather": CollectiveOp.ALL_GATHER,
            "nccl_reduce_scatter": CollectiveOp.REDUCE_SCATTER}
PLATFORMS = {"h200x2": "h200-2"}  # data folder -> platform spec


def _size_label(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


# The phases of the model's QuickReduce all-reduce (`allreduce_phases`) and the Triton kernel that ran each
# (validation/companion/kernels/allreduce.py, counted as `qr_*` in compiled/data/<gpu>.csv).
QR_KERNELS = {"quantize + scatter": "qr_scatter", "reduce + requantize + gather": "qr_reduce",
              "dequantize": "qr_gather"}
QR_WARPS = 4  # num_warps of the sweep's launches (validation.companion.bench.quickreduce.NUM_WARPS)


@dataclass(frozen=True)
class _Fused(KernelKind):
    """A model kernel whose work runs inside another phase kernel's launch: no launch of its own."""

    kind: ClassVar[str] = "fused"

    kernel: KernelKind

    def launches(self) -> tuple[Work, ...]:
        return ()


@dataclass(frozen=True)
class _ReduceTiles(KernelKind):
    """QuickReduce's fused reduce (`_reduce_kernel`): per output tile, `world` encoded tiles read and decoded,
    summed in fp32 and encoded once into this rank's buffer 2 (the copies to the peers' buffers are the phase's
    transfers). The `quantize`'s launch with the reads and the decode chain of the `world` inputs."""

    kind: ClassVar[str] = "quickreduce_reduce"

    quantize: Quantize
    world: int

    def launches(self) -> tuple[Work, ...]:
        (encode,) = self.quantize.launches()
        (decode,) = Dequantize(values=self.quantize.values * self.world, codec=self.quantize.codec,
                               threads=self.quantize.threads).launches()
        tile = min(self.quantize.values, self.quantize.codec.tile_values)
        flop = {d: encode.flop_by_dtype.get(d, 0.0) + decode.flop_by_dtype.get(d, 0.0)
                for d in {*encode.flop_by_dtype, *decode.flop_by_dtype}}
        program = replace(encode.program, trip_load_bytes=self.world * decode.program.trip_load_bytes,
                          trip_chain=decode.program.trip_chain + encode.program.trip_chain)
        return (replace(encode, flop_by_dtype=flop, read_bytes=decode.read_bytes,
                        flop_per_workgroup=sum(flop.values()) * tile / self.quantize.values,
                        bytes_per_workgroup=(decode.read_bytes + encode.write_bytes) * tile / self.quantize.values,
                        program=program),)


QR_PROGRAMS = 1024  # programs per launch at most (validation.companion.bench.quickreduce.MAX_PROGRAMS)


@dataclass(frozen=True)
class _Persistent(KernelKind):
    """A one-workgroup-per-tile kernel run as at most `programs` persistent programs, each looping over every
    programs-th tile (grid-stride), as QuickReduce's kernels run: the same tiles, fewer workgroups with more
    trips each."""

    kind: ClassVar[str] = "persistent"

    kernel: KernelKind
    programs: int

    def launches(self) -> tuple[Work, ...]:
        out = []
        for work in self.kernel.launches():
            programs = min(self.programs, work.workgroups)
            tiles = -(-work.workgroups // programs) if programs else 0
            program = work.program and replace(work.program, trips=work.program.trips * tiles,
                                               grid_stride=tiles > 1)
            out.append(replace(work, workgroups=programs, flop_per_workgroup=work.workgroup_flop * tiles,
                               bytes_per_workgroup=work.workgroup_bytes * tiles, program=program))
        return tuple(out)


def quickreduce_kernels(gpu_name: str, codec: Codec, world: int) -> KernelAs:
    """`kernel_as` for `collective_time`: the model's codec kernels of each QuickReduce phase as the Triton
    kernels ran them, 4 warps a tile with the registers and per-tile SASS count of their compiled code.

    The real kernels are persistent: at most 1024 programs loop over the tiles (grid-stride), and so are the
    launches here (`_Persistent`): each program issues the tile loop's body once per tile it owns
    (`per_thread=(0, per tile)`); left out is each program's prologue (the flag waits and releases, 77-210
    instructions per thread, run once by each of at most 1024 programs: under a microsecond of issue over the
    GPU). The reduce phase's model
    is Dequantize(n slices) then Quantize(slice); the real `_reduce_kernel` fuses both per output tile (n
    decodes, the fp32 sum, one encode and the copies to the peers), so the Quantize becomes that fused
    kernel (`_ReduceTiles`: one workgroup per output tile, reading the n encoded tiles) carrying the per-tile
    count, and the Dequantize is fused away (no launch: its fp16 round trip through memory does not happen).
    """
    def kernel_as(phase: Phase, kernel: KernelKind) -> KernelKind:
        name = QR_KERNELS.get(phase.name)
        if name is None:
            raise ValueError(f"no QuickReduce kernel for phase {phase.name!r}")
        if name == "qr_reduce" and isinstance(kernel, Dequantize):
            return _Fused(kernel)
        if not isinstance(kernel, Quantize):  # Dequantize is a Quantize too
            raise ValueError(f"unexpected {kernel.kind} kernel in phase {phase.name!r}")
        _, per_tile = per_thread(gpu_name, name, codec.value)
        _, registers = compiled(gpu_name, name, codec.value)
        ran: KernelKind = replace(kernel, threads=QR_WARPS * 32)
        if name == "qr_reduce":
            ran = _ReduceTiles(ran, world)
        _, trip_cycles, _, trip_loads, by_warps, _ = cycles_of(gpu_name, name, codec.value)  # per tile, no prologue
        # Layout.plan: programs = min(QR_PROGRAMS, seg), seg = the tiles one rank owns (ceil(tiles / world))
        tiles = -(-kernel.values // kernel.codec.tile_values)
        seg = tiles if name == "qr_reduce" else -(-tiles // world)
        persistent = _Persistent(ran, min(QR_PROGRAMS, seg))
        (work,) = persistent.launches()
        return Compiled(persistent, (work.program.trips * per_tile * QR_WARPS,), (registers,), ((0, per_tile),),
                        ((0.0, trip_cycles, 0.0, trip_loads, by_warps),))

    return kernel_as


def _row(row: dict[str, str], platform: str, seen: set[tuple]) -> Comparison | None:
    kernel, size, world = row["kernel"], int(row["size_bytes"]), int(row["world_size"])
    if row["launch_mode"] != "graph" or (kernel, size) in seen:  # NCCL rows recur in the QuickReduce file
        return None
    seen.add((kernel, size))
    gpu = load_gpu(load_platform(platform).gpu)
    fabric, calib = build_fabric(load_platform(platform), gpu), load_calibration(gpu.name)
    if kernel in NCCL_OPS:
        op = NCCL_OPS[kernel]
        collective = Collective(op, size, world, "measured")
        result = collective_time(collective, fabric, gpu, calib, mode=LaunchMode.GRAPH, algorithm=Algorithm.RING)
        fitted = op is CollectiveOp.ALL_REDUCE and int(math.log2(size)) % 2 == 0
        group = f"{op.value} nccl"
    else:  # quickreduce_<codec>_all_reduce
        codec = Codec.parse(kernel.split("_")[1])
        collective = Collective(CollectiveOp.ALL_REDUCE, size, world, "measured")
        result = collective_time(collective, fabric, gpu, calib, mode=LaunchMode.GRAPH,
                                 algorithm=Algorithm.QUICKREDUCE, codec=codec,
                                 kernel_as=quickreduce_kernels(gpu.name, codec, world))
        fitted = False
        group = f"allreduce quickreduce {codec.value}"
    return Comparison(label=f"{kernel} {_size_label(size)}", group=group, launch_mode="graph",
                      measured_s=float(row["time_s_median"]), predicted_s=result.time_s, bound="link",
                      fitted=fitted)


def compare_collectives(folder: str) -> list[Comparison]:
    """Every graph-mode row of a two-GPU data folder beside the model's prediction."""
    platform = PLATFORMS.get(folder)
    if platform is None:
        return []
    seen: set[tuple] = set()
    rows: list[Comparison] = []
    for name in FILES:
        path = DATA_DIR / folder / name
        if path.exists():
            with path.open(newline="") as handle:
                rows += [c for r in csv.DictReader(handle) if (c := _row(r, platform, seen)) is not None]
    return rows
