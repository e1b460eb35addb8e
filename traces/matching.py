"""Traced GPU kernels mapped to infersim kernel kinds with their shapes, so that the model can predict each.

A profiler names kernels (`nvjet_sm90_tst_...`, `Cijk_...`, `cudnn_generated_..._sdpa_...`,
`vectorized_layer_norm_kernel`, `ncclDevKernel_...`) and, in the PyTorch profiler's traces, the operator that
launched each with its input shapes (`aten::mm ((8, 5120), (5120, 10240))`). The operator says what was
computed and the shapes how much; the name says which library did it. `match_kernels` groups a trace's
kernels into launches of one operator (a GEMM and its split-K reduction; an attention kernel and its
combine; a library's workspace fill) and maps each group to a kernel kind of `workloads`:

- `aten::mm`, `addmm`, `bmm`, `linear`, `matmul`: `Gemm`, m x k @ k x n (batches fold into m), with the tiles
  and split a BLAS picks on the GPU (`workloads.tiles.blas_gemm`);
- `aten::_cudnn_attention_forward`, `_scaled_dot_product_{cudnn,flash,efficient}_attention`,
  `_flash_attention_forward`, `_efficient_attention_forward`: `AttentionPrefill`, q [B, H, Lq, D] against k
  [B, Hkv, Lk, D] (the SDPA layout; [B, L, H, D] for the last two, or varlen [tokens, H, D] with the sequences'
  offsets: B sequences of the mean lengths): Lk - Lq cached keys, causal when Lq > 1;
- `aten::_fused_rms_norm`, `rms_norm`, `native_layer_norm`, `layer_norm`: `RmsNorm`, rows x the weight's length;
- pointwise operators (`add`, `mul`, `neg`, `silu`, `cos`, ...; `copy_` between dtypes): `Elementwise` over the
  output's values, its inputs counted in units of the output;
- `aten::copy_` within one dtype, `cat`, `index_select`, `embedding`, `index`, `gather`, `clone`, ...: `Copy` of
  the output's bytes;
- `aten::fill_`, `zero_`: `Elementwise` with no inputs;
- vLLM's custom operators: `_C::rms_norm` (`RmsNorm`), `_C::fused_add_rms_norm` (`AddRmsNorm`),
  `_C::silu_and_mul` (`Elementwise`, two inputs), `_C::rotary_embedding` (`Elementwise` over q and k, in place),
  `_C_cache_ops::reshape_and_cache_flash` / `reshape_and_cache` / `concat_and_cache_mla` (`Copy` of the new keys
  and values);
- NCCL/RCCL collectives (`nccl:all_reduce`, `c10d::allreduce_`, `nccl:all_gather`, ...): a `Collective` of the
  input tensor's bytes over the group (its size is not in the trace: the caller gives it, else the group stays
  unpredicted).

Kernels without an operator's shapes (a trace without shapes, a graph replay, Nsight or rocprof traces) match
by their launch where it tells their size (`launch_kind`: a device copy or fill of recorded bytes; PyTorch's
pointwise kernels by grid, workgroup and the per-thread count in their name), else by name only to a family,
left unpredicted with the reason; so is any operator the table does not hold. Each group says how it was matched
(`KernelGroup.method`: `SHAPES`, `LAUNCH` or `NAME`). Nothing is dropped: every kernel is in exactly one group,
matched or not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from hwmodels.dtypes import Dtype
from hwmodels.spec import GPU
from traces.formats import TracedKernel
from workloads import tiles
from workloads.attention_kernels import AttentionPrefill
from workloads.collectives import Collective, CollectiveOp
from workloads.kernel_base import KernelKind
from workloads.kernels import AddRmsNorm, Copy, Elementwise, Gemm, RmsNorm

# Profiler dtype names -> infersim dtypes (PyTorch's c10 scalar type names as the profiler writes them)
_DTYPES = {"c10::BFloat16": Dtype.BF16, "c10::Half": Dtype.FP16, "float": Dtype.FP32, "double": Dtype.FP32,
           "c10::Float8_e4m3fn": Dtype.FP8, "c10::Float8_e5m2": Dtype.FP8, "signed char": Dtype.INT8,
           "unsigned char": Dtype.INT8, "bool": Dtype.INT8}
# bytes per value of the integer types that the dtype table above does not carry
_INT_BYTES = {"long int": 8, "int": 4, "short int": 2}

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul", "aten::_scaled_mm"}
ATTENTION_OPS = {"aten::_cudnn_attention_forward", "aten::_scaled_dot_product_cudnn_attention",
                 "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                 "aten::_flash_attention_forward", "aten::_efficient_attention_forward"}
NORM_OPS = {"aten::_fused_rms_norm", "aten::rms_norm", "aten::native_layer_norm", "aten::layer_norm"}
COPY_OPS = {"aten::cat", "aten::index_select", "aten::embedding", "aten::index", "aten::gather", "aten::clone",
            "aten::contiguous", "aten::index_put_", "aten::_index_put_impl_", "aten::slice_scatter", "aten::stack"}
# vLLM's custom operators (csrc/torch_bindings.cpp, csrc/cache.h), by the argument order they are registered with
VLLM_OPS = {"_C::rms_norm", "_C::fused_add_rms_norm", "_C::silu_and_mul", "_C::gelu_and_mul", "_C::rotary_embedding",
            "_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache",
            "_C_cache_ops::concat_and_cache_mla"}
COLLECTIVE_OPS = {
    "nccl:all_reduce": CollectiveOp.ALL_REDUCE, "c10d::allreduce_": CollectiveOp.ALL_REDUCE,
    "nccl:all_gather": CollectiveOp.ALL_GATHER, "c10d::allgather_": CollectiveOp.ALL_GATHER,
    "c10d::_allgather_base_": CollectiveOp.ALL_GATHER, "nccl:_all_gather_base": CollectiveOp.ALL_GATHER,
    "nccl:reduce_scatter": CollectiveOp.REDUCE_SCATTER, "c10d::reduce_scatter_": CollectiveOp.REDUCE_SCATTER,
    "c10d::_reduce_scatter_base_": CollectiveOp.REDUCE_SCATTER,
    "nccl:_reduce_scatter_base": CollectiveOp.REDUCE_SCATTER,
    "nccl:all_to_all": CollectiveOp.ALL_TO_ALL, "c10d::alltoall_": CollectiveOp.ALL_TO_ALL,
    "c10d::alltoall_base_": CollectiveOp.ALL_TO_ALL}
FILL_OPS = {"aten::fill_", "aten::zero_", "aten::zeros", "aten::ones", "aten::full"}
# Pointwise operators: FP32 operations per output value (an assumption for the transcendental ones: a few)
POINTWISE_OPS = {"aten::add": 1, "aten::add_": 1, "aten::sub": 1, "aten::mul": 1, "aten::mul_": 1, "aten::div": 1,
                 "aten::neg": 1, "aten::silu": 4, "aten::gelu": 8, "aten::sigmoid": 4, "aten::relu": 1,
                 "aten::tanh": 4, "aten::exp": 2, "aten::cos": 4, "aten::sin": 4, "aten::rsqrt": 2, "aten::pow": 2,
                 "aten::where": 1, "aten::clamp": 1, "aten::maximum": 1, "aten::minimum": 1, "aten::abs": 1,
                 "aten::_to_copy": 1, "aten::to": 1, "aten::softmax": 5, "aten::_softmax": 5,
                 "aten::log_softmax": 5, "aten::_log_softmax": 5, "aten::sum": 1, "aten::mean": 1,
                 "aten::amax": 1, "aten::argmax": 1}

# Name patterns: the family of a kernel that has no operator, and the auxiliary kernels that belong to the
# launch before them (a split-K reduction after its GEMM, a combine after split-KV attention, a workspace fill).
_FAMILIES = (
    ("collective", re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|cross_device_reduce", re.I)),
    ("attention_prefill", re.compile(r"flash|fmha|sdpa|attention|attn", re.I)),
    ("gemm", re.compile(r"nvjet|gemm|Cijk_|cutlass|xmma|wgmma|matmul|splitKreduce", re.I)),
    ("norm", re.compile(r"rms_?norm|layer_?norm", re.I)),
    ("copy", re.compile(r"copy|memcpy|cat_?array|gather|index_?select|scatter", re.I)),
    ("elementwise", re.compile(r"elementwise|memset|fill|act_and_mul|silu|rotary|rope", re.I)),
)
_AUXILIARY = re.compile(r"splitKreduce|lean_reduction|^Memset|combine|reduce_kernel<.*splitK", re.I)


@dataclass(frozen=True)
class KernelGroup:
    """The kernels of one operator's launch (a GEMM and its split-K reduction, say), and what they map to."""

    kernels: tuple[TracedKernel, ...]
    family: str  # an infersim family ("gemm", "norm", ...), "collective", or "unknown"
    kernel: KernelKind | None  # the kind the model times; None when unmatched or a collective
    reason: str = ""  # why unmatched
    collective: Collective | None = None  # a collective the model times over the group's links
    # how the kind and its size were found: `SHAPES` (the launching operator's recorded shapes), `LAUNCH` (the
    # kernel's name and its launch: grid and workgroup, or a copy's bytes), or `NAME` (its family only, unmatched)
    method: str = ""
    launch: int | None = None  # which of the kind's launches the group is (a match by the step's order); None: all
    host_copy_bytes: int | None = None  # a copy to or from host memory over the GPU's host link, of these bytes

    @property
    def name(self) -> str:
        return self.kernels[0].name

    @property
    def traced_s(self) -> float:
        return sum(k.duration_s for k in self.kernels)

    @property
    def matched(self) -> bool:
        return self.kernel is not None or self.collective is not None or self.host_copy_bytes is not None


