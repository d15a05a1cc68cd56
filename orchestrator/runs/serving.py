"""The serving steps of a scale-test run: start the engine, wait for its health, drive each load
level, judge, stop the engine (docs/serving.md, "How a serving step runs").

A ServingRunner runs inside the run's one lifecycle (runs/lifecycle.py) and submits each engine
through the run's scheduler protocol (scheduler/): on Slurm one job per replica (sbatch + srun on
the replica's node, the one Slurm client of scheduler/slurm.py), on the local backend a process of
this machine. For each serving step, in plan order:

1. one engine per replica on its node, its argv from the plan (workloads/engines.py), its output
   in steps/<step>/engine-<node>.log (Slurm: sbatch --output, collected from the nodes when they
   keep their own folders);
2. the health endpoint polled until it answers 200, bounded by the workload's health_timeout_s
   from submission; an engine whose job ends first, or the bound passing, ends the step as an
   infrastructure failure naming the node, the job state and the last lines of its log;
3. each load level driven by the load generator (workloads/loadgen.py), its records appended to
   steps/<step>/records-<level>.jsonl as the requests end; model load time is recorded to health
   and to the end of each engine's first successful request. The plan's faults on this step and
   level are injected and reverted meanwhile (runs/serving_faults.py), and with a restart policy
   an engine whose job ends is started again on the same node and port while the load goes on
   (a new process; on Slurm a new job of the same script, its output appended to the same log);
   each fault's recovery is computed from the level's records when it ends;
4. the engines stopped (their jobs cancelled) and the levels summarised (metrics/serving.py): the
   step's figures and each node's per level, the cost, and the thresholds judged, each failure
   naming step, level and figure;
5. with the plan's `quality:`, after the levels and while the engines serve, the output-quality
   gate's passes on the step's engine, judged against the baseline's outputs when the thresholds
   name one (runs/serving_quality.py).

Whatever ends the run (success, a failing threshold, an exception, Ctrl-C, SIGTERM), every engine
still running is stopped: after each step, in the runner's `finally`, and by the lifecycle's
close (on_close), which runs on any ending. The step's whole time is bounded by the plan's
step_timeout_s (a timer stops the load generator).
"""

from __future__ import annotations

import contextlib
import http.client
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from orchestrator.errors import OrchError
from orchestrator.metrics import serving as SM
from orchestrator.metrics import verdict as V
from orchestrator.metrics.cost import cost_at, level_cost
from orchestrator.metrics.percentiles import median_of
from orchestrator.metrics.serving_baseline import ServingBaselineFigures, baseline_failures, baseline_ratios
from orchestrator.models.cluster import Cluster
from orchestrator.models.cost import CostAtRate, CostModel
from orchestrator.models.events import RunWarning, StepDone, StepSubmitted
from orchestrator.models.fault import ENGINE_ENV as ENGINE_TAG_ENV
from orchestrator.models.fault import ENGINE_NODE_ENV
from orchestrator.models.plan import Plan
from orchestrator.models.serving import DatasetLengths, ServingStep, ServingWorkload
from orchestrator.models.serving_recovery import EngineRestart
from orchestrator.models.serving_results import (
    BaselineRatios,
    CapacityResult,
    EngineRun,
    LevelSummary,
    RequestRecord,
    ServingCost,
    ServingLevelResult,
    ServingStepResult,
)
from orchestrator.remote.base import NodeShell
from orchestrator.remote.nodefiles import NodeFiles, RunDataLayout, node_files, run_data_layout
from orchestrator.runs.capacity import CapacityRun, capacity_template, probe_name
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.runs.serving_faults import LiveRecords, ServingFaults, attach_recovery
from orchestrator.runs.serving_quality import quality_failures, run_step_quality
from orchestrator.safefs import NotInside, read_inside, read_regular
from orchestrator.scheduler.base import JobScheduler, JobSpec, backend_traits, random_port_base, run_job_name
from orchestrator.scheduler.local import LOCAL_ADDR, free_port
from orchestrator.store.db import ResultsStore, default_store_path
from orchestrator.store.load import SERVING_RESULT
from orchestrator.store.rundir import atomic_write
from orchestrator.telemetry.power import level_power
from orchestrator.telemetry.sampler import TelemetrySampler
from orchestrator.workloads.engine_specs import engine_spec
from orchestrator.workloads.engines import engine_argv, engine_env, health_path, variant_of
from orchestrator.workloads.loadgen import (
    LevelRunner,
    LoadSpec,
    RecordWriter,
    Target,
    level_specs,
    read_lengths,
    read_prompts,
    read_trace,
)
from orchestrator.workloads.sessions import generator_for, prefix_cache, prefix_cache_counters

HEALTH_POLL_S = 0.5
WATCH_POLL_S = 1.0
"""How often the engines' jobs are polled during a level when a restart policy is set."""
HEALTH_REQUEST_S = 2.0
LOG_TAIL_LINES = 5
# The engine's job lives a little longer than the step it serves: orch stops it itself, and the
# scheduler's limit is only the bound should orch die without stopping it.
JOB_MARGIN_S = 300
ENGINE_ENV = {"HF_HUB_OFFLINE": "1"}
"""Added to the engine's environment: the model is a path on the node; no hub is asked."""

