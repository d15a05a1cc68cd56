"""The capacity search's pure logic (orchestrator.metrics.capacity), fed with synthetic probe
results: the bracket and bisection against an engine of known capacity over many ranges, the
documented probe bound, the early-stop rule, the generator-limit rule and the repeats' combination."""

from __future__ import annotations

import itertools
import math

import pytest
from pydantic import ValidationError

from orchestrator.metrics.capacity import (
    LATE_FLOOR_S,
    Bisection,
    ProbeTally,
    combine,
    generator_limit,
    judge_probe,
    probe_bound,
)
from orchestrator.models.serving import CapacitySearch, ServingSlos
from orchestrator.models.serving_results import (
    IN_FLIGHT_BOUND_ERROR,
    CapacityProbe,
    CapacityRepeat,
    RequestRecord,
)

SLOS = ServingSlos(ttft_p99_ms=100)


def probe(
    rate: float, met: bool, *, limit: str | None = None, n: int = 100, early: bool = False
) -> CapacityProbe:
    return CapacityProbe(rate=rate, seed=0, planned=100, n=n, good=n if met else 0,
                         attainment=1.0 if met else 0.0, met=met, stopped_early=early,
                         generator_limit=limit)  # fmt: skip


def search_against(search: CapacitySearch, capacity: float) -> CapacityRepeat:
    """Run one repeat against an engine that meets the target exactly up to `capacity`."""
    state = Bisection(search)
    while (rate := state.next_rate()) is not None:
        state.feed(probe(rate, rate <= capacity))
    return state.result()


RANGES = [(1.0, 2.0, 0.5), (1.0, 64.0, 1.0), (0.5, 100.0, 3.0), (10.0, 11.0, 2.0), (2.0, 50.0, 0.1),
          (1.0, 9.0, 1.0), (1.0, 9.0, 0.999)]  # fmt: skip


@pytest.mark.parametrize(("lo", "hi", "prec"), RANGES)
def test_bisection_brackets_a_known_capacity_within_the_bound(lo: float, hi: float, prec: float) -> None:
    search = CapacitySearch(target_attainment=0.9, min_rate=lo, max_rate=hi, precision=prec)
    bound = probe_bound(search)
    assert bound == 2 + max(0, math.ceil(math.log2((hi - lo) / prec) - 1e-9))
    # capacities below, inside (on a fine grid, and on probe rates) and above the range
    grid = [lo / 2, lo, hi, hi * 2] + [lo + (hi - lo) * k / 97 for k in range(1, 97)]
    for cap in grid:
        rep = search_against(search, cap)
        assert len(rep.probes) <= bound, (cap, [p.rate for p in rep.probes])
        if cap < lo:
            assert rep.status == "below_min" and rep.capacity is None and len(rep.probes) == 1
        elif cap >= hi:
            assert rep.status == "at_least_max" and rep.capacity == hi and len(rep.probes) == 2
        else:
            assert rep.status == "found", (cap, rep.reason)
            assert rep.capacity is not None and rep.upper is not None
            assert rep.capacity <= cap < rep.upper
            assert rep.upper - rep.capacity <= prec * (1 + 1e-9)
            assert rep.probes[0].rate == lo and rep.probes[1].rate == hi


def test_the_bound_is_reached() -> None:
    search = CapacitySearch(target_attainment=0.9, min_rate=1, max_rate=65, precision=1)
    assert probe_bound(search) == 8
    assert len(search_against(search, 64.9).probes) == 8


def test_a_generator_limited_probe_ends_the_repeat_and_refuses_the_capacity() -> None:
    search = CapacitySearch(target_attainment=0.9, min_rate=1, max_rate=9, precision=1)
    state = Bisection(search)
    state.feed(probe(1, True))
    state.feed(probe(9, False))
    state.feed(probe(5, True, limit="the load generator sent late"))
    assert state.next_rate() is None
    rep = state.result()
    assert rep.status == "generator_limited" and rep.capacity is None and "sent late" in rep.reason
    ok = search_against(search, 4)
    res = combine(search, [ok, rep])
    assert res.capacity is None and res.refused is not None and "sent late" in res.refused


def test_a_short_probe_that_did_not_fail_is_incomplete_and_a_wrong_rate_is_refused() -> None:
    search = CapacitySearch(target_attainment=0.9, min_rate=1, max_rate=9, precision=1)
    state = Bisection(search)
    state.feed(probe(1, True))
    with pytest.raises(ValueError, match="expected"):
        state.feed(probe(4, True))
    state.feed(probe(9, False, n=40))
    assert state.result().status == "incomplete"
    state2 = Bisection(search)
    state2.feed(probe(1, True))
    state2.feed(probe(9, False, n=40, early=True))  # stopped early: a miss, not an interruption
    assert state2.status is None and state2.next_rate() == 5


