"""KDA suite: chunked prefill, decode and speculative verify (`companion/kernels/kda.py`), K3 TP8 shapes.

One GPU holds 12 of K3's 96 KDA heads at TP8 (the Kimi K3 study), K = V = 128. Counts, made before timing:

- FLOP (reference C.3, the algorithm's useful work, not the instructions the kernels issue). Prefill, per
  head and per chunk of c tokens (the last one may be short): 4c²K + 4c²V + 6cKV + (c³ - c)/3, the C.3
  table with the UT solve counted exactly, which is also `KdaPrefill`'s sum over its two launches. The
  intra kernel issues more: each of A's four 16-row blocks is a full 64-row dot with the other rows
  zeroed, and the w, u products are dense. Decode and verify: 7KV per token and head (decay KV,
  k^T S 2KV, rank-1 update 2KV, q^T S 2KV); the O(K + V) vector terms are left out (under 0.6 %).
- bytes: minimal HBM traffic: inputs once (q, k, v bf16; g fp32; beta fp32), the state read once and
  written once (verify with store_states writes every position's state instead, and leaves the input
  state as it was), outputs once (o bf16). The prefill's intermediates (w, u, kg, qg, A_qk) are not counted.

Timing: prefill eager with host gaps hidden (one prefill, two launches, per sample); decode and verify in
CUDA-graph mode, as serving engines run them. Every case rotates whole sets (inputs, state and outputs)
so that consecutive launches touch more than twice the L2, unless one set already does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SUITE = "kda"
SHAPE_COLUMNS = ("seqs", "tokens", "heads", "key_dim", "value_dim", "block_v", "store_states", "num_warps")
METHOD_COLUMNS = ("n_input_sets", "rel_err")

HEADS = 12  # Kimi K3: 96 KDA heads / TP8 (the Kimi K3 study)
HEAD_DIM = 128  # K = V (the Kimi K3 study)
CHUNK = 64  # equals companion.kernels.kda.CHUNK (not imported: that module imports triton)
PREFILL_SHAPES = ((1, 1024), (1, 4096), (1, 16384), (4, 4096))  # (seqs, tokens per sequence)
PREFILL_BLOCK_V = 32  # FLA's fwd_h tries BV in {32, 64}; 32 gives twice the workgroups at 12 heads
PREFILL_WARPS = 8  # both prefill launches (companion.kernels.kda.PREFILL_WARPS)
DECODE_SEQS = (1, 8, 32, 64, 128, 256)
DECODE_BLOCK_V = (32, 16)
VERIFY_SEQS = (1, 8, 32, 64)
VERIFY_POSITIONS = 4
VERIFY_BLOCK_V = (32, 16, 8, 4)
RECURRENT_WARPS = 4  # FLA fused_recurrent: num_warps = 4
MIN_GRAPH_OPS = 20  # launches per graph at least; more when the rotation needs more sets
# Rotation is planned before the GPU is seen, with the larger of the two H200 L2 figures (h200.yaml:
# 50 MiB datasheet, 60 MiB reported by PyTorch); run() checks the plan against the measured L2.
PLAN_L2_BYTES = 60 * 2**20
L2_ROTATION_FACTOR = 2
BF16_BYTES, FP32_BYTES = 2, 4
PREFILL, DECODE, VERIFY = "kda_prefill", "kda_decode", "kda_verify"
GROUPS = {PREFILL: "kda prefill", DECODE: "kda decode", VERIFY: "kda verify"}


def rotation_sets(set_bytes: int, l2_bytes: int = PLAN_L2_BYTES) -> int:
    """Sets needed so that consecutive launches touch more than L2_ROTATION_FACTOR x l2_bytes."""
    return L2_ROTATION_FACTOR * l2_bytes // set_bytes + 1


@dataclass(frozen=True)
class KdaCase:
    """One timed KDA configuration: `tokens` per sequence (1 for decode, the positions for verify)."""

    kernel: str
    seqs: int
    tokens: int
    block_v: int
    num_warps: int
    store_states: bool | None = None  # verify only
    heads: int = HEADS
    key_dim: int = HEAD_DIM
    value_dim: int = HEAD_DIM
    dtype: str = "bfloat16"  # the activations'; gates, beta and state are fp32
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return SUITE

    @property
    def launch_mode(self) -> str:
        return "eager" if self.kernel == PREFILL else "graph"

    @property
    def n_sets(self) -> int:
        return rotation_sets(self.set_bytes())

    @property
    def ops_per_sample(self) -> int:
        """Prefills per eager sample, or launches per graph: a whole number of passes over the sets."""
        if self.kernel == PREFILL:
            return 1
        return self.n_sets * math.ceil(MIN_GRAPH_OPS / self.n_sets)

    def _inputs_bytes(self) -> int:
        """q, k, v, g and beta of every token and head."""
        kd, vd = self.key_dim, self.value_dim
        per_token = 2 * kd * BF16_BYTES + vd * BF16_BYTES + kd * FP32_BYTES + FP32_BYTES
        return self.seqs * self.tokens * self.heads * per_token

    def _state_bytes(self) -> int:
        return self.seqs * self.heads * self.key_dim * self.value_dim * FP32_BYTES

    def _out_bytes(self) -> int:
        return self.seqs * self.tokens * self.heads * self.value_dim * BF16_BYTES

    def _states_written(self) -> int:
        """States stored: every position's with store_states, else the final one."""
        return self.tokens if self.store_states else 1

    def flop(self) -> int:
        kd, vd, sh = self.key_dim, self.value_dim, self.seqs * self.heads
        if self.kernel != PREFILL:
            return 7 * kd * vd * self.tokens * sh

        def per_chunk(c: int) -> int:
            return 4 * c * c * kd + 4 * c * c * vd + 6 * c * kd * vd + (c**3 - c) // 3

        full, rest = divmod(self.tokens, CHUNK)
        return sh * (full * per_chunk(CHUNK) + (per_chunk(rest) if rest else 0))

    def bytes(self) -> int:
        return self._inputs_bytes() + self._out_bytes() + (1 + self._states_written()) * self._state_bytes()

    def set_bytes(self) -> int:
        """Bytes of one rotated set: inputs, input state, output and every written state that is not in place."""
        in_place = self.kernel != PREFILL and not self.store_states
        states = 1 if in_place else 1 + self._states_written()
        return self._inputs_bytes() + self._out_bytes() + states * self._state_bytes()

    def shape(self) -> dict[str, object]:
        return {"seqs": self.seqs, "tokens": self.tokens, "heads": self.heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "block_v": self.block_v, "store_states": self.store_states,
                "num_warps": self.num_warps}


