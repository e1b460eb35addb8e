"""Tile configurations of the tiled kernels, per GPU architecture family, sized to fit the GPU.

Each tiled kernel kind (flash-attention prefill, absorbed-MLA decode, dense GEMM, grouped MoE GEMM)
starts from the tile the library a serving engine runs on that architecture family uses, then halves
its tile dimensions (or pipeline stages) in a fixed order until the workgroup fits:

- LDS (shared memory): the kernel's own count of LDS per workgroup (its `launches()`), at most
  `lds_max_per_workgroup_bytes` (and `lds_per_cu_bytes`);
- threads: at most `max_threads_per_workgroup`;
- registers: the fp32 accumulator tile spread over the workgroup's threads, at most
  `max_registers_per_thread` per thread (a lower bound on the kernel's registers).

A field the caller pins (an explicit `--param`, say) is never changed. A configuration that does not
fit is never returned: if the smallest legal tile (16 rows or columns, one MMA tile; one stage) does
not fit, `ValueError` names the kernel, the GPU and the limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any

from hwmodels.dtypes import Dtype
from hwmodels.spec import GPU, Vendor
from workloads import gemm_library
from workloads.kernel_base import KernelKind
from workloads.kernels import AttentionPrefill, Gemm, MlaDecode, MoeGemm

MIN_TILE = 16  # rows or columns of one matrix-core tile (MFMA 16x16, WGMMA m64 split over 4 warps)
_STAGE_BITS = 1024  # one pipeline stage spans 128 bytes of K per row (64 bf16, 128 fp8, 256 fp4 values)


class ArchFamily(Enum):
    """The architecture families whose libraries set the starting tiles."""

    CDNA3 = "cdna3"  # MI300X: 64 KiB LDS per CU
    CDNA4 = "cdna4"  # MI355X: 160 KiB LDS per CU
    HOPPER = "hopper"  # H100/H200: 227 KiB shared memory per block
    BLACKWELL = "blackwell"  # B200/B300: 227 KiB shared memory per block, accumulators in tensor memory


def arch_family(gpu: GPU) -> ArchFamily:
    """The family of a GPU from its `arch` text ("cdna4 (gfx950)", "hopper (sm_90)", ...)."""
    arch = gpu.arch.lower()
    for family, words in ((ArchFamily.CDNA4, ("cdna4", "gfx950")), (ArchFamily.CDNA3, ("cdna3", "gfx94")),
                          (ArchFamily.BLACKWELL, ("blackwell", "sm_10", "sm_11", "sm_12")),
                          (ArchFamily.HOPPER, ("hopper", "sm_90"))):
        if any(w in arch for w in words):
            return family
    # Assumption: an unlisted GPU starts from the newest family of its vendor; the fit loop sizes it.
    return ArchFamily.CDNA4 if gpu.vendor is Vendor.AMD else ArchFamily.BLACKWELL


@dataclass(frozen=True)
class TileConfig:
    """The tile fields of one kernel kind on one GPU, the LDS they take, and why they were chosen."""

    kernel: str  # the kernel kind's CLI name
    gpu: str
    family: ArchFamily
    values: tuple[tuple[str, int], ...]  # (field, value) pairs passed to the kernel's constructor
    lds_bytes: int  # per workgroup, as the kernel counts it
    lds_limit_bytes: int
    accumulator_registers: int  # fp32 accumulator registers per thread (a lower bound)
    why: str

    @property
    def fields(self) -> dict[str, int]:
        return dict(self.values)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields, the LDS against the limit, the family and the reason."""
        return {**self.fields, "lds_bytes": self.lds_bytes, "lds_limit_bytes": self.lds_limit_bytes,
                "accumulator_registers": self.accumulator_registers, "family": self.family.value,
                "why": self.why}


@dataclass(frozen=True)
class _Limits:
    """The hashable part of a GPU that tile choice reads (a GPU holds mappings, so it is not hashable)."""

    name: str
    family: ArchFamily
    lds_bytes: int
    max_threads: int
    max_registers: int
    wave_size: int
    lds_max_per_workgroup_bytes: int
    compute_units: int


def _limits(gpu: GPU) -> _Limits:
    found = _LIMITS.get(id(gpu))
    if found is None or found[0] is not gpu:
        found = _LIMITS[id(gpu)] = (gpu, _read_limits(gpu))
        _GPU_OF.setdefault(found[1], gpu)
    return found[1]


_LIMITS: dict[int, tuple[GPU, _Limits]] = {}  # by GPU object, held so that its id is not reused
_GPU_OF: dict[_Limits, GPU] = {}  # a GPU of those limits, for the choices that time their candidates


def _read_limits(gpu: GPU) -> _Limits:
    family = arch_family(gpu)
    # Blackwell's tcgen05 MMAs accumulate in tensor memory (256 KiB per SM), not in registers: the
    # register bound does not apply there (assumption: tensor memory does not bind these tiles).
    registers = 1 << 30 if family is ArchFamily.BLACKWELL else gpu.max_registers_per_thread
    return _Limits(gpu.name, family, min(gpu.lds_max_per_workgroup_bytes, gpu.lds_per_cu_bytes),
                   gpu.max_threads_per_workgroup, registers, gpu.wave_size, gpu.lds_max_per_workgroup_bytes,
                   gpu.compute_units)


