"""The serving load generator: streaming requests to OpenAI-compatible engines, one record each.

    python -m orchestrator.workloads.loadgen --target node1=http://198.18.0.11:8000 \
        --model lab-tiny --concurrency 4 --requests 100 --warmup 4 --input-tokens 32 \
        --output-tokens 16 --out records.jsonl

Why orch has its own (docs/serving.md, "Load generation"): guidellm 0.8.1 installs 6 GB here
(torch with CUDA wheels, transformers, datasets, pyarrow, sanic) and keeps only the first and last
token times of a request, spacing the others evenly; vLLM's benchmark_serving needs vLLM. orch
needs every token's arrival, the node that served each request, and records written as they
happen, from the standard library alone: threads and http.client.

Each request is a POST to /v1/completions (or /v1/chat/completions) with stream=true; the answer
is read as server-sent events, line by line. Every `data:` event that carries a token is a token
arrival (see _event_token; engines may send several tokens in one event: the arrival count is then
below the token count, and output_tokens comes from the server's usage when it reports one, else
it is the arrival count). A stream ends well with a finish_reason in its last choice (then
`data: [DONE]` from vLLM and SGLang; `transformers serve` 5.24 sends no [DONE]): stop or length
(COMPLETE_FINISH), or another one with every requested token. Any other end is a truncated stream,
an error (stream_cut): no finish_reason, [DONE] or not, an error event in the stream, or the
connection lost after HTTP 200. Each failed record says why in its `reason` (FailureReason).
A record (models/serving_results.RequestRecord) is appended to the output file when its request
ends: one os.write of one line on an O_APPEND descriptor, so lines from threads never interleave
and a crash loses at most the requests still in flight.

Load: closed loop (`concurrency` workers, each sends its next request when the last one ends) or
open loop (Poisson arrivals at `rate` requests/s from a seeded generator; a request that would
exceed max_in_flight is recorded as an error, not queued, so the client never hides overload).
Warm-up requests run first, at the same load, and are recorded with warmup=true.

Decoding is greedy in every request, warm-up included: temperature 0 is sent (after any extra
field, so nothing overrides it). An engine that takes its sampling settings from the first request
it sees (`transformers serve --continuous-batching`) then samples no request at random. The
output-quality gate (workloads/quality.py) sends its own prompts through the same client (a
LoadSpec's `prompts`, the request's seed in `extra`) and gets each answer's text, token ids and
logprobs (on_output), where the engine streams them. Every wait is
bounded: connect and each read by the request timeout, the whole request by its deadline.
stop() aborts requests in flight (their sockets are shut down) and ends the level.

A closed-loop worker whose request failed without an HTTP answer (connection refused or reset:
an engine that died or is restarting) waits CONNECT_ERROR_PAUSE_S before its next request, so
that a dead engine costs a few records per worker and second, not a spin of thousands.
`counted` is set (and `counted_at`, orch's monotonic clock, noted) when the counted requests
start, after the warm-up: a serving step's faults count their `at_s` from there.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import json
import math
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from orchestrator.models.serving import (
    AgenticSessions,
    DatasetLengths,
    FixedLengths,
    ServingLoad,
    ServingWorkload,
    TokenLengths,
    check_http_url,
)
from orchestrator.models.serving_results import (
    IN_FLIGHT_BOUND_ERROR,
    FailureReason,
    RequestRecord,
    RequestStatus,
)

CONNECT_ERROR_PAUSE_S = 0.05
"""A closed-loop worker's pause after a request that got no HTTP answer (see the docstring)."""

PROMPT_WORD = " hello"
"""The prompt is this word repeated once per requested input token (one token in common BPE
vocabularies; the server's usage figure, when reported, is what the record keeps)."""


@dataclass(frozen=True)
class Target:
    """One engine: the node (or name) it runs on and its base URL (http://HOST:PORT)."""

    server: str
    url: str


REFUSED = "refused before sending"
"""The start of a record's error when orch did not send the request (it cannot fit the model)."""

