"""KDA kernels against the float64 per-token recurrence, and the `kda` suite's cases, counts and compare().

Tolerances are relative Frobenius errors ||out - ref|| / ||ref||. bf16 keeps 8 significant bits: the GPU
rounds to nearest (error <= 2^-9 = 2.0e-3 per value), the interpreter truncates (<= 2^-8 = 3.9e-3).
- Decode and verify keep the state in fp32 and round only o to bf16: o within 1e-2 (2.5x the truncation
  bound); states within 1e-5 (fp32 sums of K = 128 terms over <= 8 steps, ~1e-7 measured).
- Prefill also rounds w, u, kg, qg and the dot operands h, v_new and A_qk to bf16, as FLA does; v_new =
  u - w h cancels, so o and the final state carry a few bf16 ulps: 0.3-1.3 % measured (interpreter, gates
  from -5 to -0.05, correlated keys, up to 10 chunks, no growth with chunk count). Bound 3e-2. Mutations
  fail it: no decay in the scan, the diagonal left out of A_qk, or a sign error in the UT solve (0.8 in
  the stiff case, which is why it exists).
"""

from __future__ import annotations

import math

import pytest
import torch

from companion.kernels.kda import kda_decode, kda_prefill, kda_verify
from companion.kernels.kda_ref import kda_reference

PREFILL_TOL = 3e-2
OUT_TOL = 1e-2
STATE_TOL = 1e-5


def _inputs(rng: torch.Generator, device: str, b: int, t: int, h: int, kd: int = 128, vd: int = 128,
            stiff: bool = False):
    """Unit-norm q and k (FLA's layer L2-normalises them), gates -5*sigmoid(randn) in (-5, 0), a random state.

    stiff: slow decay (-5*sigmoid(randn - 3), about -0.25) and keys sharing a direction per head (cosine
    about 0.5), so that A_kk is far from zero and a wrong UT transform shows (random keys in 128 dimensions
    are nearly orthogonal and fast gates shrink A_kk to ~1e-3).
    """
    shared = torch.randn(1, 1, h, kd, generator=rng) if stiff else torch.zeros(1, 1, h, kd)
    q = torch.nn.functional.normalize(torch.randn(b, t, h, kd, generator=rng), dim=-1).to(torch.bfloat16)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, kd, generator=rng) + shared, dim=-1).to(torch.bfloat16)
    v = torch.randn(b, t, h, vd, generator=rng).to(torch.bfloat16)
    g = -5.0 * torch.sigmoid(torch.randn(b, t, h, kd, generator=rng) - (3.0 if stiff else 0.0))
    beta = torch.sigmoid(torch.randn(b, t, h, generator=rng))
    state = torch.randn(b, h, kd, vd, generator=rng)
    return tuple(x.to(device) for x in (q, k, v, g, beta, state))


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double().cpu() - ref.cpu()).norm() / ref.cpu().norm())


def test_reference_delta_rule_writes_the_value(rng):
    """beta = 1, no decay, a unit key: after the step the state maps the key to the value exactly."""
    q, k, v, state = (torch.randn(*shape, generator=rng, dtype=torch.float64)
                      for shape in ((2, 1, 3, 8), (2, 1, 3, 8), (2, 1, 3, 4), (2, 3, 8, 4)))
    k = torch.nn.functional.normalize(k, dim=-1)
    g, beta = torch.zeros(2, 1, 3, 8), torch.ones(2, 1, 3)
    o, s, _ = kda_reference(q, k, v, g, beta, state, scale=1.0)
    assert torch.allclose(torch.einsum("bhk,bhkv->bhv", k[:, 0], s), v[:, 0], atol=1e-12)
    assert torch.allclose(o[:, 0], torch.einsum("bhk,bhkv->bhv", q[:, 0], s), atol=1e-12)
    decayed = kda_reference(q, k, v, g - 1.0, torch.zeros(2, 1, 3), state)[1]  # beta = 0: decay only
    assert torch.allclose(decayed, state * math.exp(-1.0), atol=1e-12)


