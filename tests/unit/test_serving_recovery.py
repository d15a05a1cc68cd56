"""Recovery of a serving step from a fault, from request records built here (orch's own records):
the pre-fault band, first failure, first success, steady state, the counts and the spread over
repeats (metrics/serving_recovery.py, docs/serving.md "Faults during serving")."""

from __future__ import annotations

import pytest

from orchestrator.metrics.serving_recovery import (
    pre_fault_band,
    recovery_spread,
    serving_recovery,
    spread_stat,
)
from orchestrator.models.serving_recovery import ServingRecovery, SteadyRule
from orchestrator.models.serving_results import RequestRecord, RequestStatus

RULE = SteadyRule()  # window 20, tolerance 0.5
T0 = 100.0
FAULT = 104.0  # request 40 is sent at the fault


def rec(
    i: int,
    *,
    ttft: float = 0.1,
    status: RequestStatus = "ok",
    send: float | None = None,
    end: float | None = None,
    level: str = "c4",
    warmup: bool = False,
) -> RequestRecord:
    """Request i, sent at T0 + 0.1 i (or ``send``); ok ones stream 3 tokens after ``ttft`` and end
    0.15 s after the first; failed ones end 0.01 s after the send (or at ``end``)."""
    s = T0 + 0.1 * i if send is None else send
    if status != "ok":
        return RequestRecord(id=i, level=level, warmup=warmup, server="node1", send=s,
                             end=s + 0.01 if end is None else end, status=status, input_tokens=8,
                             output_tokens=0, requested_output_tokens=3)  # fmt: skip
    ft = s + ttft
    times = [ft, ft + 0.05, ft + 0.15]
    return RequestRecord(id=i, level=level, warmup=warmup, server="node1", send=s, first_token=ft,
                         token_times=times, end=times[-1], status="ok", input_tokens=8, output_tokens=3,
                         requested_output_tokens=3)  # fmt: skip


def healthy(ids: range, ttft: float = 0.1) -> list[RequestRecord]:
    return [rec(i, ttft=ttft) for i in ids]


def test_clean_recovery() -> None:
    recs = healthy(range(40)) + [rec(i, status="error") for i in range(40, 60)] + healthy(range(60, 100))
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert r.status == "recovered"
    assert r.pre_fault_n == 20 and r.pre_fault_ttft_band_ms == pytest.approx(150.0)
    assert r.to_first_failure_s == pytest.approx(0.01)  # request 40 fails 10 ms after the fault
    # request 60 (sent 106.0) is the first sent after that failure; it ends 0.1 + 0.15 s later
    assert r.to_first_success_s == pytest.approx(2.25)
    assert r.outage_s == pytest.approx(2.24)
    # steady is not before the first success (106.25): request 63, sent 106.3, starts the window
    assert r.to_steady_s == pytest.approx(2.3)
    assert (r.failed, r.aborted) == (20, 0)
    assert r.ttft_during_ms is not None and r.ttft_during_ms.n == 3  # requests 60..62
    assert r.ttft_during_ms.p50 == pytest.approx(100.0)
    assert r.ttft_after_ms is not None and r.ttft_after_ms.n == 37 and r.ttft_after_ms.p95 is not None
    assert r.ttft_after_ms.p99 is None  # 37 samples: p99 not shown


def test_never_recovers() -> None:
    recs = healthy(range(40)) + [rec(i, status="error") for i in range(40, 100)]
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert r.status == "not-recovered"
    assert r.to_first_failure_s == pytest.approx(0.01)
    assert r.to_first_success_s is None and r.outage_s is None and r.to_steady_s is None
    assert r.failed == 60 and r.ttft_after_ms is None
    assert r.ttft_during_ms is not None and r.ttft_during_ms.n == 0


def test_answers_again_but_ttft_stays_out_of_band_is_not_recovered() -> None:
    recs = healthy(range(40)) + [rec(i, status="error") for i in range(40, 50)] + healthy(range(50, 100), 0.4)
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert r.status == "not-recovered"
    assert r.to_first_success_s == pytest.approx(1.0 + 0.4 + 0.15)
    assert r.to_steady_s is None
    assert (
        r.ttft_during_ms is not None
        and r.ttft_during_ms.n == 50
        and r.ttft_during_ms.p50 == pytest.approx(400)
    )


