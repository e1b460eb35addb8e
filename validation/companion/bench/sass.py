"""`sass-counts`: count the SASS instructions each companion kernel issues per thread, compiled for sm_90.

    python -m validation.companion.bench sass-counts --out compiled/data/h200.csv

Each kernel of `validation/companion/kernels/` is compiled by Triton for sm_90 (no GPU needed; Triton ships
ptxas and nvdisasm) with the specialisations its launches get on the GPU (pointers and the sizes the suites
pass divisible by 16), disassembled, and its main path counted: the instructions up to the last EXIT, less the
slow-path calls of IEEE division that a branch skips for normal operands. A kernel with one loop is counted as
a prologue (everything outside the loop) and a loop body per iteration; loops that spin on a flag count once,
in the prologue, and the copies of a tile loop unrolled per peer count as that one loop (`count`). The
QuickReduce all-reduce kernels are counted as the two-GPU sweep launched them: `qr_scatter`, `qr_reduce` and
`qr_gather`, per codec, with two ranks, bf16 in and out, 4 warps. The table it writes is read by
`compiled.sass_counts`; run it with the Triton version of the measurements (their PROVENANCE.md). Beside
it the command writes each kernel's one-warp issue timeline (`warp_timeline`, from the control codes of the
instructions: stall counts and the barriers of variable-latency results, and each section's instruction
stream) as `<name>_timing.json`, which `compiled.sass_timing` evaluates with a GPU's latencies.
triton is imported inside the functions that compile, so `count` works without it.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import re
import subprocess
import tempfile

from compiled.sass_counts import COLUMNS

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
    main, labels = _main_path(sass)

    def issued(part: list[tuple[int, str]]) -> int:
        return len(part) - _SKIPPED_PER_CALL * sum("CALL" in t for _, t in part)

    tile = _tile_loops(main, labels)
    if not tile:
        return issued(main), 0
    sizes = [issued([(a, t) for a, t in main if start <= a <= end]) for start, end in tile]
    if max(sizes) - min(sizes) > _COPY_TOLERANCE * max(sizes):
        raise ValueError(f"{len(tile)} loops of {sizes} instructions: count() handles one (and its copies)")
    per_trip = (2 * sum(sizes) + len(sizes)) // (2 * len(sizes))  # the mean, rounded half up
    return issued(main) - sum(sizes), per_trip


def _main_path(sass: str) -> tuple[list[tuple[int, str]], dict[str, int]]:
    """(address, text) of the instructions up to the last EXIT, and the address of every label."""
    found, labels = _instructions(sass)
    last_exit = max(a for a, t in found if "EXIT" in t)
    return [(a, t) for a, t in found if a <= last_exit], labels


def _tile_loops(main: list[tuple[int, str]], labels: dict[str, int]) -> list[tuple[int, int]]:
    """(first, last address) of every loop on the main path that is not a spin-wait (`count` says which)."""
    loops = []
    for a, t in main:
        target = re.search(r"BRA.*\.(L_x_\d+)", t)
        if target and labels[target.group(1)] < a:
            loops.append((labels[target.group(1)], a))
    tile = [(start, end) for start, end in loops
            if not any(_SPIN_READ.search(t) for a, t in main if start <= a <= end)]
    for s1, e1 in tile:
        for s2, e2 in tile:
            if (s1, e1) != (s2, e2) and s1 <= s2 and e2 <= e1:
                raise ValueError(f"nested loops at {s2:#x} in {s1:#x}: count() handles one loop")
    return tile


# --- One warp's issue timeline, from the control codes -------------------------------------------------------
#
# Every Volta+ instruction is 128 bits; `nvdisasm -hex` prints it as two 64-bit words, the second on the next
# line. Its control code is bits 105-125 of the 128 (bits 41-61 of the second word), as the open-source
# assemblers decode it (CuAssembler's CuControlCode, turingas; Jia et al., "Dissecting the NVIDIA Volta GPU
# Architecture via Microbenchmarking", arXiv:1804.06826, section 2): from its low bit, the stall count (4
# bits: cycles before the warp's next instruction may issue), yield (1), the write barrier this instruction
# sets (3; 7 = none: released when a variable-latency result is written), the read barrier it sets (3;
# released when its source registers have been read), the mask of barriers it waits on (6) and the operand
# reuse flags (4).
_CONTROL_SHIFT = 105 - 64
NO_BARRIER = 7


def control(hi: int) -> dict[str, int]:
    """The control code of an instruction from its second (high) 64-bit word."""
    bits = hi >> _CONTROL_SHIFT
    return {"stall": bits & 0xF, "yield": (bits >> 4) & 1, "write_barrier": (bits >> 5) & 7,
            "read_barrier": (bits >> 8) & 7, "wait_mask": (bits >> 11) & 0x3F, "reuse": (bits >> 17) & 0xF}


def _encoded(sass: str) -> dict[int, int]:
    """The second 64-bit word of every instruction of an `nvdisasm -hex` listing, by address."""
    words, lines = {}, sass.splitlines()
    for line, following in itertools.pairwise(lines):
        ins = re.match(r"\s*/\*([0-9a-f]+)\*/\s+.*;\s*/\* 0x[0-9a-f]{16} \*/", line)
        hi = re.match(r"\s*/\* (0x[0-9a-f]{16}) \*/\s*$", following)
        if ins and hi:
            words[int(ins.group(1), 16)] = int(hi.group(1), 16)
    return words


# The latency class of an instruction that sets a write barrier, by opcode (the text before the first dot).
_CLASSES = {
    "global_load": ("LDG", "LD"),
    "async_copy": ("LDGDEPBAR", "LDGSTS"),
    "shared": ("LDS", "LDSM", "STS", "STSM", "ATOMS"),
    "constant": ("LDC",),
    "local": ("LDL", "STL"),
    "sfu": ("MUFU",),
    "convert": ("F2I", "I2F", "F2F", "I2I", "FRND", "FCHK", "POPC", "FLO", "BREV", "F2FP"),
    "shuffle": ("SHFL", "REDUX", "MATCH"),
    "special": ("S2R", "S2UR", "CS2R", "CS2UR"),
    "atomic": ("ATOM", "ATOMG", "RED", "REDG"),
    "mma": ("HMMA", "HGMMA", "IMMA", "IGMMA", "DMMA", "QGMMA", "BMMA"),
    "fence": ("MEMBAR", "FENCE", "ERRBAR", "CCTL"),
    "barrier": ("BAR",),
}
_CLASS_OF = {op: cls for cls, ops in _CLASSES.items() for op in ops}
# The class of a wait on a read barrier: the producer's source registers read out, whatever the producer.
OPERAND_READ = "operand_read"
LATENCY_CLASSES = (*_CLASSES, "fence_cta", OPERAND_READ, "other")


def _opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


# The math pipe a warp instruction occupies (`pipe_of`), by opcode: "F" fp32 (FMA, add, multiply and their packed
# half forms), "I" the integer multiply-add, "A" integer and logic (adds, shifts, three-input logic, compares,
# selects, byte permutes, moves), "X" conversions and bit counts, "M" the transcendental unit, "S" shuffles.
# Anything else (memory, tensor cores, branches, barriers, the uniform datapath) is "-": its issue cycle only.
_PIPES = {
    "F": ("FFMA", "FADD", "FMUL", "HFMA2", "HADD2", "HMUL2", "FFMA32I", "FADD32I", "FMUL32I"),
    "I": ("IMAD", "IDP", "IMUL", "IMAD32I"),
    "A": ("IADD3", "IADD", "VIADD", "LOP3", "LOP", "SHF", "SHL", "SHR", "LEA", "ISETP", "FSETP", "HSETP2", "FMNMX",
          "IMNMX", "VIMNMX", "HMNMX2", "SEL", "FSEL", "PRMT", "MOV", "IABS", "BMSK", "SGXT", "PLOP3", "P2R", "R2P",
          "FCHK", "LOP32I", "IADD32I", "MOV32I"),
    "X": ("F2I", "I2F", "F2F", "FRND", "I2I", "POPC", "FLO", "BREV", "F2FP", "I2FP"),
    "M": ("MUFU",),
    "S": ("SHFL",),
}
_PIPE_OF = {name: pipe for pipe, names in _PIPES.items() for name in names}


def pipe_of(text: str) -> str:
    """The math pipe of an instruction (`_PIPES`), one character."""
    return _PIPE_OF.get(_opcode(text).split(".")[0], "-")


def latency_class(text: str) -> str:
    """The latency class of an instruction's variable-latency result (`_CLASSES`; `other` if not listed).

    Fences within the CTA (MEMBAR.*.CTA, and FENCE.VIEW.ASYNC, the proxy fence before wgmma reads shared
    memory) are `fence_cta`: they wait for the SM's own memory pipeline, not a round trip to L2."""
    op = _opcode(text)
    if re.match(r"MEMBAR\.\w+\.CTA|FENCE\.VIEW\.ASYNC", op):
        return "fence_cta"
    return _CLASS_OF.get(op.split(".")[0], "other")