CANCELLED = "cancelled: the level stopped"
"""The error of a request aborted by stop() (reason cancelled)."""

COMPLETE_FINISH = frozenset({"stop", "length", "tool_calls", "function_call"})
"""finish_reasons that say an answer is complete: vLLM, SGLang and `transformers serve` end with
stop (end of sequence or a stop string) or length (max_tokens); tool_calls and function_call end
an OpenAI chat answer. Any other (vLLM's and SGLang's abort, an error) is complete only with every
requested token (stream_cut)."""


class StreamError(Exception):
    """An error event inside an answer stream (vLLM sends `data: {"error": {...}}` then `data:
    [DONE]` when a request fails after its HTTP 200): the answer ended before its finish_reason."""


def stream_cut(finish: str | None, done: bool, tokens: int, requested: int) -> str | None:
    """Why an answer stream that ended without an error is cut short (reason truncated), or None
    when it is complete: a finish_reason in COMPLETE_FINISH, or another finish_reason with every
    requested token. A stream without a finish_reason is cut short, [DONE] or not: every engine orch
    drives (OpenAI-compatible SSE) sends one in the last choice before [DONE] or the end."""
    if finish in COMPLETE_FINISH or (finish is not None and tokens >= requested):
        return None
    if finish is not None:
        return f"stream ended with finish_reason {finish!r} after {tokens} of {requested} tokens"
    if done:
        return f"stream ended with [DONE] but no finish_reason, after {tokens} of {requested} tokens"
    return f"stream ended without [DONE] or a finish_reason, after {tokens} of {requested} tokens"


@dataclass
class LoadSpec:
    """One load level. Exactly one of concurrency and rate is set; requests and/or duration_s."""

    targets: Sequence[Target]
    model: str
    input_tokens: Sequence[int]
    output_tokens: Sequence[int]
    concurrency: int | None = None
    rate: float | None = None
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    api: str = "completions"
    timeout_s: float = 120.0
    max_in_flight: int = 1024
    seed: int = 0
    ignore_eos: bool = False
    extra: dict[str, object] = field(default_factory=dict)
    burstiness: float = 1.0
    max_model_len: int | None = None
    trace: Sequence[float] | None = None  # arrival times (s) to replay at `rate`, instead of Poisson
    prompts: Sequence[str] = ()
    """When given, request i sends prompts[i % len] instead of the repeated PROMPT_WORD."""
    sessions: AgenticSessions | None = None
    """Multi-turn sessions (workloads/sessions.py runs them; concurrency is the sessions at once)."""
    procs: int = 1
    """Generator processes (workloads/loadgen_multi.py); sessions.generator_for picks the generator."""

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("give one of concurrency and rate")
        if self.requests is None and self.duration_s is None:
            raise ValueError("give requests, duration_s, or both")
        if not self.targets or not self.input_tokens or not self.output_tokens or "" in self.prompts:
            raise ValueError("targets, input_tokens, output_tokens and a prompt must not be empty")
        if self.api not in ("completions", "chat"):
            raise ValueError(f"api {self.api!r}: completions or chat")
        for t in self.targets:
            check_http_url(t.url)

    @property
    def level(self) -> str:
        if self.sessions is not None:
            return self.sessions.level
        return f"c{self.concurrency}" if self.concurrency is not None else f"r{self.rate:g}"


class LevelRunner(Protocol):
    """What runs one level: LoadGenerator, SessionGenerator (workloads/sessions.py) and
    MultiLoadGenerator (workloads/loadgen_multi.py). `counted` is set once the counted requests
    begin, at `counted_at` (orch's monotonic clock; it may be a moment ahead when set)."""

    counted: threading.Event
    counted_at: float | None

    def run(self) -> None: ...

    def stop(self) -> None: ...


