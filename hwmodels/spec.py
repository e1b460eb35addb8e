"""Hardware specs: GPUs and platforms (nodes) as frozen dataclasses loaded from `specs/`."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from pathlib import Path

from hwmodels.dtypes import Dtype
from hwmodels.specfile import FieldError, SpecError, load_record, ranged, read_yaml

SPEC_DIR = Path(__file__).parent / "specs"

# The GPU fields that the cycle-level cost model reads; each must be positive and finite.
CYCLE_MODEL_FIELDS = (
    "boost_clock_hz", "matmul_clock_hz", "dram_latency_s", "l2_latency_s", "l2_bandwidth_bytes_per_s",
    "cu_bandwidth_bytes_per_s", "kernel_floor_s", "workgroup_dispatch_s", "hbm_burst_latency_s", "memory_sector_bytes",
    "alu_latency_cycles",
    "int_latency_cycles",
    "sfu_latency_cycles", "mma_latency_cycles", "lds_latency_cycles", "shuffle_latency_cycles",
    "reduction_latency_cycles", "fp32_lanes_per_cu", "int32_lanes_per_cu", "bit_lanes_per_cu", "sfu_lanes_per_cu",
    "lds_bytes_per_clock_per_cu",
)


class Vendor(Enum):
    """Who makes the GPU; decides the words (CU/SM, wave/warp, LDS/shared memory) in reports."""

    AMD = "amd"
    NVIDIA = "nvidia"


class Topology(Enum):
    """How the GPUs of a platform are wired to each other."""

    FULL_MESH = "full_mesh"  # a point-to-point link between every pair (xGMI)
    SWITCH = "switch"  # every GPU's links go to switches (NVLink + NVSwitch)
    DIRECT = "direct"  # two GPUs joined by a bundle of links (NVLink bridge)


@dataclass(frozen=True)
class GPU:
    """One GPU's resources and peak rates, in SI units, with the source of every number."""

    name: str
    vendor: Vendor
    arch: str
    description: str
    compute_units: int
    clock_hz: float
    wave_size: int
    simds_per_cu: int
    max_waves_per_simd: int
    registers_per_simd_lane: int  # 32-bit registers per lane of one SIMD, shared by its resident waves
    register_granule: int  # registers per lane are allocated in multiples of this
    max_registers_per_thread: int
    lds_per_cu_bytes: int
    lds_max_per_workgroup_bytes: int
    lds_granularity_bytes: int
    max_workgroups_per_cu: int
    max_threads_per_workgroup: int
    peak_dense_flop_per_s: Mapping[Dtype, float | None]
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    l2_bytes: float
    llc_bytes: float
    host_link_bytes_per_s: float  # per direction
    launch_eager_s: float
    launch_graph_node_s: float
    tco_usd_per_gpu_hour: float
    # Constants of the cycle-level cost model (per-workgroup latency chains, Little's law, issue rates).
    boost_clock_hz: float  # SM/CU clock of latency- and issue-bound kernels (max boost); clock_hz gives the dense peak
    matmul_clock_hz: float  # SM/CU clock while matrix units run sustained (the power limit); <= clock_hz
    dram_latency_s: float  # idle load-to-use latency of an HBM access that misses L2 (pointer chase)
    l2_latency_s: float  # load-to-use latency of an L2 hit, L1 bypassed
    l2_bandwidth_bytes_per_s: float  # whole-GPU L2 read bandwidth
    cu_bandwidth_bytes_per_s: float  # most HBM read bandwidth one CU (SM) sustains with ample bytes in flight
    kernel_floor_s: float  # GPU time of a tiny kernel (one load, one store) as a node of a CUDA/HIP graph
    workgroup_dispatch_s: float  # the dispatcher's time per workgroup handed to one CU (throughput)
    hbm_burst_latency_s: float  # extra time of a launch whose every CU loads at once, over one CU alone
    memory_sector_bytes: float  # the smallest piece of memory a load or store moves (a short row costs a whole one)
    alu_latency_cycles: float  # dependent fp32 FMA
    int_latency_cycles: float  # dependent int32 multiply-add
    sfu_latency_cycles: float  # dependent transcendental (exp2)
    mma_latency_cycles: float  # dependent smallest bf16 matrix instruction (mma.sync m16n8k16; MFMA 16x16x16/32)
    lds_latency_cycles: float  # shared memory (LDS) load-to-use: a 32-bit load on NVIDIA, ds_read on AMD
    shuffle_latency_cycles: float  # one cross-lane exchange step (shfl.sync; DPP, ds_swizzle, ds_bpermute)
    reduction_latency_cycles: float  # a sum across a workgroup's warps: shuffles, LDS exchange, barrier; round trip
    fp32_lanes_per_cu: float  # fp32 FMA operations per clock per CU (SM), non-matrix
    int32_lanes_per_cu: float  # int32 add/mul operations per clock per CU (SM)
    bit_lanes_per_cu: float  # logic/shift operations per clock per CU (SM)
    sfu_lanes_per_cu: float  # transcendental operations per clock per CU (SM)
    lds_bytes_per_clock_per_cu: float  # shared memory (LDS) bandwidth per CU (SM) per clock
    # GPU time of one eager launch timed alone between two events, the host hidden (what a row timed that way
    # pays for its launch); None: a graph node's
    launch_eager_gpu_s: float | None = None
    # host cost of one eager launch through Triton's Python launcher; None: `launch_eager_s` (a library op's)
    launch_eager_triton_s: float | None = None
    # scheduler cycles a conversion or transcendental (the narrow XU/MUFU unit) holds its warp scheduler's issue,
    # beyond the cycles its unit is busy; None: one, like any instruction
    xu_issue_cycles: float | None = None
    # the same for a warp shuffle (SHFL) and an integer multiply-add (IMAD); None: one
    shfl_issue_cycles: float | None = None
    imad_issue_cycles: float | None = None
    # bytes HBM moves for a short row's load (a few bytes cost as much as this many); None: memory_sector_bytes
    dram_load_granule_bytes: float | None = None
    # a store that writes part of a memory sector costs this many times a whole sector's (read, merged, written);
    # None: the same as a whole one
    partial_sector_store_factor: float | None = None
    # GPU-wide seconds the L2 spends on each piece of a row shorter than a sector that a launch loads or stores,
    # whatever its bytes (neighbouring workgroups' pieces of one sector merge in L2, which passes them at this rate);
    # None: not measured, so no such bound and no merge in L2
    l2_short_row_s: float | None = None
    # a lone SM's loaded latency for asynchronous copies into shared memory (cp.async) over the latency with every
    # SM streaming, taken linearly in the share of SMs streaming; None: no such fall
    async_copy_latency_alone: float | None = None
    # SM clock while a kernel issues matrix (tensor-core) instructions, however few; None: boost_clock_hz
    matrix_boost_clock_hz: float | None = None
    # load-to-use of the wider shared-memory loads of NVIDIA's SASS: ldmatrix (LDSM, a warp's mma.sync operands)
    # and the 128-bit vector load (LDS.128); None: lds_latency_cycles
    ldsm_latency_cycles: float | None = None
    lds_128_latency_cycles: float | None = None
    # a dependent DRAM round trip's latency while the GPU moves reads, copies (half reads, half writes) or writes at a
    # rate, over the idle latency: flat pairs (TB/s, factor), rates ascending; empty: not measured, so traffic never
    # lengthens a round trip beyond what the memory curve's loaded latency holds (`hwmodels.loaded_latency`)
    dram_latency_under_reads: tuple[float, ...] = ()
    dram_latency_under_copies: tuple[float, ...] = ()
    dram_latency_under_writes: tuple[float, ...] = ()
    # device memory the runtime reports (CUDA's totalGlobalMem, torch's total_memory, HIP's; nvidia-smi and rocm-smi
    # print it in MiB or bytes): what serving engines take their memory fraction of. Vendors' "GB" are GiB of HBM
    # stacks less what the driver keeps; None: hbm_capacity_bytes
    device_memory_bytes: float | None = None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        missing = [d.value for d in Dtype if d not in self.peak_dense_flop_per_s]
        if missing:
            raise FieldError("peak_dense_tflop_per_s", "missing datatypes (use value: null if not supported): "
                             + ", ".join(missing))
        for key in ("compute_units", "wave_size", "simds_per_cu", "max_waves_per_simd", "register_granule",
                    "lds_granularity_bytes", "max_workgroups_per_cu", "max_threads_per_workgroup"):
            if getattr(self, key) <= 0:
                raise FieldError(key, "must be positive")
        for key in ("clock_hz", "hbm_capacity_bytes", "hbm_bandwidth_bytes_per_s"):
            if getattr(self, key) <= 0:
                raise FieldError(key, "must be positive")
        for key in CYCLE_MODEL_FIELDS:
            value = getattr(self, key)
            if not math.isfinite(value) or value <= 0:
                raise FieldError(key, f"must be positive and finite, got {value}")
        if self.lds_max_per_workgroup_bytes > self.lds_per_cu_bytes:
            raise FieldError("lds_max_per_workgroup_bytes", "exceeds lds_per_cu_bytes")
        if self.max_registers_per_thread > self.registers_per_simd_lane:
            raise FieldError("max_registers_per_thread", "exceeds registers_per_simd_lane")
        if self.matrix_boost_clock_hz is not None and not 0 < self.matrix_boost_clock_hz <= self.boost_clock_hz:
            raise FieldError("matrix_boost_clock_hz", f"must be positive and at most boost_clock_hz "
                             f"({self.boost_clock_hz / 1e6:g} MHz), got {self.matrix_boost_clock_hz / 1e6:g} MHz")
        for key in ("ldsm_latency_cycles", "lds_128_latency_cycles"):
            value = getattr(self, key)
            if value is not None and (not math.isfinite(value) or value <= 0):
                raise FieldError(key, f"must be positive and finite, got {value}")
        for key in ("dram_latency_under_reads", "dram_latency_under_copies", "dram_latency_under_writes"):
            pairs = getattr(self, key)
            rates = pairs[::2]
            if len(pairs) % 2 or any(b <= a for a, b in itertools.pairwise(rates)) or any(f < 1 for f in pairs[1::2]):
                raise FieldError(key, "must be pairs (TB/s, factor) with rates ascending and factors at least 1")
        under = [bool(getattr(self, k)) for k in ("dram_latency_under_reads", "dram_latency_under_copies",
                                                  "dram_latency_under_writes")]
        if any(under) and not all(under):
            raise FieldError("dram_latency_under_reads", "give all three traffic kinds (reads, copies, writes) or none")

    @property
    def memory_total_bytes(self) -> float:
        """Device memory the runtime reports, the base of an engine's memory fraction."""
        return self.device_memory_bytes or self.hbm_capacity_bytes

    @property
    def max_waves_per_cu(self) -> int:
        """Wave (warp) slots of one CU (SM)."""
        return self.max_waves_per_simd * self.simds_per_cu

    def peak_flop_per_s(self, dtype: Dtype) -> float:
        """Dense peak of the math units for `dtype`; raises if the GPU has none."""
        peak = self.peak_dense_flop_per_s[dtype]
        if peak is None:
            valid = ", ".join(d.value for d, v in self.peak_dense_flop_per_s.items() if v is not None)
            raise ValueError(f"{self.name} has no {dtype.value} math units (supported: {valid})")
        return peak

    def supports(self, dtype: Dtype) -> bool:
        return self.peak_dense_flop_per_s[dtype] is not None