STOP_WAIT_S = 60.0
"""How long the end of a step waits for its cancelled engine jobs to leave the queue."""


DATA_FILE_LIMIT = 256 * 2**20
"""The largest lengths dataset or arrival trace a plan may name (bytes): read into memory whole."""


def _data_lines(path: str) -> list[str]:
    """The lines of a plan's data file: a regular file only, at most DATA_FILE_LIMIT bytes, UTF-8."""
    return read_regular(Path(path), max_bytes=DATA_FILE_LIMIT).decode("utf-8").splitlines()


class _StepEnded(Exception):
    """The step cannot go on: its verdict and why."""

    def __init__(self, verdict: V.Verdict, reason: str, engine: EngineRun | None = None) -> None:
        super().__init__(reason)
        self.verdict, self.reason, self.engine = verdict, reason, engine


def serving_result_path(root: Path, step_id: str) -> Path:
    """steps/<step_id>/serving.json of the run at root (the step folder made if missing)."""
    from orchestrator.store.rundir import RunDir

    return RunDir(root).step_dir(step_id) / SERVING_RESULT


def price_of(w: ServingWorkload, step: ServingStep, cluster: Cluster) -> tuple[float, int, str] | None:
    """(price per node-hour, nodes, where the price came from) for a step's cost: the plan's
    price_per_node_hour, else the inventory's orch_gpu_hour_cost x the GPUs each node serves with
    (tensor_parallel); None when neither is given (an external engine needs the plan's price)."""
    nodes = max(1, len(step.nodes))
    if w.price_per_node_hour is not None:
        return w.price_per_node_hour, nodes, f"plan price_per_node_hour {w.price_per_node_hour:g}"
    gpu = cluster.vars.orch_gpu_hour_cost
    if gpu is None or not step.nodes:
        return None
    per_node = gpu * step.gpus_per_replica_node
    return (
        per_node,
        nodes,
        (f"inventory orch_gpu_hour_cost {gpu:g} x {step.gpus_per_replica_node} GPU(s) per node"),
    )


def cost_model_of(
    w: ServingWorkload, cluster: Cluster, price: tuple[float, int, str] | None
) -> CostModel | None:
    """A step's cost model: the plan's `cost`, else the plan's price_per_node_hour alone, else the
    inventory's orch_cost_* variables, else its orch_gpu_hour_cost alone (price_of), else None."""
    if w.cost is not None:
        return w.cost
    if w.price_per_node_hour is None and cluster.vars.orch_cost is not None:
        return cluster.vars.orch_cost
    return None if price is None else CostModel(node_hour=price[0])


def measured_outage_s(res: ServingStepResult) -> float | None:
    """The mean outage of the step's fault injections that measured one (None: none did): the
    outage of one failure, for the downtime part of the cost."""
    outages = [r.outage_s for f in res.faults if (r := f.recovery) is not None and r.outage_s is not None]
    return sum(outages) / len(outages) if outages else None


NO_PROBE_POWER = "power is sampled per fixed level, not per capacity probe"


def capacity_cost(
    cap: CapacityResult, model: CostModel, nodes: int, outage_s: float | None, watts_why: str = NO_PROBE_POWER
) -> CostAtRate | None:
    """The cost by part at the capacity rate: the throughput of each repeat's probe at its capacity
    (one that met the target), the median over the repeats; None when there is none. Energy is
    missing there, ``watts_why`` saying why."""
    at = [
        p.summary
        for r in cap.repeats
        for p in r.probes
        if r.capacity is not None and p.met and p.rate == r.capacity and p.summary is not None
    ]
    if cap.capacity is None or not at:
        return None
    return cost_at(
        requests_per_s=median_of(s.requests_per_s for s in at),
        output_tokens_per_s=median_of(s.output_tokens_per_s for s in at),
        model=model, nodes=nodes, watts=None, outage_s=outage_s, watts_why=watts_why,
        rate=f"capacity {cap.capacity:g} req/s (n={sum(s.n for s in at)})",
    )  # fmt: skip


def capacity_watts_why(res: ServingStepResult) -> str:
    """Why energy is missing at the capacity: the levels' reason when they measured no power (no
    tool on a node, telemetry off), else that the capacity probes are not sampled."""
    for level in res.levels:
        if level.power is not None and (why := level.power.why_not) is not None:
            return why
    return NO_PROBE_POWER if res.step.nodes else "engine: external: no inventory node to sample"


