"""Capacity search: the highest Poisson rate whose SLO attainment stays at or above a target.

Pure logic, fed with probe results (runs/capacity.py drives the probes through the load
generator). docs/serving.md, "Capacity search", states the rules:

- Bracket, then bisect. The first probe is min_rate: if it misses the target, the capacity is
  below the range (status below_min). Then max_rate: if it meets it, the capacity is at least
  max_rate (at_least_max). Otherwise the bracket [lo, hi) = [min_rate, max_rate) is halved at its
  midpoint until hi - lo <= precision, so a repeat runs at most probe_bound() probes:
  2 + ceil(log2((max_rate - min_rate) / precision)). The capacity is lo, ± precision.
- A probe meets the target when its SLO attainment (metrics/serving.py's share of counted
  requests that succeeded and met every SLO) is >= target over all its planned requests.
- Early stop: once more counted requests have missed than (1 - target) x planned, attainment can
  no longer reach the target; the probe is stopped and counts as missed.
- Generator limit: a probe is limited by the load generator, not the engine, when the client's
  in-flight bound refused a request, or when the p95 of send - scheduled over its counted
  requests exceeds max(LATE_FLOOR_S, one mean gap 1/rate). The search then stops and no capacity
  is reported: the figure would measure the client.
- Repeats: the search runs `repeats` times on seeds seed, seed + 1, ...; the capacity is the
  median of the repeats' capacities and the spread their range. Any repeat that did not find a
  capacity (generator-limited, out of range, incomplete) means none is reported, with its reason.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from orchestrator.metrics.percentiles import percentile
from orchestrator.metrics.serving import met_every_slo, summarize_level
from orchestrator.models.results import Percentiles
from orchestrator.models.serving import CapacitySearch, ServingSlos
from orchestrator.models.serving_results import (
    IN_FLIGHT_BOUND_ERROR,
    CapacityProbe,
    CapacityRepeat,
    CapacityResult,
    RequestRecord,
    SearchStatus,
)

LATE_FLOOR_S = 0.02
"""The generator's lateness (send - scheduled) that is always tolerated: thread start-up and
scheduling on a loaded client, well under any TTFT SLO a search would judge."""


def probe_bound(search: CapacitySearch) -> int:
    """The most probes one repeat runs: 2 + ceil(log2((max_rate - min_rate) / precision)), and 2
    when the range is already within the precision."""
    ratio = (search.max_rate - search.min_rate) / search.precision
    return 2 + (math.ceil(math.log2(ratio) - 1e-9) if ratio > 1 else 0)


def missed_allowance(planned: int, target: float) -> float:
    """How many of `planned` counted requests may miss while attainment can still reach target."""
    return planned * (1.0 - target) + 1e-9


class ProbeTally:
    """Counts a probe's counted records as they end; `clearly_fails` once attainment can no
    longer reach the target (the early-stop rule). Not thread-safe: the caller serialises feed()."""

    def __init__(self, planned: int, target: float, slos: ServingSlos) -> None:
        self.planned, self.target, self.slos = planned, target, slos
        self.missed = 0

    def feed(self, rec: RequestRecord) -> None:
        if not rec.warmup and not met_every_slo(rec, self.slos):
            self.missed += 1

    @property
    def clearly_fails(self) -> bool:
        return self.missed > missed_allowance(self.planned, self.target)


def generator_limit(
    records: Iterable[RequestRecord], rate: float, *, floor_s: float = LATE_FLOOR_S
) -> tuple[float | None, str | None]:
    """The p95 of send - scheduled (ms) over the counted records, and why the load generator was
    the limit (None when it was not); floor_s: the lateness always tolerated. Raises nothing."""
    counted = [r for r in records if not r.warmup]
    bounded = sum(r.error == IN_FLIGHT_BOUND_ERROR for r in counted)
    late = [r.send - r.scheduled for r in counted if r.scheduled is not None]
    p95 = percentile(late, 0.95) if late else None
    if p95 is None and late:
        p95 = max(late)  # too few for a p95 (an early stop): the worst one
    lateness_ms = None if p95 is None else round(p95 * 1000, 3)
    if bounded:
        return lateness_ms, (
            f"the client's in-flight bound (load.max_in_flight) refused {bounded} of {len(counted)} "
            "requests: the generator, not the engine, limited the load"
        )
    if counted and not late:
        return lateness_ms, "the records carry no scheduled send times: the generator's lag is unknown"
    allowed = max(floor_s, 1.0 / rate)
    if p95 is not None and p95 > allowed:
        return lateness_ms, (
            f"the load generator sent late: p95 of send - scheduled {p95 * 1000:.1f} ms > "
            f"{allowed * 1000:.1f} ms (one mean gap at {rate:g}/s, at least {floor_s * 1000:g} ms)"
        )
    return lateness_ms, None


def judge_probe(
    records: Iterable[RequestRecord],
    *,
    rate: float,
    seed: int,
    planned: int,
    target: float,
    slos: ServingSlos,
    stopped_early: bool,
    path: str | None = None,
    late_floor_s: float = LATE_FLOOR_S,
) -> CapacityProbe:
    """One probe's result from its records: attainment, whether it met the target over its planned
    count, the generator's lag, and its figures. Raises nothing."""
    counted = [r for r in records if not r.warmup]
    good = sum(met_every_slo(r, slos) for r in counted)
    summary = summarize_level(counted, slos) if counted else None
    lateness, limit = generator_limit(counted, rate, floor_s=late_floor_s)
    full = len(counted) >= planned
    met = full and not stopped_early and summary is not None and (summary.slo_attainment or 0.0) >= target
    return CapacityProbe(
        rate=rate, seed=seed, records=path, planned=planned, n=len(counted), good=good,
        attainment=None if summary is None else summary.slo_attainment, met=met, stopped_early=stopped_early,
        lateness_p95_ms=lateness, generator_limit=limit, summary=summary,
    )  # fmt: skip