def _simulate(stream: list[tuple]) -> dict[object, dict]:
    """Issue `stream` ((text, high word, section tag[, shared wavefronts])) in order, one warp; the stall cycles
    and waits per tag (and the shared accesses' wavefronts, `"shared"`).

    Time is static: each instruction advances it by its stall count (at least 1). A producer that sets a
    barrier is pending on it with its class and issue time; an instruction whose wait mask names the barrier
    retires all its producers, `DEPBAR.LE SBk, N` the oldest but N, `WARPGROUP.DEPBAR.LE gsb0, N` the HGMMAs
    but the newest N; each retirement is a wait [class, distance, at] (the newest producer per class: the one
    that binds), with distance the static cycles from the producer's issue to this one's and at this
    instruction's static cycle in its section. BAR.SYNC is a wait ["barrier", 0, at]. A tag of None simulates
    without recording (a loop's first trip, whose barrier state the second inherits).
    """
    t, pending = 0, {k: [] for k in (*range(6), "gsb0")}
    sections: dict[object, dict] = {}
    for text, hi, tag, *wavefronts in stream:
        ctl, op = control(hi), _opcode(text)
        retired = []
        for k in range(6):
            if ctl["wait_mask"] >> k & 1:
                retired += pending[k]
                pending[k] = []
        depbar = re.match(r"DEPBAR\.LE SB(\d), (0x[0-9a-f]+|\d+)", re.sub(r"^@!?P\w+\s+", "", text))
        if depbar:
            k, keep = int(depbar.group(1)), int(depbar.group(2), 0)
            cut = max(0, len(pending[k]) - keep)
            retired += pending[k][:cut]
            pending[k] = pending[k][cut:]
        group = re.match(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+|\d+)", re.sub(r"^@!?P\w+\s+", "", text))
        if group:
            cut = max(0, len(pending["gsb0"]) - int(group.group(1), 0))
            retired += pending["gsb0"][:cut]
            pending["gsb0"] = pending["gsb0"][cut:]
        if tag is not None:
            section = sections.setdefault(tag, {"stall_cycles": 0, "waits": [], "stream": [], "pipes": "",
                                                "shared": []})
            if wavefronts and wavefronts[0]:
                section["shared"].append([len(section["stream"]), round(wavefronts[0], 3)])
            section["stream"].append(_compact(ctl, text, op, depbar, group))
            section["pipes"] += pipe_of(text)
            newest: dict[str, int] = {}
            for cls, issued in retired:
                newest[cls] = max(newest.get(cls, issued), issued)
            at = section["stall_cycles"]
            section["waits"] += [[cls, t - issued, at] for cls, issued in sorted(newest.items())]
            if op.startswith("BAR.SYNC") or op == "BAR":
                section["waits"].append(["barrier", 0, at])
        if ctl["write_barrier"] != NO_BARRIER:
            pending[ctl["write_barrier"]].append((latency_class(text), t))
        if ctl["read_barrier"] != NO_BARRIER:
            pending[ctl["read_barrier"]].append((OPERAND_READ, t))
        if op.split(".")[0] in ("HGMMA", "IGMMA", "QGMMA", "BGMMA"):
            pending["gsb0"].append(("mma", t))
        step = max(1, ctl["stall"])
        t += step
        if tag is not None:
            sections[tag]["stall_cycles"] += step
    return sections


