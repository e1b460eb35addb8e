"""A user's own Triton kernel, predicted from its compiled code: `infersim kernel --triton FILE.py:KERNEL`.

The design change is often a kernel no one has run yet. Given its source file, its grid and its arguments, the
kernel is compiled on the CPU for the GPU's instruction set (`compiled.triton_build`) and its code read as the
companion kernels' is (`compiled.kernel_code`: warps, registers, shared memory, instructions outside and inside its
loop, the issue timeline the per-SM or per-CU simulation runs). What the code cannot say is how many times the loop
runs and which bytes it moves: those depend on the arguments. They are counted by running programs of the grid in
Triton's interpreter on tensors of the given shapes (`count`):

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
so index tensors stay in bounds.

The launch is then a `Work` with a workgroup `Program` (trips, bytes per trip and outside the loop, the compiled
instructions and simulated cycles: `compiled.kernel._timed`), timed by `hwmodels.roofline.kernel_time` in the
launch mode asked for, as every other kernel is. Kernels with more than one loop in their own body, or loops in
the functions they call, are refused with the reason.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from compiled import triton_build
from compiled.companion_sources import Case, load_source
from compiled.kernel import _timed
from compiled.kernel_code import add_case, kernel_code, why_not
from compiled.sass_counts import cycles_of
from hwmodels.dtypes import Dtype
from hwmodels.program import Program
from hwmodels.spec import GPU
from hwmodels.work import Work

# Programs run in the interpreter to count trips and bytes: enough to see how trips and bytes vary over the grid,
# few enough to take seconds (an assumption; every program of a smaller grid is run).
INTERPRETED_PROGRAMS = 32
INTERPRETED_TRIPS = 256  # ... and loop trips, in all: a second or two of Triton's interpreter (an assumption)
SECTOR_BYTES = 32  # DRAM and L2 move 32-byte sectors (NVIDIA's L2 sector; a CDNA L2 request is 64 bytes or more)
MAX_TENSOR_BYTES = 16 * 2**30  # tensors allocated on the host to interpret the kernel, at most (an assumption)
_ALIGN = 256  # tensor arguments are allocated 256-byte aligned, as PyTorch's CUDA caching allocator does

# Tensor datatypes: (Triton's name, numpy storage, the math datatype a tl.dot of them runs at)
TENSOR_DTYPES: dict[str, tuple[str, type, Dtype | None]] = {
    "bf16": ("bf16", np.uint16, Dtype.BF16), "fp16": ("fp16", np.float16, Dtype.FP16),
    "fp32": ("fp32", np.float32, Dtype.TF32), "fp64": ("fp64", np.float64, Dtype.FP32),
    "fp8e4nv": ("fp8e4nv", np.uint8, Dtype.FP8), "fp8e5": ("fp8e5", np.uint8, Dtype.FP8),
    "fp8e4b8": ("fp8e4b8", np.uint8, Dtype.FP8), "fp8e5b16": ("fp8e5b16", np.uint8, Dtype.FP8),
    "i8": ("i8", np.int8, Dtype.INT8), "u8": ("u8", np.uint8, Dtype.INT8), "i16": ("i16", np.int16, None),
    "i32": ("i32", np.int32, None), "i64": ("i64", np.int64, None), "u32": ("u32", np.uint32, None),
    "u64": ("u64", np.uint64, None),
}
_FLOAT_STORAGE = ("bf16", "fp16", "fp32", "fp64")
_TENSOR = re.compile(r"^(\w+)\[([\d,\s]*)\](?:=(-?\d+))?$")


class TritonKernelError(ValueError):
    """A user's kernel, grid or arguments that cannot be predicted, and why."""


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument: its datatype name (`TENSOR_DTYPES`), shape, and the value an integer tensor holds."""

    dtype: str
    shape: tuple[int, ...]
    fill: int = 0

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(TENSOR_DTYPES[self.dtype][1]).itemsize


def parse_arg(text: str) -> tuple[str, object]:
    """`NAME=VALUE`: a tensor `dtype[d0,d1,...]` (an integer tensor may add `=FILL`), an int, a float, or a bool."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name.isidentifier() or not value:
        raise TritonKernelError(f"--arg {text!r}: expected NAME=VALUE, e.g. x=bf16[4096,4096], n=4096, BLOCK=128")
    found = _TENSOR.match(value)
    if found:
        dtype, dims, fill = found.groups()
        if dtype not in TENSOR_DTYPES:
            raise TritonKernelError(f"--arg {name}: unknown datatype {dtype!r} (valid: {', '.join(TENSOR_DTYPES)})")
        shape = tuple(int(d) for d in dims.replace(" ", "").split(",") if d)
        if not shape or any(d <= 0 for d in shape):
            raise TritonKernelError(f"--arg {name}: a tensor needs a shape of positive sizes, got [{dims}]")
        if fill is not None and dtype in _FLOAT_STORAGE:
            raise TritonKernelError(f"--arg {name}: only an integer tensor takes a fill value (=N); "
                                    f"{dtype} tensors hold random values")
        return name, TensorArg(dtype, shape, int(fill or 0))
    if value in ("True", "False"):
        return name, value == "True"
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    raise TritonKernelError(f"--arg {name}={value!r}: not a tensor (dtype[shape]), an int, a float or True/False")


