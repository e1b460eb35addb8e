"""The compiled code of a companion kernel at one configuration on one GPU: the record every timing reads.

A record is what the compiled code says of one kernel configuration for the GPU's instruction set
(`compiled.triton_build.target_of`): its warps (waves on AMD), registers per thread, shared memory, instructions
per thread outside and inside its loop, and one warp's issue timeline (`compiled.sass_code.warp_timeline` for
SASS, `compiled.amdgcn_code.wave_timeline` for AMDGCN). It comes from one of two places:

- the shipped table (`compiled/data/h200.csv` and `h200_timing.json`): sm_90 code, H100 and H200 alike, compiled
  by the Triton version that compiled the measured kernels (3.6.0, `compiled/data/PROVENANCE.md`);
- otherwise, compiled here on the CPU by the installed Triton at the requested configuration
  (`compiled.companion_sources.case`) and read; kept on disk under the user's cache folder, keyed by the
  companion's kernel sources, the readers' sources, the target and the Triton version.

A user's own kernel (`infersim kernel --triton`, `compiled.triton_kernel`) is added under a name of its own with
`add_case`; its code is compiled and read the same way, keyed by Triton's hash of its source instead.

`kernel_code` returns None where neither can give the code (no Triton or PyTorch to load and compile the
sources, a configuration the sources do not have, code the readers do not handle); `why_not` then says why.
The product then times the kernel from its kind's analytic program and says so (`"program": "analytic"`).
"""

from __future__ import annotations

import csv
import hashlib
import json
from functools import cache
from pathlib import Path

from compiled import triton_build
from compiled.companion_sources import KERNELS_DIR, Case, case
from compiled.disk_cache import kept_json_on_disk
from hwmodels.spec import load_gpu

DATA_DIR = Path(__file__).parent / "data"
# The shipped tables, by instruction set: compiled by the Triton that compiled the measured kernels.
TABLES = {"sm_90": "h200"}
_READERS = ("sass_code.py", "sass_lanes.py", "amdgcn_code.py", "cdna_issue.py", "companion_sources.py",
            "triton_build.py", "kernel_code.py")
_WHY_NOT: dict[tuple[str, str, str], str] = {}
_ADDED: dict[tuple[str, str], Case] = {}  # user kernels by (name, configuration): `add_case`


def add_case(kernel: str, config: str, added: Case) -> None:
    """Make `kernel` at `config` a kernel whose code `kernel_code` gives: `added` is how it compiles. The name must
    say which source it is (the user's kernels are named with Triton's hash of their source)."""
    _ADDED[(kernel, config)] = added


@cache
def _table(name: str) -> dict[tuple[str, str], dict]:
    """The shipped table `name` as records."""
    with open(DATA_DIR / f"{name}_timing.json") as f:
        timings = {(r["kernel"], r["config"]): r for r in json.load(f)["rows"]}
    with open(DATA_DIR / f"{name}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    records = {}
    for row in rows:
        key = (row["kernel"], row["config"])
        timeline = {k: v for k, v in timings.get(key, {}).items() if k not in ("kernel", "config")}
        records[key] = {"kernel": row["kernel"], "config": row["config"], "target": "sm_90",
                        "num_warps": int(row["num_warps"]), "registers": int(row["registers"]),
                        "shared_bytes": int(row["shared_bytes"]),
                        "prologue_instructions": int(row["prologue_instructions"]),
                        "loop_instructions": int(row["loop_instructions"]), "triton": row["triton"],
                        "origin": "table", "timeline": timeline}
    return records


@cache
def _target(gpu_name: str) -> triton_build.Target | None:
    try:
        return triton_build.target_of(load_gpu(gpu_name))
    except ValueError:
        return None


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


@cache
def _sources_digest() -> str:
    """A hash of the companion's kernel sources and of the modules that compile and read them."""
    return _digest(sorted(KERNELS_DIR.glob("*.py")) + [Path(__file__).parent / name for name in _READERS])


@cache
def _readers_digest() -> str:
    """A hash of the modules that compile and read a kernel."""
    return _digest([Path(__file__).parent / name for name in _READERS])


def _read(build: triton_build.Build, target: triton_build.Target) -> tuple[int, int, dict]:
    if target.backend == "cuda":
        from compiled.sass_code import count, warp_timeline

        return *count(build.asm), warp_timeline(build.asm, 32 * build.num_warps)
    from compiled.amdgcn_code import count, wave_timeline

    return *count(build.asm), wave_timeline(build.asm, target.arch)


@kept_json_on_disk("kernel_code", lambda key, *_: key)
def _compiled_record(key: str, target: triton_build.Target, kernel: str, config: str) -> dict:
    c = _ADDED.get((kernel, config)) or case(kernel, config)
    build = triton_build.build(c.fn, c.signature, c.constexprs, c.num_warps, c.aligned, c.num_stages, target)
    prologue, loop, timeline = _read(build, target)
    if target.backend == "cuda":
        from compiled.sass_code import loop_bytes
        stated = None
    else:
        from compiled.amdgcn_code import loop_bytes, loop_unroll
        stated = loop_unroll(build.asm)
    moved = loop_bytes(build.asm)
    return {"kernel": kernel, "config": config, "target": target.arch, "num_warps": build.num_warps,
            "registers": build.registers, "shared_bytes": build.shared_bytes, "prologue_instructions": prologue,
            "loop_instructions": loop, "triton": build.triton, "origin": "compiled", "timeline": timeline,
            # global bytes one thread loads in a trip of the compiled loop (None: no loop, or bytes it does not say)
            "loop_load_bytes": None if moved is None else moved[0],
            # source trips a compiled trip runs, where the code says it (an unrolled loop and its remainder)
            "loop_unroll": stated,
            **({"agprs": build.agprs, "sgprs": build.sgprs} if target.backend == "hip" else {})}


@cache
def kernel_code(gpu_name: str, kernel: str, config: str) -> dict | None:
    """The compiled code of `kernel` at `config` on GPU `gpu_name` (the module docstring says where from), or
    None when there is none (`why_not` says why)."""
    target = _target(gpu_name)
    if target is None:
        _WHY_NOT[(gpu_name, kernel, config)] = f"{gpu_name}'s spec names no instruction set"
        return None
    shipped = TABLES.get(target.arch)
    if shipped is not None and (kernel, config) in _table(shipped):
        return _table(shipped)[(kernel, config)]
    if not triton_build.available():
        _WHY_NOT[(gpu_name, kernel, config)] = "Triton is not installed (pip install 'infersim[triton]')"
        return None
    added = _ADDED.get((kernel, config))
    source = _sources_digest() if added is None else added.fn.cache_key + _readers_digest()
    key = repr((source, target, kernel, config, triton_build.triton_version()))
    try:
        return _compiled_record(key, target, kernel, config)
    except Exception as e:
        _WHY_NOT[(gpu_name, kernel, config)] = f"{kernel} {config!r} for {target.arch}: {e}"
        return None


def why_not(gpu_name: str, kernel: str, config: str) -> str | None:
    """Why `kernel_code` gave no code for this configuration (None: it gave code, or was not asked)."""
    return _WHY_NOT.get((gpu_name, kernel, config))


def can_compile(gpu_name: str) -> bool:
    """Whether compiled code of `gpu_name` can be had at all: a shipped table of its instruction set, or Triton."""
    target = _target(gpu_name)
    return target is not None and (target.arch in TABLES or triton_build.available())
