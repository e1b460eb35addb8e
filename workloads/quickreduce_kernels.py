"""The quantized two-shot all-reduce's kernels as the Triton port runs them: three persistent kernels.

The port (`companion/kernels/allreduce.py`, QuickReduce's algorithm over PyTorch symmetric memory) is
the implementation on NVIDIA GPUs, where vLLM ships none. Each call launches three kernels: one quantizes the
rank's input and scatters each peer its slice (`QrScatter`), one reduces the slice the rank owns, decoding every
peer's encoded tiles, summing in fp32 and encoding the sum once for the peers (`QrReduce`: the decode is fused, so
there is no fp16 round trip through memory), and one decodes the gathered sum (`QrGather`). Each runs at most
`PORT_PROGRAMS` persistent programs of `PORT_WARPS` warps, each looping over every programs-th codec tile
(grid-stride): the same tiles and bytes as one workgroup a tile, in fewer workgroups with more trips each
(`Layout.plan`: programs = min(1024, the tiles the launch covers)).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from hwmodels.work import Work
from workloads.codecs import Codec
from workloads.kernel_base import KernelKind, cdiv, check_ints, coerce
from workloads.kernels import Dequantize, Quantize

PORT_PROGRAMS = 1024  # programs a launch at most (the port's MAX_PROGRAMS)
PORT_WARPS = 4  # warps a program (the port's NUM_WARPS)


def persistent(works: tuple[Work, ...], programs: int) -> tuple[Work, ...]:
    """One-workgroup-a-tile launches run as at most `programs` persistent programs that loop over the tiles."""
    out = []
    for work in works:
        used = min(programs, work.workgroups)
        tiles = cdiv(work.workgroups, used) if used else 0
        program = work.program and replace(work.program, trips=work.program.trips * tiles, grid_stride=tiles > 1)
        out.append(replace(work, workgroups=used, flop_per_workgroup=work.workgroup_flop * tiles,
                           bytes_per_workgroup=work.workgroup_bytes * tiles, program=program))
    return tuple(out)


@dataclass(frozen=True)
class _PortKernel(KernelKind):
    """What the three kernels share: the fp16 values of the launch, the codec, the ranks and the warps."""

    values: int  # fp16 values the launch encodes or decodes (the reduce: the slice this rank owns)
    codec: Codec = Codec.INT4
    world: int = 2  # ranks in the group
    threads: int = PORT_WARPS * 32

    def __post_init__(self) -> None:
        check_ints(self, ("values", "world", "threads"))
        coerce(self, "codec", Codec)


@dataclass(frozen=True)
class QrScatter(_PortKernel):
    """Quantize the rank's whole input and send each tile to the peer that owns it; programs for the tiles one rank
    owns (ceil(tiles / world))."""

    kind: ClassVar[str] = "qr-scatter"

    def launches(self) -> tuple[Work, ...]:
        encode = Quantize(values=self.values, codec=self.codec, threads=self.threads)
        owned = cdiv(cdiv(self.values, self.codec.tile_values), self.world)
        return persistent(encode.launches(), min(PORT_PROGRAMS, owned))


@dataclass(frozen=True)
class QrReduce(_PortKernel):
    """Per output tile of the owned slice (`values`): `world` encoded tiles read and decoded, summed in fp32 and
    encoded once into this rank's buffer (the copies to the peers are the phase's transfers): the quantize's launch
    carrying the reads and the decode chain of its `world` inputs."""

    kind: ClassVar[str] = "qr-reduce"

    def launches(self) -> tuple[Work, ...]:
        (encode,) = Quantize(values=self.values, codec=self.codec, threads=self.threads).launches()
        (decode,) = Dequantize(values=self.values * self.world, codec=self.codec, threads=self.threads).launches()
        tile = min(self.values, self.codec.tile_values)
        flop = {d: encode.flop_by_dtype.get(d, 0.0) + decode.flop_by_dtype.get(d, 0.0)
                for d in {*encode.flop_by_dtype, *decode.flop_by_dtype}}
        program = replace(encode.program, trip_load_bytes=self.world * decode.program.trip_load_bytes,
                          trip_chain=decode.program.trip_chain + encode.program.trip_chain)
        fused = replace(encode, flop_by_dtype=flop, read_bytes=decode.read_bytes,
                        flop_per_workgroup=sum(flop.values()) * tile / self.values,
                        bytes_per_workgroup=(decode.read_bytes + encode.write_bytes) * tile / self.values,
                        program=program)
        return persistent((fused,), min(PORT_PROGRAMS, cdiv(self.values, self.codec.tile_values)))


@dataclass(frozen=True)
class QrGather(_PortKernel):
    """Decode the gathered sum, every tile of the rank's output; programs for the tiles one rank owns."""

    kind: ClassVar[str] = "qr-gather"

    def launches(self) -> tuple[Work, ...]:
        decode = Dequantize(values=self.values, codec=self.codec, threads=self.threads)
        owned = cdiv(cdiv(self.values, self.codec.tile_values), self.world)
        return persistent(decode.launches(), min(PORT_PROGRAMS, owned))