def _compact(ctl: dict[str, int], text: str, op: str, depbar, group) -> list:
    """One issued instruction of a section's `stream`: [stall, wait_mask, write_barrier, class], the stall at
    least 1 (as issued), the class the write barrier's producer's (`latency_class`; None without one); then,
    only where needed, the read barrier it sets (7 = none; its waiters' class is `operand_read`) and a special
    retirement or producer: ["depbar", k, n] (`DEPBAR.LE SBk, n`: the oldest producers of barrier k but the
    newest n), ["depbar", "gsb0", n] (`WARPGROUP.DEPBAR.LE gsb0, n`), ["gmma"] (an HGMMA, pending on gsb0 as
    `mma`) or ["bar"] (BAR.SYNC)."""
    write = ctl["write_barrier"]
    entry = [max(1, ctl["stall"]), ctl["wait_mask"], write, latency_class(text) if write != NO_BARRIER else None]
    special = None
    if depbar:
        special = ["depbar", int(depbar.group(1)), int(depbar.group(2), 0)]
    elif group:
        special = ["depbar", "gsb0", int(group.group(1), 0)]
    elif op.split(".")[0] in ("HGMMA", "IGMMA", "QGMMA", "BGMMA"):
        special = ["gmma"]
    elif op.startswith("BAR.SYNC") or op == "BAR":
        special = ["bar"]
    if ctl["read_barrier"] != NO_BARRIER or special:
        entry.append(ctl["read_barrier"])
    if special:
        entry.append(special)
    return entry