SHAPES = "operator shapes"  # exact: what the operator computed, from its recorded input shapes
LAUNCH = "launch geometry"  # estimated: the size from the grid, workgroup and the kernel's own template arguments
NAME = "name only"  # the family the name suggests; no size, so no prediction
CONFIDENCE = {SHAPES: "exact", LAUNCH: "estimated (within one workgroup's work)", NAME: "family only"}


def family_of_name(name: str) -> str:
    """The family a kernel's name suggests, or "unknown"."""
    for family, pattern in _FAMILIES:
        if pattern.search(name):
            return family
    return "unknown"


def match_kernels(kernels: Sequence[TracedKernel], gpu: GPU, group_size: int | None = None) -> list[KernelGroup]:
    """The kernels grouped by launching operator and mapped to kinds with the tiles a library picks on `gpu`
    (`workloads.tiles`), collectives over `group_size` ranks; order kept, every kernel in exactly one group."""
    groups: list[list[TracedKernel]] = []
    for k in kernels:
        group = groups[-1] if groups else None
        same_call = (group is not None and k.op is not None and k.op == group[0].op and k.shapes == group[0].shapes
                     and k.stream == group[0].stream and k.device == group[0].device)
        # one main kernel per group: two identical operators in a row stay two launches
        if same_call and (_AUXILIARY.search(k.name) or all(_AUXILIARY.search(g.name) for g in group)):
            group.append(k)
        else:
            groups.append([k])
    return [_group(tuple(g), gpu, group_size) for g in groups]


