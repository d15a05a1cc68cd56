"""`orch recovery-test`: run the probe on every node, inject one fault kind K times, time recovery.

Warm-up first (``warmup_steps`` steps), then per repeat: wait (bounded) for steady state — a run of
``settle_steps`` steps within the pre-fault band —, measure the nodes' clock offsets, inject, hold
for the duration, revert in ``finally``, wait (bounded) for recovery and restore, analyse the
heartbeats. A repeat injected before steady state came says so in its record (``steady: false``).
A repeat that does not recover within the window is a "not-recovered" result, not a hang. The
probe is stopped (stop file, then SIGTERM/SIGKILL of what orch started, by PID) whatever happens.
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.errors import (
    EXIT_INFRA,
    EXIT_OK,
    EXIT_THRESHOLDS,
    ConfigError,
    FaultError,
    OrchError,
    SchedulerError,
)
from orchestrator.faults import recovery_records as records
from orchestrator.faults.base import NodeShell, sh
from orchestrator.faults.catalog import unreachable_warning
from orchestrator.faults.engine import FaultEngine
from orchestrator.metrics import recovery as rmetrics
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.fault import (
    FaultKind,
    FaultParams,
    FaultRecord,
    FaultSpec,
    FaultTarget,
    RecoveryResult,
    RecoverySummary,
    Transport,
)
from orchestrator.models.recovery import Heartbeat, RecoveryRecord
from orchestrator.safefs import make_dir
from orchestrator.scheduler.base import JobSpec, inventory_backend
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.store.db import StoreListener, default_store_path
from orchestrator.store.load import REQUEST_FILE
from orchestrator.store.rundir import RunDir, atomic_write, check_run_id, who
from orchestrator.workloads.probe import ProbeSettings, torchrun_argv

REPO = Path(__file__).resolve().parents[2]


class ContainerMode(StrictModel):
    """Run each node's probe agent in a podman container (for restart-container)."""

    rootfs: Path = Field(description="a root filesystem folder (symlinks into the bind-mounted /usr)")
    storage: Path = Field(description="podman --root / --runroot parent, cleaned by the caller")
    binds: list[str] = Field(default_factory=list, description="SRC:DST[:ro] bind mounts")


class RecoveryTestRequest(StrictModel):
    kind: FaultKind
    target: str
    duration_s: float = 5.0
    margin_s: float = 2.0
    repeat: int = Field(default=1, ge=1, le=100)
    params: FaultParams = Field(default_factory=FaultParams)
    force: bool = False
    probe: ProbeSettings = Field(default_factory=ProbeSettings)
    transport: Transport = "socket"
    python: str = Field(default_factory=lambda: str(REPO / ".venv" / "bin" / "python"))
    warmup_steps: int = 30
    settle_steps: int = Field(
        default=30, ge=2, description="before each injection: a run of this many steps in the pre-fault band"
    )
    settle_timeout_s: float = Field(default=30.0, gt=0, description="the longest wait for that run")
    window_s: float = 60.0
    gap_s: float = 1.0
    container: ContainerMode | None = None
    launcher: Literal["auto", "ssh", "slurm"] = Field(
        default="ssh",
        description="ssh: torchrun agents over the kept-open shells; slurm: sbatch --requeue;"
        " auto: slurm when the inventory has Slurm (resolve_launcher)",
    )


def resolve_launcher(req: RecoveryTestRequest, cluster: Cluster) -> RecoveryTestRequest:
    """``auto`` made concrete, as scale-test chooses its backend (scheduler.base.inventory_backend):
    Slurm for an inventory with remote hosts or an ``orch_slurm_conf``; torchrun over SSH when every
    host is local and no Slurm is named."""
    if req.launcher != "auto":
        return req
    slurm = cluster.vars.orch_slurm_conf is not None or inventory_backend(cluster) == "slurm"
    return req.model_copy(update={"launcher": "slurm" if slurm else "ssh"})


