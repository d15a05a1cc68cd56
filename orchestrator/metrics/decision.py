"""The one decision module: every "better / same / worse" of B against A (docs/results.md, "Noise").

Collective compare (report/compare.py), serving compare (metrics/serving.py), a result from
elsewhere (report/compare_foreign.py) and a migration's A/B (migrate/ab.py) judge here and get a
FigureChange (models/decision.py) back; they gather the figures and render what is decided.

Band. Figures compare on the log scale (a ratio of two runs is a difference of logs). Each side's
centre is the median of its runs. The spread is the robust one of metrics/noise.py: sigma = 1.4826
x MAD of every run's distance from its own side's median, all sides pooled; at least each run's
own uncertainty where one is known (a p99's order statistics, a run's drift). The band is max(ln(1
+ floor), k x se), se the standard error of median(B) - median(A); floor 5%, k 3. An A-against-A
control arm widens it to at least the gap the control shows: a change smaller than what A against
A shows is not a change.

Rules.
- A figure is better or worse only beyond its band (a change exactly at the band is "same").
- Collectives: a change stands only where it holds, in the same direction, at MIN_ADJACENT (2) or
  more adjacent message sizes; a lone size beyond the band is reported, not flagged (as in AMD's
  RCCL regression detector). Over a series, worse wins over better.
- Recovery times (lower is better) compare medians in seconds, band max(k x se, floor x A's median).
  A migration's serving faults (outage, time to steady) go by the same rule with FAULT_FLOOR 25%
  (recovery_figure_change), a repeat where nothing failed counting as 0 s.
- Serving, the interactive rule: a p99 latency worse beyond its band with throughput better is
  "worse for interactive": more throughput does not buy back a worse p99. A worse p99 or a worse
  throughput is "worse"; better without anything worse is "better"; else "same"; "n/a" when the
  throughput or every p99 is missing. Batch service (a migration's `interactive: false`) goes by
  throughput, and by the p99s only when throughput is the same.

Thresholds (a figure against a limit, not B against A; metrics/verdict.py and runs/isolate.py
gather the figures and word the reasons):
- an absolute limit (a plan's busbw threshold, a published gate): fails below it (below);
- a share of a reference (a baseline's min_fraction, an isolation group's min_efficiency of the
  median single): fails below share x reference (below_share);
- a limit with a noise band (scaling efficiency): fails only below limit / (1 + band)
  (beyond_band_below); under the limit but within the band is not judged;
- one figure among its kind (an isolation single against the median single): fails below
  median x exp(-h), h = max(ln(1 / (1 - tolerance)), K x 1.4826 x MAD of the kind's log figures)
  (single_ratio, then below_share): the tolerance is the least band, the kind's own noise widens it;
- one node against its kind's fleet baseline (certs/fleet.py): fails below median x exp(-h),
  h = max(ln(1 + floor), k x sigma), sigma the robust spread of the kind's certified nodes' log
  figures (fleet_limit, then below): named even when it passes every fixed threshold.

Output quality (quality_verdict; metrics/quality.py gathers the figures, docs/quality.md): B's
greedy outputs against A's fail when
- no prompt was answered on both sides, or B left more prompts unanswered than A against A did;
- the exact-match share is below min_exact_match (below);
- the exact-match share is below min_exact_match_of_floor x the floor's, the floor the lowest
  exact-match share of the A-against-A comparisons (A run twice; A at concurrency 1 against N);
  without a floor the figure is blind, and B is not accepted on a blind figure;
- with tasks, B's accuracy is below A's beyond B's Wilson interval: high(B) < accuracy(A) -
  max_accuracy_drop (0 when not given); a side without an accuracy fails the gate.
|Δ logprob| and the first divergences are reported beside the verdict, not thresholds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from orchestrator.metrics import noise
from orchestrator.models.decision import (
    WORSE,
    Change,
    Direction,
    FigureChange,
    InteractiveVerdict,
    QualityJudgement,
)
from orchestrator.models.quality import Accuracy, OutputFigures
from orchestrator.models.quality_gate import QualityGate

FLOOR = 0.05
"""Below a 5% change nothing is called better or worse."""
K = 3.0
"""A change must exceed K standard errors of the difference."""
MIN_ADJACENT = 2
"""A collective's change is flagged only when it holds at this many adjacent sizes."""