def test_repeats_combine_into_median_and_spread() -> None:
    search = CapacitySearch(target_attainment=0.9, min_rate=1, max_rate=33, precision=1, repeats=3)
    caps_in = (10.2, 12.7, 11.1)
    reps = [search_against(search, c).model_copy(update={"repeat": i}) for i, c in enumerate(caps_in)]
    res = combine(search, reps)
    caps = sorted(r.capacity for r in reps if r.capacity is not None)
    assert res.refused is None and res.capacity == caps[1] and res.spread == caps[-1] - caps[0]
    assert res.probe_bound == probe_bound(search)
    short = combine(search, reps[:2])
    assert short.capacity is None and short.refused == "2 of 3 repeats ran"
    below = combine(search, [*reps[:2], search_against(search, 0.5)])
    assert below.capacity is None and below.refused is not None and "below" in below.refused


def test_the_plan_model_refuses_what_a_search_cannot_judge() -> None:
    with pytest.raises(ValidationError, match="below max_rate"):
        CapacitySearch(target_attainment=0.9, min_rate=5, max_rate=5, precision=1)
    with pytest.raises(ValidationError, match="greater than or equal to 2"):
        CapacitySearch(target_attainment=0.9, min_rate=1, max_rate=5, precision=1, repeats=1)


def rec(i: int, *, ttft_s: float = 0.01, status: str = "ok", warmup: bool = False,
        late_s: float | None = 0.0, error: str | None = None) -> RequestRecord:  # fmt: skip
    send = 1000.0 + i
    ok = status == "ok"
    return RequestRecord(
        id=i, level="r5", warmup=warmup, server="n1", send=send,
        scheduled=None if late_s is None else send - late_s,
        first_token=send + ttft_s if ok else None, token_times=[send + ttft_s] if ok else [],
        end=send + ttft_s + 0.001, status=status, error=error,  # type: ignore[arg-type]
        input_tokens=4, output_tokens=1 if ok else 0, requested_output_tokens=1,
    )  # fmt: skip


TARGETS = list(itertools.product([0.5, 0.9, 0.95, 0.99, 1.0], [100, 137]))


@pytest.mark.parametrize(("target", "planned"), TARGETS)
def test_early_stop_exactly_when_the_target_is_out_of_reach(target: float, planned: int) -> None:
    tally = ProbeTally(planned, target, SLOS)
    tally.feed(rec(0, warmup=True, ttft_s=5))  # warm-up never counts
    misses = 0
    while not tally.clearly_fails:
        tally.feed(rec(misses + 1, ttft_s=0.5))  # a TTFT over the SLO
        misses += 1
        # before the stop, all-good remaining requests could still reach the target
        if not tally.clearly_fails:
            assert (planned - misses) / planned >= target - 1e-12
    assert (planned - misses) / planned < target


def test_judge_probe_counts_attainment_over_the_planned_requests() -> None:
    recs = [rec(i, ttft_s=0.5 if i % 10 == 0 else 0.01) for i in range(100)] + [rec(100, warmup=True)]
    p = judge_probe(recs, rate=1, seed=3, planned=100, target=0.9, slos=SLOS, stopped_early=False)
    assert (p.n, p.good, p.met, p.generator_limit) == (100, 90, True, None)
    assert p.attainment == pytest.approx(0.9) and p.summary is not None and p.summary.ttft_ms.p99 is not None
    strict = judge_probe(recs, rate=1, seed=3, planned=100, target=0.91, slos=SLOS, stopped_early=False)
    assert not strict.met
    short = judge_probe(recs[:50], rate=1, seed=3, planned=100, target=0.5, slos=SLOS, stopped_early=False)
    assert not short.met  # half the planned requests: not judged as met


def test_generator_limit_from_scheduled_against_actual_send_times() -> None:
    on_time = [rec(i, late_s=0.001) for i in range(100)]
    assert generator_limit(on_time, rate=100)[1] is None
    # late by more than one mean gap (1/rate) and the floor: the generator was the limit
    late = [rec(i, late_s=0.2 if i < 10 else 0.001) for i in range(100)]
    lateness, why = generator_limit(late, rate=5)
    assert lateness is not None and lateness > 100 and why is not None and "sent late" in why
    # the same lag at a low rate is within one mean gap
    assert generator_limit(late, rate=1)[1] is None
    # below the floor it is tolerated even at a high rate
    small = [rec(i, late_s=LATE_FLOOR_S / 2) for i in range(100)]
    assert generator_limit(small, rate=1000)[1] is None
    bounded = [*on_time[:99], rec(99, status="error", error=IN_FLIGHT_BOUND_ERROR)]
    why = generator_limit(bounded, rate=1)[1]
    assert why is not None and "in-flight bound" in why and "1 of 100" in why
    unknown = [rec(i, late_s=None) for i in range(100)]
    why = generator_limit(unknown, rate=1)[1]
    assert why is not None and "unknown" in why
    # a limited probe is refused even though it met the target
    p = judge_probe(late, rate=5, seed=0, planned=100, target=0.5, slos=SLOS, stopped_early=False)
    assert p.met and p.generator_limit is not None