class ProbeJob:
    """The probe's torchrun agents on the nodes, started detached over the kept-open shells."""

    def __init__(
        self,
        cluster: Cluster,
        shells: Mapping[str, NodeShell],
        req: RecoveryTestRequest,
        out_dir: Path,
        run_id: str,
    ) -> None:
        self.cluster, self.shells, self.req, self.out_dir, self.run_id = cluster, shells, req, out_dir, run_id
        self.pids: dict[str, int] = {}
        self.containers: dict[str, str] = {}

    def master_addr(self) -> str:
        n = self.cluster.nodes[0]
        return str(n.fabric_address or n.address)

    def podman(self) -> list[str]:
        c = self.req.container
        assert c is not None
        return [
            "podman",
            "--runtime",
            "runc",
            "--root",
            str(c.storage / "root"),
            "--runroot",
            str(c.storage / "run"),
        ]

    def start(self) -> None:
        """Start one agent per node; raises FaultError when a node refuses."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "stop").unlink(missing_ok=True)
        s = self.req.probe
        for k, node in enumerate(self.cluster.nodes):
            argv = torchrun_argv(
                s,
                python=self.req.python,
                out_dir=self.out_dir,
                node_rank=k,
                nnodes=len(self.cluster.nodes),
                master_addr=self.master_addr(),
                run_id=self.run_id,
            )
            env = {**s.env(), "ORCH_NODE": node.name, "ORCH_PROBE_RUN": self.run_id, "PYTHONPATH": str(REPO)}
            log = self.out_dir / f"agent-{node.name}.log"
            if self.req.container is None:
                line = (
                    f"cd {sh(str(REPO))} && setsid {sh('env', *(f'{k}={v}' for k, v in env.items()), *argv)}"
                    f" </dev/null >{sh(str(log))} 2>&1 & echo $!"
                )
            else:
                name = f"orch-probe-{self.run_id}-{node.name}"
                c = self.req.container
                run = [
                    *self.podman(),
                    "run",
                    "-d",
                    "--name",
                    name,
                    "--network",
                    "host",
                    "--ulimit",
                    "nofile=1024:1024",
                    "--ulimit",
                    "nproc=1024:1024",
                    "--log-driver",
                    "k8s-file",
                    "--log-opt",
                    f"path={log}",
                    "-w",
                    str(REPO),
                    *(a for b in c.binds for a in ("-v", b)),
                    "-v",
                    f"{self.out_dir}:{self.out_dir}",
                    *(a for k2, v in env.items() for a in ("-e", f"{k2}={v}")),
                    "--rootfs",
                    str(c.rootfs),
                    *argv,
                ]
                line = sh(*run)
                self.containers[node.name] = name
            res = self.shells[node.name].run_script(line, timeout=60)
            if not res.ok:
                raise FaultError(f"{node.name}: cannot start the probe: {res.brief()}")
            if self.req.container is None:
                self.pids[node.name] = int(res.stdout.strip().splitlines()[-1])

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop file, wait, then SIGTERM/SIGKILL the agents orch started (by PID) or rm containers."""
        with contextlib.suppress(OSError):
            (self.out_dir / "stop").touch()
        deadline = time.monotonic() + grace_s
        for name, pid in self.pids.items():
            shell = self.shells[name]
            alive = f"kill -0 {pid} 2>/dev/null"
            while time.monotonic() < deadline and shell.run_script(alive, timeout=10).ok:
                time.sleep(0.3)
            shell.run_script(
                f"kill -TERM -{pid} 2>/dev/null; sleep 1; kill -KILL -{pid} 2>/dev/null; :", timeout=20
            )
        for name, cname in self.containers.items():
            self.shells[name].run_script(
                f"{sh(*self.podman(), 'rm', '-f', '-t', '5', cname)} >/dev/null 2>&1; :", timeout=120
            )


