"""What an `nvdisasm -hex` listing of a compiled kernel says: its main path, its instructions per thread
outside and inside its loop (`count`) and one warp's static issue timeline (`warp_timeline`).

The main path is the instructions up to the last EXIT, less the slow-path calls of IEEE division that a branch
skips for normal operands. A kernel with one loop is counted as a prologue (everything outside the loop) and a
loop body per iteration; loops that spin on a flag count once, in the prologue, and the copies of a tile loop
unrolled per peer count as that one loop (`count`). The timeline is read off the instructions' control codes
(stall counts and the barriers of variable-latency results) with each section's instruction stream, and
`compiled.sass_timing` evaluates it with a GPU's latencies. No GPU or Triton is needed: the input is text.
"""

from __future__ import annotations

import itertools
import re

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
# A loop that backs off with NANOSLEEP retries something that normally succeeds at once: on sm_100 the tensor
# memory allocation of a tcgen05 kernel (UTCATOMSWS.FIND_AND_SET, retried after NANOSLEEP until columns are free).
_BACK_OFF = re.compile(r"\bNANOSLEEP\b")
# Unrolled copies of one tile loop (a `tl.static_range` over peers around it) differ by a few address
# instructions; bodies further apart than this are different loops, which count() does not handle.
_COPY_TOLERANCE = 0.1


def count(sass: str) -> tuple[int, int]:
    """(prologue, loop body) instructions per thread on the main path.

    A loop is a backward branch and the instructions from its target to it. A loop that polls a flag (an acquire
    read at GPU or system scope, `_SPIN_READ`) or retries after a back-off (`_BACK_OFF`) is a spin-wait: counted
    once, in the prologue, as its body runs when the flag is already set. The other loop is the kernel's loop; a
    kernel may hold several disjoint copies of it (unrolled by a static loop around it, e.g. one per peer rank): the
    loop body is then their mean per iteration (rounded half up) and the prologue everything outside them.
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
            if not any(_SPIN_READ.search(t) or _BACK_OFF.search(t) for a, t in main if start <= a <= end)]
    for s1, e1 in tile:
        for s2, e2 in tile:
            if (s1, e1) != (s2, e2) and s1 <= s2 and e2 <= e1:
                raise ValueError(f"nested loops at {s2:#x} in {s1:#x}: count() handles one loop")
    return tile


# Bytes one thread moves with a global memory instruction, by its width suffix (32 bits without one).
_WIDTH_BYTES = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}
_GLOBAL_LOAD = re.compile(r"\b(?:LDG|LDGSTS)\.([\w.]+)")
_GLOBAL_STORE = re.compile(r"\bSTG\.([\w.]+)")


def _width(suffixes: str) -> int:
    return next((_WIDTH_BYTES[p] for p in suffixes.split(".") if p in _WIDTH_BYTES), 4)


def loop_bytes(sass: str) -> tuple[float, float] | None:
    """(bytes loaded, bytes stored) by one thread in one trip of the kernel's loop (the mean over its copies):
    global loads and cp.async copies (LDG, LDGSTS) and stores (STG). None without a loop, or when the loop loads
    through the tensor-memory accelerator (UTMALDG), whose bytes per thread its text does not say."""
    main, labels = _main_path(sass)
    tile = _tile_loops(main, labels)
    if not tile:
        return None
    body = [t for a, t in main if any(start <= a <= end for start, end in tile)]
    if any("UTMALDG" in t or "UBLKCP" in t for t in body):
        return None
    loads = sum(_width(m.group(1)) for t in body if (m := _GLOBAL_LOAD.search(t)))
    stores = sum(_width(m.group(1)) for t in body if (m := _GLOBAL_STORE.search(t)))
    return loads / len(tile), stores / len(tile)


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
    "shared": ("LDS", "STS", "STSM", "ATOMS"),
    "ldsm": ("LDSM",),
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
# A 128-bit shared load (LDS.128) returns later than a 32- or 64-bit one (the shared-load probe)
SHARED_128 = "shared_128"
LATENCY_CLASSES = (*_CLASSES, SHARED_128, "fence_cta", OPERAND_READ, "other")


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
    """The latency class of an instruction's variable-latency result (`_CLASSES`; `other` if not listed; a 128-bit
    shared load is `SHARED_128`).

    Fences within the CTA (MEMBAR.*.CTA, and FENCE.VIEW.ASYNC, the proxy fence before wgmma reads shared
    memory) are `fence_cta`: they wait for the SM's own memory pipeline, not a round trip to L2."""
    op = _opcode(text)
    if re.match(r"MEMBAR\.\w+\.CTA|FENCE\.VIEW\.ASYNC", op):
        return "fence_cta"
    if op.startswith("LDS.") and ".128" in op:
        return SHARED_128
    return _CLASS_OF.get(op.split(".")[0], "other")


# The classes of a global load's result: its round trip to memory (`_simulate`'s load lead)
_GLOBAL_LOADS = ("global_load", "async_copy")


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

    A section that issues global loads (LDG, LDGSTS) also gets "load_lead": [first, last], the static cycles from
    its first and from its last such load (0 if that one issues after the wait) to the first instruction that waits
    on one of them, or to the section's end where none does (a loop whose trip waits at its top for the loads the
    trip before issued): the time the loads are in flight before anything waits for them.
    """
    t, pending = 0, {k: [] for k in (*range(6), "gsb0")}
    sections: dict[object, dict] = {}
    loads: dict[object, dict[str, int]] = {}  # per section: its first and last global load's issue, the first wait
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
            issue = loads.setdefault(tag, {})
            if "first" in issue and "wait" not in issue and any(
                    cls in _GLOBAL_LOADS and issued >= issue["first"] for cls, issued in retired):
                issue["wait"] = t
            if op.split(".")[0] in ("LDG", "LDGSTS"):
                issue.setdefault("first", t)
                issue["last"] = t
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
            loads[tag]["end"] = t
    for tag, issue in loads.items():
        if "first" in issue:  # cycles from the first and the last load's issue to the first wait on them
            until = issue.get("wait", issue["end"])
            sections[tag]["load_lead"] = [until - issue["first"], max(0, until - issue["last"])]
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
    threads; an access whose address it cannot compute counts its conflict-free wavefronts). A section that issues
    global loads has their "load_lead" (`_simulate`); "matrix" says whether the kernel issues matrix instructions.
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
                "loop": copies[0] if copies else {},
                # whether the kernel issues matrix (tensor-core) instructions, which hold the SM at a lower clock
                "matrix": any(_opcode(t).split(".")[0] in _CLASSES["mma"] for _, t in main)}
    if len(copies) > 1:
        timeline["loop_copies"] = copies
    return timeline


def _shared_wavefronts(main: list[tuple[int, str]], threads: int) -> dict[int, float]:
    """Wavefronts a warp's shared access takes, by address, for the instructions of the main path that use the
    shared-memory pipe (`sass_lanes`); an address the lane evaluator cannot compute counts as conflict-free."""
    from compiled.sass_lanes import ideal_wavefronts, lane_wavefronts, opcode

    found = lane_wavefronts([t for _, t in main], threads)
    return {a: (ideal_wavefronts(opcode(t)) if w is None else w) for (a, t), w in zip(main, found, strict=True)
            if w is None or w > 0}
