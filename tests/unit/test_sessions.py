"""Agentic multi-turn sessions (workloads/sessions.py) against the stand-in streaming server
(tests/unit/sse_server.py, a test double, not an engine): what the server receives grows turn by
turn, the records carry session and turn, per-turn TTFT, the refusal over max_model_len before a
turn is sent, and the prefix-cache hit rate from Prometheus counters (or why there is none)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sse_server import Behaviour, sse_server
from test_serving_run import setup

from orchestrator.cli.plan import serving_summary
from orchestrator.errors import EXIT_OK
from orchestrator.metrics.serving import level_lines, summarize_level
from orchestrator.models.serving import AgenticSessions, ServingWorkload
from orchestrator.models.serving_results import RequestRecord
from orchestrator.plan import load_levels
from orchestrator.report.serving import serving_html, serving_markdown, turn_rows
from orchestrator.runs.scale_test import scale_test
from orchestrator.scheduler.local import free_port
from orchestrator.store.load import load_run
from orchestrator.workloads.loadgen import REFUSED, LoadSpec, Target, level_specs
from orchestrator.workloads.sessions import (
    SessionGenerator,
    counter_sum,
    generator_for,
    prefix_cache,
    prefix_cache_counters,
)


def sessions_spec(url: str, *, api: str = "chat", max_model_len: int | None = None, **kw: Any) -> LoadSpec:
    ss = AgenticSessions(**{"sessions": 3, "turns": 4, "system_prompt_tokens": 5, **kw})
    return LoadSpec(
        targets=[Target("node1", url)], model="m", input_tokens=[3], output_tokens=[2],
        concurrency=ss.concurrency or ss.sessions, requests=ss.sessions * ss.turns, warmup=ss.warmup_sessions,
        api=api, sessions=ss, max_model_len=max_model_len,
    )  # fmt: skip


def run(spec: LoadSpec) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    lock = threading.Lock()

    def emit(r: RequestRecord) -> None:
        with lock:
            out.append(r)

    generator_for(spec, emit).run()
    return out


def session_of(body: dict[str, Any]) -> str:
    """The session marker of a request's first user message: s<k>t0."""
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    return users[0].split()[0]


def test_each_turn_resends_the_growing_history_behind_the_shared_system_prompt() -> None:
    b = Behaviour()
    with sse_server(b) as url:
        recs = run(sessions_spec(url))
    assert len(b.bodies) == 12 and len(recs) == 12
    by_session: dict[str, list[dict[str, Any]]] = {}
    for body in b.bodies:
        by_session.setdefault(session_of(body), []).append(body)
    assert sorted(by_session) == ["s0t0", "s1t0", "s2t0"]
    system = {"role": "system", "content": " ".join(["hello"] * 5)}
    for marker, bodies in by_session.items():
        bodies.sort(key=lambda x: len(x["messages"]))
        for t, body in enumerate(bodies):
            msgs = body["messages"]
            # the system prompt, then t earlier (user, answer) pairs, then this turn's message
            assert msgs[0] == system and len(msgs) == 2 + 2 * t
            assert msgs[-1]["role"] == "user" and msgs[-1]["content"].split()[0] == f"{marker[:-1]}{t}"
            if t:
                before = bodies[t - 1]["messages"]
                # the server saw the previous turn's messages again, and the answer it streamed
                assert msgs[: len(before)] == before
                assert msgs[len(before)] == {"role": "assistant", "content": " t0 t1"}
    # the records: session and turn, and input tokens (the server's usage) growing turn by turn
    assert {(r.session, r.turn) for r in recs} == {(s, t) for s in range(3) for t in range(4)}
    for s in range(3):
        mine = sorted((r for r in recs if r.session == s), key=lambda r: r.turn or 0)
        inputs = [r.input_tokens for r in mine]
        assert inputs == sorted(inputs) and len(set(inputs)) == 4, inputs


def test_completions_prompts_grow_with_the_history() -> None:
    b = Behaviour()
    with sse_server(b) as url:
        run(sessions_spec(url, api="completions", sessions=1, turns=3))
    prompts = [body["prompt"] for body in b.bodies]
    assert len(prompts) == 3
    assert prompts[1].startswith(prompts[0]) and prompts[2].startswith(prompts[1])
    assert " t0 t1" in prompts[1] and len(prompts[2]) > len(prompts[1]) > len(prompts[0])


def test_per_turn_ttft_has_one_entry_per_turn_with_its_n() -> None:
    with sse_server(Behaviour(ttft_s=0.01)) as url:
        recs = run(sessions_spec(url, warmup_sessions=1))
    assert sum(r.warmup for r in recs) == 4 and len(recs) == 16
    s = summarize_level(recs)
    assert s.level == "s3x4" and s.n == 12
    assert [t.turn for t in s.per_turn] == [0, 1, 2, 3]
    assert all(t.n == 3 and t.ok == 3 and t.ttft_ms.n == 3 for t in s.per_turn)
    means = [t.input_tokens_mean for t in s.per_turn]
    assert all(m is not None for m in means) and means == sorted(means)
    text = "\n".join(level_lines(s))
    assert "turn 0: 3/3 ok" in text and "turn 3: 3/3 ok" in text and "(n=3)" in text


