"""Every percentile carries its n; p95 hides under 20 samples, p99 under 100 (one rule)."""

from __future__ import annotations

import pytest

from orchestrator.metrics.percentiles import label, median_of, min_samples, percentile, summarize


def test_the_rule_is_one_sample_beyond_the_percentile() -> None:
    assert (min_samples(0.5), min_samples(0.95), min_samples(0.99)) == (2, 20, 100)


@pytest.mark.parametrize(("n", "p95_shown", "p99_shown"), [(1, False, False), (19, False, False),
                                                           (20, True, False), (99, True, False),
                                                           (100, True, True)])  # fmt: skip
def test_percentiles_hide_below_their_n(n: int, p95_shown: bool, p99_shown: bool) -> None:
    p = summarize([float(i) for i in range(n)])
    assert p.n == n and p.p50 is not None
    assert (p.p95 is not None, p.p99 is not None) == (p95_shown, p99_shown)
    text = label(p)
    assert f"(n={n})" in text
    assert ("p95" in text, "p99" in text) == (p95_shown, p99_shown)


def test_p99_of_50_samples_would_be_the_maximum_so_it_is_hidden() -> None:
    xs = [float(i) for i in range(50)]
    assert percentile(xs, 0.99) is None
    assert percentile(xs, 0.95) == pytest.approx(46.55)  # linear interpolation, as numpy's default


def test_label_of_nothing_still_says_n() -> None:
    assert label(summarize([])) == "- (n=0)"


def test_median_of_leaves_out_the_missing_figures() -> None:
    assert median_of([3.0, None, 1.0, 2.0, None]) == 2.0
    assert median_of(x for x in (4.0, None, 1.0)) == 2.5
    assert median_of([None, None]) is None and median_of([]) is None