def direction(d: float, half_width: float) -> Direction:
    """better beyond +half_width, worse beyond -half_width, else same (d: a log ratio, higher better)."""
    return "better" if d > half_width else "worse" if d < -half_width else "same"


def is_worse(verdict: str) -> bool:
    """Whether a verdict or a row's word says B is worse ("worse", "worse for interactive")."""
    return verdict in WORSE


def _centre(values: Iterable[float]) -> float | None:
    """The median of the positive values on the log scale: the middle value itself for an odd count
    (a stated figure stays as stated), the geometric mean of the two middle ones for an even count."""
    xs = sorted(v for v in values if v > 0)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else math.sqrt(xs[mid - 1] * xs[mid])


def figure_change(
    figure: str | None,
    a: Iterable[float],
    b: Iterable[float],
    *,
    higher_is_better: bool = True,
    control: Iterable[float] = (),
    run_se: Iterable[float] = (),
    spread_of: tuple[bool, bool] = (True, True),
    n_a: int | None = None,
    n_b: int | None = None,
    floor: float = FLOOR,
    k: float = K,
    note: str | None = None,
) -> FigureChange:
    """B's figures against A's (one per run; zero or negative ones have no ratio and are left out).

    control: the A-against-A arm (its runs join the spread; the band is at least |ln(median(A') /
    median(A))|). run_se: each run's own se of the log figure; the spread is at least their root
    mean square. spread_of: which sides' repeats give the spread (a stated figure from elsewhere has
    none of its own: it counts as one run). n_a, n_b: the samples named beside the figure (None: not
    stated). A side without a positive figure, or a note (why the figure is not judged), gives
    change "n/a" with the note.
    """
    a, b = list(a), list(b)
    la, lb, lc = noise.log_values(a), noise.log_values(b), noise.log_values(control)
    ca, cb = _centre(a), _centre(b)
    if note is not None or ca is None or cb is None:
        return FigureChange(
            figure=figure, a=ca, b=cb, ratio=None, band=None, change="n/a", n_a=n_a, n_b=n_b, note=note
        )
    groups = [g for g, used in ((la, spread_of[0]), (lb, spread_of[1])) if used] + [lc]
    sigma = noise.mad_sigma(noise.residuals(groups)) or 0.0
    se = list(run_se)
    single = math.sqrt(statistics.fmean(x * x for x in se)) if se else 0.0
    half = noise.band(noise.difference_se(max(sigma, single), len(la), len(lb)), floor, k)
    if lc:
        half = max(half, abs(statistics.median(lc) - statistics.median(la)))
    d = statistics.median(lb) - statistics.median(la)
    return FigureChange(
        figure=figure, a=ca, b=cb, ratio=cb / ca, band=math.expm1(half),
        change=direction(d if higher_is_better else -d, half), n_a=n_a, n_b=n_b,
    )  # fmt: skip


SeriesKey = tuple[str, str, int]
"""(step, collective, message size): a series is one step's collective, its points the sizes."""