class Bisection:
    """One repeat's state: next_rate() gives the rate to probe (None when done), feed() takes its
    result. Raises ValueError when fed a probe of another rate or after the end."""

    def __init__(self, search: CapacitySearch, repeat: int = 0) -> None:
        self.search, self.repeat = search, repeat
        self.probes: list[CapacityProbe] = []
        self.lo: float | None = None  # highest rate that met the target
        self.hi: float | None = None  # lowest rate that missed it
        self.status: SearchStatus | None = None
        self.reason = ""

    def next_rate(self) -> float | None:
        s = self.search
        if self.status is not None:
            return None
        if self.lo is None:
            return s.min_rate
        if self.hi is None:
            return s.max_rate
        return (self.lo + self.hi) / 2

    def feed(self, probe: CapacityProbe) -> None:
        rate = self.next_rate()
        if rate is None or probe.rate != rate:
            want = "none" if rate is None else f"{rate:g}/s"
            raise ValueError(f"probe at {probe.rate:g}/s fed, {want} expected")
        self.probes.append(probe)
        s = self.search
        at = f"{probe.rate:g}/s"
        if probe.generator_limit is not None:
            self._end("generator_limited", f"refused at {at}: {probe.generator_limit}")
        elif not probe.met and probe.n < probe.planned and not probe.stopped_early:
            self._end("incomplete", f"the probe at {at} ended after {probe.n} of {probe.planned} requests")
        elif probe.met:
            self.lo = probe.rate
            if probe.rate == s.max_rate:
                self._end("at_least_max", f"max_rate {at} met the target: the capacity is at least {at}")
        else:
            self.hi = probe.rate
            if probe.rate == s.min_rate:
                self._end("below_min", f"min_rate {at} missed the target: the capacity is below {at}")
        closed = self.lo is not None and self.hi is not None and self.hi - self.lo <= s.precision * (1 + 1e-9)
        if self.status is None and closed:
            self._end("found", f"{self.lo:g}/s met the target, {self.hi:g}/s missed it")

    def _end(self, status: SearchStatus, reason: str) -> None:
        self.status, self.reason = status, reason

    def result(self) -> CapacityRepeat:
        """The repeat as it stands (incomplete when it did not end)."""
        status = self.status or "incomplete"
        reason = self.reason or f"stopped after {len(self.probes)} probes, before the bracket closed"
        capacity = self.lo if status in ("found", "at_least_max") else None
        return CapacityRepeat(repeat=self.repeat, status=status, capacity=capacity, upper=self.hi,
                              probes=list(self.probes), reason=reason)  # fmt: skip


def combine(search: CapacitySearch, repeats: list[CapacityRepeat]) -> CapacityResult:
    """The step's capacity from its repeats: their median ± precision and their spread, or none
    with the reason (the first repeat that found none, generator limits first)."""
    bound = probe_bound(search)
    out = CapacityResult(search=search, probe_bound=bound, repeats=repeats)
    if len(repeats) < search.repeats:
        out.refused = f"{len(repeats)} of {search.repeats} repeats ran"
        return out
    order = ("generator_limited", "incomplete", "below_min", "at_least_max")
    for status in order:
        bad = [r for r in repeats if r.status == status]
        if bad:
            out.refused = f"repeat {bad[0].repeat}: {bad[0].reason}"
            return out
    caps = [r.capacity for r in repeats if r.capacity is not None]
    out.capacity = statistics.median(caps)
    out.spread = max(caps) - min(caps)
    return out


def _pcts(p: Percentiles) -> str:
    """'p50/p95/p99 ms (n=N)', '-' for a percentile not shown."""
    one = ["-" if v is None else f"{v:.3g}" for v in (p.p50, p.p95, p.p99)]
    return f"{'/'.join(one)} ms (n={p.n})"


def capacity_rows(res: CapacityResult) -> list[list[str]]:
    """One row per repeat, then the capacity: [what, capacity, probes, attainment, TTFT, E2E,
    status and reason]; the report's table and the terminal's lines both show these."""
    s, rows = res.search, []
    for rep in res.repeats:
        at = next((p for p in rep.probes if rep.capacity is not None and p.rate == rep.capacity), None)
        cap = "-" if rep.capacity is None else f"{rep.capacity:.4g} ± {s.precision:g} req/s"
        att = "-" if at is None or at.attainment is None else f"{at.attainment:.1%} of n={at.n}"
        ttft = "-" if at is None or at.summary is None else _pcts(at.summary.ttft_ms)
        e2e = "-" if at is None or at.summary is None else _pcts(at.summary.e2e_ms)
        rows.append([f"repeat {rep.repeat}", cap, f"{len(rep.probes)} of at most {res.probe_bound}", att,
                     ttft, e2e, f"{rep.status}: {rep.reason}"])  # fmt: skip
    if res.capacity is not None and res.spread is not None:
        head = f"{res.capacity:.4g} ± {s.precision:g} req/s"
        verdict = f"median of {len(res.repeats)} repeats, spread {res.spread:.4g} req/s"
    else:
        head, verdict = "not reported", res.refused or "-"
    target = f"attainment >= {s.target_attainment:.1%} in {s.min_rate:g}..{s.max_rate:g} req/s"
    rows.append(["capacity", head, f"at most {res.probe_bound} per repeat", target, "", "", verdict])
    return rows


CAPACITY_HEAD = ["search", "capacity", "probes", "SLO attainment at capacity", "TTFT p50/p95/p99",
                 "E2E p50/p95/p99", "status"]  # fmt: skip
