"""Hardware constants of the cycle-level cost model, derived from the probe microbenchmarks' CSVs.

The probes (`python -m companion.bench probes`, one NVIDIA H200) write one CSV each; this module
reads them (no torch, no triton) and derives one number per constant, with a note of the CSV and rows that
set it. A constant whose probe is missing, or that a probe cannot give, is None, and its note says why.

    from validation.probes import probe_constants, summary
    c = probe_constants()                  # validation/data/h200/probe_*.csv
    c.dram_latency_s, c.sources["dram_latency_s"]

What each constant is, and its rows:

- `dram_latency_s`, `l2_latency_s`: one dependent load (pointer chase, one warp, 128 B stride, L1 bypassed):
  the largest footprint (beyond L2 and its TLB reach: HBM), and the median of the 4–16 MiB footprints (L2).
- `loaded_latency_s`, `cu_bandwidth_bytes_per_s`, `mlp_smoothness`: fit of the streaming-read rows,
  bandwidth per SM against bytes in flight per SM, bw(x) = (x / L) / (1 + (x / (L · cap))^n)^(1/n):
  Little's law below the knee (latency L under load), a per-SM cap above it, n the knee's sharpness.
- `hbm_read_bandwidth_bytes_per_s`: the highest read bandwidth of the rows that use every SM.
- `l2_bandwidth_bytes_per_s`, `l2_reuse_footprint_bytes`: repeated reads of a footprint by every SM: the
  median of the footprints up to 16 MiB, and the footprint where bandwidth has fallen halfway to the
  HBM plateau (median of the footprints from 128 MiB), interpolated in log footprint.
- `launch_graph_node_s`, `workgroup_dispatch_s`: an empty kernel of 1 to 256 workgroups per SM, per node of a
  100-node CUDA graph: the least-squares line of its time against workgroups per SM, whose intercept is the
  node's own cost and whose slope the dispatcher's per workgroup.
- `kernel_floor_s`: per node of a 100-node CUDA graph, a kernel of one dependent load from HBM and one store.
- `launch_eager_s`, `launch_eager_triton_s` (`probe_host.csv`): the host's cost per eager launch, back to back, of
  a PyTorch op (`torch.add` of 256 fp32) and of an empty kernel through Triton's launcher, the samples taken in
  rounds spread over minutes (the cloud VMs' host is 1.45 times slower in spells of tens of seconds).
- `launch_eager_gpu_s`: one eager launch of the empty kernel between two events, a sleep ahead hiding the host.
- `system_release_s`, `system_release_next_s`: a 4 KiB copy per SM ending with one, then two, flag writes with
  release semantics at system scope (MEMBAR.ALL.SYS and a system-scope exchange each), less the copy alone.
- `dram_load_granule_bytes`, `partial_sector_store_factor`: the first 4 to 128 bytes of every 512-byte row of
  1 GiB, loaded or stored: the largest row whose load costs what the shortest's does, and what a store of part
  of a 32-byte sector costs over a whole sector's.
- `grid_stride_efficiency`: the grid probe's copies (no arithmetic): the median, over its persistent grids, of the
  time of one workgroup per tile over that grid's time.
- `xu_issue_cycles`: the scheduler cycles one conversion (FRND) holds, from a step of one FRND and 16 FFMAs whose
  issue binds at 8 warps a scheduler; `shfl_issue_cycles` the same for a shuffle (SHFL.BFLY), from a step of a
  warp-wide maximum among FFMAs, and `imad_issue_cycles` for an int32 multiply-add (IMAD) among FFMAs.
- `*_lanes_per_cu`: lane-operations per clock per SM (one SASS instruction on 32 lanes counts 32) of
  FFMA, IMAD, shift/LOP3 and MUFU.EX2 with 8 independent chains per thread and every SM full.
- `alu_latency_cycles`, `int_latency_cycles`, `sfu_latency_cycles`: one thread's dependent chain of FFMA,
  IMAD, MUFU.EX2 (cycles per instruction on the chain).
- `mma_latency_cycles`: cycles per dependent `tl.dot` of 16x16x16 bf16 with one warp (mma.sync m16n8k16).
- `reduction_latency_cycles`: one round of a dependent cross-warp sum with 4 warps (shuffles, a shared store,
  a barrier, a shared load; Triton emits a second barrier ahead of the next round's store).
- `lds_bytes_per_clock_per_cu`: bytes stored plus loaded through shared memory per clock per SM by a
  [128, 128] fp32 layout conversion (scalar 4 B accesses, as Triton emits them; below the hardware peak).
- `shared_queue_stores`, `shared_store_cycles_per_wavefront` (`probe_queue.csv`): how many 32-wavefront shared
  stores one warp issues before the SM's shared pipe holds it back (the MIO queue), and the pipe's cycles a
  wavefront for them. Recorded; the SM simulation's queue depth (`compiled.sass_timing.SHARED_QUEUE_CYCLES`) is
  still its assumption: NOTES.md says what the probe shows of it.
- `lds_latency_cycles`, `ldsm_latency_cycles`, `lds_128_latency_cycles` (`probe_lds.csv`): one warp's dependent
  chain of shared loads, each taking its address from the one before: cycles a load of a 32-bit load (LDS),
  ldmatrix of four 8x8 matrices (LDSM.16.M88.4) and a 128-bit load (LDS.128); four warps are recorded beside.
- `matrix_clock_ratio` (`probe_smclock.csv`): the SM clock, read inside the kernel (cycles over the GPU's
  nanosecond timer), of loops that issue matrix instructions (mma.sync or wgmma, with 0-64 FFMAs a dot, on 1-132
  programs) over that of loops of FFMAs alone (the boost clock): the medians of the two sets of rows. A spec's
  `matrix_boost_clock_mhz` is its boost clock times this ratio.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType

import numpy as np

DEFAULT_DIRECTORY = Path(__file__).resolve().parent / "data" / "h200"

TIMING_COLUMNS = ("time_s_median", "time_s_p10", "time_s_p90", "repeats")
PROVENANCE_COLUMNS = ("gpu_name", "sm_count", "driver", "torch", "triton", "cuda", "date", "sm_clock_mhz_before",
                      "sm_clock_mhz_after")
# probe -> (its own columns, before the timing columns; the derived per-row columns, after them)
_OWN_COLUMNS = {
    "latency": (("footprint_bytes", "steps"), ("ns_per_load", "cycles_per_load", "cycles_from")),
    "mlp": (("grid", "block_elems", "num_warps", "active_sms", "bytes_per_sample", "bytes_in_flight_per_sm"),
            ("bytes_per_s", "bytes_per_s_per_sm")),
    "l2": (("footprint_bytes", "grid", "block_elems", "num_warps", "bytes_per_sample"), ("bytes_per_s",)),
    "floor": (("variant", "launch_mode", "nodes", "programs", "bytes_moved", "l2_flushed"), ()),
    "issue": (("op", "mode", "chains", "iterations", "warps", "programs", "instructions_per_step", "probed_per_step"),
              ("cycles_per_step", "ops_per_clock_per_sm", "cycles_per_op")),
    "mma": (("m", "n", "k", "num_warps", "dots"), ("cycles_per_dot",)),
    "smem": (("what", "num_warps", "programs", "rounds", "bytes_per_round"),
             ("cycles_per_round", "bytes_per_clock_per_sm", "bytes_per_s_per_sm")),
    "clock": (("load", "seconds", "samples", "work_per_op"),
              ("sm_clock_mhz_median", "sm_clock_mhz_min", "power_w_median", "work_per_s")),
    "peer": (("what", "location", "grid", "block_elems", "num_warps", "footprint_bytes", "steps", "bytes_in_flight"),
             ("ns_per_load", "bytes_per_s")),
    "grid": (("tiles", "block_elems", "num_warps", "rounds", "programs", "bytes_per_sample"), ("bytes_per_s",)),
    "rows": (("mode", "row_bytes", "pitch_bytes", "rows", "num_warps", "bytes_per_sample"), ("bytes_per_s",)),
    "host": (("variant", "launch_mode", "nodes", "rounds", "gap_s"), ()),
    "queue": (("num_warps", "stride_words", "wavefronts_per_store", "stores", "launches"),
              ("issue_cycles", "drain_cycles")),
    "tiles": (("tile_bytes", "pitch_bytes", "rows_per_block", "footprint_bytes", "rotation_bytes", "num_warps",
               "bytes_per_sample"), ("bytes_per_s",)),
    "async": (("grid", "rows", "cols", "num_stages", "num_warps", "active_sms", "tile_bytes", "bytes_per_sample",
               "bytes_in_flight_per_sm"), ("bytes_per_s", "bytes_per_s_per_sm")),
    "loaded": (("mode", "programs", "block_elems", "num_warps", "footprint_bytes", "steps", "bytes_per_sample"),
               ("background_bytes_per_s", "cycles_per_load", "ns_per_load", "overlapped")),
    "grouped": (("layout", "groups", "active_groups", "rows_per_group", "n", "k", "weights", "launch_mode",
                 "cta_tiles"),
                ("s_per_tile_per_sm",)),
    "moetail": (("experts", "tokens", "top_k", "n", "k", "block_m", "block_n", "block_k", "num_warps", "num_stages",
                 "grid", "programs", "real_programs", "launch_mode"),
                ("s_per_empty_program_per_sm",)),
    "scatter": (("mode", "order", "run_bytes", "pitch_bytes", "rows", "rows_per_program", "group_m", "num_warps",
                 "programs", "bytes_per_sample"), ("bytes_per_s",)),
    "drift": (("mode", "tiles", "block_elems", "num_warps", "rounds", "programs", "bytes_per_sample"),
              ("bytes_per_s",)),
    "lds": (("form", "num_warps", "steps", "launches"), ("cycles_per_load",)),
    "mlatrip": (("mode", "splits", "context", "heads", "trips_per_workgroup", "calls", "input_sets"), ()),
    "burst": (("mode", "bytes", "num_warps", "launches"), ("cycles",)),
    "smclock": (("kind", "m", "fmas_per_step", "programs", "num_warps", "steps", "launches"),
                ("sm_clock_mhz_median", "sm_clock_mhz_min")),
}
MULTI_GPU_PROBES = ("peer",)  # recorded on two GPUs of one host (data/<gpu>x2/), skipped on one
# written and runnable, not yet recorded on the H200: no CSV of it is committed there, and an H200 constant they
# would set stays None (the spec's assumption stands, data/h100/ may hold the probe's rows) until one is
PENDING_PROBES: tuple[str, ...] = ("scatter", "drift", "burst", "smclock")
# probes whose rows are cycle counts read inside the kernel (`%clock64`), with no event times: their cycle columns
CLOCK_PROBES = {"queue": ("issue_cycles", "drain_cycles"), "lds": ("cycles_per_load",), "burst": ("cycles",),
                "smclock": ("sm_clock_mhz_median", "sm_clock_mhz_min")}
# rows with no event-timed kernel beside what they measure, by (column, value), and the column that holds their
# measurement instead: the loaded-latency probe's chase alone has no background to time
UNTIMED_ROWS = {"loaded": (("mode", "alone"), "ns_per_load")}
PROBES = tuple(_OWN_COLUMNS)
COLUMNS = {name: (*own, *TIMING_COLUMNS, *derived, *PROVENANCE_COLUMNS)
           for name, (own, derived) in _OWN_COLUMNS.items()}


def csv_name(probe: str) -> str:
    """File name of a probe's CSV."""
    return f"probe_{probe}.csv"


