"""Several load generator processes (orchestrator.workloads.loadgen_multi): the schedule split
covers every request once, the records of several hosts merge onto one clock by injected offsets
(the lab's nodes share one clock), and a P=2 level against the streaming double
(tests/unit/sse_server.py) records every request once, with its process and the shared schedule."""

from __future__ import annotations

import itertools
import statistics
import threading
import time

import pytest
from sse_server import HOLD_TOKENS, Behaviour, sse_server

from orchestrator.metrics.capacity import generator_limit
from orchestrator.models.serving_results import RequestRecord
from orchestrator.workloads.loadgen import LoadSpec, Target, arrival_offsets
from orchestrator.workloads.loadgen_multi import (
    ClockSample,
    MultiLoadGenerator,
    clock_offset,
    draw_schedule,
    merge_records,
    share_spec,
    split_schedule,
)


def spec(url: str = "http://127.0.0.1:9", **kw: object) -> LoadSpec:
    base: dict[str, object] = {"targets": [Target("node1", url)], "model": "m", "input_tokens": [8],
                               "output_tokens": [4], "rate": 100.0, "requests": 40, "seed": 3}  # fmt: skip
    base.update(kw)
    return LoadSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("n", "procs"), [(0, 1), (1, 4), (7, 3), (40, 4), (101, 16)])
def test_the_split_gives_every_scheduled_request_to_exactly_one_process(n: int, procs: int) -> None:
    offsets = list(itertools.islice(arrival_offsets(50.0, seed=n), n))
    shares = split_schedule(offsets, procs)
    assert len(shares) == procs
    ids = sorted(i for share in shares for i, _ in share)
    assert ids == list(range(n))
    assert all(offsets[i] == o for share in shares for i, o in share)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1  # spread evenly
    with pytest.raises(ValueError, match="procs must be >= 1"):
        split_schedule(offsets, 0)


def test_the_schedule_is_the_one_a_single_process_draws_with_warmup_and_duration() -> None:
    s = spec(warmup=5, requests=30)
    single = list(itertools.islice(arrival_offsets(100.0, seed=3), 35))
    assert draw_schedule(s) == single
    timed = draw_schedule(spec(requests=None, duration_s=0.5, warmup=2))
    counted = timed[2:]
    assert counted and counted[-1] - counted[0] < 0.5
    longer = list(itertools.islice(arrival_offsets(100.0, seed=3), len(timed) + 1))
    assert timed == longer[:-1] and longer[-1] - counted[0] >= 0.5  # the next one is past the duration
    with pytest.raises(ValueError, match="closed loop"):
        draw_schedule(spec(rate=None, concurrency=2))


def test_a_closed_loop_share_has_its_part_of_concurrency_requests_and_bound() -> None:
    s = spec(rate=None, concurrency=8, requests=21, warmup=3, max_in_flight=100)
    parts = [share_spec(s, p, 4) for p in range(4)]
    assert [p.concurrency for p in parts] == [2, 2, 2, 2]
    assert sum(p.requests or 0 for p in parts) == 24 and {p.warmup for p in parts} == {0}
    assert {p.max_in_flight for p in parts} == {25}


def record(i: int, send: float, *, proc: int = 0) -> RequestRecord:
    return RequestRecord(id=i, level="r10", server="node1", send=send, scheduled=send - 0.001,
                         first_token=send + 0.1, token_times=[send + 0.1, send + 0.2], end=send + 0.3,
                         status="ok", input_tokens=8, output_tokens=2, requested_output_tokens=2,
                         proc=proc)  # fmt: skip