def test_a_turn_over_max_model_len_is_refused_before_sending_and_ends_its_session() -> None:
    # turn 0: 5 + 3 words; turn 1: the usage's 8 + 2 answer tokens + 3 = 13 (+2 out = 15); turn 2:
    # more than 15 + 2 out: refused with max_model_len 16
    b = Behaviour()
    with sse_server(b) as url:
        recs = run(sessions_spec(url, max_model_len=16, sessions=2))
    assert len(b.bodies) == 4  # turns 0 and 1 of each session reached the server, nothing later
    refused = [r for r in recs if r.error and r.error.startswith(REFUSED)]
    assert len(refused) == 2 and {r.turn for r in refused} == {2} and {r.status for r in refused} == {"error"}
    assert all("max_model_len 16" in (r.error or "") for r in refused)
    assert not [r for r in recs if (r.turn or 0) > 2]


def test_think_time_separates_a_turn_from_the_answer_before_it() -> None:
    with sse_server(Behaviour()) as url:
        recs = run(sessions_spec(url, sessions=1, turns=3, think_time_s=0.05))
    recs.sort(key=lambda r: r.turn or 0)
    # a lower bound only: the next turn cannot start before the answer ended plus the think time
    assert all(b.send >= a.end + 0.05 for a, b in itertools.pairwise(recs))


def test_a_failed_turn_ends_its_session() -> None:
    b = Behaviour(fail_every=2)
    with sse_server(b) as url:
        recs = run(sessions_spec(url, sessions=1, turns=4))
    assert [r.status for r in sorted(recs, key=lambda r: r.turn or 0)] == ["ok", "error"]


def test_the_session_level_follows_the_others_in_the_plan() -> None:
    w = ServingWorkload.model_validate({
        "name": "agent", "engine": "external", "url": "http://127.0.0.1:8000",
        "model": {"name": "m", "max_model_len": 512},
        "load": {"concurrency": [1], "input_tokens": {"kind": "fixed", "tokens": 16},
                 "output_tokens": {"kind": "fixed", "tokens": 8}, "requests": 10, "warmup_requests": 2,
                 "sessions": {"sessions": 4, "turns": 5, "system_prompt_tokens": 64, "concurrency": 2,
                              "warmup_sessions": 1}},
    })  # fmt: skip
    assert load_levels(w) == ["c1", "s4x5"]
    assert "sessions s4x5: 4 sessions of 5 turns, 2 at once, system prompt 64 tokens" in serving_summary(w)
    specs = level_specs(w, [Target("a", "http://127.0.0.1:8000")])
    assert [s.level for s in specs] == ["c1", "s4x5"]
    ss = specs[1]
    assert ss.concurrency == 2 and ss.warmup == 1 and ss.requests == 20 and ss.max_model_len == 512
    assert isinstance(generator_for(ss, lambda r: None), SessionGenerator)
    assert not isinstance(generator_for(specs[0], lambda r: None), SessionGenerator)


def test_a_first_turn_over_max_model_len_is_refused_with_the_plan() -> None:
    with pytest.raises(ValidationError, match="first turn"):
        ServingWorkload.model_validate({
            "name": "agent", "engine": "external", "url": "http://127.0.0.1:8000",
            "model": {"name": "m", "max_model_len": 512},
            "load": {"input_tokens": {"kind": "fixed", "tokens": 16},
                     "output_tokens": {"kind": "fixed", "tokens": 8}, "requests": 10,
                     "sessions": {"sessions": 4, "turns": 5, "system_prompt_tokens": 500}},
        })  # fmt: skip


# -- the prefix cache --------------------------------------------------------------------------

# Constructed for this test in Prometheus's text exposition format (not a recorded engine output):
# two label sets of each counter, as with two models or engines behind one endpoint.
METRICS = """# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
vllm:prefix_cache_hits_total{{engine="1",model_name="m"}} 10.0
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}
vllm:prefix_cache_queries_total{{engine="1",model_name="m"}} 40.0
vllm:prefix_cache_queries_created{{engine="0",model_name="m"}} 1.7e9
"""


@contextmanager
def metrics_server(state: dict[str, str]) -> Iterator[str]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            data = state["text"].encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_counter_sum_adds_label_sets_and_ignores_other_series() -> None:
    text = METRICS.format(hits=5, queries=60)
    assert counter_sum(text, "vllm:prefix_cache_hits") == 15.0
    assert counter_sum(text, "vllm:prefix_cache_queries") == 100.0
    assert counter_sum(text, "vllm:num_requests_running") is None


def test_the_hit_rate_is_the_change_of_the_counters_over_the_level() -> None:
    counters = ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries")
    state = {"text": METRICS.format(hits=5, queries=60)}
    with metrics_server(state) as url:
        before = prefix_cache_counters([url], counters)
        state["text"] = METRICS.format(hits=35, queries=100)
        after = prefix_cache_counters([url], counters)
    pc = prefix_cache("vllm", counters, before, after)
    assert pc.hits == 30 and pc.queries == 40 and pc.hit_rate == pytest.approx(0.75)


