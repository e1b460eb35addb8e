"""How each companion Triton kernel is compiled at a configuration: its function, signature, constants,
specialisations, warps and stages, as its launches on the GPU get them.

The companion kernel extension (`companion/kernels/`) holds the Triton source of the kernels the
product times from compiled code. The product reads those files as compiler input, as it reads a user's kernel
file for `infersim kernel --triton` (`load_source`): they are loaded by path, never imported as a dependency, and
their launchers need PyTorch, so compiling them needs Triton and PyTorch installed; without either the product
times these kernels from their analytic programs. A configuration is the string the product names it by, e.g.
`mla_decode` "splits=2 even=False", `kda_recurrent` "bv=4 store=True", `triton_quantize` "int4"; a trailing
"warps=N" launches it with N warps (waves on AMD) instead of its own.

`case` gives any configuration of the forms below, not only the compiled table's (`TABLE`), so a split count or
tile width no one measured is compiled when it is asked for. The companion's bench (`sass-counts`) writes the
table from the same cases.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from types import ModuleType

KERNELS_DIR = Path(__file__).resolve().parent.parent / "companion" / "kernels"


@dataclass(frozen=True)
class Case:
    """One kernel at one configuration, as Triton compiles it (`compiled.triton_build.build`'s arguments)."""

    fn: object  # the @triton.jit function
    signature: dict
    constexprs: dict
    num_warps: int
    aligned: tuple[str, ...] = ()  # integer arguments the JIT specialises as divisible by 16
    num_stages: int = 3


def load_source(path: Path | str, module_name: str | None = None) -> ModuleType:
    """The Python module of a Triton source file, loaded by path (its own imports run as written)."""
    path = Path(path).resolve()
    name = module_name or f"_infersim_triton_source_{abs(hash(str(path)))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@cache
def _companion(name: str) -> ModuleType:
    """A companion kernel module (`companion/kernels/<name>.py`), loaded for compiling: a copy of its
    own with TRITON_INTERPRET unset while it loads (a process that runs the kernels in Triton's interpreter, as
    the CPU tests do, still compiles them)."""
    interpret = os.environ.pop("TRITON_INTERPRET", None)
    try:
        return load_source(KERNELS_DIR / f"{name}.py", f"_infersim_companion_{name}")
    finally:
        if interpret is not None:
            os.environ["TRITON_INTERPRET"] = interpret


def _params(config: str) -> dict[str, str]:
    """"splits=2 even=False" -> {"splits": "2", "even": "False"}."""
    return dict(part.split("=", 1) for part in config.split())


def _bool(value: str) -> bool:
    if value not in ("True", "False"):
        raise ValueError(f"{value!r} is not True or False")
    return value == "True"


_PTR = {"bf16": "*bf16", "fp32": "*fp32", "fp16": "*fp16", "u8": "*u8", "i32": "*i32"}

# The MLA suite's query heads per GPU (validation.suites.mla_decode.HEADS); padded, they fill one 16-head block.
MLA_HEADS = 12


def mla_int_arguments(splits: int, padded: int) -> dict[str, int]:
    """The integer arguments `mla_decode.mla_decode` passes its kernels for `padded` heads (after padding) and
    `splits` splits, per name: contiguous q (heads, 576), cache (rows, 576), output (heads, 512), fp32 partials
    (splits, heads, 512) and log-sum-exps (splits, heads); with one split the partials' strides are 0. The
    row counts (sequences, history) only scale strides that are already multiples of 16."""
    width, lora = 576, 512
    rows = 1024  # any history: its stride is rows * 576
    part = (0, 0, 0) if splits == 1 else (splits * padded * lora, padded * lora, lora)
    lse = (0, 0) if splits == 1 else (splits * padded, padded)
    return {"n_heads": padded, "stride_qb": padded * width, "stride_qh": width, "stride_kb": rows * width,
            "stride_kt": width, "stride_ob": padded * lora, "stride_oh": lora,
            **dict(zip(("stride_pb", "stride_ps", "stride_ph"), part, strict=True)),
            **dict(zip(("stride_lb", "stride_ls"), lse, strict=True))}


def specialized(signature: dict[str, str], values: dict[str, int]) -> tuple[str, ...]:
    """The integer arguments of `signature` that Triton's JIT marks divisible by 16 at launch, from their values
    (it specializes every int argument not in do_not_specialize: a multiple of 16, 0 included, gets
    tt.divisibility 16; a value of 1 would become a constant, which none of these is)."""
    if any(values[name] == 1 for name in signature if name in values):
        raise ValueError("an argument of value 1 would be specialized to a constant; compile it as one")
    return tuple(name for name, kind in signature.items() if kind == "i32" and values[name] % 16 == 0)


def _codec_case(kernel: str, config: str) -> Case:
    codecs = _companion("codecs")
    if config not in codecs.CODECS:
        raise ValueError(f"unknown codec {config!r} (valid: {', '.join(codecs.CODECS)})")
    fn, sig = ((codecs._quantize_kernel, {"x_ptr": _PTR["fp16"], "out_ptr": _PTR["u8"], "n": "i32"})
               if kernel == "triton_quantize" else
               (codecs._dequantize_kernel, {"src_ptr": _PTR["u8"], "y_ptr": _PTR["fp16"], "n": "i32"}))
    return Case(fn, {**sig, "CODEC": "constexpr", "TILE_BYTES": "constexpr"},
                {"CODEC": codecs.CODEC_ID[config], "TILE_BYTES": codecs.tile_bytes(config)}, codecs.NUM_WARPS, ("n",))


def _kda_recurrent_case(config: str) -> Case:
    kda, p = _companion("kda"), _params(config)
    sig = {"q": _PTR["bf16"], "k": _PTR["bf16"], "v": _PTR["bf16"], "g": _PTR["fp32"], "beta": _PTR["fp32"],
           "state": _PTR["fp32"], "o": _PTR["bf16"], "states": _PTR["fp32"], "T": "i32", "H": "i32",
           "scale": "fp32", "K": "constexpr", "V": "constexpr", "BV": "constexpr", "STORE_STATES": "constexpr"}
    constexprs = {"K": 128, "V": 128, "BV": int(p["bv"]), "STORE_STATES": _bool(p["store"])}
    if "T" in p:  # decode: the JIT compiles an int argument of value 1 as that constant (straight-line code)
        sig["T"] = "constexpr"
        constexprs["T"] = int(p["T"])
    return Case(kda.kda_recurrent_kernel, sig, constexprs, kda.RECURRENT_WARPS)


_KDA_PREFILL = {"q": _PTR["bf16"], "k": _PTR["bf16"], "v": _PTR["bf16"], "g": _PTR["fp32"], "beta": _PTR["fp32"],
                "w": _PTR["bf16"], "u": _PTR["bf16"], "kg": _PTR["bf16"], "qg": _PTR["bf16"], "a_qk": _PTR["fp32"],
                "decay": _PTR["fp32"], "T": "i32", "H": "i32", "scale": "fp32", "K": "constexpr", "V": "constexpr",
                "BT": "constexpr", "BC": "constexpr", "CLAMP": "constexpr"}
_KDA_SCAN = {"w": _PTR["bf16"], "u": _PTR["bf16"], "kg": _PTR["bf16"], "qg": _PTR["bf16"], "a_qk": _PTR["fp32"],
             "decay": _PTR["fp32"], "h0": _PTR["fp32"], "o": _PTR["bf16"], "ht": _PTR["fp32"], "T": "i32",
             "H": "i32", "K": "constexpr", "V": "constexpr", "BT": "constexpr", "BV": "constexpr",
             "DOT_F32": "constexpr"}


def _kda_intra_case(config: str) -> Case:
    kda = _companion("kda")
    return Case(kda.kda_intra_kernel, _KDA_PREFILL,
                {"K": 128, "V": 128, "BT": int(_params(config)["chunk"]), "BC": kda.SUB_CHUNK, "CLAMP": kda.EXP_CLAMP},
                kda.PREFILL_WARPS, ("T",))


def _kda_scan_case(config: str) -> Case:
    kda, p = _companion("kda"), _params(config)
    return Case(kda.kda_scan_kernel, _KDA_SCAN,
                {"K": 128, "V": 128, "BT": int(p["chunk"]), "BV": int(p["bv"]), "DOT_F32": False},
                kda.PREFILL_WARPS, ("T",))


_MLA = {"q_ptr": _PTR["bf16"], "kv_ptr": _PTR["bf16"], "len_ptr": _PTR["i32"], "out_ptr": _PTR["bf16"],
        "part_ptr": _PTR["fp32"], "lse_ptr": _PTR["fp32"], "n_heads": "i32", "qk_scale": "fp32",
        **{f"stride_{s}": "i32" for s in ("qb", "qh", "kb", "kt", "ob", "oh", "pb", "ps", "ph", "lb", "ls")},
        "KV_LORA": "constexpr", "ROPE_DIM": "constexpr", "BLOCK_H": "constexpr", "BLOCK_N": "constexpr",
        "NUM_SPLITS": "constexpr", "EVEN_HEADS": "constexpr"}
_MLA_MERGE = {"part_ptr": _PTR["fp32"], "lse_ptr": _PTR["fp32"], "len_ptr": _PTR["i32"], "out_ptr": _PTR["bf16"],
              "n_heads": "i32", **{f"stride_{s}": "i32" for s in ("pb", "ps", "ph", "lb", "ls", "ob", "oh")},
              "KV_LORA": "constexpr", "BLOCK_H": "constexpr", "BLOCK_N": "constexpr", "NUM_SPLITS": "constexpr",
              "EVEN_HEADS": "constexpr"}


def _mla_case(kernel: str, config: str) -> Case:
    mla, p = _companion("mla_decode"), _params(config)
    splits, even = int(p["splits"]), _bool(p["even"])
    if splits < 1 or (kernel == "mla_merge" and splits == 1):
        raise ValueError(f"{kernel} has no configuration of {splits} splits")
    common = {"KV_LORA": mla.KV_LORA, "BLOCK_H": mla.BLOCK_H, "BLOCK_N": mla.BLOCK_N, "NUM_SPLITS": splits,
              "EVEN_HEADS": even}
    values = mla_int_arguments(splits, mla.BLOCK_H if even else MLA_HEADS)
    if kernel == "mla_merge":
        return Case(mla.mla_merge_kernel, _MLA_MERGE, common, mla.NUM_WARPS, specialized(_MLA_MERGE, values))
    return Case(mla.mla_decode_kernel, _MLA, {**common, "ROPE_DIM": mla.ROPE_DIM}, mla.NUM_WARPS,
                specialized(_MLA, values), mla.NUM_STAGES)


def _quickreduce_case(kernel: str, codec: str) -> Case:
    """The three kernels of `allreduce.py` per codec, as the two-GPU sweep launched them: WORLD=2, bf16 input and
    output (so CAST_FP16), 4 warps; the int64 address tables and the flag, epoch and error words are 16-byte
    aligned tensors, n is a multiple of 16, and the arguments of `allreduce.NO_SPEC` are not specialized."""
    ar, codecs = _companion("allreduce"), _companion("codecs")
    if codec not in codecs.CODECS:
        raise ValueError(f"unknown codec {codec!r} (valid: {', '.join(codecs.CODECS)})")
    warps = 4  # the QuickReduce port's launches (companion/bench/quickreduce.py: NUM_WARPS)
    runtime = {name: "i32" for name in ar.NO_SPEC}
    tables = {"flags": "*i64", "epochs": "*i32"}
    common = {"WORLD": 2, "CODEC": codecs.CODEC_ID[codec], "TB": codecs.tile_bytes(codec),
              "TILE": codecs.TILE_VALUES}
    constexpr = dict.fromkeys(common, "constexpr")
    if kernel == "qr_scatter":
        sig = {"x_ptr": "*bf16", "n": "i32", "bufs1": "*i64", **tables, "rank": "i32", "n_tiles": "i32",
               "seg": "i32", "g_cap": "i32", **constexpr, "CAST_FP16": "constexpr"}
        return Case(ar._scatter_kernel, sig, {**common, "CAST_FP16": True}, warps, ("n",))
    if kernel == "qr_reduce":
        sig = {"bufs1": "*i64", "bufs2": "*i64", **tables, "err": "*i32", **runtime, **constexpr,
               "WORDS": "constexpr"}
        return Case(ar._reduce_kernel, sig, {**common, "WORDS": ar._words(codec)}, warps)
    sig = {"out_ptr": "*bf16", "n": "i32", "bufs2": "*i64", **tables, "err": "*i32", **runtime, **constexpr}
    return Case(ar._gather_kernel, sig, common, warps, ("n",))


def _norm_case(kernel: str, config: str) -> Case:
    norms, p = _companion("norms"), _params(config)
    if kernel == "triton_add":
        return Case(norms.add_kernel, {"x_ptr": _PTR["bf16"], "res_ptr": _PTR["bf16"], "sum_ptr": _PTR["bf16"],
                                       "n": "i32", "BLOCK": "constexpr"},
                    {"BLOCK": int(p["block"])}, norms.ADD_NUM_WARPS, ("n",))
    hidden = int(p["hidden"])
    block = 1 << (hidden - 1).bit_length()
    if kernel == "triton_add_rmsnorm_fused":
        sig = {"x_ptr": _PTR["bf16"], "res_ptr": _PTR["bf16"], "w_ptr": _PTR["bf16"], "out_ptr": _PTR["bf16"],
               "new_res_ptr": _PTR["bf16"], "hidden": "i32", "eps": "fp32", "BLOCK": "constexpr"}
        return Case(norms.add_rmsnorm_fused_kernel, sig, {"BLOCK": block}, norms.ROW_NUM_WARPS, ("hidden",))
    sig = {"x_ptr": _PTR["bf16"], "w_ptr": _PTR["bf16"], "out_ptr": _PTR["bf16"], "hidden": "i32", "eps": "fp32",
           "BLOCK": "constexpr"}
    return Case(norms.rmsnorm_kernel, sig, {"BLOCK": block}, norms.ROW_NUM_WARPS, ("hidden",))


def _probe_case(config: str) -> Case:
    """The grid probe's tile work (65,536 tiles: divisible by 16), 1,024 fp32 a tile, 4 warps
    (`validation.probes.GRID_BLOCK` and `GRID_WARPS`)."""
    probes = _companion("probes")
    sig = {"src_ptr": _PTR["fp32"], "dst_ptr": _PTR["fp32"], "n_tiles": "i32", "BLOCK": "constexpr",
           "ROUNDS": "constexpr"}
    return Case(probes.tile_work_kernel, sig, {"BLOCK": 1024, "ROUNDS": int(_params(config)["rounds"])}, 4,
                ("n_tiles",))


# AITER's Triton block-scaled FP8 GEMM (companion/kernels/aiter_gemm.py) on gfx942: fnuz FP8 operands (fp8e4b8),
# fp32 scales, bf16 output. Its integer arguments by what their values give the JIT: the unit strides (A, W and the
# scales are contiguous along K, C along N) compile as the constant 1; M, N and the scale strides K / 128 and
# ceil(N / 128) are named in the configuration by class ("1": the constant, "16": a multiple of 16, "any"); K and
# the strides that are K or N are multiples of 16 whenever K is a multiple of 128 and N of 16.
_AITER_GEMM = {"a_ptr": "*fp8e4b8", "b_ptr": "*fp8e4b8", "c_ptr": _PTR["bf16"], "a_scale_ptr": _PTR["fp32"],
               "b_scale_ptr": _PTR["fp32"], "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
               "stride_ak": "constexpr", "stride_bk": "constexpr", "stride_bn": "i32", "stride_cm": "i32",
               "stride_cn": "constexpr", "stride_ascale_m": "i32", "stride_ascale_k": "constexpr",
               "stride_bscale_k": "i32", "stride_bscale_n": "constexpr", "GROUP_K": "constexpr",
               "GROUP_N": "constexpr", "BLOCK_SIZE_M": "constexpr", "BLOCK_SIZE_N": "constexpr",
               "BLOCK_SIZE_K": "constexpr"}
_VALUE_OF_CLASS = {"1": 1, "16": 32, "any": 33}  # a representative value of each class


def aiter_gemm_config(m: int, n: int, k: int) -> str:
    """The configuration of the AITER GEMM at an m x n x k shape: the class of each argument the JIT specializes
    by value (`_AITER_GEMM`)."""
    def of(value: int) -> str:
        return "1" if value == 1 else "16" if value % 16 == 0 else "any"

    return f"m={of(m)} n={of(n)} ks={of(k // 128)} ns={of(-(-n // 128))}"


def _aiter_gemm_case(config: str) -> Case:
    gemm, p = _companion("aiter_gemm"), _params(config)
    sig, values = dict(_AITER_GEMM), {}
    for arg, key in (("M", "m"), ("N", "n"), ("stride_ascale_m", "ks"), ("stride_bscale_k", "ns")):
        values[arg] = _VALUE_OF_CLASS[p[key]]
        if values[arg] == 1:
            sig[arg] = "constexpr"
    values.update(K=1024, stride_am=1024, stride_bn=1024, stride_cm=values["N"] if values["N"] % 16 == 0 else 48)
    constexprs = {"stride_ak": 1, "stride_bk": 1, "stride_cn": 1, "stride_ascale_k": 1, "stride_bscale_n": 1,
                  "GROUP_K": gemm.GROUP_K, "GROUP_N": gemm.GROUP_N, "BLOCK_SIZE_M": gemm.BLOCK_SIZE_M,
                  "BLOCK_SIZE_N": gemm.BLOCK_SIZE_N, "BLOCK_SIZE_K": gemm.BLOCK_SIZE_K,
                  **{arg: 1 for arg, value in values.items() if value == 1}}
    runtime = {name: kind for name, kind in sig.items() if kind != "constexpr"}
    aligned = tuple(name for name, kind in runtime.items() if kind == "i32" and values[name] % 16 == 0)
    return Case(gemm.gemm_a8w8_blockscale_kernel, sig, constexprs, gemm.NUM_WARPS, aligned, gemm.NUM_STAGES)


_CASES = {
    "triton_quantize": lambda config: _codec_case("triton_quantize", config),
    "triton_dequantize": lambda config: _codec_case("triton_dequantize", config),
    "kda_recurrent": _kda_recurrent_case, "kda_intra": _kda_intra_case, "kda_scan": _kda_scan_case,
    "mla_decode": lambda config: _mla_case("mla_decode", config),
    "mla_merge": lambda config: _mla_case("mla_merge", config),
    "qr_scatter": lambda config: _quickreduce_case("qr_scatter", config),
    "qr_reduce": lambda config: _quickreduce_case("qr_reduce", config),
    "qr_gather": lambda config: _quickreduce_case("qr_gather", config),
    "triton_add": lambda config: _norm_case("triton_add", config),
    "triton_rmsnorm": lambda config: _norm_case("triton_rmsnorm", config),
    "triton_add_rmsnorm_fused": lambda config: _norm_case("triton_add_rmsnorm_fused", config),
    "probe_tile_work": _probe_case,
    "aiter_gemm_blockscale": _aiter_gemm_case,
}
KERNELS = tuple(_CASES)


def case(kernel: str, config: str) -> Case:
    """How `kernel` is compiled at `config`. Raises ValueError for an unknown kernel or a malformed configuration,
    ImportError when the companion's sources cannot be loaded (no Triton or PyTorch)."""
    if kernel not in _CASES:
        raise ValueError(f"no companion kernel {kernel!r} (valid: {', '.join(KERNELS)})")
    base, warps = re.subn(r"\s*\bwarps=(\d+)", "", config)
    try:
        found = _CASES[kernel](base.strip())
        if warps:  # launched with other warps than the companion's own: "... warps=N"
            found = replace(found, num_warps=int(re.search(r"\bwarps=(\d+)", config).group(1)))
    except (KeyError, TypeError) as e:
        raise ValueError(f"{kernel}: malformed configuration {config!r} ({e})") from None
    return found


# Every configuration of the compiled table (compiled/data/h200.csv), in its order.
TABLE = (
    *[("triton_quantize", c) for c in ("fp", "int8", "int6", "int4", "int3", "fp4")],
    *[("triton_dequantize", c) for c in ("fp", "int8", "int6", "int4", "int3", "fp4")],
    *[("kda_recurrent", f"bv={bv} store={store}") for bv in (32, 16, 8, 4) for store in (True, False)],
    *[("kda_recurrent", f"bv={bv} store=False T=1") for bv in (32, 16)],
    ("kda_intra", "chunk=64"), ("kda_scan", "chunk=64 bv=32"),
    *[(k, f"hidden={h}") for h in (7168, 8192) for k in ("triton_add_rmsnorm_fused", "triton_rmsnorm")],
    ("triton_add", "block=4096"),
    *[("probe_tile_work", f"rounds={r}") for r in (0, 32, 128)],
    *[(k, f"splits={s} even={e}") for s in (1, 4, 16) for e in (False, True)
      for k in (("mla_decode",) if s == 1 else ("mla_decode", "mla_merge"))],
    *[(k, c) for c in ("fp", "int8", "int6", "int4", "int3", "fp4") for k in ("qr_scatter", "qr_reduce", "qr_gather")],
)