def cases() -> list[KdaCase]:
    """Prefill, then decode, then verify; same-kernel cases adjacent so each compiles once."""
    out = [KdaCase(PREFILL, s, t, PREFILL_BLOCK_V, PREFILL_WARPS) for s, t in PREFILL_SHAPES]
    out += [KdaCase(DECODE, s, 1, bv, RECURRENT_WARPS) for bv in DECODE_BLOCK_V for s in DECODE_SEQS]
    out += [KdaCase(VERIFY, s, VERIFY_POSITIONS, bv, RECURRENT_WARPS, store_states=True)
            for bv in VERIFY_BLOCK_V for s in VERIFY_SEQS]
    out += [KdaCase(VERIFY, s, VERIFY_POSITIONS, VERIFY_BLOCK_V[0], RECURRENT_WARPS, store_states=False)
            for s in VERIFY_SEQS]
    return out


# The residency grid (`suites --suite kda --grid residency`, `kda_residency.csv`): verify launches of one, two,
# three, five and ten 32-column workgroups a SM on a GPU of 132 SMs (11 heads: 44 workgroups a sequence), states
# stored or not, 4 and 16 positions. Whether a lone store-heavy trip or the queue of a SM's residents is what the
# model's drifted-residents analysis (`hwmodels.cycle_time.steady_trip_s`) misses (validation/NOTES.md).
RESIDENCY_HEADS = 11
RESIDENCY_SEQS = (3, 6, 9, 15, 30)
RESIDENCY_POSITIONS = (4, 16)


