"""Triton kernels compiled on the CPU for a GPU's instruction set: the compiled code the product times.

Triton compiles a `@triton.jit` function for a target it names by backend and architecture without the GPU being
present: for NVIDIA it runs the `ptxas` it ships and this module disassembles the cubin with the `nvdisasm` and
`cuobjdump` it ships too (SASS with each instruction's control code, registers per thread); for AMD its LLVM
backend writes the AMDGCN assembly, whose metadata gives the VGPRs, AGPRs, SGPRs and LDS bytes. A GPU's target is
read from its spec's `arch` ("hopper (sm_90)", "cdna4 (gfx950)"): sm_90 for H100/H200, sm_100/sm_103 for
B200/B300, gfx942 for MI300X/MI325X, gfx950 for MI355X.

A build is kept on disk (`compiled.disk_cache`), keyed by the kernel's source (Triton's own cache key of the
function and everything it calls), the configuration (signature, constants, specialisations, warps, stages), the
target and the Triton version, so only the first process that asks for a configuration compiles it. Triton is
imported inside the functions that compile: without it `available()` is False and the product times every kernel
from its analytic program. A process that imported Triton under its interpreter (TRITON_INTERPRET=1, as the test
run of the kernels on the CPU does) holds the language's own @triton.jit functions as interpreted ones, which the
compiler cannot trace: there each build runs in a child process with the variable unset (`language_interpreted`).
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from functools import cache

from compiled.disk_cache import kept_json_on_disk
from hwmodels.spec import GPU


@dataclass(frozen=True)
class Target:
    """A GPU instruction set Triton compiles for."""

    backend: str  # "cuda" or "hip"
    arch: str  # "sm_90", "sm_100", "sm_103", "gfx942", "gfx950"

    @property
    def warp_size(self) -> int:
        return 32 if self.backend == "cuda" else 64

    def triton_target(self):
        from triton.backends.compiler import GPUTarget

        arch: int | str = int(self.arch[3:]) if self.backend == "cuda" else self.arch
        return GPUTarget(self.backend, arch, self.warp_size)


def target_of(gpu: GPU) -> Target:
    """The instruction set of `gpu`, from the `(sm_NN)` or `(gfxNNN)` of its spec's `arch`."""
    found = re.search(r"\((sm_\d+|gfx\d+)\)", gpu.arch)
    if found is None:
        raise ValueError(f"{gpu.name}: its spec's arch {gpu.arch!r} names no instruction set "
                         "(valid: '... (sm_NN)' or '... (gfxNNN)')")
    arch = found.group(1)
    return Target("cuda" if arch.startswith("sm_") else "hip", arch)


@cache
def triton_version() -> str | None:
    """The installed Triton's version, or None without Triton."""
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def available() -> bool:
    """Whether kernels can be compiled here (Triton is installed)."""
    return triton_version() is not None


@dataclass(frozen=True)
class Build:
    """One kernel at one configuration compiled for one target: its code and the resources it holds."""

    target: str  # Target.arch
    asm: str  # SASS (`nvdisasm -c -hex`) or AMDGCN assembly
    registers: int  # per thread: NVIDIA registers; AMD VGPRs and AGPRs allocated together (the unified file)
    shared_bytes: int  # shared memory / LDS per workgroup (Triton's metadata)
    num_warps: int
    triton: str  # the compiler's version
    sgprs: int = 0  # AMD: scalar registers per wave
    agprs: int = 0  # AMD: accumulation registers per lane (within `registers`)

    def as_json(self) -> dict:
        return asdict(self)


def compile_kernel(fn, signature: dict[str, str], constexprs: dict, num_warps: int, aligned: tuple[str, ...] = (),
                   num_stages: int = 3, target: Target = Target("cuda", "sm_90")):
    """Triton's compiled kernel of `fn` for `target`: pointers and the integers named in `aligned` specialised as
    divisible by 16, as the JIT specialises them at launch."""
    import triton
    from triton.compiler import ASTSource

    names = list(signature)
    divisible = [n for n, t in signature.items() if t.startswith("*")] + list(aligned)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=target.triton_target(),
                          options={"num_warps": num_warps, "num_stages": num_stages,
                                                                  "enable_fp_fusion": True})  # the JIT default


def disassemble(compiled) -> tuple[str, int]:
    """(SASS text with each instruction's two 64-bit words, `nvdisasm -hex`; registers per thread)."""
    import triton

    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    try:
        sass = subprocess.run([f"{tools}/nvdisasm", "-c", "-hex", f.name], capture_output=True, text=True,
                              check=True).stdout
        usage = subprocess.run([f"{tools}/cuobjdump", "-res-usage", f.name], capture_output=True, text=True,
                               check=True).stdout
    finally:
        os.unlink(f.name)
    return sass, int(re.search(r"REG:(\d+)", usage).group(1))