def probe_job_spec(
    s: ProbeSettings,
    *,
    python: str,
    out_dir: Path,
    run_id: str,
    workdir: Path,
    master_addr: str,
    nodelist: list[str],
) -> JobSpec:
    """The probe as one Slurm job: one torchrun agent per node (srun, one task per node), static
    rendezvous on master_addr, ``--requeue``. Each agent's node rank is its SLURM_NODEID (through
    PET_NODE_RANK, which torchrun reads). The job name is ``probe-<run_id>`` (outside ``orch-*``,
    which some tooling cancels wholesale). Raises ConfigError when run_id is not a valid run id."""
    check_run_id(run_id)
    argv = torchrun_argv(
        s, python=python, out_dir=out_dir, node_rank=None, nnodes=len(nodelist), master_addr=master_addr,
        run_id=run_id,
    )  # fmt: skip
    return JobSpec(
        name=f"probe-{run_id}",
        step_id="probe",
        nodes=nodelist,
        nnodes=len(nodelist),
        ranks_per_node=1,
        argv=argv,
        env={**s.env(), "ORCH_PROBE_RUN": run_id, "PYTHONPATH": str(workdir)},
        master_addr=master_addr,
        workdir=workdir,
        launch="srun",
        rank_logs=False,
        task_env={"PET_NODE_RANK": "SLURM_NODEID", "ORCH_NODE": "SLURMD_NODENAME"},
        kill_on_bad_exit=False,
        exclusive=False,
        requeue=True,
        output=out_dir / "slurm-%j.out",
        append_output=True,
        script=out_dir / "probe.sbatch",
    )


class SlurmProbeJob:
    """The probe as one Slurm job (``sbatch --requeue``, one torchrun agent per node via srun).

    A requeue (``scontrol requeue``, or Slurm's own after a node failure) restarts every agent;
    the probe counts it as a new generation and resumes after its last complete step. Every Slurm
    command goes through the one Slurm client (scheduler/slurm.py).
    """

    def __init__(self, cluster: Cluster, req: RecoveryTestRequest, out_dir: Path, run_id: str) -> None:
        self.cluster, self.req, self.out_dir, self.run_id = cluster, req, out_dir, check_run_id(run_id)
        self.sched = SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
        self.job_id: str | None = None

    def spec(self) -> JobSpec:
        first = self.cluster.nodes[0]
        return probe_job_spec(
            self.req.probe,
            python=self.req.python,
            out_dir=self.out_dir,
            run_id=self.run_id,
            workdir=REPO,
            master_addr=str(first.fabric_address or first.address),
            nodelist=[n.name for n in self.cluster.nodes],
        )

    def script(self) -> str:
        return self.sched.render(self.spec())

    def start(self) -> None:
        """Submit the job; raises SchedulerError when sbatch refuses it."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "stop").unlink(missing_ok=True)
        self.job_id = self.sched.submit(self.spec())

    def state(self) -> str:
        """squeue's state of the job ('' once it left the queue)."""
        if self.job_id is None:
            return ""
        return self.sched.queue_state(self.job_id)

    def node_aliases(self) -> dict[str, str]:
        """Slurm node name -> inventory name (the probe under Slurm names its node $SLURMD_NODENAME)."""
        idents = {n.name: {n.name, str(n.address)} for n in self.cluster.nodes}
        return rmetrics.slurm_node_aliases(self.sched.show_nodes(), idents)

    def requeue(self, start_now: bool = True) -> None:
        """scontrol requeue; with start_now, lift Slurm's requeue BeginTime hold (about 120 s)."""
        assert self.job_id is not None
        self.sched.requeue(self.job_id)
        if not start_now:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.state() != "PENDING":
            time.sleep(0.25)
        self.sched.start_now(self.job_id)

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop file, wait for the job to end, then scancel it."""
        with contextlib.suppress(OSError):
            (self.out_dir / "stop").touch()
        if self.job_id is None:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.state() in ("RUNNING", "COMPLETING"):
            time.sleep(0.5)
        with contextlib.suppress(SchedulerError):
            self.sched.cancel([self.job_id])


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

    ``run_root`` becomes a run directory like scale-test's: inventory.json and the resolved
    request (recovery-test.json), a journal from run_started to run_finished, the probe's raw
    heartbeat files (probe/), one RecoveryRecord per repeat (recovery/<fault-id>.json, heartbeats
    included), fault records (faults/); the run is ingested into the results store as it goes.

    Raises:
        SafetyError: the fault was refused before anything ran (no run directory is made).
        FaultError / RemoteError: the probe or a node failed outside the fault itself.
    """
    fault_dir = run_root / "faults"
    if req.container is not None:
        st = req.container.storage
        params = req.params.model_copy(
            update={"podman_root": str(st / "root"), "podman_runroot": str(st / "run")}
        )
        req = req.model_copy(update={"params": params})
    if "master_port" not in req.probe.model_fields_set:
        # A fresh port per run: a previous run's store socket may still linger.
        req = req.model_copy(
            update={"probe": req.probe.model_copy(update={"master_port": 20000 + secrets.randbelow(20000)})}
        )
    req = resolve_launcher(req, cluster)
    if req.launcher == "slurm" and req.container is not None:
        raise ConfigError("--launcher slurm does not run the probe in containers")
    engine = FaultEngine(cluster, shells, record_dir=fault_dir)
    # Guards first: nothing starts (and no run directory is made) if the fault would be refused.
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
    if spec.kind not in ("kill-worker", "pause-worker", "restart-container", "node-loss"):
        engine.prepare(spec)
    rundir = _open_run(run_root, cluster, req)
    store = StoreListener(default_store_path(run_root.parent))
    store.event("run_started", {"run_dir": str(run_root)})
    t_start = time.monotonic()
    status, code, error = "infra", EXIT_INFRA, ""
    try:
        summary = _run(engine, spec, cluster, shells, req, rundir, store, progress)
        bad = summary.verdicts.get("not-recovered") or summary.verdicts.get("no-data")
        status, code = ("failed", EXIT_THRESHOLDS) if bad else ("accepted", EXIT_OK)
        return summary
    except KeyboardInterrupt:
        status, code = "interrupted", 130
        raise
    except OrchError as e:
        code, error = e.exit_code, str(e)
        status = "infra" if code == EXIT_INFRA else "failed"
        raise
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        extra = {"error": error} if error else {}
        with contextlib.suppress(OrchError):
            rundir.event("run_finished", status=status, exit_code=code, wall_s=time.monotonic() - t_start,
                         **extra)  # fmt: skip
        store.event("run_finished", {})


