"""Robust noise: one estimator for every band orch draws (compare, history, efficiency thresholds);
metrics/decision.py judges with it.

The spread of a sample is sigma = 1.4826 x MAD (median absolute deviation from the median): for
normal noise it equals the standard deviation, and one wild value moves it by at most one order
statistic, where it would blow up a variance. Bandwidths are compared on the log scale (a ratio
of two runs is a difference of logs), so spreads of busbw are spreads of ln busbw.

The centre of n runs is their median. Its standard error is sigma / sqrt(n) for n <= 2 (the
median of one or two values is their mean) and sqrt(pi/2) x sigma / sqrt(n) beyond (the median's
asymptotic efficiency against the mean for normal noise). A band is max(ln(1 + floor), k x se).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence

MAD_SCALE = 1.4826
"""1.4826 x MAD estimates the standard deviation of normal noise."""


def mad_sigma(values: Iterable[float]) -> float | None:
    """1.4826 x the median absolute deviation from the median; None for fewer than 2 values."""
    xs = list(values)
    if len(xs) < 2:
        return None
    centre = statistics.median(xs)
    return MAD_SCALE * statistics.median(abs(x - centre) for x in xs)


def neighbour_sigma(ds: Sequence[float]) -> float | None:
    """The spread of a smooth series from its successive differences: 1.4826 x median|d_i -
    d_(i-1)| / sqrt(2) (a slow trend cancels out); None for fewer than 3 values."""
    if len(ds) < 3:
        return None
    return MAD_SCALE * statistics.median(abs(b - a) for a, b in itertools.pairwise(ds)) / math.sqrt(2)


def log_values(values: Iterable[float]) -> list[float]:
    """ln of the positive values (a zero or negative bandwidth has no ratio)."""
    return [math.log(v) for v in values if v > 0]


def residuals(groups: Iterable[Sequence[float]]) -> list[float]:
    """Each value's distance from the median of its own group, all groups together.

    Pooling residuals rather than values lets two sides with different centres (A and B) share
    one spread: the spread is about repeats, not about the change between the sides.
    """
    out: list[float] = []
    for g in groups:
        if g:
            centre = statistics.median(g)
            out += [x - centre for x in g]
    return out


def pooled_sigma(row_sigmas: Iterable[float | None]) -> float:
    """The median of the rows' spreads (0.0 when no row has one): one noisy row cannot move it."""
    xs = [s for s in row_sigmas if s is not None]
    return statistics.median(xs) if xs else 0.0


def median_se_factor(n: int) -> float:
    """Standard error of the median of n values, in units of sigma (see the module docstring)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return (1.0 if n <= 2 else math.sqrt(math.pi / 2.0)) / math.sqrt(n)


def difference_se(sigma: float, n_a: int, n_b: int) -> float:
    """Standard error of median(B) - median(A) for n_a and n_b runs of spread sigma."""
    return sigma * math.hypot(median_se_factor(n_a), median_se_factor(n_b))


def band(se: float, floor: float, k: float) -> float:
    """Half-width of 'same' on the log scale: max(ln(1 + floor), k x se)."""
    return max(math.log1p(floor), k * se)


def run_lengths(labels: Sequence[object]) -> list[int]:
    """For each label, the length of the run of equal neighbours it belongs to.

    Over verdicts in size order, this is how many adjacent sizes hold the same verdict, what the
    "a change holds at 2 or more adjacent sizes" rule reads.
    """
    out = [0] * len(labels)
    i = 0
    while i < len(labels):
        j = i
        while j + 1 < len(labels) and labels[j + 1] == labels[i]:
            j += 1
        out[i : j + 1] = [j - i + 1] * (j - i + 1)
        i = j + 1
    return out