# Rows that set the constants.
L2_LATENCY_FOOTPRINTS = (4 << 20, 16 << 20)  # bytes, inclusive: in L2 on one H200 (60 MiB), past L1 and its TLB
L2_PLATEAU_MAX_FOOTPRINT = 16 << 20
HBM_PLATEAU_MIN_FOOTPRINT = 128 << 20
MLP_MIN_ROWS = 4
SMOOTHNESS_BOUNDS = (0.3, 64.0)
ISSUE_LANES = {"fp32_lanes_per_cu": "fp32_fma", "int32_lanes_per_cu": "int32_mad", "bit_lanes_per_cu": "bit",
               "sfu_lanes_per_cu": "exp2"}
ISSUE_LATENCY = {"alu_latency_cycles": "fp32_fma", "int_latency_cycles": "int32_mad",
                 "sfu_latency_cycles": "exp2"}
MLP_FIT_VALUES_PER_THREAD = 8  # rows whose threads hold more issue their loads one after another: not fitted
MMA_DEEP_K = (512, 64)  # one dot this deep, less one this deep: the k loop's step
MMA_LATENCY_SHAPE = (16, 16, 16, 1)  # m, n, k, num_warps
BARRIER_WARPS = 4
# The grid probe's tile work, which the SASS table compiles too (`companion.bench.sass`)
GRID_BLOCK = 1024  # fp32 values per tile: 4 KiB in, 4 KiB out
GRID_ROUNDS = (0, 32, 128)  # multiply-adds per value: a copy, then compute about equal to and above its memory
GRID_WARPS = 4
NVIDIA_SCHEDULERS_PER_SM = 4  # warp schedulers (SM sub-partitions) of every NVIDIA SM since Volta