# ---- starting tiles: the library each family's serving engines run ----------------------------------

def _attention_start(family: ArchFamily, head_dim: int) -> tuple[dict[str, int], str]:
    """(block_m, block_n) of the flash-attention forward kernel, with its source."""
    if family is ArchFamily.HOPPER:
        # FlashAttention-3 hopper/tile_size.h tile_size_fwd_sm90 (16-bit, causal): hdim <= 64: 192x128;
        # <= 128: 128x128; <= 192 (v <= 128): 128x128; <= 256: 128x80 ("hits the limit of smem").
        # Above 256 no dense FA3 tile exists; assumption: its 64x64 tile for 512-wide V.
        if head_dim <= 96:
            return {"block_m": 192, "block_n": 128}, "FlashAttention-3 sm90 tile for hdim <= 96"
        if head_dim <= 192:
            return {"block_m": 128, "block_n": 128}, "FlashAttention-3 sm90 tile for hdim <= 192"
        if head_dim <= 256:
            return {"block_m": 128, "block_n": 80}, "FlashAttention-3 sm90 tile for hdim 256"
        return {"block_m": 64, "block_n": 64}, "assumption: FlashAttention-3's 64x64 tile for 512-wide V"
    if family is ArchFamily.BLACKWELL:
        # FlashAttention-4 (flash_attn/cute/flash_fwd_sm100.py) and the CUTLASS sm100 FMHA that FlashInfer
        # and TRT-LLM build on: 128 query rows by 128 key rows per CTA.
        return {"block_m": 128, "block_n": 128}, "FlashAttention-4 / CUTLASS sm100 FMHA 128x128 tile"
    # CDNA3 and CDNA4: composable_kernel ck_tile FMHA forward (example/ck_tile/01_fmha, used by aiter):
    # bm0 = 128 query rows; bn0 = 64 key rows for hdim <= 64, 128 above; 4 waves.
    if head_dim <= 64:
        return {"block_m": 128, "block_n": 64}, "ck_tile FMHA forward tile for hdim <= 64"
    return {"block_m": 128, "block_n": 128}, "ck_tile FMHA forward tile for hdim >= 128"


