"""Several load generator processes on one schedule, so that the client is never the bottleneck.

One Python process sends a few hundred streaming requests per second before its interpreter lock,
not the engine, sets the pace (docs/benchmarks.md, serving_client). MultiLoadGenerator runs one
level of a LoadSpec (workloads/loadgen.py) in P processes (one per core by default):

- the level's schedule is drawn once, in the parent: the arrival offsets of an open-loop level
  (Poisson, gamma or a trace, exactly as one process would draw them) for its warm-up and counted
  requests; split_schedule gives request i to process i mod P, so every scheduled request is sent
  by exactly one process, with its own id, lengths, prompt and target, as one process would;
- every process counts its offsets from one shared start instant (a wall-clock time the parent
  sets once all processes are ready), so each record's `scheduled` is the shared schedule's time
  and send - scheduled is still the generator's own lateness: metrics/capacity.py's refusal of a
  late sender reads merged records exactly as it reads one process's;
- a closed-loop level splits its concurrency evenly (P is the largest count up to the one asked
  that divides the concurrency), each process taking the request ids of its share in turn;
- the in-flight bound is split too (each process max(1, bound // P));
- records carry `proc` (the process, 0..P-1) and come back to the parent, which calls `emit` for
  each as it arrives: one host's processes share its clock, so their records merge as they are.

Differences from one process: warm-up requests are the first `warmup` ids of the same schedule
(no pause between warm-up and counted requests), and a level's duration counts from the shared
start, warm-up included.

Across nodes (srun over the client nodes), each host's records are on its own clock:
merge_records moves them onto the reference clock by measured offsets (clock_offset, from
NTP-style samples: the reference's send and receive times around the remote's reading). Both are
pure functions; the lab's nodes share one clock, so unit tests inject offsets.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent
from typing import Any

from orchestrator.models.serving_results import RequestRecord
from orchestrator.workloads.loadgen import LoadGenerator, LoadSpec, spec_arrivals

READY_TIMEOUT_S = 120.0
"""How long the parent waits for every process to import and build its generator."""

STOP_POLL_S = 0.1
"""How often a generator process looks whether the parent stopped the level."""

START_MARGIN_S = 0.05
"""The shared start is this far after the last process said it was ready (time to see `go`)."""


def draw_schedule(spec: LoadSpec) -> list[float]:
    """The arrival offsets (s) of an open-loop level's warm-up and counted requests, request id i
    at offsets[i]: the first `warmup` arrivals, then counted ones until `requests` are drawn or the
    next one is `duration_s` or more after the first counted one. Raises ValueError for a
    closed-loop level."""
    arrivals = spec_arrivals(spec)
    out = list(itertools.islice(arrivals, spec.warmup))
    first: float | None = None
    for k, offset in enumerate(arrivals):
        if spec.requests is not None and k >= spec.requests:
            break
        first = offset if first is None else first
        if spec.duration_s is not None and offset - first >= spec.duration_s:
            break
        out.append(offset)
    return out


def split_schedule(offsets: Sequence[float], procs: int) -> list[list[tuple[int, float]]]:
    """The share of each of `procs` processes: request i (its id and offset) goes to process
    i mod procs, so each request is in exactly one share and every share is spread over the whole
    schedule. Raises ValueError for procs < 1."""
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    return [[(i, offsets[i]) for i in range(p, len(offsets), procs)] for p in range(procs)]


def share_spec(spec: LoadSpec, share: int, procs: int, n_offsets: int | None = None) -> LoadSpec:
    """The LoadSpec process `share` of `procs` runs: no warm-up of its own (the warm-up ids are in
    its share), its part of the in-flight bound, and, closed loop, its part of the concurrency and
    of the requests; open loop, requests is the length of its share of the schedule (n_offsets)."""
    total = None if spec.requests is None else spec.warmup + spec.requests
    mine = None if total is None else len(range(share, total, procs))
    common: dict[str, Any] = {"warmup": 0, "max_in_flight": max(1, spec.max_in_flight // procs)}
    if spec.concurrency is not None:
        c = spec.concurrency // procs + (share < spec.concurrency % procs)
        return dataclasses.replace(spec, concurrency=c, requests=mine, **common)
    return dataclasses.replace(spec, requests=n_offsets, duration_s=None, **common)


class ShareGenerator(LoadGenerator):
    """One process's part of a level: its requests keep the ids of the whole level (local k is id
    share + k * procs), open-loop arrivals are its share's offsets counted from the shared start,
    and its records carry `proc` and the level's warm-up flag."""

    def __init__(
        self,
        spec: LoadSpec,
        emit: Callable[[RequestRecord], None],
        *,
        share: int,
        procs: int,
        offsets: Sequence[float] = (),
        start_mono: float | None = None,
    ) -> None:
        self.share, self.procs, self._warmup_ids = share, procs, spec.warmup
        super().__init__(share_spec(spec, share, procs, len(offsets)), self._tagged(emit))
        self._arrivals = iter(offsets)
        self.start_mono = start_mono

    def _tagged(self, emit: Callable[[RequestRecord], None]) -> Callable[[RequestRecord], None]:
        def tagged(rec: RequestRecord) -> None:
            emit(rec.model_copy(update={"proc": self.share, "warmup": rec.id < self._warmup_ids}))

        return tagged

    def run(self) -> None:
        """Wait for the shared start, then send this share (see LoadGenerator.run)."""
        if self.start_mono is not None and (wait := self.start_mono - time.monotonic()) > 0:
            self._stop.wait(wait)
        super().run()

    def _schedule_start(self) -> float:
        return self.start_mono if self.start_mono is not None else time.monotonic()

    def _take(self, limit: int | None) -> int | None:
        k = super()._take(limit)
        return None if k is None else self.share + k * self.procs