def series_changes(
    a: Mapping[SeriesKey, Sequence[float]],
    b: Mapping[SeriesKey, Sequence[float]],
    *,
    repeated: bool,
    floor: float = FLOOR,
    k: float = K,
) -> tuple[dict[SeriesKey, FigureChange], float]:
    """Every point of A's and B's series (busbw, higher is better; each side's figure over its
    runs), B against A, and the pooled spread (0.0 when no point has one).

    Spread, repeated (a side has more than one run): per point 1.4826 x MAD of the log figures
    around each side's own median (sides of one run add nothing), at least the median of that over
    all points (one wild repeat widens its own point only; a point whose few runs agreed by chance
    does not get a band of nothing); se = sigma x the standard error factor of the two medians.
    One run a side: per series, the spread of d = ln(B/A) from one size to the next, 1.4826 x
    median|d_i - d_(i-1)| / sqrt(2), at least the median of that over all series; se = sigma.
    Band max(ln(1 + floor), k x se). A point without a positive figure on a side is n/a; the
    adjacent-sizes rule (adjacent) comes after.
    """
    keys = sorted(set(a) | set(b), key=lambda t: (t[0], t[1], t[2]))
    la = {key: noise.log_values(a.get(key, ())) for key in keys}
    lb = {key: noise.log_values(b.get(key, ())) for key in keys}
    d = {key: statistics.median(lb[key]) - statistics.median(la[key]) for key in keys if la[key] and lb[key]}
    sigma: dict[SeriesKey, float] = {}
    if repeated:
        for key in d:
            sig = noise.mad_sigma(noise.residuals([g for g in (la[key], lb[key]) if len(g) >= 2]))
            if sig is not None:
                sigma[key] = sig
        pooled = noise.pooled_sigma(sigma.values())
    else:
        per_series: dict[tuple[str, str], float] = {}
        for series in {key[:2] for key in d}:
            sig = noise.neighbour_sigma([d[key] for key in keys if key in d and key[:2] == series])
            if sig is not None:
                per_series[series] = sig
        pooled = noise.pooled_sigma(per_series.values())
        sigma = {key: per_series[key[:2]] for key in d if key[:2] in per_series}
    out: dict[SeriesKey, FigureChange] = {}
    for key in keys:
        ca, cb = _centre(a.get(key, ())), _centre(b.get(key, ()))
        n_a, n_b = len(la[key]), len(lb[key])
        if key not in d or ca is None or cb is None:
            out[key] = FigureChange(a=ca, b=cb, ratio=None, band=None, change="n/a", n_a=n_a, n_b=n_b)
            continue
        s = max(sigma.get(key, 0.0), pooled)
        half = noise.band(noise.difference_se(s, n_a, n_b) if repeated else s, floor, k)
        out[key] = FigureChange(
            a=ca, b=cb, ratio=cb / ca, band=math.expm1(half), change=direction(d[key], half), n_a=n_a, n_b=n_b
        )
    return out, pooled


def control_gap(a: Iterable[float], control: Iterable[float]) -> float | None:
    """ln(median(A') / median(A)): what A against A shows (None without a control arm)."""
    la, lc = noise.log_values(a), noise.log_values(control)
    return statistics.median(lc) - statistics.median(la) if la and lc else None


def judge(
    a: float,
    b: float,
    band: float,
    *,
    higher_is_better: bool = True,
    figure: str | None = None,
    n_a: int | None = None,
    n_b: int | None = None,
) -> FigureChange:
    """One figure of B against A, given the band (half-width on the log scale, >= 0).

    Raises ValueError when a figure is not positive (a ratio needs both) or the band is negative.
    """
    if a <= 0 or b <= 0:
        raise ValueError(f"figures must be positive to compare (A={a}, B={b})")
    if band < 0:
        raise ValueError(f"the band must be >= 0, got {band}")
    d = math.log(b) - math.log(a)
    return FigureChange(
        figure=figure, a=a, b=b, ratio=b / a, band=math.expm1(band),
        change=direction(d if higher_is_better else -d, band), n_a=n_a, n_b=n_b,
    )  # fmt: skip


def adjacent(changes: Sequence[str], min_adjacent: int = MIN_ADJACENT) -> list[bool]:
    """For each change, in size order: whether it stands, i.e. is better or worse and holds in the
    same direction at min_adjacent or more adjacent sizes (a word other than better / worse, such
    as same, n/a or missing, breaks the run)."""
    return [
        c in ("better", "worse") and n >= min_adjacent
        for c, n in zip(changes, noise.run_lengths(changes), strict=True)
    ]


