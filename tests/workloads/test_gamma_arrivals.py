"""Gamma arrivals (`vllm bench serve --burstiness`): mean gap 1 / rate, squared coefficient of variation 1 / shape."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.arrivals import ArrivalProcess, Gamma
from workloads.traces import AgenticConfig


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gaps_have_the_rate_and_the_spread_the_shape_gives(burstiness):
    times = Gamma(rate_per_s=20.0, burstiness=burstiness).sample(40_000, np.random.default_rng(1))
    gaps = np.diff(times)
    assert times[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.03)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.06)


def test_it_is_an_arrival_process():
    assert isinstance(Gamma(1.0, 0.5), ArrivalProcess)
    AgenticConfig(session_arrivals=Gamma(1.0, 0.5))


@pytest.mark.parametrize(("rate", "burstiness", "field"), [
    (0.0, 1.0, "rate_per_s"), (1.0, 0.0, "burstiness"), (1.0, float("inf"), "burstiness"),
    (1.0, float("nan"), "burstiness"), (1.0, True, "burstiness"),
])
def test_bad_values_name_the_field(rate, burstiness, field):
    with pytest.raises(ValueError, match=field):
        Gamma(rate, burstiness)