def test_records_of_several_hosts_merge_onto_the_reference_clock_by_their_offsets() -> None:
    # the same instants on the reference clock, read on hosts whose clocks run 2.5 s ahead and 1 s behind
    truth = {0: 100.0, 1: 100.05, 2: 100.1, 3: 100.15}
    offsets = {"client1": 2.5, "client2": -1.0}
    parts = {
        "client1": [record(i, truth[i] + 2.5, proc=i) for i in (0, 2)],
        "client2": [record(i, truth[i] - 1.0, proc=i) for i in (1, 3)],
    }
    merged = merge_records(parts, offsets)
    assert [r.id for r in merged] == [0, 1, 2, 3]  # by send on one clock, not by host
    for r in merged:
        assert r.send == pytest.approx(truth[r.id])
        assert r.scheduled == pytest.approx(truth[r.id] - 0.001)
        assert r.first_token == pytest.approx(truth[r.id] + 0.1)
        assert r.token_times == pytest.approx([truth[r.id] + 0.1, truth[r.id] + 0.2])
        assert r.end == pytest.approx(truth[r.id] + 0.3)
    assert [r.client for r in merged] == ["client1", "client2", "client1", "client2"]
    with pytest.raises(ValueError, match=r"no clock offset measured for client host\(s\) client2"):
        merge_records(parts, {"client1": 2.5})
    with pytest.raises(ValueError, match="request 0 of level r10 recorded by client1 and client2"):
        merge_records({"client1": [record(0, 1.0)], "client2": [record(0, 2.0)]}, offsets)


def test_the_clock_offset_is_taken_from_the_shortest_round_trip() -> None:
    # the host is 3 s ahead; the slow exchange's answer sat in a queue and would read 3.4 s
    samples = [ClockSample(sent=10.0, remote=13.9, received=11.0), ClockSample(10.0, 13.01, 10.02)]
    assert clock_offset(samples) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="no clock samples"):
        clock_offset([])
    with pytest.raises(ValueError, match="received before it was sent"):
        clock_offset([ClockSample(2.0, 5.0, 1.0)])


def test_two_processes_record_every_request_once_on_the_shared_schedule() -> None:
    with sse_server(Behaviour(ttft_s=0.01)) as url:
        s = spec(url, requests=40, warmup=4)
        recs: list[RequestRecord] = []
        gen = MultiLoadGenerator(s, recs.append, procs=2)
        gen.run()
    assert gen.procs == 2 and gen.start_wall is not None
    assert sorted(r.id for r in recs) == list(range(44))
    assert [(r.id, r.status, r.error) for r in recs if r.status != "ok"] == []
    assert all(r.proc == r.id % 2 for r in recs)
    assert sorted(r.id for r in recs if r.warmup) == [0, 1, 2, 3]
    # every record's scheduled time is the shared schedule's, whichever process sent it
    offsets = draw_schedule(s)
    for r in recs:
        assert r.scheduled is not None
        assert r.scheduled - gen.start_wall == pytest.approx(offsets[r.id], abs=0.005)
    # the late-sender check reads the merged records: on time here, and late when sends lag
    counted = [r for r in recs if not r.warmup]
    assert statistics.median(r.send - r.scheduled for r in counted if r.scheduled) < 0.5
    late = [r.model_copy(update={"send": r.send + 1.0}) for r in counted]
    assert generator_limit(late, 100.0)[1] is not None


def test_two_processes_split_a_closed_loop_level() -> None:
    with sse_server(Behaviour(ttft_s=0.005)) as url:
        recs: list[RequestRecord] = []
        gen = MultiLoadGenerator(
            spec(url, rate=None, concurrency=4, requests=18, warmup=2), recs.append, procs=3
        )
        gen.run()
    assert gen.procs == 2  # 3 does not divide the concurrency 4
    assert sorted(r.id for r in recs) == list(range(20)) and all(r.status == "ok" for r in recs)
    assert {r.proc for r in recs} == {0, 1} and all(r.proc == r.id % 2 for r in recs)
    assert sum(r.warmup for r in recs) == 2


def test_stop_aborts_the_requests_in_flight_in_every_process() -> None:
    b = Behaviour()
    with sse_server(b) as url:
        recs: list[RequestRecord] = []
        s = spec(url, rate=None, concurrency=2, requests=6, output_tokens=[HOLD_TOKENS])
        gen = MultiLoadGenerator(s, recs.append, procs=2)
        t = threading.Thread(target=gen.run)
        t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(b.bodies) < 2:  # one request held in each process
            time.sleep(0.02)
        gen.stop()
        t.join(30)
        b.hold.set()
    assert not t.is_alive()
    assert len(recs) == 2 and {r.proc for r in recs} == {0, 1}
    assert all(r.status == "aborted" for r in recs)
