"""The plan's faults during serving steps (docs/serving.md, "Faults during serving").

A plan fault that names a serving step by its id hits one load level of it (`level`, default the
step's first). It is injected `at_s` seconds after that level's counted load started (after the
warm-up), held for its duration and reverted, through the run's one fault engine
(faults/engine.py: its start-up sweep of the nodes, its node-side timer, its records in
runs/<id>/faults/). With `repeat` N, injection k+1 comes `at_s` after injection k's service is
steady again (the workload's `steady` rule over the level's records so far), or `at_s` after
injection k's revert when there is no pre-fault band to be steady against; a repeat the level
ends before is recorded with outcome "skipped: level ended". Whatever ends the level or the run,
an active fault is reverted (the thread's `finally`, and close() from the lifecycle's on_close).

`NODE:engine` targets get ORCH_ENGINE=<run id>.<step id> as the environment entry the finder must
see (faults/resolve.py), so that only this step's engine is hit.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Sequence

from orchestrator.errors import OrchError
from orchestrator.faults.catalog import CATALOG
from orchestrator.metrics.serving_recovery import serving_recovery
from orchestrator.models.cluster import Cluster
from orchestrator.models.fault import ENGINE_ENV, FaultSpec, PlanFault
from orchestrator.models.plan import Plan
from orchestrator.models.serving import ServingStep
from orchestrator.models.serving_recovery import ServingFaultResult, SteadyRule
from orchestrator.models.serving_results import RequestRecord, ServingStepResult
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.runs.step_faults import JOIN_TIMEOUT_S, FaultThreads, fault_level, serving_fault_matches
from orchestrator.workloads.loadgen import LevelRunner

STEADY_POLL_S = 0.5
SKIPPED = "skipped: level ended"


def wall_of(mono: float) -> float:
    """The wall-clock time (the records' clock) of an instant of orch's monotonic clock."""
    return time.time() - (time.monotonic() - mono)


def mono_of(wall: float) -> float:
    return time.monotonic() - (time.time() - wall)


class LiveRecords:
    """The counted records of the level being driven, as the load generator emits them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recs: list[RequestRecord] = []

    def add(self, rec: RequestRecord) -> None:
        if not rec.warmup:
            with self._lock:
                self._recs.append(rec)

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._recs)