@pytest.mark.parametrize(("b", "t", "h", "kd", "vd", "block_v", "stiff"), [
    (2, 130, 2, 128, 128, 32, False),  # three chunks, the last of 2 tokens
    (1, 130, 2, 64, 32, 16, True),  # K != V; the UT transform matters (a sign error in it gives ~0.8)
    (1, 40, 3, 64, 32, 16, True),  # a single short chunk
])
def test_prefill_matches_reference(rng, device, b, t, h, kd, vd, block_v, stiff):
    x = _inputs(rng, device, b, t, h, kd, vd, stiff)
    before = x[5].clone()
    o, final = kda_prefill(*x, block_v=block_v)
    ref_o, ref_state, _ = kda_reference(*x)
    assert _rel(o, ref_o) < PREFILL_TOL
    assert _rel(final, ref_state) < PREFILL_TOL
    assert torch.equal(x[5], before)  # the initial state is an input only


# K3's head (K = V = 128) at FLA's BV = 32; narrower tiles on K = V = 32 heads, which keep the interpreter fast
TILES = [(32, 128), (16, 32), (8, 32), (4, 32)]


@pytest.mark.parametrize(("block_v", "dim"), TILES)
def test_decode_matches_reference(rng, device, block_v, dim):
    *x, state = _inputs(rng, device, 3, 1, 2, dim, dim)
    before = state.clone()
    o = kda_decode(*x, state, block_v=block_v)
    ref_o, ref_state, _ = kda_reference(*x, before)
    assert o.shape == (3, 1, 2, dim) and o.dtype == torch.bfloat16
    assert _rel(o, ref_o) < OUT_TOL
    assert _rel(state, ref_state) < STATE_TOL  # updated in place


@pytest.mark.parametrize("store_states", [True, False])
@pytest.mark.parametrize(("block_v", "dim"), TILES)
def test_verify_matches_reference(rng, device, block_v, dim, store_states):
    *x, state = _inputs(rng, device, 2, 5, 2, dim, dim)
    before = state.clone()
    o, states = kda_verify(*x, state, store_states=store_states, block_v=block_v)
    ref_o, ref_state, ref_states = kda_reference(*x, before, keep_states=True)
    assert _rel(o, ref_o) < OUT_TOL
    if store_states:
        assert states.shape == (2, 5, 2, dim, dim)
        for t in range(5):  # every position's state, for rollback
            assert _rel(states[:, t], ref_states[:, t]) < STATE_TOL
        assert torch.equal(state, before)
    else:
        assert states is None
        assert _rel(state, ref_state) < STATE_TOL


def test_launchers_reject_bad_arguments(device):
    x = [torch.randn(1, 2, 1, 128, device=device).to(torch.bfloat16) for _ in range(3)]
    g, beta = -torch.rand(1, 2, 1, 128, device=device), torch.rand(1, 2, 1, device=device)
    state = torch.randn(1, 1, 128, 128, device=device)
    with pytest.raises(ValueError, match="block_v"):
        kda_prefill(*x, g, beta, state, block_v=8)  # the scan's tl.dot needs 16 columns
    with pytest.raises(ValueError, match="block_v"):
        kda_verify(*x, g, beta, state, block_v=3)
    with pytest.raises(ValueError, match="state has shape"):
        kda_verify(*x, g, beta, state[:, :, :64])
    with pytest.raises(ValueError, match="one token"):
        kda_decode(*x, g, beta, state)
    with pytest.raises(ValueError, match="float32"):
        kda_verify(*x, g.to(torch.bfloat16), beta, state)


# ------------------------------------------------------------------------------------ the suite


def _suite_rows():
    from validation.suites import case_row
    from validation.suites import kda as suite

    fake_timing = {"time_s_median": 1e-4, "time_s_p10": 9e-5, "time_s_p90": 1.1e-4, "repeats": 20}
    return suite, [{k: ("" if v is None else str(v)) for k, v in {**case_row(c), **fake_timing}.items()}
                   for c in suite.cases()]


