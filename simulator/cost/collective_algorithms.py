"""Collective algorithms as phases of concurrent transfers and kernels, and their time on a fabric.

All-reduce of S bytes (fp16/bf16) over n ranks:
- ring (NCCL/RCCL): reduce-scatter then all-gather, 2(n-1) steps of S/n per rank over all of a
  GPU's links to the group (channels), at the latency and bandwidth share of the library protocol
  the size selects (hwmodels/library.py); the phases below describe its transfers for byte counts;
- one-shot (vLLM custom AR): every rank reads the whole tensor of every peer, then reduces;
- two-shot (vLLM custom AR): reduce-scatter then all-gather by direct peer reads of S/n slices;
- QuickReduce: two-shot whose slices travel in a codec's tiles (QuickReduce study), with quantize,
  dequantize-reduce-requantize and dequantize kernels.
A phase's time is the slower of its transfers and its kernels (collective kernels move data and
compute in one launch, so they overlap), plus one synchronization (the route's latency: flags).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from compiled.launch_time import launch_works
from hwmodels.calibration import Calibration
from hwmodels.interconnect import Fabric, Transfer, gpu_node, transfer_finish_s
from hwmodels.library import CollectiveLibrary
from hwmodels.roofline import LaunchMode, launch_overhead_s, launches_time_s
from hwmodels.spec import GPU, Topology
from workloads.codecs import Codec
from workloads.collectives import CollectiveOp
from workloads.kernel_base import KernelKind
from workloads.kernels import Dequantize, Elementwise, Quantize
from workloads.quickreduce_kernels import QrGather, QrReduce, QrScatter

VALUE_BYTES = 2  # fp16 / bf16 activations
# vLLM's custom all-reduce (csrc/custom_all_reduce.cuh [S62]): at most 36 blocks of 512 threads, each thread
# loading one 16-byte vector from every rank per iteration before it reduces them.
CUSTOM_AR_BLOCKS = 36
CUSTOM_AR_THREADS = 512
CUSTOM_AR_VECTOR_BYTES = 16


def custom_ar_in_flight(n: int) -> float:
    """Peer bytes one rank's custom all-reduce kernel keeps in flight: every thread's loads from n-1 peers."""
    return CUSTOM_AR_BLOCKS * CUSTOM_AR_THREADS * CUSTOM_AR_VECTOR_BYTES * (n - 1)


class Algorithm(Enum):
    """How a collective moves its data."""

    RING = "ring"
    ONE_SHOT = "oneshot"
    TWO_SHOT = "twoshot"
    QUICKREDUCE = "quickreduce"


@dataclass(frozen=True)
class Phase:
    """Transfers that run together, the kernels that produce or consume them, and one synchronization."""

    name: str
    transfers: tuple[Transfer, ...]
    kernels: tuple[KernelKind, ...] = ()
    steps: int = 1  # identical repetitions (ring steps)
    # True: the phase is a kernel launch of its own (QuickReduce runs three, each waiting on the flags its
    # peers' previous kernel wrote); False: it runs inside the collective's one launch.
    own_launch: bool = False
    # Bytes of peer loads one rank's kernel keeps in flight when the phase pulls its data with SM loads from
    # the peers' memory (the custom all-reduce) instead of pushing it: by Little's law its rate is at most
    # this over the platform's peer-load latency. 0: the data is pushed or copied, the links set the rate.
    peer_loads_in_flight: float = 0.0


@dataclass(frozen=True)
class CollectiveTime:
    """A collective's predicted time and the bytes each rank puts on the wire."""

    time_s: float
    wire_bytes_per_rank: float
    algorithm: Algorithm
    phases: tuple[tuple[str, float], ...]  # (name, seconds) including repetitions
    launch_s: float


def _peers(n: int, rank: int) -> list[int]:
    return [r for r in range(n) if r != rank]


def _ring_targets(fabric: Fabric, n: int) -> list[int]:
    """Ring offsets in use: all n-1 on a full mesh (one ring per link), one neighbour otherwise."""
    return list(range(1, n)) if fabric.topology is Topology.FULL_MESH else [1]


def _ring_step(fabric: Fabric, n: int, chunk: float) -> tuple[Transfer, ...]:
    offsets = _ring_targets(fabric, n)
    share = chunk / len(offsets)
    return tuple(Transfer(gpu_node(r), gpu_node((r + o) % n), share) for r in range(n) for o in offsets)


