"""What AMDGCN assembly of a compiled kernel says: its instructions per wave outside and inside its loop (`count`)
and one wave's static issue timeline (`wave_timeline`), in the form `compiled.sass_timing` simulates.

The input is the assembly Triton's AMD backend writes (LLVM's AMDGPU printer), for gfx942 (CDNA3) or gfx950 (CDNA4).
LLVM marks each basic block of a loop with a comment (`; in Loop: Header=BB0_8 Depth=1`, the header `; =>This Inner
Loop Header: Depth=1`, on the line after the label when the block is named): those blocks are the loop, everything
else up to the last `s_endpgm` the prologue. Both sides of a branch are counted, in address order, as the SASS
reader counts predicated instructions: Triton's masked loads compile to short branches around a load and a zero
fill, so this counts a few instructions a masked row more than a wave issues. A kernel with a nested loop (Depth 2)
is not read.

One wave issues in order, one instruction at least every `issue_interval_cycles()` (the arbiter visits a SIMD
once every 4 cycles; `s_nop N` waits N + 1 wait states). A vector instruction holds its SIMD's vector ALU or
matrix core for its cycles (`compiled.cdna_issue`): each instruction's pipe character names a unit and its
cycles (`units`), which the simulation takes in place of a GPU's per-pipe rates. Memory results are counted as
the hardware counts them: vector memory loads and stores on `vmcnt` (barrier 0 of the timeline; loads at the DRAM
latency, stores at the L2's), LDS and scalar loads on `lgkmcnt` (barrier 1), and `s_waitcnt vmcnt(N)` /
`lgkmcnt(N)` waits for all but the newest N, which in-order return makes the oldest. An LDS access moves its
lanes' bytes through the CU's LDS in 128-byte wavefronts (`shared`), conflict-free: the bank conflicts of AMD
code are not evaluated (an assumption; the SASS reader's lane evaluator does that for NVIDIA code). A dependent
MFMA waits in hardware for its predecessor, which the matrix core's occupancy already orders; the `s_nop`s the
compiler puts before reading MFMA results are counted as written.
"""

from __future__ import annotations

import re

from compiled.cdna_issue import S_NOP_CYCLES_PER_WAIT_STATE, issue_interval_cycles, mfma_cycles, valu_cycles

NO_BARRIER = 7  # as compiled.sass_code: an instruction that sets no barrier
VM, LGKM = 0, 1  # the timeline's barriers that stand for vmcnt and lgkmcnt
WAVEFRONT_BYTES = 128  # the unit of `shared` (compiled.sass_timing.WAVEFRONT_BYTES)

_LABEL = re.compile(r"^(\.LBB\d+_\d+|; %bb\.\d+):?(.*)$")
_IN_LOOP = re.compile(r"(?:in Loop:|Inner Loop Header:).*?Depth=(\d+)")


def _kernel_body(asm: str) -> list[tuple[str, int]]:
    """(instruction text, loop depth of its block) of the kernel's code, in address order, to the last
    s_endpgm; directives and comments dropped."""
    found: list[tuple[str, int]] = []
    depth, started = 0, False
    for line in asm.splitlines():
        if re.match(r"^[A-Za-z_][\w.]*:\s*(;.*)?$", line) and not line.startswith(".L"):
            started = True  # the kernel's symbol
            continue
        if not started:
            continue
        label = _LABEL.match(line)
        if label:
            loop = _IN_LOOP.search(label.group(2))
            depth = int(loop.group(1)) if loop else 0
            continue
        if line.lstrip().startswith(";"):  # a named block (`; %Flow`) has its loop comment on the next line
            loop = _IN_LOOP.search(line)
            if loop:
                depth = int(loop.group(1))
            continue
        text = line.split(";", 1)[0].strip()
        if not text or text.startswith("."):
            continue
        found.append((text, depth))
    last = max((i for i, (t, _) in enumerate(found) if t.startswith("s_endpgm")), default=None)
    if last is None:
        raise ValueError("the AMDGCN assembly has no s_endpgm")
    return found[:last + 1]


def _loops(asm: str) -> tuple[list[tuple[str, int]], list[list[int]]]:
    """The kernel's body (`_kernel_body`) and its loops as runs of consecutive body indices. One loop, or an
    unrolled loop and then its remainder: a loop whose trip count is known only at run time comes, once LLVM has
    unrolled it, as the unrolled loop followed by a loop over the trips left over (its `%.epil` blocks)."""
    body = _kernel_body(asm)
    if any(d > 1 for _, d in body):
        raise ValueError("a nested loop: the AMDGCN reader handles one loop")
    inside = [i for i, (_, d) in enumerate(body) if d == 1]
    runs: list[list[int]] = []
    for i in inside:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    if len(runs) > 2 or (len(runs) == 2 and ".epil" not in asm):
        raise ValueError("the loop's blocks are not contiguous: the AMDGCN reader handles one loop")
    return body, runs


