"""Why a request did not succeed (RequestRecord.reason) against the stand-in SSE server
(tests/unit/sse_server.py), the level's timeout and truncated-stream rates computed from them, and
records and summaries of older runs (without reason or the rates) still read."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from sse_server import HOLD_TOKENS, Behaviour, sse_server
from test_loadgen import run_level, spec

from orchestrator.metrics.serving import level_lines, summarize_level
from orchestrator.models.serving_results import IN_FLIGHT_BOUND_ERROR, LevelSummary, RequestRecord
from orchestrator.workloads.loadgen import LoadGenerator, stream_cut


def one(b: Behaviour, **kw: object) -> RequestRecord:
    with sse_server(b) as url:
        (r,) = run_level(spec(url, concurrency=1, requests=1, **kw))
    return r


def test_a_complete_stream_has_no_reason() -> None:
    r = one(Behaviour())
    assert (r.status, r.reason, r.error) == ("ok", None, None)


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize(
    ("b", "says"),
    [
        (Behaviour(done=False, truncate_after=2), "without [DONE] or a finish_reason, after 2 of 5"),
        (Behaviour(truncate_after=2, truncate_end="done"), "[DONE] but no finish_reason, after 2 of 5"),
        (Behaviour(truncate_after=2, truncate_end="error"), "stream error event: engine core died"),
        (Behaviour(finish=None), "[DONE] but no finish_reason, after 5 of 5"),
        (Behaviour(truncate_after=2, truncate_end="finish", finish="abort"), "'abort' after 2 of 5"),
    ],
    ids=["closed", "done-only", "error-event", "no-finish-reason", "abort-early"],
)
def test_a_stream_that_ends_early_is_truncated_not_ok(api: str, b: Behaviour, says: str) -> None:
    r = one(b, api=api)
    assert (r.status, r.reason) == ("error", "truncated") and says in (r.error or ""), r.error


@pytest.mark.parametrize(
    "b",
    [
        Behaviour(truncate_after=2, truncate_end="finish", finish="stop"),  # end of sequence early
        Behaviour(finish="abort"),  # an unusual finish_reason, but every requested token came
        Behaviour(done=False),  # transformers serve: the finish chunk, no [DONE]
    ],
    ids=["stop-early", "abort-complete", "no-done"],
)
def test_a_stream_the_engine_says_is_complete_is_ok(b: Behaviour) -> None:
    r = one(b)
    assert (r.status, r.reason) == ("ok", None)


def test_stream_cut_rule() -> None:
    assert stream_cut("length", True, 1, 5) is None and stream_cut("stop", False, 0, 5) is None
    assert stream_cut("abort", True, 5, 5) is None
    assert stream_cut("abort", True, 4, 5) is not None and stream_cut(None, True, 5, 5) is not None


def test_http_connection_and_refused_reasons() -> None:
    with sse_server(Behaviour(fail_every=1)) as url:
        (r,) = run_level(spec(url, concurrency=1, requests=1))
    assert (r.status, r.reason, r.http_status) == ("error", "http", 500)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    (r,) = run_level(spec(f"http://127.0.0.1:{port}", concurrency=1, requests=1))
    assert (r.status, r.reason) == ("error", "connection")
    (r,) = run_level(spec(f"http://127.0.0.1:{port}", concurrency=1, requests=1, max_model_len=10))
    assert (r.status, r.reason) == ("error", "refused") and (r.error or "").startswith("refused before")


def test_timeout_and_cancelled_reasons() -> None:
    r = one(Behaviour(ttft_s=6.0), timeout_s=0.3)
    assert (r.status, r.reason) == ("aborted", "timeout")
    b = Behaviour()
    recs: list[RequestRecord] = []
    with sse_server(b) as url:
        gen = LoadGenerator(spec(url, output_tokens=[HOLD_TOKENS], concurrency=1, requests=3), recs.append)
        t = threading.Thread(target=gen.run)
        t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and b.requests < 1:
            time.sleep(0.01)
        gen.stop()
        t.join(10)
    assert [(r.status, r.reason) for r in recs] == [("aborted", "cancelled")]


def test_level_rates_from_live_records() -> None:
    """Two levels: every stream cut short ([DONE] after 1 token), and every 3rd request an HTTP error."""
    with sse_server(Behaviour(truncate_after=1, truncate_end="done")) as url:
        s = summarize_level(run_level(spec(url, requests=4)))
    assert (s.truncated_rate, s.error_rate, s.timeout_rate, s.abort_rate) == (1.0, 1.0, 0.0, 0.0)
    assert s.reasons == {"truncated": 4} and s.ok == 0
    with sse_server(Behaviour(fail_every=3)) as url:
        s = summarize_level(run_level(spec(url, concurrency=1, requests=6)))
    assert (s.truncated_rate, s.error_rate, s.timeout_rate) == (0.0, 2 / 6, 0.0) and s.reasons == {"http": 2}


def rec(i: int, status: str = "ok", reason: str | None = None, error: str | None = None) -> dict[str, object]:
    d: dict[str, object] = {
        "id": i, "level": "c2", "server": "node1", "send": 1000.0 + i, "end": 1000.5 + i, "status": status,
        "input_tokens": 8, "output_tokens": 5, "requested_output_tokens": 5,
        "first_token": 1000.1 + i, "token_times": [1000.1 + i, 1000.2 + i],
    }  # fmt: skip
    if reason is not None:
        d["reason"] = reason
    if error is not None:
        d["error"] = error
    return d


def test_rates_count_reasons_as_parts_of_error_and_abort_rates() -> None:
    recs = [rec(i) for i in range(5)]
    recs += [rec(5, "aborted", "timeout"), rec(6, "aborted", "cancelled"), rec(7, "error", "truncated")]
    recs += [rec(8, "error", "truncated"), rec(9, "error", "http")]
    s = summarize_level(RequestRecord.model_validate(r) for r in recs)
    assert (s.n, s.ok, s.errors, s.aborted) == (10, 5, 3, 2)
    assert (s.error_rate, s.abort_rate, s.timeout_rate, s.truncated_rate) == (0.3, 0.2, 0.1, 0.2)
    assert s.reasons == {"cancelled": 1, "http": 1, "timeout": 1, "truncated": 2}
    assert "errors 3, aborted 2 (cancelled 1, http 1, timeout 1, truncated 2)," in level_lines(s)[0]


def test_old_records_without_reason_read_and_get_one_from_their_error() -> None:
    old = [
        rec(0),
        rec(1, "aborted", error="request timeout 0.3s"),
        rec(2, "aborted", error="cancelled: the level stopped"),
        rec(3, "error", error="stream ended without [DONE] or a finish_reason"),
        rec(4, "error", error="HTTP 500: engine overloaded"),
        rec(5, "error", error=IN_FLIGHT_BOUND_ERROR),
        rec(6, "error", error="ConnectionRefusedError: [Errno 111] Connection refused"),
        rec(7, "error", error="something new"),
    ]
    got = [RequestRecord.model_validate_json(json.dumps(r)).reason for r in old]
    assert got == [None, "timeout", "cancelled", "truncated", "http", "refused", "connection", None]
    s = summarize_level(RequestRecord.model_validate_json(json.dumps(r)) for r in old)
    assert (s.timeout_rate, s.truncated_rate) == (1 / 8, 1 / 8)


def test_old_level_summary_without_the_rates_reads() -> None:
    s = summarize_level(RequestRecord.model_validate(r) for r in [rec(0), rec(1, "aborted", "timeout")])
    old = json.loads(s.model_dump_json())
    for k in ("timeout_rate", "truncated_rate", "reasons"):
        del old[k]
    back = LevelSummary.model_validate_json(json.dumps(old))
    assert back.timeout_rate is None and back.truncated_rate is None and back.reasons == {}
    assert back.abort_rate == 0.5