def test_no_impact_when_a_short_pause_leaves_the_window_median_in_band() -> None:
    recs = [*healthy(range(40)), rec(40, ttft=0.6), rec(41, ttft=0.5), *healthy(range(42, 80))]
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert r.status == "no-interruption"
    assert r.to_steady_s == pytest.approx(0.0)
    assert r.to_first_failure_s is None and r.to_first_success_s is None and r.outage_s is None
    assert (r.failed, r.aborted) == (0, 0)
    assert r.ttft_during_ms is not None and r.ttft_during_ms.n == 0
    assert r.ttft_after_ms is not None and r.ttft_after_ms.n == 40


def test_slow_start_without_failures_is_recovered_not_no_impact() -> None:
    recs = healthy(range(40)) + healthy(range(40, 60), 0.5) + healthy(range(60, 100))
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    # the window's median is fast once at most 9 of its 20 requests are slow: from request 51 on
    assert r.status == "recovered" and r.to_steady_s == pytest.approx(1.1)
    assert r.to_first_failure_s is None and r.failed == 0


def test_slow_tail_after_restart_delays_steady() -> None:
    recs = (
        healthy(range(40))
        + [rec(i, status="error") for i in range(40, 60)]
        + healthy(range(60, 90), 1.0)  # the restarted engine answers, slowly at first
        + healthy(range(90, 130))
    )
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert r.status == "recovered"
    assert r.to_first_success_s == pytest.approx(2.0 + 1.0 + 0.15)
    # a window of 20 has a median within 150 ms once at most 9 of its requests are slow: from 81 on
    assert r.to_steady_s == pytest.approx(4.1)
    assert r.to_steady_s > r.to_first_success_s
    assert (
        r.ttft_during_ms is not None
        and r.ttft_during_ms.n == 21
        and r.ttft_during_ms.p50 == pytest.approx(1000)
    )
    assert r.ttft_after_ms is not None and r.ttft_after_ms.n == 49


def test_no_pre_fault_data() -> None:
    recs = [rec(i, status="error") for i in range(40, 50)] + healthy(range(50, 90))
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert r.status == "no-data"
    assert r.pre_fault_n == 0 and r.pre_fault_ttft_band_ms is None and r.to_steady_s is None
    assert r.to_first_failure_s == pytest.approx(0.01) and r.to_first_success_s == pytest.approx(1.25)
    assert r.failed == 10


def test_no_records_at_all_or_none_after_the_fault() -> None:
    assert serving_recovery([], FAULT, level="c4", rule=RULE).status == "no-data"
    # the level ended before the fault: nothing sent or ended after it
    r = serving_recovery(healthy(range(30)), FAULT, level="c4", rule=RULE)
    assert r.status == "no-data" and r.pre_fault_n == 20 and r.failed == 0
    # requests in flight at the fault failed, but none was sent after it: nothing can show recovery
    cut = [*healthy(range(38)), rec(38, status="aborted", end=FAULT + 0.3)]
    cut.append(rec(39, status="error", end=FAULT + 0.1))
    r = serving_recovery(cut, FAULT, level="c4", rule=RULE)
    assert r.status == "no-data" and r.to_first_failure_s == pytest.approx(0.1)
    assert (r.failed, r.aborted) == (1, 1)


def test_warmup_and_other_levels_are_ignored() -> None:
    base = healthy(range(40)) + [rec(i, status="error") for i in range(40, 60)] + healthy(range(60, 100))
    noise = [
        rec(1000, ttft=5.0, send=103.95, warmup=True),  # would widen the band
        rec(1001, status="aborted", send=103.99, end=104.001, warmup=True),  # would be the first failure
        rec(1002, status="error", send=103.99, end=104.002, level="c8"),
        rec(1003, ttft=5.0, send=103.97, level="c8"),
    ]
    clean = serving_recovery(base, FAULT, level="c4", rule=RULE)
    mixed = serving_recovery(base + noise, FAULT, level="c4", rule=RULE)
    assert mixed == clean
    assert mixed.pre_fault_ttft_band_ms == pytest.approx(150.0) and mixed.to_first_failure_s == pytest.approx(
        0.01
    )


