"""What a user's Triton kernel does at its arguments, counted by running programs of its grid in Triton's interpreter
(`count`): its loop's trips, the bytes it loads and stores inside and outside the loop, the FLOP of `tl.dot`, and
the distinct sectors of each tensor it touches.

- every load, store and atomic is counted with its mask, by where it sits (in the loop's body or outside it), and
  checked to fall inside a tensor argument (an address outside every tensor is an error, not a crash);
- a loop's trips are the most times any memory operation or `tl.dot` in its body ran in one program;
- `tl.dot` counts 2 M N K FLOP in its operands' datatype (fp32 operands as TF32, Triton's default precision);
- HBM bytes are the distinct 32-byte sectors of each tensor that the programs touch (L2 serves the repeats),
  capped at the tensor's size.

Programs interpreted: all of a grid of at most `INTERPRETED_PROGRAMS`, else that many spread evenly over the grid,
fewer for programs with long loops (`INTERPRETED_TRIPS`).
Then the first and the last program stand for themselves (the last is often a masked remainder) and each one between
for an even share of the programs between: counts, FLOP and the sectors each adds are weighted so. Float tensors
hold random normal values (given to each sector as a program first touches it, so untouched parts of a large tensor
cost nothing); integer tensors hold the value given after `=` in their argument (`lens=i32[64]=8192`; 0 by default),
so index tensors stay in bounds, or their element numbers in order (`=arange`) or in a fixed-seed order (`=perm`):
an index that names distinct rows, whose sectors the count then sees as distinct.
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compiled.triton_args import _FLOAT_STORAGE, TENSOR_DTYPES, TensorArg, TritonKernelError
from hwmodels.dtypes import Dtype

# Programs run in the interpreter to count trips and bytes: enough to see how trips and bytes vary over the grid,
# few enough to take seconds (an assumption; every program of a smaller grid is run).
INTERPRETED_PROGRAMS = 32
INTERPRETED_TRIPS = 256  # ... and loop trips, in all: a second or two of Triton's interpreter (an assumption)
SECTOR_BYTES = 32  # DRAM and L2 move 32-byte sectors (NVIDIA's L2 sector; a CDNA L2 request is 64 bytes or more)
MAX_TENSOR_BYTES = 16 * 2**30  # tensors allocated on the host to interpret the kernel, at most (an assumption)
_ALIGN = 256  # tensor arguments are allocated 256-byte aligned, as PyTorch's CUDA caching allocator does


@dataclass(frozen=True)
class Loop:
    """The one runtime loop of a kernel's own body: the lines of its body."""

    first: int
    last: int

    def holds(self, line: int) -> bool:
        return self.first <= line <= self.last


def _is_static(node: ast.For) -> bool:
    """A `for` over `tl.static_range` is unrolled by the compiler: no loop at run time."""
    call = node.iter
    return isinstance(call, ast.Call) and getattr(call.func, "attr", getattr(call.func, "id", "")) == "static_range"


def runtime_loop(jit: object, name: str) -> Loop | None:
    """The kernel's runtime loop (None without one); more than one is refused, with their lines."""
    source = inspect.getsource(jit.fn)
    first_line = inspect.getsourcelines(jit.fn)[1]
    tree = ast.parse(_dedent(source))
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.While) or (isinstance(n, ast.For) and not _is_static(n))]
    if len(loops) > 1:
        lines = ", ".join(str(n.lineno + first_line - 1) for n in loops)
        raise TritonKernelError(f"{name} has {len(loops)} loops (lines {lines}): kernels with one loop or none are "
                                "timed from their compiled code")
    if not loops:
        return None
    loop = loops[0]
    return Loop(loop.body[0].lineno + first_line - 1, loop.end_lineno + first_line - 1)


def _dedent(source: str) -> str:
    import textwrap

    return textwrap.dedent(source)


# --- Counting in the interpreter ---------------------------------------------------------------------------------


@dataclass
class Counts:
    """What the grid's programs do, estimated from the interpreted ones (weighted), and each one's loop trips."""

    programs: list[int] = field(default_factory=list)  # linear indices of the interpreted programs
    trips: list[int] = field(default_factory=list)  # loop trips of each interpreted program
    weights: list[float] = field(default_factory=list)  # programs of the grid each interpreted one stands for
    load_in_loop: float = 0.0  # bytes loaded by the loop's body, over the grid
    load_outside: float = 0.0
    store_in_loop: float = 0.0
    store_outside: float = 0.0
    flop_by_dtype: dict[Dtype, float] = field(default_factory=dict)
    sectors: dict[str, float] = field(default_factory=dict)  # per tensor argument: distinct sectors touched
    read_tensors: set[str] = field(default_factory=set)
    written_tensors: set[str] = field(default_factory=set)


