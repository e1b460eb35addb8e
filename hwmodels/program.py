"""Program: what one workgroup of a kernel executes, beside the counted `Work` of the whole launch.

A roofline sees a launch as FLOP and bytes. A real workgroup runs a loop, and each trip of the loop
waits on things a roofline cannot see: the HBM load it needs (unless it was issued trips ahead), a
chain of dependent instructions (a matrix-instruction accumulator chain, a cross-warp reduction, a
serial substitution), and the issue slots its warps share with other resident workgroups. A `Program`
states those per trip, and `hwmodels.cycle_time` turns them into seconds with the GPU's latencies.

`Chain` counts dependent steps of each kind that one warp waits on in sequence: the latency of each
kind is a GPU constant (`hwmodels/specs/gpus/*.yaml`, measured by the probes on the H200, taken from
sources elsewhere). Counts come from the algorithm and the kernel's code (how many k-steps feed one
accumulator, how many reduction levels a row max crosses), never from a measured time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from hwmodels.spec import GPU


def evolved(obj, **changes):
    """`dataclasses.replace` for the frozen, validated value classes that the cycle-level model derives on every
    launch it times (`Program`, `Chain`, `MemoryCurve`, and a `GPU` at a loaded DRAM latency): a copy of `obj` with
    `changes`, built without running `__init__` and `__post_init__` again. Only for changes that keep a valid object
    valid (a trip count set to 0, an L2 latency in place of a DRAM one, a longer DRAM latency);
    `dataclasses.replace` costs several times the arithmetic it serves there. The classes hold their fields in
    `__dict__` and cache nothing in it, so the copy is the replacement (a test holds the two equal)."""
    for name in changes:
        if name not in obj.__dataclass_fields__:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


@dataclass(frozen=True)
class Chain:
    """Dependent steps one warp waits on in sequence, by kind (counts; may be fractional averages).

    alu: dependent fp32 FMAs; int: dependent int32 multiply-adds; sfu: transcendental ops (exp2, rsqrt);
    mma: matrix instructions that feed one accumulator in turn; lds: shared-memory/LDS round trips
    (store, barrier, load: a layout change or a pipeline stage handed over); shuffle: cross-lane exchange
    steps inside one warp; reduction: sums or maxima across the warps of a workgroup (shuffle trees, an
    LDS exchange and a barrier, measured as one round trip); l2 and dram: memory round trips whose result
    the next step needs (an L2 hit, an HBM access).
    """

    alu: float = 0.0
    int: float = 0.0
    sfu: float = 0.0
    mma: float = 0.0
    lds: float = 0.0
    shuffle: float = 0.0
    reduction: float = 0.0
    l2: float = 0.0
    dram: float = 0.0
    # cycles already resolved for one GPU (a compiled kernel's stalls, read off its machine code)
    cycles: float = 0.0

    def __post_init__(self) -> None:
        for name in _CHAIN_STEPS:
            value = getattr(self, name)
            if not value >= 0:  # also rejects NaN
                raise ValueError(f"chain step count {name} must be a non-negative number, got {value!r}")

    def __add__(self, other: Chain) -> Chain:
        if not isinstance(other, Chain):
            return NotImplemented
        return Chain(**{name: getattr(self, name) + getattr(other, name) for name in _CHAIN_STEPS})

    def __mul__(self, times: float) -> Chain:
        return Chain(**{name: getattr(self, name) * times for name in _CHAIN_STEPS})

    __rmul__ = __mul__

    def seconds(self, gpu: GPU) -> float:
        """Time one warp spends waiting through the chain, at the GPU's boost clock."""
        cycles = (self.alu * gpu.alu_latency_cycles + self.int * gpu.int_latency_cycles
                  + self.sfu * gpu.sfu_latency_cycles + self.mma * gpu.mma_latency_cycles
                  + self.lds * gpu.lds_latency_cycles + self.shuffle * gpu.shuffle_latency_cycles
                  + self.reduction * gpu.reduction_latency_cycles + self.cycles)
        return cycles / gpu.boost_clock_hz + self.l2 * gpu.l2_latency_s + self.dram * gpu.dram_latency_s