@dataclass(frozen=True)
class Platform:
    """A node: several GPUs of one kind and the links between them."""

    name: str
    description: str
    gpu: str
    # assumption: above NVIDIA's announced 576-GPU NVLink domain; the committed platforms have 2 to 8
    gpus: int = ranged(2, 1024, "assumption: no scale-up domain has more than 1,024 GPUs")
    topology: Topology
    # assumption: 18 NVLink links per B200/H200 GPU [S9] and 7 xGMI links per MI355X are the most committed
    links_per_gpu: int = ranged(1, 1024, "assumption: at most 1,024 links per GPU")
    # one link, one direction, line rate; assumption: NVLink 5 is 50 GB/s a link [S9], 10 TB/s is far above it
    link_bandwidth_bytes_per_s: float = ranged(1e6, 1e13, "assumption: a link carries 1 MB/s to 10 TB/s")
    link_efficiency: float  # usable fraction of line rate after protocol overhead
    # assumption: a hop takes ~1 us (h200-8.yaml); 1 ns to 1 s leaves room without an endless simulation
    link_latency_s: float = ranged(1e-9, 1.0, "assumption: a link hop takes 1 ns to 1 s")
    peer_load_latency_s: float  # an SM's dependent load from a peer GPU's memory, round trip
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (self.peer_load_latency_s > 0 and math.isfinite(self.peer_load_latency_s)):
            raise FieldError("peer_load_latency_s", f"must be positive and finite, got {self.peer_load_latency_s}")
        if self.gpus < 2:
            raise FieldError("gpus", "a platform has at least 2 GPUs")
        if not 0 < self.link_efficiency <= 1:
            raise FieldError("link_efficiency", f"must be in (0, 1], got {self.link_efficiency}")
        if self.topology is Topology.FULL_MESH and self.links_per_gpu < self.gpus - 1:
            raise FieldError("links_per_gpu", "a full mesh needs a link to each of the other GPUs")
        if self.topology is Topology.DIRECT and self.gpus != 2:
            raise FieldError("gpus", "a direct topology joins exactly 2 GPUs")

    @property
    def gpu_link_bytes_per_s(self) -> float:
        """All of one GPU's links in one direction, usable rate."""
        return self.links_per_gpu * self.link_bandwidth_bytes_per_s * self.link_efficiency


