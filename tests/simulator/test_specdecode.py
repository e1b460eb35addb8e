"""Speculative-decoding acceptance: draft-depth breakeven (Kimi K3 study), sampling, closed forms, vLLM's schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.specdecode import Acceptance, breakeven_cycle_growth, keyed_uniforms, useful_rate

# Kimi K3 study, mechanism 8 (draft depth): 3.00 expected committed tokens with 3 drafts, 3.36 with 4 (bonus included).
THREE = Acceptance.from_rates((0.9, 0.7, 0.4))
FOUR = Acceptance.from_rates((0.9, 0.7, 0.4, 0.36))
CYCLES = 200_000


def variance_from_pmf(acceptance: Acceptance) -> float:
    """Variance of committed tokens computed directly from P(committed = 1 + j), independent of the module's formula."""
    pmf = acceptance.committed_probabilities
    mean = sum((1 + j) * p for j, p in enumerate(pmf))
    return sum((1 + j - mean) ** 2 * p for j, p in enumerate(pmf))


def geometric_with_mean(mean: float, drafts: int) -> Acceptance:
    """Solve (1 - a^(k+1)) / (1 - a) = mean for a by bisection; the left side increases with a."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if Acceptance.geometric(mid, drafts).expected_tokens_per_cycle < mean:
            lo = mid
        else:
            hi = mid
    return Acceptance.geometric((lo + hi) / 2, drafts)


def test_kimi_k3_study_draft_example_expected_tokens():
    assert THREE.drafts == 3 and FOUR.drafts == 4
    assert THREE.expected_tokens_per_cycle == pytest.approx(3.00, abs=1e-12)
    assert FOUR.expected_tokens_per_cycle == pytest.approx(3.36, abs=1e-12)


def test_kimi_k3_study_draft_breakeven_is_twelve_percent():
    assert breakeven_cycle_growth(THREE, FOUR) == pytest.approx(0.12, abs=1e-12)


def test_kimi_k3_study_draft_useful_rate_ties_at_breakeven():
    cycle_s = 0.020
    longer_cycle_s = cycle_s * (1 + breakeven_cycle_growth(THREE, FOUR))
    assert useful_rate(THREE, cycle_s) == pytest.approx(150.0)
    assert useful_rate(FOUR, longer_cycle_s) == pytest.approx(useful_rate(THREE, cycle_s), rel=1e-12)
    assert useful_rate(FOUR, longer_cycle_s * 0.99) > useful_rate(THREE, cycle_s)
    assert useful_rate(FOUR, longer_cycle_s * 1.01) < useful_rate(THREE, cycle_s)


def test_truncate_is_the_shorter_draft():
    assert FOUR.truncate(3) == THREE
    assert FOUR.truncate(0).expected_tokens_per_cycle == 1.0
    with pytest.raises(ValueError, match="drafts"):
        THREE.truncate(4)
    with pytest.raises(ValueError, match="drafts"):
        THREE.truncate(-1)


@pytest.mark.parametrize("acceptance", [THREE, FOUR], ids=["k3", "k4"])
def test_long_run_sampling_matches_rates(acceptance):
    committed = acceptance.sample_committed(np.random.default_rng(20240611), CYCLES)
    assert committed.shape == (CYCLES,)
    assert np.issubdtype(committed.dtype, np.integer)
    assert committed.min() >= 1 and committed.max() <= acceptance.drafts + 1
    assert committed.mean() == pytest.approx(acceptance.expected_tokens_per_cycle, rel=0.01)
    for i, rate in enumerate(acceptance.rates, start=1):
        assert abs(np.mean(committed >= i + 1) - rate) < 0.01, f"position {i}"
    assert committed.var() == pytest.approx(acceptance.variance_tokens_per_cycle, rel=0.03)


def test_same_seed_same_samples():
    first = FOUR.sample_committed(np.random.default_rng(7), 10_000)
    second = FOUR.sample_committed(np.random.default_rng(7), 10_000)
    other = FOUR.sample_committed(np.random.default_rng(8), 10_000)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other)


def test_sampling_edge_rates():
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(Acceptance((1.0, 1.0)).sample_committed(rng, 50), np.full(50, 3))
    np.testing.assert_array_equal(Acceptance((0.0, 0.0)).sample_committed(rng, 50), np.ones(50))
    np.testing.assert_array_equal(Acceptance(()).sample_committed(rng, 50), np.ones(50))
    assert THREE.sample_committed(rng, 0).shape == (0,)


def test_sampling_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n must"):
        THREE.sample_committed(np.random.default_rng(0), -1)
    with pytest.raises(ValueError, match="rng"):
        THREE.sample_committed(np.random, 10)


def test_committed_probabilities_follow_rate_differences():
    assert FOUR.committed_probabilities == pytest.approx((0.1, 0.2, 0.3, 0.04, 0.36))
    assert math.fsum(FOUR.committed_probabilities) == pytest.approx(1.0, abs=1e-15)


@given(alpha=st.floats(0.0, 0.999), drafts=st.integers(0, 12))
def test_geometric_matches_closed_form(alpha, drafts):
    acceptance = Acceptance.geometric(alpha, drafts)
    assert acceptance.rates == pytest.approx([alpha**i for i in range(1, drafts + 1)])
    closed_form = (1 - alpha ** (drafts + 1)) / (1 - alpha)
    assert acceptance.expected_tokens_per_cycle == pytest.approx(closed_form, rel=1e-12)


def test_geometric_alpha_one_accepts_everything():
    assert Acceptance.geometric(1.0, 5).expected_tokens_per_cycle == 6.0


@pytest.mark.parametrize(
    ("mean", "drafts", "rates"),
    [
        (3.5, 5, (1.0, 1.0, 0.5, 0.0, 0.0)),  # AL 3.5 at 5 drafts, as vLLM's _acceptance_length_to_rates gives it
        (2.6, 3, (1.0, 0.6, 0.0)),
        (1.0, 3, (0.0, 0.0, 0.0)),
        (4.0, 3, (1.0, 1.0, 1.0)),
        (2.0, 3, (1.0, 0.0, 0.0)),
        (1.0, 0, ()),
    ],
)
def test_min_variance_schedule(mean, drafts, rates):
    acceptance = Acceptance.min_variance(mean, drafts)
    assert acceptance.rates == pytest.approx(rates, abs=1e-12)
    assert acceptance.expected_tokens_per_cycle == pytest.approx(mean, abs=1e-12)


@given(drafts=st.integers(1, 10), fraction=st.floats(0.0, 1.0))
def test_min_variance_hits_mean_and_beats_geometric(drafts, fraction):
    mean = 1.0 + fraction * drafts
    schedule = Acceptance.min_variance(mean, drafts)
    assert schedule.drafts == drafts
    assert schedule.expected_tokens_per_cycle == pytest.approx(mean, abs=1e-12)
    # All mass on the two integers around the mean: variance f(1 - f), the least any integer law can have.
    assert variance_from_pmf(schedule) == pytest.approx(schedule.variance_tokens_per_cycle, abs=1e-9)
    geometric = geometric_with_mean(mean, drafts)
    assert geometric.expected_tokens_per_cycle == pytest.approx(mean, abs=1e-9)
    assert variance_from_pmf(schedule) <= variance_from_pmf(geometric) + 1e-9


@settings(max_examples=200)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8))
def test_min_variance_beats_any_schedule_with_the_same_mean(values):
    other = Acceptance.from_rates(sorted(values, reverse=True))
    schedule = Acceptance.min_variance(other.expected_tokens_per_cycle, other.drafts)
    assert schedule.expected_tokens_per_cycle == pytest.approx(other.expected_tokens_per_cycle, abs=1e-12)
    assert variance_from_pmf(schedule) <= variance_from_pmf(other) + 1e-9


@pytest.mark.parametrize(("mean", "drafts"), [(0.99, 3), (4.01, 3), (2.0, 0), (math.nan, 3)])
def test_min_variance_rejects_mean_outside_range(mean, drafts):
    with pytest.raises(ValueError, match="mean_tokens_per_cycle"):
        Acceptance.min_variance(mean, drafts)


def test_non_monotone_rates_name_the_position():
    with pytest.raises(ValueError, match="position 3"):
        Acceptance.from_rates((0.9, 0.5, 0.6, 0.1))


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ((0.9, 1.2), "position 2 must lie in"),
        ((-0.1,), "position 1 must lie in"),
        ((0.5, math.nan), "position 2 must lie in"),
        ((0.5, "x"), "position 2 must be a number"),
    ],
)
def test_out_of_range_rates_name_the_position(rates, message):
    with pytest.raises(ValueError, match=message):
        Acceptance.from_rates(rates)


def test_rates_are_stored_as_float_tuple():
    acceptance = Acceptance([1, 0.5])
    assert acceptance.rates == (1.0, 0.5)
    assert isinstance(acceptance.rates, tuple)
    assert acceptance == Acceptance.from_rates(np.array([1.0, 0.5]))


def test_bad_constructor_arguments_name_the_field():
    with pytest.raises(ValueError, match="alpha"):
        Acceptance.geometric(1.5, 3)
    with pytest.raises(ValueError, match="drafts"):
        Acceptance.geometric(0.5, -1)
    with pytest.raises(ValueError, match="drafts"):
        Acceptance.min_variance(2.0, 2.5)


@pytest.mark.parametrize("cycle_s", [0.0, -1.0, math.inf, math.nan])
def test_useful_rate_rejects_bad_cycle(cycle_s):
    with pytest.raises(ValueError, match="cycle_s"):
        useful_rate(THREE, cycle_s)


def test_breakeven_rejects_non_acceptance():
    with pytest.raises(ValueError, match="a_long"):
        breakeven_cycle_growth(THREE, (0.9, 0.7))


def test_keyed_draws_depend_only_on_key_request_and_position():
    acceptance = Acceptance((0.8, 0.55, 0.3))
    ids, positions = list(range(500)) * 4, [p for p in (1, 4, 9, 30) for _ in range(500)]
    draw = acceptance.keyed_sampler(np.random.default_rng(5))
    together = draw(ids, positions)
    # one pair at a time, in reverse order, from a sampler of the same seed: the same counts
    again = acceptance.keyed_sampler(np.random.default_rng(5))
    assert [again([i], [p])[0] for i, p in reversed(list(zip(ids, positions, strict=True)))] == together[::-1]
    assert draw(ids, positions) == together  # drawing twice takes nothing from a stream
    assert acceptance.keyed_sampler(np.random.default_rng(6))(ids, positions) != together


def test_keyed_uniforms_are_uniform_and_the_draws_keep_the_rates():
    from scipy import stats

    ids = np.repeat(np.arange(400), 500)
    positions = np.tile(np.arange(500), 400)
    u = keyed_uniforms(np.uint64(12345), ids, positions)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 0.01
    # neighbouring positions of one request, and one position of neighbouring requests, are uncorrelated
    grid = u.reshape(400, 500)
    assert abs(np.corrcoef(grid[:, :-1].ravel(), grid[:, 1:].ravel())[0, 1]) < 0.01
    assert abs(np.corrcoef(grid[:-1].ravel(), grid[1:].ravel())[0, 1]) < 0.01
    committed = np.asarray(FOUR.keyed_sampler(np.random.default_rng(0))(ids.tolist(), positions.tolist()))
    assert committed.mean() == pytest.approx(FOUR.expected_tokens_per_cycle, rel=0.01)
    for i, rate in enumerate(FOUR.rates, start=1):
        assert abs(np.mean(committed >= i + 1) - rate) < 0.01, f"position {i}"
