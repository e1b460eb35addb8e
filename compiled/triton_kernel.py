"""A user's own Triton kernel, predicted from its compiled code: `infersim kernel --triton FILE.py:KERNEL`.

The design change is often a kernel no one has run yet. Given its source file, its grid and its arguments
(`compiled.triton_args`), the kernel is compiled on the CPU for the GPU's instruction set (`compiled.triton_build`)
at the specialisations the JIT would give those arguments, and its code read as the companion kernels' is
(`compiled.kernel_code`: warps, registers, shared memory, instructions outside and inside its loop, the issue
timeline the per-SM or per-CU simulation runs). What the code cannot say (how many times the loop runs, which bytes
move, the FLOP of `tl.dot`) is counted in Triton's interpreter (`compiled.triton_counts`).

The launch is then a `Work` with a workgroup `Program` (trips, bytes per trip and outside the loop, the compiled
instructions and simulated cycles: `compiled.kernel._timed`), timed by `hwmodels.roofline.kernel_time` in the
launch mode asked for, as every other kernel is. Kernels with more than one loop in their own body, or loops in
the functions they call, are refused with the reason.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from compiled import triton_build
from compiled.companion_sources import Case, load_source
from compiled.kernel import _timed, unroll_of
from compiled.kernel_code import add_case, kernel_code, why_not
from compiled.sass_counts import cycles_of
from compiled.triton_args import TENSOR_DTYPES, TensorArg, TritonKernelError
from compiled.triton_counts import SECTOR_BYTES, Counts, count, runtime_loop
from hwmodels.program import Program
from hwmodels.spec import GPU
from hwmodels.work import Work

# --- The source ------------------------------------------------------------------------------------------------


def _jit_of(obj: object, name: str) -> object:
    """The @triton.jit function under `obj` (an autotuner or heuristics wrapper is unwrapped)."""
    from triton.runtime.jit import JITFunction

    for _ in range(8):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
    raise TritonKernelError(f"{name} is not a @triton.jit function")


def load_kernel(spec: str) -> object:
    """The @triton.jit kernel `FILE.py:KERNEL` or `MODULE:KERNEL` names (an importable module, as entry points name
    one: `compiled.examples.triton_kernels:row_sums`), loaded from its file for compiling."""
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name:
        raise TritonKernelError(f"--triton {spec!r}: expected FILE.py:KERNEL or MODULE:KERNEL")
    path = Path(path_text)
    if not path.is_file() and not path_text.endswith(".py"):
        path = _module_file(spec, path_text)
    if not path.is_file():
        raise TritonKernelError(f"--triton {spec!r}: no file {path_text}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    saved = os.environ.pop("TRITON_INTERPRET", None)  # compiled, even in a process that interprets kernels
    try:
        module = load_source(path, f"_infersim_user_kernel_{digest}")
    except Exception as e:
        raise TritonKernelError(f"--triton {spec!r}: loading {path_text} failed: {type(e).__name__}: {e}") from e
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
    if not hasattr(module, name):
        kernels = [n for n, v in vars(module).items() if hasattr(v, "fn") and not n.startswith("_")]
        raise TritonKernelError(f"--triton {spec!r}: {path_text} has no {name} (its kernels: {', '.join(kernels)})")
    return _jit_of(getattr(module, name), name)


def _module_file(spec: str, module: str) -> Path:
    """The source file of an importable module, found without importing it."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise TritonKernelError(f"--triton {spec!r}: no file {module} and no importable module of that name")
    return Path(found.origin)


# --- Compiling ---------------------------------------------------------------------------------------------------


