"""Agentic multi-turn sessions: a load level whose requests resend a growing history.

An agent calls the model again and again: each call carries the shared system prompt, every earlier
user message and every earlier answer, and adds one new user message. SessionGenerator runs such a
level with the load generator's own request path (workloads/loadgen.py: the stream, the record,
the refusal of a request over max_model_len before it is sent); only the sessions' scheduling, the
messages and the records' session and turn are its own (docs/serving.md, "Agentic sessions"):

- `concurrency` workers each take the next session and run its turns in order; a turn is sent
  when the answer before it has ended and think_time_s has passed;
- turn 0's prompt is the system prompt (system_prompt_tokens words) and one user message
  (input_tokens of the request's index, or the load's prompt text in turn where it has one);
  turn t's prompt is turn t-1's, its answer, and a new user message. Its input tokens are
  counted as turn t-1's prompt tokens (the server's usage where it reports one) + its answer's
  tokens + the new message's, and a request whose input + output would exceed max_model_len
  is refused before it is sent (the generator's own check);
- a turn that did not succeed (refused, failed, aborted) ends its session: there is no answer to
  grow the history with, and a refused one would be refused again, longer.

The prefix-cache hit rate comes from the engines' Prometheus counters, read before and after the
level (prefix_cache_counters); an engine whose registry entry names no counters is "not exposed".
"""

from __future__ import annotations

import http.client
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from orchestrator.models.serving_results import PrefixCache, RequestRecord
from orchestrator.workloads.loadgen import (
    CONNECT_ERROR_PAUSE_S,
    PROMPT_WORD,
    LevelRunner,
    LoadGenerator,
    LoadSpec,
    StreamOutput,
    Target,
)
from orchestrator.workloads.loadgen_multi import MultiLoadGenerator

Emit = Callable[[RequestRecord], None]
OnOutput = Callable[[int, StreamOutput], None]

METRICS_PATH = "/metrics"
METRICS_LIMIT = 16 * 2**20
"""The most bytes of one /metrics answer read (vLLM's is tens of kilobytes)."""


