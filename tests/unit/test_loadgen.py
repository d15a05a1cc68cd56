"""The load generator against a test double of an OpenAI-compatible streaming server
(tests/unit/sse_server.py): measured TTFT and ITL against the delays the double used, records
written as requests end, errors, timeouts, cancellation, and the seeded Poisson schedule."""

from __future__ import annotations

import itertools
import math
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sse_server import HOLD_TOKENS, Behaviour, sse_server

from orchestrator.models.serving_results import RequestRecord
from orchestrator.workloads.loadgen import (
    LoadGenerator,
    LoadSpec,
    RecordWriter,
    Target,
    arrival_offsets,
    level_specs,
    main,
    read_lengths,
)

# Upper slack on measured delays: the machine is shared, so a sample may be late by scheduling,
# never early. Lower bounds are exact where they are cumulative (a token cannot arrive before the
# double sends it); a single gap can be short when the token before it was read late.
SLACK_S = 0.5


def run_level(spec: LoadSpec) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    LoadGenerator(spec, out.append).run()
    return out


def spec(url: str, **kw: object) -> LoadSpec:
    base: dict[str, object] = {
        "targets": [Target("node1", url)],
        "model": "m",
        "input_tokens": [8],
        "output_tokens": [5],
        "concurrency": 2,
        "requests": 6,
    }
    base.update(kw)
    return LoadSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_ttft_and_itl_match_the_delays_of_the_server(api: str) -> None:
    b = Behaviour(ttft_s=0.05, itl_s=0.03)
    with sse_server(b) as url:
        recs = run_level(spec(url, api=api, warmup=2))
    counted = [r for r in recs if not r.warmup]
    assert len(recs) == 8 and len(counted) == 6 and sum(r.warmup for r in recs) == 2
    assert sorted(r.id for r in recs) == list(range(8))
    for r in counted:
        assert r.status == "ok" and r.first_token is not None and r.server == "node1"
        assert r.output_tokens == 5 and len(r.token_times) == 5 and r.usage_reported
        assert r.input_tokens == 8 and r.requested_output_tokens == 5
        ttft = r.first_token - r.send
        assert b.ttft_s - 1e-3 <= ttft <= b.ttft_s + SLACK_S, ttft
        # token k cannot arrive before the double sent it: ttft + k x itl after the request
        assert all(t - r.send >= b.ttft_s + k * b.itl_s - 1e-3 for k, t in enumerate(r.token_times))
        # one late read shortens the next gap, so single gaps are bounded above only
        gaps = [y - x for x, y in itertools.pairwise(r.token_times)]
        assert all(0 <= g <= b.itl_s + SLACK_S for g in gaps), gaps
        assert r.send <= r.first_token <= r.token_times[-1] <= r.end
    itl_median = statistics.median(y - x for r in counted for x, y in itertools.pairwise(r.token_times))
    assert itl_median == pytest.approx(b.itl_s, abs=0.02)


def test_closed_loop_keeps_at_most_concurrency_in_flight() -> None:
    with sse_server(Behaviour(ttft_s=0.02, itl_s=0.01)) as url:
        recs = run_level(spec(url, concurrency=3, requests=12))
    events = sorted([(r.send, 1) for r in recs] + [(r.end, -1) for r in recs])
    in_flight = list(itertools.accumulate(d for _, d in events))
    assert max(in_flight) <= 3 and len(recs) == 12