def _stop_when(stop: MpEvent, gen: LoadGenerator) -> None:
    """Stop the generator once `stop` is set. Polled, not waited on: a process that ends while it
    waits on a multiprocessing Event leaves a sleeper behind, and the parent's set() then hangs."""
    while not stop.is_set():
        time.sleep(STOP_POLL_S)
    gen.stop()


def _process_main(
    spec: LoadSpec,
    share: int,
    procs: int,
    offsets: list[float],
    out: multiprocessing.Queue,  # type: ignore[type-arg]
    go: MpEvent,
    start: Any,
    stop: MpEvent,
) -> None:
    """One generator process: build, say ready, wait for `go`, send the share, say done. Ctrl-C
    (SIGINT to the terminal's process group) is ignored here: the parent catches it and ends the
    level through `stop`, so the requests in flight come back as aborted, not as a failure."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        gen = ShareGenerator(
            spec, lambda r: out.put(("rec", r.model_dump_json())), share=share, procs=procs, offsets=offsets
        )
        out.put(("ready", share))
        go.wait()
        gen.start_mono = time.monotonic() + (start.value - time.time())
        threading.Thread(target=_stop_when, args=(stop, gen), daemon=True).start()
        gen.run()
        out.put(("done", share))
    except BaseException:  # the parent raises it: a process's failure must not pass as a short level
        out.put(("failed", f"process {share}: {traceback.format_exc()[-2000:]}"))


class MultiLoadGenerator:
    """Runs one level of a LoadSpec in `procs` processes (see the module docstring); `emit` gets
    every record, in the parent, as its request ends. Serving steps run a level in it when their
    plan's load.procs is above 1 (sessions.generator_for): for loads that one process cannot send."""

    def __init__(
        self, spec: LoadSpec, emit: Callable[[RequestRecord], None], procs: int | None = None
    ) -> None:
        self.spec = spec
        self._emit = emit
        offsets = draw_schedule(spec) if spec.rate is not None else None
        want = procs or multiprocessing.cpu_count()
        if offsets is not None:
            self.procs = max(1, min(want, len(offsets)))
        else:  # equal shares: the largest count <= want that divides the concurrency
            c = spec.concurrency or 1
            self.procs = max(p for p in range(1, min(want, c) + 1) if c % p == 0)
        self.shares = split_schedule(offsets, self.procs) if offsets is not None else None
        self._first_counted = offsets[spec.warmup] if offsets and len(offsets) > spec.warmup else 0.0
        self._ctx = multiprocessing.get_context("spawn")
        self._stop = self._ctx.Event()
        self.start_wall: float | None = None
        """The shared start (wall clock) of the schedule, once every process was ready."""
        self.counted = threading.Event()
        self.counted_at: float | None = None
        """When the counted requests begin (orch's monotonic clock): set with the shared start, at
        the first counted request's place in the schedule (closed loop: the start), as
        LoadGenerator's are for a level's faults and steady state."""

    def stop(self) -> None:
        """Abort the requests in flight in every process and end the level (from any thread)."""
        self._stop.set()

    def run(self) -> None:
        """Start the processes, start them together, emit their records; returns when all are
        done. Raises RuntimeError when a process failed or did not get ready in time."""
        ctx = self._ctx
        out: multiprocessing.Queue[tuple[str, Any]] = ctx.Queue()
        go, start = ctx.Event(), ctx.Value("d", 0.0)
        procs = []
        for p in range(self.procs):
            offsets = [o for _, o in self.shares[p]] if self.shares is not None else []
            args = (self.spec, p, self.procs, offsets, out, go, start, self._stop)
            procs.append(ctx.Process(target=_process_main, args=args, daemon=True))
        for proc in procs:
            proc.start()
        try:
            self._collect(out, procs, go, start)
        finally:
            self._stop.set()
            for proc in procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()

    def _collect(self, out: Any, procs: list[Any], go: MpEvent, start: Any) -> None:
        ready = done = 0
        deadline = time.monotonic() + READY_TIMEOUT_S
        while done < len(procs):
            try:
                kind, value = out.get(timeout=0.5)
            except queue.Empty:
                if ready < len(procs) and time.monotonic() > deadline:
                    raise RuntimeError(f"{len(procs) - ready} generator processes not ready") from None
                if any(p.exitcode not in (None, 0) for p in procs):
                    raise RuntimeError("a generator process died") from None
                continue
            if kind == "rec":
                self._emit(RequestRecord.model_validate_json(value))
            elif kind == "ready":
                ready += 1
                if ready == len(procs):
                    start.value = self.start_wall = time.time() + START_MARGIN_S
                    self.counted_at = time.monotonic() + START_MARGIN_S + self._first_counted
                    go.set()
                    self.counted.set()
            elif kind == "done":
                done += 1
            else:
                raise RuntimeError(f"a generator process failed: {value}")