@dataclass(frozen=True)
class ProbeConstants:
    """One value per hardware constant (None where no probe row gives it), and `sources[name]`: where from."""

    dram_latency_s: float | None = None
    l2_latency_s: float | None = None
    l2_bandwidth_bytes_per_s: float | None = None
    l2_reuse_footprint_bytes: float | None = None
    cu_bandwidth_bytes_per_s: float | None = None
    loaded_latency_s: float | None = None
    mlp_smoothness: float | None = None
    hbm_read_bandwidth_bytes_per_s: float | None = None
    launch_graph_node_s: float | None = None
    launch_eager_gpu_s: float | None = None
    launch_eager_triton_s: float | None = None
    system_release_s: float | None = None
    system_release_next_s: float | None = None
    grid_stride_efficiency: float | None = None
    kernel_floor_s: float | None = None
    shuffle_latency_cycles: float | None = None
    launch_eager_s: float | None = None
    workgroup_dispatch_s: float | None = None
    hbm_burst_latency_s: float | None = None
    matmul_clock_hz: float | None = None
    copy_clock_hz: float | None = None
    mlp_deep_thread_share: float | None = None
    peer_load_latency_s: float | None = None
    peer_read_bandwidth_bytes_per_s: float | None = None
    peer_loaded_latency_s: float | None = None
    fp32_lanes_per_cu: float | None = None
    int32_lanes_per_cu: float | None = None
    bit_lanes_per_cu: float | None = None
    sfu_lanes_per_cu: float | None = None
    alu_latency_cycles: float | None = None
    sfu_latency_cycles: float | None = None
    int_latency_cycles: float | None = None
    mma_latency_cycles: float | None = None
    reduction_latency_cycles: float | None = None
    lds_bytes_per_clock_per_cu: float | None = None
    xu_issue_cycles: float | None = None
    shfl_issue_cycles: float | None = None
    imad_issue_cycles: float | None = None
    dram_load_granule_bytes: float | None = None
    partial_sector_store_factor: float | None = None
    shared_queue_stores: float | None = None
    shared_store_cycles_per_wavefront: float | None = None
    lds_latency_cycles: float | None = None
    ldsm_latency_cycles: float | None = None
    lds_128_latency_cycles: float | None = None
    matrix_clock_ratio: float | None = None
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The constants' field names, in order (not `sources`)."""
        return tuple(f.name for f in fields(cls) if f.name != "sources")


@dataclass(frozen=True)
class _Table:
    """A probe CSV's rows, with numeric access that names the file, row and column of a bad cell."""

    path: Path
    rows: tuple[dict[str, str], ...]

    def num(self, row: dict[str, str], column: str) -> float:
        text = row.get(column, "")
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            line = self.rows.index(row) + 2  # 1-based, after the header
            raise ValueError(f"{self.path.name} line {line}: column {column!r} is not a finite number: {text!r}")
        return value

    def select(self, **match: object) -> list[dict[str, str]]:
        return [r for r in self.rows if all(r.get(k) == str(v) for k, v in match.items())]


def _read(directory: Path, probe: str, required: Sequence[str]) -> _Table | None:
    """The probe's CSV, or None if the file is absent; ValueError naming the file if a column is missing."""
    path = Path(directory) / csv_name(probe)
    if not path.is_file():
        return None
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise ValueError(f"{path.name}: column {missing[0]!r} missing (header: {', '.join(header) or 'none'})")
        return _Table(path, tuple(reader))


def _median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


LOADED_KINDS = {"reads": "load", "copies": "copy", "writes": "store"}  # spec curve -> the probe's background mode


def loaded_latency_pairs(directory: Path = DEFAULT_DIRECTORY) -> dict[str, tuple[float, ...]] | None:
    """The GPU spec's `dram_latency_under_<kind>` curves from the loaded-latency probe: per background kind, flat
    (TB/s, factor) pairs in order of its programs: the chase's median ns a load over the chase alone, at least 1
    (the rows below it, to -6 %, are the chase's spread from run to run). Left out: samples whose chase did not end
    inside the background (`overlapped` 0), and rows past the memory's saturation, where more programs move fewer
    bytes (the latency grows with the queue, not with the rate, so no rate names it). None without the CSV."""
    t = _read(directory, "loaded", ("mode", "programs", "background_bytes_per_s", "ns_per_load", "overlapped"))
    if t is None:
        return None
    alone = [t.num(r, "ns_per_load") for r in t.select(mode="alone")]
    if not alone:
        raise ValueError(f"{t.path.name}: no row of the chase alone")
    out = {}
    for kind, mode in LOADED_KINDS.items():
        rows = sorted((r for r in t.select(mode=mode) if t.num(r, "overlapped") == 1),
                      key=lambda r: t.num(r, "programs"))
        pairs: list[float] = []
        for r in rows:
            rate = t.num(r, "background_bytes_per_s") / 1e12
            if pairs and rate <= pairs[-2]:
                break
            pairs += [round(rate, 3), round(max(1.0, t.num(r, "ns_per_load") / _median(alone)), 3)]
        out[kind] = tuple(pairs)
    return out


