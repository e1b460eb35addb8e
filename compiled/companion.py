"""Which product kernels are a companion Triton kernel, and what its compiled code says of them.

The companion kernel extension (`companion/kernels/`) implements MLA decode and its merge, the KDA
prefill (intra-chunk substitution and chunk scan), decode and verify recurrences, the QuickReduce codecs, and the
quantized all-reduce's three persistent kernels (`workloads/quickreduce_kernels.py`). A product kernel whose
fields are that kernel's tiles and datatypes is timed from the kernel's code compiled for the GPU at the
configuration the product kernel asks for (its splits, tile columns, codec, and its threads as warps of the GPU's
wave size: `compiled.kernel_code`): the shipped table where it has the configuration, else compiled here. Any
other kernel, or one whose code cannot be had, is timed from its kind's analytic program. `compiled_kernel`
decides, for every command alike.
"""

from __future__ import annotations

from collections.abc import Callable

from compiled.companion_sources import aiter_gemm_config
from compiled.kernel import Compiled, unroll_of
from compiled.kernel_code import kernel_code
from compiled.sass_counts import compiled, cycles_of, has_counts, per_thread, warps_of
from hwmodels.dtypes import Dtype
from hwmodels.spec import load_gpu
from workloads.attention_kernels import MlaDecode
from workloads.kda_kernels import KdaDecode, KdaPrefill, KdaVerify
from workloads.kernel_base import KernelKind, cdiv
from workloads.kernels import Dequantize, Gemm, Quantize
from workloads.quickreduce_kernels import QrGather, QrReduce, QrScatter

# The companion MLA decode kernel's tiles (companion/kernels/mla_decode.py: BLOCK_H 16 query heads, BLOCK_N
# 32 latent rows, 4 warps) and the latent widths it was compiled for (DeepSeek-V3/Kimi's 512 + 64), in bf16.
MLA_HEADS_PER_WORKGROUP, MLA_BLOCK_N, MLA_KV_LORA, MLA_ROPE_DIM = 16, 32, 512, 64
KDA_CHUNK, KDA_DIM = 64, 128  # the companion KDA kernels' chunk and head dimension (Kimi Linear's)

Entry = tuple[str, str, int]  # (compiled kernel, configuration, loop trips of the launch)


def _mla_entries(kernel: MlaDecode) -> list[Entry | None] | None:
    """The attention kernel (a split loops once per block_n rows of its share) and, split, the merge (once per
    split that holds rows); the padding copy is not a companion kernel."""
    if (kernel.heads_per_workgroup, kernel.block_n, kernel.kv_lora, kernel.rope_dim) != (
            MLA_HEADS_PER_WORKGROUP, MLA_BLOCK_N, MLA_KV_LORA, MLA_ROPE_DIM):
        return None
    if kernel.kv_dtype is not Dtype.BF16 or kernel.q_dtype is not Dtype.BF16 or kernel.contexts:
        return None
    splits, block_n = kernel.num_splits, kernel.block_n
    per_split = max(cdiv(cdiv(kernel.context, splits), block_n) * block_n, block_n)  # rows, as _split_rows
    config = f"splits={splits} even={kernel.padded_heads % MLA_HEADS_PER_WORKGROUP == 0}"
    entries: list[Entry | None] = [("mla_decode", config, cdiv(per_split, block_n))]
    if splits > 1:
        entries.append(("mla_merge", config, cdiv(kernel.context, per_split)))
    if kernel.padded_heads > kernel.heads:
        entries.insert(0, None)
    return entries


def _kda_prefill_entries(kernel: KdaPrefill) -> list[Entry | None] | None:
    """The intra-chunk forward substitution loops chunk - 1 times, the scan once per chunk."""
    if (kernel.chunk, kernel.key_dim, kernel.value_dim) != (KDA_CHUNK, KDA_DIM, KDA_DIM):
        return None
    if kernel.grouped_scan or not kernel.stores_qg:
        return None
    return [("kda_intra", f"chunk={kernel.chunk}", kernel.chunk - 1),
            ("kda_scan", f"chunk={kernel.chunk} bv={kernel.block_v}", kernel.chunks)]


def _kda_decode_entries(kernel: KdaDecode) -> list[Entry | None] | None:
    """The fused recurrence of one token: no loop (T = 1 is a constant of the compiled code)."""
    if not kernel.fused or (kernel.key_dim, kernel.value_dim) != (KDA_DIM, KDA_DIM):
        return None
    return [("kda_recurrent", f"bv={kernel.block_v} store=False T=1", 0)]