def _sections(asm: str) -> tuple[list[str], list[str], int]:
    """(prologue, loop body, where the loop enters the prologue's order) of the kernel. Of an unrolled loop and its
    remainder (`_loops`) the unrolled one is the loop and the remainder is left out: it runs fewer trips than the
    unroll, once per workgroup (assumption: a small share of a loop of many trips)."""
    body, runs = _loops(asm)
    if not runs:
        return [t for t, _ in body], [], 0
    loop, looped = runs[0], {i for run in runs for i in run}
    return [t for i, (t, _) in enumerate(body) if i not in looped], [body[i][0] for i in loop], loop[0]


def loop_unroll(asm: str) -> int | None:
    """Trips of the source loop that one trip of the compiled loop runs, where the code says it: an unrolled loop
    with a remainder loop (`_loops`) does the remainder's matrix instructions, or else its global loads, that many
    times over. None without a remainder loop (the bytes a trip moves then say it, `compiled.triton_kernel.unrolled`)
    or when the two do not divide."""
    body, runs = _loops(asm)
    if len(runs) != 2:
        return None
    for kind in ("mfma", "global_load"):
        main, rest = ([body[i][0] for i in run if kind in opcode(body[i][0])] for run in runs)
        if rest and len(main) % len(rest) == 0 and len(main) // len(rest) >= 2:
            return len(main) // len(rest)
    return None


# Bytes one lane moves with a global or buffer memory instruction, by its name's width.
_AMD_WIDTH = (("dwordx4", 16), ("b128", 16), ("dwordx3", 12), ("b96", 12), ("dwordx2", 8), ("b64", 8),
              ("dword", 4), ("b32", 4), ("short", 2), ("b16", 2), ("byte", 1), ("b8", 1))


def _lane_bytes(op: str) -> int:
    return next((n for name, n in _AMD_WIDTH if name in op), 4)


def loop_bytes(asm: str) -> tuple[float, float] | None:
    """(bytes loaded, bytes stored) by one lane in one trip of the kernel's loop: its global and buffer loads and
    stores (atomics left out). None without a loop."""
    _, loop, _ = _sections(asm)
    if not loop:
        return None
    ops = [text.split()[0] for text in loop]
    memory = [op for op in ops if op.startswith(("global_", "buffer_")) and "atomic" not in op]
    loads = sum(_lane_bytes(op) for op in memory if "_load" in op)
    stores = sum(_lane_bytes(op) for op in memory if "_store" in op)
    return float(loads), float(stores)


def count(asm: str) -> tuple[int, int]:
    """(instructions outside the loop, instructions per loop iteration) of one wave."""
    prologue, loop, _ = _sections(asm)
    return len(prologue), len(loop)


def opcode(text: str) -> str:
    return text.split()[0]


def _bytes_per_lane(op: str) -> int:
    """Bytes an LDS instruction moves per lane (ds_read_b128: 16; ds_write2st64_b64: 2 x 8)."""
    width = re.search(r"_(?:b|u|i)(8|16|32|64|96|128)(?:_|$)", op)
    size = int(width.group(1)) // 8 if width else 4
    return 2 * size if re.match(r"ds_(read|write|load|store)2", op) else size


def _is_vmem(op: str) -> bool:
    return op.startswith(("global_", "buffer_", "flat_", "scratch_"))


def _is_ds(op: str) -> bool:
    return op.startswith("ds_")


def _is_smem(op: str) -> bool:
    return op.startswith(("s_load_", "s_buffer_load_", "s_scratch_load_", "s_dcache"))


_PIPE_CHARS = "abcdefghijklmnopqrstuvwxyz"


class _Pipes:
    """The pipe character of each (unit, cycles) pair met, so that a timeline's `units` names them."""

    def __init__(self) -> None:
        self.units: dict[str, list] = {}
        self._char: dict[tuple[str, float], str] = {}

    def of(self, unit: str, cycles: float) -> str:
        key = (unit, cycles)
        if key not in self._char:
            if len(self._char) >= len(_PIPE_CHARS):
                raise ValueError("more unit and rate pairs than pipe characters")
            char = _PIPE_CHARS[len(self._char)]
            self._char[key] = char
            self.units[char] = [unit, cycles]
        return self._char[key]