def http_ok(url: str, timeout: float) -> bool:
    """Whether GET url answers 200 within timeout (any error: False)."""
    u = urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(u.hostname or "", u.port, timeout=timeout)
    try:
        conn.request("GET", u.path or "/")
        resp = conn.getresponse()
        resp.read()
        return resp.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def engine_job(
    plan: Plan,
    cluster: Cluster,
    step: ServingStep,
    w: ServingWorkload,
    name: str,
    *,
    port: int,
    here: bool,
    bindir: str,
    env: dict[str, str],
    folder: Path,
    root: Path,
    layout: RunDataLayout,
    run_id: str = "",
) -> tuple[EngineRun, JobSpec]:
    """The engine of one replica on node `name` and its job: on this machine (here) a process
    listening on 127.0.0.1, its log written into the step folder; on Slurm a one-task job on the
    node, listening on its fabric address (else its address), its output (sbatch --output) in the
    step's folder on the node, its script in the step folder here."""
    node = cluster.node(name)
    env = {**env, ENGINE_NODE_ENV: name}  # with ORCH_ENGINE, the fault selector NODE:engine
    host = LOCAL_ADDR if here else str(node.fabric_address or node.address)
    variant = variant_of(plan, cluster, w)  # the stack's variant the workload names, if any
    argv = engine_argv(w, bindir=bindir, host=host, port=port, gpu_vendor=node.gpu_vendor, variant=variant)
    log_name = f"engine-{name}.log"
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    engine = EngineRun(node=name, url=url, argv=argv, log=(folder / log_name).relative_to(root).as_posix())
    if here:
        workdir, output, script = folder.absolute() / f"engine-{name}", folder / log_name, None
    else:
        workdir = layout.node_path("steps", step.id)
        output = layout.node_path("steps", step.id, log_name)
        script = folder.absolute() / f"engine-{name}.sbatch"
    # Hugging Face's caches and its update-check mark go to the step's folder, not the node's home
    # (transformers serve wrote ~/.cache/huggingface on the lab's nodes).
    env = {**env, "HF_HOME": str(workdir / f"hf-home-{name}")}
    spec = JobSpec(
        name=run_job_name(run_id, plan.name, step.id),
        step_id=step.id,
        nodes=[] if here else [name],
        nnodes=1,
        ranks_per_node=1,
        gpus_per_node=0 if node.gpu_vendor == "none" else step.gpus_per_replica_node,
        argv=argv,
        env=engine_env(env, variant),
        time_limit_s=plan.step_timeout_s + JOB_MARGIN_S,
        workdir=workdir,
        output=output,
        rank_logs=False,
        script=script,
        partition=plan.partition or cluster.vars.orch_partition,
        notes=[f"orch serving step {step.id}: engine {w.engine} on {name}"],
    )
    return engine, spec


class _Records:
    """A level's records file that the load generator's threads write to; once closed (the level
    ended, or the run was interrupted while requests were still in flight), later records are
    dropped rather than written to a closed descriptor."""

    def __init__(self, path: Path) -> None:
        self._writer: RecordWriter | None = RecordWriter(path)
        self._lock = threading.Lock()

    def write(self, rec: RequestRecord) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.write(rec)

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