def case_of(jit: object, args: Mapping[str, object], num_warps: int, num_stages: int, name: str) -> Case:
    """How Triton's JIT compiles the kernel for these arguments: tensors as pointers (16-byte aligned), ints as i32
    or i64 (a multiple of 16 specialised as divisible by 16, a 1 as a constant), floats as fp32, bools as i1."""
    params = list(jit.params)
    names = [p.name for p in params]
    unknown = sorted(set(args) - set(names))
    if unknown:
        raise TritonKernelError(f"{name} has no parameter {', '.join(unknown)} (its parameters: {', '.join(names)})")
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    aligned: list[str] = []
    for p in params:
        if p.name not in args:
            if p.is_constexpr and p.default is not inspect.Parameter.empty:
                signature[p.name], constexprs[p.name] = "constexpr", p.default
                continue
            raise TritonKernelError(f"{name} needs --arg {p.name}=... (its parameters: {', '.join(names)})")
        value = args[p.name]
        if p.is_constexpr:
            if isinstance(value, TensorArg):
                raise TritonKernelError(f"--arg {p.name}: {name}'s {p.name} is a tl.constexpr, not a tensor")
            signature[p.name], constexprs[p.name] = "constexpr", value
        elif isinstance(value, TensorArg):
            signature[p.name] = "*" + TENSOR_DTYPES[value.dtype][0]
        elif isinstance(value, bool):
            signature[p.name] = "i1"
        elif isinstance(value, int):
            if value == 1 and not p.do_not_specialize:
                signature[p.name], constexprs[p.name] = "constexpr", 1
                continue
            signature[p.name] = "i32" if -2**31 <= value < 2**31 else "i64"
            if value % 16 == 0 and not p.do_not_specialize:
                aligned.append(p.name)
        else:
            signature[p.name] = "fp32"
    return Case(jit, signature, constexprs, num_warps, tuple(aligned), num_stages)


def configuration(c: Case) -> str:
    """The configuration string a user kernel's code is kept under."""
    return repr((sorted(c.signature.items()), sorted((k, repr(v)) for k, v in c.constexprs.items()), c.aligned,
                 c.num_warps, c.num_stages))


def described(c: Case) -> str:
    """The configuration as a report shows it: its constants, stages, and the integers specialised as divisible by
    16."""
    parts = [f"{k}={v}" for k, v in c.constexprs.items()] + [f"stages={c.num_stages}"]
    if c.aligned:
        parts.append(f"16|{','.join(c.aligned)}")
    return " ".join(parts)


# --- The launch --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TritonLaunch:
    """A user's kernel at one grid and set of arguments, as the product times it."""

    name: str  # FILE.py:KERNEL
    work: Work
    code: dict  # `compiled.kernel_code` record (timeline left out)
    counts: Counts
    grid: tuple[int, int, int]
    unroll: int = 1  # source loop trips one compiled trip runs (`unrolled`)


def _hbm_bytes(counts: Counts, args: Mapping[str, object]) -> tuple[float, float]:
    """(bytes read, bytes written) from HBM: each tensor's distinct sectors touched over the grid, at most the
    tensor (a tensor both read and written counts both ways)."""
    read = written = 0.0
    for name, sectors in counts.sectors.items():
        moved = min(sectors * SECTOR_BYTES, float(args[name].nbytes))  # type: ignore[union-attr]
        if name in counts.read_tensors:
            read += moved
        if name in counts.written_tensors:
            written += moved
    return read, written


def _trip_counts(counts: Counts, programs: int) -> tuple[int, ...]:
    """Each program's trips in dispatch order (grid order, x fastest): the interpreted programs' own, the others'
    from the nearest interpreted one; empty when every interpreted program ran the same trips."""
    if len(set(counts.trips)) <= 1:
        return ()
    known = np.array(counts.programs)
    nearest = np.abs(np.arange(programs)[:, None] - known[None, :]).argmin(axis=1) if programs <= 1 << 16 else None
    if nearest is None:
        return ()
    return tuple(int(counts.trips[i]) for i in nearest)


def triton_launch(spec: str, grid: tuple[int, int, int], args: Mapping[str, object], gpu: GPU,
                  num_warps: int = 4, num_stages: int | None = None) -> TritonLaunch:
    """The user's kernel `spec` (FILE.py:KERNEL) launched on `grid` with `args` on `gpu`, as a timed `Work`."""
    if not triton_build.available():
        raise TritonKernelError("--triton needs Triton installed: pip install 'infersim[triton]'")
    if num_warps <= 0 or num_warps & (num_warps - 1):
        raise TritonKernelError(f"--num-warps must be a power of two, got {num_warps}")
    target = triton_build.target_of(gpu)
    stages = num_stages if num_stages is not None else (3 if target.backend == "cuda" else 2)  # Triton's defaults
    if stages < 1:
        raise TritonKernelError(f"--num-stages must be at least 1, got {stages}")
    jit = load_kernel(spec)
    name = spec.rpartition(":")[2]
    loop = runtime_loop(jit, name)
    case = case_of(jit, args, num_warps, stages, name)
    kernel, config = f"{name}:{jit.cache_key[:16]}", configuration(case)
    add_case(kernel, config, case)
    code = kernel_code(gpu.name, kernel, config)
    if code is None:
        raise TritonKernelError(f"{spec} could not be compiled for {target.arch}: {why_not(gpu.name, kernel, config)}")
    if code["loop_instructions"] and loop is None:
        raise TritonKernelError(f"{spec}'s compiled code has a loop that its own body does not: a loop in a function "
                                "it calls is not counted yet")
    counts = count(jit, loop, grid, args, set(case.constexprs))
    programs = grid[0] * grid[1] * grid[2]
    build = triton_build.build(case.fn, case.signature, case.constexprs, case.num_warps, case.aligned,
                               case.num_stages, target)
    unroll = unrolled(build.asm, target, counts, code["num_warps"] * gpu.wave_size)
    work = _work(counts, code, args, programs, case, gpu, kernel, config, unroll)
    shown = {**{k: v for k, v in code.items() if k != "timeline"}, "config": described(case)}
    return TritonLaunch(spec, work, shown, counts, grid, unroll)



