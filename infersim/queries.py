"""The CLI's one-shot queries (hw, occupancy, kernel) as pure functions returning JSON-ready dicts."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from compiled.companion import compiled_code
from compiled.launch_time import timed_kernel
from hwmodels.calibration import load_calibration
from hwmodels.dtypes import Dtype
from hwmodels.occupancy import occupancy
from hwmodels.roofline import KernelTime, LaunchMode, at_matrix_clock, kernel_time
from hwmodels.spec import GPU, Platform, load_gpu, load_platform, spec_names
from infersim import flags
from workloads.kernels import KERNEL_KINDS
from workloads.tiles import with_tiles


def kernel_kinds() -> list[str]:
    return sorted(KERNEL_KINDS)


def hw_list() -> dict[str, Any]:
    """Every GPU and platform spec with its headline numbers."""
    gpus = []
    for name in spec_names("gpus"):
        gpu = load_gpu(name)
        gpus.append({
            "name": gpu.name,
            "description": gpu.description,
            "compute_units": gpu.compute_units,
            "hbm_capacity_bytes": gpu.hbm_capacity_bytes,
            "memory_total_bytes": gpu.memory_total_bytes,
            "hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s,
            "bf16_flop_per_s": gpu.peak_dense_flop_per_s[Dtype.BF16],
            "tco_usd_per_gpu_hour": gpu.tco_usd_per_gpu_hour,
        })
    platforms = []
    for name in spec_names("platforms"):
        platform = load_platform(name)
        platforms.append({
            "name": platform.name,
            "description": platform.description,
            "gpu": platform.gpu,
            "gpus": platform.gpus,
            "topology": platform.topology.value,
            "gpu_link_bytes_per_s": platform.gpu_link_bytes_per_s,
        })
    return {"gpus": gpus, "platforms": platforms}


def hw_show(name: str) -> dict[str, Any]:
    """One spec, every value in SI units beside its source."""
    spec: GPU | Platform
    if name.lower() in spec_names("platforms"):
        spec = load_platform(name)
    elif name.lower() in spec_names("gpus") or name.endswith((".yaml", ".yml")):
        spec = load_gpu(name)
    else:
        valid = ", ".join(spec_names("gpus") + spec_names("platforms"))
        raise ValueError(f"unknown hardware {name!r} (valid: {valid})")
    out: dict[str, Any] = {"kind": "gpu" if isinstance(spec, GPU) else "platform"}
    for f in dataclasses.fields(spec):
        if f.name != "sources":
            out[f.name] = _jsonable(getattr(spec, f.name))
    out["sources"] = dict(spec.sources)
    return out


def occupancy_query(hw: str, *, lds_bytes: int, threads: int, vgprs: int) -> dict[str, Any]:
    gpu = load_gpu(hw)
    occ = occupancy(gpu, lds_bytes=lds_bytes, threads=threads, vgprs=vgprs)
    return {
        "hw": gpu.name,
        "workgroups_per_cu": occ.workgroups_per_cu,
        "limiter": occ.limiter.value,
        "limits": {lim.value: n for lim, n in occ.limits.items()},
        "waves_per_workgroup": occ.waves_per_workgroup,
        "waves_per_cu": occ.waves_per_cu,
        "max_waves_per_cu": gpu.max_waves_per_cu,
        "lds_bytes": lds_bytes,
        "lds_allocated_bytes": occ.lds_allocated_bytes,
        "lds_per_cu_bytes": gpu.lds_per_cu_bytes,
        "lds_granularity_bytes": gpu.lds_granularity_bytes,
        "threads": threads,
        "vgprs": vgprs,
    }


def build_kernel(kind: str, params: Mapping[str, str]) -> Any:
    """A kernel object from its CLI name and string parameters, each converted by the field's type."""
    if kind not in KERNEL_KINDS:
        raise ValueError(f"unknown kernel kind {kind!r} (valid: {', '.join(kernel_kinds())})")
    return from_strings(KERNEL_KINDS[kind], params, kind)


