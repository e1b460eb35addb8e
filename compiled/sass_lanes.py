"""Shared-memory wavefronts of each SASS instruction, from its lanes' addresses: bank conflicts read off the code.

An SM's shared memory serves 32 banks of 4 bytes, one 128-byte wavefront a clock. A warp's shared access takes
as many wavefronts as its lanes need: for accesses of up to 4 bytes a lane, the most distinct 4-byte words
any one bank holds (lanes reading the same word share it); 8-byte accesses go in two phases of 16 lanes and
16-byte ones in four of 8, each phase counted the same way; `LDSM`/`STSM` move 8 rows of 16 bytes a matrix,
one phase a matrix. A warpgroup MMA (`HGMMA`) reads its shared operands as whole wavefronts (their bytes over
128, a quarter a warp). This is what Nsight Compute reports as "L1 Wavefronts Shared"; its "ideal" count is the
same access with no conflict.

The compiled code does not state the addresses, so `lane_wavefronts` computes them: it runs the main path's
integer instructions in address order on every thread of one workgroup at once (numpy vectors of the threads'
32-bit values), starting from what a thread knows (its `SR_TID.X`; `SR_CTAID`, `SR_CgaCtaId` and the lane's
`SR_LANEID`), and takes every value it cannot know (a kernel argument, a loaded datum, a float) as unknown.
Spilled registers go through their thread's local memory (`STL`/`LDL` at the same operand). A predicate known
per thread masks lanes off; one not known leaves every lane on. Straight-line evaluation in address order
suits these kernels, whose branches skip work on some warps but do not change how an address is formed; a
shared access whose address comes out unknown falls back to its conflict-free count (`ideal_wavefronts`).
No GPU or Triton is needed: the input is `nvdisasm` text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

BANKS = 32
BANK_BYTES = 4
WAVEFRONT_BYTES = BANKS * BANK_BYTES
WARP = 32
MASK32 = 0xFFFFFFFF
# Threads of a warpgroup: an HGMMA's shared operand bytes are read once for the group's four warps.
WARPGROUP_WARPS = 4

_SHARED_OPS = ("LDS", "STS", "LDSM", "STSM", "ATOMS", "LDGSTS")
_WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "32": 4, "64": 8, "128": 16}
_HGMMA = re.compile(r"HGMMA\.64x(\d+)x(\d+)\.\w+\.(\w+)")
_ELEMENT_BYTES = {"TF32": 4, "F16": 2, "BF16": 2, "E4M3": 1, "E5M2": 1, "S8": 1, "U8": 1}


def opcode(text: str) -> str:
    """The opcode with its modifiers, predicate guard removed."""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def access_bytes(op: str) -> int:
    """Bytes a lane moves in a shared access (`LDS.128`: 16; no width suffix: 4)."""
    for part in op.split(".")[1:]:
        if part in _WIDTH:
            return _WIDTH[part]
    return 4


def is_shared(op: str) -> bool:
    return op.split(".")[0] in _SHARED_OPS


def hgmma_wavefronts(text: str) -> float:
    """Shared wavefronts a warp's HGMMA takes: its shared operands (B, and A unless a register holds it) in
    bytes over 128, a quarter for each of the warpgroup's warps."""
    m = _HGMMA.search(text)
    if not m:
        return 0.0
    n, k, dtype = int(m.group(1)), int(m.group(2)), m.group(3)
    size = _ELEMENT_BYTES.get(dtype, 2)
    body = re.sub(r"^@!?U?P\w+\s+", "", text).split(None, 1)
    operands = [o.strip() for o in body[1].split(",")] if len(body) > 1 else []
    a_in_registers = len(operands) > 1 and re.match(r"R\d+", operands[1]) is not None
    shared = n * k * size + (0 if a_in_registers else 64 * k * size)
    return shared / WAVEFRONT_BYTES / WARPGROUP_WARPS