def _attention_threads(family: ArchFamily, block_m: int, wave_size: int) -> int:
    """Hopper: one consumer warpgroup per 64 query rows plus a producer warpgroup (FA3's warp specialization);
    Blackwell: 4 warpgroups (FA4: 2 softmax, correction, MMA/load/epilogue warps; assumption);
    CDNA: 4 waves (ck_tile FMHA), one 16-row MFMA strip per wave below 64 rows."""
    if family is ArchFamily.HOPPER:
        return (max(1, block_m // 64) + 1) * 128
    if family is ArchFamily.BLACKWELL:
        return 512
    return min(4, max(1, block_m // MIN_TILE)) * wave_size


def _mla_start(family: ArchFamily) -> tuple[dict[str, int], str]:
    """(heads_per_workgroup, block_n, threads) of the absorbed-MLA decode kernel, with its source."""
    if family is ArchFamily.HOPPER:
        # DeepSeek FlashMLA (csrc/kernels, sm90): 64 query rows (heads x tokens) per block, 64-row KV pages,
        # two math warpgroups (256 threads; assumption: the producer threads are not counted).
        return {"heads_per_workgroup": 64, "block_n": 64, "threads": 256}, "FlashMLA sm90 64-row blocks"
    if family is ArchFamily.BLACKWELL:
        # CUTLASS example 77_blackwell_mla (vLLM's CUTLASS_MLA backend pads heads to 128): 128 heads by
        # 128 latent rows per CTA; assumption: 256 threads (the math warps of its warp-specialized kernel).
        return ({"heads_per_workgroup": 128, "block_n": 128, "threads": 256},
                "CUTLASS sm100 MLA 128-head x 128-row tile")
    # aiter's MLA decode (asm kernel mla_dec_stage1_*_subQ16: 16 query heads per workgroup); assumption:
    # 64 latent rows per step and 4 waves, as the Triton decode kernel vLLM runs on ROCm.
    return ({"heads_per_workgroup": 16, "block_n": 64, "threads": 4 * 64},
            "aiter MLA decode: 16 heads per workgroup")


def _stage_k(dtype: Dtype) -> int:
    """K values of one 128-byte stage row, a power of two (64 bf16, 128 fp8, 256 fp4, 128 fp6)."""
    values = max(1, _STAGE_BITS // dtype.bits)
    return 1 << (values.bit_length() - 1)


def _gemm_start(family: ArchFamily, dtype: Dtype) -> tuple[dict[str, int], str]:
    """(tile_m, tile_n, tile_k, stages, threads) of the dense GEMM, with its source."""
    k = _stage_k(dtype)
    if family is ArchFamily.HOPPER:
        # CUTLASS sm90 warp-specialized cooperative GEMM (examples/48_hopper_warp_specialized_gemm):
        # 128x128x64 (16-bit; 128 B of K per stage), 2 consumer warpgroups + 1 producer. Assumption: 4
        # stages (StageCountAuto fits up to 7 in 227 KiB; the kernels cuBLAS picks for large shapes use 4+).
        return ({"tile_m": 128, "tile_n": 128, "tile_k": k, "stages": 4, "threads": 384},
                "CUTLASS sm90 warp-specialized 128x128 tile")
    if family is ArchFamily.BLACKWELL:
        # CUTLASS sm100 1-SM UMMA GEMM: M=128 per CTA, N up to 256, accumulators in tensor memory.
        # Assumption: 128x256 with 4 stages and 256 threads (what cuBLASLt reports for large bf16 shapes).
        return ({"tile_m": 128, "tile_n": 256, "tile_k": k, "stages": 4, "threads": 256},
                "CUTLASS sm100 UMMA 128x256 tile")
    # CDNA: ck_tile universal GEMM, compute pipeline V3 (example/ck_tile/03_gemm): 256x256 macro tile,
    # 128 B of K per stage, 2x2 waves; assumption: 2 LDS stages where they fit (CDNA4), 1 on CDNA3.
    return ({"tile_m": 256, "tile_n": 256, "tile_k": k, "stages": 2, "threads": 4 * 64},
            "ck_tile universal GEMM 256x256 tile")


def moe_tile_m(tokens_per_expert: int) -> int:
    """vLLM fused-MoE picks BLOCK_SIZE_M by tokens per expert: 16, 32 or 64 (assumption: its default configs)."""
    return 16 if tokens_per_expert <= 16 else 32 if tokens_per_expert <= 32 else 64


def _moe_start(family: ArchFamily, dtype: Dtype, m: int) -> tuple[dict[str, int], str]:
    """(tile_m, tile_n, tile_k, stages, threads) of the grouped expert GEMM with `m` rows, with its source."""
    if family in (ArchFamily.HOPPER, ArchFamily.BLACKWELL):
        # vLLM fused-MoE Triton configs tuned for H100/H200 (fused_moe/configs/*NVIDIA_H*.json): BLOCK_SIZE_N
        # 128, BLOCK_SIZE_K 128 (fp8), num_warps 4, num_stages 3-4. Assumption: the same on Blackwell.
        return ({"tile_m": m, "tile_n": 128, "tile_k": _stage_k(dtype), "stages": 3, "threads": 4 * 32},
                "vLLM fused-MoE Triton config")
    # AITER's CK two-stage MoE GEMMs (ROCm/aiter csrc/py_itfs_ck/moe_ck_2stages_gemm_impl, the instances of
    # CK_MOE_STAGE2_GEMM_DEFINE(MPerBlock, 128 / sizeof(A0DataType), MWaves, NWaves)): 128 bytes of K a stage, row
    # tiles of 32 to 128 (16 is not built), 4 waves; assumption: 128 output columns and 2 LDS stages, as the
    # CK universal pipeline the dense GEMM above uses.
    return ({"tile_m": max(32, m), "tile_n": 128, "tile_k": _stage_k(dtype), "stages": 2, "threads": 4 * 64},
            "AITER CK two-stage MoE GEMM")


# ---- the fit loop -------------------------------------------------------------------------------------

# Halving order per kind: (field, floor). Each step halves its field down to its floor while the tile
# does not fit; narrower key/column tiles go first (they cost the least reuse), then rows, then below
# the library's floors down to one MMA tile.
_ATTENTION_ORDER = (("block_n", 32), ("block_m", 64), ("block_n", MIN_TILE), ("block_m", MIN_TILE))
_MLA_ORDER = (("block_n", 32), ("heads_per_workgroup", MIN_TILE), ("block_n", MIN_TILE))
_GEMM_ORDER = (("stages", 1), ("tile_n", 64), ("tile_m", 64), ("tile_k", MIN_TILE), ("tile_n", MIN_TILE),
               ("tile_m", MIN_TILE))


def _half(field: str, value: int, floor: int) -> int:
    if field == "stages":
        return max(floor, value - 1) if value > 2 else max(floor, value // 2)
    return max(floor, value // 2 // MIN_TILE * MIN_TILE)  # stay a whole number of MMA tiles


@dataclass(frozen=True)
class _Fit:
    lds: int
    registers: int
    threads: int


def _fit(kind: str, limits: _Limits, start: dict[str, int], source: str, pinned: Mapping[str, int],
         order: tuple[tuple[str, int], ...], measure: Callable[[dict[str, int]], _Fit],
         threads_for: Callable[[dict[str, int]], int] | None = None) -> TileConfig:
    """Shrink `start` (with `pinned` fields held) along `order` until LDS, threads and registers fit."""
    config = {**start, **pinned}
    halved: dict[str, tuple[int, int]] = {}  # field -> (library value, final value), in halving order

    def sized(c: dict[str, int]) -> dict[str, int]:
        if threads_for is not None and "threads" not in pinned:
            c = {**c, "threads": threads_for(c)}
        if "threads" not in pinned and c.get("threads", 0) > limits.max_threads:
            c = {**c, "threads": limits.max_threads // limits.wave_size * limits.wave_size}
        return c

    bound: dict[str, None] = {}  # the limits that made the loop shrink, in order met

    def problem(c: dict[str, int]) -> str | None:
        got = measure(c)
        if got.threads > limits.max_threads:
            bound[f"{limits.max_threads} threads"] = None
            return f"{got.threads} threads per workgroup, over the limit of {limits.max_threads}"
        if got.lds > limits.lds_bytes:
            bound[f"{_kib(limits.lds_bytes)} LDS"] = None
            return f"{got.lds} B of LDS per workgroup, over the limit of {_kib(limits.lds_bytes)}"
        if got.registers > limits.max_registers:
            bound[f"{limits.max_registers} registers per thread"] = None
            return f"{got.registers} accumulator registers per thread, over the limit of {limits.max_registers}"
        return None

    config = sized(config)
    why = problem(config)
    for field, floor in order:
        if field in pinned:
            continue
        while why is not None and config[field] > floor:
            before = config[field]
            config = sized({**config, field: _half(field, before, floor)})
            halved[field] = (halved.get(field, (before, 0))[0], config[field])
            why = problem(config)
        if why is None:
            break
    if why is not None:
        held = f" with {', '.join(f'{k}={v}' for k, v in pinned.items())} held" if pinned else ""
        raise ValueError(f"{kind} does not fit on {limits.name}{held}: the smallest tile "
                         f"({', '.join(f'{k}={v}' for k, v in config.items())}) still needs {why}")
    got = measure(config)
    steps = ", ".join(f"{field} {first}\u2192{last}" for field, (first, last) in halved.items())
    reason = f"fits {' and '.join(bound)} after halving {steps}" if halved else "library default"
    if pinned:
        reason += f"; {', '.join(sorted(pinned))} set by the caller"
    return TileConfig(kind, limits.name, limits.family, tuple(config.items()), got.lds, limits.lds_bytes,
                      got.registers, f"{reason} ({source})")


def _kib(value: int) -> str:
    return f"{value // 1024} KiB" if value % 1024 == 0 else f"{value} B"


@lru_cache(maxsize=4096)
def _lds(kernel: KernelKind) -> int:
    """LDS per workgroup of the kernel's largest launch, as the kernel counts it (kept by kernel: tile choice asks it
    of the same few configurations for every new shape it tiles)."""
    return max((int(w.lds_bytes_per_workgroup) for w in kernel.launches()), default=0)


def _pinned(values: Mapping[str, int] | None, allowed: Collection[str]) -> dict[str, int]:
    return {k: v for k, v in (values or {}).items() if k in allowed}


# ---- one function per tiled kind ----------------------------------------------------------------------

def attention_tiles(gpu: GPU, *, head_dim: int, dtype: Dtype = Dtype.BF16,
                    pinned: Mapping[str, int] | None = None) -> TileConfig:
    """block_m, block_n and threads of `AttentionPrefill` (prefill, and GQA decode and verify) on `gpu`."""
    return _attention(_limits(gpu), head_dim, Dtype(dtype), tuple(sorted(
        _pinned(pinned, ("block_m", "block_n", "threads")).items())))


@lru_cache(maxsize=1024)
def _attention(limits: _Limits, head_dim: int, dtype: Dtype, pinned: tuple[tuple[str, int], ...]) -> TileConfig:
    start, source = _attention_start(limits.family, head_dim)
    start = {**start, "threads": _attention_threads(limits.family, start["block_m"], limits.wave_size)}

    def measure(c: dict[str, int]) -> _Fit:
        kernel = AttentionPrefill(seqs=1, q_len=1, heads=1, kv_heads=1, head_dim=head_dim, dtype=dtype, **c)
        # fp32 output rows and the score tile, spread over the workgroup
        registers = -(-c["block_m"] * (head_dim + c["block_n"]) // c["threads"])
        return _Fit(_lds(kernel), registers, c["threads"])

    return _fit(AttentionPrefill.kind, limits, start, source, dict(pinned), _ATTENTION_ORDER, measure,
                lambda c: _attention_threads(limits.family, c["block_m"], limits.wave_size))


def mla_decode_tiles(gpu: GPU, *, kv_lora: int = 512, rope_dim: int = 64, kv_dtype: Dtype = Dtype.FP8,
                     q_dtype: Dtype = Dtype.BF16, pinned: Mapping[str, int] | None = None) -> TileConfig:
    """heads_per_workgroup, block_n and threads of `MlaDecode` on `gpu`."""
    return _mla(_limits(gpu), kv_lora, rope_dim, Dtype(kv_dtype), Dtype(q_dtype), tuple(sorted(
        _pinned(pinned, ("heads_per_workgroup", "block_n", "threads")).items())))


@lru_cache(maxsize=1024)
def _mla(limits: _Limits, kv_lora: int, rope_dim: int, kv_dtype: Dtype, q_dtype: Dtype,
         pinned: tuple[tuple[str, int], ...]) -> TileConfig:
    start, source = _mla_start(limits.family)

    def measure(c: dict[str, int]) -> _Fit:
        kernel = MlaDecode(seqs=1, context=1, heads=1, kv_lora=kv_lora, rope_dim=rope_dim, kv_dtype=kv_dtype,
                           q_dtype=q_dtype, **c)
        registers = -(-c["heads_per_workgroup"] * (kv_lora + c["block_n"]) // c["threads"])
        return _Fit(_lds(kernel), registers, c["threads"])

    return _fit(MlaDecode.kind, limits, start, source, dict(pinned), _MLA_ORDER, measure)


# AITER's persistent MLA decode on gfx942 (SGLang's default there) pads a one-token query to four positions when the
# query is bf16 (ROCm/aiter v0.1.10.post3 csrc/py_itfs_cu/asm_mla.cu: bf16 q with an fp8 or bf16 cache, persistent,
# max_seqlen_q <= 4 -> config_max_seqlen_q = 4) and runs hsa/gfx942/mla/mla_a16w8_qh16_m16x4_n16x1_coex0_mask1_ps
# (a16w16 with a bf16 cache; hsa/gfx942/mla/mla_asm.csv): 16 heads by 4 positions, 64 query rows a workgroup, the
# three padded positions computed and masked (assumption: an assembly tile computes its whole M), 16 latent rows a
# step (its `n16x1`), 256 threads, and all 64 KiB of LDS (the code object's group_segment_fixed_size: 65,536 B; 512
# VGPRs), so one workgroup a CU.
AITER_PS_GFX942_TILE = {"heads_per_workgroup": 64, "block_n": 16, "threads": 256}


def aiter_persistent_mla_tiles(gpu: GPU, *, kv_lora: int = 512, rope_dim: int = 64, kv_dtype: Dtype = Dtype.FP8,
                               q_dtype: Dtype = Dtype.BF16) -> TileConfig:
    """`MlaDecode`'s fields for AITER's persistent MLA decode on `gpu`: the padded assembly tile on gfx942 with a
    bf16 query; elsewhere (an fp8 query, gfx950) the tiles of `mla_decode_tiles`."""
    limits = _limits(gpu)
    if limits.family is not ArchFamily.CDNA3 or Dtype(q_dtype).bits <= 8:
        return mla_decode_tiles(gpu, kv_lora=kv_lora, rope_dim=rope_dim, kv_dtype=kv_dtype, q_dtype=q_dtype)
    return _aiter_persistent_mla(limits, kv_lora, rope_dim, Dtype(kv_dtype), Dtype(q_dtype))


@lru_cache(maxsize=64)
def _aiter_persistent_mla(limits: _Limits, kv_lora: int, rope_dim: int, kv_dtype: Dtype, q_dtype: Dtype
                          ) -> TileConfig:
    values = {**AITER_PS_GFX942_TILE, "lds_reserved": limits.lds_bytes}
    registers = -(-values["heads_per_workgroup"] * (kv_lora + values["block_n"]) // values["threads"])
    return TileConfig(MlaDecode.kind, limits.name, limits.family, tuple(values.items()), limits.lds_bytes,
                      limits.lds_bytes, registers,
                      "AITER persistent MLA decode, gfx942 bf16 query: mla_*_qh16_m16x4_n16x1_ps (16 heads x 4 "
                      "padded positions, 16 latent rows a step, all of the LDS)")


_GEMM_FIELDS = ("tile_m", "tile_n", "tile_k", "stages", "threads")


def gemm_tiles(gpu: GPU, *, dtype: Dtype = Dtype.BF16, pinned: Mapping[str, int] | None = None) -> TileConfig:
    """tile_m, tile_n, tile_k, stages and threads of a dense `Gemm` on `gpu`."""
    return _gemm(_limits(gpu), Dtype(dtype), tuple(sorted(_pinned(pinned, _GEMM_FIELDS).items())))


@lru_cache(maxsize=1024)
def _gemm(limits: _Limits, dtype: Dtype, pinned: tuple[tuple[str, int], ...]) -> TileConfig:
    start, source = _gemm_start(limits.family, dtype)

    def measure(c: dict[str, int]) -> _Fit:
        kernel = Gemm(m=1, n=1, k=1, dtype=dtype, **c)
        return _Fit(_lds(kernel), -(-c["tile_m"] * c["tile_n"] // c["threads"]), c["threads"])

    return _fit(Gemm.kind, limits, start, source, dict(pinned), _GEMM_ORDER, measure)


def moe_gemm_tiles(gpu: GPU, *, tokens_per_expert: int, dtype: Dtype = Dtype.BF16,
                   pinned: Mapping[str, int] | None = None) -> TileConfig:
    """tile_m (by tokens per expert), tile_n, tile_k, stages and threads of a `MoeGemm` on `gpu`."""
    return _moe(_limits(gpu), moe_tile_m(tokens_per_expert), Dtype(dtype),
                tuple(sorted(_pinned(pinned, (*_GEMM_FIELDS, "scale_group_k")).items())))


@lru_cache(maxsize=1024)
def _moe(limits: _Limits, tile_m: int, dtype: Dtype, pinned: tuple[tuple[str, int], ...]) -> TileConfig:
    start, source = _moe_start(limits.family, dtype, tile_m)

    def measure(c: dict[str, int]) -> _Fit:
        kernel = MoeGemm(experts=1, tokens_per_expert=1, n=1, k=1, dtype=dtype, **c)
        return _Fit(_lds(kernel), -(-c["tile_m"] * c["tile_n"] // c["threads"]), c["threads"])

    held = dict(pinned)
    fitted = _fit(MoeGemm.kind, limits, start, source, {f: v for f, v in held.items() if f in _GEMM_FIELDS},
                  _GEMM_ORDER, measure)
    group, scaled = _scale_group(limits, dtype, held)
    return dataclasses.replace(fitted, values=(*fitted.values, ("scale_group_k", group)),
                               why=fitted.why + (f"; {scaled}" if scaled else ""))


# ---- a dense GEMM of a given shape, as a BLAS runs it -------------------------------------------------

# Skinny (decode) GEMMs: the smallest row tile of the matrix instructions a library would use (WGMMA's
# M = 64 on Hopper, the UMMA/MFMA M = 64 tiles of Blackwell and CDNA; assumption for the last two), and
# at most this many pipeline stages (CUTLASS's StageCountAutoCarveout fills the LDS left by the epilogue).
SKINNY_TILE_M = 64
MAX_STAGES = 8
EPILOGUE_LDS_BYTES = 16 * 1024  # assumption: the epilogue's staging buffer that the carveout leaves
MIN_SPLIT_DEPTH = 256  # k per split at least
MAX_BALANCE_SPLIT = 4  # splits tried to even out the last wave (stream-K / split-K balancing)
_SHAPED_FIELDS = (*_GEMM_FIELDS, "split_k", "split_tiles", "scale_group_k", "aiter_triton")

# Block-scaled FP8 on CDNA. Every FP8 checkpoint of the catalog is block-scaled: FP32 scales per 128 x 128 weight
# block and per 1 x 128 activation group (DeepSeek-V3/R1's quantization_config weight_block_size [128, 128], as
# Kimi K2's and MiniMax-M2's). CDNA's FP8 matrix instructions take no FP32 scales, so AITER's block-scaled GEMM and
# fused-MoE kernels rescale each 128-deep slice's partial product into the accumulator with the vector ALUs
# (`workloads.kernels.rescale_flop`; the loop of aiter/ops/triton/_triton_kernels/gemm/basic/
# gemm_a8w8_blockscale.py: `accumulator += tl.dot(a, b) * a_scale[:, None] * b_scale[None, :]`), and the time
# adds to the matrix work: HipKittens' block-wise FP8 GEMM on the MI355X runs at 1,859 TFLOP/s with FP32 scales
# and 2,298 with power-of-two scales folded into the MFMA (HazyResearch/HipKittens#76), a fifth slower.
# NVIDIA's block-scaled kernels are left without it: DeepGEMM and CUTLASS's warp-specialized kernels promote
# the partial sums on the CUDA cores while the other consumer warpgroup's tensor-core work runs, and Blackwell
# applies the block scales in the tensor-core instruction (assumption: hidden).
BLOCK_SCALE_GROUP_K = 128
_BLOCK_SCALED_FAMILIES = (ArchFamily.CDNA3, ArchFamily.CDNA4)


def _scale_group(limits: _Limits, dtype: Dtype, held: Mapping[str, int]) -> tuple[int, str]:
    """(`scale_group_k` of a GEMM of `dtype` on these limits, why): block-scaled FP8 on CDNA, unless held."""
    if "scale_group_k" in held:
        return held["scale_group_k"], ""
    if dtype is Dtype.FP8 and limits.family in _BLOCK_SCALED_FAMILIES:
        return BLOCK_SCALE_GROUP_K, (f"block-scaled FP8: each {BLOCK_SCALE_GROUP_K}-deep slice rescaled into the "
                                     "accumulator on the vector ALUs")
    return 0, ""


def _fastest(limits: _Limits, m: int, n: int, k: int, dtype: Dtype,
             candidates: list[tuple[dict[str, int | bool], str]]) -> tuple[dict[str, int | bool], str]:
    """The candidate the model times fastest for m x n x k on the GPU: its launches' busy time at the GPU's own
    calibration and the cycle-level model, each launch a graph node (the library picks its kernel for the shape,
    whatever the user's calibration)."""
    from hwmodels.calibration import shipped_calibration
    from hwmodels.roofline import LaunchMode, kernel_busy, launch_overhead_s

    gpu = _GPU_OF[limits]
    calib = shipped_calibration(gpu.name)
    node_s = launch_overhead_s(gpu, calib, LaunchMode.GRAPH)

    def time_s(fields: dict[str, int | bool]) -> float:
        gemm = Gemm(m=m, n=n, k=k, dtype=dtype, split_tiles=0, **fields)
        return sum(kernel_busy(work, gpu, calib).time_s + node_s for work in gemm.launches())

    timed = [(time_s(fields), i) for i, (fields, _) in enumerate(candidates)]
    _, best = min(timed)
    fields, why = candidates[best]
    return fields, f"{why}; the fastest for this shape of the {len(candidates)} kernels recorded near it"


def gemm_config(gpu: GPU, m: int, n: int, k: int, dtype: Dtype = Dtype.BF16,
                pinned: Mapping[str, int] | None = None) -> TileConfig:
    """The tiles, stages and split of a dense m x n x k GEMM on `gpu`: the one policy every command uses
    (`infersim kernel gemm`, the engine's projections, `validate`, `trace predict`). Fields in `pinned` are held.

    On Hopper GPUs (H100, H200) with nothing pinned: the tile, stages and split cuBLAS was recorded picking for the
    nearest shape (`workloads.gemm_library`). Elsewhere, the GPU family's library tile (`gemm_tiles`), then three
    heuristics:
    - Skinny shapes (m <= 64) take a 64-row tile; every shape takes as many pipeline stages (up to 8) as
      the LDS holds after the epilogue (CUTLASS StageCountAutoCarveout [S61]), so a weight stream keeps
      enough bytes in flight.
    - Too few output tiles to give every CU one: split over k, the smallest split that does (at least 256
      of k per split). Assumption: hipBLASLt and cuBLAS heuristics pick split-K or stream-K for such shapes.
    - Otherwise, when the last wave would leave many CUs idle, the split of 1..4 with the fullest waves
      (cuBLAS on Hopper balances such grids with stream-K [S61]; a split-K that evens the waves is its
      tile-granular approximation). Only the tiles of stream-K's region are split and pay a fix-up: in [S61]'s
      data-parallel + two-tile stream-K hybrid, the last partial wave's tiles and one full wave's (`split_tiles`);
      the rest run data-parallel and write C once.
    """
    held = tuple(sorted(_pinned(pinned, _SHAPED_FIELDS).items()))
    return _gemm_shaped(_limits(gpu), int(m), int(n), int(k), Dtype(dtype), held)


@lru_cache(maxsize=4096)
def _gemm_shaped(limits: _Limits, m: int, n: int, k: int, dtype: Dtype,
                 pinned: tuple[tuple[str, int], ...]) -> TileConfig:
    held = dict(pinned)
    recorded = gemm_library.choices(m, n, k, dtype) if limits.family is ArchFamily.HOPPER and not held else []
    if recorded:  # what the vendor library was seen to pick for this shape, or the fastest of its neighbours'
        fields, why = recorded[0] if len(recorded) == 1 else _fastest(limits, m, n, k, dtype, recorded)
        kernel = Gemm(m=1, n=1, k=fields["split_k"], dtype=dtype, **fields)
        return TileConfig(Gemm.kind, limits.name, limits.family, (*fields.items(), ("split_tiles", 0)),
                          _lds(kernel), limits.lds_bytes, -(-fields["tile_m"] * fields["tile_n"] // fields["threads"]),
                          why)
    library = _gemm(limits, dtype, tuple((f, v) for f, v in pinned if f in _GEMM_FIELDS))
    tile = dict(library.fields)
    changed: list[str] = []
    if "tile_m" not in held and m <= SKINNY_TILE_M < tile["tile_m"]:
        tile["tile_m"] = SKINNY_TILE_M
        changed.append(f"tile_m {SKINNY_TILE_M} for m <= {SKINNY_TILE_M}")
    if "stages" not in held:
        stage = dtype.storage_bytes((tile["tile_m"] + tile["tile_n"]) * tile["tile_k"])
        room = limits.lds_max_per_workgroup_bytes - EPILOGUE_LDS_BYTES
        stages = max(tile["stages"], min(MAX_STAGES, int(room // stage)))
        if stages != tile["stages"]:
            changed.append(f"{stages} stages fill the LDS after the epilogue")
        tile["stages"] = stages
    split, split_tiles = held.get("split_k", 1), held.get("split_tiles", 0)
    output_tiles = -(-m // tile["tile_m"]) * -(-n // tile["tile_n"])
    if "split_k" not in held:
        split, why = _split(limits.compute_units, output_tiles, k)
        if split > 1:
            changed.append(why)
        if split > 1 and output_tiles >= limits.compute_units and "split_tiles" not in held:
            # stream-K's region: the last partial wave and one full wave of tiles; the rest data-parallel
            split_tiles = min(output_tiles, output_tiles % limits.compute_units + limits.compute_units)
    kernel = Gemm(m=1, n=1, k=split, dtype=dtype, split_k=split, **tile)
    group, scaled = _scale_group(limits, dtype, held)
    if scaled:
        changed.append(scaled)
    aiter = (("aiter_triton", bool(held["aiter_triton"])),) if "aiter_triton" in held else ()
    if aiter and aiter[0][1]:
        changed.append("AITER's Triton block-scaled GEMM")
    reason = library.why + (f"; {'; '.join(changed)}" if changed else "")
    return TileConfig(Gemm.kind, limits.name, limits.family,
                      (*tile.items(), ("split_k", split), ("split_tiles", split_tiles), ("scale_group_k", group),
                       *aiter),
                      _lds(kernel), limits.lds_bytes, -(-tile["tile_m"] * tile["tile_n"] // tile["threads"]), reason)


def _split(cus: int, output_tiles: int, k: int) -> tuple[int, str]:
    """The split over k of a grid of `output_tiles` tiles on `cus` CUs, and why."""
    if output_tiles < cus:
        split = max(1, min(cus // output_tiles, k // MIN_SPLIT_DEPTH))
        return split, f"split_k {split}: {output_tiles} output tiles for {cus} CUs"

    def fullness(s: int) -> float:
        grid = output_tiles * s
        return grid / (-(-grid // cus) * cus)

    choices = [s for s in range(1, MAX_BALANCE_SPLIT + 1) if k // s >= MIN_SPLIT_DEPTH] or [1]
    best = max(fullness(s) for s in choices)
    split = min(s for s in choices if fullness(s) >= best - 0.02)
    return split, f"split_k {split} evens the last wave ({fullness(1):.0%} -> {fullness(split):.0%} full)"


def blas_gemm(gpu: GPU, m: int, n: int, k: int, dtype: Dtype = Dtype.BF16,
              pinned: Mapping[str, int] | None = None) -> Gemm:
    """A GEMM as a BLAS would run it on `gpu` (`gemm_config`'s tiles, stages and split, the fields in `pinned`
    held); one shared object per shape and tile limits, as a step's layers repeat their projections."""
    held = tuple(sorted(_pinned(pinned, _SHAPED_FIELDS).items())) if pinned else ()
    return _blas_gemm(_limits(gpu), int(m), int(n), int(k), Dtype(dtype), held)


@lru_cache(maxsize=65536)
def _blas_gemm(limits: _Limits, m: int, n: int, k: int, dtype: Dtype,
               held: tuple[tuple[str, int], ...] = ()) -> Gemm:
    return Gemm(m=m, n=n, k=k, dtype=dtype, **_gemm_shaped(limits, m, n, k, dtype, held).fields)


# ---- any kernel object --------------------------------------------------------------------------------

TILED_KINDS = (AttentionPrefill.kind, MlaDecode.kind, Gemm.kind, MoeGemm.kind)


def tiles_for(kernel: KernelKind, gpu: GPU, pinned: Collection[str] = ()) -> TileConfig | None:
    """The configuration the engine picks for this kernel's shapes on `gpu`, holding the fields named in
    `pinned` at the kernel's values; None for a kind without tiles."""
    held = {name: getattr(kernel, name) for name in pinned if hasattr(kernel, name)}
    if isinstance(kernel, AttentionPrefill):
        return attention_tiles(gpu, head_dim=kernel.head_dim, dtype=kernel.dtype, pinned=held)
    if isinstance(kernel, MlaDecode):
        return mla_decode_tiles(gpu, kv_lora=kernel.kv_lora, rope_dim=kernel.rope_dim, kv_dtype=kernel.kv_dtype,
                                q_dtype=kernel.q_dtype, pinned=held)
    if isinstance(kernel, MoeGemm):
        return moe_gemm_tiles(gpu, tokens_per_expert=kernel.tokens_per_expert, dtype=kernel.dtype, pinned=held)
    if isinstance(kernel, Gemm):
        return gemm_config(gpu, kernel.m, kernel.n, kernel.k, kernel.dtype, pinned=held)
    return None


def with_tiles(kernel: KernelKind, gpu: GPU, pinned: Collection[str] = ()) -> tuple[KernelKind, TileConfig | None]:
    """The kernel with its unpinned tile fields set to the engine's choice on `gpu`, and that choice."""
    config = tiles_for(kernel, gpu, pinned)
    if config is None:
        return kernel, None
    return dataclasses.replace(kernel, **config.fields), config  # type: ignore[type-var]


def describe(kernel: KernelKind, gpu: GPU) -> dict[str, Any] | None:
    """The kernel's tile fields as it holds them, its LDS, and why the engine chose them (None: no tiles)."""
    config = tiles_for(kernel, gpu)
    if config is None:
        return None
    if isinstance(kernel, MlaDecode) and kernel.lds_reserved:  # an assembly kernel's tile (the engine's AITER)
        config = aiter_persistent_mla_tiles(gpu, kv_lora=kernel.kv_lora, rope_dim=kernel.rope_dim,
                                            kv_dtype=kernel.kv_dtype, q_dtype=kernel.q_dtype)
    if isinstance(kernel, Gemm) and kernel.aiter_triton:  # AITER's Triton kernel at its configuration's tiles
        config = gemm_config(gpu, kernel.m, kernel.n, kernel.k, kernel.dtype,
                             pinned={name: getattr(kernel, name) for name in _SHAPED_FIELDS})
    held = {name: getattr(kernel, name) for name in config.fields}
    out = {**config.as_dict(), **held, "lds_bytes": _lds(kernel)}
    if held != config.fields:
        out["why"] = "set by the caller"
    return out