def _kda_verify_entries(kernel: KdaVerify) -> list[Entry | None] | None:
    """The recurrence loops once per verified position."""
    if kernel.head_dim != KDA_DIM:
        return None
    return [("kda_recurrent", f"bv={kernel.tile_cols} store={kernel.store_states}", kernel.positions)]


# AITER's Triton block-scaled FP8 GEMM as the companion ports it (companion/kernels/aiter_gemm.py): its generic
# gfx942 configuration's tiles, one scale group a k-step
AITER_GEMM_TILE = (128, 128, 128)


def _aiter_gemm_entries(kernel: Gemm) -> list[Entry | None] | None:
    """AITER's kernel at its generic configuration: one launch looping once per 128-deep slice of k."""
    tile = (kernel.tile_m, kernel.tile_n, kernel.tile_k)
    if (not kernel.aiter_triton or kernel.dtype is not Dtype.FP8 or tile != AITER_GEMM_TILE or kernel.split_k != 1
            or kernel.scale_group_k != kernel.tile_k or kernel.k % kernel.tile_k):
        return None
    return [("aiter_gemm_blockscale", aiter_gemm_config(kernel.m, kernel.n, kernel.k), kernel.k // kernel.tile_k)]


def _codec_entries(kernel: Quantize | Dequantize) -> list[Entry | None]:
    name = "triton_dequantize" if isinstance(kernel, Dequantize) else "triton_quantize"  # Dequantize is a Quantize
    return [(name, kernel.codec.value, 0)]


# The quantized all-reduce's port kernels and their compiled names (companion/kernels/allreduce.py)
PORT_KERNELS = {QrScatter: "qr_scatter", QrReduce: "qr_reduce", QrGather: "qr_gather"}


def _port_kernel(kernel: QrScatter | QrReduce | QrGather, gpu_name: str) -> Compiled | None:
    """A persistent port kernel told its compiled code: each program issues the tile loop's body once per tile it
    owns (`per_thread` = (0, per tile)); left out is each program's prologue (the flag waits and releases, 77-210
    instructions a thread, run once by each of at most 1024 programs: under a microsecond of issue over the GPU)."""
    name, config = PORT_KERNELS[type(kernel)], kernel.codec.value
    if not has_counts(gpu_name, name, config) or kernel.threads != 32 * warps_of(gpu_name, name, config):
        return None
    _, per_tile = per_thread(gpu_name, name, config)
    _, registers = compiled(gpu_name, name, config)
    _, trip_cycles, _, trip_loads, by_warps, *_ = cycles_of(gpu_name, name, config)  # per tile, no prologue
    (work,) = kernel.launches()
    warps = warps_of(gpu_name, name, config)
    return Compiled(kernel, (work.program.trips * per_tile * warps,), (registers,), ((0, per_tile),),
                    ((0.0, trip_cycles, 0.0, trip_loads, by_warps),))


ENTRIES: dict[type, Callable[..., list[Entry | None] | None]] = {
    MlaDecode: _mla_entries, KdaPrefill: _kda_prefill_entries, KdaDecode: _kda_decode_entries,
    KdaVerify: _kda_verify_entries, Quantize: _codec_entries, Dequantize: _codec_entries,
    Gemm: _aiter_gemm_entries,
}
# Kernels whose compiled loop may run several trips of the source loop (LLVM unrolls the AITER GEMM's by 2 on
# gfx942): the unroll is read off the compiled code (`_unroll`); the others' loops are taken as compiled one to one.
UNROLLED_KERNELS = ("aiter_gemm_blockscale",)


# The warps each companion kernel is launched with where the product kernel does not say otherwise
# (companion/kernels/: MLA decode 4, the KDA recurrences 4 (FLA's), the KDA prefill 8, the codecs 8).
DEFAULT_WARPS = {"mla_decode": 4, "kda_recurrent": 4, "kda_intra": 8, "kda_scan": 8, "triton_quantize": 8,
                 "triton_dequantize": 8, "aiter_gemm_blockscale": 4}


def _with_warps(entries: list[Entry | None], threads: int | None, wave: int) -> list[Entry | None] | None:
    """The entries with the main kernel's configuration naming its warps where they are not its default: a
    workgroup of `threads` threads is threads / wave warps (waves on AMD) of the compiled kernel. None when the
    threads are not a whole number of warps."""
    if threads is None or threads % wave:
        return None
    out = list(entries)
    for i, entry in enumerate(out):
        if entry is None or entry[0] not in DEFAULT_WARPS:
            continue
        name, config, trips = entry
        if threads // wave != DEFAULT_WARPS[name]:
            out[i] = (name, f"{config} warps={threads // wave}", trips)
    return out


def _entries(kernel: KernelKind, gpu_name: str) -> list[Entry | None] | None:
    """The compiled kernel, configuration and trips of each launch of `kernel` on `gpu_name` (None for a launch
    that is no companion kernel); None when the kernel is not timed from compiled code there."""
    entries_of = ENTRIES.get(type(kernel))
    if entries_of is None or not has_counts(gpu_name):
        return None
    entries = entries_of(kernel)
    if entries is None or len(entries) != len(kernel.launches()):
        return None
    entries = _with_warps(entries, getattr(kernel, "threads", None), load_gpu(gpu_name).wave_size)
    if entries is None:
        return None
    if not all(has_counts(gpu_name, name, config) for name, config, _ in (e for e in entries if e is not None)):
        return None
    return entries


def compiled_kernel(kernel: KernelKind, gpu_name: str) -> Compiled | None:
    """`kernel` told its compiled code on `gpu_name`, when it is a companion kernel whose code for this GPU can
    be had at its configuration (every launch counted); None when it is timed from its analytic program."""
    if type(kernel) in PORT_KERNELS:
        return _port_kernel(kernel, gpu_name) if has_counts(gpu_name) else None  # type: ignore[arg-type]
    entries = _entries(kernel, gpu_name)
    if entries is None:
        return None
    unroll = (1,) * len(entries)
    if any(e is not None and e[0] in UNROLLED_KERNELS for e in entries):
        unroll = tuple(1 if e is None else _unroll(gpu_name, e, w)
                       for e, w in zip(entries, kernel.launches(), strict=True))
    counts = [(None, None) if e is None else compiled(gpu_name, e[0], e[1], -(-e[2] // u))
              for e, u in zip(entries, unroll, strict=True)]
    return Compiled(kernel, tuple(i for i, _ in counts), tuple(r for _, r in counts),
                    tuple(None if e is None else per_thread(gpu_name, e[0], e[1]) for e in entries),
                    tuple(None if e is None else cycles_of(gpu_name, e[0], e[1]) for e in entries),
                    unroll if any(u > 1 for u in unroll) else ())


def _unroll(gpu_name: str, entry: Entry, work) -> int:
    """Trips of the source loop one trip of the compiled loop runs: the factor the code states (an unrolled loop and
    its remainder), else the global bytes a thread loads in a compiled trip (`kernel_code`'s `loop_load_bytes`) over
    what the launch's program loads a trip per thread (`unroll_of`); 1 for the kernels not in `UNROLLED_KERNELS`."""
    if entry[0] not in UNROLLED_KERNELS or work.program is None or not work.program.trip_load_bytes:
        return 1
    code = kernel_code(gpu_name, entry[0], entry[1])
    if code.get("loop_unroll"):  # an unrolled loop and its remainder: the code says the factor itself
        return code["loop_unroll"]
    return unroll_of(code.get("loop_load_bytes") or 0.0,
                     work.program.trip_load_bytes / work.threads_per_workgroup)


def compiled_code(kernel: KernelKind, gpu_name: str) -> list[dict]:
    """What the compiled code of each of `kernel`'s companion launches on `gpu_name` is, for reports: the kernel,
    its configuration, the instruction set, where the code came from (the shipped table or compiled here) and by
    which Triton, warps (waves on AMD), registers per thread (AMD: VGPRs and AGPRs), shared memory (LDS) bytes and
    instructions per thread outside and inside its loop. Empty when the kernel is timed analytically."""
    if type(kernel) in PORT_KERNELS:
        entries: list[Entry | None] | None = [(PORT_KERNELS[type(kernel)], kernel.codec.value, 0)]  # type: ignore
        if not has_counts(gpu_name, *entries[0][:2]):
            return []
    else:
        entries = _entries(kernel, gpu_name)
    found = []
    for entry in entries or []:
        if entry is None:
            continue
        code = kernel_code(gpu_name, entry[0], entry[1])
        found.append({k: v for k, v in code.items() if k != "timeline"})
    return found