def _group(kernels: tuple[TracedKernel, ...], gpu: GPU, group_size: int | None) -> KernelGroup:
    first = next((k for k in kernels if not _AUXILIARY.search(k.name)), kernels[0])
    family = family_of_name(first.name)
    if first.op in COLLECTIVE_OPS and first.shapes is not None:
        return _collective_group(kernels, first, group_size)
    if first.op is None or first.shapes is None:
        if first.kind == "memcpy" and first.bytes is not None and _HOST.search(first.name):
            return KernelGroup(kernels, "host_copy", None, method=LAUNCH, host_copy_bytes=first.bytes)
        kind, why = launch_kind(first)
        if kind is not None:
            return KernelGroup(kernels, _kind_family(kind), kind, method=LAUNCH)
        return KernelGroup(kernels, family, None, why, method=NAME)
    try:
        kind = kind_of(first.op, first.shapes, first.dtypes or (), gpu)
    except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError) as e:
        return KernelGroup(kernels, family, None, f"{first.op}: shapes {first.shapes} not understood ({e})",
                           method=NAME)
    if kind is None:
        launched, _ = launch_kind(first)  # an operator the table lacks, running a kernel whose launch tells its size
        if launched is not None:
            return KernelGroup(kernels, _kind_family(launched), launched, method=LAUNCH)
        return KernelGroup(kernels, family, None, f"no kind for {first.op}", method=NAME)
    kind_family = _kind_family(kind)
    return KernelGroup(kernels, kind_family, kind, method=SHAPES)