def spec_names(kind: str) -> list[str]:
    """Names of the specs of a kind ('gpus' or 'platforms'): the folder is the registry."""
    return sorted(p.stem for p in (SPEC_DIR / kind).glob("*.yaml"))


def _resolve(kind: str, name_or_path: str | Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        return candidate
    path = SPEC_DIR / kind / f"{str(name_or_path).lower()}.yaml"
    if str(name_or_path).lower() not in spec_names(kind):
        valid = ", ".join(spec_names(kind))
        noun = "GPU" if kind == "gpus" else "platform"
        raise SpecError(str(name_or_path)[:80], "<name>", f"unknown {noun} (valid: {valid})")
    return path


@cache
def load_gpu(name_or_path: str | Path) -> GPU:
    """A GPU by name (`h200`) or from a YAML file path."""
    path = _resolve("gpus", name_or_path)
    return load_record(GPU, read_yaml(path), path)


@cache
def load_platform(name_or_path: str | Path) -> Platform:
    """A platform by name (`mi355x-8`) or from a YAML file path; its GPU, a name or a spec file, must exist."""
    path = _resolve("platforms", name_or_path)
    platform = load_record(Platform, read_yaml(path), path)
    gpu = Path(platform.gpu)
    if gpu.suffix in (".yaml", ".yml"):  # a GPU spec file, relative to the platform file's folder
        return dataclasses.replace(platform, gpu=str(gpu if gpu.is_absolute() else path.parent / gpu))
    if platform.gpu not in spec_names("gpus"):
        raise SpecError(path, "gpu", f"unknown GPU {platform.gpu!r} (valid: {', '.join(spec_names('gpus'))})")
    return platform
