"""Serving figures from request records built here: percentiles with n, goodput, cost, and the
interactive rule of compare (10% more throughput with a clearly worse p99 is worse)."""

from __future__ import annotations

import random
import statistics

import pytest

from orchestrator.metrics.serving import (
    compare_level,
    cost_label,
    level_cost,
    level_lines,
    p99_log_se,
    parse_records,
    summarize_level,
    summarize_levels,
)
from orchestrator.models.serving import ServingSlos
from orchestrator.models.serving_results import RequestRecord, RequestStatus


def rec(
    i: int,
    *,
    send: float = 1000.0,
    ttft: float = 0.1,
    gaps: list[float] | None = None,
    status: RequestStatus = "ok",
    level: str = "c4",
    server: str = "node1",
    warmup: bool = False,
    input_tokens: int = 10,
) -> RequestRecord:
    gaps = [0.01, 0.01, 0.01] if gaps is None else gaps
    if status != "ok":
        return RequestRecord(id=i, level=level, warmup=warmup, server=server, send=send, end=send + 0.5,
                             status=status, input_tokens=input_tokens, output_tokens=0,
                             requested_output_tokens=len(gaps) + 1)  # fmt: skip
    times = [send + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(id=i, level=level, warmup=warmup, server=server, send=send, first_token=times[0],
                         token_times=times, end=times[-1], status=status, input_tokens=input_tokens,
                         output_tokens=len(times), requested_output_tokens=len(times))  # fmt: skip


def test_latency_percentiles_with_n() -> None:
    recs = [rec(i, send=1000 + i, ttft=(i + 1) / 1000) for i in range(100)]
    s = summarize_level(recs)
    values = [float(i + 1) for i in range(100)]
    assert s.ttft_ms.n == 100 and s.ttft_ms.p50 == pytest.approx(statistics.median(values))
    # linear interpolation: rank (n - 1) x 0.99 = 98.01 -> 99 + 0.01 x (100 - 99)
    assert s.ttft_ms.p99 == pytest.approx(99.01)
    assert s.itl_ms.n == 300 and s.itl_ms.p50 == pytest.approx(10.0)
    assert s.tpot_ms.n == 100 and s.tpot_ms.p50 == pytest.approx(10.0)  # 30 ms over 3 tokens after the first
    assert s.e2e_ms.p50 == pytest.approx(statistics.median(v + 30.0 for v in values))


def test_p99_hidden_below_100_but_n_shown() -> None:
    s = summarize_level([rec(i, send=1000 + i) for i in range(99)])
    assert s.ttft_ms.n == 99 and s.ttft_ms.p99 is None and s.ttft_ms.p95 is not None
    assert p99_log_se([0.1] * 99) is None
    assert "(n=99)" in level_lines(s)[1]


def test_warmup_excluded_and_rates_and_throughput() -> None:
    recs = [rec(0, warmup=True, ttft=5.0)]
    recs += [rec(i, send=1000 + i) for i in range(1, 9)]  # 8 ok, sends 1001..1008
    recs += [rec(9, send=1009, status="error"), rec(10, send=1010, status="aborted")]
    s = summarize_level(recs)
    assert (s.n, s.ok, s.errors, s.aborted) == (10, 8, 1, 1)
    assert s.error_rate == pytest.approx(0.1) and s.abort_rate == pytest.approx(0.1)
    assert s.ttft_ms.mean == pytest.approx(100.0)  # the 5 s warm-up request is not counted
    span = 1010.5 - 1001
    assert s.duration_s == pytest.approx(span)
    assert s.output_tokens == 32 and s.output_tokens_per_s == pytest.approx(32 / span)
    assert s.requests_per_s == pytest.approx(8 / span) and s.input_tokens_per_s == pytest.approx(80 / span)


def test_slo_attainment_counts_failures_against_and_checks_each_slo() -> None:
    recs = [rec(i, send=1000 + i, ttft=0.05) for i in range(100)]
    recs[0] = rec(0, ttft=0.5)  # TTFT over its SLO
    recs[1] = rec(1, gaps=[0.2, 0.2, 0.2])  # TPOT over its SLO
    recs[2] = rec(2, status="error")
    recs[3] = rec(3, gaps=[])  # one token: no TPOT, judged on TTFT and E2E only
    slos = ServingSlos(ttft_p99_ms=200, tpot_p99_ms=50, e2e_p99_ms=1000)
    s = summarize_level(recs, slos)
    assert s.slo_attainment == pytest.approx(97 / 100)
    assert s.request_goodput == pytest.approx(97 / s.duration_s)  # vLLM's goodput: good requests per second
    by = {c.metric: c for c in s.slos}
    assert by["ttft"].n == 99 and by["ttft"].met is None  # 99 successful requests: p99 not defined
    plain = summarize_level(recs)
    assert plain.slo_attainment is None and plain.request_goodput is None  # no SLOs, no attainment


def test_slo_met_and_missed_on_p99() -> None:
    recs = [rec(i, send=1000 + i, ttft=0.05 if i < 95 else 0.3) for i in range(120)]
    s = summarize_level(recs, ServingSlos(ttft_p99_ms=100, e2e_p99_ms=10_000))
    by = {c.metric: c for c in s.slos}
    assert by["ttft"].met is False and by["ttft"].p99_ms is not None and by["ttft"].p99_ms > 100
    assert by["e2e"].met is True
    assert "MISSED" in level_lines(s)[-1]


def test_levels_and_servers() -> None:
    recs = [rec(i, level="c1", server=f"node{i % 2}") for i in range(4)] + [rec(9, level="r2")]
    out = summarize_levels(recs)
    assert [s.level for s in out] == ["c1", "r2"] and out[0].servers == {"node0": 2, "node1": 2}
    with pytest.raises(ValueError, match="one level"):
        summarize_level(recs)


def test_cost_per_request_and_per_million_tokens_with_its_inputs() -> None:
    recs = [rec(i, send=1000 + i * 2.5) for i in range(40)]  # span 97.5 + 0.13
    recs.append(rec(40, send=1000, status="error"))
    s = summarize_level(recs)
    c = level_cost(s, nodes=2, price_per_node_hour=3.6)
    total = 3.6 * 2 * s.duration_s / 3600
    assert c.total == pytest.approx(total) and c.ok == 40 and c.output_tokens == 160
    assert c.per_request == pytest.approx(total / 40)  # the failed request earns nothing
    assert c.per_million_output_tokens == pytest.approx(total / 160 * 1e6)
    text = cost_label(c)
    assert (
        "3.6/node-hour x 2 node(s)" in text
        and "40 successful requests" in text
        and "160 output tokens" in text
    )
    none_ok = level_cost(summarize_level([rec(0, status="error")]), nodes=1, price_per_node_hour=1)
    assert none_ok.per_request is None and none_ok.per_million_output_tokens is None
    with pytest.raises(ValueError, match="price"):
        level_cost(s, nodes=1, price_per_node_hour=0)


def test_parse_records_names_the_line() -> None:
    r = rec(0)
    assert parse_records([r.model_dump_json(), ""]) == [r]
    with pytest.raises(ValueError, match="line 2"):
        parse_records([r.model_dump_json(), '{"id": 1}'], source="x.jsonl")


# -- the interactive rule -------------------------------------------------------------------------


def run(seed: int, *, gap: float = 0.1, tail: float = 0.0, n: int = 300) -> list[RequestRecord]:
    """A level of n requests sent every `gap` s, TTFT ~ 100 ms lognormal; a share `tail` of them
    3x slower to first token (a worse p99 with the same median)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ttft = 0.1 * rng.lognormvariate(0, 0.2) * (3.0 if rng.random() < tail else 1.0)
        gaps = [0.01 * rng.lognormvariate(0, 0.1) for _ in range(15)]
        out.append(rec(i, send=1000 + i * gap, ttft=ttft, gaps=gaps))
    return out


def test_more_throughput_with_a_worse_p99_is_worse_for_interactive() -> None:
    a = summarize_level(run(1))
    b = summarize_level(run(2, gap=0.1 / 1.1, tail=0.05))  # +10% throughput, 5% of requests 3x slower
    c = compare_level([a], [b])
    assert c.throughput.change == "better" and c.throughput.ratio == pytest.approx(1.1, rel=0.01)
    ttft = next(x for x in c.latency if x.figure == "TTFT p99")
    assert ttft.change == "worse" and ttft.n_a == 300
    assert c.verdict == "worse for interactive" and "TTFT p99" in c.reason


def test_a_against_a_is_same() -> None:
    c = compare_level([summarize_level(run(1))], [summarize_level(run(2))])
    assert c.verdict == "same", c.reason
    assert all(x.change == "same" for x in c.latency)


def test_more_throughput_alone_is_better_less_is_worse() -> None:
    a = summarize_level(run(1))
    assert compare_level([a], [summarize_level(run(2, gap=0.1 / 1.2))]).verdict == "better"
    assert compare_level([a], [summarize_level(run(2, gap=0.1 * 1.2))]).verdict == "worse"


def test_repeats_widen_the_band_robustly() -> None:
    a = [summarize_level(run(s)) for s in (1, 2, 3)]
    b = [summarize_level(run(s, gap=0.1 / 1.1)) for s in (4, 5, 6)]
    c = compare_level(a, b)
    assert c.throughput.n_a == 3 and c.throughput.change == "better" and c.verdict == "better"
    assert c.latency[0].n_a == 900


def test_missing_p99_is_na() -> None:
    a = summarize_level(run(1, n=50))  # 50 requests: no TTFT p99, but 750 gaps give an ITL p99
    c = compare_level([a], [a])
    changes = {x.figure: x.change for x in c.latency}
    assert changes["TTFT p99"] == "n/a" and changes["ITL p99"] == "same" and c.verdict == "same"
    one_token = summarize_level([rec(i, send=1000 + i, gaps=[]) for i in range(50)])
    assert compare_level([one_token], [one_token]).verdict == "n/a"
    with pytest.raises(ValueError, match="one level"):
        compare_level([a], [summarize_level([rec(0, level="c8")])])


def drifting(seed: int, *, slow: float = 1.0) -> list[RequestRecord]:
    """A level of 200 requests on a shared machine: every 40 requests the machine's speed changes
    (a factor drawn from 0.6..1.6 that stretches gaps, TTFT and token gaps alike); `slow` makes the
    engine itself slower by that factor throughout."""
    rng = random.Random(seed)
    out, t = [], 1000.0
    for i in range(200):
        if i % 40 == 0:
            speed = rng.uniform(0.6, 1.6) * slow
        ttft = 0.05 * speed * rng.lognormvariate(0, 0.2)
        gaps = [0.01 * speed * rng.lognormvariate(0, 0.1) for _ in range(15)]
        out.append(rec(i, send=t, ttft=ttft, gaps=gaps))
        t += 0.05 * speed
    return out


def test_a_run_that_wanders_with_its_machine_widens_its_own_band() -> None:
    a, a2 = summarize_level(drifting(1)), summarize_level(drifting(7))
    assert a.drift_log_se["tput"] is not None and a.drift_log_se["tput"] > 0.05
    assert summarize_level(run(1)).drift_log_se["tput"] < 0.02  # a steady run barely moves
    c = compare_level([a], [a2])
    assert c.verdict == "same", c.reason  # the p99 order statistics alone would call this a change
    assert c.throughput.band is not None and c.throughput.band > 0.2
    worse = compare_level([a], [summarize_level(drifting(7, slow=3.0))])
    assert worse.verdict == "worse" and worse.throughput.change == "worse", worse.reason
