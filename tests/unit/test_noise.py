"""The one robust noise estimator (orchestrator/metrics/noise.py)."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.metrics import noise


def test_mad_sigma_estimates_the_standard_deviation_and_ignores_a_wild_value() -> None:
    rng = random.Random(7)
    xs = [rng.gauss(0.0, 0.1) for _ in range(2000)]
    assert noise.mad_sigma(xs) == pytest.approx(0.1, rel=0.1)
    wild = [*xs[:-1], 50.0]
    assert noise.mad_sigma(wild) == pytest.approx(noise.mad_sigma(xs), rel=0.01)
    assert statistics.stdev(wild) > 1.0  # the variance it replaces does not
    assert noise.mad_sigma([1.0]) is None


def test_residuals_pool_sides_around_their_own_medians() -> None:
    assert noise.residuals([[1.0, 2.0, 3.0], [10.0, 11.0, 12.0]]) == [-1.0, 0.0, 1.0, -1.0, 0.0, 1.0]


def test_band_scales_with_the_runs_of_each_side() -> None:
    one = noise.difference_se(0.1, 1, 1)
    three = noise.difference_se(0.1, 3, 3)
    assert one == pytest.approx(0.1 * math.sqrt(2))
    assert three == pytest.approx(0.1 * math.sqrt(math.pi / 2) * math.sqrt(2 / 3))
    assert three < one
    assert noise.band(0.0, 0.05, 3.0) == pytest.approx(math.log1p(0.05))
    assert noise.band(0.1, 0.05, 3.0) == pytest.approx(0.3)
    assert noise.pooled_sigma([0.01, 0.02, 5.0, None]) == 0.02


@given(st.lists(st.sampled_from(["better", "same", "worse"]), max_size=30))
def test_run_lengths_are_the_lengths_of_runs_of_equal_neighbours(labels: list[str]) -> None:
    expected = [n for n in (len(list(g)) for _, g in itertools.groupby(labels)) for _ in range(n)]
    assert noise.run_lengths(labels) == expected
