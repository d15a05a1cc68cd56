"""`orch recovery-test`: run the probe on every node, inject one fault kind K times, time recovery.

Warm-up first (``warmup_steps`` steps), then per repeat: wait (bounded) for steady state — a run of
``settle_steps`` steps within the pre-fault band —, measure the nodes' clock offsets, inject, hold
for the duration, revert in ``finally``, wait (bounded) for recovery and restore, analyse the
heartbeats. A repeat injected before steady state came says so in its record (``steady: false``).
A repeat that does not recover within the window is a "not-recovered" result, not a hang. The
probe is stopped (stop file, then SIGTERM/SIGKILL of what orch started, by PID) whatever happens.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ConfigError, FaultError
from orchestrator.faults.base import NodeShell
from orchestrator.faults.catalog import fault_info, unreachable_warning
from orchestrator.faults.engine import FaultEngine
from orchestrator.metrics import recovery as rmetrics
from orchestrator.models.cluster import Cluster
from orchestrator.models.events import RecoveryDone, RunStarted
from orchestrator.models.fault import (
    FaultRecord,
    FaultSpec,
    FaultTarget,
    RecoveryResult,
    RecoverySummary,
)
from orchestrator.models.recovery import Heartbeat, RecoveryRecord
from orchestrator.runs import recovery_records as records
from orchestrator.runs.lifecycle import Ending, RunLifecycle, keep_attempt, verdict_ending
from orchestrator.runs.probe_jobs import ProbeJob, SlurmProbeJob
from orchestrator.runs.recovery_request import (
    RecoveryTestRequest,
    node_python,
    resolve_container,
    resolve_launcher,
)
from orchestrator.scheduler.base import random_port_base
from orchestrator.store.load import REQUEST_FILE, load_run_to_resume, require_model, run_cluster
from orchestrator.store.rundir import RunDir, atomic_write


def _completed(out_dir: Path, offsets: dict[str, float]) -> list[rmetrics.Completed]:
    return rmetrics.completed_steps(rmetrics.load_heartbeats(out_dir), offsets)


def wait_steps(
    out_dir: Path,
    offsets: dict[str, float],
    n: int,
    *,
    after: float,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Wait until ``n`` steps completed by all ranks after ``after``; raises FaultError on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len([c for c in _completed(out_dir, offsets) if c.end_last > after]) >= n:
            return
        sleep(0.3)
    raise FaultError(
        f"the probe did not complete {n} steps within {timeout:g} s", hint=f"see the agent logs in {out_dir}"
    )


def wait_steady(
    out_dir: Path,
    offsets: dict[str, float],
    band: rmetrics.Band,
    n: int,
    *,
    after: float,
    timeout: float,
    gap_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """Wait (at most ``timeout``) for a steady run of ``n`` steps completed after ``after``.

    Returns None once steady, else why the last look was not (the caller injects anyway and
    records it). Raises FaultError when a heartbeat names a node without a clock offset.
    """
    deadline = clock() + timeout
    while True:
        why = rmetrics.steady_run(_completed(out_dir, offsets), band, n, after=after, gap_s=gap_s)
        if why is None or clock() >= deadline:
            return why
        sleep(0.3)


def run_recovery_test(
    cluster: Cluster,
    shells: Mapping[str, NodeShell],
    req: RecoveryTestRequest,
    run_root: Path,
    *,
    progress: Callable[[str], None] = lambda _m: None,
) -> RecoverySummary:
    """Run the probe, inject ``req.kind`` ``req.repeat`` times, return (and write) the summary.

    ``run_root`` becomes a run directory like scale-test's (runs/lifecycle.py): inventory.json and
    the resolved request (recovery-test.json), a journal from run_started to run_finished, the
    probe's raw heartbeat files (probe/), one RecoveryRecord per repeat (recovery/<fault-id>.json,
    heartbeats included), fault records (faults/); the run is ingested into the results store as
    it goes.

    Raises:
        ConfigError: the probe should run in the stack's image and there is none, or a node has no
            container runtime (named); nothing ran.
        SafetyError: the fault was refused before anything ran (no run directory is made).
        FaultError / RemoteError: the probe or a node failed outside the fault itself.
        Interrupted: Ctrl-C or SIGTERM (the probe stopped, the fault reverted).
    """
    t0 = time.monotonic()
    req = _resolve(req, cluster, fresh_port="master_port" not in req.probe.model_fields_set)
    # Guards first: nothing starts (and no run directory is made) if the fault would be refused.
    engine, spec = _fault(cluster, shells, req, run_root)
    with RunLifecycle.at(run_root, t0=t0) as life:
        life.write_inputs(inventory=cluster)
        life.rundir.write_model(REQUEST_FILE, req)
        started = RunStarted(run_id=life.run_id, run_dir=run_root, plan=f"recovery-{req.kind}",
                             backend=req.launcher)  # fmt: skip
        life.started(
            started, kind="recovery-test", fault_kind=req.kind, target=req.target, repeat=req.repeat,
            duration_s=req.duration_s,
        )  # fmt: skip
        return _repeats(_Test(engine, spec, cluster, shells, req, life, progress), [])


def resume_recovery_test(
    run_dir: Path,
    open_shells: Callable[[Cluster], AbstractContextManager[Mapping[str, NodeShell]]],
    *,
    progress: Callable[[str], None] = lambda _m: None,
    slurm_conf: Path | None = None,
) -> RecoverySummary:
    """Run, in run_dir, the repeats of an interrupted recovery-test that have no record; the
    records of the others are kept, and the summary covers every repeat. The earlier attempt's
    probe files move to attempts/probe.<n>.

    Raises:
        ConfigError: the run still runs, has every repeat, or its folder was edited (names the
            file and the value).
        Interrupted, FaultError, RemoteError: as run_recovery_test.
    """
    t0 = time.monotonic()
    record = load_run_to_resume(run_dir)
    cluster = run_cluster(run_dir, slurm_conf)  # Slurm's configuration never from the run folder
    req = require_model(RecoveryTestRequest, run_dir, run_dir / REQUEST_FILE)
    done = sorted(
        (r for rec in record.recovery if (r := records.from_record(rec, req.kind)) and r.repeat < req.repeat),
        key=lambda r: r.repeat,
    )
    done = [r for k, r in enumerate(done) if r.repeat == k]  # the repeats done in a row from the first
    if len(done) >= req.repeat and record.status != "interrupted":
        raise ConfigError(f"run {record.run_id} has no unfinished repeats", hint="see orch runs show")
    keep_attempt(run_dir, run_dir / "probe", "probe")
    req = _resolve(req, cluster, fresh_port=True)  # the killed attempt's port may still be held
    with open_shells(cluster) as shells:
        engine, spec = _fault(cluster, shells, req, run_dir)
        with RunLifecycle(RunDir(run_dir), t0=t0) as life:
            life.resumed(
                RunStarted(run_id=life.run_id, run_dir=run_dir, plan=f"recovery-{req.kind}",
                           backend=req.launcher),
                repeats=list(range(len(done), req.repeat)),
            )  # fmt: skip
            return _repeats(_Test(engine, spec, cluster, shells, req, life, progress), done)


def _resolve(req: RecoveryTestRequest, cluster: Cluster, *, fresh_port: bool) -> RecoveryTestRequest:
    """The request made concrete: container storage, a fresh probe port, the launcher."""
    req = resolve_container(req, cluster)
    if req.container is not None and req.container.storage is not None:
        st = req.container.storage
        params = req.params.model_copy(update={"podman_root": f"{st}/root", "podman_runroot": f"{st}/run"})
        req = req.model_copy(update={"params": params})
    if fresh_port:
        # A fresh port per run: a previous run's store socket may still linger.
        req = req.model_copy(
            update={"probe": req.probe.model_copy(update={"master_port": random_port_base()})}
        )
    req = resolve_launcher(req, cluster)
    if req.python is None:
        req = req.model_copy(update={"python": node_python(cluster)})  # recorded as it ran
    if req.launcher == "slurm" and req.container is not None:
        raise ConfigError(
            "--launcher slurm does not run the probe in containers"
            " (a restarted container would end its Slurm task)",
            hint="use --launcher ssh (auto picks it for containers)",
        )
    return req


def _fault(
    cluster: Cluster, shells: Mapping[str, NodeShell], req: RecoveryTestRequest, run_root: Path
) -> tuple[FaultEngine, FaultSpec]:
    """The engine and the fault of the run, checked by the guards (SafetyError when refused)."""
    engine = FaultEngine(cluster, shells, record_dir=run_root / "faults")
    spec = FaultSpec(
        kind=req.kind,
        target=FaultTarget.parse(req.target, req.kind),
        duration_s=req.duration_s,
        margin_s=req.margin_s,
        params=req.params.model_copy(
            update={"match_env": req.params.match_env or f"ORCH_PROBE_RUN={run_root.name}"}
        ),
        force=req.force,
    )
    if not fault_info(spec.kind).finds_processes:  # processes are found once the probe runs
        engine.prepare(spec)
    return engine, spec


@dataclass(frozen=True)
class _Test:
    """A recovery-test under way: its fault, the nodes, the request and the run."""

    engine: FaultEngine
    spec: FaultSpec
    cluster: Cluster
    shells: Mapping[str, NodeShell]
    req: RecoveryTestRequest
    life: RunLifecycle
    progress: Callable[[str], None]


def _repeats(t: _Test, done: list[RecoveryResult]) -> RecoverySummary:
    """The repeats after ``done`` (the probe's part, _run), the summary over all of them, and the
    run's end: accepted when every repeat recovered or saw no interruption, failed otherwise."""
    warnings = [w for w in [unreachable_warning(t.req.kind, t.req.transport)] if w]
    for w in warnings:
        t.life.journal("warning", message=w)
    results = [*done, *_run(t, len(done))]
    summary = _summary(t.req, results, warnings, t.life.root)
    t.life.finish(summary_ending(summary))
    return summary


def summary_ending(summary: RecoverySummary) -> Ending:
    """accepted (exit 0) when every repeat recovered or saw no interruption; failed (exit 1) when
    one did not recover or gave no data."""
    bad = summary.verdicts.get("not-recovered") or summary.verdicts.get("no-data")
    return verdict_ending("fail" if bad else "pass")


def _summary(
    req: RecoveryTestRequest, results: list[RecoveryResult], warnings: list[str], run_root: Path
) -> RecoverySummary:
    """The statistics over every repeat; written to faults/recovery-<kind>.json without the
    per-repeat figures (those live in recovery/<fault-id>.json only; the summary points at them)."""
    summary = RecoverySummary(
        kind=req.kind,
        repeats=req.repeat,
        verdicts={v: sum(r.verdict == v for r in results) for v in {r.verdict for r in results}},
        detect=rmetrics.stat(r.detect_s for r in results),
        recover=rmetrics.stat(r.recover_s for r in results),
        restore=rmetrics.stat(r.restore_s for r in results),
        results=results,
        notes=rmetrics.summary_notes(results),
        fault_ids=[r.fault_id for r in results],
        probe_settings=req.probe.record(),
        warnings=warnings,
    )
    atomic_write(
        run_root / "faults" / f"recovery-{req.kind}.json",
        summary.model_dump_json(indent=2, exclude={"results"}) + "\n",
    )
    return summary


def _run(t: _Test, first: int) -> list[RecoveryResult]:
    """The probe's part: start it, then repeats ``first`` .. ``req.repeat - 1``; their results."""
    engine, spec, cluster, shells, req, life, progress = (
        t.engine, t.spec, t.cluster, t.shells, t.req, t.life, t.progress
    )  # fmt: skip
    rundir = life.rundir
    run_root = rundir.root
    swept = engine.sweep()
    rundir.event("faults_swept", removed={r.node: r.found for r in swept if r.found})
    out_dir = run_root / "probe"
    job: ProbeJob | SlurmProbeJob
    if req.launcher == "slurm":
        job = SlurmProbeJob(cluster, req, out_dir, run_root.name)
        aliases = job.node_aliases()
    else:
        job = ProbeJob(cluster, shells, req, out_dir, run_root.name)
        aliases = {}
    offsets = measure_offsets(cluster, shells, aliases)
    rundir.event("clock_offsets", offsets=offsets, aliases=aliases)
    results: list[RecoveryResult] = []
    try:
        progress("starting the probe")
        job.start()
        rundir.event("probe_started", launcher=req.launcher, settings=req.probe.record(),
                     job_id=getattr(job, "job_id", None), pids=getattr(job, "pids", {}))  # fmt: skip
        wait_steps(out_dir, offsets, req.warmup_steps, after=0.0, timeout=180)
        band = rmetrics.band_of(_completed(out_dir, offsets))
        for k in range(first, req.repeat):
            # Steps of the last repeat's recovery are not steady state: wait for a run in the band.
            settle_from = time.monotonic()
            wait_steps(out_dir, offsets, req.settle_steps, after=settle_from, timeout=120)
            unsteady = None
            if band is not None:
                unsteady = wait_steady(out_dir, offsets, band, req.settle_steps, after=settle_from,
                                       timeout=req.settle_timeout_s, gap_s=req.gap_s)  # fmt: skip
            offsets = measure_offsets(cluster, shells, aliases)
            rundir.event("clock_offsets", offsets=offsets, aliases=aliases, repeat=k)
            progress(f"repeat {k + 1}/{req.repeat}: {req.kind} on {req.target}")
            result, fault = _one(engine, spec, req, out_dir, offsets, k)
            result.steady = band is not None and unsteady is None
            if unsteady is not None:
                result.notes.append(
                    f"steady state did not come within {req.settle_timeout_s:g} s before the injection"
                    f" ({unsteady}); injected anyway"
                )
            elif band is None:
                result.notes.append(
                    "no pre-fault band (fewer than 3 warm-up steps): steady state not checked"
                )
            if result.injected_at_mono is not None:
                pre = [c for c in _completed(out_dir, offsets) if c.end_last < result.injected_at_mono]
                band = rmetrics.band_of(pre) or band
            results.append(result)
            record = _write_record(run_root, result, fault, req, out_dir, offsets)
            rundir.event("recovery_done", fault=record.fault_id, repeat=k, verdict=result.verdict,
                         timings=record.timings.model_dump(), restarts=result.restarts,
                         steady=result.steady)  # fmt: skip
            life.emit(RecoveryDone(fault=record.fault_id, repeat=k, verdict=result.verdict))
    finally:
        job.stop()
        rundir.event("probe_stopped")
    return results


def _one(
    engine: FaultEngine,
    spec: FaultSpec,
    req: RecoveryTestRequest,
    out_dir: Path,
    offsets: dict[str, float],
    k: int,
) -> tuple[RecoveryResult, FaultRecord]:
    active = engine.prepare(spec)
    try:
        engine.inject(active)
        rec = active.record
        if rec.outcome != "active" or rec.injected_at_mono is None:
            return RecoveryResult(
                fault_id=rec.id,
                kind=spec.kind,
                repeat=k,
                verdict="no-data",
                notes=[f"{rec.outcome}: {rec.message}"],
            ), rec
        if active.action.revert:
            until = (rec.t_active_mono or 0.0) + spec.duration_s
            time.sleep(max(until - time.monotonic(), 0.0))
    finally:
        rec = engine.revert(active)
    t0 = rec.injected_at_mono
    assert t0 is not None
    fault_end = rec.t_revert_mono or t0
    deadline = t0 + req.window_s
    result = None
    while time.monotonic() < deadline:
        time.sleep(0.5)
        result = rmetrics.analyse(
            rmetrics.load_heartbeats(out_dir),
            t0=t0,
            offsets=offsets,
            fault_id=rec.id,
            kind=spec.kind,
            repeat=k,
            window_s=req.window_s,
            gap_s=req.gap_s,
            fault_end=fault_end,
            now=time.monotonic(),
        )
        if rmetrics.watch_done(result, now=time.monotonic(), t0=t0, fault_end=fault_end, gap_s=req.gap_s):
            break
    assert result is not None
    result.injected_at_mono = t0
    result.notes.append(
        f"fault held {fault_end - t0:.3f} s; inject latency {rec.inject_latency_s or 0:.4f} s"
    )
    return result, rec


def measure_offsets(
    cluster: Cluster, shells: Mapping[str, NodeShell], aliases: Mapping[str, str]
) -> dict[str, float]:
    """Each node's clock offset (node wall - orch monotonic), under its inventory name and under
    each Slurm name ``aliases`` maps to it. Raises RemoteError when a node does not answer."""
    offsets = {
        n.name: rmetrics.measure_offset(rmetrics.node_wall_asker(shells[n.name])) for n in cluster.nodes
    }
    offsets.update({alias: offsets[name] for alias, name in aliases.items() if name in offsets})
    return offsets


def _write_record(
    run_root: Path,
    r: RecoveryResult,
    fault: FaultRecord,
    req: RecoveryTestRequest,
    out_dir: Path,
    offsets: dict[str, float],
) -> RecoveryRecord:
    """recovery/<fault-id>.json: the one per-repeat record (timings, verdict, heartbeats)."""
    heartbeats: list[Heartbeat] = []
    total = 0
    if r.injected_at_mono is not None:
        heartbeats, total = records.probe_heartbeats(
            rmetrics.load_heartbeats(out_dir),
            offsets,
            t0=r.injected_at_mono,
            end_s=records.heartbeat_window_end(r, req.window_s),
        )
    record = records.to_record(
        r,
        fault,
        target=req.target,
        duration_s=req.duration_s,
        window_s=req.window_s,
        heartbeats=heartbeats,
        heartbeats_total=total,
        mono_to_wall=records.mono_to_wall_now(),
    )
    atomic_write(run_root / "recovery" / f"{r.fault_id}.json", record.model_dump_json(indent=2) + "\n")
    return record


def quote_argv(argv: list[str]) -> str:
    """For messages: the argv as a shell would read it."""
    return shlex.join(argv)