def warp_timeline(sass: str, threads: int = 32) -> dict:
    """One warp's static issue timeline of the main path of an `nvdisasm -hex` listing, with symbolic waits.

    The main path is `count`'s: in address order to the last EXIT, spin loops once, the skipped slow-path
    calls of IEEE division left out. The tile loop (each copy of it) is issued twice in a row, carrying the
    barrier state across the back edge, and its second trip is reported, so loop-carried waits count.
    Returns {"prologue": {"stall_cycles": N, "waits": [[class, distance, at], ...], "stream": [...]},
    "loop": {..., "entry": E} or {}} (`_simulate` says what a wait holds); where the loop has several copies,
    "loop" is the first and "loop_copies" all of them. "stream" is the section's issued instructions in order
    (`_compact`: stall, wait mask, barriers set), for simulating several warps; a loop's "entry" is the number
    of prologue instructions issued before it (the barrier state it enters with). The cycles a wait exposes,
    max(0, latency[class] - distance) less what earlier waits already exposed, are left to
    `compiled.sass_timing`, which knows each GPU's latencies. "shared" lists, per section, [index in
    "stream", wavefronts] of every instruction that uses the SM's shared-memory pipe: the wavefronts a warp's
    access takes with its bank conflicts (`sass_lanes.lane_wavefronts`, evaluated on a workgroup of `threads`
    threads; an access whose address it cannot compute counts its conflict-free wavefronts).
    """
    main, labels = _main_path(sass)
    shared = _shared_wavefronts(main, threads)
    words = _encoded(sass)
    calls = [i for i, (_, t) in enumerate(main) if "CALL" in t]
    skipped = {main[i + d][0] for i in calls for d in (-2, -1, 0, 1)}  # `_SKIPPED_PER_CALL`
    starts = {start: end for start, end in _tile_loops(main, labels)}
    stream, i, copy, entries = [], 0, 0, {}
    while i < len(main):
        end = starts.get(main[i][0])
        body = [(a, t) for a, t in main[i:] if end is not None and a <= end]
        if body:
            entries[copy] = sum(entry[2] == "prologue" for entry in stream)
            for tag in (None, ("loop", copy)):
                stream += [(t, words[a], tag, shared.get(a, 0.0)) for a, t in body if a not in skipped]
            i, copy = i + len(body), copy + 1
        else:
            if main[i][0] not in skipped:
                stream.append((main[i][1], words[main[i][0]], "prologue", shared.get(main[i][0], 0.0)))
            i += 1
    sections = _simulate(stream)
    empty = {"stall_cycles": 0, "waits": [], "stream": [], "pipes": "", "shared": []}
    copies = [{**sections.get(("loop", k), empty), "entry": entries[k]} for k in range(copy)]
    timeline = {"prologue": sections.get("prologue", empty),
                "loop": copies[0] if copies else {}}
    if len(copies) > 1:
        timeline["loop_copies"] = copies
    return timeline


def _shared_wavefronts(main: list[tuple[int, str]], threads: int) -> dict[int, float]:
    """Wavefronts a warp's shared access takes, by address, for the instructions of the main path that use the
    shared-memory pipe (`sass_lanes`); an address the lane evaluator cannot compute counts as conflict-free."""
    from validation.companion.bench.sass_lanes import ideal_wavefronts, lane_wavefronts, opcode

    found = lane_wavefronts([t for _, t in main], threads)
    return {a: (ideal_wavefronts(opcode(t)) if w is None else w) for (a, t), w in zip(main, found, strict=True)
            if w is None or w > 0}


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