def test_no_hit_rate_is_said_why_never_zero() -> None:
    counters = ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries")
    pc = prefix_cache("transformers", None, None, None)
    assert pc.hit_rate is None and pc.note == "not exposed by transformers"
    with sse_server(Behaviour()) as url:  # the stand-in has no /metrics
        got = prefix_cache_counters([url], counters)
    assert isinstance(got, str) and "/metrics" in got
    pc = prefix_cache("vllm", counters, got, got)
    assert pc.hit_rate is None and pc.note == got
    state = {"text": "# nothing\n"}
    with metrics_server(state) as url:
        got = prefix_cache_counters([url], counters)
    assert isinstance(got, str) and "has no vllm:prefix_cache_hits" in got
    quiet = prefix_cache("vllm", counters, (1.0, 2.0), (1.0, 2.0))
    assert quiet.hit_rate is None and quiet.note == "no prefix-cache queries in the level"


# -- a serving step with a session level, end to end on the local backend -----------------------

PLAN = """
name: agentic
collectives: []
serving:
  - name: fake
    engine: transformers
    model: {path: /opt/orch/models/fake, max_model_len: 512}
    dtype: float32
    load:
      concurrency: [1]
      input_tokens: {kind: fixed, tokens: 8}
      output_tokens: {kind: fixed, tokens: 4}
      requests: 4
      request_timeout_s: 30
      sessions: {sessions: 3, turns: 3, system_prompt_tokens: 16, warmup_sessions: 1}
    health_timeout_s: 60
step_timeout_s: 300
"""


def test_a_serving_step_runs_the_session_level_and_reports_per_turn_and_the_cache(tmp_path: Path) -> None:
    req, _ = setup(tmp_path)
    Path(req.plan).write_text(PLAN)
    result = scale_test(req)
    assert result.exit_code == EXIT_OK, [r.reasons for r in result.serving]
    (step,) = result.serving
    levels = {lv.level: lv for lv in step.levels}
    assert list(levels) == ["c1", "s3x3"]
    s = levels["s3x3"].summary
    assert s is not None and s.n == 9 and [t.n for t in s.per_turn] == [3, 3, 3]
    pc = levels["s3x3"].prefix_cache
    assert pc is not None and pc.hit_rate is None and pc.note == "not exposed by transformers"
    assert levels["c1"].prefix_cache is None and levels["c1"].summary is not None
    assert levels["c1"].summary.per_turn == []
    lines = (result.run_dir / "steps/fake-r1/records-s3x3.jsonl").read_text().splitlines()
    assert len(lines) == 12  # one warm-up session and three counted, of three turns each
    # the report: TTFT per turn with its n, and the prefix cache said to be not exposed
    rec = load_run(result.run_dir)
    md = "\n".join(serving_markdown(rec))
    assert "### Agentic sessions: TTFT per turn" in md and "not exposed by transformers" in md
    rows = [r for r in turn_rows(rec) if r[1] == "s3x3"]
    assert [r[2] for r in rows] == ["0", "1", "2"] and all(r[3] == "3" and r[9] == "3" for r in rows)
    assert 'id="serving-turns"' in str(serving_html(rec))


def test_a_session_stays_on_one_replica() -> None:
    b1, b2 = Behaviour(), Behaviour()
    with sse_server(b1) as u1, sse_server(b2) as u2:
        spec = sessions_spec(u1, sessions=4, turns=3)
        spec.targets = [Target("n1", u1), Target("n2", u2)]
        recs = run(spec)
    servers = {s: {r.server for r in recs if r.session == s} for s in range(4)}
    assert servers == {0: {"n1"}, 1: {"n2"}, 2: {"n1"}, 3: {"n2"}}
    assert len(b1.bodies) == len(b2.bodies) == 6


def sessions_only(**sessions: Any) -> dict[str, Any]:
    return {
        "name": "agent", "engine": "external", "url": "http://127.0.0.1:8000", "model": {"name": "m"},
        "load": {"input_tokens": {"kind": "fixed", "tokens": 16},
                 "output_tokens": {"kind": "fixed", "tokens": 8}, "sessions": sessions},
        "slos": {"ttft_p99_ms": 1000},
    }  # fmt: skip


def test_a_sessions_only_load_counts_its_sessions_for_p99() -> None:
    w = ServingWorkload.model_validate(sessions_only(sessions=25, turns=4))  # no load.requests needed
    (spec,) = level_specs(w, [Target("a", "http://127.0.0.1:8000")])
    assert spec.requests == 100 and spec.level == "s25x4"
    with pytest.raises(ValidationError, match=r"sessions x turns >= 100 in the session level \(got 99\)"):
        ServingWorkload.model_validate(sessions_only(sessions=33, turns=3))


def test_a_dead_engine_costs_each_session_one_failed_turn() -> None:
    port = free_port()  # nothing listens there: connection refused
    recs = run(sessions_spec(f"http://127.0.0.1:{port}", sessions=3, turns=5))
    assert sorted((r.session, r.turn, r.status) for r in recs) == [(k, 0, "error") for k in range(3)]
    assert all(r.http_status is None for r in recs)