# -- several hosts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClockSample:
    """One exchange with a host: the reference clock when it asked (sent) and got the answer
    (received), and the host's clock in the answer (remote)."""

    sent: float
    remote: float
    received: float


def clock_offset(samples: Sequence[ClockSample]) -> float:
    """A host's clock minus the reference clock (s), NTP's estimate from the sample with the
    shortest round trip: remote - (sent + received) / 2. Raises ValueError without samples or
    with a sample whose answer came before its question."""
    if not samples:
        raise ValueError("no clock samples")
    if any(s.received < s.sent for s in samples):
        raise ValueError("a clock sample was received before it was sent")
    best = min(samples, key=lambda s: s.received - s.sent)
    return best.remote - (best.sent + best.received) / 2


def shifted(rec: RequestRecord, offset: float, client: str) -> RequestRecord:
    """The record with every time moved onto the reference clock (minus `offset`), tagged with
    its client host."""
    return rec.model_copy(
        update={
            "send": rec.send - offset,
            "scheduled": None if rec.scheduled is None else rec.scheduled - offset,
            "first_token": None if rec.first_token is None else rec.first_token - offset,
            "token_times": [t - offset for t in rec.token_times],
            "end": rec.end - offset,
            "client": client,
        }
    )


def merge_records(
    parts: Mapping[str, Sequence[RequestRecord]], offsets: Mapping[str, float]
) -> list[RequestRecord]:
    """The records of several client hosts on the reference clock, ordered by send time: each
    host's records moved by its measured offset (its clock minus the reference, see clock_offset).
    Raises ValueError for a host without an offset (never taken as 0) and for a request (level,
    id) that two records claim."""
    missing = sorted(set(parts) - set(offsets))
    if missing:
        raise ValueError(f"no clock offset measured for client host(s) {', '.join(missing)}")
    merged = [shifted(r, offsets[host], host) for host, recs in parts.items() for r in recs]
    seen: dict[tuple[str, int], str] = {}
    for r in merged:
        key = (r.level, r.id)
        if key in seen:
            raise ValueError(f"request {r.id} of level {r.level} recorded by {seen[key]} and {r.client}")
        seen[key] = r.client or ""
    return sorted(merged, key=lambda r: (r.send, r.id))