def _open_run(run_root: Path, cluster: Cluster, req: RecoveryTestRequest) -> RunDir:
    """The run directory with its resolved inputs and run_started; raises InfraError."""
    make_dir(run_root)
    rundir = RunDir(run_root)
    rundir.write_model("inventory.json", cluster)
    rundir.write_model(REQUEST_FILE, req)
    rundir.event(
        "run_started", run_id=rundir.run_id, plan=f"recovery-{req.kind}", backend=req.launcher, steps=[],
        fault_kind=req.kind, target=req.target, repeat=req.repeat, duration_s=req.duration_s, **who(),
    )  # fmt: skip
    return rundir


def _run(
    engine: FaultEngine,
    spec: FaultSpec,
    cluster: Cluster,
    shells: Mapping[str, NodeShell],
    req: RecoveryTestRequest,
    rundir: RunDir,
    store: StoreListener,
    progress: Callable[[str], None],
) -> RecoverySummary:
    run_root = rundir.root
    warnings = [w for w in [unreachable_warning(req.kind, req.transport)] if w]
    for w in warnings:
        rundir.event("warning", message=w)
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
        for k in range(req.repeat):
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
            store.event("recovery_done", {})
    finally:
        job.stop()
        rundir.event("probe_stopped")
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
    # The per-repeat figures live in recovery/<fault-id>.json only; the summary points at them.
    atomic_write(
        run_root / "faults" / f"recovery-{req.kind}.json",
        summary.model_dump_json(indent=2, exclude={"results"}) + "\n",
    )
    return summary


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