class ServingFaults(FaultThreads):
    """The plan faults of the serving steps: start() sweeps, level_started() schedules a level's
    faults, level_ended() waits for them (reverted), close() reverts whatever is still active."""

    def __init__(
        self,
        plan: Plan,
        cluster: Cluster,
        steps: Sequence[ServingStep],
        life: RunLifecycle,
        *,
        force: bool,
        tag: Callable[[ServingStep], str],
    ) -> None:
        self.plan, self.cluster, self.life, self.force, self.tag = plan, cluster, life, force, tag
        self.faults = [pf for pf in plan.faults if any(serving_fault_matches(pf, s) for s in steps)]
        self.nodes = sorted({pf.spec(force=force).target.node for pf in self.faults})
        super().__init__()
        self._results_lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.faults)

    def start(self) -> None:
        """Connect to the faults' nodes and sweep what an earlier run left; raises OrchError."""
        if not self.faults:
            return
        from orchestrator.faults.engine import FaultEngine

        self.life.on_close(self.close)
        self._engine = FaultEngine(
            self.cluster,
            self.life.shells(self.cluster),
            record_dir=self.life.root / "faults",
            max_share=self.plan.max_share,
        )
        swept = self._engine.sweep(self.nodes)
        self.life.journal("faults_swept", nodes=self.nodes,
                          removed={r.node: r.found for r in swept if r.found})  # fmt: skip

    def level_started(
        self,
        res: ServingStepResult,
        rule: SteadyRule,
        level: str,
        gen: LevelRunner,
        live: LiveRecords,
        done: threading.Event,
    ) -> list[threading.Thread]:
        """Start a thread for each fault of this step and level; they end when `done` is set."""
        out = []
        for pf in self.faults:
            if self._engine is None or not serving_fault_matches(pf, res.step):
                continue
            if fault_level(pf, res.step) != level:
                continue
            t = threading.Thread(target=self._run, args=(res, pf, rule, level, gen, live, done), daemon=True)
            self._threads.append(t)
            out.append(t)
            t.start()
        return out

    @staticmethod
    def level_ended(threads: list[threading.Thread]) -> None:
        for t in threads:
            t.join(JOIN_TIMEOUT_S)

    # --- one plan fault at one level -------------------------------------------------------

    def _spec(self, pf: PlanFault, step: ServingStep) -> FaultSpec:
        spec = pf.spec(force=self.force)
        if spec.target.process == "engine" and not spec.params.match_env:
            params = spec.params.model_copy(update={"match_env": f"{ENGINE_ENV}={self.tag(step)}"})
            spec = spec.model_copy(update={"params": params})
        return spec

    def _add(self, res: ServingStepResult, fr: ServingFaultResult) -> None:
        with self._results_lock:
            res.faults.append(fr)

    def _skip(self, res: ServingStepResult, pf: PlanFault, level: str, first: int) -> None:
        now = time.time()
        for k in range(first, pf.repeat + 1):
            self._add(res, ServingFaultResult(kind=pf.kind, target=pf.target, repeat=k, level=level,
                                              injected_at=now, outcome=SKIPPED))  # fmt: skip

    def _wait_until(self, mono: float, done: threading.Event) -> bool:
        """Wait until mono (orch's clock); True when the level or the run ended first."""
        while True:
            if done.is_set() or self._stop.is_set():
                return True
            left = mono - time.monotonic()
            if left <= 0:
                return False
            done.wait(min(left, STEADY_POLL_S))

    def _run(self, res: ServingStepResult, pf: PlanFault, rule: SteadyRule, level: str,
             gen: LevelRunner, live: LiveRecords, done: threading.Event) -> None:  # fmt: skip
        try:
            self._repeats(res, pf, rule, level, gen, live, done)
        except Exception as e:  # a thread must not die silently: the journal says what happened
            with contextlib.suppress(OrchError):
                self.life.journal("fault_error", step=res.step.id, fault_kind=pf.kind, target=pf.target,
                                  error=str(e))  # fmt: skip

    def _repeats(self, res: ServingStepResult, pf: PlanFault, rule: SteadyRule, level: str,
                 gen: LevelRunner, live: LiveRecords, done: threading.Event) -> None:  # fmt: skip
        while not gen.counted.wait(STEADY_POLL_S):
            if done.is_set() or self._stop.is_set():
                self._skip(res, pf, level, 1)
                return
        t0 = gen.counted_at
        t_next = (t0 if t0 is not None else time.monotonic()) + pf.at_s
        spec = self._spec(pf, res.step)
        for k in range(1, pf.repeat + 1):
            if self._wait_until(t_next, done):
                self._skip(res, pf, level, k)
                return
            fr, revert_mono = self._inject_once(res, pf, spec, level, k, done)
            t_next = revert_mono + pf.at_s
            if k < pf.repeat and not fr.outcome.startswith(("failed", "unsupported")):
                t_next = self._steady_then(fr, rule, live, done, revert_mono) + pf.at_s

    def _inject_once(self, res: ServingStepResult, pf: PlanFault, spec: FaultSpec, level: str, k: int,
                     done: threading.Event) -> tuple[ServingFaultResult, float]:  # fmt: skip
        """Prepare, inject, hold, revert one injection; (its result, revert instant on orch's clock)."""
        fr = ServingFaultResult(kind=pf.kind, target=pf.target, repeat=k, level=level,
                                injected_at=time.time(), outcome="failed")  # fmt: skip
        try:
            with self._lock:
                active = self._engine.prepare(spec)
        except OrchError as e:
            fr.outcome = f"failed: {e}"
            self._add(res, fr)
            self.life.journal("fault_failed", step=res.step.id, fault_kind=pf.kind, target=pf.target,
                              repeat=k, error=str(e))  # fmt: skip
            return fr, time.monotonic()
        rec = active.record
        fr.record = f"faults/{rec.id}.json"
        self._add(res, fr)
        try:
            with self._lock:
                self._engine.inject(active)
            if rec.injected_at_mono is not None:
                fr.injected_at = wall_of(rec.injected_at_mono)
            fr.outcome = rec.outcome if rec.outcome == "active" else f"{rec.outcome}: {rec.message}"
            self.life.journal("fault_injected", step=res.step.id, level=level, fault=rec.id,
                              fault_kind=pf.kind, target=pf.target, repeat=k, outcome=rec.outcome,
                              message=rec.message)  # fmt: skip
            if rec.outcome == "active" and spec.duration_s > 0:
                # held for its duration; the end of the level or of the run reverts it early
                end = time.monotonic() + spec.duration_s
                while not (done.is_set() or self._stop.is_set()) and time.monotonic() < end:
                    done.wait(min(STEADY_POLL_S, max(0.0, end - time.monotonic())))
        except OrchError as e:
            fr.outcome = f"failed: {e}"
        finally:
            with self._lock:
                try:
                    rec = self._engine.revert(active)  # idempotent; the node-side timer backs it up
                except OrchError as e:
                    fr.outcome = f"failed: revert: {e}"
            if rec.t_revert_mono is not None:
                fr.reverted_at = wall_of(rec.t_revert_mono)
            if rec.outcome in ("active", "reverted") and not fr.outcome.startswith("failed"):
                fr.outcome = "done" if rec.outcome == "active" else "reverted"
            self.life.journal("fault_reverted", step=res.step.id, fault=rec.id, outcome=fr.outcome)
        return fr, rec.t_revert_mono if rec.t_revert_mono is not None else time.monotonic()

    def _steady_then(self, fr: ServingFaultResult, rule: SteadyRule, live: LiveRecords,
                     done: threading.Event, revert_mono: float) -> float:  # fmt: skip
        """When the service was steady again after fr (orch's clock), from the level's records so
        far; the revert instant when there is no pre-fault band to be steady against; infinity
        when the level ends first."""
        while not (done.is_set() or self._stop.is_set()):
            r = serving_recovery(live.snapshot(), fr.injected_at, level=fr.level, rule=rule,
                                 held_until=held_until(fr))  # fmt: skip
            if r.to_steady_s is not None:
                return mono_of(fr.injected_at + r.to_steady_s)
            if r.pre_fault_ttft_band_ms is None:
                return revert_mono
            done.wait(STEADY_POLL_S)
        return math.inf