def test_band_is_the_largest_below_20_samples_and_p95_from_20() -> None:
    few = [rec(i, ttft=0.1 + 0.01 * i) for i in range(10)]
    assert pre_fault_band(few, FAULT, RULE) == (10, pytest.approx((0.1 + 0.09) * 1e3 * 1.5))
    many = [rec(i, ttft=(i + 1) / 1000) for i in range(20)]  # 1..20 ms
    n, band = pre_fault_band(many, FAULT, RULE)
    # p95 of 1..20 by linear interpolation: rank 19 x 0.95 = 18.05 -> 19.05 ms
    assert n == 20 and band == pytest.approx(19.05 * 1.5)
    # only the last `window` successful requests sent before the fault make the band
    old_slow = [rec(i, ttft=2.0) for i in range(5)] + [rec(i, ttft=0.1) for i in range(5, 25)]
    assert pre_fault_band(old_slow, FAULT, RULE) == (20, pytest.approx(150.0))
    narrow = SteadyRule(window=5, tolerance=0.0)
    assert pre_fault_band(old_slow, FAULT, narrow) == (5, pytest.approx(100.0))


def test_boundaries_of_the_fault_the_failure_and_the_window() -> None:
    # a request sent before the fault and cut off by it is the first failure and is counted;
    # a failure that ended before the fault is not
    recs = [*healthy(range(38)), rec(38, status="error", end=103.9), rec(39, status="aborted", end=FAULT)]
    recs += [rec(i, status="error") for i in range(40, 45)] + healthy(range(45, 80))
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert r.to_first_failure_s == pytest.approx(0.0)
    assert (r.failed, r.aborted) == (5, 1)
    # a request sent exactly when the first failure ended is a candidate for the first success
    at_fail = [*healthy(range(40)), rec(40, status="error", end=104.05), rec(41, send=104.05)]
    at_fail += healthy(range(42, 70))
    r = serving_recovery(at_fail, FAULT, level="c4", rule=RULE)
    assert r.to_first_success_s == pytest.approx(0.05 + 0.25)
    # fewer than `window` requests after the first success: never steady within the records
    short = healthy(range(40)) + [rec(i, status="error") for i in range(40, 60)] + healthy(range(60, 79))
    r = serving_recovery(short, FAULT, level="c4", rule=RULE)
    assert r.status == "not-recovered" and r.to_first_success_s is not None
    # exactly `window` requests from the first request after the first success: steady at its send
    exact = healthy(range(40)) + [rec(i, status="error") for i in range(40, 60)] + healthy(range(60, 83))
    r = serving_recovery(exact, FAULT, level="c4", rule=RULE)
    assert r.status == "recovered" and r.to_steady_s == pytest.approx(2.3)
    # one failure inside every later window keeps it from being steady
    holes = healthy(range(40)) + [rec(i, status="error") for i in range(40, 60)]
    holes += [rec(i, status="error") if i % 15 == 0 else rec(i) for i in range(60, 120)]
    r = serving_recovery(holes, FAULT, level="c4", rule=RULE)
    assert r.status == "not-recovered" and r.failed == 20 + 4


def test_failures_after_steady_are_not_counted() -> None:
    recs = healthy(range(40)) + [rec(i, status="error") for i in range(40, 45)] + healthy(range(45, 90))
    recs.append(rec(90, status="error"))
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert r.status == "recovered" and r.failed == 5


def _rec(**kw: object) -> ServingRecovery:
    fields: dict[str, object] = dict(
        level="c4", rule=RULE, pre_fault_n=20, pre_fault_ttft_band_ms=150.0, to_first_failure_s=None,
        to_first_success_s=None, to_steady_s=None, outage_s=None, failed=0, aborted=0, ttft_during_ms=None,
        ttft_after_ms=None, status="recovered",
    )  # fmt: skip
    fields.update(kw)
    return ServingRecovery.model_validate(fields)