class _Memory:
    """Host buffers for the tensor arguments, and the sectors of each that the programs touch.

    Buffers are allocated zeroed and untouched (the operating system maps their pages when first used), so a
    large tensor costs nothing the interpreted programs do not touch. Float tensors get their random values a
    sector at a time, when a program first touches it (`_values`); integer tensors hold their fill value."""

    def __init__(self, tensors: Mapping[str, TensorArg], rng: np.random.Generator) -> None:
        total = sum(t.nbytes for t in tensors.values())
        if total > MAX_TENSOR_BYTES:
            raise TritonKernelError(f"the tensor arguments take {total / 2**30:.1f} GiB; interpreting the kernel "
                                    f"allocates them on the host, at most {MAX_TENSOR_BYTES / 2**30:.0f} GiB")
        self.names, self.tensors, self.rng = list(tensors), list(tensors.values()), rng
        self.raw = [np.zeros(t.nbytes + _ALIGN, np.uint8) for t in self.tensors]
        self.starts = np.array([(-r.ctypes.data) % _ALIGN + r.ctypes.data for r in self.raw], dtype=np.uint64)
        self.ends = self.starts + np.array([t.nbytes for t in self.tensors], dtype=np.uint64)
        self.touched = [np.zeros(-(-t.nbytes // SECTOR_BYTES), bool) for t in self.tensors]
        self.views = []
        for raw, start, t in zip(self.raw, self.starts, self.tensors, strict=True):
            offset = int(start) - raw.ctypes.data
            self.views.append(raw[offset:offset + t.nbytes])
            if t.dtype not in _FLOAT_STORAGE and not t.dtype.startswith("fp8") and t.fill:
                self.views[-1].view(TENSOR_DTYPES[t.dtype][1])[:] = t.values()
        order = np.argsort(self.starts)
        self.order, self.sorted_starts = order, self.starts[order]

    def sectors(self) -> dict[str, int]:
        """Distinct sectors touched so far, per tensor."""
        return {n: int(t.sum()) for n, t in zip(self.names, self.touched, strict=True)}

    def address(self, name: str) -> int:
        return int(self.starts[self.names.index(name)])

    def touch(self, addresses: np.ndarray, itemsize: int, where: str) -> set[str]:
        """Mark the sectors the addresses cover, giving a float tensor's sectors their values on first touch; the
        tensors touched. Raises for an address outside them all, saying `where` it was made."""
        if addresses.size == 0:
            return set()
        slot = np.searchsorted(self.sorted_starts, addresses, side="right").astype(np.int64) - 1
        index = self.order[np.clip(slot, 0, None)]
        inside = (slot >= 0) & (addresses + np.uint64(itemsize) <= self.ends[index])
        if not inside.all():
            first = int(np.argmin(inside))
            if slot[first] < 0:
                what = "before every tensor argument"
            else:
                i = int(index[first])
                past = int(addresses[first] - self.ends[i]) // itemsize
                what = (f"{past + 1} elements after the last of {self.names[i]} "
                        f"({int(self.ends[i] - self.starts[i])} bytes)")
            raise TritonKernelError(f"{where}: {int((~inside).sum())} of {addresses.size} lanes access memory "
                                    f"outside the tensor arguments, the first {what}: check the shapes given with "
                                    "--arg and the grid")
        names = set()
        for i in np.unique(index):
            mine = addresses[index == i] - self.starts[i]
            sectors = np.unique(np.concatenate([mine // np.uint64(SECTOR_BYTES),
                                                (mine + np.uint64(itemsize - 1)) // np.uint64(SECTOR_BYTES)]))
            sectors = sectors.astype(np.int64)
            fresh = sectors[~self.touched[i][sectors]]
            if fresh.size:
                self._values(int(i), fresh)
            self.touched[i][sectors] = True
            names.add(self.names[i])
        return names

    def _values(self, i: int, sectors: np.ndarray) -> None:
        """Random values in the sectors of float tensor `i` (normal; fp8: finite small magnitudes)."""
        t, raw = self.tensors[i], self.views[i]
        if t.dtype not in _FLOAT_STORAGE and not t.dtype.startswith("fp8"):
            return
        offsets = (sectors[:, None] * SECTOR_BYTES + np.arange(SECTOR_BYTES)[None, :]).ravel()
        offsets = offsets[offsets < raw.size]
        storage = np.dtype(TENSOR_DTYPES[t.dtype][1])
        elements = np.unique(offsets // storage.itemsize)
        if t.dtype.startswith("fp8"):
            values = (self.rng.integers(0x18, 0x48, elements.size, dtype=np.uint8)  # finite in every fp8 format
                      | (self.rng.integers(0, 2, elements.size, dtype=np.uint8) << 7))
        else:
            normal = self.rng.standard_normal(elements.size).astype(np.float32)
            values = ((normal.view(np.uint32) >> 16).astype(np.uint16) if t.dtype == "bf16"
                      else normal.astype(storage))
        raw.view(storage)[elements] = values


def _dot_dtype(tt_dtype: object, input_precision: object) -> Dtype:
    name = str(tt_dtype)
    if "fp8" in name:
        return Dtype.FP8
    table = {"bf16": Dtype.BF16, "fp16": Dtype.FP16, "int8": Dtype.INT8, "uint8": Dtype.INT8, "fp64": Dtype.FP32}
    if name == "fp32":
        return Dtype.FP32 if "IEEE" in str(input_precision).upper() else Dtype.TF32
    return table.get(name, Dtype.FP32)


def count(jit: object, loop: Loop | None, grid: tuple[int, int, int], args: Mapping[str, object],
          constexprs: set[str], seed: int = 0) -> Counts:
    """Run programs of `grid` (`INTERPRETED_PROGRAMS` of them, spread evenly) of the kernel `jit` in Triton's
    interpreter and count what they did (the module docstring says how). The @triton.jit functions it calls
    (its own helpers, triton.language's) run interpreted too."""
    import triton.language as tl
    from triton.runtime import interpreter as tri
    from triton.runtime.jit import JITFunction

    fn = tri.InterpretedFunction(jit.fn).rewrite()
    code_of_kernel = fn.__code__
    helpers: dict[int, object] = {}
    scopes = []  # the language patched for each function run (restored after: compiling must see it unpatched)

    def interpreted_call(self, *a, **k):
        key = id(self)  # not the function itself: its hash reads its source, which the patched language breaks
        if key not in helpers:
            scopes.append(tri._patch_lang(self.fn))
            helpers[key] = tri.InterpretedFunction(self.fn).rewrite()
        return helpers[key](*a, **k)

    tensors = {n: v for n, v in args.items() if isinstance(v, TensorArg)}
    memory = _Memory(tensors, np.random.default_rng(seed))
    counts = Counts()
    builder = tri.interpreter_builder
    triton_dir = str(Path(tri.__file__).resolve().parents[1])
    here = __file__
    sites: dict[tuple, int] = {}

    program = [0, 1.0]  # the linear index of the program being interpreted, and its weight

    def where() -> tuple[bool, tuple]:
        frame, chain = sys._getframe(2), []
        while frame is not None and frame.f_code is not code_of_kernel:
            if not frame.f_code.co_filename.startswith(triton_dir) and frame.f_code.co_filename != here:
                chain.append((frame.f_code.co_filename, frame.f_lineno, frame.f_lasti))  # one call site
            frame = frame.f_back
        if frame is None:
            return False, ()
        chain.append(("kernel", frame.f_lineno, frame.f_lasti))
        inside = loop is not None and loop.holds(frame.f_lineno)
        if inside:
            key = tuple(chain)
            sites[key] = sites.get(key, 0) + 1
        return inside, tuple(chain)

    def moved(ptrs, mask, store: bool) -> None:
        inside, chain = where()
        addresses = ptrs.data if mask is None else ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]
        itemsize = tri._get_np_dtype(ptrs.get_element_ty()).itemsize
        line = f"line {chain[-1][1]}" if chain else "a called function"
        names = memory.touch(np.asarray(addresses, dtype=np.uint64).ravel(), itemsize,
                             f"program {program[0]}, {'store' if store else 'load'} at {line}")
        nbytes = float(np.size(addresses) * itemsize) * program[1]
        if store:
            counts.written_tensors |= names
            if inside:
                counts.store_in_loop += nbytes
            else:
                counts.store_outside += nbytes
        else:
            counts.read_tensors |= names
            if inside:
                counts.load_in_loop += nbytes
            else:
                counts.load_outside += nbytes

    originals = {n: getattr(builder, n) for n in ("create_masked_load", "create_masked_store", "create_atomic_rmw",
                                                  "create_atomic_cas", "create_dot", "create_dot_scaled")}

    def masked_load(ptrs, mask, other, cache_policy, is_volatile):
        moved(ptrs, mask, store=False)
        return originals["create_masked_load"](ptrs, mask, other, cache_policy, is_volatile)

    def masked_store(ptrs, value, mask, cache_policy):
        moved(ptrs, mask, store=True)
        return originals["create_masked_store"](ptrs, value, mask, cache_policy)

    def atomic_rmw(op, ptr, val, mask, sem, scope):
        moved(ptr, mask, store=False)
        moved(ptr, mask, store=True)
        return originals["create_atomic_rmw"](op, ptr, val, mask, sem, scope)

    def atomic_cas(ptr, cmp, val, sem, scope):
        moved(ptr, None, store=False)
        moved(ptr, None, store=True)
        return originals["create_atomic_cas"](ptr, cmp, val, sem, scope)

    def dot(a, b, d, input_precision, max_num_imprecise_acc):
        where()
        dtype = _dot_dtype(a.dtype, input_precision)
        flop = 2.0 * a.data.size * b.data.shape[-1] * program[1]
        counts.flop_by_dtype[dtype] = counts.flop_by_dtype.get(dtype, 0.0) + flop
        return originals["create_dot"](a, b, d, input_precision, max_num_imprecise_acc)

    def dot_scaled(*_args, **_kwargs):
        raise TritonKernelError("tl.dot_scaled is not counted yet: its FLOP and scale bytes would be missed")

    converted = {}
    for name, value in args.items():
        if isinstance(value, TensorArg):
            pointer = tl.pointer_type(tl.str_to_ty(TENSOR_DTYPES[value.dtype][0], None))
            handle = tri.TensorHandle(np.array([memory.address(name)], dtype=np.uint64), pointer)
            converted[name] = tl.tensor(handle, pointer)
        elif name in constexprs:
            converted[name] = value
        else:
            converted[name] = tri._implicit_cvt(value)
    programs = grid[0] * grid[1] * grid[2]
    snapshots = []  # sectors touched after the first program and before the last

    def run(linear: int, weight: float) -> None:
        x, rest = linear % grid[0], linear // grid[0]
        builder.set_grid_idx(x, rest % grid[1], rest // grid[1])
        program[:] = linear, weight
        sites.clear()
        with np.errstate(all="ignore"):  # the kernel's own arithmetic on random values: not this run's concern
            fn(**converted)
        counts.programs.append(linear)
        counts.weights.append(weight)
        counts.trips.append(max(sites.values(), default=0))
    scopes.append(tri._patch_lang(fn))
    jit_call = JITFunction.__call__
    JITFunction.__call__ = interpreted_call
    for n, f in (("create_masked_load", masked_load), ("create_masked_store", masked_store),
                 ("create_atomic_rmw", atomic_rmw), ("create_atomic_cas", atomic_cas), ("create_dot", dot),
                 ("create_dot_scaled", dot_scaled)):
        setattr(builder, n, f)
    try:
        builder.set_grid_dim(*grid)
        run(0, 1.0)
        snapshots.append(memory.sectors())
        chosen = _programs(programs, counts.trips[0])
        between = 1.0 if len(chosen) == programs else (programs - 2) / (len(chosen) - 2)
        for linear in chosen[1:-1]:
            run(linear, between)
        snapshots.append(memory.sectors())
        if programs > 1:
            run(programs - 1, 1.0)
    except TritonKernelError:
        raise
    except Exception as e:
        raise TritonKernelError(f"the kernel failed in Triton's interpreter: {type(e).__name__}: {e}") from e
    finally:
        JITFunction.__call__ = jit_call
        for n in originals:
            if n in vars(builder):
                delattr(builder, n)
        for scope in reversed(scopes):
            scope.restore()
    final = memory.sectors()
    first, before_last = snapshots
    counts.sectors = {n: first[n] + (before_last[n] - first[n]) * between + (final[n] - before_last[n])
                      for n in memory.names}
    return counts


def _programs(programs: int, first_trips: int) -> list[int]:
    """The programs to interpret, in order, the first and last included: every one of a small grid, else as many as
    `INTERPRETED_TRIPS` loop trips allow at the first program's trips (at least 3, at most `INTERPRETED_PROGRAMS`),
    spread evenly. Chosen from counts alone, so a prediction does not depend on how fast this machine is."""
    runs = min(programs, INTERPRETED_PROGRAMS, max(3, INTERPRETED_TRIPS // max(1, first_trips)))
    return sorted({round(i * (programs - 1) / max(1, runs - 1)) for i in range(runs)})