def test_records_are_on_disk_as_requests_end(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    b = Behaviour()
    with sse_server(b) as url, RecordWriter(out) as w:
        # request 0 is held by the double until released; 1..3 end first and must be on disk then
        gen = LoadGenerator(spec(url, output_tokens=[HOLD_TOKENS, 3, 3, 3], requests=4), w.write)
        t = threading.Thread(target=gen.run)
        t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(out.read_text().splitlines()) < 3:
            time.sleep(0.01)
        lines = out.read_text().splitlines()
        assert len(lines) == 3 and t.is_alive()
        assert sorted(RequestRecord.model_validate_json(x).id for x in lines) == [1, 2, 3]
        b.hold.set()
        t.join(20)
    recs = [RequestRecord.model_validate_json(x) for x in out.read_text().splitlines()]
    assert [r.id for r in recs][-1] == 0 and recs[-1].output_tokens == HOLD_TOKENS


def test_http_errors_and_refused_connections_are_error_records() -> None:
    with sse_server(Behaviour(fail_every=3)) as url:
        recs = run_level(spec(url, concurrency=1, requests=6))
    failed = [r for r in recs if r.status == "error"]
    assert len(failed) == 2 and all(
        r.http_status == 500 and "engine overloaded" in (r.error or "") for r in failed
    )
    assert all(r.first_token is None and r.output_tokens == 0 for r in failed)
    # a port nobody listens on: bind one, close it, use it
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    recs = run_level(spec(f"http://127.0.0.1:{port}", requests=2))
    assert [r.status for r in recs] == ["error", "error"] and "ConnectionRefused" in (recs[0].error or "")


def test_a_request_past_its_timeout_is_aborted() -> None:
    with sse_server(Behaviour(ttft_s=6.0)) as url:
        t0 = time.monotonic()
        recs = run_level(spec(url, concurrency=1, requests=1, timeout_s=0.3))
        took = time.monotonic() - t0
    assert [r.status for r in recs] == ["aborted"] and "timeout" in (recs[0].error or "")
    assert took < 5.0  # bounded by the timeout (0.3 s), not by the server (6 s)


def test_stop_cancels_requests_in_flight() -> None:
    b = Behaviour()
    with sse_server(b) as url:
        gen_recs: list[RequestRecord] = []
        gen = LoadGenerator(
            spec(url, output_tokens=[HOLD_TOKENS], concurrency=2, requests=10), gen_recs.append
        )
        t = threading.Thread(target=gen.run)
        t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and b.requests < 2:  # both workers' requests reached the double
            time.sleep(0.01)
        gen.stop()
        t.join(10)
        assert not t.is_alive()
    assert len(gen_recs) == 2 and all(r.status == "aborted" for r in gen_recs)


def test_server_without_usage_counts_chunks() -> None:
    with sse_server(Behaviour(usage=False)) as url:
        (r,) = run_level(spec(url, concurrency=1, requests=1, output_tokens=[4], input_tokens=[7]))
    assert r.output_tokens == 4 and r.input_tokens == 7 and not r.usage_reported


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_stream_without_done_ends_on_finish_reason_and_empty_tokens_count(api: str) -> None:
    with sse_server(Behaviour(done=False, empty_every=3, usage=False)) as url:
        recs = run_level(spec(url, api=api, requests=2, output_tokens=[6]))
    assert [r.status for r in recs] == ["ok", "ok"]
    assert all(len(r.token_times) == 6 and r.output_tokens == 6 for r in recs)


def test_truncated_stream_is_an_error() -> None:
    with sse_server(Behaviour(done=False, truncate_after=2)) as url:
        recs = run_level(spec(url, requests=1, concurrency=1))
    assert recs[0].status == "error" and "without [DONE]" in (recs[0].error or "")
    assert len(recs[0].token_times) == 2


def test_requests_round_robin_over_targets() -> None:
    with sse_server(Behaviour()) as u1, sse_server(Behaviour()) as u2:
        recs = run_level(spec(u1, targets=[Target("node1", u1), Target("node2", u2)], requests=6))
    assert sorted(r.server for r in recs) == ["node1"] * 3 + ["node2"] * 3


def test_poisson_schedule_is_seeded_and_has_the_rate() -> None:
    rate, n = 20.0, 4000
    a = list(itertools.islice(arrival_offsets(rate, seed=7), n))
    assert a == list(itertools.islice(arrival_offsets(rate, seed=7), n))
    assert a != list(itertools.islice(arrival_offsets(rate, seed=8), n))
    gaps = [a[0], *(y - x for x, y in itertools.pairwise(a))]
    # exponential gaps: mean 1/rate with standard error (1/rate)/sqrt(n); 5 standard errors
    mean = statistics.fmean(gaps)
    assert abs(mean - 1 / rate) < 5 * (1 / rate) / math.sqrt(n)
    # and a coefficient of variation of 1 (a Poisson process, not a regular clock)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1.0, abs=0.1)
    # counts in 1 s windows: Poisson, so variance equals mean (dispersion index near 1)
    counts = [0] * int(a[-1])
    for t in a:
        if int(t) < len(counts):
            counts[int(t)] += 1
    assert statistics.pvariance(counts) / statistics.fmean(counts) == pytest.approx(1.0, abs=0.35)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_bursty_arrivals_keep_the_rate_and_change_the_spread_as_vllms_gamma_gaps(burstiness: float) -> None:
    rate, n = 20.0, 4000
    a = list(itertools.islice(arrival_offsets(rate, seed=7, burstiness=burstiness), n))
    assert a == list(itertools.islice(arrival_offsets(rate, seed=7, burstiness=burstiness), n))
    gaps = [a[0], *(y - x for x, y in itertools.pairwise(a))]
    mean = statistics.fmean(gaps)
    # gamma gaps of shape k and mean 1/rate: standard deviation (1/rate)/sqrt(k), CV 1/sqrt(k)
    cv = 1 / math.sqrt(burstiness)
    assert abs(mean - 1 / rate) < 5 * cv * (1 / rate) / math.sqrt(n)
    assert statistics.pstdev(gaps) / mean == pytest.approx(cv, rel=0.15)
    # burstiness 1 is the Poisson schedule itself, draw for draw
    assert list(itertools.islice(arrival_offsets(rate, seed=7, burstiness=1.0), 50)) == list(
        itertools.islice(arrival_offsets(rate, seed=7), 50)
    )
    with pytest.raises(ValueError, match="burstiness must be > 0"):
        next(arrival_offsets(rate, seed=7, burstiness=0.0))


def test_open_loop_sends_every_request_and_warmup() -> None:
    with sse_server(Behaviour(ttft_s=0.01)) as url:
        recs = run_level(spec(url, concurrency=None, rate=200.0, requests=30, warmup=3, seed=1))
    assert len(recs) == 33 and recs[0].level == "r200"
    assert [(r.id, r.status, r.error) for r in recs if r.status != "ok"] == []
    assert sum(r.warmup for r in recs) == 3


def test_open_loop_in_flight_bound_records_errors() -> None:
    b = Behaviour()
    with sse_server(b) as url:
        recs: list[RequestRecord] = []
        s = spec(url, concurrency=None, rate=500.0, requests=6, max_in_flight=2, output_tokens=[HOLD_TOKENS])
        gen = LoadGenerator(s, recs.append)
        t = threading.Thread(target=gen.run)
        t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(recs) < 4:
            time.sleep(0.01)
        b.hold.set()
        t.join(20)
    bounded = [r for r in recs if r.error == "client in-flight bound reached"]
    assert len(recs) == 6 and len(bounded) == 4


def test_spec_refusals() -> None:
    with pytest.raises(ValueError, match="one of concurrency and rate"):
        LoadSpec(
            targets=[Target("n", "http://h:1")], model="m", input_tokens=[1], output_tokens=[1], requests=1
        )
    with pytest.raises(ValueError, match="url"):
        spec("http://h:1/x;y")


def test_read_lengths_names_the_line() -> None:
    assert read_lengths(['{"input_tokens": 3}', "", '{"input_tokens": 9}'], "input_tokens") == [3, 9]
    with pytest.raises(ValueError, match=r"lens\.jsonl line 2"):
        read_lengths(['{"n": 3}', '{"n": 0}'], "n", source="lens.jsonl")
    with pytest.raises(ValueError, match="line 1"):
        read_lengths(["not json"], "n")


def test_command_line_writes_records(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    with sse_server(Behaviour()) as url:
        rc = main(
            [
                "--target",
                f"node1={url}",
                "--model",
                "m",
                "--concurrency",
                "2",
                "--requests",
                "4",
                "--out",
                str(out),
            ]
        )
    assert rc == 0 and len(out.read_text().splitlines()) == 4


def test_level_specs_follow_the_plan(tmp_path: Path) -> None:
    from orchestrator.models.serving import ServingWorkload

    w = ServingWorkload.model_validate(
        {
            "name": "chat",
            "engine": "external",
            "url": "http://127.0.0.1:1",
            "model": {"name": "m"},
            "load": {
                "concurrency": [4, 1],
                "rates": [0.5],
                "input_tokens": {"kind": "uniform", "min": 4, "max": 9},
                "output_tokens": {"kind": "dataset", "path": "/data/lens.jsonl", "field": "out"},
                "requests": 20,
                "warmup_requests": 2,
                "seed": 3,
            },
        }
    )
    targets = [Target("node1", "http://127.0.0.1:1")]
    specs = level_specs(w, targets, datasets={("/data/lens.jsonl", "out"): [5, 7]})
    assert [s.level for s in specs] == ["c1", "c4", "r0.5"]
    s = specs[0]
    assert (
        len(s.input_tokens) == 22
        and all(4 <= x <= 9 for x in s.input_tokens)
        and len(set(s.input_tokens)) > 1
    )
    assert (
        s.input_tokens == level_specs(w, targets, datasets={("/data/lens.jsonl", "out"): [5]})[0].input_tokens
    )
    assert s.output_tokens[:4] == [5, 7, 5, 7] and s.model == "m" and s.warmup == 2 and s.requests == 20
    with pytest.raises(ValueError, match=r"no lengths read from /data/lens\.jsonl"):
        level_specs(w, targets)
    assert {x.burstiness for x in specs} == {1.0}
    load = w.load.model_dump()
    bursty = w.model_copy(update={"load": type(w.load).model_validate({**load, "burstiness": 0.5})})
    lens: dict[tuple[str, str], Sequence[int]] = {("/data/lens.jsonl", "out"): [5]}
    assert [x.burstiness for x in level_specs(bursty, targets, datasets=lens)] == [0.5] * 3
    closed = {**load, "rates": [], "burstiness": 0.5}
    with pytest.raises(ValueError, match=r"burstiness 0\.5 shapes open-loop arrivals: give rates too"):
        type(w.load).model_validate(closed)


def test_serving_smoke_level_against_the_double_gives_its_figures() -> None:
    """The built-in plan's first level, end to end on the double: plan -> specs -> records -> figures."""
    from orchestrator.metrics.serving import summarize_level
    from orchestrator.plan import load_plan

    w = load_plan("serving-smoke").serving[0]
    b = Behaviour(ttft_s=0.01, itl_s=0.002)
    with sse_server(b) as url:
        first = level_specs(w, [Target("node1", url)])[0]
        recs = run_level(first)
    s = summarize_level(recs, w.slos)
    assert s.level == "c1" and s.n == w.load.requests and s.ok == s.n
    assert len(recs) == w.load.requests + w.load.warmup_requests
    assert s.ttft_ms.p99 is not None and s.ttft_ms.p99 >= b.ttft_s * 1e3 - 1
    assert s.slo_attainment == 1.0 and all(c.met for c in s.slos)


def test_a_request_longer_than_the_model_is_refused_before_it_is_sent() -> None:
    from orchestrator.workloads.loadgen import REFUSED

    b = Behaviour()
    with sse_server(b) as url:
        recs = run_level(spec(url, input_tokens=[8, 500, 8], output_tokens=[5], requests=6, max_model_len=64))
    refused = [r for r in recs if r.status == "error"]
    assert len(recs) == 6 and len(refused) == 2  # requests 1 and 4 carry 500 input tokens
    assert all(r.input_tokens == 500 and r.error is not None and r.error.startswith(REFUSED) for r in refused)
    assert "500 + output 5 tokens > max_model_len 64" in (refused[0].error or "")
    assert b.requests == 4  # the engine saw only the 4 that fit
    assert all(r.status == "ok" for r in recs if r.input_tokens == 8)


def test_a_plan_whose_lengths_cannot_fit_the_model_is_refused_naming_them() -> None:
    from orchestrator.models.serving import ServingWorkload

    doc = {
        "name": "long",
        "engine": "external",
        "url": "http://127.0.0.1:1",
        "model": {"name": "m", "max_model_len": 512},
        "load": {
            "concurrency": [1],
            "input_tokens": {"kind": "uniform", "min": 400, "max": 500},
            "output_tokens": {"kind": "fixed", "tokens": 16},
            "requests": 10,
        },
    }
    too_long = r"input up to 500 \+ output up to 16 tokens exceed model\.max_model_len 512"
    with pytest.raises(ValueError, match=too_long):
        ServingWorkload.model_validate(doc)
    doc["load"]["input_tokens"]["max"] = 496  # type: ignore[index]
    w = ServingWorkload.model_validate(doc)
    assert level_specs(w, [Target("node1", "http://127.0.0.1:1")])[0].max_model_len == 512


def test_a_trace_is_replayed_in_its_pattern_at_each_levels_rate() -> None:
    from orchestrator.workloads.loadgen import trace_offsets

    # a bursty trace: 4 arrivals 0.1 s apart, then a 3.7 s pause; 9 gaps over 12 s: 0.75 per second
    times = [0.0, 0.1, 0.2, 0.3, 4.0, 4.1, 4.2, 4.3, 8.0, 12.0]
    got = list(itertools.islice(trace_offsets(times, rate=1.5), 10))
    # twice the trace's own rate: the first at once, every gap halved, in the file's order
    assert got == pytest.approx([(t - times[0]) / 2 for t in times])
    # the trace starts again after one mean gap (12 s / 9, halved), without end
    more = list(itertools.islice(trace_offsets(times, rate=1.5), 22))
    assert more[10] - more[9] == pytest.approx(12 / 9 / 2)
    assert more[11] - more[10] == pytest.approx(0.05)
    # at the trace's own rate it is the trace itself; unsorted times are sorted
    native = list(itertools.islice(trace_offsets(list(reversed(times)), rate=0.75), 10))
    assert native == pytest.approx([t - times[0] for t in times])
    with pytest.raises(ValueError, match="2 or more distinct times"):
        next(trace_offsets([5.0, 5.0], rate=1.0))


def test_read_trace_takes_seconds_or_milliseconds_and_names_a_bad_line() -> None:
    from orchestrator.workloads.loadgen import read_trace

    lines = ['{"timestamp": 0, "input_length": 10}', "", '{"timestamp": 1500}', '{"timestamp": 2500.5}']
    assert read_trace(lines, "timestamp", "ms") == pytest.approx([0.0, 1.5, 2.5005])
    assert read_trace(lines, "timestamp", "s") == [0, 1500, 2500.5]
    with pytest.raises(ValueError, match=r"mooncake\.jsonl line 2: timestamp must be a number, got 'x'"):
        read_trace(['{"timestamp": 1}', '{"timestamp": "x"}'], "timestamp", "s", source="mooncake.jsonl")
    with pytest.raises(ValueError, match="line 1: no number 'ts'"):
        read_trace(['{"timestamp": 1}'], "ts", "s")
    with pytest.raises(ValueError, match="found 1"):
        read_trace(['{"timestamp": 1}'], "timestamp", "s")


def test_a_trace_reaches_the_rate_levels_only_and_must_be_read(tmp_path: Path) -> None:
    from orchestrator.models.serving import ServingWorkload

    doc: dict[str, Any] = {
        "name": "replay",
        "engine": "external",
        "url": "http://127.0.0.1:1",
        "model": {"name": "m"},
        "load": {
            "concurrency": [2],
            "rates": [1.0, 4.0],
            "trace": {"path": "/data/mooncake.jsonl", "unit": "ms"},
            "input_tokens": {"kind": "fixed", "tokens": 8},
            "output_tokens": {"kind": "fixed", "tokens": 4},
            "requests": 10,
        },
    }
    w = ServingWorkload.model_validate(doc)
    targets = [Target("node1", "http://127.0.0.1:1")]
    specs = level_specs(w, targets, trace=[0.0, 1.0, 3.0])
    times = [0.0, 1.0, 3.0]
    assert [(s.level, s.trace) for s in specs] == [("c2", None), ("r1", times), ("r4", times)]
    with pytest.raises(ValueError, match=r"no arrival times read from /data/mooncake\.jsonl"):
        level_specs(w, targets)
    with pytest.raises(ValueError, match="give trace or burstiness, not both"):
        ServingWorkload.model_validate({**doc, "load": {**doc["load"], "burstiness": 2.0}})
    with pytest.raises(ValueError, match="is replayed at each rate: give rates too"):
        ServingWorkload.model_validate({**doc, "load": {**doc["load"], "rates": []}})


def test_plan_data_files_are_read_as_regular_files_within_a_limit(tmp_path: Path) -> None:
    import errno
    import os

    from orchestrator.safefs import read_regular

    f = tmp_path / "lens.jsonl"
    f.write_bytes(b"x" * 100)
    assert read_regular(f, max_bytes=100) == b"x" * 100
    with pytest.raises(OSError) as big:
        read_regular(f, max_bytes=99)
    assert big.value.errno == errno.EFBIG and "larger than 99 bytes" in str(big.value)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(fifo, max_bytes=100)