def unrolled(asm: str, target: triton_build.Target, counts: Counts, threads: int) -> int:
    """How many trips of the kernel's source loop one trip of its compiled loop runs: LLVM unrolls short loops
    (4 times is common for a streaming reduction), which the source trip count does not see. Read off the global
    bytes one thread moves in a compiled trip against what one source trip moves (the interpreter's count); 1
    when they do not say (no loop, bytes the code does not show, no whole multiple)."""
    from compiled import amdgcn_code, sass_code

    if target.backend != "cuda" and (stated := amdgcn_code.loop_unroll(asm)) is not None:
        return stated  # an unrolled loop and its remainder: the code says the factor itself
    moved = (sass_code.loop_bytes(asm) if target.backend == "cuda" else amdgcn_code.loop_bytes(asm))
    trips = sum(w * t for w, t in zip(counts.weights, counts.trips, strict=True))
    if moved is None or trips <= 0:
        return 1
    for compiled_bytes, source_bytes in zip(moved, (counts.load_in_loop, counts.store_in_loop), strict=True):
        per_thread = source_bytes / trips / threads
        if compiled_bytes > 0 and per_thread > 0:
            return unroll_of(compiled_bytes, per_thread)
    return 1


def _work(counts: Counts, code: dict, args: Mapping[str, object], programs: int, case: Case, gpu: GPU,
          kernel: str, config: str, unroll: int = 1) -> Work:
    """The launch's counted demand and its workgroup program, timed from the compiled code (a compiled trip runs
    `unroll` source trips)."""
    read, written = _hbm_bytes(counts, args)
    outside, per_trip = code["prologue_instructions"], code["loop_instructions"]
    total_trips = sum(w * t for w, t in zip(counts.weights, counts.trips, strict=True)) / unroll  # over the grid
    busiest = max(counts.trips, default=0) / unroll
    loads = counts.load_in_loop + counts.load_outside
    if per_trip and total_trips:
        program = Program(trips=busiest, trip_load_bytes=counts.load_in_loop / total_trips,
                          trip_store_bytes=counts.store_in_loop / total_trips, trip_instructions=per_trip,
                          setup_instructions=outside, setup_load_bytes=counts.load_outside / programs,
                          prefetch=max(0, case.num_stages - 1),
                          trip_counts=tuple(-(-t // unroll) for t in _trip_counts(counts, programs)))
    else:  # no loop in the code (or it never ran): the whole program is one trip
        program = Program(trips=1, trip_load_bytes=loads / programs,
                          trip_store_bytes=(counts.store_in_loop + counts.store_outside) / programs,
                          trip_instructions=outside + per_trip * busiest)
        outside, per_trip = outside + per_trip * busiest, 0
    loop_waits = ((code.get("timeline") or {}).get("loop") or {}).get("waits", ())
    program = replace(program, reuse=max(1.0, loads / read) if read else 1.0,
                      async_loads=any(wait[0] == "async_copy" for wait in loop_waits))
    program = _timed(program, outside, per_trip, cycles_of(gpu.name, kernel, config))
    warps = code["num_warps"]
    return Work(flop_by_dtype=dict(counts.flop_by_dtype), read_bytes=read,
                write_bytes=written, workgroups=programs, threads_per_workgroup=warps * gpu.wave_size,
                lds_bytes_per_workgroup=code["shared_bytes"], registers_per_thread=code["registers"],
                warp_instructions_per_workgroup=(code["prologue_instructions"]
                                                 + busiest * code["loop_instructions"]) * warps,
                program=program, triton_launch=True)