# PyTorch's pointwise kernels (aten/src/ATen/native/cuda/CUDALoops.cuh): each thread of a workgroup handles a fixed
# number of values, a template argument of the kernel's name, so the grid and the workgroup give the tensor's size
# to within one workgroup: vectorized_elementwise_kernel<vec_size> (vec_size values a thread),
# elementwise_kernel<num_threads, thread_work_size> and elementwise_kernel_manual_unroll<num_threads, work>, and
# unrolled_elementwise_kernel (thread_work_size(): 4, an assumption where the name does not say).
_POINTWISE_KERNELS = (
    re.compile(r"\bvectorized_elementwise_kernel<\s*(?:\(int\))?(\d+)"),
    re.compile(r"\belementwise_kernel(?:_manual_unroll)?<\s*(?:\(int\))?\d+,\s*(?:\(int\))?(\d+)"),
    re.compile(r"\bunrolled_elementwise_kernel<()"),
)
# pointers a pointwise kernel takes: std::array<char*, N> is the output and N - 1 inputs
_POINTERS = re.compile(r"std::array<char\s*\*,\s*(?:\(unsigned long\))?(\d+)")
# C++ value types as the kernels' names spell them (CUDA, HIP, and nsys's demangling), widest match first
_NAME_DTYPES = (("c10::BFloat16", Dtype.BF16), ("__nv_bfloat16", Dtype.BF16), ("__hip_bfloat16", Dtype.BF16),
                ("c10::Half", Dtype.FP16), ("__half", Dtype.FP16), ("c10::Float8_e4m3", Dtype.FP8),
                ("double", Dtype.FP32), ("float", Dtype.FP32))
_FILL = re.compile(r"FillFunctor|fill", re.I)
_HOST = re.compile(r"host|pinned|pageable|HtoD|DtoH", re.I)  # a copy's name that says one side is host memory
_INPUTS_BY_FUNCTOR = ((re.compile(r"BinaryFunctor|CUDAFunctor_add<|CompareFunctor|BitwiseAndFunctor|"
                                  r"BitwiseOrFunctor|where_kernel"), 2),)


def launch_kind(kernel: TracedKernel) -> tuple[KernelKind | None, str]:
    """The kind of a kernel that has no operator shapes, from what its launch records: a device-to-device copy or a
    fill of known bytes, or one of PyTorch's pointwise kernels, whose grid, workgroup and name give its size. Else
    (None, why not)."""
    if kernel.kind != "kernel":
        if kernel.bytes is None:
            return None, f"a {kernel.kind} without its bytes in the trace"
        if kernel.kind == "memset":
            return Elementwise(elements=kernel.bytes, inputs=0, dtype=Dtype.INT8), ""
        if _HOST.search(kernel.name):
            return None, "a copy to or from the host (PCIe)"
        return Copy(size_bytes=kernel.bytes), ""
    if kernel.grid is None or kernel.block is None:
        return None, "no launching operator with shapes, and no grid in the trace (a graph replay)"
    per_thread = next((m.group(1) for pattern in _POINTWISE_KERNELS if (m := pattern.search(kernel.name))), None)
    if per_thread is None:
        return None, "no launching operator with shapes in the trace, and a kernel whose size its launch does not tell"
    workgroups = math.prod(kernel.grid)
    threads = math.prod(kernel.block)
    if workgroups <= 0 or threads <= 0:
        return None, "an empty launch"
    elements = workgroups * threads * (int(per_thread) if per_thread else 4)
    dtype = next((d for text, d in _NAME_DTYPES if text in kernel.name), Dtype.FP32)
    if _FILL.search(kernel.name):
        return Elementwise(elements=elements, inputs=0, dtype=dtype), ""
    pointers = _POINTERS.search(kernel.name)
    inputs = (int(pointers.group(1)) - 1 if pointers else
              next((n for pattern, n in _INPUTS_BY_FUNCTOR if pattern.search(kernel.name)), 1))
    return Elementwise(elements=elements, inputs=max(0, inputs), dtype=dtype), ""


