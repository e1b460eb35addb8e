"""Suite `norm`: residual add + RMSNorm, fused in one Triton kernel against the unfused pair (add, then norm).

Shapes: tokens {1 .. 16384} x hidden {7168 (Kimi K3, DeepSeek V3), 8192 (70B class)} x {fused, unfused},
bf16 storage. Up to 256 tokens is decode: timed in CUDA-graph mode, one graph replaying one launch (or
launch pair) per rotated input set, `ops_per_sample` = that count. Larger token counts are prefill:
eager, one op per sample, host gaps hidden.

Counts, per op (one fused launch or one add + norm pair), tokens t and hidden h:

- flop = 5·t·h: the add, the square, the sum of squares, the scale by 1/rms and by the weight
  (per-row mean, eps and square root not counted), the same in both paths.
- bytes, fused = 2·(4·t·h + h): x and residual read, normed and new residual written, weight read once.
- bytes, unfused = 2·(5·t·h + h): the add reads 2 and writes 1 value, the norm reads the sum back and
  writes 1; weight read once.

Input sets (x, residual and both outputs) rotate so that the inputs of consecutive launches exceed
2x the L2 (`env["l2_bytes"]`); one set when a single launch already reads more than that.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace

from validation.comparison import Comparison
from validation.comparison import compare as compare_launches
from validation.measure import BF16, EAGER, ELEMENT_BYTES, GRAPH, case_row, summarize
from workloads.kernels import AddRmsNorm

SUITE = "norm"
SHAPE_COLUMNS = ("tokens", "hidden")
METHOD_COLUMNS = ("n_input_sets", "num_warps")

FUSED = "triton_add_rmsnorm_fused"
UNFUSED = "triton_add_then_rmsnorm"
TOKENS = (1, 8, 64, 256, 1024, 4096, 16384)
HIDDEN = (7168, 8192)
DECODE_MAX_TOKENS = 256  # at most this many tokens: decode, timed in a graph
GRAPH_MIN_OPS = 20  # launches (or pairs) per graph at least, as the gemm suite captures
L2_ROTATION_FACTOR = 2  # rotated inputs exceed this many L2s (measure_suites uses the same)
PLANNED_L2_BYTES = 60_000_000  # PyTorch's L2_cache_size on the lent H200 (NOTES.md); the run re-checks env
EPS = 1e-6
ROUNDING = 2.0**-8  # bf16 round to nearest on the GPU: one conversion is within 2^-8 relative
# new_residual and the fused normed output are one conversion from the exact value; the unfused normed
# output three (its own, the stored sum it reads back, that sum's mean square); 1 % margin for fp32.
RTOL = {"residual": ROUNDING * 1.01, FUSED: ROUNDING * 1.01, UNFUSED: 3 * ROUNDING * 1.01}
ROW_NUM_WARPS = 8  # norms.ROW_NUM_WARPS and norms.ADD_NUM_WARPS (a test checks they agree)


@dataclass(frozen=True)
class NormCase:
    """One timed add + RMSNorm configuration; an op is one fused launch or one add + norm pair."""

    kernel: str
    tokens: int
    hidden: int
    launch_mode: str
    ops_per_sample: int
    dtype: str = BF16
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return SUITE

    @property
    def fused(self) -> bool:
        return self.kernel == FUSED

    def flop(self) -> int:
        return 5 * self.tokens * self.hidden

    def bytes(self) -> int:
        values = (4 if self.fused else 5) * self.tokens * self.hidden
        return (values + self.hidden) * ELEMENT_BYTES[self.dtype]

    def input_bytes(self) -> int:
        """x and residual of one launch, for sizing the rotation."""
        return 2 * self.tokens * self.hidden * ELEMENT_BYTES[self.dtype]

    def sets_needed(self, l2_bytes: int) -> int:
        """Input sets whose inputs together exceed L2_ROTATION_FACTOR L2s (1 if one set already does)."""
        target = L2_ROTATION_FACTOR * l2_bytes
        return 1 if self.input_bytes() > target else target // self.input_bytes() + 1

    def shape(self) -> dict[str, object]:
        return {"tokens": self.tokens, "hidden": self.hidden}


def cases() -> list[NormCase]:
    """Every (tokens, hidden, fused) point; decode ones hold one rotated set per launch in the graph."""
    out = []
    for hidden, tokens, kernel in itertools.product(HIDDEN, TOKENS, (FUSED, UNFUSED)):
        if tokens <= DECODE_MAX_TOKENS:
            probe = NormCase(kernel, tokens, hidden, GRAPH, 1)
            out.append(replace(probe, ops_per_sample=max(GRAPH_MIN_OPS, probe.sets_needed(PLANNED_L2_BYTES))))
        else:
            out.append(NormCase(kernel, tokens, hidden, EAGER, 1))
    return out


def _fit_rotation(case: NormCase, l2_bytes: int) -> NormCase:
    """A graph case with enough launches to rotate past this GPU's L2 (more than planned if its L2 is larger)."""
    if case.launch_mode == GRAPH and case.ops_per_sample < case.sets_needed(l2_bytes):
        return replace(case, ops_per_sample=case.sets_needed(l2_bytes))
    return case


