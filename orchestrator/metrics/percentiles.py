"""Percentiles with their n: the one rule for when a percentile may be shown.

A percentile q says something only when at least one sample lies beyond it, that is when
n >= 1 / (1 - q): p95 needs 20 samples, p99 needs 100 (p99 of 50 samples is the maximum).
Under that, the percentile is None (hidden) and n still says how many samples there were.
Percentiles interpolate linearly between order statistics (numpy's default, "linear").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from orchestrator.metrics.noise import log_values, mad_sigma
from orchestrator.models.results import Percentiles


def min_samples(q: float) -> int:
    """The fewest samples for which percentile q (0 < q < 1) is shown."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must lie in (0, 1), got {q}")
    return max(2, math.ceil(round(1.0 / (1.0 - q), 9)))


def percentile(values: Iterable[float], q: float) -> float | None:
    """Percentile q of values (linear interpolation), or None when there are too few to show it."""
    xs = sorted(values)
    if len(xs) < min_samples(q):
        return None
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def median_of(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None (a run or repeat without the figure is left
    out); None when none has it."""
    got = [x for x in values if x is not None]
    return statistics.median(got) if got else None


def summarize(values: Iterable[float]) -> Percentiles:
    """n, mean, p50, p95 and p99 of values, each percentile hidden (None) below its n."""
    xs = list(values)
    return Percentiles(
        n=len(xs),
        mean=statistics.fmean(xs) if xs else None,
        p50=statistics.median(xs) if xs else None,
        p95=percentile(xs, 0.95),
        p99=percentile(xs, 0.99),
        log_sigma=mad_sigma(log_values(xs)),
    )


def label(p: Percentiles, unit: str = "", fmt: str = ".4g") -> str:
    """'p50 12.3 us, p95 14.1 us (n=20)': the shown percentiles, always with their n."""
    u = f" {unit}" if unit else ""
    shown = (("p50", p.p50), ("p95", p.p95), ("p99", p.p99))
    parts = [f"{name} {format(v, fmt)}{u}" for name, v in shown if v is not None]
    return (", ".join(parts) or "-") + f" (n={p.n})"