def _collective_group(kernels: tuple[TracedKernel, ...], first: TracedKernel, group_size: int | None
                      ) -> KernelGroup:
    """A collective operator's kernels as the `Collective` each rank issues (what it contributes: the input of an
    all-reduce, all-gather or all-to-all; the whole input of a reduce-scatter, its largest tensor)."""
    if group_size is None or group_size < 2:
        return KernelGroup(kernels, "collective", None, f"{first.op}: the group's size is not in the trace "
                                                        "(give it: --group-size)")
    tensors = _tensors(first.shapes or (), first.dtypes or ())
    if not tensors:
        return KernelGroup(kernels, "collective", None, f"{first.op}: no tensor shapes recorded")
    op = COLLECTIVE_OPS[first.op]
    sizes = [_numel(shape) * _bytes_per_value(dtype) for shape, dtype in tensors]
    payload = max(sizes) if op is CollectiveOp.REDUCE_SCATTER else sizes[0]
    return KernelGroup(kernels, "collective", None, collective=Collective(op, payload, group_size, first.op))


def _kind_family(kind: KernelKind) -> str:
    fam = kind.launches()[0].family
    return fam.value if fam else "unknown"


def _dtype(name: str | None) -> Dtype:
    return _DTYPES.get(name or "", Dtype.BF16)


def _bytes_per_value(name: str | None) -> float:
    if name in _INT_BYTES:
        return _INT_BYTES[name]
    return _dtype(name).bits / 8


def _numel(shape) -> int:
    return math.prod(int(d) for d in shape) if shape else 1


def _tensors(shapes: tuple, dtypes: tuple) -> list[tuple[tuple, str | None]]:
    """The inputs that are tensors (a shape with at least one dimension), with their types."""
    out = []
    for i, shape in enumerate(shapes):
        dtype = dtypes[i] if i < len(dtypes) else None
        if isinstance(shape, tuple) and shape and all(isinstance(d, int) for d in shape):
            out.append((shape, dtype))
        elif isinstance(shape, tuple) and shape and all(isinstance(s, tuple) for s in shape):  # a TensorList
            out += [(s, None) for s in shape if s and all(isinstance(d, int) for d in s)]
    return out


def _broadcast(shapes: list[tuple]) -> tuple:
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    return tuple(max(dims) for dims in zip(*padded, strict=True))


