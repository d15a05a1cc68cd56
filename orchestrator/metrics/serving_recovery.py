"""What a fault during a serving step did to the service, from the level's request records
(docs/serving.md, "Faults during serving: recovery figures"; the shapes are in models/serving_recovery.py).

Only counted requests of the level enter (warm-up requests are written but never counted). Times
are the records' wall clock; every figure is seconds after ``injected_at``. With the rule's
``window`` W and ``tolerance`` t:

- pre-fault band: the last W successful requests sent before the fault; their TTFT p95 (the
  largest when fewer than 20, where p95 is not shown) x (1 + t);
- first failure: the end of the first failed or aborted request that ended at or after the fault
  (a request sent before the fault and cut off by it counts);
- first success: the end of the first successful request sent at or after the end of the first
  failure;
- steady: the send time of the first request, sent at or after the fault (and, when something
  failed, at or after the first success; for a fault held for a duration — a pause, a throttle,
  a link down — at or after its revert, ``held_until``), that starts a run of W consecutive requests (by send
  time) which all succeeded and whose TTFT median is within the band;
- outage: first success - first failure;
- failed / aborted: requests that ended at or after the fault, sent before steady (all of them
  when the service never got back to steady);
- TTFT during: successful requests sent from the fault to steady (to the end when not steady);
  TTFT after: those sent from steady on.

Status: no-data when there is no pre-fault band or no counted request sent at or after the fault
(nothing could show a recovery; the figures that can still be read are kept); no-interruption when
nothing failed, every window of W requests sent while a held fault was on was steady, and the
first request that could start the steady window did;
recovered when steady was reached otherwise; not-recovered when it was not within the records.
With several faults in one level, each is measured up to the next one's injection (``until``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from orchestrator.metrics.percentiles import percentile, summarize
from orchestrator.metrics.serving import ttft_ms
from orchestrator.models.decision import RecoveryStatus
from orchestrator.models.serving_recovery import RecoverySpread, ServingRecovery, SpreadStat, SteadyRule
from orchestrator.models.serving_results import RequestRecord

BAND_P95_MIN = 20
"""The pre-fault band is the p95 from this many samples on, the largest TTFT under it."""


def pre_fault_band(
    records: Sequence[RequestRecord], injected_at: float, rule: SteadyRule
) -> tuple[int, float | None]:
    """(requests in the band, its upper edge in ms) from the last ``window`` successful counted
    requests sent before the fault; (0, None) when there is none."""
    before = sorted(
        (r for r in records if not r.warmup and r.send < injected_at and r.status == "ok"),
        key=lambda r: (r.send, r.id),
    )
    ttfts = [t for t in (ttft_ms(r) for r in before[-rule.window :]) if t is not None]
    if not ttfts:
        return 0, None
    top = percentile(ttfts, 0.95) if len(ttfts) >= BAND_P95_MIN else max(ttfts)
    assert top is not None
    return len(ttfts), top * (1.0 + rule.tolerance)


def _steady_window(window: Sequence[RequestRecord], band_ms: float) -> bool:
    if any(r.status != "ok" for r in window):
        return False
    ttfts = [t for t in (ttft_ms(r) for r in window) if t is not None]
    return bool(ttfts) and statistics.median(ttfts) <= band_ms


def _first_candidate(after: Sequence[RequestRecord], held_until: float | None) -> float | None:
    """The send time of the first request that could start a steady window."""
    return next((r.send for r in after if held_until is None or r.send >= held_until), None)


def _hit_while_held(
    after: Sequence[RequestRecord], band_ms: float | None, w: int, held_until: float | None
) -> bool:
    """Whether a window of w requests starting while the held fault was on was not steady."""
    if held_until is None or band_ms is None:
        return False
    return any(
        not _steady_window(after[i : i + w], band_ms)
        for i, r in enumerate(after)
        if r.send < held_until and i + w <= len(after)
    )


def serving_recovery(
    records: Sequence[RequestRecord],
    injected_at: float,
    *,
    level: str,
    rule: SteadyRule,
    until: float | None = None,
    held_until: float | None = None,
) -> ServingRecovery:
    """The outage and the way back of one fault injected at ``injected_at`` into ``level``.

    ``until``: the next fault's injection into the same level, when there is one; requests sent at
    or after it, and failures that ended at or after it, belong to that fault and are left out.
    ``held_until``: when a fault held for a duration was reverted: the service cannot be steady
    again while the fault is still on (a throttle's first requests pass before its queue fills).
    """
    recs = sorted(
        (
            r
            for r in records
            if not r.warmup
            and r.level == level
            and (until is None or (r.send < until and (r.status == "ok" or r.end < until)))
        ),
        key=lambda r: (r.send, r.id),
    )
    pre_n, band = pre_fault_band(recs, injected_at, rule)

    bad_ends = [r.end for r in recs if r.status != "ok" and r.end >= injected_at]
    first_failure = min(bad_ends) if bad_ends else None
    first_success: float | None = None
    if first_failure is not None:
        ok_ends = [r.end for r in recs if r.status == "ok" and r.send >= first_failure]
        first_success = min(ok_ends) if ok_ends else None

    after = [r for r in recs if r.send >= injected_at]
    steady: float | None = None
    if band is not None and (first_failure is None or first_success is not None):
        start_from = injected_at if first_success is None else first_success
        if held_until is not None:
            start_from = max(start_from, held_until)
        w = rule.window
        for i, r in enumerate(after):
            if r.send < start_from:
                continue
            if i + w > len(after):
                break
            if _steady_window(after[i : i + w], band):
                steady = r.send
                break

    def before_steady(r: RequestRecord) -> bool:
        return steady is None or r.send < steady

    hit = [r for r in recs if r.end >= injected_at and before_steady(r)]
    failed = sum(r.status == "error" for r in hit)
    aborted = sum(r.status == "aborted" for r in hit)
    during = [
        t for t in (ttft_ms(r) for r in after if r.status == "ok" and before_steady(r)) if t is not None
    ]
    after_ttft = (
        None
        if steady is None
        else summarize(
            t for t in (ttft_ms(r) for r in after if r.status == "ok" and r.send >= steady) if t is not None
        )
    )

    status: RecoveryStatus
    if band is None or not after:
        status = "no-data"
    elif steady is None:
        status = "not-recovered"
    elif (
        first_failure is None
        and steady == _first_candidate(after, held_until)
        and not _hit_while_held(after, band, rule.window, held_until)
    ):
        status = "no-interruption"
    else:
        status = "recovered"

    def since(t: float | None) -> float | None:
        return None if t is None else t - injected_at

    return ServingRecovery(
        level=level,
        rule=rule,
        pre_fault_n=pre_n,
        pre_fault_ttft_band_ms=band,
        to_first_failure_s=since(first_failure),
        to_first_success_s=since(first_success),
        to_steady_s=since(steady),
        outage_s=None if first_failure is None or first_success is None else first_success - first_failure,
        failed=failed,
        aborted=aborted,
        ttft_during_ms=summarize(during),
        ttft_after_ms=after_ttft,
        status=status,
    )


def spread_stat(values: Sequence[float | int | None]) -> SpreadStat:
    """min / median / max of the values that are not None, with their n."""
    xs = sorted(float(v) for v in values if v is not None)
    if not xs:
        return SpreadStat(n=0)
    return SpreadStat(n=len(xs), min=xs[0], median=statistics.median(xs), max=xs[-1])


def recovery_spread(results: Sequence[ServingRecovery]) -> RecoverySpread:
    """The spread of the recovery figures over the repeats of one plan fault. A figure's n counts
    the repeats that had it (a repeat that never failed has no time to first failure)."""
    return RecoverySpread(
        repeats=len(results),
        statuses=dict(sorted(Counter(r.status for r in results).items())),
        to_first_failure_s=spread_stat([r.to_first_failure_s for r in results]),
        to_first_success_s=spread_stat([r.to_first_success_s for r in results]),
        to_steady_s=spread_stat([r.to_steady_s for r in results]),
        outage_s=spread_stat([r.outage_s for r in results]),
        failed=spread_stat([r.failed for r in results]),
        aborted=spread_stat([r.aborted for r in results]),
    )