def overall(directions: Iterable[str]) -> Direction:
    """One direction for a series: worse wins over better; same when neither is there."""
    found = set(directions)
    return "worse" if "worse" in found else "better" if "better" in found else "same"


def time_change(
    a: Sequence[float], b: Sequence[float], *, floor: float = FLOOR, k: float = K
) -> tuple[float, Direction]:
    """Times in seconds (lower is better), each side's repeats: the band in seconds, max(k x se,
    floor x median(A)) with se from the pooled robust spread, and the direction of median(B)
    against median(A). Raises ValueError when a side is empty."""
    if not a or not b:
        raise ValueError("each side needs at least one time")
    ma, mb = statistics.median(a), statistics.median(b)
    sigma = noise.mad_sigma(noise.residuals([g for g in (a, b) if len(g) >= 2])) or 0.0
    band = max(k * noise.difference_se(sigma, len(a), len(b)), floor * ma)
    return band, "worse" if mb - ma > band else "better" if ma - mb > band else "same"


FAULT_FLOOR = 0.25
"""A migration's serving fault: below a change of 25% of A's outage or time to steady nothing is
worse (one engine restart varies by seconds from one kill to the next)."""


def recovery_figure_change(
    figure: str, a: Sequence[float], b: Sequence[float], *, floor: float = FAULT_FLOOR, k: float = K
) -> FigureChange:
    """A serving fault's outage or time to steady (seconds, lower is better; 0.0 for a repeat where
    nothing failed), B's repeats against A's by time_change (medians, band max(k x se, floor x A's
    median) in seconds), as a FigureChange: a and b the medians, band relative to A's median (None,
    with a note giving it in seconds, when A's is 0: then any outage of B beyond its spread is
    worse). n/a when a side has no repeat measured."""
    a, b = list(a), list(b)
    n_a, n_b = len(a), len(b)
    if not a or not b:
        return FigureChange(figure=figure, a=None, b=None, ratio=None, band=None, change="n/a",
                            n_a=n_a, n_b=n_b, note="not measured on both sides")  # fmt: skip
    band, word = time_change(a, b, floor=floor, k=k)
    ma, mb = statistics.median(a), statistics.median(b)
    return FigureChange(
        figure=figure, a=ma, b=mb, ratio=mb / ma if ma > 0 else None, band=band / ma if ma > 0 else None,
        change=word, n_a=n_a, n_b=n_b, note=None if ma > 0 else f"A had none; band +-{band:.3g} s",
    )  # fmt: skip


def blind(c: FigureChange, detect: float | None) -> bool:
    """Whether a figure cannot show the smallest change the plan must detect (a relative change,
    e.g. 0.1): its band is wider than that, or it was not judged (n/a). A blind figure is never
    "same", and B is not accepted on it. False when the plan names no such change."""
    return detect is not None and (c.band is None or c.band > detect)


def band_text(band: float, places: int = 1) -> str:
    """A band (FigureChange.band: the upper edge of B/A - 1; the band is symmetric on the log
    scale) as the range of B/A - 1 it admits: 0.25 -> `-20.0%..+25.0%` (B/A = 1/1.25 lies as far
    from 1 as 1.25). Written as +-25 %, a change of -22 % would read as within it."""
    return f"{1 / (1 + band) - 1:+.{places}%}..{band:+.{places}%}"


def change_text(c: FigureChange, places: int = 1) -> str:
    """A change with its band and the n behind each side: `+12.0% (band -4.8%..+5.0%, n=100/100)`
    (? for an n not stated)."""
    n = "/".join("?" if x is None else str(x) for x in (c.n_a, c.n_b))
    if c.ratio is None or c.band is None:
        return f"n/a (n={n})"
    return f"{c.ratio - 1:+.{places}%} (band {band_text(c.band, places)}, n={n})"


def describe(c: FigureChange) -> str:
    """A judged figure in a reason: e.g. `TTFT p99 +12.0% (band -4.8%..+5.0%, n=100/100)`."""
    return f"{c.figure} {change_text(c)}"