def _amd_registers(amdgcn: str) -> tuple[int, int, int]:
    """(VGPRs and AGPRs allocated per lane, AGPRs, SGPRs) from the kernel descriptor of AMDGCN assembly."""
    def field(name: str, default: int | None = None) -> int:
        found = re.search(rf"^\s*{re.escape(name)}:?\s+(\d+)", amdgcn, re.M)
        if found is None:
            if default is None:
                raise ValueError(f"the AMDGCN assembly has no {name}")
            return default
        return int(found.group(1))

    return field(".vgpr_count"), field(".agpr_count", 0), field(".sgpr_count")  # no AGPR count: none used


def language_interpreted() -> bool:
    """Whether this process imported Triton's language under its interpreter (TRITON_INTERPRET=1 at import, as a
    test run of kernels on the CPU does): the language's own @triton.jit functions (tl.sum, tl.cdiv, ...) are then
    interpreted functions for the life of the process, and a kernel that calls one cannot be compiled here."""
    from triton.language import standard
    from triton.runtime.jit import JITFunction

    return not isinstance(standard.sum, JITFunction)


# A child process that compiles one kernel with the language imported as the compiler needs it: reads the pickled
# (file, kernel name, signature, constants, warps, aligned, stages, target) from stdin, writes the pickled Build
# or the compiler's error.
_CHILD = """
import importlib.util, pickle, sys
from compiled.triton_build import _build
path, name, signature, constexprs, num_warps, aligned, num_stages, target = pickle.load(sys.stdin.buffer)
spec = importlib.util.spec_from_file_location("_infersim_compiled_kernel", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    found = _build(getattr(module, name), signature, constexprs, num_warps, aligned, num_stages, target)
except Exception as e:  # the compiler's own message goes back to the parent, which raises it
    found = RuntimeError(str(e))
sys.stdout.buffer.write(pickle.dumps(found))
"""


def _build_in_child(fn, signature: dict[str, str], constexprs: dict, num_warps: int, aligned: tuple[str, ...],
                    num_stages: int, target: Target) -> Build:
    """`_build` in a fresh Python process without TRITON_INTERPRET, the kernel loaded there from its file."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    payload = pickle.dumps((fn.fn.__code__.co_filename, fn.fn.__name__, signature, constexprs, num_warps, aligned,
                            num_stages, target))
    done = subprocess.run([sys.executable, "-c", _CHILD], input=payload, capture_output=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the child process that compiles failed: {done.stderr.decode(errors='replace')[-2000:]}")
    found = pickle.loads(done.stdout)
    if isinstance(found, Exception):
        raise found
    return found


def _build(fn, signature: dict[str, str], constexprs: dict, num_warps: int, aligned: tuple[str, ...],
           num_stages: int, target: Target) -> Build:
    if language_interpreted():
        return _build_in_child(fn, signature, constexprs, num_warps, aligned, num_stages, target)
    compiled = compile_kernel(fn, signature, constexprs, num_warps, aligned, num_stages, target)
    shared = int(compiled.metadata.shared)
    if target.backend == "cuda":
        sass, registers = disassemble(compiled)
        return Build(target.arch, sass, registers, shared, num_warps, triton_version() or "")
    amdgcn = compiled.asm["amdgcn"]
    registers, agprs, sgprs = _amd_registers(amdgcn)
    return Build(target.arch, amdgcn, registers, shared, num_warps, triton_version() or "", sgprs, agprs)


@kept_json_on_disk("triton_builds", lambda key, *_: key)
def _kept_build(key: str, fn, signature, constexprs, num_warps, aligned, num_stages, target) -> dict:
    return _build(fn, dict(signature), dict(constexprs), num_warps, aligned, num_stages, target).as_json()


def build(fn, signature: dict[str, str], constexprs: dict, num_warps: int, aligned: tuple[str, ...] = (),
          num_stages: int = 3, target: Target = Target("cuda", "sm_90")) -> Build:
    """`fn` compiled for `target` at this configuration (kept on disk: compiled once per configuration)."""
    key = repr((fn.cache_key, sorted(signature.items()), sorted((k, repr(v)) for k, v in constexprs.items()),
                num_warps, tuple(aligned), num_stages, target, triton_version()))
    kept = _kept_build(key, fn, tuple(signature.items()), tuple(sorted(constexprs.items())), num_warps,
                       tuple(aligned), num_stages, target)
    return Build(**kept)