class RecordWriter:
    """Appends one JSON line per record to a file: one os.write per line on an O_APPEND descriptor."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, rec: RequestRecord) -> None:
        data = (rec.model_dump_json() + "\n").encode()
        n = os.write(self._fd, data)
        if n != len(data):  # a regular file takes the whole line or raises; say so if not
            raise OSError(f"short write of a record: {n} of {len(data)} bytes")

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Clock:
    """Wall-clock times from one anchor plus the monotonic clock: comparable across records, and
    their differences never jump when the system clock is stepped."""

    def __init__(self) -> None:
        self._wall0 = time.time()
        self._mono0 = time.monotonic()

    def now(self) -> float:
        return self._wall0 + (time.monotonic() - self._mono0)

    def at(self, mono: float) -> float:
        """The wall-clock time of a monotonic instant (a scheduled arrival)."""
        return self._wall0 + (mono - self._mono0)


@dataclass
class StreamOutput:
    """What one answer said, gathered from its stream: the text, and the token ids and logprobs
    where the engine streamed them (None where it sent none)."""

    text: str = ""
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None

    def add(self, chunk: dict[str, object]) -> None:
        """Add one streamed chunk's text, token ids and logprobs (completions or chat shape)."""
        for choice in chunk.get("choices") or []:  # type: ignore[attr-defined]
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or {}
            text = choice["text"] if "text" in choice else delta.get("content")
            if isinstance(text, str):
                self.text += text
            ids = choice.get("token_ids")
            if isinstance(ids, list) and all(isinstance(x, int) for x in ids):
                self.token_ids = [*(self.token_ids or []), *ids]
            lps = _logprobs(choice.get("logprobs"))
            if lps is not None:
                self.logprobs = [*(self.logprobs or []), *lps]


def _logprobs(value: object) -> list[float] | None:
    """The token logprobs of a choice's `logprobs`: completions ({"token_logprobs": [...]}) or chat
    ({"content": [{"logprob": ...}, ...]}); None when it holds none."""
    if not isinstance(value, dict):
        return None
    if isinstance(lps := value.get("token_logprobs"), list):
        return [float(x) for x in lps if isinstance(x, int | float)]
    if isinstance(content := value.get("content"), list):
        return [
            float(c["logprob"])
            for c in content
            if isinstance(c, dict) and isinstance(c.get("logprob"), int | float)
        ]
    return None