def test_suite_cases_counts_and_compare():
    """Not a measurement: synthetic timings, to check that every planned row maps to a model."""
    from validation import suites
    from workloads.kda_kernels import KdaPrefill, KdaVerify

    suite, rows = _suite_rows()
    cases = suite.cases()
    assert 30 <= len(cases) <= 40
    assert {c.kernel for c in cases} == {suite.PREFILL, suite.DECODE, suite.VERIFY}
    for case in cases:
        assert case.flop() > 0 and case.bytes() > 0 and case.ops_per_sample >= 1
        rotated = case.n_sets * case.set_bytes()
        assert rotated > 2 * suite.PLAN_L2_BYTES
        assert case.ops_per_sample % case.n_sets == 0 or case.kernel == suite.PREFILL  # whole passes
    columns = set(suites.columns("kda"))
    for case in cases:
        row = suites.case_row(case)
        assert set(row) <= columns and row["launch_mode"] in suites.LAUNCH_MODES
    for row in rows:
        c = suite.compare(row, "h200")
        assert c.predicted_s > 0 and c.group in suite.GROUPS.values()
    # the suite's FLOP are C.3's, which the models count too
    pre = next(c for c in cases if c.kernel == suite.PREFILL)
    assert pre.flop() == KdaPrefill(seqs=pre.seqs, tokens=pre.tokens, heads=12).work().flop
    ver = next(c for c in cases if c.kernel == suite.VERIFY)
    assert ver.flop() == KdaVerify(seqs=ver.seqs, positions=ver.tokens, heads=12).work().flop


def test_suite_counts_on_a_tiny_case():
    """Exact FLOP and bytes by hand: K = V = 2, one head, one sequence."""
    from validation.suites.kda import DECODE, PREFILL, VERIFY, KdaCase

    inputs = 2 * 2 * 2 + 2 * 2 + 2 * 4 + 4  # q, k bf16; v bf16; g fp32; beta fp32
    state, out = 2 * 2 * 4, 2 * 2
    dec = KdaCase(DECODE, 1, 1, 2, 4, heads=1, key_dim=2, value_dim=2)
    assert dec.flop() == 7 * 4 and dec.bytes() == inputs + out + 2 * state
    ver = KdaCase(VERIFY, 1, 3, 2, 4, store_states=True, heads=1, key_dim=2, value_dim=2)
    assert ver.flop() == 7 * 4 * 3 and ver.bytes() == 3 * (inputs + out) + 4 * state
    pre = KdaCase(PREFILL, 1, 70, 2, 8, heads=1, key_dim=2, value_dim=2)  # chunks of 64 and 6 tokens

    def chunk(c: int) -> int:
        return 4 * c * c * 2 + 4 * c * c * 2 + 6 * c * 4 + (c**3 - c) // 3

    assert pre.flop() == chunk(64) + chunk(6) and pre.bytes() == 70 * (inputs + out) + 2 * state


def test_prefill_model_stores_qg_adds_its_bytes_only():
    """KdaPrefill(stores_qg=True) describes this kernel: qg (T x K bf16) and per-chunk decays, nothing else."""
    from workloads.kda_kernels import KdaPrefill

    plain = KdaPrefill(seqs=2, tokens=100, heads=3)  # two chunks
    qg = KdaPrefill(seqs=2, tokens=100, heads=3, stores_qg=True)
    (i0, s0), (i1, s1) = plain.launches(), qg.launches()
    decays = 6 * 2 * 128 * 4
    assert i1.write_bytes - i0.write_bytes == 6 * 100 * 128 * 2 + decays
    assert s1.read_bytes - s0.read_bytes == decays
    assert (i1.read_bytes, s1.write_bytes, i1.flop, s1.flop) == (i0.read_bytes, s0.write_bytes, i0.flop, s0.flop)
    with pytest.raises(ValueError, match="grouped_scan"):
        KdaPrefill(seqs=1, tokens=64, heads=1, stores_qg=True, grouped_scan=True)