# --- fits ----------------------------------------------------------------------------------------------


def mlp_curve(x: np.ndarray, latency_s: float, cap: float, n: float) -> np.ndarray:
    """Bandwidth at x bytes in flight: x / L below the knee, `cap` above it, a knee of sharpness n."""
    x = np.asarray(x, dtype=float)
    little = x / latency_s
    return little / (1.0 + (little / cap) ** n) ** (1.0 / n)


def fit_mlp(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """(loaded latency s, cap bytes/s, smoothness n) of `mlp_curve` by least squares on log bandwidth."""
    from scipy.optimize import least_squares

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size < MLP_MIN_ROWS or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError(f"need >= {MLP_MIN_ROWS} points with positive bytes in flight and bandwidth")
    cap0 = float(y.max())
    low = x <= np.quantile(x, 0.34)
    latency0 = float(np.median(x[low] / y[low]))
    lo_n, hi_n = SMOOTHNESS_BOUNDS

    def residual(p: np.ndarray) -> np.ndarray:
        return np.log(mlp_curve(x, math.exp(p[0]), math.exp(p[1]), math.exp(p[2]))) - np.log(y)

    best = None
    for n0 in (1.0, 4.0, 16.0):  # a few starts: the knee's sharpness is the poorly conditioned parameter
        res = least_squares(residual, [math.log(latency0), math.log(cap0), math.log(n0)],
                            bounds=([-np.inf, -np.inf, math.log(lo_n)], [np.inf, np.inf, math.log(hi_n)]))
        if best is None or res.cost < best.cost:
            best = res
    latency, cap, n = (math.exp(v) for v in best.x)
    return latency, cap, n


def halfway_footprint(footprints: Sequence[float], bandwidths: Sequence[float], high: float,
                      low: float) -> float | None:
    """First footprint where bandwidth falls below (high + low) / 2, interpolated in log footprint."""
    threshold = 0.5 * (high + low)
    pts = sorted(zip(footprints, bandwidths, strict=True))
    for (f1, b1), (f2, b2) in itertools.pairwise(pts):
        if b1 >= threshold > b2:
            frac = (b1 - threshold) / (b1 - b2)
            return math.exp(math.log(f1) + frac * (math.log(f2) - math.log(f1)))
    return None


# --- one derivation per probe: (values, sources) -------------------------------------------------------

Derived = tuple[dict[str, float | None], dict[str, str]]


def _latency(t: _Table) -> Derived:
    name = t.path.name
    rows = [(t.num(r, "footprint_bytes"), t.num(r, "ns_per_load"), r) for r in t.rows]
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    if rows:
        f, ns, _ = max(rows, key=lambda r: r[0])
        values["dram_latency_s"] = ns * 1e-9
        notes["dram_latency_s"] = f"{name}: ns_per_load of the largest footprint, footprint_bytes={f:.0f}"
    lo, hi = L2_LATENCY_FOOTPRINTS
    l2 = [ns for f, ns, _ in rows if lo <= f <= hi]
    if l2:
        values["l2_latency_s"] = _median(l2) * 1e-9
        notes["l2_latency_s"] = f"{name}: median ns_per_load of footprint_bytes in [{lo}, {hi}] ({len(l2)} rows)"
    else:
        notes["l2_latency_s"] = f"{name}: no row with footprint_bytes in [{lo}, {hi}]"
    return values, notes


def _mlp(t: _Table) -> Derived:
    """The curve is fitted on the rows whose bytes are all in flight at once: at most MLP_FIT_VALUES_PER_THREAD
    fp32 per thread (two 16-byte loads). A thread that holds more issues its loads one after another, and
    those rows fall below the curve of their nominal bytes in flight (at 16 KiB per SM: 15-17 GB/s with 32
    values per thread, 26-28 GB/s with 4-8)."""
    name = t.path.name
    rows = [r for r in t.rows if t.num(r, "block_elems") / (32 * t.num(r, "num_warps")) <= MLP_FIT_VALUES_PER_THREAD]
    x = [t.num(r, "bytes_in_flight_per_sm") for r in rows]
    y = [t.num(r, "bytes_per_s_per_sm") for r in rows]
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    keys = ("loaded_latency_s", "cu_bandwidth_bytes_per_s", "mlp_smoothness")
    if len(x) >= MLP_MIN_ROWS:
        latency, cap, n = fit_mlp(x, y)
        values.update(zip(keys, (latency, cap, n), strict=True))
        text = (f"{name}: fit of bytes_per_s_per_sm against bytes_in_flight_per_sm, the {len(x)} rows with at most "
                f"{MLP_FIT_VALUES_PER_THREAD} fp32 per thread, bw = (x/L) / (1 + (x/(L*cap))^n)^(1/n) in log space")
        notes.update(dict.fromkeys(keys, text))
    else:
        notes.update(dict.fromkeys(keys, f"{name}: {len(x)} rows, the fit needs >= {MLP_MIN_ROWS}"))
    plateau = max(t.num(r, "bytes_per_s_per_sm") for r in t.rows) if t.rows else 0.0
    if len(x) >= MLP_MIN_ROWS:
        deep = [r for r in t.rows if t.num(r, "block_elems") / (32 * t.num(r, "num_warps")) > MLP_FIT_VALUES_PER_THREAD
                and t.num(r, "bytes_per_s_per_sm") < 0.8 * plateau]
        shares = [_in_flight_for(t.num(r, "bytes_per_s_per_sm"), latency, cap, n) / t.num(r, "bytes_in_flight_per_sm")
                  for r in deep]
        values["mlp_deep_thread_share"] = _median(shares) if shares else None
        notes["mlp_deep_thread_share"] = (
            f"{name}: median, over the {len(shares)} rows whose threads hold more than {MLP_FIT_VALUES_PER_THREAD} "
            "fp32 and stay below 80 % of the plateau, of the bytes in flight the fitted curve needs for the "
            "measured rate, over the row's nominal bytes in flight")
    else:
        notes["mlp_deep_thread_share"] = f"{name}: needs the curve's fit"
    full = [r for r in t.rows if t.num(r, "active_sms") >= t.num(r, "sm_count")]
    if full:
        best = max(full, key=lambda r: t.num(r, "bytes_per_s"))
        values["hbm_read_bandwidth_bytes_per_s"] = t.num(best, "bytes_per_s")
        notes["hbm_read_bandwidth_bytes_per_s"] = (
            f"{name}: highest bytes_per_s of the rows on every SM (grid={best['grid']}, "
            f"block_elems={best['block_elems']}, num_warps={best['num_warps']})")
    else:
        notes["hbm_read_bandwidth_bytes_per_s"] = f"{name}: no row with active_sms = sm_count"
    return values, notes


def _in_flight_for(rate: float, latency: float, cap: float, n: float) -> float:
    """The bytes in flight at which `mlp_curve` gives `rate` (bisection in log space; rate below the cap)."""
    lo, hi = 1.0, 1e12
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if float(mlp_curve(np.array([mid]), latency, cap, n)[0]) < rate:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def _l2(t: _Table) -> Derived:
    name = t.path.name
    pts = [(t.num(r, "footprint_bytes"), t.num(r, "bytes_per_s")) for r in t.rows]
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    small = [b for f, b in pts if f <= L2_PLATEAU_MAX_FOOTPRINT]
    large = [b for f, b in pts if f >= HBM_PLATEAU_MIN_FOOTPRINT]
    if small:
        values["l2_bandwidth_bytes_per_s"] = _median(small)
        notes["l2_bandwidth_bytes_per_s"] = (f"{name}: median bytes_per_s of footprint_bytes <= "
                                             f"{L2_PLATEAU_MAX_FOOTPRINT} ({len(small)} rows)")
    else:
        notes["l2_bandwidth_bytes_per_s"] = f"{name}: no row with footprint_bytes <= {L2_PLATEAU_MAX_FOOTPRINT}"
    if small and large:
        f = halfway_footprint([p[0] for p in pts], [p[1] for p in pts], _median(small), _median(large))
        values["l2_reuse_footprint_bytes"] = f
        notes["l2_reuse_footprint_bytes"] = (
            f"{name}: footprint_bytes where bytes_per_s falls halfway from the L2 plateau to the median of "
            f"footprint_bytes >= {HBM_PLATEAU_MIN_FOOTPRINT} ({len(large)} rows), log interpolation"
            if f is not None else f"{name}: bytes_per_s never falls below halfway to the HBM plateau")
    else:
        notes["l2_reuse_footprint_bytes"] = f"{name}: needs rows on both plateaus"
    return values, notes


def _one(t: _Table, key: str, column: str, match: dict[str, object], what: str) -> Derived:
    rows = t.select(**match)
    where = ", ".join(f"{k}={v}" for k, v in match.items())
    if not rows:
        return {}, {key: f"{t.path.name}: no row with {where}"}
    value = _median([t.num(r, column) for r in rows])
    return {key: value}, {key: f"{t.path.name}: {column} of {where}{what}"}


def _merge(*parts: Derived) -> Derived:
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for v, n in parts:
        values.update(v)
        notes.update(n)
    return values, notes


def _floor(t: _Table) -> Derived:
    return _merge(
        _one(t, "kernel_floor_s", "time_s_median", {"variant": "load_store_1", "launch_mode": "graph"},
             " (per node)"),
        _one(t, "launch_eager_gpu_s", "time_s_median", {"variant": "empty", "launch_mode": "eager_hidden"},
             " (one launch between two events, the host hidden)"),
        _dispatch(t),
        _burst(t),
        _release(t),
    )


def _host(t: _Table) -> Derived:
    return _merge(
        _one(t, "launch_eager_s", "time_s_median", {"variant": "torch_add_256", "launch_mode": "eager"},
             " (per launch, host included, samples in rounds spread over minutes)"),
        _one(t, "launch_eager_triton_s", "time_s_median", {"variant": "empty", "launch_mode": "eager"},
             " (per launch through Triton's launcher, host included, samples in rounds spread over minutes)"),
    )


def _release(t: _Table) -> Derived:
    """A system-scope release after a tile's stores: the one-per-SM copy with one flag release less the copy alone,
    and each further release: two less one (graph nodes, L2 flushed)."""
    times = {}
    for variant in ("tile_4k_sm", "tile_4k_sm_release_sys_1", "tile_4k_sm_release_sys_2"):
        rows = t.select(variant=variant, launch_mode="graph")
        if not rows:
            return {}, dict.fromkeys(("system_release_s", "system_release_next_s"),
                                     f"{t.path.name}: no {variant} graph row")
        times[variant] = t.num(rows[0], "time_s_median")
    one, two = times["tile_4k_sm_release_sys_1"], times["tile_4k_sm_release_sys_2"]
    return ({"system_release_s": one - times["tile_4k_sm"], "system_release_next_s": two - one},
            {"system_release_s": f"{t.path.name}: tile_4k_sm_release_sys_1 less tile_4k_sm, per graph node",
             "system_release_next_s": f"{t.path.name}: tile_4k_sm_release_sys_2 less _1, per graph node"})


def _grid(t: _Table) -> Derived:
    """HBM efficiency of a grid-stride loop: the copy rows (rounds = 0) of persistent grids against the copy of
    one workgroup per tile, as time ratios (the same bytes); their median."""
    copies = [r for r in t.rows if t.num(r, "rounds") == 0]
    one_per_tile = [r for r in copies if t.num(r, "programs") >= t.num(r, "tiles")]
    persistent = [r for r in copies if t.num(r, "programs") < t.num(r, "tiles")]
    if not one_per_tile or not persistent:
        return {}, {"grid_stride_efficiency": f"{t.path.name}: needs rounds=0 rows of one workgroup per tile and of "
                                              "fewer programs than tiles"}
    base = t.num(one_per_tile[0], "time_s_median")
    ratios = [base / t.num(r, "time_s_median") for r in persistent]
    return {"grid_stride_efficiency": _median(ratios)}, {"grid_stride_efficiency": (
        f"{t.path.name}: median over the {len(ratios)} persistent rounds=0 rows of the one-workgroup-per-tile "
        "row's time_s_median over theirs")}


def _burst(t: _Table) -> Derived:
    """Seconds a launch whose every SM loads at once takes beyond one SM alone: one 4 KiB tile copy per SM less
    one copy alone (graph nodes, L2 flushed)."""
    every = t.select(variant="tile_4k_sm", launch_mode="graph")
    alone = t.select(variant="tile_4k_1prog", launch_mode="graph")
    if not every or not alone:
        return {}, {"hbm_burst_latency_s": f"{t.path.name}: no tile_4k_sm and tile_4k_1prog graph rows"}
    extra = t.num(every[0], "time_s_median") - t.num(alone[0], "time_s_median")
    return {"hbm_burst_latency_s": extra}, {"hbm_burst_latency_s": (
        f"{t.path.name}: tile_4k_sm less tile_4k_1prog, time_s_median per graph node")}


def _dispatch(t: _Table) -> Derived:
    """Seconds per workgroup per CU: the slope of an empty kernel's time against its workgroups per SM."""
    rows = [r for r in t.rows if str(r.get("variant", "")).startswith("empty_grid_")]
    if len(rows) < 2:
        return {}, dict.fromkeys(("workgroup_dispatch_s", "launch_graph_node_s"), f"{t.path.name}: no empty_grid rows")
    x = np.array([t.num(r, "programs") / t.num(r, "sm_count") for r in rows])
    y = np.array([t.num(r, "time_s_median") for r in rows])
    slope, intercept = (float(v) for v in np.polyfit(x, y, 1))
    fit = f"{t.path.name}: least-squares line of time_s_median against programs per SM, {len(rows)} empty_grid rows"
    return ({"workgroup_dispatch_s": slope, "launch_graph_node_s": intercept},
            {"workgroup_dispatch_s": f"{fit}: its slope", "launch_graph_node_s": f"{fit}: its intercept (per node)"})


def _peer(t: _Table) -> Derived:
    """Peer loads: the dependent round trip, the best read rate, and the latency a small grid's loads see
    (bytes in flight over the rate, the median of the peer read rows below half the best rate)."""
    values, notes = _one(t, "peer_load_latency_s", "ns_per_load", {"what": "chase", "location": "peer"},
                         " (ns)")
    if values.get("peer_load_latency_s") is not None:
        values["peer_load_latency_s"] *= 1e-9
    reads = [r for r in t.select(what="read", location="peer")]
    if not reads:
        values.update(peer_read_bandwidth_bytes_per_s=None, peer_loaded_latency_s=None)
        notes.update(dict.fromkeys(("peer_read_bandwidth_bytes_per_s", "peer_loaded_latency_s"),
                                   f"{t.path.name}: no peer read rows"))
        return values, notes
    best = max(t.num(r, "bytes_per_s") for r in reads)
    small = [t.num(r, "bytes_in_flight") / t.num(r, "bytes_per_s") for r in reads if t.num(r, "bytes_per_s") < best / 2]
    values["peer_read_bandwidth_bytes_per_s"] = best
    notes["peer_read_bandwidth_bytes_per_s"] = f"{t.path.name}: highest bytes_per_s of what=read, location=peer"
    values["peer_loaded_latency_s"] = _median(small) if small else None
    notes["peer_loaded_latency_s"] = (f"{t.path.name}: median bytes_in_flight / bytes_per_s of the {len(small)} peer "
                                      "read rows below half the best rate (Little's law)")
    return values, notes


def _clock(t: _Table) -> Derived:
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for key, load in (("matmul_clock_hz", "matmul_bf16_8192"), ("copy_clock_hz", "copy_1gib")):
        v, n = _one(t, key, "sm_clock_mhz_median", {"load": load}, " (MHz)")
        values[key] = None if v.get(key) is None else v[key] * 1e6
        notes.update(n)
    return values, notes


def _issue(t: _Table) -> Derived:
    parts = [_one(t, key, "ops_per_clock_per_sm", {"op": op, "mode": "throughput"}, "")
             for key, op in ISSUE_LANES.items()]
    parts += [_one(t, key, "cycles_per_op", {"op": op, "mode": "dependent"}, "")
              for key, op in ISSUE_LATENCY.items()]
    return _merge(*parts, _held_issue(t, "frnd_mix", "xu_issue_cycles"),
                  _held_issue(t, "shfl_mix", "shfl_issue_cycles"), _held_issue(t, "imad_mix", "imad_issue_cycles"))


def _held_issue(t: _Table, op: str, key: str) -> Derived:
    """Scheduler cycles one probed instruction holds: the `op` step (issue-bound at 8 warps a scheduler) in cycles
    of one scheduler per warp (32 lanes a warp instruction, NVIDIA_SCHEDULERS_PER_SM schedulers an SM), less one
    cycle for each of its other instructions, over its probed ones (`probed_per_step`; blank: one, as `frnd_mix`
    has one FRND a step)."""
    rows = t.select(op=op, mode="throughput")
    if not rows:
        return {}, {key: f"{t.path.name}: no {op} throughput row"}
    row = rows[0]
    instructions = t.num(row, "instructions_per_step")
    probed = t.num(row, "probed_per_step") if row.get("probed_per_step") else 1.0
    per_step = 32 * NVIDIA_SCHEDULERS_PER_SM * instructions / t.num(row, "ops_per_clock_per_sm")
    return {key: (per_step - (instructions - probed)) / probed}, {key: (
        f"{t.path.name}: op={op}, mode=throughput: the scheduler's cycles a step (32 x {NVIDIA_SCHEDULERS_PER_SM}"
        " x instructions_per_step / ops_per_clock_per_sm) less one for each instruction but the probed ones, over "
        "probed_per_step")}


def _mma(t: _Table) -> Derived:
    """Cycles per k-step inside one deep dot (16x32 tile, 4 warps): the slope between a 512-deep and a 64-deep
    dot. Without those rows, the dependent 16x32x16 dot of 4 warps (staging included)."""
    deep, shallow = (t.select(m=16, n=32, k=kk, num_warps=4) for kk in MMA_DEEP_K)
    if deep and shallow:
        slope = ((_median([t.num(r, "cycles_per_dot") for r in deep])
                  - _median([t.num(r, "cycles_per_dot") for r in shallow]))
                 / ((MMA_DEEP_K[0] - MMA_DEEP_K[1]) / 16))
        return {"mma_latency_cycles": slope}, {"mma_latency_cycles": (
            f"{t.path.name}: cycles_per_dot of m=16, n=32, k={MMA_DEEP_K[0]} less k={MMA_DEEP_K[1]}, 4 warps, "
            f"over the {(MMA_DEEP_K[0] - MMA_DEEP_K[1]) // 16} extra k-steps of 16")}
    m, n, k, w = MMA_LATENCY_SHAPE
    return _one(t, "mma_latency_cycles", "cycles_per_dot", {"m": m, "n": n, "k": k, "num_warps": w}, "")


def _smem(t: _Table) -> Derived:
    one_warp = t.select(what="reduce_round_trip", num_warps=1)
    shuffle: Derived = ({}, {"shuffle_latency_cycles": f"{t.path.name}: no one-warp reduce_round_trip row"})
    if one_warp:
        steps = 5  # log2(32): the shuffle tree of one warp's 32 lanes
        shuffle = ({"shuffle_latency_cycles": _median([t.num(r, "cycles_per_round") for r in one_warp]) / steps},
                   {"shuffle_latency_cycles": f"{t.path.name}: cycles_per_round of what=reduce_round_trip, "
                                              f"num_warps=1, over its {steps} shuffle steps"})
    return _merge(
        shuffle,
        _one(t, "reduction_latency_cycles", "cycles_per_round", {"what": "reduce_round_trip",
                                                               "num_warps": BARRIER_WARPS}, ""),
        _one(t, "lds_bytes_per_clock_per_cu", "bytes_per_clock_per_sm", {"what": "layout_conversion"}, ""),
    )


ROWS_FLAT = 1.10  # a row size whose load takes at most this many times the shortest's costs the same granule
STORE_SECTOR_BYTES = 32  # the memory sector (`GPU.memory_sector_bytes`) whose partial stores the rows probe prices


def _rows(t: _Table) -> Derived:
    """Short rows: the largest row size whose load time stays within ROWS_FLAT of the shortest row's (HBM moves at
    least that much for any load); and the median, over stores of less than a sector, of their time over a whole
    sector's store (the partial sector is read to be merged)."""
    name = t.path.name
    loads = sorted((t.num(r, "row_bytes"), t.num(r, "time_s_median")) for r in t.select(mode="load"))
    stores = {t.num(r, "row_bytes"): t.num(r, "time_s_median") for r in t.select(mode="store")}
    values: dict[str, float | None] = {}
    notes = {}
    if len(loads) >= 2:
        shortest = loads[0][1]
        values["dram_load_granule_bytes"] = max(b for b, s in loads if s <= ROWS_FLAT * shortest)
        notes["dram_load_granule_bytes"] = (f"{name}: the largest row_bytes of the mode=load rows whose time_s_median "
                                            f"is within {ROWS_FLAT:g} x the shortest row's")
    else:
        notes["dram_load_granule_bytes"] = f"{name}: needs two mode=load rows"
    whole = stores.get(STORE_SECTOR_BYTES)
    partial = [s / whole for b, s in stores.items() if b < STORE_SECTOR_BYTES] if whole else []
    if partial:
        values["partial_sector_store_factor"] = _median(partial)
        notes["partial_sector_store_factor"] = (f"{name}: median over the mode=store rows of fewer than "
                                                f"{STORE_SECTOR_BYTES} row_bytes of time_s_median over the "
                                                f"{STORE_SECTOR_BYTES}-byte row's")
    else:
        notes["partial_sector_store_factor"] = f"{name}: needs store rows below and at {STORE_SECTOR_BYTES} bytes"
    return values, notes


# The shared-load chains whose latency each shared class of the SASS timing takes (one warp alone)
LDS_LATENCY_FORMS = {"lds_latency_cycles": "lds32", "ldsm_latency_cycles": "ldsm_x4",
                     "lds_128_latency_cycles": "lds128"}


def _lds(t: _Table) -> Derived:
    return _merge(*(_one(t, key, "cycles_per_load", {"form": form, "num_warps": 1}, " (a dependent chain)")
                    for key, form in LDS_LATENCY_FORMS.items()))


def _smclock(t: _Table) -> Derived:
    """The SM clock of the loops that issue matrix instructions over that of the loops of FFMAs alone: the median
    over the matrix rows of each row's median program clock (any share of matrix work, any grid: the probe shows
    one clock for all of them), over the median of the FFMA rows. A ratio, so the timer's own rate cancels."""
    matrix = [t.num(r, "sm_clock_mhz_median") for r in t.rows if r["kind"] != "fma"]
    plain = [t.num(r, "sm_clock_mhz_median") for r in t.rows if r["kind"] == "fma"]
    if not matrix or not plain:
        return {}, {"matrix_clock_ratio": f"{t.path.name}: needs rows of the fma kind and of a matrix kind"}
    return ({"matrix_clock_ratio": _median(matrix) / _median(plain)},
            {"matrix_clock_ratio": f"{t.path.name}: median over the {len(matrix)} rows that issue matrix instructions "
                                   f"of the programs' median clock (clock64 over globaltimer), over the median of the "
                                   f"{len(plain)} rows of FFMAs alone"})


# probe -> (derivation, columns it reads, constants it sets)
QUEUE_WAVEFRONTS = 32  # the queue probe's rows that set its constants: every lane of a warp in one bank
QUEUE_ISSUE_CYCLES = 4  # a store that issues within this many cycles of the one before it went into the queue
QUEUE_DRAIN_FROM = 8  # stores: from here the drain time is the pipe's, a wavefront at a time


def _queue(t: _Table) -> Derived:
    """One warp storing 32-wavefront stores in a row: the most it issues before the pipe holds it back (the
    largest count whose issue time stays within QUEUE_ISSUE_CYCLES a store of one store's), and the pipe's
    cycles a wavefront (the least-squares slope of the drain time against the wavefronts, QUEUE_DRAIN_FROM stores
    and up)."""
    rows = sorted(t.select(num_warps=1, wavefronts_per_store=QUEUE_WAVEFRONTS), key=lambda r: t.num(r, "stores"))
    if len(rows) < 3:
        missing = f"{t.path.name}: fewer than 3 rows of num_warps=1, wavefronts_per_store={QUEUE_WAVEFRONTS}"
        return {}, dict.fromkeys(("shared_queue_stores", "shared_store_cycles_per_wavefront"), missing)
    stores = [t.num(r, "stores") for r in rows]
    issue = [t.num(r, "issue_cycles") for r in rows]
    queued = [n for n, c in zip(stores, issue, strict=True) if c <= issue[0] + QUEUE_ISSUE_CYCLES * (n - stores[0])]
    deep = [(n * QUEUE_WAVEFRONTS, t.num(r, "drain_cycles")) for n, r in zip(stores, rows, strict=True)
            if n >= QUEUE_DRAIN_FROM]
    values, notes = {"shared_queue_stores": max(queued)}, {
        "shared_queue_stores": f"{t.path.name}: the most {QUEUE_WAVEFRONTS}-wavefront stores one warp issued within "
                               f"{QUEUE_ISSUE_CYCLES} cycles a store"}
    if len(deep) >= 2:
        x, y = np.array([d[0] for d in deep]), np.array([d[1] for d in deep])
        values["shared_store_cycles_per_wavefront"] = float(np.polyfit(x, y, 1)[0])
        notes["shared_store_cycles_per_wavefront"] = (f"{t.path.name}: slope of drain_cycles against wavefronts, "
                                                      f"one warp, {QUEUE_DRAIN_FROM} stores and up")
    else:
        notes["shared_store_cycles_per_wavefront"] = f"{t.path.name}: fewer than 2 rows of {QUEUE_DRAIN_FROM} stores up"
    return values, notes


_DERIVATIONS: dict[str, tuple[Callable[[_Table], Derived], tuple[str, ...], tuple[str, ...]]] = {
    "latency": (_latency, ("footprint_bytes", "ns_per_load"), ("dram_latency_s", "l2_latency_s")),
    "mlp": (_mlp, ("bytes_in_flight_per_sm", "bytes_per_s_per_sm", "bytes_per_s", "active_sms", "sm_count", "grid",
                   "block_elems", "num_warps"),
            ("loaded_latency_s", "cu_bandwidth_bytes_per_s", "mlp_smoothness", "hbm_read_bandwidth_bytes_per_s",
             "mlp_deep_thread_share")),
    "l2": (_l2, ("footprint_bytes", "bytes_per_s"), ("l2_bandwidth_bytes_per_s", "l2_reuse_footprint_bytes")),
    "floor": (_floor, ("variant", "launch_mode", "time_s_median", "programs", "sm_count"),
              ("launch_graph_node_s", "kernel_floor_s", "launch_eager_gpu_s", "workgroup_dispatch_s",
               "hbm_burst_latency_s", "system_release_s", "system_release_next_s")),
    "grid": (_grid, ("tiles", "rounds", "programs", "time_s_median"), ("grid_stride_efficiency",)),
    "rows": (_rows, ("mode", "row_bytes", "time_s_median"), ("dram_load_granule_bytes", "partial_sector_store_factor")),
    "issue": (_issue, ("op", "mode", "ops_per_clock_per_sm", "cycles_per_op"),
              (*ISSUE_LANES, *ISSUE_LATENCY, "xu_issue_cycles", "shfl_issue_cycles", "imad_issue_cycles")),
    "mma": (_mma, ("m", "n", "k", "num_warps", "cycles_per_dot"), ("mma_latency_cycles",)),
    "smem": (_smem, ("what", "num_warps", "cycles_per_round", "bytes_per_clock_per_sm"),
             ("shuffle_latency_cycles", "reduction_latency_cycles", "lds_bytes_per_clock_per_cu")),
    "clock": (_clock, ("load", "sm_clock_mhz_median"), ("matmul_clock_hz", "copy_clock_hz")),
    "host": (_host, ("variant", "launch_mode", "time_s_median"), ("launch_eager_s", "launch_eager_triton_s")),
    "peer": (_peer, ("what", "location", "ns_per_load", "bytes_per_s", "bytes_in_flight"),
             ("peer_load_latency_s", "peer_read_bandwidth_bytes_per_s", "peer_loaded_latency_s")),
    "queue": (_queue, ("num_warps", "wavefronts_per_store", "stores", "issue_cycles", "drain_cycles"),
              ("shared_queue_stores", "shared_store_cycles_per_wavefront")),
    "lds": (_lds, ("form", "num_warps", "cycles_per_load"), tuple(LDS_LATENCY_FORMS)),
    "smclock": (_smclock, ("kind", "sm_clock_mhz_median"), ("matrix_clock_ratio",)),
}


def probe_constants(directory: Path | str = DEFAULT_DIRECTORY) -> ProbeConstants:
    """Every constant from the probe CSVs in `directory`; ValueError naming the file on a malformed CSV."""
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for probe, (derive, required, keys) in _DERIVATIONS.items():
        table = _read(Path(directory), probe, required)
        if table is None:
            notes.update(dict.fromkeys(keys, f"{csv_name(probe)} not found in {directory}"))
            continue
        v, n = derive(table)
        values.update(v)
        notes.update(n)
    return ProbeConstants(**values, sources=MappingProxyType(notes))


def summary(directory: Path | str = DEFAULT_DIRECTORY) -> list[tuple[str, float | None, str]]:
    """(constant, value, where it comes from) for every constant, in the dataclass's order."""
    c = probe_constants(directory)
    return [(name, getattr(c, name), c.sources.get(name, "")) for name in ProbeConstants.names()]


def format_summary(rows: Sequence[tuple[str, float | None, str]]) -> str:
    """The summary as an aligned text table."""
    lines = [f"{'constant':32} {'value':>12}  source"]
    for name, value, source in rows:
        text = "None" if value is None else f"{value:.4g}"
        lines.append(f"{name:32} {text:>12}  {source}")
    return "\n".join(lines)