class LoadGenerator:
    """Runs one level of a LoadSpec; `emit` gets every record as its request ends, and `on_output`
    (when given) the request's id and its StreamOutput just before (thread-safe callers only: both
    are called from worker threads)."""

    def __init__(
        self,
        spec: LoadSpec,
        emit: Callable[[RequestRecord], None],
        on_output: Callable[[int, StreamOutput], None] | None = None,
    ) -> None:
        self.spec = spec
        self._emit = emit
        self._on_output = on_output
        self._emit_lock = threading.Lock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[http.client.HTTPConnection] = set()
        self._next = 0
        self._in_flight = 0
        self._clock = _Clock()
        self._arrivals: Iterator[float] = iter(())
        if spec.rate is not None:
            self._arrivals = spec_arrivals(spec)
        self._deadline: float | None = None
        self.counted = threading.Event()
        self.counted_at: float | None = None

    # -- control ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Abort requests in flight and end the level (idempotent, from any thread)."""
        self._stop.set()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            sock = c.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        """Warm-up requests, then the counted ones; returns when the level is done or stopped."""
        s = self.spec
        if s.warmup:
            self._phase(s.warmup, None, warmup=True)
        if not self._stop.is_set():
            self.counted_at = time.monotonic()
            self.counted.set()
            self._phase(s.requests, s.duration_s, warmup=False)

    # -- phases ----------------------------------------------------------------------------------

    def _phase(self, count: int | None, duration_s: float | None, *, warmup: bool) -> None:
        self._deadline = None if duration_s is None else time.monotonic() + duration_s
        limit = self._next + count if count is not None else None
        if self.spec.concurrency is not None:
            workers = [
                threading.Thread(target=self._closed_worker, args=(limit, warmup), daemon=True)
                for _ in range(self.spec.concurrency)
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        else:
            self._open_loop(limit, warmup)

    def _schedule_start(self) -> float:
        """The monotonic instant the open loop's arrival offsets count from: now (a generator
        process of several, workloads/loadgen_multi.py, starts at the instant they share)."""
        return time.monotonic()

    def _take(self, limit: int | None) -> int | None:
        with self._lock:
            if self._stop.is_set() or (limit is not None and self._next >= limit) or self._past_deadline():
                return None
            i = self._next
            self._next += 1
            return i

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _closed_worker(self, limit: int | None, warmup: bool) -> None:
        while (i := self._take(limit)) is not None:
            if not self._one(i, warmup):
                self._stop.wait(CONNECT_ERROR_PAUSE_S)

    def _open_loop(self, limit: int | None, warmup: bool) -> None:
        assert self.spec.rate is not None
        threads: list[threading.Thread] = []
        t0 = self._schedule_start()
        for offset in self._arrivals:
            delay = t0 + offset - time.monotonic()
            scheduled = self._clock.at(t0 + offset)
            if delay > 0 and self._stop.wait(delay):
                break
            if (i := self._take(limit)) is None:
                break
            with self._lock:  # counted here, not in the thread: the next arrival may come first
                full = self._in_flight >= self.spec.max_in_flight
                if not full:
                    self._in_flight += 1
            if full:
                now = self._clock.now()
                self._record(
                    i, warmup, self._target(i), now, now, "error", error=IN_FLIGHT_BOUND_ERROR,
                    reason="refused", scheduled=scheduled,
                )  # fmt: skip
                continue
            t = threading.Thread(target=self._one, args=(i, warmup, True, scheduled), daemon=True)
            t.start()
            threads.append(t)
            threads = [x for x in threads if x.is_alive()]
        for t in threads:
            t.join()

    # -- one request -----------------------------------------------------------------------------

    def _target(self, i: int) -> Target:
        return self.spec.targets[i % len(self.spec.targets)]

    def _lengths(self, i: int) -> tuple[int, int]:
        s = self.spec
        return s.input_tokens[i % len(s.input_tokens)], s.output_tokens[i % len(s.output_tokens)]

    def _messages(self, i: int, n_in: int) -> list[dict[str, str]]:
        """Request i's messages (chat; completions sends their contents as one prompt)."""
        s = self.spec
        prompt = s.prompts[i % len(s.prompts)] if s.prompts else (PROMPT_WORD * n_in).strip()
        return [{"role": "user", "content": prompt}]

    def _body(self, i: int, n_in: int, n_out: int) -> bytes:
        s = self.spec
        messages = self._messages(i, n_in)
        body: dict[str, object] = {
            "model": s.model,
            "max_tokens": n_out,
            "stream": True,
            "stream_options": {"include_usage": True},
            **s.extra,
            "temperature": 0,
        }
        if s.api == "chat":
            body["messages"] = messages
        else:
            body["prompt"] = "\n\n".join(m["content"] for m in messages)
        if s.ignore_eos:
            body["ignore_eos"] = True
        return json.dumps(body).encode()

    def _one(self, i: int, warmup: bool, counted: bool = False, scheduled: float | None = None) -> bool:
        """One request, counted in flight from here (or already, by the open loop's dispatcher);
        False when it got no HTTP answer (connection refused, reset). `scheduled`: its arrival time
        in the open loop's schedule, kept in its record."""
        if not counted:
            with self._lock:
                self._in_flight += 1
        try:
            return self._request(i, warmup, scheduled)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _request(self, i: int, warmup: bool, scheduled: float | None = None) -> bool:
        s, target = self.spec, self._target(i)
        n_in, n_out = self._lengths(i)
        if s.max_model_len is not None and n_in + n_out > s.max_model_len:
            now = self._clock.now()
            why = f"{REFUSED}: input {n_in} + output {n_out} tokens > max_model_len {s.max_model_len}"
            self._record(
                i, warmup, target, now, now, "error", error=why, reason="refused", n_in=n_in, n_out=n_out
            )
            return True
        parts = urlsplit(target.url)
        path = parts.path.rstrip("/") + ("/v1/chat/completions" if s.api == "chat" else "/v1/completions")
        conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(parts.hostname or "", parts.port, timeout=s.timeout_s)
        with self._lock:
            self._conns.add(conn)
        deadline = time.monotonic() + s.timeout_s
        send = self._clock.now()
        times: list[float] = []
        usage: dict[str, int] = {}
        output = StreamOutput() if self._on_output is not None else None
        status: RequestStatus = "ok"
        reason: FailureReason | None = None
        http_status: int | None = None
        error: str | None = None
        try:
            conn.request(
                "POST", path, body=self._body(i, n_in, n_out), headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            http_status = resp.status
            if resp.status != 200:
                status, reason = "error", "http"
                error = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}"
            else:
                done, finish = False, None
                for event in _sse_events(resp):
                    if time.monotonic() > deadline:
                        status, reason, error = "aborted", "timeout", f"request timeout {s.timeout_s:g}s"
                        break
                    if event == "[DONE]":
                        done = True
                        break
                    token, ended, u = _event_token(event)
                    if output is not None:
                        output.add(json.loads(event))
                    if u:
                        usage = u
                    if token:
                        times.append(self._clock.now())
                    finish = finish or ended
                n_got = usage.get("completion_tokens", len(times))
                if status == "ok" and (cut := stream_cut(finish, done, n_got, n_out)) is not None:
                    if self._stop.is_set():
                        status, reason, error = "aborted", "cancelled", CANCELLED
                    else:
                        status, reason, error = "error", "truncated", cut
        except TimeoutError:
            status, reason, error = "aborted", "timeout", f"request timeout {s.timeout_s:g}s"
        except StreamError as e:
            status, reason, error = "error", "truncated", f"stream error event: {e}"
        except (OSError, http.client.HTTPException, ValueError) as e:
            if self._stop.is_set():
                status, reason, error = "aborted", "cancelled", CANCELLED
            else:
                # no HTTP answer: connection; lost after HTTP 200: the answer was cut short
                status, error, reason = "error", f"{type(e).__name__}: {e}", "truncated"
                if isinstance(e, ValueError):
                    reason = "protocol"
                elif http_status is None:
                    reason = "connection"
        finally:
            conn.close()
            with self._lock:
                self._conns.discard(conn)
        end = self._clock.now()
        if output is not None and self._on_output is not None:
            with self._emit_lock:
                self._on_output(i, output)
        self._record(i, warmup, target, send, end, status, times=times, usage=usage, http_status=http_status,
                     error=error, reason=reason, n_in=n_in, n_out=n_out, scheduled=scheduled)  # fmt: skip
        return http_status is not None or status != "error"

    def _record(
        self,
        i: int,
        warmup: bool,
        target: Target,
        send: float,
        end: float,
        status: RequestStatus,
        *,
        times: list[float] | None = None,
        usage: dict[str, int] | None = None,
        http_status: int | None = None,
        error: str | None = None,
        reason: FailureReason | None = None,
        n_in: int | None = None,
        n_out: int | None = None,
        scheduled: float | None = None,
    ) -> None:
        times = times or []
        usage = usage or {}
        if n_in is None or n_out is None:
            n_in, n_out = self._lengths(i)
        rec = RequestRecord(
            id=i,
            level=self.spec.level,
            warmup=warmup,
            server=target.server,
            send=send,
            scheduled=scheduled,
            first_token=times[0] if times else None,
            token_times=times,
            end=end,
            status=status,
            http_status=http_status,
            error=None if error is None else " ".join(error.split())[:300],
            reason=reason,
            input_tokens=usage.get("prompt_tokens", n_in),
            output_tokens=usage.get("completion_tokens", len(times)),
            requested_output_tokens=n_out,
            usage_reported="completion_tokens" in usage,
        )
        with self._emit_lock:
            self._emit(rec)


def _sse_events(resp: http.client.HTTPResponse) -> Iterator[str]:
    """The data of each server-sent event (`data: ...` lines; comments and other fields skipped)."""
    data: list[str] = []
    while True:
        raw = resp.readline(1 << 20)
        if not raw:
            if data:
                yield "\n".join(data)
            return
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


def _event_token(event: str) -> tuple[bool, str | None, dict[str, int]]:
    """Whether one streamed chunk (completions or chat) is a token arrival, the finish_reason that
    ends the answer (None when it has none), and its usage, if it carries one. Raises StreamError
    for an error event (`{"error": ...}`, or vLLM's older `{"object": "error", "message": ...}`).

    A token arrival is a choice with text (or delta content), or with an empty text and no
    finish_reason: a byte-level token can end inside a UTF-8 character and stream as "". The
    chat role chunk (no content) and a bare finish chunk are not arrivals.
    """
    chunk = json.loads(event)
    if not isinstance(chunk, dict):
        raise ValueError("a stream event is not a JSON object")
    if "error" in chunk or chunk.get("object") == "error":
        err = chunk.get("error", chunk)
        raise StreamError(str(err.get("message", err) if isinstance(err, dict) else err))
    usage = chunk.get("usage")
    u = {k: int(v) for k, v in usage.items() if k in ("prompt_tokens", "completion_tokens")} if usage else {}
    token, finish = False, None
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        text = choice["text"] if "text" in choice else delta.get("content")
        reason = choice.get("finish_reason")
        finish = finish or (None if reason is None else str(reason))
        token = token or bool(text) or (text == "" and reason is None)
    return token, finish, u


def arrival_offsets(rate: float, seed: int, burstiness: float = 1.0) -> Iterator[float]:
    """Arrivals at `rate` per second on average: the cumulative offsets (s) of gaps drawn from
    random.Random(seed), without end. One seed gives one schedule. burstiness 1 is a Poisson
    process (exponential gaps); otherwise the gaps are gamma-distributed with shape `burstiness`
    and mean 1/rate, as vLLM's `bench serve --burstiness`: below 1 burstier, above 1 more even."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    rng, t = random.Random(seed), 0.0  # noqa: S311 (a load schedule, not a secret)
    scale = 1.0 / (rate * burstiness)  # the gamma's scale: its mean, shape x scale, is 1/rate
    while True:
        t += rng.expovariate(rate) if burstiness == 1.0 else rng.gammavariate(burstiness, scale)
        yield t


def spec_arrivals(spec: LoadSpec) -> Iterator[float]:
    """An open-loop level's arrival offsets (s), without end: its trace replayed at its rate, else
    Poisson or gamma arrivals from its seed. Raises ValueError for a closed-loop level."""
    if spec.rate is None:
        raise ValueError(f"level {spec.level} is closed loop: it has no arrival schedule")
    if spec.trace is not None:
        return trace_offsets(spec.trace, spec.rate)
    return arrival_offsets(spec.rate, spec.seed, spec.burstiness)


def trace_offsets(times: Sequence[float], rate: float) -> Iterator[float]:
    """Arrivals replayed from a trace's times (seconds; sorted here): the first at once, then the
    offsets of its gaps scaled by native/rate, where native is the trace's mean rate, so that the
    level sends `rate` requests per second on average in the trace's pattern. When the trace runs
    out it starts again after one mean gap, without end. Raises ValueError for fewer than 2 times
    or a trace that spans no time."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    ts = sorted(times)
    if len(ts) < 2 or ts[-1] <= ts[0]:
        raise ValueError(f"a trace needs 2 or more distinct times, got {len(ts)}")
    native = (len(ts) - 1) / (ts[-1] - ts[0])
    scale = native / rate
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    mean_gap = (ts[-1] - ts[0]) / len(gaps)
    t = 0.0
    while True:
        yield t  # the trace's first arrival, at once (its times are relative to the first)
        for g in gaps:
            t += g * scale
            yield t
        t += mean_gap * scale


def _jsonl_field(lines: Iterable[str], field: str, *, source: str, what: str) -> Iterator[tuple[int, object]]:
    """(line number, value of `field`) for each non-blank JSONL line; raises ValueError naming the
    source and the line where a line is not JSON or lacks the field (`what` names the expected kind)."""
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)[field]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{source} line {no}: no {what} {field!r}: {e}") from e
        yield no, value