_CHAIN_STEPS = tuple(f.name for f in fields(Chain))  # read once: the checks and arithmetic run per chain made
NO_CHAIN = Chain()


def reduction_chain(lanes: int, warps: int, wave_size: int) -> Chain:
    """A sum or max over `lanes` values spread over `warps` warps.

    Inside one warp: a shuffle tree of log2(min(lanes, wave size)) steps. Across warps: one cross-warp
    reduction round trip (each warp's tree, a store to LDS, a barrier, the load and the second level), as
    Triton's `tl.sum`/`tl.max`, CUB's BlockReduce and hipCUB do it; the GPU's `reduction_latency_cycles` is
    that round trip, measured whole.
    """
    if warps <= 1:
        return Chain(shuffle=max(0, (min(max(1, lanes), wave_size) - 1).bit_length()))
    return Chain(reduction=1)


@dataclass(frozen=True)
class Program:
    """One workgroup: a setup (prologue and epilogue together), then `trips` of a loop.

    Per trip: `trip_load_bytes` of HBM loads, `trip_instructions` warp instructions issued by each warp,
    and `trip_chain`, the dependent steps one warp waits on besides the load. `prefetch` is how many trips
    ahead the loads are issued (a software pipeline of prefetch + 1 stages; 0: each trip waits for its own
    load, then computes). Setup: `setup_chain` (its dependent steps, including any HBM round trip it waits
    on: a row kernel's one load, a recurrence's state), and `setup_instructions` per warp.
    """

    trips: float = 0.0
    trip_load_bytes: float = 0.0
    trip_store_bytes: float = 0.0  # HBM bytes one trip writes; they queue in the CU's memory path before later loads
    trip_instructions: float = 0.0
    trip_chain: Chain = NO_CHAIN
    prefetch: int = 0
    setup_chain: Chain = NO_CHAIN
    setup_instructions: float = 0.0
    # HBM bytes the setup loads before the first trip (a recurrence's state slice): through the CU's memory path
    # like a trip's load, one round trip included (so `setup_chain` does not count that one again)
    setup_load_bytes: float = 0.0
    # HBM bytes the workgroup stores once, after its last trip (its output tile: a split's partial sums): they leave
    # at the CU's share of bandwidth, as a trip's stores do, before the workgroup's slot is free
    setup_store_bytes: float = 0.0
    # Workgroups that load each tile of the trips (a GEMM's row blocks share a B tile, the query blocks and
    # heads of a GQA group their K and V tiles): the first touch comes from HBM, the rest hit L2, so a CU's
    # share of HBM bandwidth stretches `reuse` times, up to its share of L2. 1: every tile streams from HBM.
    reuse: float = 1.0
    # Irregular grids: the trips of each workgroup in dispatch order (split-KV over uneven histories, expert
    # tiles over uneven token counts); empty: every workgroup runs `trips`, the busiest's.
    trip_counts: tuple[int, ...] = ()
    # A trip's compute, in cycles, at some numbers of warps sharing a scheduler, as (warps, cycles) pairs in
    # increasing order (simulated on the compiled code's instruction stream); empty: the issue and latency
    # terms of `trip_instructions` and `trip_chain` instead.
    trip_cycles_by_warps: tuple[tuple[int, float], ...] = ()
    # The setup's compute the same way, (warps, cycles) pairs; empty: `setup_instructions` issued per warp and
    # `setup_chain` instead. Given, it replaces the issue term, and `setup_chain` keeps only its memory waits.
    setup_cycles_by_warps: tuple[tuple[int, float], ...] = ()
    # True: each trip loads into registers and reduces what it loaded (a sum, a maximum), the shape of the
    # memory-level-parallelism probe's rows: a thread holding more than 32 bytes of such loads keeps only
    # `mlp_deep_thread_share` of them in flight (measured). False: loads streamed to stores, or asynchronous
    # copies into LDS (cp.async, TMA), for which no such share was measured: all their bytes count.
    reduces_loads: bool = False
    # Contiguous bytes of each row its setup loads and trip stores touch, when short (a value tile of a row-major
    # recurrent state: tile columns x 4 bytes): memory moves whole sectors, so a row shorter than one costs a
    # sector (`sector_factor`). 0: rows long enough that the sectors' slack does not matter.
    row_run_bytes: float = 0.0
    # Bytes of the workgroups' input that the launch just before wrote for this one (split-KV partials for their
    # merge): when they fit in the GPU's L2 they are read from there, at L2's latency and bandwidth (`in_l2`).
    fresh_input_bytes: float = 0.0
    # Bytes the whole launch stores (0: not stated). A GPU with a memory-side last-level cache in front of HBM
    # (`GPU.llc_bytes`: MI300X/MI355X's Infinity Cache) merges the short rows of neighbouring workgroups there when
    # the launch's stores fit in it, and HBM later receives whole lines (`sector_factor`).
    store_footprint_bytes: float = 0.0
    # The setup's and a trip's chains when their loads hit L2 (`in_l2`), as the compiled code exposes them at L2's
    # latency; None: the DRAM chains' round trips are taken at L2's latency (`hwmodels.cycle_time.from_l2`)
    l2_setup_chain: Chain | None = None
    l2_trip_chain: Chain | None = None
    # True: a persistent loop whose trips walk the tensor with the grid's stride (program p takes tiles p, p + G,
    # ...). The resident workgroups' streams drift apart in DRAM instead of sweeping it as one front, and HBM
    # delivers `Calibration.grid_stride_efficiency` of what one workgroup per tile gets (measured by the grid probe).
    grid_stride: bool = False
    # True: the trips' loads are asynchronous copies into shared memory (cp.async, LDGSTS), whose loaded latency
    # falls as fewer SMs stream (`GPU.async_copy_latency_alone`); False: register loads (LDG), which the
    # memory-level-parallelism probe finds the same alone as with every SM streaming
    async_loads: bool = False
    # L2 round trips each trip's loads wait in series beyond their transfer: many CTAs read the same few lines of a
    # shared operand at once (a grouped GEMM's rows of A, read by every cluster that runs one of the group's column
    # tiles) and queue at the L2 slices that hold them; 0: no operand read by many at once
    trip_shared_l2: float = 0.0
    # Cycles from a trip's first and from its last global load (or asynchronous copy) to the first instruction that
    # waits for them, read off the compiled code: the loads fly that long under the trip's own work (a loop that
    # issues the next trip's copies before its end, then waits at the top of the next trip); (0, 0): issued at the
    # wait, as an analytic trip's load is taken
    trip_load_lead_cycles: tuple[float, float] = (0.0, 0.0)
    # True: the program issues matrix (tensor-core) instructions, which hold the SM at the GPU's matrix clock
    # (`GPU.matrix_boost_clock_hz`) instead of its boost clock
    matrix_units: bool = False

    @property
    def issues_matrix(self) -> bool:
        """Whether the workgroup issues matrix instructions: its compiled code says so (`matrix_units`), or its
        analytic trip or setup waits on a matrix chain."""
        return self.matrix_units or self.trip_chain.mma > 0 or self.setup_chain.mma > 0

    def sector_factor(self, gpu: GPU) -> float:
        """Bytes stored per useful byte of its short rows: whole sectors (`GPU.memory_sector_bytes`) for each, and a
        partly written sector costs `GPU.partial_sector_store_factor` times a whole one (it is read to merge); none of
        that where a memory-side cache holds all the launch stores (`store_footprint_bytes`): the rows of neighbouring
        workgroups are merged there into whole lines."""
        if self.row_run_bytes <= 0 or 0 < self.store_footprint_bytes <= gpu.llc_bytes:
            return 1.0
        if gpu.l2_short_row_s is not None and 0 < self.store_footprint_bytes <= gpu.l2_bytes:
            return 1.0  # merged in L2, whose rate of pieces bounds the launch instead (`short_rows_s`)
        sector = gpu.memory_sector_bytes
        whole = -(-self.row_run_bytes // sector) * sector / self.row_run_bytes
        partial = self.row_run_bytes % sector and gpu.partial_sector_store_factor is not None
        return whole * (gpu.partial_sector_store_factor if partial else 1.0)

    def short_rows_s(self, gpu: GPU, workgroups: int) -> float:
        """Seconds the GPU's L2 takes for the pieces of short rows (`row_run_bytes` under a sector) that
        `workgroups` of this program load in their setup and store in their trips, at its measured rate of pieces
        (`GPU.l2_short_row_s`); 0 where the rows are whole sectors or longer, or the rate is not measured."""
        if gpu.l2_short_row_s is None or not 0 < self.row_run_bytes < gpu.memory_sector_bytes:
            return 0.0
        pieces = workgroups * (self.setup_load_bytes + self.trips * self.trip_store_bytes) / self.row_run_bytes
        return pieces * gpu.l2_short_row_s

    def load_sector_factor(self, gpu: GPU) -> float:
        """Bytes HBM moves per useful byte of its short rows' loads: whole granules of `GPU.dram_load_granule_bytes`
        (the memory sector where not measured) for each."""
        if self.row_run_bytes <= 0:
            return 1.0
        granule = gpu.dram_load_granule_bytes or gpu.memory_sector_bytes
        return -(-self.row_run_bytes // granule) * granule / self.row_run_bytes

    def in_l2(self, gpu: GPU) -> bool:
        """Whether the trips' loads hit L2: all of them are what the launch before wrote, and that fits in L2
        (assumption: a write-back L2 keeps a launch's output for the next launch when nothing else evicts it)."""
        return 0 < self.fresh_input_bytes <= gpu.l2_bytes

    def __post_init__(self) -> None:
        if self.trip_counts and min(self.trip_counts) < 0:
            raise ValueError("trip_counts must not be negative")
        for name in ("trips", "trip_load_bytes", "trip_store_bytes", "trip_instructions", "setup_instructions",
                     "setup_load_bytes", "setup_store_bytes", "row_run_bytes", "fresh_input_bytes",
                     "store_footprint_bytes", "trip_shared_l2"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        if not self.reuse >= 1:
            raise ValueError(f"reuse must be at least 1, got {self.reuse!r}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must not be negative, got {self.prefetch}")


def streaming_program(load_bytes: float, bytes_per_trip: float, *, instructions_per_trip: float = 0.0,
                      trip_chain: Chain = NO_CHAIN, setup_chain: Chain = NO_CHAIN, prefetch: int = 0) -> Program:
    """A workgroup that streams `load_bytes` from HBM in trips of at most `bytes_per_trip` each."""
    trips = -(-load_bytes // bytes_per_trip) if bytes_per_trip > 0 and load_bytes > 0 else 0
    per_trip = load_bytes / trips if trips else 0.0
    return Program(trips=trips, trip_load_bytes=per_trip, trip_instructions=instructions_per_trip,
                   trip_chain=trip_chain, prefetch=prefetch, setup_chain=setup_chain)


# Depth of one matrix instruction in the reduction dimension: Hopper's mma.sync m16n8k16 (bf16/fp16) and
# m16n8k32 (fp8) (PTX ISA, warp-level matrix instructions), CDNA's v_mfma_f32_16x16x16 (bf16, CDNA3 ISA).
# Assumption for the fp8/fp4 formats of other GPUs: 32 values per step, as the fp8 mma.
MMA_DEPTH_BF16 = 16
MMA_DEPTH_NARROW = 32


def mma_steps(depth: int, narrow: bool = False) -> float:
    """Matrix instructions that feed one accumulator in turn over a reduction `depth` deep."""
    return -(-depth // (MMA_DEPTH_NARROW if narrow else MMA_DEPTH_BF16))