class ServingRunner:
    """The serving steps of one run; see the module docstring."""

    def __init__(
        self,
        plan: Plan,
        cluster: Cluster,
        steps: list[ServingStep],
        sched: JobScheduler,
        backend: Literal["slurm", "local"],
        life: RunLifecycle,
        python: str,
        env: dict[str, str] | None = None,
        shells: Mapping[str, NodeShell] | None = None,
        *,
        force_faults: bool = False,
        telemetry: TelemetrySampler | None = None,
        no_telemetry: str = "power not sampled in this kind of run",
    ) -> None:
        self.telemetry, self.no_telemetry = telemetry, no_telemetry  # GPU power per level, or why not
        self.plan, self.cluster, self.sched, self.backend, self.life = plan, cluster, sched, backend, life
        self.here = backend_traits(backend).on_this_machine
        self.bindir = str(Path(python).parent)  # the stack's <prefix>/bin: its engines' programs
        self.env = {**(env or {}), **ENGINE_ENV}
        self.shells = shells
        self.results = [ServingStepResult(step=s) for s in steps]
        self.workloads = {w.name: w for w in plan.serving}
        self.layout = run_data_layout(cluster, life.root)
        self.files = NodeFiles(self.layout, {})
        self._live: dict[str, EngineRun] = {}  # job id -> engine, for jobs not yet stopped
        self._gen: LevelRunner | None = None
        self._capacity: CapacityRun | None = None  # the capacity search in progress, to stop
        self._lock = threading.Lock()
        self._expired = False
        self._stopped: set[str] = set()  # steps whose engines were stopped
        self._base_port = random_port_base()
        self._t_submit = time.monotonic()  # when the current step's engines were submitted
        self._specs: dict[tuple[str, str], JobSpec] = {}  # (step, node) -> its engine's job, for restarts
        self._jobs: dict[str, list[str]] = {}  # step -> every engine job it submitted (restarts too)
        self._halted = False  # stop_all ran: no engine is started again
        self._restart_lock = threading.Lock()  # the level's watcher and the check after the level
        self.faults = ServingFaults(plan, cluster, steps, life, force=force_faults, tag=self.engine_tag)
        self._baselines: dict[str, ServingBaselineFigures | str] = {}  # name -> figures, or why not read

    # --- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        """Run every serving step not finished yet, in plan order. However it ends, every engine
        still running is stopped (here and by the lifecycle's close, for an ending this frame
        does not see) and the nodes' folders of the run are removed."""
        if not self.results:
            return
        self.life.on_close(self.stop_all)
        with node_files(self.cluster, self.layout, self.shells) as self.files:
            try:
                self.faults.start()  # its close (reverting what is active) is on the lifecycle's close
                self._start_telemetry()
                todo = [r for r in self.results if r.verdict == "skipped"]
                self.files.prepare({n: [("steps", r.step.id) for r in todo if n in r.step.nodes]
                                    for n in sorted({n for r in todo for n in r.step.nodes})})  # fmt: skip
                for res in todo:
                    self._step(res)
            finally:
                self.stop_all()
                if self.layout.remote:
                    with contextlib.suppress(OrchError):
                        if errors := self.files.remove_all():
                            self.life.journal("node_folders_left", errors=errors)

    def engine_tag(self, step: ServingStep) -> str:
        """ORCH_ENGINE of the step's engines: <run id>.<step id> (the fault selector NODE:engine)."""
        return f"{self.life.run_id}.{step.id}"

    def stop_all(self) -> None:
        """Stop the load generator and cancel every engine job still running; idempotent, never
        raises (a cancel that fails is journaled)."""
        with self._lock:
            self._halted = True
            gen, self._gen = self._gen, None
            cap, self._capacity = self._capacity, None
            live, self._live = dict(self._live), {}
        if gen is not None:
            gen.stop()
        if cap is not None:
            cap.stop()
        if not live:
            return
        try:
            self.sched.cancel(list(live))
        except OrchError as e:
            with contextlib.suppress(OrchError):
                self.life.journal("engine_cancel_failed", jobs=list(live), error=str(e))
        with contextlib.suppress(OrchError):
            self.life.journal("engines_stopped", jobs=list(live))

    # --- one step ------------------------------------------------------------------------------

    def _step(self, res: ServingStepResult) -> None:
        step, w = res.step, self.workloads[res.step.workload]
        t0 = time.monotonic()
        self._expired = False
        timer = threading.Timer(self.plan.step_timeout_s, self._time_up)
        timer.daemon = True
        timer.start()
        verdict: V.Verdict = "pass"
        try:
            self._start(res, w)
            self._wait_healthy(res, w)
            self._drive(res, w)
            self._search_capacity(res, w)
            if self.plan.quality is not None and res.engines:
                folder = self.life.rundir.step_dir(step.id)
                res.quality = run_step_quality(self.plan.quality, res, w, folder, self.life.root)
        except _StepEnded as e:
            verdict = e.verdict
            timer.cancel()
            self._stop(res)  # its log is here once stopped (collected from the node)
            res.reasons.append(e.reason + (self._tail(e.engine) if e.engine is not None else ""))
        finally:
            timer.cancel()
            self._stop(res)
        self._summarise(res, w)
        for level in res.levels:
            if level.summary is None:
                continue
            fails = V.serving_threshold_failures(step.id, w, level.summary)
            fails += self._baseline_misses(step, w, level.summary)
            level.baseline = self._baseline_ratios(step, w, level.summary)
            s = level.summary
            if s.ok == 0:
                none_ok = f"({s.errors} errors, {s.aborted} aborted of n={s.n})"
                fails.insert(0, f"step {step.id}, level {level.level}: no request succeeded {none_ok}")
            if fails:
                verdict = V.worst([verdict, "fail"])
                res.reasons += fails
        if fails := quality_failures(res):
            verdict = V.worst([verdict, "fail"])
            res.reasons += fails
        if res.quality is not None and res.quality.not_judged is not None:
            res.warnings.append(f"output quality not judged: {res.quality.not_judged}")
        res.verdict = verdict
        res.wall_s = round(time.monotonic() - t0, 3)
        atomic_write(serving_result_path(self.life.root, step.id), res.model_dump_json(indent=2) + "\n")
        jobs = ",".join(e.job_id for e in res.engines if e.job_id) or None
        self.life.log(StepDone(step=step.id, job_id=jobs, verdict=res.verdict, reasons=res.reasons))

    def _time_up(self) -> None:
        self._expired = True
        with self._lock:
            cap = self._capacity
        if cap is not None:
            cap.stop()
        with self._lock:
            gen = self._gen
        if gen is not None:
            gen.stop()

    def _start(self, res: ServingStepResult, w: ServingWorkload) -> None:
        """Submit one engine per replica (nothing for external: its URL is the target)."""
        step = res.step
        self._t_submit = time.monotonic()
        if w.engine == "external":
            assert w.url is not None
            res.engines.append(EngineRun(node="external", url=w.url.rstrip("/"), health="external"))
            return
        folder = self.life.rundir.step_dir(step.id)
        per = step.nodes_per_replica
        for r in range(step.replicas):
            name = step.nodes[r * per]
            port = free_port() if self.here else self._base_port + step.index * 64 + r
            engine, spec = engine_job(
                self.plan, self.cluster, step, w, name, port=port, here=self.here, bindir=self.bindir,
                env={**self.env, ENGINE_TAG_ENV: self.engine_tag(step)}, folder=folder,
                root=self.life.root, layout=self.layout, run_id=self.life.run_id,
            )  # fmt: skip
            res.engines.append(engine)
            self._specs[(step.id, name)] = spec
            try:
                job_id = self.sched.submit(spec)
            except OrchError as e:
                raise _StepEnded("infra", f"engine on {name} could not be started: {e}") from e
            engine.job_id = engine.first_job_id = job_id
            self._jobs.setdefault(step.id, []).append(job_id)
            with self._lock:
                self._live[job_id] = engine
            self.life.log(StepSubmitted(step=step.id, job_id=job_id))

    def _wait_healthy(self, res: ServingStepResult, w: ServingWorkload) -> None:
        """Poll each engine's health endpoint until it answers 200, bounded by health_timeout_s
        from submission; raises _StepEnded (infra) when an engine's job ends first or the bound
        passes."""
        t0 = self._t_submit
        deadline = t0 + w.health_timeout_s
        path = health_path(w)
        waiting = list(res.engines)
        while waiting:
            ids = [e.job_id for e in waiting if e.job_id]
            states = self.sched.poll(ids) if ids else {}
            for e in list(waiting):
                state = states.get(e.job_id or "")
                if state is not None and state.status.terminal:
                    e.health, e.job_state = "exited", state.raw_state
                    why = f" ({state.reason})" if state.reason else ""
                    job = f"job {e.job_id} {state.raw_state}{why}"
                    raise _StepEnded("infra", f"engine on {e.node} ended before it answered {path}: {job}", e)
                if http_ok(e.url + path, HEALTH_REQUEST_S):
                    if e.health != "external":
                        e.health = "healthy"
                        e.load_to_health_s = round(time.monotonic() - t0, 3)
                    waiting.remove(e)
            if not waiting:
                break
            if time.monotonic() >= deadline or self._expired:
                for e in waiting:
                    e.health = "timeout" if e.health != "external" else e.health
                nodes = ", ".join(e.node for e in waiting)
                bound = f"{w.health_timeout_s} s (health_timeout_s)"
                why = f"engine on {nodes} did not answer {path} within {bound}"
                raise _StepEnded("infra", why, waiting[0])
            time.sleep(HEALTH_POLL_S)
        self.life.journal("engines_healthy", step=res.step.id,
                          load_to_health_s={e.node: e.load_to_health_s for e in res.engines})  # fmt: skip

    def _drive(self, res: ServingStepResult, w: ServingWorkload) -> None:
        """Each load level in turn, its records appended to records-<level>.jsonl as they end."""
        step = res.step
        folder = self.life.rundir.step_dir(step.id)
        targets = [Target(e.node, e.url) for e in res.engines]
        data, trace, prompts = self._datasets(w), self._trace(w), self._prompts(w)
        specs = level_specs(w, targets, datasets=data, trace=trace, prompts=prompts)
        t0 = self._t_submit
        first_ok: dict[str, float] = {}
        engines = {e.node: e for e in res.engines}
        for spec in specs:
            path = folder / f"records-{spec.level}.jsonl"
            res.levels.append(ServingLevelResult(level=spec.level, records=self._rel(path), summary=None))
            writer = _Records(path)
            live = LiveRecords()
            done = threading.Event()  # the level ended: its faults are reverted, the watcher stops
            threads: list[threading.Thread] = []
            try:

                def emit(rec: RequestRecord, writer: _Records = writer, live: LiveRecords = live) -> None:
                    writer.write(rec)
                    live.add(rec)
                    if rec.status == "ok" and rec.server not in first_ok:
                        first_ok[rec.server] = time.monotonic()
                        e = engines.get(rec.server)
                        if e is not None and e.health == "healthy":
                            e.load_to_first_answer_s = round(first_ok[rec.server] - t0, 3)

                gen = generator_for(spec, emit)
                cache_before = self._cache_counters(w, res, spec)
                with self._lock:
                    self._gen = gen
                threads = self.faults.level_started(res, w.steady, spec.level, gen, live, done)
                if w.restart.max_restarts > 0:
                    watcher = threading.Thread(target=self._watch, args=(res, w, done), daemon=True)
                    watcher.start()
                    threads.append(watcher)
                try:
                    self._power_started(res, spec.level)
                    gen.run()
                finally:
                    with self._lock:
                        self._gen = None
                    gen.stop()  # an interrupted level: its requests in flight are aborted
                    self._power_ended(res, spec.level)
            finally:
                done.set()
                self.faults.level_ended(threads)  # reverted, and no restart half-way
                writer.close()
            attach_recovery(res, spec.level, live.snapshot(), w.steady, time.time())
            if spec.sessions is not None:
                counters = engine_spec(w.engine).prefix_cache_counters
                after = self._cache_counters(w, res, spec)
                res.levels[-1].prefix_cache = prefix_cache(w.engine, counters, cache_before, after)
            if self._expired:
                limit = f"{self.plan.step_timeout_s} s, step_timeout_s"
                raise _StepEnded("infra", f"the step's time limit ({limit}) passed during level {spec.level}")
            if w.restart.max_restarts > 0:  # one that ended as the level ended is restarted now
                self._restart_ended(res, w, threading.Event())
            ids = [e.job_id for e in res.engines if e.job_id]
            states = self.sched.poll(ids) if ids else {}
            gone = [(e, states[e.job_id]) for e in res.engines if e.job_id in states
                    and states[e.job_id].status.terminal]  # fmt: skip
            if gone:
                e, st = gone[0]
                e.job_state = st.raw_state
                job = f"job {e.job_id} {st.raw_state}"
                left = " (no restart left)" if w.restart.max_restarts else ""
                raise _StepEnded(
                    "infra", f"engine on {e.node} ended during level {spec.level}: {job}{left}", e
                )

    def _cache_counters(
        self, w: ServingWorkload, res: ServingStepResult, spec: LoadSpec
    ) -> tuple[float, float] | str | None:
        """A session level's engines' prefix-cache counters now (None for other levels, or an
        engine that exposes none: workloads/sessions.py)."""
        counters = engine_spec(w.engine).prefix_cache_counters
        if spec.sessions is None or counters is None:
            return None
        return prefix_cache_counters([e.url for e in res.engines], counters)

    def _search_capacity(self, res: ServingStepResult, w: ServingWorkload) -> None:
        """The workload's capacity search after its fixed levels (runs/capacity.py): each probe's
        records in steps/<step>/records-capacity-<repeat>-<probe>-r<rate>.jsonl. A capacity that
        is not reported is a warning that says why. Raises _StepEnded when the time limit passed."""
        search = w.load.capacity
        if search is None:
            return
        folder = self.life.rundir.step_dir(res.step.id)
        targets = [Target(e.node, e.url) for e in res.engines]
        template = capacity_template(w, targets, datasets=self._datasets(w), prompts=self._prompts(w))
        files = lambda k, i, r: folder / probe_name(k, i, r)  # noqa: E731
        run = CapacityRun(search, w.slos, template, files, rel=self._rel)
        with self._lock:
            self._capacity = None if self._halted else run
        try:
            res.capacity = run.run() if not self._halted else None
        finally:
            with self._lock:
                self._capacity = None
        if res.capacity is not None and res.capacity.refused is not None:
            res.warnings.append(f"capacity not reported: {res.capacity.refused}")
        if self._expired:
            limit = f"{self.plan.step_timeout_s} s, step_timeout_s"
            raise _StepEnded("infra", f"the step's time limit ({limit}) passed during the capacity search")

    # --- the restart policy --------------------------------------------------------------------

    def _watch(self, res: ServingStepResult, w: ServingWorkload, done: threading.Event) -> None:
        """During a level: restart the engines whose job ended, while restarts are left."""
        while not done.wait(WATCH_POLL_S):
            try:
                self._restart_ended(res, w, done)
            except OrchError as e:
                with contextlib.suppress(OrchError):
                    self.life.journal("engine_watch_failed", step=res.step.id, error=str(e))

    def _restarts_of(self, res: ServingStepResult, node: str) -> int:
        return sum(1 for r in res.restarts if r.node == node)

    def _restart_ended(self, res: ServingStepResult, w: ServingWorkload, done: threading.Event) -> None:
        """Start again, on the same node and port, each engine whose job has ended and that has
        restarts left; wait for its health (bounded by health_timeout_s). Raises OrchError when the
        scheduler cannot be asked."""
        with self._restart_lock:
            ids = [e.job_id for e in res.engines if e.job_id]
            states = self.sched.poll(ids) if ids else {}
            for e in res.engines:
                st = states.get(e.job_id or "")
                if st is None or not st.status.terminal:
                    continue
                if self._restarts_of(res, e.node) >= w.restart.max_restarts or self._halted or self._expired:
                    continue
                why = f"job {e.job_id} {st.raw_state}" + (f" ({st.reason})" if st.reason else "")
                self._restart(res, w, e, why)

    def _restart(self, res: ServingStepResult, w: ServingWorkload, e: EngineRun, why: str) -> None:
        ended_at = time.time()
        attempt = self._restarts_of(res, e.node) + 1
        self.life.journal("engine_ended", step=res.step.id, node=e.node, reason=why, restart=attempt)
        if w.restart.delay_s:
            time.sleep(w.restart.delay_s)
        old = e.job_id
        spec = self._specs[(res.step.id, e.node)].model_copy(update={"append_output": True})
        started_at, t0 = time.time(), time.monotonic()
        restart = EngineRestart(node=e.node, ended_at=ended_at, reason=why, attempt=attempt,
                                started_at=started_at, healthy_at=None)  # fmt: skip
        try:
            job_id = self.sched.submit(spec)
        except OrchError as err:
            restart.reason = f"{why}; not started again: {err}"
            res.restarts.append(restart)
            self.life.journal("engine_restart_failed", step=res.step.id, node=e.node, error=str(err))
            return
        with self._lock:
            halted = self._halted
            if old is not None:
                self._live.pop(old, None)
            if not halted:
                self._live[job_id] = e
        self._jobs.setdefault(res.step.id, []).append(job_id)
        if halted:  # the run is ending: the new engine goes at once
            with contextlib.suppress(OrchError):
                self.sched.cancel([job_id])
            return
        e.job_id, e.job_state = job_id, None
        restart.job_id = job_id
        res.restarts.append(restart)
        self.life.log(StepSubmitted(step=res.step.id, job_id=job_id))
        path = health_path(w)
        while time.monotonic() - t0 < w.health_timeout_s and not (self._halted or self._expired):
            st = self.sched.poll([job_id]).get(job_id)
            if st is not None and st.status.terminal:
                restart.reason += f"; restarted job {job_id} ended {st.raw_state} before it answered {path}"
                break
            if http_ok(e.url + path, HEALTH_REQUEST_S):
                restart.healthy_at = time.time()
                break
            time.sleep(HEALTH_POLL_S)
        up = None if restart.healthy_at is None else round(restart.healthy_at - started_at, 3)
        self.life.journal("engine_restarted", step=res.step.id, node=e.node, job=job_id, attempt=attempt,
                          to_health_s=up)  # fmt: skip

    def _stop(self, res: ServingStepResult) -> None:
        """Cancel the step's engines, note their final states, and bring their logs here (once)."""
        if res.step.id in self._stopped:
            return
        self._stopped.add(res.step.id)
        now = [e.job_id for e in res.engines if e.job_id]
        ids = list(dict.fromkeys([*self._jobs.get(res.step.id, []), *now]))
        with self._lock:
            for j in ids:
                self._live.pop(j, None)
        if not ids:
            return
        try:
            self.sched.cancel(ids)
            # Slurm: a cancelled job stays COMPLETING until slurmd has ended its processes; the
            # step is over when none of its engines is left.
            wait_gone = getattr(self.sched, "wait_gone", None)
            left = wait_gone(ids, STOP_WAIT_S) if wait_gone is not None else []
            if left:
                still = ", ".join(left)
                res.warnings.append(f"engine jobs {still} still listed {STOP_WAIT_S:g} s after scancel")
            states = self.sched.poll(ids)
        except OrchError as e:
            res.warnings.append(f"engines not stopped cleanly: {e}")
            states = {}
        for eng in res.engines:
            if eng.job_id in states and eng.job_state is None:
                eng.job_state = states[eng.job_id].raw_state
        self.life.journal("engines_stopped", step=res.step.id, jobs=ids)
        if self.layout.remote:
            try:
                for got in self.files.collect(res.step.nodes, "steps", res.step.id):
                    if got.error:
                        res.warnings.append(f"{got.node}: engine log not collected: {got.error}")
            except OrchError as e:
                res.warnings.append(f"engine logs not collected: {e}")

    # --- figures -------------------------------------------------------------------------------

    def _summarise(self, res: ServingStepResult, w: ServingWorkload) -> None:
        """Each level's figures from its records file (the source of truth), per node, and cost."""
        price = price_of(w, res.step, self.cluster)
        model, outage = cost_model_of(w, self.cluster, price), measured_outage_s(res)
        for level in res.levels:
            try:
                text = read_inside(self.life.root, self.life.root / level.records).decode("utf-8")
                records = [
                    r for r in SM.parse_records(text.splitlines(), source=level.records) if not r.warmup
                ]
            except (OSError, NotInside, ValueError) as e:
                res.warnings.append(f"{level.records}: not read: {e}")
                continue
            if not records:
                continue
            level.summary = SM.summarize_level(records, w.slos)
            if res.step.replicas > 1:
                level.per_node = {
                    n: SM.summarize_level(rs, w.slos) for n, rs in SM.by_server(records).items()
                }
            if price is not None:
                cost = level_cost(level.summary, nodes=price[1], price_per_node_hour=price[0])
                level.cost = ServingCost.model_validate({**cost.model_dump(), "source": price[2]})
            if model is not None:
                try:
                    level.cost_at = cost_at(
                        requests_per_s=level.summary.requests_per_s,
                        output_tokens_per_s=level.summary.output_tokens_per_s,
                        model=model,
                        nodes=max(1, len(res.step.nodes)),
                        watts=level.power.watts if level.power is not None else None,
                        watts_why=level.power.why_not if level.power is not None else self.no_telemetry,
                        outage_s=outage,
                        rate=f"{level.level}'s measured rate",
                    )
                except ValueError as e:
                    res.warnings.append(f"{level.level}: cost by part not computed: {e}")
        cap = res.capacity
        if model is not None and cap is not None and cap.capacity is not None:
            try:
                cap.cost_at = capacity_cost(cap, model, max(1, len(res.step.nodes)), outage,
                                            capacity_watts_why(res))  # fmt: skip
            except ValueError as e:
                res.warnings.append(f"capacity: cost by part not computed: {e}")

    # --- GPU power per level (telemetry/power.py, docs/telemetry.md) ---------------------------

    def _start_telemetry(self) -> None:
        """Ask the serving nodes for their tool once per run (the lines go to the journal as
        warnings); the sampler is closed with the run."""
        if self.telemetry is None:
            return
        self.life.on_close(self.telemetry.close)
        for line in self.telemetry.start():
            self.life.log(RunWarning(message=line))

    def _power_started(self, res: ServingStepResult, level: str) -> None:
        if self.telemetry is not None:
            self.telemetry.window_started(f"{res.step.id}/{level}", res.step.nodes)

    def _power_ended(self, res: ServingStepResult, level: str) -> None:
        """The level's power per node, or why not, into its result (the last level appended)."""
        got = None
        if self.telemetry is not None:
            got = self.telemetry.window_ended(f"{res.step.id}/{level}", res.step.nodes)
        why = self.telemetry.why_not if self.telemetry is not None else {}
        off = None if self.telemetry is not None else self.no_telemetry
        res.levels[-1].power = level_power(res.step.nodes, got, why, off)

    def _datasets(self, w: ServingWorkload) -> dict[tuple[str, str], Sequence[int]]:
        out: dict[tuple[str, str], Sequence[int]] = {}
        for spec in (w.load.input_tokens, w.load.output_tokens):
            if isinstance(spec, DatasetLengths) and (spec.path, spec.field) not in out:
                try:
                    lines = _data_lines(spec.path)
                    out[(spec.path, spec.field)] = read_lengths(lines, spec.field, source=spec.path)
                except (OSError, ValueError) as e:
                    raise _StepEnded("infra", f"serving {w.name}: lengths dataset not read: {e}") from e
        return out

    def _trace(self, w: ServingWorkload) -> list[float] | None:
        t = w.load.trace
        if t is None:
            return None
        try:
            return read_trace(_data_lines(t.path), t.field, t.unit, source=t.path)
        except (OSError, ValueError) as e:
            raise _StepEnded("infra", f"serving {w.name}: arrival trace not read: {e}") from e

    def _prompts(self, w: ServingWorkload) -> list[str] | None:
        p = w.load.prompts
        if p is None:
            return None
        try:
            return read_prompts(_data_lines(p.path), p.field, source=p.path)
        except (OSError, ValueError) as e:
            raise _StepEnded("infra", f"serving {w.name}: prompts not read: {e}") from e

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.life.root).as_posix()

    def _tail(self, e: EngineRun) -> str:
        """'; its log ends: ...' with the last lines of the engine's log, when there is one here."""
        if e.log is None:
            return ""
        try:
            text = read_inside(self.life.root, self.life.root / e.log).decode("utf-8", errors="replace")
        except (OSError, NotInside):
            return ""
        lines = [ln.strip()[:200] for ln in text.splitlines() if ln.strip()][-LOG_TAIL_LINES:]
        return f"; its log ({e.log}) ends: " + " | ".join(lines) if lines else ""

    # --- thresholds.baseline (docs/serving.md, "Baselines") ------------------------------------

    def _baseline_misses(self, step: ServingStep, w: ServingWorkload, s: LevelSummary) -> list[str]:
        """What a level misses against the workload's baseline (metrics/serving_baseline.py); the
        baseline is read once per run from the run's results store. A baseline that cannot be
        read fails every level naming why (scale-test refused a missing one before the run; it
        may have gone since, e.g. for a resumed run)."""
        th = w.thresholds.baseline
        if th is None:
            return []
        if th.name not in self._baselines:
            try:
                with ResultsStore.open(default_store_path(self.life.root.parent), create=False) as db:
                    self._baselines[th.name] = db.serving_baseline(th.name)
            except OrchError as e:
                self._baselines[th.name] = e.message
            except sqlite3.Error as e:
                self._baselines[th.name] = f"the results store could not be read: {e}"
        ref = self._baselines[th.name]
        if isinstance(ref, str):
            return [f"step {step.id}, level {s.level}: baseline {th.name} not judged against: {ref}"]
        return baseline_failures(step.id, step.replicas, th, ref, s)

    def _baseline_ratios(
        self, step: ServingStep, w: ServingWorkload, s: LevelSummary
    ) -> BaselineRatios | None:
        """The level's ratios to the baseline _baseline_misses read (None without one)."""
        th = w.thresholds.baseline
        ref = self._baselines.get(th.name) if th is not None else None
        if th is None or ref is None or isinstance(ref, str):
            return None
        return baseline_ratios(step.id, step.replicas, th, ref, s)