def residency_cases() -> list[KdaCase]:
    """The residency grid's verify cases: stored then not, for each sequence count and position count."""
    return [KdaCase(VERIFY, s, t, VERIFY_BLOCK_V[0], RECURRENT_WARPS, store_states=store, heads=RESIDENCY_HEADS)
            for s in RESIDENCY_SEQS for t in RESIDENCY_POSITIONS for store in (True, False)]


def _flag(value: str) -> bool:
    if value not in ("True", "False"):
        raise ValueError(f"store_states must be True or False in a verify row, got {value!r}")
    return value == "True"


def compare(row: dict[str, str], gpu_name: str):
    """The model's prediction for a recorded row: KdaPrefill (plain, qg stored), KdaDecode or KdaVerify, as
    `infersim kernel` times them: from the compiled kernels' code (`compiled.companion`)."""
    from validation.comparison import compare as compare_row
    from workloads.kda_kernels import KdaDecode, KdaPrefill, KdaVerify

    kernel = row["kernel"]
    seqs, tokens, heads = int(row["seqs"]), int(row["tokens"]), int(row["heads"])
    kd, vd, bv, threads = int(row["key_dim"]), int(row["value_dim"]), int(row["block_v"]), 32 * int(row["num_warps"])
    if kernel == PREFILL:
        model = KdaPrefill(seqs=seqs, tokens=tokens, heads=heads, key_dim=kd, value_dim=vd, chunk=CHUNK,
                           grouped_scan=False, block_v=bv, threads=threads, stores_qg=True)
        label = f"{kernel} seqs={seqs} tokens={tokens}"
    elif kernel == DECODE:
        model = KdaDecode(seqs=seqs, heads=heads, key_dim=kd, value_dim=vd, fused=True, block_v=bv, threads=threads)
        label = f"{kernel} seqs={seqs} bv={bv}"
    elif kernel == VERIFY:
        if kd != vd:
            raise ValueError(f"KdaVerify models K = V; the row has {kd} and {vd}")
        store = _flag(row["store_states"])
        model = KdaVerify(seqs=seqs, positions=tokens, heads=heads, head_dim=kd, tile_cols=bv,
                          store_states=store, threads=threads)
        label = f"{kernel} seqs={seqs} positions={tokens} bv={bv} store={store}"
    else:
        raise ValueError(f"unknown kda kernel {kernel!r}")
    if heads != HEADS:  # the study's head count is left unsaid; any other is named, so labels stay distinct
        label += f" heads={heads}"
    return compare_row(row, model, gpu_name, label, GROUPS[kernel])


# The generations grid (`suites --suite kda --grid generations`, `kda_generations.csv`): the same verify launches at
# 16 positions with 4 to 21 workgroups a SM, around the four (states not stored: 111 registers) and five (stored: 96)
# that fit on a SM at once. Whether a SM's workgroups beyond its resident slots run as a generation of their own
# after the others, or spread over the slots as they free (the even split of `hwmodels.cycle_time.drifting_s`).
GENERATIONS_SEQS = (12, 15, 18, 21, 24, 27, 36, 39, 60, 63)
GENERATIONS_POSITIONS = 16


def generations_cases() -> list[KdaCase]:
    """The generations grid's verify cases: stored then not, for each sequence count."""
    return [KdaCase(VERIFY, s, GENERATIONS_POSITIONS, VERIFY_BLOCK_V[0], RECURRENT_WARPS, store_states=store,
                    heads=RESIDENCY_HEADS) for s in GENERATIONS_SEQS for store in (True, False)]