def serving_verdict(
    throughput: FigureChange, latency: Sequence[FigureChange], *, interactive: bool = True
) -> tuple[InteractiveVerdict, str]:
    """A serving level's verdict and its reason from the throughput change (higher is better) and
    the p99 latency changes (lower is better), each already judged: the interactive rule, or with
    interactive=False the batch rule (see the module docstring)."""
    judged = [c for c in latency if c.change != "n/a"]
    if throughput.change == "n/a" or not judged:
        whys = "; ".join(c.note for c in [throughput, *latency] if c.note)
        return "n/a", f"throughput or every p99 missing on a side ({whys or 'p99 needs n >= 100'})"
    worse = [c for c in judged if c.change == "worse"]
    better = [c for c in judged if c.change == "better"]
    t: Change = throughput.change
    if not interactive:
        if t != "same":
            return t, f"{describe(throughput)} (batch service goes by throughput)"
        p: Direction = "worse" if worse else "better" if better else "same"
        moved = worse or better
        return p, f"{describe(throughput)}; " + (
            "; ".join(map(describe, moved)) if moved else "every p99 compared within its band"
        )
    if worse and t == "better":
        return "worse for interactive", (
            f"{describe(throughput)} but {'; '.join(map(describe, worse))}: "
            "more throughput does not buy back a worse p99"
        )
    if worse or t == "worse":
        return "worse", "; ".join(describe(c) for c in [throughput, *worse] if c.change == "worse")
    if better or t == "better":
        return "better", "; ".join(describe(c) for c in [throughput, *better] if c.change == "better")
    return "same", f"{describe(throughput)}; every p99 compared within its band"


# --- thresholds ---------------------------------------------------------------------------------


def below(value: float, limit: float) -> bool:
    """An absolute limit: the value fails strictly below it."""
    return value < limit


def above(value: float, limit: float) -> bool:
    """An absolute ceiling (a latency, an error count): the value fails strictly above it."""
    return value > limit


def below_share(value: float, reference: float, share: float) -> bool:
    """A share of a reference: the value fails strictly below share x reference."""
    return value < share * reference


def beyond_band_below(value: float, limit: float, band: float) -> bool:
    """A limit with a relative noise band (e.g. 0.12 = +-12%): the value fails only beyond it,
    strictly below limit / (1 + band)."""
    return value < limit / (1.0 + band)


def single_ratio(figures: Iterable[float], tolerance: float, k: float = K) -> float:
    """The least share of its kind's median a single figure must reach: min(1 - tolerance,
    exp(-k x sigma)), sigma the robust spread (1.4826 x MAD) of the kind's log figures (0 for fewer
    than 2). The tolerance is the least band; a noisy kind widens it (module docstring)."""
    sigma = noise.mad_sigma(noise.log_values(figures)) or 0.0
    return min(1.0 - tolerance, math.exp(-k * sigma))


def fleet_limit(median: float, sigma: float, *, k: float = K, floor: float = FLOOR) -> float:
    """The least figure a node may show against its kind's fleet baseline: median x exp(-h),
    h = max(ln(1 + floor), k x sigma) (noise.band), sigma = 1.4826 x MAD of the kind's log figures."""
    return median * math.exp(-noise.band(sigma, floor, k))


# --- output quality -------------------------------------------------------------------------------


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _floor_words(floor: Sequence[OutputFigures]) -> str:
    return ", ".join(f"{f.name} {_share(f.exact_match)} (n={f.n})" for f in floor) or "none"


def accuracy_worse(a: Accuracy, b: Accuracy, max_drop: float = 0.0) -> bool:
    """Whether B's accuracy is below A's beyond B's Wilson interval: high(B) < accuracy(A) - max_drop.
    False when a side has no accuracy (the caller says it was not judged)."""
    if a.accuracy is None or b.high is None:
        return False
    return below(b.high, a.accuracy - max_drop)