def _all_to_peers(n: int, size_each: float) -> tuple[Transfer, ...]:
    return tuple(Transfer(gpu_node(r), gpu_node(p), size_each) for r in range(n) for p in _peers(n, r))


def allreduce_phases(algorithm: Algorithm, size_bytes: float, n: int, fabric: Fabric,
                     codec: Codec = Codec.FP, port_kernels: bool = False) -> list[Phase]:
    """The phases of one all-reduce of `size_bytes` over ranks 0..n-1. `port_kernels`: QuickReduce runs as the
    Triton port's three persistent kernels (`workloads/quickreduce_kernels.py`, the implementation on NVIDIA GPUs);
    otherwise as one codec kernel a tile, the reduce decoding then encoding (vLLM's ROCm kernels, whose own grid
    and tiles are not modelled yet)."""
    values = int(size_bytes // VALUE_BYTES)
    slice_bytes = size_bytes / n
    if algorithm is Algorithm.RING:
        reduce_slice = Elementwise(elements=max(1, values // n), inputs=2, dtype="bf16")
        return [Phase("reduce-scatter step", _ring_step(fabric, n, slice_bytes), (reduce_slice,), steps=n - 1),
                Phase("all-gather step", _ring_step(fabric, n, slice_bytes), steps=n - 1)]
    if algorithm is Algorithm.ONE_SHOT:
        reduce_all = Elementwise(elements=max(1, values), inputs=n, dtype="bf16")
        return [Phase("read all peers", _all_to_peers(n, size_bytes), (reduce_all,),
                      peer_loads_in_flight=custom_ar_in_flight(n))]
    if algorithm is Algorithm.TWO_SHOT:
        reduce_slice = Elementwise(elements=max(1, values // n), inputs=n, dtype="bf16")
        return [Phase("reduce-scatter", _all_to_peers(n, slice_bytes), (reduce_slice,),
                      peer_loads_in_flight=custom_ar_in_flight(n)),
                Phase("all-gather", _all_to_peers(n, slice_bytes), peer_loads_in_flight=custom_ar_in_flight(n))]
    wire = codec.wire_bytes(max(1, values // n))  # one rank's slice, in tiles
    slice_values = max(1, values // n)
    # Three launches; each waits for its peers' flags (a zero-byte flow: the route's latency), and the
    # last one reads what the peers' reduce kernels wrote into this rank's buffer.
    if port_kernels:
        return [
            Phase("quantize + scatter", _all_to_peers(n, wire), (QrScatter(max(1, values), codec, n),),
                  own_launch=True),
            Phase("reduce + requantize + gather", _all_to_peers(n, wire), (QrReduce(slice_values, codec, n),),
                  own_launch=True),
            Phase("dequantize", _all_to_peers(n, 0), (QrGather(max(1, values), codec, n),), own_launch=True),
        ]
    return [
        Phase("quantize + scatter", _all_to_peers(n, wire),
              (Quantize(values=max(1, values), codec=codec),), own_launch=True),
        Phase("reduce + requantize + gather", _all_to_peers(n, wire),
              (Dequantize(values=slice_values * n, codec=codec), Quantize(values=slice_values, codec=codec)),
              own_launch=True),
        Phase("dequantize", _all_to_peers(n, 0), (Dequantize(values=max(1, values), codec=codec),),
              own_launch=True),
    ]


def gather_phases(op: CollectiveOp, size_bytes: float, n: int, fabric: Fabric) -> list[Phase]:
    """All-gather (size = output), reduce-scatter (size = input) and all-to-all (size = input) as rings or direct."""
    slice_bytes = size_bytes / n
    if op is CollectiveOp.ALL_TO_ALL:
        return [Phase("all-to-all", _all_to_peers(n, slice_bytes))]
    kernels: tuple[KernelKind, ...] = ()
    if op is CollectiveOp.REDUCE_SCATTER:
        kernels = (Elementwise(elements=max(1, int(slice_bytes // VALUE_BYTES)), inputs=2, dtype="bf16"),)
    return [Phase(f"{op.value} step", _ring_step(fabric, n, slice_bytes), kernels, steps=n - 1)]


def ring_time(op: CollectiveOp, size_bytes: float, n: int, fabric: Fabric, library: CollectiveLibrary,
              launch_s: float) -> CollectiveTime:
    """A vendor library's ring (NCCL/RCCL): steps x protocol latency + wire bytes at the protocol's share.

    The per-step reductions of a ring run inside the library's kernel, hidden behind the transfers.
    """
    steps = 2 * (n - 1) if op is CollectiveOp.ALL_REDUCE else n - 1
    wire = steps * size_bytes / n
    fixed_s, step_s, efficiency = library.protocol(size_bytes)
    link_s = fixed_s + steps * step_s + wire / (fabric.line_rate_bytes_per_s(n) * efficiency)
    return CollectiveTime(launch_s + link_s, wire, Algorithm.RING, (("ring", link_s),), launch_s)


def wire_bytes_per_rank(phases: Sequence[Phase], n: int) -> float:
    """Bytes rank 0 sends over all phases."""
    return sum(p.steps * sum(t.size_bytes for t in p.transfers if t.src == gpu_node(0)) for p in phases)


def peer_loads_s(phase: Phase, fabric: Fabric) -> float:
    """Seconds rank 0 needs to pull its incoming bytes with `phase.peer_loads_in_flight` bytes of loads in
    flight (Little's law at the platform's peer-load latency), plus one round trip; 0 for pushed phases."""
    if not phase.peer_loads_in_flight or not fabric.peer_load_latency_s:
        return 0.0
    incoming = sum(t.size_bytes for t in phase.transfers if t.dst == gpu_node(0))
    rate = phase.peer_loads_in_flight / fabric.peer_load_latency_s
    return fabric.peer_load_latency_s + incoming / rate


def _busy_s(kernels: Sequence[KernelKind], gpu: GPU, calib: Calibration, mode: LaunchMode, launch_s: float) -> float:
    """Seconds the kernels keep the GPU busy, back to back, without their launch overheads (each launch as every
    command times it: `compiled.launch_time`)."""
    launched = [w for k in kernels for w in launch_works(k, gpu)]
    return launches_time_s(launched, gpu, calib, mode) - len(launched) * launch_s


def _first_tile(kernel: KernelKind) -> KernelKind:
    """The kernel over one codec tile: what must be ready before the first bytes can leave. The port's reduce
    decodes nothing of its own first: its first tile is one encoded output tile."""
    if isinstance(kernel, Quantize | QrScatter | QrReduce | QrGather):
        return replace(kernel, values=min(kernel.values, kernel.codec.tile_values))
    return kernel


def phases_time(phases: Sequence[Phase], algorithm: Algorithm, fabric: Fabric, gpu: GPU, calib: Calibration,
                mode: LaunchMode) -> CollectiveTime:
    """Seconds of the phases on `fabric`: each the slower of its transfers and kernels, plus one launch."""
    timed = []
    launch = launch_overhead_s(gpu, calib, mode)
    for phase in phases:
        kernel_s = _busy_s(phase.kernels, gpu, calib, mode, launch)
        if phase.own_launch:
            # the first tile is loaded and encoded before anything is sent, and after its last store the
            # kernel fences its peer writes (a round trip on the route) before it raises the flags
            lead_s = _busy_s([_first_tile(k) for k in phase.kernels], gpu, calib, mode, launch)
            transfers = tuple(replace(t, start_s=lead_s) for t in phase.transfers)
            fence_s = max((sum(link.latency_s for link in fabric.route(t.src, t.dst)) for t in transfers), default=0.0)
            link_s = max(transfer_finish_s(fabric, transfers), default=0.0) + fence_s
            timed.append((phase.name, phase.steps * (launch + max(link_s, kernel_s))))
            continue
        link_s = max(max(transfer_finish_s(fabric, phase.transfers), default=0.0), peer_loads_s(phase, fabric))
        timed.append((phase.name, phase.steps * max(link_s, kernel_s)))
    if any(p.own_launch for p in phases):
        launch = 0.0  # every phase paid its own
    n = fabric.gpus
    return CollectiveTime(
        time_s=launch + sum(t for _, t in timed),
        wire_bytes_per_rank=wire_bytes_per_rank(phases, n),
        algorithm=algorithm,
        phases=tuple(timed),
        launch_s=launch,
    )