def from_strings(cls: type, params: Mapping[str, str], label: str) -> Any:
    """A dataclass from `key=value` strings: unknown and missing keys and bad values are named."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    for key in params:
        if key not in fields:
            raise ValueError(f"{label}: unknown parameter {key!r} (valid: {', '.join(fields)})")
    values = {key: _parse_value(label, key, hints[key], text) for key, text in params.items()}  # bad values first
    required = [n for n, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in params]
    if missing:
        raise ValueError(f"{label}: missing parameter(s) {', '.join(missing)} (give --param KEY=VALUE)")
    return cls(**values)


def _parse_value(kind: str, key: str, hint: Any, text: str) -> Any:
    """One `--param KEY=VALUE`: numbers through the command line's bounded conversion (infersim/flags.py)."""
    flag = f"{kind}: --param {key}"
    if hint is int and key.endswith("bytes"):
        return flags.size(text, flag)
    if hint is int:
        return flags.whole(text, flag, flags.KERNEL_INT)
    if hint is float:
        return flags.real(text, flag, flags.KERNEL_FLOAT)
    if typing.get_origin(hint) is tuple and typing.get_args(hint)[:1] == (int,):
        # a list of whole numbers (MLA's per-sequence histories, a grouped GEMM's rows by expert): "8192,1024,..."
        items = [item for item in text.strip("()[] ").replace(",", " ").split()]
        return tuple(flags.whole(item, flag, flags.KERNEL_INT) for item in items)
    try:
        if hint is bool:
            lowered = text.lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return lowered in ("true", "1", "yes")
        if isinstance(hint, type) and issubclass(hint, Enum):
            return hint(text.lower())
    except ValueError:
        if isinstance(hint, type) and issubclass(hint, Enum):
            choices = ", ".join(str(m.value) for m in hint)
            raise ValueError(f"{kind}: {key}={text!r} is not one of {choices}") from None
        raise ValueError(f"{kind}: {key}={text!r} is not a valid {getattr(hint, '__name__', hint)}") from None
    return text


def kernel_query(hw: str, kind: str, params: Mapping[str, str], *, launch: str = "eager",
                 calibration: str | None = None) -> dict[str, Any]:
    """Predicted time of a kernel (all its launches) with FLOP, bytes, grid and the bounding term."""
    gpu = load_gpu(hw)
    calib = load_calibration(gpu.name, calibration)
    # tile fields not given as --param are the engine's choice for this GPU; given ones are held
    kernel, tiles = with_tiles(build_kernel(kind, params), gpu, pinned=params.keys())
    mode = LaunchMode(launch)
    timed, source = timed_kernel(kernel, gpu)
    launches = timed.launches()
    times = [kernel_time(work, gpu, calib, mode) for work in launches]
    total = kernel.work()
    slowest = max(range(len(times)), key=lambda i: times[i].time_s)
    main = times[slowest]
    return {
        "hw": gpu.name,
        "kind": kind,
        "params": {f.name: _jsonable(getattr(kernel, f.name)) for f in dataclasses.fields(kernel)},
        "launch_mode": mode.value,
        "program": source.value,
        **({"compiled_code": compiled_code(kernel, gpu.name)} if source.value == "compiled" else {}),
        "calibration": calib.name,
        "cost_model": calib.cost_model.value,
        "time_s": sum(t.time_s for t in times),
        "floor_s": sum(t.floor_s for t in times),
        "flop": total.flop,
        "flop_by_dtype": {d.value: v for d, v in total.flop_by_dtype.items()},
        "bytes": total.bytes,
        "read_bytes": total.read_bytes,
        "write_bytes": total.write_bytes,
        "workgroups": launches[slowest].workgroups,
        "waves": main.waves,
        "workgroups_per_cu": main.occupancy.workgroups_per_cu if main.occupancy else 0,
        "limiter": main.occupancy.limiter.value if main.occupancy else None,
        "bound": main.bound.value,
        "launches": [_launch_row(work, t, gpu) for work, t in zip(launches, times, strict=True)],
        **({"tiles": tiles.as_dict()} if tiles is not None else {}),
    }