def _check(case: NormCase, op, x, residual, weight, out) -> float:
    """Largest error of both outputs as a share of its bound, against float64; raises above 1."""
    import torch

    from validation.kernels.norms import add_rmsnorm_ref
    from validation.measure_suites import MeasurementError

    op(x, residual, weight, EPS, out=out)
    torch.cuda.synchronize()
    ref_normed, ref_res = add_rmsnorm_ref(x, residual, weight, EPS)
    if not (bool(torch.isfinite(out[0]).all()) and bool(torch.isfinite(out[1]).all())):
        raise MeasurementError("non-finite output")
    worst = 0.0
    for name, got, ref, rtol in (("normed", out[0], ref_normed, RTOL[case.kernel]),
                                 ("new_residual", out[1], ref_res, RTOL["residual"])):
        share = float(((got.double() - ref).abs() / (rtol * ref.abs())).nan_to_num(nan=0.0).max())  # 0/0: both 0
        if not share <= 1.0:
            raise MeasurementError(f"{name} error {share:.2f}x its bound {rtol:.2e}")
        worst = max(worst, share)
    return worst


def _time_case(case: NormCase, env: dict) -> dict[str, object]:
    import torch

    from validation.kernels import norms
    from validation.measure_suites import DEVICE, _provenance, bench, capture_graph

    op = norms.add_rmsnorm_fused if case.fused else norms.add_rmsnorm_unfused
    n_sets = case.ops_per_sample if case.launch_mode == GRAPH else case.sets_needed(env["l2_bytes"])
    shape = (n_sets, case.tokens, case.hidden)
    xs = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    residuals = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    normed, new_res = torch.empty_like(xs), torch.empty_like(xs)
    weight = (1 + 0.5 * torch.randn(case.hidden, device=DEVICE)).to(torch.bfloat16)
    sets = [(xs[i], residuals[i], weight, EPS, (normed[i], new_res[i])) for i in range(n_sets)]
    x0, r0, _, _, out0 = sets[0]
    share = _check(case, op, x0, r0, weight, out0)
    if case.launch_mode == EAGER:
        order = itertools.cycle(sets)

        def sample() -> None:
            args = next(order)
            op(*args[:4], out=args[4])

        times = bench(sample, case.ops_per_sample, hide_host_gaps=True)
    else:

        def body() -> None:
            for args in sets:
                op(*args[:4], out=args[4])

        graph = capture_graph(body)
        try:
            times = bench(graph.replay, case.ops_per_sample, hide_host_gaps=True)
        finally:
            del graph
            torch.cuda.synchronize()
    row = {**case_row(case), **summarize(times), "n_input_sets": n_sets, "num_warps": norms.ROW_NUM_WARPS,
           **_provenance(env)}
    print(f"norm {case.kernel} t={case.tokens} h={case.hidden} {case.launch_mode}: {n_sets} sets, "
          f"error {share:.2f} of bound, {row['time_s_median'] * 1e6:.2f} us, "
          f"{case.bytes() / row['time_s_median'] / 1e9:.0f} GB/s", flush=True)
    return row


def run(cases: Sequence[NormCase], env: dict) -> tuple[list[dict], list[str]]:
    """Check each case against float64 on fresh random inputs, then time it; a failed case does not stop others."""
    rows: list[dict] = []
    failures: list[str] = []
    for planned in cases:
        case = _fit_rotation(planned, int(env["l2_bytes"]))
        try:
            rows.append(_time_case(case, env))
        except Exception as e:
            failures.append(f"{case}: {e}")
            traceback.print_exc()
    return rows, failures


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """AddRmsNorm with the kernels' 256 threads; unfused is its Elementwise add (4096 values a program) + RmsNorm."""
    fused = row["kernel"] == FUSED
    tokens, hidden = int(row["tokens"]), int(row["hidden"])
    threads = int(row.get("num_warps") or ROW_NUM_WARPS) * 32
    kernel = AddRmsNorm(tokens=tokens, hidden=hidden, fused=fused, dtype="bf16", threads=threads)
    regime = "decode" if row["launch_mode"] == GRAPH else "prefill"
    group = f"add-rmsnorm {'fused' if fused else 'unfused'} {regime}"
    return compare_launches(row, kernel, gpu_name, f"{row['kernel']} t={tokens} h={hidden}", group)