def read_trace(lines: Iterable[str], field: str, unit: str, *, source: str = "trace") -> list[float]:
    """Arrival times in seconds from JSONL lines (`field` a number, `unit` s or ms); blank lines
    skipped. Raises ValueError naming the source and the line."""
    factor = 1e-3 if unit == "ms" else 1.0
    out: list[float] = []
    for no, value in _jsonl_field(lines, field, source=source, what="number"):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{source} line {no}: {field} must be a number, got {value!r}")
        out.append(value * factor)
    if len(out) < 2:
        raise ValueError(f"{source}: a trace needs 2 or more arrival times, found {len(out)}")
    return out


def read_lengths(lines: Iterator[str] | Sequence[str], field: str, *, source: str = "dataset") -> list[int]:
    """Token counts from JSONL lines of lengths (`{"input_tokens": 120, ...}` per line, `field` an
    int >= 1); blank lines skipped. Raises ValueError naming the source and the line."""
    out: list[int] = []
    for no, value in _jsonl_field(lines, field, source=source, what="integer"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{source} line {no}: {field} must be an integer >= 1, got {value!r}")
        out.append(value)
    if not out:
        raise ValueError(f"{source}: no lengths")
    return out


def read_prompts(lines: Iterable[str], field: str, *, source: str = "dataset") -> list[str]:
    """Prompt texts from JSONL lines (`field` a non-empty string); blank lines skipped. Raises
    ValueError naming the source and the line."""
    out: list[str] = []
    for no, value in _jsonl_field(lines, field, source=source, what="string"):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{source} line {no}: {field} must be a non-empty string, got {value!r:.60}")
        out.append(value)
    if not out:
        raise ValueError(f"{source}: no prompts")
    return out


def token_lengths(
    kind: str, n: int, *, tokens: int = 0, lo: int = 0, hi: int = 0, seed: int = 0
) -> list[int]:
    """n token counts: `fixed` (tokens), `uniform` (lo..hi inclusive, seeded)."""
    if kind == "fixed":
        return [tokens] * n
    rng = random.Random(seed)  # noqa: S311 (lengths of a load, not a secret)
    return [rng.randint(lo, hi) for _ in range(n)]


LENGTHS_CYCLE = 10_000
"""Lengths drawn per level when the level ends on a duration (requests then reuse them in turn)."""


def lengths_for(spec: TokenLengths, n: int, *, seed: int, dataset: Sequence[int] | None = None) -> list[int]:
    """n token counts as a plan's spec says: fixed, uniform (seeded), or a dataset's lengths in turn
    (given, already read: see read_lengths). Raises ValueError when a dataset spec has no lengths."""
    if isinstance(spec, FixedLengths):
        return token_lengths("fixed", n, tokens=spec.tokens)
    if isinstance(spec, DatasetLengths):
        if not dataset:
            raise ValueError(f"no lengths read from {spec.path} [{spec.field}]")
        return [dataset[i % len(dataset)] for i in range(n)]
    return token_lengths("uniform", n, lo=spec.min, hi=spec.max, seed=seed)


def generator_procs(load: ServingLoad) -> int:
    """How many generator processes a fixed level, rate or capacity probe of load runs in: its
    procs, or for auto the controller's core count (1 when unknown). Here, not on the model:
    models do no I/O (tests/unit/test_import_graph.py)."""
    return (os.cpu_count() or 1) if load.procs == "auto" else load.procs


def level_specs(
    w: ServingWorkload,
    targets: Sequence[Target],
    *,
    datasets: dict[tuple[str, str], Sequence[int]] | None = None,
    trace: Sequence[float] | None = None,
    prompts: Sequence[str] | None = None,
) -> list[LoadSpec]:
    """One LoadSpec per load level of a plan's workload, in plan order (concurrency levels, rates,
    then the agentic sessions' level), aimed at `targets` (one per replica). Lengths are drawn for
    warm-up plus counted requests (LENGTHS_CYCLE when the level ends on a duration); input and
    output lengths use seed and seed + 1. `datasets` maps (path, field) to the lengths read from a
    dataset spec. `trace`: the arrival times read from the load's trace, replayed at each rate.
    `prompts`: the texts read from the load's prompts file (read_prompts), sent in turn. Raises
    ValueError for a dataset spec, a trace or a prompts file that was not read."""
    load = w.load
    if load.trace is not None and trace is None:
        raise ValueError(f"no arrival times read from {load.trace.path}")
    if load.prompts is not None and not prompts:
        raise ValueError(f"no prompts read from {load.prompts.path}")
    n = load.warmup_requests + (load.requests if load.requests is not None else LENGTHS_CYCLE)
    data = datasets or {}

    def lengths(spec: TokenLengths, seed: int) -> list[int]:
        ds = data.get((spec.path, spec.field)) if isinstance(spec, DatasetLengths) else None
        return lengths_for(spec, n, seed=seed, dataset=ds)

    inputs, outputs = lengths(load.input_tokens, load.seed), lengths(load.output_tokens, load.seed + 1)

    def spec(
        concurrency: int | None = None, rate: float | None = None, ss: AgenticSessions | None = None
    ) -> LoadSpec:
        # with ss, the level of agentic sessions (workloads/sessions.py): count and warm-up in sessions
        return LoadSpec(
            targets=list(targets), model=w.model.served_name, input_tokens=inputs, output_tokens=outputs,
            concurrency=concurrency, rate=rate, duration_s=load.duration_s,
            requests=load.requests if ss is None else ss.sessions * ss.turns,
            warmup=load.warmup_requests if ss is None else ss.warmup_sessions,
            api=load.api, timeout_s=load.request_timeout_s,
            max_in_flight=load.max_in_flight, seed=load.seed, burstiness=load.burstiness,
            max_model_len=w.model.max_model_len, trace=trace if rate is not None else None,
            prompts=list(prompts or ()), sessions=ss, procs=generator_procs(load) if ss is None else 1,
        )  # fmt: skip

    ss = load.sessions
    sessions = [] if ss is None else [spec(concurrency=ss.concurrency or ss.sessions, ss=ss)]
    return [spec(concurrency=c) for c in load.concurrency] + [spec(rate=r) for r in load.rates] + sessions


def _parse_target(text: str) -> Target:
    server, sep, url = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--target {text!r}: give NAME=http://HOST:PORT")
    try:
        return Target(server, check_http_url(url))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def main(argv: list[str] | None = None) -> int:
    """Run one level from the command line; records go to --out as they happen."""
    ap = argparse.ArgumentParser(
        prog="python -m orchestrator.workloads.loadgen", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--target", action="append", type=_parse_target, required=True, help="NAME=http://HOST:PORT"
    )
    ap.add_argument("--model", required=True)
    level = ap.add_mutually_exclusive_group(required=True)
    level.add_argument("--concurrency", type=int)
    level.add_argument("--rate", type=float, help="Poisson arrivals, requests/s")
    ap.add_argument("--requests", type=int)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--input-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--api", choices=("completions", "chat"), default="completions")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--burstiness", type=float, default=1.0, help="with --rate: 1 Poisson, else gamma gaps")
    ap.add_argument("--ignore-eos", action="store_true", help="send ignore_eos (vLLM, SGLang)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        spec = LoadSpec(
            targets=a.target, model=a.model, input_tokens=[a.input_tokens], output_tokens=[a.output_tokens],
            concurrency=a.concurrency, rate=a.rate, requests=a.requests, duration_s=a.duration,
            warmup=a.warmup, api=a.api, timeout_s=a.timeout, seed=a.seed, ignore_eos=a.ignore_eos,
            burstiness=a.burstiness,
        )  # fmt: skip
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with RecordWriter(a.out) as w:
        gen = LoadGenerator(spec, w.write)
        try:
            gen.run()
        except KeyboardInterrupt:
            gen.stop()
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
