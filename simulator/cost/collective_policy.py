"""Which all-reduce a serving engine picks, like vLLM's, and the time of any collective on a platform.

Sources: vLLM's all-reduce code [S27a]-[S27e] (tags: hwmodels/specs/SOURCES.md) and the QuickReduce study:
- vLLM custom all-reduce is used below its 8 MiB max size on fully connected GPUs: one-shot at
  W = 2, or at W <= 4 below 512 KiB, or at W <= 8 below 256 KiB; two-shot otherwise.
- QuickReduce (ROCm gfx94x/gfx95x, W in 2, 4, 8, up to 2 GiB) is used for a codec when the message
  reaches the codec's minimum size (vLLM's `_QR_MIN_SIZE`, fp16 rows, since bf16 is cast to fp16 by
  default) and the 1 MB activation threshold of serving frameworks; INT3 only at TP2.
- Otherwise the vendor library's ring (NCCL / RCCL).
"""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.calibration import Calibration
from hwmodels.interconnect import Fabric
from hwmodels.library import load_library
from hwmodels.roofline import LaunchMode, launch_overhead_s
from hwmodels.spec import GPU, Topology, Vendor
from simulator.cost.collective_algorithms import (
    Algorithm,
    CollectiveTime,
    allreduce_phases,
    gather_phases,
    phases_time,
    ring_time,
)
from workloads.codecs import Codec
from workloads.collectives import Collective, CollectiveOp

MiB = 2**20
CUSTOM_AR_MAX_BYTES = 8 * MiB  # vLLM custom_all_reduce default max_size [S27c]
QUICKREDUCE_MAX_BYTES = 2048 * MiB  # qr_max_size() [S27d]
ACTIVATION_THRESHOLD_BYTES = 1_000_000  # QuickReduce study: quantized path only above 1 MB
# vLLM _QR_MIN_SIZE in MB, fp16 rows, per world size: [FP, INT8, INT6, INT4, INT3] [S27b]
_QR_MIN_MB = {2: (1, 2, 2, 1, 1), 4: (1, 16, 4, 2, 2), 8: (16, 4, 4, 2, 2)}
_QR_CODEC_ORDER = (Codec.FP, Codec.INT8, Codec.INT6, Codec.INT4, Codec.INT3)


@dataclass(frozen=True)
class AllReduceChoice:
    """The algorithm (and codec, for QuickReduce) an engine runs for one all-reduce."""

    algorithm: Algorithm
    codec: Codec = Codec.FP
    reason: str = ""


def quickreduce_min_bytes(codec: Codec, world: int) -> float:
    """Smallest message vLLM sends through QuickReduce with `codec` (FP4 as INT4: same tile)."""
    order = Codec.INT4 if codec is Codec.FP4 else codec
    minimum_mb = _QR_MIN_MB[world][_QR_CODEC_ORDER.index(order)]
    return max(minimum_mb * MiB, ACTIVATION_THRESHOLD_BYTES)


def select_allreduce(size_bytes: float, world: int, gpu: GPU, fabric: Fabric,
                     quickreduce: Codec | None = None) -> AllReduceChoice:
    """vLLM's choice for an all-reduce of `size_bytes` over `world` ranks."""
    connected = fabric.topology in (Topology.FULL_MESH, Topology.SWITCH, Topology.DIRECT)
    qr_ok = (quickreduce is not None and gpu.vendor is Vendor.AMD and world in _QR_MIN_MB
             and (quickreduce is not Codec.INT3 or world == 2) and size_bytes <= QUICKREDUCE_MAX_BYTES)
    if qr_ok and quickreduce is not None and size_bytes >= quickreduce_min_bytes(quickreduce, world):
        reason = f"QuickReduce {quickreduce.value}: above its minimum size"
        return AllReduceChoice(Algorithm.QUICKREDUCE, quickreduce, reason)
    if connected and size_bytes < CUSTOM_AR_MAX_BYTES:
        one_shot = world == 2 or (world <= 4 and size_bytes < 512 * 1024) or (world <= 8 and size_bytes < 256 * 1024)
        if one_shot:
            return AllReduceChoice(Algorithm.ONE_SHOT, reason="custom all-reduce, one-shot")
        return AllReduceChoice(Algorithm.TWO_SHOT, reason="custom all-reduce, two-shot")
    return AllReduceChoice(Algorithm.RING, reason="vendor library ring (NCCL/RCCL)")


def collective_time(collective: Collective, fabric: Fabric, gpu: GPU, calib: Calibration, *,
                    mode: LaunchMode = LaunchMode.GRAPH, algorithm: Algorithm | None = None,
                    codec: Codec | None = None, quickreduce: Codec | None = None) -> CollectiveTime:
    """Time of one collective; an all-reduce without an algorithm gets the engine's choice."""
    n, size = collective.group_size, collective.payload_bytes
    if n > fabric.gpus:
        raise ValueError(f"a group of {n} ranks does not fit on {fabric.name} ({fabric.gpus} GPUs)")
    if collective.op is CollectiveOp.ALL_REDUCE and algorithm is None:
        choice = select_allreduce(size, n, gpu, fabric, quickreduce)
        algorithm, codec = choice.algorithm, choice.codec
    algorithm = algorithm or Algorithm.RING
    if algorithm is Algorithm.RING and collective.op is not CollectiveOp.ALL_TO_ALL:
        return ring_time(collective.op, size, n, fabric, load_library(fabric.name, n),
                         launch_overhead_s(gpu, calib, mode))
    if collective.op is CollectiveOp.ALL_REDUCE:
        phases = allreduce_phases(algorithm, size, n, fabric, codec or Codec.FP,
                                  port_kernels=gpu.vendor is Vendor.NVIDIA)
    else:
        phases = gather_phases(collective.op, size, n, fabric)
    return phases_time(phases, algorithm, fabric, gpu, calib, mode)