def quality_verdict(
    gate: QualityGate,
    b_vs_a: OutputFigures,
    floor: Sequence[OutputFigures] = (),
    *,
    accuracy_a: Accuracy | None = None,
    accuracy_b: Accuracy | None = None,
    prompts_sha256: str | None = None,
) -> QualityJudgement:
    """The output-quality gate's verdict (module docstring, "Output quality"), each reason with
    its figures."""
    reasons: list[str] = []
    notes: list[str] = []
    em = b_vs_a.exact_match
    if b_vs_a.n == 0 or em is None:
        reasons.append(f"no prompt answered on both sides ({b_vs_a.missing} missing)")
    missing_floor = max((f.missing for f in floor), default=0)
    if b_vs_a.missing > missing_floor:
        reasons.append(f"{b_vs_a.missing} prompt(s) without an answer on a side, A against A {missing_floor}")
    if em is not None and gate.min_exact_match is not None and below(em, gate.min_exact_match):
        reasons.append(
            f"exact match {_share(em)} (n={b_vs_a.n}) below min_exact_match {_share(gate.min_exact_match)}"
        )
    if gate.min_exact_match_of_floor is not None:
        floors = [f.exact_match for f in floor if f.exact_match is not None]
        if not floors:
            reasons.append("exact match relative to the floor is blind: no A-against-A floor was measured")
        elif em is not None and below_share(em, min(floors), gate.min_exact_match_of_floor):
            reasons.append(
                f"exact match {_share(em)} (n={b_vs_a.n}) below {gate.min_exact_match_of_floor:g} x the "
                f"A-against-A floor {_share(min(floors))} ({_floor_words(floor)})"
            )
    if gate.tasks is not None:
        if accuracy_a is None or accuracy_b is None or accuracy_a.n == 0 or accuracy_b.n == 0:
            reasons.append("accuracy not measured on both sides: the gate cannot accept B")
        else:
            drop = gate.max_accuracy_drop or 0.0
            if accuracy_worse(accuracy_a, accuracy_b, drop):
                reasons.append(
                    f"accuracy {_share(accuracy_b.accuracy)} (95% CI {_share(accuracy_b.low)}-"
                    f"{_share(accuracy_b.high)}, n={accuracy_b.n}) below A's {_share(accuracy_a.accuracy)} "
                    f"(n={accuracy_a.n})" + (f" minus max_accuracy_drop {_share(drop)}" if drop else "")
                )
    if b_vs_a.logprob_pairs == 0:
        notes.append(f"no logprobs on both sides: divergence counted in {b_vs_a.unit}, no |Δ logprob|")
    return QualityJudgement(
        passed=not reasons,
        reasons=reasons,
        notes=notes,
        b_vs_a=b_vs_a,
        floor=list(floor),
        accuracy_a=accuracy_a,
        accuracy_b=accuracy_b,
        prompts_sha256=prompts_sha256,
    )


def capacity_change(
    a: float, b: float, width_a: float, width_b: float, *, floor: float = FLOOR, n_a: int, n_b: int
) -> FigureChange:
    """B's capacity at SLO against A's (higher is better). Each search is uncertain by its width:
    its precision (the final bracket) plus the spread between its repeats (requests/s); the band
    is max(floor, (width_a + width_b) / a), relative to A. n: the repeats behind each side."""
    band = max(math.log1p(floor), math.log1p((width_a + width_b) / a)) if a > 0 else math.log1p(floor)
    return judge(a, b, band, figure="capacity at SLO (req/s)", n_a=n_a, n_b=n_b)


def cost_change(a: float, b: float, width_a: float, width_b: float, *, floor: float = FLOOR) -> FigureChange:
    """B's cost per 1M output tokens at its capacity against A's (lower is better): the cost rests on
    the throughput at the capacity rate, as uncertain as the capacity, so the band is the relative
    widths of both searches (capacity_change's), at least floor."""
    band = max(math.log1p(floor), math.log1p(width_a + width_b))
    return judge(a, b, band, higher_is_better=False, figure="cost per 1M output tokens at capacity")