def _cases():
    """(kernel, config, fn, signature, constexprs, num_warps, aligned ints, num_stages) of every suite's launch."""
    from validation import probes as probe_plan
    from validation.companion.kernels import codecs, kda, mla_decode, norms, probes

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
    # decode (`kda.kda_decode`): one token, and the JIT compiles an int argument of value 1 as that constant, so
    # its token loop is straight-line code
    for bv in (32, 16):
        yield ("kda_recurrent", f"bv={bv} store=False T=1", kda.kda_recurrent_kernel, {**recurrent, "T": "constexpr"},
               {"K": 128, "V": 128, "BV": bv, "STORE_STATES": False, "T": 1}, kda.RECURRENT_WARPS, (), 3)
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
    tile = {"src_ptr": ptr["fp32"], "dst_ptr": ptr["fp32"], "n_tiles": "i32", "BLOCK": "constexpr",
            "ROUNDS": "constexpr"}
    for rounds in probe_plan.GRID_ROUNDS:  # the grid probe's kernel (65,536 tiles: divisible by 16)
        yield ("probe_tile_work", f"rounds={rounds}", probes.tile_work_kernel, tile,
               {"BLOCK": probe_plan.GRID_BLOCK, "ROUNDS": rounds}, probe_plan.GRID_WARPS, ("n_tiles",), 3)
    for splits in (1, 4, 16):
        for even in (False, True):
            common = {"KV_LORA": mla_decode.KV_LORA, "BLOCK_H": mla_decode.BLOCK_H, "BLOCK_N": mla_decode.BLOCK_N,
                      "NUM_SPLITS": splits, "EVEN_HEADS": even}
            values = _mla_int_arguments(splits, mla_decode.BLOCK_H if even else MLA_HEADS)
            yield ("mla_decode", f"splits={splits} even={even}", mla_decode.mla_decode_kernel, mla,
                   {**common, "ROPE_DIM": mla_decode.ROPE_DIM}, mla_decode.NUM_WARPS,
                   _specialized(mla, values), mla_decode.NUM_STAGES)
            if splits > 1:
                yield ("mla_merge", f"splits={splits} even={even}", mla_decode.mla_merge_kernel, merge, common,
                       mla_decode.NUM_WARPS, _specialized(merge, values), 3)


# The MLA suite's query heads per GPU (validation.suites.mla_decode.HEADS); padded, they fill one 16-head block.
MLA_HEADS = 12


def _mla_int_arguments(splits: int, padded: int) -> dict[str, int]:
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


def _specialized(signature: dict[str, str], values: dict[str, int]) -> tuple[str, ...]:
    """The integer arguments of `signature` that Triton's JIT marks divisible by 16 at launch, from their values
    (it specializes every int argument not in do_not_specialize: a multiple of 16, 0 included, gets
    tt.divisibility 16; a value of 1 would become a constant, which none of these is)."""
    if any(values[name] == 1 for name in signature if name in values):
        raise ValueError("an argument of value 1 would be specialized to a constant; compile it as one")
    return tuple(name for name, kind in signature.items() if kind == "i32" and values[name] % 16 == 0)


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
    parser.add_argument("--out", required=True, help="the CSV to write, e.g. compiled/data/h200.csv")
    parser.add_argument("--timing", help="the warp timelines to write (`warp_timeline`); default: the CSV's name "
                        "with _timing.json, e.g. compiled/data/h200_timing.json")


def run(args: argparse.Namespace) -> int:
    """Compile, disassemble and count every kernel configuration of the suites; write the table to args.out and
    each one's warp timeline to args.timing."""
    import triton

    rows, timings = [], []
    for kernel, config, fn, sig, constexprs, warps, aligned, stages in (*_cases(), *_allreduce_cases()):
        compiled = _compile(fn, sig, constexprs, warps, aligned, stages)
        sass, registers = _disassemble(compiled)
        prologue, loop = count(sass)
        rows.append({"kernel": kernel, "config": config, "num_warps": warps, "registers": registers,
                     "shared_bytes": compiled.metadata.shared, "prologue_instructions": prologue,
                     "loop_instructions": loop, "triton": triton.__version__})
        timings.append({"kernel": kernel, "config": config, **warp_timeline(sass, 32 * warps)})
        print(rows[-1], flush=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    timing = args.timing or re.sub(r"(\.csv)?$", "_timing.json", args.out, count=1)
    with open(timing, "w") as f:  # one row a line
        f.write(f'{{"triton": {json.dumps(triton.__version__)}, "rows": [\n')
        f.write(",\n".join(json.dumps(row, separators=(",", ":")) for row in timings))
        f.write("\n]}\n")
    return 0