def ideal_wavefronts(op: str) -> float:
    """Wavefronts of a warp's shared access with no conflict (all lanes on)."""
    base = op.split(".")[0]
    if base in ("LDSM", "STSM"):
        return float(_matrices(op))
    return float(max(1, WARP * access_bytes(op) // WAVEFRONT_BYTES))


def _matrices(op: str) -> int:
    parts = op.split(".")
    return 4 if "4" in parts[3:] else 2 if "2" in parts[3:] else 1


def wavefronts(addresses: np.ndarray, active: np.ndarray, width: int) -> int:
    """Wavefronts of one warp's access: `addresses` (32 byte addresses), `active` lanes, `width` bytes a lane."""
    lanes_per_phase = WARP if width <= BANK_BYTES else WAVEFRONT_BYTES // width
    total = 0
    for start in range(0, WARP, lanes_per_phase):
        on = active[start:start + lanes_per_phase]
        if not on.any():
            continue
        first = addresses[start:start + lanes_per_phase][on] // BANK_BYTES
        words = np.unique((first[:, None] + np.arange(max(1, width // BANK_BYTES))[None, :]).ravel())
        total += int(np.bincount(words % BANKS, minlength=BANKS).max())
    return total


def matrix_wavefronts(addresses: np.ndarray, active: np.ndarray, matrices: int) -> int:
    """Wavefronts of an `LDSM`/`STSM`: per matrix, its 8 row addresses (lanes 8i..8i+7) of 16 bytes each."""
    total = 0
    for i in range(matrices):
        rows, on = addresses[8 * i:8 * i + 8], active[8 * i:8 * i + 8]
        if on.any():
            words = np.unique((rows[on][:, None] // BANK_BYTES + np.arange(4)[None, :]).ravel())
            total += int(np.bincount(words % BANKS, minlength=BANKS).max())
    return total


# --- The lane evaluator -----------------------------------------------------------------------------------------

class _Lanes:
    """Registers, uniform registers, predicates and spilled words of every thread of one workgroup."""

    def __init__(self, threads: int) -> None:
        self.n = threads
        tid = np.arange(threads, dtype=np.int64)
        self.special = {"SR_TID.X": tid, "SR_TID.Y": np.zeros(threads, np.int64),
                        "SR_TID.Z": np.zeros(threads, np.int64), "SR_LANEID": tid % WARP,
                        "SR_CTAID.X": np.zeros(threads, np.int64), "SR_CTAID.Y": np.zeros(threads, np.int64),
                        "SR_CTAID.Z": np.zeros(threads, np.int64), "SR_CgaCtaId": np.zeros(threads, np.int64),
                        "SRZ": np.zeros(threads, np.int64)}
        self.regs: dict[str, np.ndarray | None] = {}
        self.preds: dict[str, np.ndarray | None] = {}
        self.local: dict[str, np.ndarray | None] = {}

    def value(self, operand: str) -> np.ndarray | None:
        """An operand's value per thread (None: unknown)."""
        o = operand.strip()
        neg, inv = o.startswith("-"), o.startswith("~")
        o = o.lstrip("-~").replace(".reuse", "")
        o = re.sub(r"\.(H0|H1|B\d|X4|X8|X16|U32|64)$", "", o)
        if o in ("RZ", "URZ"):
            v = np.zeros(self.n, np.int64)
        elif re.fullmatch(r"-?0x[0-9a-f]+|-?\d+", o):
            v = np.full(self.n, int(o, 0) & MASK32, np.int64)
        elif re.fullmatch(r"U?R\d+", o):
            v = self.regs.get(o)
        else:  # constant bank, float immediates, anything else: unknown
            return None
        if v is None:
            return None
        if neg:
            v = (-v) & MASK32
        if inv:
            v = (~v) & MASK32
        return v

    def pred(self, operand: str) -> np.ndarray | None:
        o = operand.strip()
        neg = o.startswith("!")
        o = o.lstrip("!")
        v = np.ones(self.n, bool) if o in ("PT", "UPT") else self.preds.get(o)
        if v is None:
            return None
        return ~v if neg else v


def _lop3(a, b, c, lut: int):
    out = np.zeros_like(a)
    for bit in range(8):
        if lut >> bit & 1:
            ma = a if bit & 4 else (~a & MASK32)
            mb = b if bit & 2 else (~b & MASK32)
            mc = c if bit & 1 else (~c & MASK32)
            out |= ma & mb & mc
    return out & MASK32


def _signed(v):
    return np.where(v & 0x80000000, v - (1 << 32), v)


def _compare(cmp: str, a, b, unsigned: bool):
    if not unsigned:
        a, b = _signed(a), _signed(b)
    return {"LT": a < b, "LE": a <= b, "GT": a > b, "GE": a >= b, "EQ": a == b, "NE": a != b}.get(cmp)


def _address(lanes: _Lanes, text: str) -> np.ndarray | None:
    """The byte address of a shared access: the sum of the terms in its brackets."""
    m = re.search(r"\[([^\]]*)\]", text.split(None, 1)[1] if " " in text else "")
    if not m:
        return None
    total = np.zeros(lanes.n, np.int64)
    for term in m.group(1).split("+"):
        term = term.strip()
        scale = 1
        scaled = re.match(r"(U?R\w+)\.X(\d+)$", term)
        if scaled:
            term, scale = scaled.group(1), int(scaled.group(2))
        v = lanes.value(term)
        if v is None:
            return None
        total = total + v * scale
    return total & MASK32


def _execute(lanes: _Lanes, text: str) -> None:
    """Run one instruction's integer semantics on every thread; a destination it cannot compute becomes unknown."""
    guard = re.match(r"^@(!?U?P\w+)\s+", text)
    body = text[guard.end():] if guard else text
    parts = body.split(None, 1)
    op = parts[0]
    args = [a.strip() for a in parts[1].split(",")] if len(parts) > 1 else []
    base = op.split(".")[0]
    mods = op.split(".")[1:]
    mask = lanes.pred(guard.group(1)) if guard else None
    guarded = guard is not None

    def write(dest: str, v) -> None:
        dest = dest.replace(".reuse", "")
        if not re.fullmatch(r"U?R\d+|U?P\d+", dest):  # RZ, URZ, PT, UPT and anything else: not written
            return
        store = lanes.preds if re.fullmatch(r"U?P\d+", dest) else lanes.regs
        if v is not None and v.dtype != bool:
            v = v & MASK32
        if guarded:
            old = store.get(dest)
            if mask is None or old is None or v is None:
                v = None if not (mask is not None and not mask.any()) else old
            else:
                v = np.where(mask, v, old)
        store[dest] = v

    def val(i: int):
        return lanes.value(args[i]) if i < len(args) else None

    def dest_regs(first: str, count: int) -> list[str]:
        m = re.fullmatch(r"(U?R)(\d+)", first.replace(".reuse", ""))
        if not m:
            return []
        return [f"{m.group(1)}{int(m.group(2)) + k}" for k in range(count)]

    if base in ("MOV", "UMOV", "IMOV"):
        write(args[0], val(1))
    elif base in ("S2R", "S2UR", "CS2R"):
        for d in dest_regs(args[0], 2 if base == "CS2R" and "32" not in mods else 1):
            write(d, lanes.special.get(args[1]))
    elif base == "R2UR":
        v = val(1)
        write(args[0], None if v is None else np.full(lanes.n, v[0]))
    elif base in ("IMAD", "UIMAD") and not {"WIDE", "HI", "X"} & set(mods):
        a, b, c = val(1), val(2), val(3)
        write(args[0], None if a is None or b is None or c is None else a * b + c)
    elif base in ("IMAD", "UIMAD") and "WIDE" in mods:
        a, b, c = val(1), val(2), val(3)
        for d in dest_regs(args[0], 2):
            write(d, None)
        if a is not None and b is not None and c is not None:
            write(args[0], a * b + c)  # the low word of the 64-bit result; an address stays 32-bit here
    elif base in ("IADD3", "UIADD3") and "X" not in mods and "64" not in mods:
        srcs = [a for a in args[1:] if not re.fullmatch(r"!?U?P\w+", a)]
        dests = [a for a in args[:1]]
        vs = [lanes.value(s) for s in srcs[:3]]
        write(dests[0], None if any(v is None for v in vs) else vs[0] + vs[1] + vs[2])
        for extra in args[1:]:
            if re.fullmatch(r"U?P\d", extra):
                write(extra, None)
            else:
                break
    elif base in ("LOP3", "ULOP3") and args and not re.fullmatch(r"U?P\d", args[0]):
        a, b, c = val(1), val(2), val(3)
        lut = int(args[4], 0) if len(args) > 4 else None
        write(args[0], None if None in (lut,) or a is None or b is None or c is None else _lop3(a, b, c, lut))
    elif base in ("SHF", "USHF"):
        a, s, b = val(1), val(2), val(3)
        if a is None or s is None or b is None:
            write(args[0], None)
        else:
            s = s & 31
            wide = (b << 32) | a  # funnel: high word b, low word a
            if "L" in mods:
                out = ((wide << s) >> 32) if "HI" in mods else (a << s)
            elif "S32" in mods and "HI" in mods:
                out = _signed(b) >> s
            else:
                out = (b >> s) if "HI" in mods else (wide >> s)
            write(args[0], out)
    elif base in ("LEA", "ULEA") and "X" not in mods:
        if "HI" in mods:
            a, b, c, s = val(1), val(2), val(3), val(4)
            ok = not any(v is None for v in (a, b, c, s))
            write(args[0], (b + (((c << 32) | a) >> (32 - (s & 31)))) if ok else None)
        else:
            dest_args = [x for x in args if not re.fullmatch(r"U?P\d", x)]
            a, b, s = (lanes.value(x) for x in dest_args[1:4])
            ok = not any(v is None for v in (a, b, s))
            write(dest_args[0], ((a << (s & 31)) + b) if ok else None)
            for x in args[1:]:
                if re.fullmatch(r"U?P\d", x):
                    write(x, None)
    elif base == "SGXT":
        a, bits = val(1), val(2)
        if a is None or bits is None:
            write(args[0], None)
        else:
            m = (1 << bits) - 1
            out = a & m
            if "U32" not in mods:
                out = np.where(out >> (bits - 1) & 1, out | (MASK32 ^ m), out)
            write(args[0], out)
    elif base == "BMSK":
        pos, width = val(1), val(2)
        write(args[0], None if pos is None or width is None else (((1 << width) - 1) << pos))
    elif base in ("SEL", "USEL"):
        a, b, p = val(1), val(2), lanes.pred(args[3]) if len(args) > 3 else None
        write(args[0], None if a is None or b is None or p is None else np.where(p, a, b))
    elif base in ("ISETP", "UISETP"):
        a, b = val(2), val(3)
        combine = lanes.pred(args[4]) if len(args) > 4 else np.ones(lanes.n, bool)
        res = None
        if a is not None and b is not None and combine is not None:
            res = _compare(mods[0], a, b, "U32" in mods)
            if res is not None:
                res = (res | combine) if "OR" in mods else (res ^ combine) if "XOR" in mods else (res & combine)
        write(args[0], res)
        if re.fullmatch(r"U?P\d", args[1]):
            write(args[1], None)
    elif base == "PRMT":
        a, sel, b = val(1), val(2), val(3)
        if a is None or sel is None or b is None:
            write(args[0], None)
        else:
            pool = [(a >> (8 * k)) & 0xFF for k in range(4)] + [(b >> (8 * k)) & 0xFF for k in range(4)]
            out = np.zeros(lanes.n, np.int64)
            for k in range(4):
                s = (sel[0] >> (4 * k)) & 7  # the selector is one value for every thread here
                out |= pool[int(s)] << (8 * k)
            write(args[0], out)
    elif base == "STL":
        lanes.local[args[0]] = val(1)
        if base == "STL" and "64" in mods:
            lanes.local[args[0] + "+4"] = lanes.value(f"R{int(args[1][1:]) + 1}") if args[1][1:].isdigit() else None
    elif base == "LDL":
        write(args[0], lanes.local.get(args[1]))
        if "64" in mods and args[0][1:].isdigit():
            write(f"R{int(args[0][1:]) + 1}", lanes.local.get(args[1] + "+4"))
    else:
        # anything else that writes: its first operand is a destination (register, uniform register or
        # predicate) that this evaluator does not compute
        if args and re.fullmatch(r"U?R\d+|U?P\d", args[0]) and base not in (
                "STS", "STG", "ST", "STSM", "RED", "BAR", "BRA", "BSSY", "BSYNC", "WARPSYNC", "EXIT", "NOP",
                "MEMBAR", "FENCE", "DEPBAR", "ERRBAR", "CCTL", "WARPGROUP", "BREAK", "CALL", "RET", "YIELD"):
            count = 4 if "128" in mods else 2 if ("64" in mods or "WIDE" in mods) else 1
            for d in dest_regs(args[0], count) or [args[0]]:
                write(d, None)
            for extra in args[1:2]:
                if re.fullmatch(r"U?P\d", extra):
                    write(extra, None)


def lane_wavefronts(instructions: Iterable[str], threads: int) -> list[float | None]:
    """Per instruction (in the order given: the main path in address order), the mean shared wavefronts a warp
    takes over the workgroup's warps (0 for an instruction that does not touch shared memory; None for a
    shared access whose address the evaluator could not compute)."""
    lanes = _Lanes(threads)
    out: list[float | None] = []
    warps = max(1, threads // WARP)
    for text in instructions:
        op = opcode(text)
        result: float | None = 0.0
        if op.startswith("HGMMA"):
            result = hgmma_wavefronts(text)
        elif is_shared(op):
            addr = _address(lanes, text)
            guard = re.match(r"^@(!?U?P\w+)\s+", text)
            active = lanes.pred(guard.group(1)) if guard else np.ones(threads, bool)
            if active is None:
                active = np.ones(threads, bool)
            if addr is None:
                result = None
            else:
                base = op.split(".")[0]
                per_warp = []
                for w in range(warps):
                    a, on = addr[w * WARP:(w + 1) * WARP], active[w * WARP:(w + 1) * WARP]
                    if base in ("LDSM", "STSM"):
                        per_warp.append(matrix_wavefronts(a, on, _matrices(op)))
                    else:
                        per_warp.append(wavefronts(a, on, access_bytes(op)))
                result = float(np.mean(per_warp))
        _execute(lanes, text)
        out.append(result)
    return out
