"""How many split-KV partitions each serving engine's MLA decode backend cuts a request's history into.

An absorbed-MLA decode step (`workloads.attention_kernels.MlaDecode`) can split each request's history over
several workgroups and merge their partial outputs in a second launch. How many partitions a backend makes is
decided on the host (or in a tiny scheduling kernel) from the batch's history lengths, the head count and the
GPU's SM (CU) count. This module re-derives that count from each backend's own source, so that a scenario's
`kernels.mla_num_splits: auto` can follow the backend the engine would pick instead of a fixed number.

Backends (all read for dense DeepSeek-style MLA: one latent KV head, 576-wide keys, 512-wide values, one new
token per request):

- FlashMLA (DeepSeek): an SM-part scheduler that deals the batch's 64-token KV blocks out to SM parts,
  splitting a request wherever a part fills up; uneven per request.
- FlashAttention-3 (vLLM's FLASH_ATTN_MLA, SGLang's `fa3`): a static split cap, then a per-request dynamic split
  from the batch's total KV blocks; the engines differ only in the cap they pass.
- FlashInfer MLA (`BatchMLAPagedAttentionWrapper`, SGLang's `flashinfer`): a KV chunk size from the batch's
  total history over the SM clusters; a request gets ceil(history / chunk) partitions.
- TRT-LLM-gen MLA through FlashInfer (vLLM's FLASHINFER_MLA, SGLang's `trtllm_mla`, Blackwell): one split count
  for the whole batch, from the SMs left per request and the longest history.
- AITER MLA (ROCm): one split count for the batch, 1..16, scored by CU occupancy and per-split overhead (the
  non-persistent call vLLM makes); SGLang's persistent call: 16 splits a request on gfx942, about 196 tokens a
  split on gfx950, dealt out over the CUs by a metadata kernel.
- Triton MLA decode: vLLM's fixed 4 splits; SGLang's per-request dynamic count.

Every constant below names the file, function and commit (or release) it was read from; "assumption" marks a
number the sources do not pin down, with the reason for the choice.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from enum import Enum

import numpy as np

from hwmodels.choices import parse_choice
from hwmodels.dtypes import Dtype
from hwmodels.spec import GPU, Vendor
from workloads.kernel_base import cdiv

# Sources, by the revision read.
FLASHMLA_SRC = "https://github.com/deepseek-ai/FlashMLA/blob/9241ae3ef9bac614dd25e45e507e089f888280e0"
FA3_SRC = "https://github.com/vllm-project/flash-attention/blob/617264c1c7955c9e84817654ebeedff069f3c5f1"
FLASHINFER_SRC = "https://github.com/flashinfer-ai/flashinfer/blob/v0.6.17"  # a0a6b019b9b27d49d209f85d028a1ae5a9b347d7
TRTLLM_GEN_SRC = "https://github.com/flashinfer-ai/flashinfer/blob/fb28d7242b3506a2348265962041acc1fb56cca4"
AITER_SRC = "https://github.com/ROCm/aiter/blob/v0.1.20"  # fc2e5d57fb5b8ad8e7e23f7103071dde798ea618
VLLM_SRC = "https://github.com/vllm-project/vllm/blob"
SGLANG_SRC = "https://github.com/sgl-project/sglang/blob"

# --- FlashMLA: FLASHMLA_SRC/csrc/api/dense_decode.h (dense_attn_decode_interface) and
# csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu (get_mla_metadata_kernel); the same
# constants as the first release's get_mla_metadata (csrc/flash_api.cpp at 414a2f3).
FLASHMLA_BLOCK_M = 64  # query rows (heads x tokens) per SM part's tile: num_sm_parts divides the SMs by it
FLASHMLA_BLOCK_N = 64  # KV tokens per block (the paged cache's block size, which the kernel requires to be 64)
FLASHMLA_FIXED_OVERHEAD_BLOCKS = 5  # fixed cost of each request (and of each split) in blocks

# --- FlashAttention-3 MLA decode (bf16 latent cache): FA3_SRC/hopper/tile_size.h tile_size_fwd_sm90 returns
# {64, 64} for headdim 64 (the RoPE part the query carries) with headdim_v 512 (the latent).
FA3_BLOCK_M = 64  # packed query rows (heads of one KV head) per tile
FA3_BLOCK_N = 64  # KV tokens per tile
FA3_MAX_SPLITS = 128  # hopper/flash_api.cpp get_num_splits passes 128 as num_splits_heuristic's cap
FA3_BATCH_MARGIN = 1.1  # hopper/flash_prepare_scheduler.cu prepare_varlen_num_blocks_kernel: "10% margin"
FA3_DYNAMIC_MAX_BATCH = 992  # hopper/flash_api.cpp PREPARE_VARLEN_MAX_BATCHES_1CTA: above it, no split
# vLLM passes num_splits = AttentionConfig.flash_attn_max_num_splits_for_cuda_graph (32) to FA3 when the decode
# batch replays a full CUDA graph (vllm/config/attention.py at 021ebc5d; FlashAttnMLAMetadataBuilder in
# vllm/v1/attention/backends/mla/flashattn_mla.py at 00b9b7ad); otherwise 0, i.e. FA3's own heuristic.
VLLM_FA3_GRAPH_SPLITS = 32
# assumption: vLLM captures decode graphs up to 512 requests (its max_cudagraph_capture_size default cap);
# larger batches run eagerly, where vLLM passes num_splits = 0.
VLLM_GRAPH_MAX_BATCH = 512

# --- FlashInfer MLA: FLASHINFER_SRC/include/flashinfer/attention/scheduler.cuh MLAPlan.
FLASHINFER_CTA_TILE_Q = 64  # packed query rows per CTA; two CTAs form a cluster when a request has > 64 rows

# --- TRT-LLM-gen MLA decode: TRTLLM_GEN_SRC/include/flashinfer/trtllm/fmha/fmhaKernels.cuh
# (computeCtaAndClusterConfig, selectMlaGenerationKernel, useSwapsMmaAbMlaGenKernel) and
# fmhaRunnerParams.h (TllmGenSelectKernelParams: tileSizeKv 128, headDimPerCtaV = headDimV).
TRTLLM_TILE_KV = 128  # KV tokens per tile (mTileSizeKv default; the 64 variant needs an environment switch)
TRTLLM_HEAD_DIM_V = 512  # the latent width; headDimPerCtaV starts there and may drop to 256 or 128
TRTLLM_SWAPS_SEQ_PER_CTA = 1024  # useSwapsMmaAbMlaGenKernel: swapped-MMA kernel while a split holds <= 1024 tokens
TRTLLM_SWAPS_SPLIT_TOKENS = 256  # useSwapsMmaAbMlaGenKernel sizes its trial splits in 256-token steps

# --- AITER: AITER_SRC/aiter/mla.py get_meta_param (called by mla_decode_fwd when the caller leaves
# num_kv_splits to aiter, as vLLM's AiterMLAImpl.forward_mqa does in vllm/v1/attention/backends/mla/
# rocm_aiter_mla.py at eaba533a).
AITER_SPLIT_OVERHEAD = 84.1  # get_meta_param: overhead = 84.1 (tokens-equivalent cost of each split)
AITER_MAX_SPLITS = 16  # get_meta_param scores splits 1..16
# SGLang's aiter backend runs AITER's persistent MLA decode by default (SGLANG_AITER_MLA_PERSIST defaults to
# "True"; intra_batch_mode on; python/sglang/srt/layers/attention/aiter_backend.py of the sglang 0.5.9 and 0.5.12
# releases, which turn it off only for 16 heads without an fp8 cache). Its work plan comes from
# get_mla_metadata_v1 (AITER_PS_SRC/csrc/kernels/mla/metadata.cu: intra_batch_mode -> get_mla_metadata_v1_0_device,
# csrc/kernels/mla/metadata/v1_0_device.cuh get_local_splits): on gfx942 every request is cut into 16 splits; on
# gfx950 into seqlen_kv / 196 ("196 per splits can get better performance"), at most ceil(CUs / batch) and at
# most SGLang's max_split_per_batch (64 without draft tokens; 32 with them, which the count here does not see:
# assumption, the larger). The same rule from v0.1.10.post3 (SGLang 0.5.9's ROCm images) to v0.1.16.
AITER_PS_SRC = "https://github.com/ROCm/aiter/blob/v0.1.10.post3"  # 6a0e7b26ccf33164785531212cc2ec2cde0b9243
AITER_PS_GFX942_SPLITS = 16
AITER_PS_TOKENS_PER_SPLIT = 196
AITER_PS_MAX_SPLITS = 64

# --- Triton MLA decode.
# vLLM: TritonMLAImpl.forward_mqa, vllm/v1/attention/backends/mla/triton_mla.py at 0155494b
# (num_kv_splits = 1 if batch-invariant else 4); the kernel gives each split ceil(history / 4) tokens
# (vllm/v1/attention/ops/triton_decode_attention.py at 0155494b, _fwd_grouped_kernel_stage1).
VLLM_TRITON_SPLITS = 4
# SGLang: ServerArgs.triton_attention_num_kv_splits defaults to 8 (python/sglang/srt/server_args.py);
# TritonAttnBackend raises it for MLA (_mla_decode_kv_splits_cap, python/sglang/srt/layers/attention/
# triton_backend.py at 00858422) and picks each request's count with get_num_kv_splits_triton
# (python/sglang/srt/layers/attention/triton_ops/metadata.py at bdd1bcdf).
SGLANG_TRITON_BASE_SPLITS = 8
SGLANG_MIN_BLOCK_KV = 32  # _MLA_DECODE_MIN_BLOCK_KV and decode_attention.py _MIN_BLOCK_KV: split granule
SGLANG_GFX942_SPLIT_CAP = 256  # TritonAttnBackend.__init__ pins the MLA cap at 256 on gfx942 (MI300X/MI325X)
SGLANG_SEQ_UNIT = 64.0  # get_num_kv_splits_triton: ext_seq_len = max_seq_len / 64
# assumption: the model's context length is at least 32 x (the CU count rounded up to a power of two) tokens
# (DeepSeek-V3 163,840, Kimi K2 131,072 against 8,192), so _mla_decode_kv_splits_cap is the rounded CU count.

ENGINES = ("vllm", "sglang", "trtllm")  # TensorRT-LLM: its PyTorch backend (trtllm-serve --backend pytorch)


class MlaBackend(Enum):
    """An MLA decode kernel as one engine drives it (the split heuristic and the cap the engine passes)."""

    FLASHMLA = "flashmla"  # DeepSeek FlashMLA dense decode (vLLM FLASHMLA, SGLang flashmla)
    FLASH_ATTN_VLLM = "fa3-vllm"  # FlashAttention-3 MLA as vLLM's FLASH_ATTN_MLA calls it (graph cap 32)
    FLASH_ATTN_SGLANG = "fa3-sglang"  # FlashAttention-3 MLA as SGLang's fa3 backend calls it (num_splits=0)
    FLASHINFER = "flashinfer"  # FlashInfer BatchMLAPagedAttentionWrapper (SGLang flashinfer)
    TRTLLM_GEN = "trtllm-gen"  # FlashInfer's TRT-LLM-gen MLA decode (vLLM FLASHINFER_MLA, SGLang trtllm_mla)
    AITER = "aiter"  # AMD AITER mla_decode_fwd, non-persistent (vLLM ROCM_AITER_MLA)
    AITER_PERSISTENT = "aiter-persistent"  # AITER's persistent MLA decode (SGLang aiter, its default)
    TRITON_VLLM = "triton-vllm"  # vLLM TRITON_MLA
    TRITON_SGLANG = "triton-sglang"  # SGLang triton

    @classmethod
    def parse(cls, text: str) -> MlaBackend:
        """The backend named `text`; the error lists the valid names."""
        return parse_choice(cls, text, "MLA backend")

    def runs_on(self, gpu: GPU) -> bool:
        """Whether the backend's kernels exist for `gpu`'s architecture (from its `arch` text).

        FlashMLA's dense decode checks for SM90a (FLASHMLA_SRC/csrc/api/dense_decode.h; its SM100 kernels are
        the sparse ones only); FA3 is Hopper-only (vLLM FlashAttnMLABackend.supports_compute_capability: major 9);
        FlashInfer's MLA wrapper has an SM80+ (FA2-template) and an SM90 kernel; TRT-LLM-gen cubins are
        Blackwell datacenter parts (vLLM FlashInferMLABackend: major 10); AITER's MLA assembly is for gfx942
        and gfx950; the Triton kernels run anywhere (vLLM TritonMLABackend accepts every capability).
        """
        sm, gfx = _sm(gpu), _gfx(gpu)
        if self in (MlaBackend.TRITON_VLLM, MlaBackend.TRITON_SGLANG):
            return True
        if self in (MlaBackend.AITER, MlaBackend.AITER_PERSISTENT):
            return gfx in ("gfx942", "gfx950")
        if sm is None:
            return False
        if self in (MlaBackend.FLASHMLA, MlaBackend.FLASH_ATTN_VLLM, MlaBackend.FLASH_ATTN_SGLANG):
            return sm // 10 == 9
        if self is MlaBackend.TRTLLM_GEN:
            return sm // 10 == 10
        return sm >= 80  # FLASHINFER


def _sm(gpu: GPU) -> int | None:
    """NVIDIA compute capability as an integer (90, 100, 103) from `arch` ("hopper (sm_90)"); None otherwise."""
    match = re.search(r"sm_(\d+)", gpu.arch.lower())
    return int(match.group(1)) if gpu.vendor is Vendor.NVIDIA and match else None


def _gfx(gpu: GPU) -> str | None:
    """AMD target name ("gfx942", "gfx950") from `arch` ("cdna4 (gfx950)"); None otherwise."""
    match = re.search(r"gfx[0-9a-f]+", gpu.arch.lower())
    return match.group(0) if gpu.vendor is Vendor.AMD and match else None


def backends_for(gpu: GPU) -> tuple[MlaBackend, ...]:
    """The backends whose kernels run on `gpu`, in declaration order."""
    return tuple(b for b in MlaBackend if b.runs_on(gpu))


def default_mla_backend(gpu: GPU, engine: str = "vllm", *, kv_dtype: Dtype = Dtype.BF16,
                        heads: int | None = None, rocm_aiter: bool = False) -> MlaBackend:
    """The MLA decode backend `engine` picks by default for a DeepSeek-style model on `gpu`.

    vLLM (vllm/platforms/cuda.py at 002db495: _get_backend_priorities and check_and_update_config; rocm.py at
    001eda31: _get_backend_priorities):
      - Blackwell (major 10): FLASHINFER_MLA, i.e. TRT-LLM-gen (forced for qk_nope_head_dim 128 without DCP).
      - Hopper: FLASH_ATTN_MLA first; it takes no fp8 cache (supported_kv_cache_dtypes auto/float16/bfloat16 in
        flashattn_mla.py at 00b9b7ad), so an fp8 cache falls to FLASHMLA, the next in the list.
      - other NVIDIA: TRITON_MLA.
      - ROCm: ROCM_AITER_MLA when aiter's MLA is enabled, which needs VLLM_ROCM_USE_AITER=1 (vllm/envs.py:
        default "False"; VLLM_ROCM_USE_AITER_MLA defaults on), else TRITON_MLA. `rocm_aiter` says the switch is
        set; AiterMLAImpl asserts 16 or 128 heads, so other head counts are sent to Triton here.
    SGLang (python/sglang/srt/server_args.py: _get_default_attn_backend and _handle_model_specific_adjustments;
    https://docs.sglang.io/advanced_features/attention_backend.html):
      - Hopper with CUDA >= 12.3: fa3 (assumption: a current CUDA).
      - SM100 for DeepseekV3ForCausalLM (DeepSeek V3/R1, Kimi K2): trtllm_mla.
      - ROCm: aiter when the per-GPU head count is 16 or 128 (and no speculative decoding), else triton; aiter
        runs the persistent decode, except at 16 heads without an fp8 cache (aiter_backend.py, sglang 0.5.9).
      - other: triton.
    TensorRT-LLM (NVIDIA only): its own trtllm-gen MLA generation kernels on Blackwell (the kernels FlashInfer
    ships as TRT-LLM-gen); on Hopper, assumption: FlashMLA's split heuristic for its generation kernel.
    `heads`: query heads per GPU when known (None: assume a head count AITER takes).
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (valid: {', '.join(ENGINES)})")
    if not isinstance(kv_dtype, Dtype):
        raise ValueError(f"kv_dtype must be a Dtype, got {kv_dtype!r}")
    if heads is not None:
        _check_positive_int("heads", heads)
    sm, aiter_heads = _sm(gpu), heads is None or heads in (16, 128)
    if engine == "trtllm":
        if gpu.vendor is Vendor.AMD:
            raise ValueError(f"TensorRT-LLM runs on NVIDIA GPUs, not {gpu.name} (engines for it: vllm, sglang)")
        return MlaBackend.TRTLLM_GEN if sm is not None and sm // 10 == 10 else MlaBackend.FLASHMLA
    if gpu.vendor is Vendor.AMD:
        if not MlaBackend.AITER.runs_on(gpu) or not aiter_heads:
            return MlaBackend.TRITON_VLLM if engine == "vllm" else MlaBackend.TRITON_SGLANG
        if engine == "vllm":
            return MlaBackend.AITER if rocm_aiter else MlaBackend.TRITON_VLLM
        return MlaBackend.AITER if heads == 16 and kv_dtype.bits > 8 else MlaBackend.AITER_PERSISTENT
    if sm is not None and sm // 10 == 10:
        return MlaBackend.TRTLLM_GEN
    if sm is not None and sm // 10 == 9:
        if engine == "sglang":
            return MlaBackend.FLASH_ATTN_SGLANG
        return MlaBackend.FLASHMLA if kv_dtype.bits <= 8 else MlaBackend.FLASH_ATTN_VLLM
    return MlaBackend.TRITON_VLLM if engine == "vllm" else MlaBackend.TRITON_SGLANG


def mla_splits(backend: MlaBackend, gpu: GPU, contexts: Sequence[int], heads: int,
               kv_heads: int = 1) -> tuple[int, ...]:
    """Per request of the batch, the KV partitions `backend` makes on `gpu` for one decode step.

    `contexts`: each request's history in tokens; `heads`: query heads on this GPU (128 for DeepSeek-V3 on one
    GPU, 16 at TP8); `kv_heads`: latent KV heads (1 for MLA). The count is the one the backend assigns the
    request (FlashMLA, FA3, FlashInfer and SGLang's Triton per request; TRT-LLM-gen, AITER and vLLM's Triton one
    count for the whole batch), clamped to at least 1 and at most the request's history; how many tokens each
    partition holds is left to the kernel model (`MlaDecode` rounds a split to whole KV tiles).
    """
    if not isinstance(backend, MlaBackend):
        raise ValueError(f"backend must be an MlaBackend, got {backend!r}")
    ctx = _check_contexts(contexts)
    _check_positive_int("heads", heads)
    _check_positive_int("kv_heads", kv_heads)
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if not backend.runs_on(gpu):
        valid = ", ".join(b.value for b in backends_for(gpu))
        raise ValueError(f"backend {backend.value} does not run on {gpu.name} ({gpu.arch}); valid backends "
                         f"for it: {valid}")
    return _splits(backend, gpu, ctx, heads, kv_heads)


def _splits(backend: MlaBackend, gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> tuple[int, ...]:
    """`mla_splits` of arguments already checked."""
    splits = _SPLITTERS[backend](gpu, ctx, heads, kv_heads)
    if len(splits) != len(ctx):
        raise RuntimeError(f"{backend.value} gave {len(splits)} counts for {len(ctx)} requests")
    if min(splits) >= 1 and max(splits) <= min(ctx):  # the serving loop's batches: nothing to clamp
        return tuple(splits)
    return tuple(min(max(1, s), c) for s, c in zip(splits, ctx, strict=True))


def mean_splits(backend: MlaBackend, gpu: GPU, contexts: Sequence[int], heads: int, kv_heads: int = 1) -> int:
    """The batch's mean partitions per request, rounded half up, at least 1 (for callers that take one number)."""
    return _rounded_mean(mla_splits(backend, gpu, contexts, heads, kv_heads))


def batch_mean_splits(backend: MlaBackend, gpu: GPU, contexts: tuple[int, ...], heads: int) -> int:
    """`mean_splits` of a deployment's own decode batch, without the argument checks that cost more than the
    heuristic: its backend was checked against its GPU when the deployment was built (`Deployment`), and the serving
    loop's histories and head counts are positive integers. A test holds the two equal."""
    return _rounded_mean(_splits(backend, gpu, contexts, heads, 1))


def _rounded_mean(splits: tuple[int, ...]) -> int:
    return max(1, math.floor(sum(splits) / len(splits) + 0.5))


def _check_positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def _check_contexts(contexts: Sequence[int]) -> tuple[int, ...]:
    if isinstance(contexts, (str, bytes)) or not isinstance(contexts, Sequence):
        raise ValueError(f"contexts must be a sequence of histories, got {contexts!r}")
    if not contexts:
        raise ValueError("contexts must hold at least one request's history")
    if all(type(c) is int for c in contexts) and min(contexts) > 0:  # the engine's batches: no check per value
        return tuple(contexts)
    for i, c in enumerate(contexts):
        if isinstance(c, bool) or not isinstance(c, numbers.Integral):
            raise ValueError(f"contexts[{i}] must be an integer, got {c!r}")
        if c <= 0:
            raise ValueError(f"contexts[{i}] must be positive, got {c}")
    return tuple(int(c) for c in contexts)


def _flashmla(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """FlashMLA's tile-scheduler metadata (get_mla_metadata_kernel), replayed on the host.

    num_sm_parts = max(SMs / kv_heads / ceil(heads per KV head / 64), 1). Each request costs its 64-token blocks
    plus 5; every part gets payload = ceil(total / parts) + 5 and takes requests in order: a request that fits
    (remaining blocks + 5) ends there, otherwise the part takes (what it has left - 5) blocks of it and the
    request continues in the next part as one more split.
    """
    parts = max(gpu.compute_units // kv_heads // cdiv(heads // kv_heads, FLASHMLA_BLOCK_M), 1)
    overhead = FLASHMLA_FIXED_OVERHEAD_BLOCKS
    blocks = [max(cdiv(c, FLASHMLA_BLOCK_N), 1) for c in ctx]
    payload = cdiv(sum(b + overhead for b in blocks), parts) + overhead
    splits = [0] * len(ctx)
    req = block = n_split = 0
    for _ in range(parts):
        remain = payload
        while req < len(ctx):
            left = blocks[req] - block
            if remain >= left + overhead:
                splits[req] = n_split + 1
                remain -= left + overhead
                req, block, n_split = req + 1, 0, 0
            else:
                if remain - overhead > 0:
                    block += remain - overhead
                    n_split += 1
                break
    if req != len(ctx):  # the scheduler asserts the same: the payload always covers the batch
        raise AssertionError("FlashMLA schedule did not cover the batch")
    return splits


def _fa3_static_heuristic(sms: int, m_blocks: int, kv_heads: int, max_n_blocks: int) -> int:
    """FA3's num_splits_heuristic (FA3_SRC/hopper/heuristics.h) as get_num_splits calls it for a varlen batch.

    With dynamic splits it pretends the batch is one request, so total_mblocks = kv_heads x m_blocks. When those
    nearly fill the SMs (>= 0.8) there is one split (the long-KV branch needs 2 x SMs query tiles, which a decode
    step never has); with <= 4 KV tiles (of the longest history), one; else the fewest splits whose wave
    efficiency (waves / ceil(waves)) reaches 85% of the best over 1..min(128, SMs, KV tiles).
    """
    total_mblocks = kv_heads * m_blocks
    if total_mblocks >= 0.8 * sms or max_n_blocks <= 4:
        return 1
    eff = []
    for s in range(1, min(FA3_MAX_SPLITS, sms, max_n_blocks) + 1):
        waves = np.float32(total_mblocks * s) / np.float32(sms)
        eff.append(float(waves / np.ceil(waves)))
    best = max(eff)
    return next(s for s, e in enumerate(eff, start=1) if e >= 0.85 * best)


def _fa3(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int, static: int | None) -> list[int]:
    """FA3's per-request dynamic split (prepare_varlen_num_blocks_kernel, FA3_SRC/hopper/flash_prepare_scheduler.cu).

    blocks_per_sm = ceil(sum over the batch of m_blocks x n_blocks x 1.1 x kv_heads / SMs) (float32); a request
    with n_blocks 64-token KV tiles gets max(min(ceil(n_blocks / blocks_per_sm), cap), 1). Batches above 992
    requests, and a cap of 1, get one split (mha_fwd). `static`: the cap the engine passes (None: 0, i.e. FA3's
    num_splits_heuristic).
    """
    sms = gpu.compute_units
    m_blocks = cdiv(heads // kv_heads, FA3_BLOCK_M)  # PackGQA: the heads of one KV head share query tiles
    n_blocks = [cdiv(c, FA3_BLOCK_N) for c in ctx]
    if static is None:
        static = _fa3_static_heuristic(sms, m_blocks, kv_heads, max(n_blocks))
    if len(ctx) > FA3_DYNAMIC_MAX_BATCH or static <= 1:
        return [1] * len(ctx)
    total = np.float32(sum(m_blocks * n for n in n_blocks))
    per_sm = int(np.ceil(total * np.float32(FA3_BATCH_MARGIN) * np.float32(kv_heads) / np.float32(sms)))
    per_sm = max(per_sm, 1)
    return [max(min(cdiv(n, per_sm), static), 1) for n in n_blocks]


def _fa3_vllm(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """vLLM FLASH_ATTN_MLA: cap 32 for graph-replayed batches, FA3's heuristic for eager ones."""
    static = VLLM_FA3_GRAPH_SPLITS if len(ctx) <= VLLM_GRAPH_MAX_BATCH else None
    return _fa3(gpu, ctx, heads, kv_heads, static)


def _fa3_sglang(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """SGLang fa3: num_splits = 0 (1 only for deterministic inference), so FA3's heuristic sets the cap
    (FlashAttentionBackend.__init__, python/sglang/srt/layers/attention/flashattention_backend.py)."""
    return _fa3(gpu, ctx, heads, kv_heads, None)


def _flashinfer_chunk(x: int) -> int:
    """MLAPlan's rounding of the per-cluster KV share: 32, 64, 128, 192, then multiples of 256."""
    for limit, chunk in ((8, 32), (16, 64), (32, 128), (64, 192)):
        if x <= limit:
            return chunk
    return cdiv(x, 256) * 256


def _flashinfer(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """FlashInfer MLAPlan: cluster = 2 CTAs when a request packs > 64 query rows (heads), else 1; clusters =
    SMs / cluster; kv_len_limit = f(ceil(sum of history x query tiles / clusters)); a request longer than the
    limit is cut into ceil(history / limit) chunks, each its own partial output."""
    cluster = 2 if heads > FLASHINFER_CTA_TILE_Q else 1
    clusters = gpu.compute_units // cluster
    q_tiles = cdiv(heads, cluster * FLASHINFER_CTA_TILE_Q)
    limit = _flashinfer_chunk(max(cdiv(sum(ctx) * q_tiles, clusters), 1))
    return [cdiv(c, limit) if c > limit else 1 for c in ctx]


def _padded_tile_q(heads_per_kv: int) -> int:
    """getPaddedMlaTileSizeQ: 0 for power-of-two head counts and >= 128, else the next power of two (>= 8)."""
    if heads_per_kv >= 128 or heads_per_kv & (heads_per_kv - 1) == 0:
        return 0
    return max(8, 1 << (heads_per_kv - 1).bit_length())


def _trtllm_gen(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """TRT-LLM-gen MLA decode (computeCtaAndClusterConfig): one count for the whole batch.

    splits = min(ceil(longest history / (2 x 128)), max(1, SMs / (CTAs per request x requests))).
    The kernel (selectMlaGenerationKernel) is the swapped-MMA one when a request has <= 32 heads per KV head, or
    when a trial split of ceil(longest / 256) capped by SMs / (requests x ceil(heads / 16)) holds <= 1024 tokens
    and those CTAs fit the SMs; it has ceil(heads / tile) head CTAs (tile 8 for <= 8 heads, else 16) x one value
    CTA. Otherwise the 64-row kernel: 2-CTA MMA with two 256-wide value halves at 128 heads (2 CTAs a request),
    else heads / 64 CTAs. Outside the 2-CTA case, when the split grid fills at most half the SMs (a quarter for
    a batch of one) each CTA narrows to 128 value columns (256 when at most half of that) and the split is
    recomputed with the extra value CTAs.
    Assumptions: a CTA's KV step is the 128-token tile (mStepKv comes from the kernel binaries); the longest
    history is the batch's own (vLLM passes attn_metadata.max_seq_len).
    """
    sms, b, longest, h = gpu.compute_units, len(ctx), max(ctx), heads // kv_heads
    padded = _padded_tile_q(h)
    if padded:
        swaps = padded <= 32
    elif h <= 32:
        swaps = True
    else:
        ctas = b * cdiv(h, 16)
        trial = min(cdiv(longest, TRTLLM_SWAPS_SPLIT_TOKENS), max(1, sms // ctas))
        swaps = cdiv(longest, trial) <= TRTLLM_SWAPS_SEQ_PER_CTA and ctas <= sms
    two_cta = not swaps and h == 128
    tile_q = (padded or (8 if h <= 8 else 16)) if swaps else 64
    head_ctas = heads // min(h, tile_q)
    most = cdiv(longest, 2 * TRTLLM_TILE_KV)

    def split_count(value_width: int) -> tuple[int, int]:
        """(splits, CTAs of the grid) with CTAs of `value_width` value columns."""
        per_request = 2 if two_cta else head_ctas * (TRTLLM_HEAD_DIM_V // value_width)
        n = min(most, max(1, sms // (per_request * b)))
        return n, per_request * b * n

    splits, grid = split_count(256 if two_cta else TRTLLM_HEAD_DIM_V)
    if splits > 1 and not two_cta:
        corr = 1 if b == 1 else 2  # isDsv3MinLatencyMode (a batch of one) halves the bar
        if grid * corr <= sms:
            splits, _ = split_count(128 if grid * 2 * corr <= sms else 256)
    return [splits] * b


def _aiter(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """AITER get_meta_param: the split count i in 1..16 maximising
    bs·i / (ceil(bs·i / CUs)·CUs) × avg / (avg + 84.1·i), the first (smallest) on ties; avg is the batch's mean
    history (total_kv / bs). One count for every request of the batch (num_kv_splits_indptr is uniform).
    Assumption: a bf16 query, so the fp8-query cap by minimum block size does not apply."""
    sms, bs, avg = gpu.compute_units, len(ctx), sum(ctx) / len(ctx)
    scored = [(bs * i / (cdiv(bs * i, sms) * sms) * avg / (avg + AITER_SPLIT_OVERHEAD * i), i)
              for i in range(1, AITER_MAX_SPLITS + 1)]
    return [max(scored, key=lambda t: t[0])[1]] * bs


def _aiter_persistent(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """AITER get_mla_metadata_v1_0 (SGLang's persistent decode): 16 splits a request on gfx942; on gfx950
    min(history // 196, ceil(CUs / batch), 64) a request (at least 1)."""
    if _gfx(gpu) == "gfx942":
        return [AITER_PS_GFX942_SPLITS] * len(ctx)
    per_cu = cdiv(gpu.compute_units, len(ctx))
    return [max(1, min(c // AITER_PS_TOKENS_PER_SPLIT, per_cu, AITER_PS_MAX_SPLITS)) for c in ctx]


def _triton_vllm(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """vLLM Triton MLA: 4 splits for every request (each holds ceil(history / 4) tokens)."""
    return [VLLM_TRITON_SPLITS] * len(ctx)


def _next_pow2(x: int) -> int:
    return 1 << (x - 1).bit_length() if x > 1 else 1


def _triton_sglang(gpu: GPU, ctx: tuple[int, ...], heads: int, kv_heads: int) -> list[int]:
    """SGLang get_num_kv_splits_triton.

    cap = max(8, next_pow2(CUs)) (256 at most on gfx942). With L = longest, l = shortest (l := L when
    L·8 < l·10): chunk1 = ceil(L / min(ceil(L / l), cap)); chunk2 = ceil(L / min(ceil(int(CUs·max(log2(L/64), 1))
    / grid), cap)) with grid = requests × heads (SGLang reads the checkpoint's num_key_value_heads, which for
    DeepSeek-style MLA checkpoints equals the query heads, so its KV group is 1 whatever the latent's
    `kv_heads`); a request gets max(ceil(len / chunk1), ceil(len / chunk2)) splits (the kernel then rounds each
    split's tokens up to a multiple of 32).
    """
    sms = gpu.compute_units
    cap = max(SGLANG_TRITON_BASE_SPLITS, _next_pow2(sms))
    if _gfx(gpu) == "gfx942":
        cap = min(cap, SGLANG_GFX942_SPLIT_CAP)
    longest, shortest = max(ctx), min(ctx)
    if longest * 8 < shortest * 10:
        shortest = longest
    chunk1 = cdiv(longest, min(cdiv(longest, shortest), cap))
    ext = np.float32(longest) / np.float32(SGLANG_SEQ_UNIT)
    ext_cores = int(np.float32(sms) * max(np.log2(ext), np.float32(1.0)))
    chunk2 = cdiv(longest, min(cdiv(ext_cores, len(ctx) * heads), cap))
    return [max(cdiv(c, chunk1), cdiv(c, chunk2)) for c in ctx]


_SPLITTERS = {
    MlaBackend.FLASHMLA: _flashmla,
    MlaBackend.FLASH_ATTN_VLLM: _fa3_vllm,
    MlaBackend.FLASH_ATTN_SGLANG: _fa3_sglang,
    MlaBackend.FLASHINFER: _flashinfer,
    MlaBackend.TRTLLM_GEN: _trtllm_gen,
    MlaBackend.AITER: _aiter,
    MlaBackend.AITER_PERSISTENT: _aiter_persistent,
    MlaBackend.TRITON_VLLM: _triton_vllm,
    MlaBackend.TRITON_SGLANG: _triton_sglang,
}