def _entry(text: str, arch: str, pipes: _Pipes, wave: int) -> tuple[list[list], str, float]:
    """The timeline entries of one instruction (an `s_waitcnt` with two partial counts gives two), its pipe
    character and its LDS wavefronts."""
    op = opcode(text)
    interval = issue_interval_cycles()
    if op == "s_nop":
        states = int(text.split()[1], 0) + 1
        return [[max(interval, states * S_NOP_CYCLES_PER_WAIT_STATE), 0, NO_BARRIER, None]], "-", 0.0
    if op == "s_waitcnt":
        mask, partial = 0, []
        for counter, barrier in (("vmcnt", VM), ("lgkmcnt", LGKM)):
            found = re.search(rf"{counter}\((\d+)\)", text)
            if found is None:
                continue
            if int(found.group(1)) == 0:
                mask |= 1 << barrier
            else:
                partial.append(["depbar", barrier, int(found.group(1))])
        entries = [[interval, mask, NO_BARRIER, None]]
        if partial:
            entries[0] += [NO_BARRIER, partial[0]]
        if len(partial) > 1:
            entries.append([interval, 0, NO_BARRIER, None, NO_BARRIER, partial[1]])
        return entries, "-", 0.0
    if op == "s_barrier":
        return [[interval, 0, NO_BARRIER, None, NO_BARRIER, ["bar"]]], "-", 0.0
    if _is_vmem(op):
        cls = ("atomic" if "atomic" in op else "global_store" if "_store" in op else "global_load")
        return [[interval, 0, VM, cls]], "-", 0.0
    if _is_ds(op):
        fronts = wave * _bytes_per_lane(op) / WAVEFRONT_BYTES
        return [[interval, 0, LGKM, "shared"]], "-", fronts
    if _is_smem(op):
        return [[interval, 0, LGKM, "constant"]], "-", 0.0
    if op.startswith(("v_mfma", "v_smfmac")):
        return [[interval, 0, NO_BARRIER, None]], pipes.of("matrix", mfma_cycles(op, arch)), 0.0
    if op.startswith("v_"):
        return [[interval, 0, NO_BARRIER, None]], pipes.of("valu", valu_cycles(op, arch)), 0.0
    return [[interval, 0, NO_BARRIER, None]], "-", 0.0


def _static(stream: list[list], tags: list[object]) -> dict[object, dict]:
    """One wave issuing `stream` in order: per tag the stall cycles and the waits [class, distance, at] on its
    producers (compiled.sass_code._simulate's form). A tag of None simulates without recording."""
    t, pending = 0.0, {VM: [], LGKM: []}
    sections: dict[object, dict] = {}
    for entry, tag in zip(stream, tags, strict=True):
        stall, mask, write, cls = entry[:4]
        special = entry[5] if len(entry) > 5 else None
        retired = []
        for k in (VM, LGKM):
            if mask >> k & 1:
                retired += pending[k]
                pending[k] = []
        if special and special[0] == "depbar":
            k, keep = special[1], special[2]
            cut = max(0, len(pending[k]) - keep)
            retired += pending[k][:cut]
            pending[k] = pending[k][cut:]
        if tag is not None:
            section = sections.setdefault(tag, {"stall_cycles": 0, "waits": []})
            newest: dict[str, float] = {}
            for c, issued in retired:
                newest[c] = max(newest.get(c, issued), issued)
            at = section["stall_cycles"]
            section["waits"] += [[c, t - issued, at] for c, issued in sorted(newest.items())]
            if special and special[0] == "bar":
                section["waits"].append(["barrier", 0, at])
            section["stall_cycles"] += stall
        if write != NO_BARRIER:
            pending[write].append((cls, t))
        t += stall
    return sections


def wave_timeline(asm: str, arch: str, wave: int = 64) -> dict:
    """One wave's static issue timeline of the kernel, in `compiled.sass_code.warp_timeline`'s form
    ({"prologue": {...}, "loop": {..., "entry": E} or {}}, each section with "stall_cycles", "waits", "stream",
    "pipes" and "shared"), plus "units": {pipe character: [unit, cycles]} for the pipes its instructions hold."""
    prologue, loop, entry = _sections(asm)
    pipes = _Pipes()

    def section(texts: list[str]) -> dict:
        stream, chars, shared = [], "", []
        for text in texts:
            entries, char, fronts = _entry(text, arch, pipes, wave)
            if fronts:
                shared.append([len(stream), round(fronts, 3)])
            stream += entries
            chars += char + "-" * (len(entries) - 1)
        return {"stream": stream, "pipes": chars, "shared": shared}

    before, after = section(prologue[:entry]), section(prologue[entry:])
    body = section(loop) if loop else None
    # the static evaluation: the prologue to the loop, the loop twice (the second recorded), the rest
    order = before["stream"] + (body["stream"] * 2 if body else []) + after["stream"]
    tags = (["prologue"] * len(before["stream"]) + ([None] * len(body["stream"]) + ["loop"] * len(body["stream"])
                                                     if body else []) + ["prologue"] * len(after["stream"]))
    static = _static(order, tags)
    empty = {"stall_cycles": 0, "waits": []}
    shift = len(before["stream"])
    timeline = {
        "prologue": {**static.get("prologue", empty), "stream": before["stream"] + after["stream"],
                     "pipes": before["pipes"] + after["pipes"],
                     "shared": before["shared"] + [[i + shift, n] for i, n in after["shared"]]},
        "loop": {**static.get("loop", empty), **body, "entry": shift} if body else {},
        "units": pipes.units,
    }
    return timeline