def parse_grid(text: str) -> tuple[int, int, int]:
    """`X[,Y[,Z]]` programs along each axis."""
    try:
        dims = [int(d) for d in text.split(",")]
    except ValueError:
        raise TritonKernelError(f"--grid {text!r}: expected up to three positive integers, e.g. 128 or 64,8") from None
    if not 1 <= len(dims) <= 3 or any(d <= 0 for d in dims):
        raise TritonKernelError(f"--grid {text!r}: expected up to three positive integers, e.g. 128 or 64,8")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


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
    """The @triton.jit kernel `FILE.py:KERNEL` names, loaded from its file for compiling."""
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name:
        raise TritonKernelError(f"--triton {spec!r}: expected FILE.py:KERNEL")
    path = Path(path_text)
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
                self.views[-1].view(TENSOR_DTYPES[t.dtype][1])[:] = t.fill
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
    return TritonLaunch(spec, work, {k: v for k, v in code.items() if k != "timeline"}, counts, grid, unroll)


# A compiled loop trip whose global bytes per thread are this close to a whole multiple (2 or more) of the source
# loop's is that many source trips unrolled (an assumption: a looser match would take a partly masked trip for one).
UNROLL_TOLERANCE = 0.1


def unrolled(asm: str, target: triton_build.Target, counts: Counts, threads: int) -> int:
    """How many trips of the kernel's source loop one trip of its compiled loop runs: LLVM unrolls short loops
    (4 times is common for a streaming reduction), which the source trip count does not see. Read off the global
    bytes one thread moves in a compiled trip against what one source trip moves (the interpreter's count); 1
    when they do not say (no loop, bytes the code does not show, no whole multiple)."""
    from compiled import amdgcn_code, sass_code

    moved = (sass_code.loop_bytes(asm) if target.backend == "cuda" else amdgcn_code.loop_bytes(asm))
    trips = sum(w * t for w, t in zip(counts.weights, counts.trips, strict=True))
    if moved is None or trips <= 0:
        return 1
    for compiled_bytes, source_bytes in zip(moved, (counts.load_in_loop, counts.store_in_loop), strict=True):
        per_thread = source_bytes / trips / threads
        if compiled_bytes > 0 and per_thread > 0:
            ratio = compiled_bytes / per_thread
            factor = round(ratio)
            return factor if factor >= 2 and abs(ratio - factor) <= UNROLL_TOLERANCE * factor else 1
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
    program = replace(program, reuse=max(1.0, loads / read) if read else 1.0)
    program = _timed(program, outside, per_trip, cycles_of(gpu.name, kernel, config))
    warps = code["num_warps"]
    return Work(flop_by_dtype=dict(counts.flop_by_dtype), read_bytes=read,
                write_bytes=written, workgroups=programs, threads_per_workgroup=warps * gpu.wave_size,
                lds_bytes_per_workgroup=code["shared_bytes"], registers_per_thread=code["registers"],
                warp_instructions_per_workgroup=(code["prologue_instructions"]
                                                 + busiest * code["loop_instructions"]) * warps,
                program=program, triton_launch=True)


def parse_args(texts: Sequence[str]) -> dict[str, object]:
    """`--arg` values by name; a name given twice is an error."""
    out: dict[str, object] = {}
    for text in texts:
        name, value = parse_arg(text)
        if name in out:
            raise TritonKernelError(f"--arg {name} is given twice")
        out[name] = value
    return out