def held_until(f: ServingFaultResult) -> float | None:
    """When a fault held for a duration (the catalog's kinds with a node-side timer: pause, link,
    throttle, delay, loss, node-loss) was reverted; None for a kill or a restart, whose service
    comes back by itself (the restart policy)."""
    info = CATALOG.get(f.kind)  # type: ignore[call-overload]
    return f.reverted_at if info is not None and info.timer else None


def attach_recovery(
    res: ServingStepResult,
    level: str,
    records: Sequence[RequestRecord],
    rule: SteadyRule,
    level_end: float,
) -> None:
    """Fill each injected fault's recovery of this level from its counted records, and give it
    the engine restarts that ended in its window (from its injection to the next one's, or to the
    level's end, wall clock); each is measured up to the next one's injection."""
    hit = [f for f in res.faults if f.level == level and f.record is not None
           and not f.outcome.startswith(("failed", "skipped"))]  # fmt: skip
    faults = sorted(hit, key=lambda f: f.injected_at)
    for i, f in enumerate(faults):
        nxt = faults[i + 1].injected_at if i + 1 < len(faults) else None
        end = nxt if nxt is not None else level_end
        f.restarts = [r for r in res.restarts if f.injected_at <= r.ended_at < end]
        f.recovery = serving_recovery(records, f.injected_at, level=level, rule=rule, until=nxt,
                                      held_until=held_until(f))  # fmt: skip