def test_spread_over_repeats() -> None:
    reps = [
        _rec(to_first_failure_s=0.1, to_first_success_s=3.0, to_steady_s=5.0, outage_s=2.9, failed=10),
        _rec(to_first_failure_s=0.3, to_first_success_s=4.0, to_steady_s=9.0, outage_s=3.7, failed=14),
        _rec(
            to_first_failure_s=0.2,
            to_first_success_s=None,
            to_steady_s=None,
            failed=30,
            aborted=2,
            status="not-recovered",
        ),
        _rec(to_steady_s=0.0, status="no-interruption"),
    ]
    s = recovery_spread(reps)
    assert s.repeats == 4 and s.statuses == {"no-interruption": 1, "not-recovered": 1, "recovered": 2}
    assert (s.to_first_failure_s.n, s.to_first_failure_s.min, s.to_first_failure_s.max) == (3, 0.1, 0.3)
    assert s.to_first_failure_s.median == pytest.approx(0.2)
    assert (s.to_steady_s.n, s.to_steady_s.median) == (3, 5.0)
    assert (s.outage_s.n, s.outage_s.median) == (2, pytest.approx(3.3))
    assert (s.failed.n, s.failed.min, s.failed.median, s.failed.max) == (4, 0.0, 12.0, 30.0)
    assert spread_stat([]).n == 0 and spread_stat([None]).median is None


def test_until_the_next_fault_leaves_its_requests_out() -> None:
    recs = healthy(range(40)) + [rec(i, status="error") for i in range(40, 50)] + healthy(range(50, 100))
    recs += [rec(i, status="error") for i in range(100, 110)] + healthy(range(110, 140))
    alone = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    cut = serving_recovery(recs, FAULT, level="c4", rule=RULE, until=T0 + 10.0)  # request 100's send
    assert alone.to_steady_s == cut.to_steady_s == pytest.approx(1.3)
    assert alone.ttft_after_ms is not None and cut.ttft_after_ms is not None
    assert (alone.ttft_after_ms.n, cut.ttft_after_ms.n) == (77, 47)
    # a request sent before the next fault and failing after it belongs to the next fault
    late = [*recs[:60], rec(60, status="aborted", end=T0 + 7.5), *recs[61:]]
    r = serving_recovery(late, FAULT, level="c4", rule=RULE, until=T0 + 7.0)
    assert r.failed == 10 and r.aborted == 0
    # cut before a full window followed the first success: not steady within its own span
    assert serving_recovery(late, FAULT, level="c4", rule=RULE, until=T0 + 5.5).status == "not-recovered"


def test_a_held_fault_is_steady_only_after_its_revert() -> None:
    """A throttle, as on the lab: its queue lets the first 30 requests through at the old speed,
    then every first token is 4x slower until the revert at FAULT + 6 s (request 100)."""
    recs = healthy(range(70)) + healthy(range(70, 100), 0.4) + healthy(range(100, 160))
    held = FAULT + 6.0
    blind = serving_recovery(recs, FAULT, level="c4", rule=RULE)
    assert blind.status == "no-interruption"  # without the revert time, the first window looked steady
    r = serving_recovery(recs, FAULT, level="c4", rule=RULE, held_until=held)
    assert r.status == "recovered" and r.to_first_failure_s is None and r.failed == 0
    assert r.to_steady_s == pytest.approx(6.0)  # request 100, the first sent after the revert
    assert r.ttft_during_ms is not None and r.ttft_during_ms.n == 60
    assert r.ttft_during_ms.p95 == pytest.approx(400.0)
    # a held fault that changed nothing is no-interruption
    calm = serving_recovery(healthy(range(160)), FAULT, level="c4", rule=RULE, held_until=held)
    assert calm.status == "no-interruption" and calm.to_steady_s == pytest.approx(6.0)