def triton_kernel_query(hw: str, spec: str, grid: str, args: Sequence[str], *, num_warps: int = 4,
                        num_stages: int | None = None, launch: str = "eager",
                        calibration: str | None = None) -> dict[str, Any]:
    """Predicted time of a user's own Triton kernel (`compiled.triton_kernel`): compiled for the GPU, its trips and
    bytes counted in Triton's interpreter, timed as every kernel is."""
    from compiled.triton_args import parse_args, parse_grid
    from compiled.triton_kernel import triton_launch

    gpu = load_gpu(hw)
    calib = load_calibration(gpu.name, calibration)
    mode = LaunchMode(launch)
    found = triton_launch(spec, parse_grid(grid), parse_args(args), gpu, num_warps, num_stages)
    t = kernel_time(found.work, gpu, calib, mode)
    counts = found.counts
    return {
        "hw": gpu.name,
        "kind": "triton",
        "kernel": spec,
        "grid": list(found.grid),
        "args": list(args),
        "launch_mode": mode.value,
        "program": "compiled",
        "compiled_code": [found.code],
        "calibration": calib.name,
        "cost_model": calib.cost_model.value,
        "interpreted": {"programs": len(counts.programs), "of": found.work.workgroups,
                        "loop_trips_min": min(counts.trips, default=0),
                        "loop_trips_max": max(counts.trips, default=0), "unrolled": found.unroll},
        "time_s": t.time_s,
        "floor_s": t.floor_s,
        "flop": found.work.flop,
        "flop_by_dtype": {d.value: v for d, v in found.work.flop_by_dtype.items()},
        "bytes": found.work.bytes,
        "read_bytes": found.work.read_bytes,
        "write_bytes": found.work.write_bytes,
        "workgroups": found.work.workgroups,
        "waves": t.waves,
        "workgroups_per_cu": t.occupancy.workgroups_per_cu if t.occupancy else 0,
        "limiter": t.occupancy.limiter.value if t.occupancy else None,
        "bound": t.bound.value,
        "launches": [_launch_row(found.work, t, gpu)],
    }


def _launch_row(work: Any, t: KernelTime, gpu: GPU) -> dict[str, Any]:
    matrix = work.program is not None and work.program.issues_matrix
    return {
        "family": work.family.value if work.family else None,
        "time_s": t.time_s,
        "compute_s": t.compute_s,
        "memory_s": t.memory_s,
        "latency_s": t.latency_s,
        "dram_latency_factor": t.dram_latency_factor,
        # the SM clock its cycles are timed at: the matrix clock where it issues matrix instructions
        "sm_clock_mhz": (at_matrix_clock(gpu) if matrix else gpu).boost_clock_hz / 1e6,
        "launch_s": t.launch_s,
        "floor_s": t.floor_s,
        "bound": t.bound.value,
        "flop": work.flop,
        "bytes": work.bytes,
        "workgroups": work.workgroups,
        "waves": t.waves,
        "workgroups_per_cu": t.occupancy.workgroups_per_cu if t.occupancy else 0,
        "limiter": t.occupancy.limiter.value if t.occupancy else None,
        **({"program": _program_row(work.program)} if work.program is not None else {}),
    }


def _program_row(program: Any) -> dict[str, Any]:
    """What one workgroup does, as the cycle-level model sees it (trip counts of an irregular grid summarized)."""
    chains = ("trip_chain", "setup_chain", "l2_trip_chain", "l2_setup_chain")
    row = {f.name: getattr(program, f.name) for f in dataclasses.fields(program)
           if f.name not in (*chains, "trip_counts")}
    for name in chains:
        chain = getattr(program, name)
        if chain is not None:
            row[name] = {k: v for k, v in dataclasses.asdict(chain).items() if v}
    if program.trip_counts:
        row["trip_counts"] = {"workgroups": len(program.trip_counts), "min": min(program.trip_counts),
                              "max": max(program.trip_counts)}
    return row


def _jsonable(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {_jsonable(k): _jsonable(v) for k, v in value.items()}
    return value
