"""`sass-counts`: count the SASS instructions each companion kernel issues per thread, compiled for sm_90.

    python -m validation.companion.bench sass-counts --out validation/data/sass_counts/h200.csv

Each kernel of `validation/companion/kernels/` is compiled by Triton for sm_90 (no GPU needed; Triton ships
ptxas and nvdisasm) with the specialisations its launches get on the GPU (pointers and the sizes the suites
pass divisible by 16), disassembled, and its main path counted: the instructions up to the last EXIT, less the
slow-path calls of IEEE division that a branch skips for normal operands. A kernel with one loop is counted as
a prologue (everything outside the loop) and a loop body per iteration; loops that spin on a flag count once,
in the prologue, and the copies of a tile loop unrolled per peer count as that one loop (`count`). The
QuickReduce all-reduce kernels are counted as the two-GPU sweep launched them: `qr_scatter`, `qr_reduce` and
`qr_gather`, per codec, with two ranks, bf16 in and out, 4 warps. The table it writes is read by
`validation.sass_counts`; run it with the Triton version of the measurements (their PROVENANCE.md).
triton is imported inside the functions that compile, so `count` works without it.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import tempfile

from validation.sass_counts import COLUMNS

# Instructions of one skipped slow-path call of IEEE division: the argument move, the return address, the
# CALL and the result move; the branch around them and BSSY/BSYNC are issued and stay counted.
_SKIPPED_PER_CALL = 4


def _instructions(sass: str) -> tuple[list[tuple[int, str]], dict[str, int]]:
    """(address, text) of every instruction and the address of every label."""
    found, labels, pending = [], {}, None
    for line in sass.splitlines():
        label = re.match(r"\s*\.(L_x_\d+):", line)
        if label:
            pending = label.group(1)
            continue
        ins = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?);", line)
        if ins:
            found.append((int(ins.group(1), 16), ins.group(2)))
            if pending:
                labels[pending] = found[-1][0]
                pending = None
    return found, labels


# An acquire read at GPU or system scope: what a loop polling a flag issues (`tl.atomic_add(flag, 0,
# sem="acquire")` compiles to LDG.E.STRONG.SYS; a real atomic would be an ATOM/ATOMG).
_SPIN_READ = re.compile(r"\b(?:LDG|LD|ATOMG|ATOM)\.[\w.]*STRONG\.(?:SYS|GPU)\b")
# Unrolled copies of one tile loop (a `tl.static_range` over peers around it) differ by a few address
# instructions; bodies further apart than this are different loops, which count() does not handle.
_COPY_TOLERANCE = 0.1


def count(sass: str) -> tuple[int, int]:
    """(prologue, loop body) instructions per thread on the main path.

    A loop is a backward branch and the instructions from its target to it. A loop that polls a flag (an
    acquire read at GPU or system scope, `_SPIN_READ`) is a spin-wait: counted once, in the prologue, as its
    body runs when the flag is already set. The other loop is the kernel's loop; a kernel may hold several
    disjoint copies of it (unrolled by a static loop around it, e.g. one per peer rank): the loop body is then
    their mean per iteration (rounded half up) and the prologue everything outside them.
    """
    found, labels = _instructions(sass)
    last_exit = max(a for a, t in found if "EXIT" in t)
    main = [(a, t) for a, t in found if a <= last_exit]
    loops = []
    for a, t in main:
        target = re.search(r"BRA.*\.(L_x_\d+)", t)
        if target and labels[target.group(1)] < a:
            loops.append((labels[target.group(1)], a))

    def issued(part: list[tuple[int, str]]) -> int:
        return len(part) - _SKIPPED_PER_CALL * sum("CALL" in t for _, t in part)

    bodies = [[(a, t) for a, t in main if start <= a <= end] for start, end in loops]
    tile = [(loop, body) for loop, body in zip(loops, bodies, strict=True)
            if not any(_SPIN_READ.search(t) for _, t in body)]
    if not tile:
        return issued(main), 0
    for (s1, e1), _ in tile:
        for (s2, e2), _ in tile:
            if (s1, e1) != (s2, e2) and s1 <= s2 and e2 <= e1:
                raise ValueError(f"nested loops at {s2:#x} in {s1:#x}: count() handles one loop")
    sizes = [issued(body) for _, body in tile]
    if max(sizes) - min(sizes) > _COPY_TOLERANCE * max(sizes):
        raise ValueError(f"{len(tile)} loops of {sizes} instructions: count() handles one (and its copies)")
    per_trip = (2 * sum(sizes) + len(sizes)) // (2 * len(sizes))  # the mean, rounded half up
    return issued(main) - sum(sizes), per_trip


def _compile(fn, signature: dict[str, str], constexprs: dict, num_warps: int, aligned: tuple[str, ...] = (),
             num_stages: int = 3):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(signature)
    divisible = [n for n, t in signature.items() if t.startswith("*")] + list(aligned)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def _disassemble(compiled) -> tuple[str, int]:
    """(SASS text, registers per thread) of a compiled kernel."""
    import triton

    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    try:
        sass = subprocess.run([f"{tools}/nvdisasm", "-c", f.name], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([f"{tools}/cuobjdump", "-res-usage", f.name], capture_output=True, text=True,
                               check=True).stdout
    finally:
        os.unlink(f.name)
    return sass, int(re.search(r"REG:(\d+)", usage).group(1))


def _cases():
    """(kernel, config, fn, signature, constexprs, num_warps, aligned ints, num_stages) of every suite's launch."""
    from validation.companion.kernels import codecs, kda, mla_decode, norms

    ptr = {"bf16": "*bf16", "fp32": "*fp32", "fp16": "*fp16", "u8": "*u8", "i32": "*i32"}
    for name, fn, sig in (
        ("triton_quantize", codecs._quantize_kernel, {"x_ptr": ptr["fp16"], "out_ptr": ptr["u8"], "n": "i32"}),
        ("triton_dequantize", codecs._dequantize_kernel, {"src_ptr": ptr["u8"], "y_ptr": ptr["fp16"], "n": "i32"}),
    ):
        for codec in codecs.CODECS:
            yield (name, codec, fn, {**sig, "CODEC": "constexpr", "TILE_BYTES": "constexpr"},
                   {"CODEC": codecs.CODEC_ID[codec], "TILE_BYTES": codecs.tile_bytes(codec)}, codecs.NUM_WARPS,
                   ("n",), 3)
    recurrent = {"q": ptr["bf16"], "k": ptr["bf16"], "v": ptr["bf16"], "g": ptr["fp32"], "beta": ptr["fp32"],
                 "state": ptr["fp32"], "o": ptr["bf16"], "states": ptr["fp32"], "T": "i32", "H": "i32",
                 "scale": "fp32", "K": "constexpr", "V": "constexpr", "BV": "constexpr", "STORE_STATES": "constexpr"}
    for bv in (32, 16, 8, 4):
        for store in (True, False):
            yield ("kda_recurrent", f"bv={bv} store={store}", kda.kda_recurrent_kernel, recurrent,
                   {"K": 128, "V": 128, "BV": bv, "STORE_STATES": store}, kda.RECURRENT_WARPS, (), 3)
    intra = {"q": ptr["bf16"], "k": ptr["bf16"], "v": ptr["bf16"], "g": ptr["fp32"], "beta": ptr["fp32"],
             "w": ptr["bf16"], "u": ptr["bf16"], "kg": ptr["bf16"], "qg": ptr["bf16"], "a_qk": ptr["fp32"],
             "decay": ptr["fp32"], "T": "i32", "H": "i32", "scale": "fp32", "K": "constexpr", "V": "constexpr",
             "BT": "constexpr", "BC": "constexpr", "CLAMP": "constexpr"}
    yield ("kda_intra", "chunk=64", kda.kda_intra_kernel, intra,
           {"K": 128, "V": 128, "BT": kda.CHUNK, "BC": kda.SUB_CHUNK, "CLAMP": kda.EXP_CLAMP}, kda.PREFILL_WARPS,
           ("T",), 3)
    scan = {"w": ptr["bf16"], "u": ptr["bf16"], "kg": ptr["bf16"], "qg": ptr["bf16"], "a_qk": ptr["fp32"],
            "decay": ptr["fp32"], "h0": ptr["fp32"], "o": ptr["bf16"], "ht": ptr["fp32"], "T": "i32", "H": "i32",
            "K": "constexpr", "V": "constexpr", "BT": "constexpr", "BV": "constexpr", "DOT_F32": "constexpr"}
    yield ("kda_scan", "chunk=64 bv=32", kda.kda_scan_kernel, scan,
           {"K": 128, "V": 128, "BT": kda.CHUNK, "BV": 32, "DOT_F32": False}, kda.PREFILL_WARPS, ("T",), 3)
    row = {"x_ptr": ptr["bf16"], "res_ptr": ptr["bf16"], "w_ptr": ptr["bf16"], "out_ptr": ptr["bf16"],
           "new_res_ptr": ptr["bf16"], "hidden": "i32", "eps": "fp32", "BLOCK": "constexpr"}
    norm = {"x_ptr": ptr["bf16"], "w_ptr": ptr["bf16"], "out_ptr": ptr["bf16"], "hidden": "i32", "eps": "fp32",
            "BLOCK": "constexpr"}
    for hidden in (7168, 8192):
        block = 1 << (hidden - 1).bit_length()
        yield ("triton_add_rmsnorm_fused", f"hidden={hidden}", norms.add_rmsnorm_fused_kernel, row,
               {"BLOCK": block}, norms.ROW_NUM_WARPS, ("hidden",), 3)
        yield ("triton_rmsnorm", f"hidden={hidden}", norms.rmsnorm_kernel, norm, {"BLOCK": block},
               norms.ROW_NUM_WARPS, ("hidden",), 3)
    yield ("triton_add", f"block={norms.ADD_BLOCK}", norms.add_kernel,
           {"x_ptr": ptr["bf16"], "res_ptr": ptr["bf16"], "sum_ptr": ptr["bf16"], "n": "i32", "BLOCK": "constexpr"},
           {"BLOCK": norms.ADD_BLOCK}, norms.ADD_NUM_WARPS, ("n",), 3)
    mla = {"q_ptr": ptr["bf16"], "kv_ptr": ptr["bf16"], "len_ptr": ptr["i32"], "out_ptr": ptr["bf16"],
           "part_ptr": ptr["fp32"], "lse_ptr": ptr["fp32"], "n_heads": "i32", "qk_scale": "fp32",
           **{f"stride_{s}": "i32" for s in ("qb", "qh", "kb", "kt", "ob", "oh", "pb", "ps", "ph", "lb", "ls")},
           "KV_LORA": "constexpr", "ROPE_DIM": "constexpr", "BLOCK_H": "constexpr", "BLOCK_N": "constexpr",
           "NUM_SPLITS": "constexpr", "EVEN_HEADS": "constexpr"}
    merge = {"part_ptr": ptr["fp32"], "lse_ptr": ptr["fp32"], "len_ptr": ptr["i32"], "out_ptr": ptr["bf16"],
             "n_heads": "i32", **{f"stride_{s}": "i32" for s in ("pb", "ps", "ph", "lb", "ls", "ob", "oh")},
             "KV_LORA": "constexpr", "BLOCK_H": "constexpr", "BLOCK_N": "constexpr", "NUM_SPLITS": "constexpr",
             "EVEN_HEADS": "constexpr"}
    for splits in (1, 4, 16):
        for even in (False, True):
            common = {"KV_LORA": mla_decode.KV_LORA, "BLOCK_H": mla_decode.BLOCK_H, "BLOCK_N": mla_decode.BLOCK_N,
                      "NUM_SPLITS": splits, "EVEN_HEADS": even}
            yield ("mla_decode", f"splits={splits} even={even}", mla_decode.mla_decode_kernel, mla,
                   {**common, "ROPE_DIM": mla_decode.ROPE_DIM}, mla_decode.NUM_WARPS, (), mla_decode.NUM_STAGES)
            if splits > 1:
                yield ("mla_merge", f"splits={splits} even={even}", mla_decode.mla_merge_kernel, merge, common,
                       mla_decode.NUM_WARPS, (), 3)