class SessionGenerator(LoadGenerator):
    """Runs a LoadSpec whose `sessions` is set: warm-up sessions, then the counted ones; every
    record carries its session and turn. `emit` and `on_output` as LoadGenerator's."""

    def __init__(self, spec: LoadSpec, emit: Emit, on_output: OnOutput | None = None) -> None:
        if spec.sessions is None or spec.concurrency is None:
            raise ValueError("a session level needs sessions and concurrency (sessions at once)")
        super().__init__(spec, self._emit_turn, self._answer)
        self._user_emit, self._user_output = emit, on_output
        self._turn_of: dict[int, tuple[int, int]] = {}
        self._plan: dict[int, tuple[int, int, list[dict[str, str]]]] = {}
        self._answers: dict[int, str] = {}
        self._records: dict[int, RequestRecord] = {}
        self._next_session = self._session_limit = 0

    # -- the generator's hooks -------------------------------------------------------------------

    def _phase(self, count: int | None, duration_s: float | None, *, warmup: bool) -> None:
        """The phase's sessions (its warm-up ones, or the counted ones) on the generator's
        closed-loop workers, one session at a time each; `count` (requests) is not used."""
        assert self.spec.sessions is not None
        n = self.spec.warmup if warmup else self.spec.sessions.sessions
        self._session_limit = self._next_session + n
        super()._phase(None, duration_s, warmup=warmup)

    def _closed_worker(self, limit: int | None, warmup: bool) -> None:
        while (k := self._take_session()) is not None:
            self._session(k, warmup)

    def _lengths(self, i: int) -> tuple[int, int]:
        planned = self._plan.get(i)
        return (planned[0], planned[1]) if planned is not None else super()._lengths(i)

    def _messages(self, i: int, n_in: int) -> list[dict[str, str]]:
        return self._plan[i][2]

    def _target(self, i: int) -> Target:
        """A session stays on one replica, as a router with session affinity keeps it (its prefix
        cache is there)."""
        k = self._turn_of.get(i, (i, 0))[0]
        return self.spec.targets[k % len(self.spec.targets)]

    # -- sessions --------------------------------------------------------------------------------

    def _take_session(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or self._next_session >= self._session_limit or self._past_deadline():
                return None
            k = self._next_session
            self._next_session += 1
            return k

    def _session(self, k: int, warmup: bool) -> None:
        """Session k's turns in order; ends at its first turn that did not succeed."""
        ss = self.spec.sessions
        assert ss is not None
        history: list[dict[str, str]] = []
        if ss.system_prompt_tokens:
            history.append({"role": "system", "content": (PROMPT_WORD * ss.system_prompt_tokens).strip()})
        before = ss.system_prompt_tokens  # the tokens of the history so far
        for t in range(ss.turns):
            if t and ss.think_time_s and self._stop.wait(ss.think_time_s):
                return
            if (i := self._take(None)) is None:
                return
            n_user, n_out = super()._lengths(i)
            # the turn's own words, so that sessions share the system prompt and nothing more: a
            # marker, then the load's prompt text in turn where it has one (load.prompts)
            prompts = self.spec.prompts
            text = prompts[i % len(prompts)] if prompts else PROMPT_WORD * (n_user - 1)
            user = f"s{k}t{t}" + (" " + text if prompts else text)
            history = [*history, {"role": "user", "content": user}]
            with self._lock:
                self._turn_of[i] = (k, t)
                self._plan[i] = (before + n_user, n_out, history)
            if not self._one(i, warmup):  # no HTTP answer: a dead engine costs a pause, not a spin
                self._stop.wait(CONNECT_ERROR_PAUSE_S)
            with self._lock:
                rec = self._records.pop(i, None)
                answer = self._answers.pop(i, "")
                self._plan.pop(i, None)
            if rec is None or rec.status != "ok":
                return
            history = [*history, {"role": "assistant", "content": answer}]
            before = rec.input_tokens + rec.output_tokens

    def _emit_turn(self, rec: RequestRecord) -> None:
        session, turn = self._turn_of.pop(rec.id, (None, None))
        rec = rec.model_copy(update={"session": session, "turn": turn})
        self._records[rec.id] = rec
        self._user_emit(rec)

    def _answer(self, i: int, output: StreamOutput) -> None:
        self._answers[i] = output.text
        if self._user_output is not None:
            self._user_output(i, output)


def generator_for(spec: LoadSpec, emit: Emit, on_output: OnOutput | None = None) -> LevelRunner:
    """The generator that runs spec: a SessionGenerator for a session level; a MultiLoadGenerator
    in spec.procs processes for a fixed level or rate with procs > 1 (its records come back as
    JSON, so it takes no on_output: with one, one process); else a LoadGenerator. A session level
    always runs in one process: each session's turns wait on its own answers, which one process
    holds (docs/serving.md, 'Several generator processes')."""
    if spec.sessions is not None:
        return SessionGenerator(spec, emit, on_output)
    if spec.procs > 1 and on_output is None:
        return MultiLoadGenerator(spec, emit, spec.procs)
    return LoadGenerator(spec, emit, on_output)


# -- the prefix cache ------------------------------------------------------------------------------


def counter_sum(text: str, name: str) -> float | None:
    """The sum over its label sets of a Prometheus counter in exposition text: `name` or
    `name_total` (the client library adds _total to a counter's samples); None when absent."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        metric = line.split("{", 1)[0].split(" ", 1)[0]
        if metric not in (name, name + "_total"):
            continue
        try:
            total += float(line.rsplit("}", 1)[-1].split()[0])
        except (ValueError, IndexError):
            continue
        seen = True
    return total if seen else None


def read_metrics(url: str, timeout_s: float = 5.0) -> str:
    """The text of an engine's GET /metrics; raises OSError or HTTPException when it cannot be read."""
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=timeout_s)
    try:
        conn.request("GET", parts.path.rstrip("/") + METRICS_PATH)
        resp = conn.getresponse()
        if resp.status != 200:
            raise http.client.HTTPException(f"GET {METRICS_PATH}: HTTP {resp.status}")
        return resp.read(METRICS_LIMIT).decode("utf-8", errors="replace")
    finally:
        conn.close()


def prefix_cache_counters(urls: Sequence[str], counters: tuple[str, str]) -> tuple[float, float] | str:
    """(hits, queries) summed over the engines at urls, or why not (one line)."""
    hits = queries = 0.0
    for url in urls:
        try:
            text = read_metrics(url)
        except (OSError, http.client.HTTPException) as e:
            return f"{url}{METRICS_PATH} not read: {e}"
        h, q = counter_sum(text, counters[0]), counter_sum(text, counters[1])
        if h is None or q is None:
            return f"{url}{METRICS_PATH} has no {counters[0]} / {counters[1]}"
        hits, queries = hits + h, queries + q
    return hits, queries


def prefix_cache(
    engine: str,
    counters: tuple[str, str] | None,
    before: tuple[float, float] | str | None,
    after: tuple[float, float] | str | None,
) -> PrefixCache:
    """The hit rate over a level from the counters read before and after it, or why there is none."""
    if counters is None:
        return PrefixCache(note=f"not exposed by {engine}")
    if isinstance(before, str) or isinstance(after, str):
        return PrefixCache(note=before if isinstance(before, str) else str(after))
    if before is None or after is None:
        return PrefixCache(note="counters not read")
    hits, queries = after[0] - before[0], after[1] - before[1]
    if queries <= 0 or hits < 0:
        why = "no prefix-cache queries in the level" if queries == 0 else "counters reset during the level"
        return PrefixCache(hits=hits, queries=queries, note=why)
    return PrefixCache(hits=hits, queries=queries, hit_rate=hits / queries)