def kind_of(op: str, shapes: tuple, dtypes: tuple, gpu: GPU) -> KernelKind | None:
    """The kernel kind of one operator call with these input shapes and types on `gpu`; None if the table lacks
    it."""
    tensors = _tensors(shapes, dtypes)
    if op in GEMM_OPS:
        g = _gemm(op, tensors)
        # `torch._scaled_mm` takes one scale per tensor or per row and column, applied once after the loop: no
        # block-scaled rescale inside it (`tiles.BLOCK_SCALE_GROUP_K`)
        pinned = {"scale_group_k": 0} if op == "aten::_scaled_mm" else None
        return tiles.blas_gemm(gpu, g.m, g.n, g.k, g.dtype, pinned)
    if op in ATTENTION_OPS:
        return tiles.with_tiles(_attention(op, tensors), gpu)[0]
    if op in NORM_OPS:
        (x, dtype), weight = tensors[0], tensors[1][0] if len(tensors) > 1 else None
        hidden = _numel(weight) if weight else x[-1]
        return RmsNorm(tokens=max(1, _numel(x) // hidden), hidden=hidden, dtype=_dtype(dtype))
    if op in VLLM_OPS:
        return _vllm_kind(op, tensors)
    if not tensors:
        return None
    out_shape = _broadcast([s for s, _ in tensors])
    if op == "aten::copy_":
        (dst, dst_type), src_type = tensors[0], tensors[-1][1]
        if dst_type == src_type:
            return Copy(size_bytes=max(1, round(_numel(dst) * _bytes_per_value(dst_type))))
        return Elementwise(elements=_numel(dst), inputs=1, dtype=_dtype(dst_type))
    if op in COPY_OPS:
        dtype = next((t for _, t in tensors if t is not None), None)  # a TensorList's types are not recorded
        return Copy(size_bytes=max(1, round(_copy_values(op, tensors) * _bytes_per_value(dtype))))
    if op in FILL_OPS:
        return Elementwise(elements=_numel(out_shape), inputs=0, dtype=_dtype(tensors[0][1]))
    if op in POINTWISE_OPS:
        elements = _numel(out_shape)
        reads = sum(_numel(s) for s, _ in tensors)
        return Elementwise(elements=elements, inputs=max(1, round(reads / elements)),
                           ops_per_element=POINTWISE_OPS[op], dtype=_dtype(tensors[0][1]))
    return None


def _vllm_kind(op: str, tensors: list[tuple[tuple, str | None]]) -> KernelKind:
    """A vLLM custom operator's kind from its tensors, in the order vLLM registers its arguments."""
    if op == "_C::rms_norm":  # (out, input, weight, epsilon)
        (x, dtype), (weight, _) = tensors[1], tensors[2]
        return RmsNorm(tokens=max(1, _numel(x) // _numel(weight)), hidden=_numel(weight), dtype=_dtype(dtype))
    if op == "_C::fused_add_rms_norm":  # (input, residual, weight, epsilon)
        (x, dtype), (weight, _) = tensors[0], tensors[2]
        return AddRmsNorm(tokens=max(1, _numel(x) // _numel(weight)), hidden=_numel(weight), dtype=_dtype(dtype))
    if op in ("_C::silu_and_mul", "_C::gelu_and_mul"):  # (out, input): out = act(input[:d]) * input[d:]
        out, dtype = tensors[0]
        return Elementwise(elements=_numel(out), inputs=2, ops_per_element=4, dtype=_dtype(dtype))
    if op == "_C::rotary_embedding":  # (positions, query, key, head_size, cos_sin_cache, is_neox): in place
        values = sum(_numel(shape) for shape, _ in tensors[1:3])
        return Elementwise(elements=values, inputs=1, ops_per_element=3, dtype=_dtype(tensors[1][1]))
    # reshape_and_cache(_flash)(key, value, key_cache, value_cache, slot_mapping, ...); concat_and_cache_mla(kv_c,
    # k_pe, kv_cache, slot_mapping, ...): the new tokens' rows, written once into the paged cache
    news = tensors[:2]
    return Copy(size_bytes=max(1, round(sum(_numel(s) * _bytes_per_value(t) for s, t in news))))


def _gemm(op: str, tensors: list[tuple[tuple, str | None]]) -> Gemm:
    if op == "aten::addmm":
        tensors = tensors[1:]  # (bias, a, b)
    (a, a_type), (b, _) = tensors[0], tensors[1]
    k = a[-1]
    if op == "aten::linear":  # weight [n, k]
        n = b[0]
    else:  # b [.., k, n]
        n = b[-1]
        if b[-2] != k:
            raise ValueError(f"inner dimensions {a} @ {b} differ")
    return Gemm(m=max(1, _numel(a) // k), n=n, k=k, dtype=_dtype(a_type))


def _attention(op: str, tensors: list[tuple[tuple, str | None]]) -> AttentionPrefill:
    (q, q_type), (key, _) = tensors[0], tensors[1]
    if op in ("aten::_flash_attention_forward", "aten::_efficient_attention_forward") and len(q) == 3:
        # varlen: [tokens, H, D] with the sequences' offsets (cu_seqlens, B + 1 values) after q, k and v
        offsets = next((s for s, _ in tensors[3:] if len(s) == 1 and s[0] > 1), None)
        b = offsets[0] - 1 if offsets else 1
        (tq, h, d), (tk, hkv, _) = q, key
        lq, lk = max(1, tq // b), max(1, tk // b)
    elif op in ("aten::_flash_attention_forward", "aten::_efficient_attention_forward"):
        b, lq, h, d = q  # [B, L, H, D]
        _, lk, hkv, _ = key
    else:  # scaled_dot_product_*: [B, H, L, D]
        b, h, lq, d = q
        _, hkv, lk, _ = key
    return AttentionPrefill(seqs=b, q_len=lq, heads=h, kv_heads=hkv, head_dim=d, cached=max(0, lk - lq),
                            causal=lq > 1, dtype=_dtype(q_type))


def _copy_values(op: str, tensors: list[tuple[tuple, str | None]]) -> int:
    """Values an indexing or joining operator writes (what it reads is about the same)."""
    if op in ("aten::index_select", "aten::embedding"):
        table, index = (tensors[0][0], tensors[-1][0]) if op == "aten::index_select" else (tensors[0][0],
                                                                                          tensors[1][0])
        return _numel(index) * _numel(table[1:])
    if op in ("aten::cat", "aten::stack"):
        return sum(_numel(s) for s, _ in tensors)
    return _numel(tensors[0][0])
