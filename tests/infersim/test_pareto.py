"""The Pareto frontier and its reading at one interactivity, on hand-made points."""

from __future__ import annotations

import math

import pytest

from infersim.pareto import Reading, frontier, interpolate, read_frontier

# (interactivity tok/s/user, throughput tok/s/GPU): a staircase of 4 frontier points and 4 points under it
XS = [10.0, 20.0, 30.0, 40.0, 15.0, 25.0, 35.0, 20.0]
YS = [900.0, 700.0, 400.0, 100.0, 500.0, 300.0, 50.0, 650.0]


def test_frontier_keeps_the_points_nothing_beats_in_both_by_interactivity():
    assert frontier(XS, YS) == [0, 1, 2, 3]
    assert [XS[i] for i in frontier(XS, YS)] == sorted(XS[i] for i in frontier(XS, YS))


def test_frontier_drops_weakly_dominated_points_and_keeps_the_first_of_twins():
    assert frontier([1.0, 2.0], [5.0, 5.0]) == [1]  # as high and more interactive
    assert frontier([2.0, 2.0], [4.0, 5.0]) == [1]  # as interactive and higher
    assert frontier([2.0, 2.0], [5.0, 5.0]) == [0]
    assert frontier([3.0], [1.0]) == [0]
    assert frontier([], []) == []


def test_frontier_leaves_out_points_without_both_values():
    assert frontier([1.0, None, 3.0, math.nan], [9.0, 8.0, None, 1.0]) == [0]
    with pytest.raises(ValueError, match="as many"):
        frontier([1.0], [])


def test_reading_interpolates_between_the_bracketing_points_and_names_the_one_at_or_above():
    reading = read_frontier(XS, YS, 25.0)
    assert reading == Reading(at=25.0, value=pytest.approx(550.0), point=2, below=1)
    assert read_frontier(XS, YS, 12.5).value == pytest.approx(850.0)
    assert read_frontier(XS, YS, 12.5).point == 1


def test_reading_at_a_frontier_point_is_that_point():
    reading = read_frontier(XS, YS, 30.0)
    assert (reading.value, reading.point, reading.below) == (400.0, 2, None)


def test_reading_below_the_range_is_the_least_interactive_frontier_point_and_above_it_nothing():
    reading = read_frontier(XS, YS, 5.0)
    assert (reading.value, reading.point, reading.below) == (900.0, 0, None)
    assert read_frontier(XS, YS, 40.0).point == 3
    assert read_frontier(XS, YS, 40.1) is None
    assert read_frontier([], [], 1.0) is None
    with pytest.raises(ValueError, match="finite"):
        read_frontier(XS, YS, math.inf)


def test_interpolate_is_the_straight_line():
    assert interpolate((0.0, 0.0), (10.0, 100.0), 2.5) == pytest.approx(25.0)
    assert interpolate((10.0, 100.0), (20.0, 0.0), 15.0) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="distinct"):
        interpolate((1.0, 2.0), (1.0, 3.0), 1.0)
