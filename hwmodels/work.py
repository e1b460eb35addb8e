"""Work: the counted demand of a kernel (FLOP by datatype, HBM bytes, grid, per-workgroup resources)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from hwmodels.dtypes import Dtype
from hwmodels.program import Program


class Family(Enum):
    """Kernel families: a calibration holds one efficiency per family and datatype."""

    GEMM = "gemm"
    MOE_GEMM = "moe_gemm"
    ATTENTION_PREFILL = "attention_prefill"
    MLA_DECODE = "mla_decode"
    KDA_PREFILL = "kda_prefill"
    KDA_DECODE = "kda_decode"
    KDA_VERIFY = "kda_verify"
    NORM = "norm"
    ELEMENTWISE = "elementwise"
    COPY = "copy"
    CODEC = "codec"

    __hash__ = object.__hash__  # identity, as `Dtype`'s: members are singletons


@dataclass(frozen=True)
class Work:
    """What one kernel launch (or, summed, a sequence of launches) asks of the GPU; counts, never time.

    Sums add FLOP, bytes, workgroups and launches, and keep the largest per-workgroup resources; a sum
    is for counting, and is timed only when every part has the same family and shape of workgroup.
    """

    flop_by_dtype: Mapping[Dtype, float]
    read_bytes: float
    write_bytes: float
    workgroups: int
    threads_per_workgroup: int
    lds_bytes_per_workgroup: int = 0
    registers_per_thread: int = 0  # 0: unknown, the register file does not limit occupancy
    launches: int = 1
    family: Family | None = None
    # What the busiest workgroup executes, when not an even share (tile padding); None: flop / workgroups.
    flop_per_workgroup: float | None = None
    # An uneven grid dealt out longest first (a causal attention's query blocks): its heaviest workgroup's FLOP,
    # with `flop_per_workgroup` the mean; the busiest CU does the mean per round plus one heaviest's excess.
    flop_heaviest_workgroup: float | None = None
    # Workgroups that stream distinct data from HBM, and the bytes each streams. A GEMM's row blocks
    # share their weight tiles through L2, so its streams are its column blocks. None: every workgroup
    # streams an even share of the bytes.
    memory_workgroups: int | None = None
    bytes_per_workgroup: float | None = None
    # Warp instructions the busiest workgroup issues (per-thread instruction count x warps), counted from
    # the compiled kernel; None: not counted, so instruction issue does not bound the launch.
    warp_instructions_per_workgroup: float | None = None
    # What one workgroup executes (its loop, loads and dependent chains) for the cycle-level model; None: a
    # workgroup that streams its share of the bytes (hwmodels.cycle_time). A sum of launches has none.
    program: Program | None = None
    # Launched eagerly through Triton's Python launcher (its host cost, `GPU.launch_eager_triton_s`), not a library's
    triton_launch: bool = False
    # CUTLASS's grouped GEMM as PyTorch runs it (`torch._grouped_mm`): a persistent kernel whose set-up before its
    # first tile and completion run in series with its tiles (`Calibration.library_grouped_setup_s`)
    grouped_library: bool = False
    # empty groups after the last that holds rows, which each of its CTAs walks after its last tile
    # (`Calibration.library_grouped_scan_s` each)
    grouped_tail_groups: int = 0
    # Programs launched beyond `workgroups` that exit at their first instruction (a grid sized for the worst case:
    # vLLM's fused-MoE kernel launches row tiles for the worst padding of any routing); the dispatcher hands each
    # to a CU after the real ones (`GPU.workgroup_dispatch_s` a program a CU)
    exiting_workgroups: int = 0
    # (HBM bytes, L2 read bytes) of the launch's phases, in the order its workgroups run: the workgroups of a phase
    # run together, so a phase takes the longer of its HBM bytes at HBM's rate and its reads at L2's, and a phase
    # that reads one tile many times from L2 leaves HBM idle meanwhile (a fused MoE's experts, each its row tiles
    # over one weight, in the sorted order of its rows). Empty: one phase, its HBM bytes the bound.
    l2_phases: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.flop_by_dtype, MappingProxyType):
            object.__setattr__(self, "flop_by_dtype", MappingProxyType(dict(self.flop_by_dtype)))
        for dtype, flop in self.flop_by_dtype.items():
            if flop < 0:
                raise ValueError(f"negative FLOP count for {dtype.value}: {flop}")
        for name in ("read_bytes", "write_bytes", "workgroups", "lds_bytes_per_workgroup",
                     "registers_per_thread", "launches", "exiting_workgroups"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        for name in ("flop_per_workgroup", "flop_heaviest_workgroup", "bytes_per_workgroup", "memory_workgroups",
                     "warp_instructions_per_workgroup"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        if any(hbm < 0 or l2 < 0 for hbm, l2 in self.l2_phases):
            raise ValueError(f"l2_phases must not hold negative bytes, got {self.l2_phases!r}")
        if self.threads_per_workgroup <= 0:
            raise ValueError(f"threads_per_workgroup must be positive, got {self.threads_per_workgroup}")

    def value_key(self) -> tuple:
        """Every field as one hashable value, the FLOP mapping as its (dtype, FLOP) pairs in order: launches with equal
        keys are timed alike (bit for bit), so a memo of launch times may be keyed by it. The kernels that describe
        a launch differ more often than the launches do (a split-KV merge is the same for every history length)."""
        fields = self.__dict__
        return (tuple(self.flop_by_dtype.items()), *[fields[name] for name in _KEYED_FIELDS])

    @classmethod
    def nothing(cls, family: Family | None = None) -> Work:
        """The identity of `+`: no launches, no work (start value for `sum`)."""
        return cls({}, 0.0, 0.0, workgroups=0, threads_per_workgroup=1, launches=0, family=family)

    @property
    def flop(self) -> float:
        """All FLOP, whatever the datatype."""
        return sum(self.flop_by_dtype.values())

    @property
    def bytes(self) -> float:
        """HBM bytes read plus written."""
        return self.read_bytes + self.write_bytes

    @property
    def workgroup_flop(self) -> float:
        """FLOP of the busiest workgroup."""
        if self.flop_per_workgroup is not None:
            return self.flop_per_workgroup
        return self.flop / self.workgroups if self.workgroups else 0.0

    def phased_memory_s(self, hbm_bytes_per_s: float, l2_bytes_per_s: float) -> float:
        """Seconds the launch's phases take (`l2_phases`), each the longer of its HBM bytes at `hbm_bytes_per_s`
        and its L2 reads at `l2_bytes_per_s`; 0 for a launch of one phase."""
        return sum(max(hbm / hbm_bytes_per_s, l2 / l2_bytes_per_s) for hbm, l2 in self.l2_phases)

    @property
    def streams(self) -> int:
        """Workgroups that stream distinct data from HBM."""
        return self.memory_workgroups if self.memory_workgroups is not None else self.workgroups

    @property
    def workgroup_bytes(self) -> float:
        """HBM bytes the busiest stream moves."""
        if self.bytes_per_workgroup is not None:
            return self.bytes_per_workgroup
        return self.bytes / self.streams if self.streams else 0.0

    def __add__(self, other: Work) -> Work:
        if not isinstance(other, Work):
            return NotImplemented
        flop = dict(self.flop_by_dtype)
        for dtype, value in other.flop_by_dtype.items():
            flop[dtype] = flop.get(dtype, 0.0) + value
        return Work(
            flop_by_dtype=flop,
            read_bytes=self.read_bytes + other.read_bytes,
            write_bytes=self.write_bytes + other.write_bytes,
            workgroups=self.workgroups + other.workgroups,
            threads_per_workgroup=max(self.threads_per_workgroup, other.threads_per_workgroup),
            lds_bytes_per_workgroup=max(self.lds_bytes_per_workgroup, other.lds_bytes_per_workgroup),
            registers_per_thread=max(self.registers_per_thread, other.registers_per_thread),
            launches=self.launches + other.launches,
            family=_sum_family(self, other),
        )


def _sum_family(a: Work, b: Work) -> Family | None:
    """The family of a sum: shared if both agree; an empty Work takes the other's family."""
    if a.launches == 0:
        return b.family if a.family in (None, b.family) else None
    if b.launches == 0:
        return a.family if b.family in (None, a.family) else None
    return a.family if a.family == b.family else None


_KEYED_FIELDS = tuple(name for name in Work.__dataclass_fields__ if name != "flop_by_dtype")