def _allreduce_cases():
    """The three kernels of `allreduce.py` per codec, as the two-GPU sweep (`bench quickreduce`) launched them:
    WORLD=2, bf16 input and output (so CAST_FP16), 4 warps; the int64 address tables and the flag, epoch and
    error words are torch tensors (16-byte aligned), n is a multiple of 16 at every swept size, and the
    arguments of `allreduce.NO_SPEC` are not specialized."""
    from validation.companion.bench.quickreduce import NUM_WARPS
    from validation.companion.kernels import allreduce as ar
    from validation.companion.kernels import codecs

    world, runtime = 2, {name: "i32" for name in ar.NO_SPEC}
    tables = {"flags": "*i64", "epochs": "*i32"}
    for codec in codecs.CODECS:
        common = {"WORLD": world, "CODEC": codecs.CODEC_ID[codec], "TB": codecs.tile_bytes(codec),
                  "TILE": codecs.TILE_VALUES}
        constexpr = dict.fromkeys(common, "constexpr")
        scatter = {"x_ptr": "*bf16", "n": "i32", "bufs1": "*i64", **tables, "rank": "i32", "n_tiles": "i32",
                   "seg": "i32", "g_cap": "i32", **constexpr, "CAST_FP16": "constexpr"}
        reduce = {"bufs1": "*i64", "bufs2": "*i64", **tables, "err": "*i32", **runtime, **constexpr,
                  "WORDS": "constexpr"}
        gather = {"out_ptr": "*bf16", "n": "i32", "bufs2": "*i64", **tables, "err": "*i32", **runtime,
                  **constexpr}
        yield ("qr_scatter", codec, ar._scatter_kernel, scatter, {**common, "CAST_FP16": True}, NUM_WARPS, ("n",), 3)
        yield ("qr_reduce", codec, ar._reduce_kernel, reduce, {**common, "WORDS": ar._words(codec)}, NUM_WARPS,
               (), 3)
        yield ("qr_gather", codec, ar._gather_kernel, gather, common, NUM_WARPS, ("n",), 3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="the CSV to write, e.g. validation/data/sass_counts/h200.csv")


def run(args: argparse.Namespace) -> int:
    """Compile, disassemble and count every kernel configuration of the suites; write the table to args.out."""
    import triton

    rows = []
    for kernel, config, fn, sig, constexprs, warps, aligned, stages in (*_cases(), *_allreduce_cases()):
        compiled = _compile(fn, sig, constexprs, warps, aligned, stages)
        sass, registers = _disassemble(compiled)
        prologue, loop = count(sass)
        rows.append({"kernel": kernel, "config": config, "num_warps": warps, "registers": registers,
                     "shared_bytes": compiled.metadata.shared, "prologue_instructions": prologue,
                     "loop_instructions": loop, "triton": triton.__version__})
        print(rows[-1], flush=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return 0
