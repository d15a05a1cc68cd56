"""`orch scale-test`: resolve → plan → submit the ladder → poll → collect → verdict.

The stages report progress to listeners (the CLI's rich renderer is one); nothing here prints or
exits. Every wait is bounded. The run's lifecycle (run directory, journal, store, signals, jobs
cancelled and faults reverted on any error, run_finished, exit code) is runs/lifecycle.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.errors import ConfigError, OrchError, SchedulerError
from orchestrator.inventory import load_inventory
from orchestrator.metrics import verdict as V
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.container import RUN_LABEL, ContainerChoice, StackContainer
from orchestrator.models.events import (
    FingerprintChecked,
    RunStarted,
    RunWarning,
    StepDone,
    StepState,
    StepSubmitted,
)
from orchestrator.models.events import Listener as Listener  # re-exported: callers of scale_test
from orchestrator.models.plan import Plan, PlanOverrides, Step
from orchestrator.models.run import RunResult as RunResult  # re-exported: callers of scale_test
from orchestrator.models.run import StepResult as StepResult
from orchestrator.models.serving import ServingStep
from orchestrator.paths import under
from orchestrator.plan import expand_serving_steps, expand_steps, resolve_plan
from orchestrator.remote.base import NodeShell
from orchestrator.remote.nodefiles import NodeFiles, RunDataLayout, node_files, run_data_layout
from orchestrator.remote.shells import node_shells
from orchestrator.runs.lifecycle import Ending, RunLifecycle, keep_attempt, verdict_ending
from orchestrator.runs.serving import ServingRunner
from orchestrator.safefs import NotInside, read_inside
from orchestrator.scheduler.allocation import AllocationScheduler
from orchestrator.scheduler.backends import make_scheduler as make_scheduler  # re-exported
from orchestrator.scheduler.base import (
    JobScheduler,
    JobSpec,
    JobState,
    JobStatus,
    backend_traits,
    inventory_backend,
    pending_wait,
    run_job_name,
)
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.stacks import load_stack
from orchestrator.stages.faults import StepFaults, check_plan_faults, fault_matches
from orchestrator.stages.stack import (
    StackOutcome,
    node_python,
    run_stack_stage,
    stack_name,
    stack_python,
    workload_container,
)
from orchestrator.store.db import ResultsStore, default_store_path
from orchestrator.store.load import (
    SERVING_STEPS_FILE,
    finished_serving,
    finished_steps,
    ladder_steps,
    load_run,
    require_model,
    run_cluster,
    run_kind,
    serving_steps,
)
from orchestrator.store.rundir import RunDir, atomic_write, new_run_id
from orchestrator.telemetry.sampler import TelemetrySampler
from orchestrator.workloads.nccltests import parse_nccl_tests

POLL_INTERVAL_S = 0.5
# What a rank in a container is given from its task (by name): Slurm's rank variables, the local
# backend's, and the rendezvous; the stack's own variables are added to these.
CONTAINER_FILE = "container.json"
CONTAINER_ENV = (
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURMD_NODENAME",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
)  # fmt: skip
# A job that waits for nodes the scheduler will not give it (drained, down) is an infrastructure
# failure once it has waited this long; the scheduler does not end such a job by itself.
UNAVAILABLE_GRACE_S = 10.0


class ScaleTestRequest(StrictModel):
    """Everything `orch scale-test` needs, as the CLI parsed it."""

    inventory: Path
    plan: str | None = Field(default=None, description="built-in plan name or YAML file; None = smoke")
    overrides: PlanOverrides = Field(default_factory=PlanOverrides)
    out_dir: Path = Path("runs")
    python: str | None = Field(
        default=None,
        description="the Python that runs collbench on the nodes (default: the stack's, or this one)",
    )
    group: str | None = Field(default=None, description="inventory group or hosts to run on")
    allow_drift: bool = Field(default=False, description="run steps on nodes that differ from the stack")
    force_faults: bool = Field(
        default=False, description="let plan faults hit more than the safe share of nodes"
    )
    container: ContainerChoice = Field(
        default="auto", description="run collbench in the stack's image (stages/stack.workload_container)"
    )


def choose_backend(plan: Plan, cluster: Cluster) -> Literal["slurm", "local"]:
    """auto → local for an inventory of local hosts only, Slurm otherwise."""
    if plan.backend != "auto":
        return plan.backend
    return inventory_backend(cluster)


def container_cleanup_line(c: StackContainer, node: str, run_id: str) -> str:
    """The shell line that removes every container of the run left on node (a task killed with
    SIGKILL leaves its container running: ``--rm`` acts only when it ends)."""
    rt = shlex.join(c.runtime(node))
    label = shlex.quote(f"label={RUN_LABEL}={run_id}")
    return f"{rt} ps -aq --filter {label} | xargs -r {rt} rm -f -t 5 >/dev/null"


def job_spec(
    step: Step,
    plan: Plan,
    cluster: Cluster,
    backend: str,
    workdir: Path,
    python: str,
    port: int,
    env: dict[str, str] | None = None,
    container: StackContainer | None = None,
    run_id: str = "",
) -> JobSpec:
    """The job of one step: collbench on step.nodes, rendezvous on the first node's fabric address;
    with ``container``, each rank runs it in the stack's image (``python`` is then the image's)."""
    nodes = [cluster.node(n) for n in step.nodes]
    here = backend_traits(backend).on_this_machine
    if here and step.nnodes > 1:
        raise ConfigError(f"step {step.id}: the {backend} backend runs on one node only (asks {step.nnodes})")
    first = nodes[0]
    master = "127.0.0.1" if here else str(first.fabric_address or first.address)
    vendors = {n.gpu_vendor for n in nodes}
    dist_backend = "gloo" if vendors == {"none"} else "nccl"
    sizes = plan.sizes
    argv = [
        python, "-m", "orchestrator.workloads.collbench",
        "--collectives", ",".join(step.collectives),
        "--sizes", f"{sizes.min}:{sizes.max}:x{sizes.factor}",
        "--warmup", str(plan.warmup_iters),
        "--iters", str(plan.iters),
        "--backend", dist_backend,
        "--timeout", str(max(10, plan.step_timeout_s - 5)),
    ]  # fmt: skip
    if plan.check:
        argv.append("--check")
    ifaces = {n.rdma_ifaces[0] for n in nodes if n.rdma_ifaces}
    if not here and len(ifaces) == 1:
        argv += ["--socket-ifname", ifaces.pop()]
    gpus = step.ranks_per_node if dist_backend == "nccl" else 0
    if container is not None:
        argv = container.task_argv(
            step.nodes,
            argv=argv,
            env_names=[*CONTAINER_ENV, *(env or {})],
            workdir=workdir,
            run_id=run_id,
            gpu_vendor=first.gpu_vendor,
            rdma=any(n.rdma_ifaces for n in nodes) and first.gpu_vendor != "none",
        )
    return JobSpec(
        name=run_job_name(run_id, plan.name, step.id),
        step_id=step.id,
        nodes=[] if here else step.nodes,
        nnodes=step.nnodes,
        ranks_per_node=step.ranks_per_node,
        gpus_per_node=gpus,
        argv=argv,
        env=dict(env or {}),
        master_addr=master,
        master_port=port,
        time_limit_s=plan.step_timeout_s,
        workdir=workdir,
        partition=plan.partition or cluster.vars.orch_partition,
    )


class _Runner:
    """The execution stage of one run: submit, poll, collect, judge."""

    def __init__(
        self,
        plan: Plan,
        cluster: Cluster,
        steps: list[Step],
        sched: JobScheduler,
        backend: Literal["slurm", "local"],
        life: RunLifecycle,
        python: str,
        env: dict[str, str] | None = None,
        faults: StepFaults | None = None,
        telemetry: TelemetrySampler | None = None,
        container: StackContainer | None = None,
        shells: Mapping[str, NodeShell] | None = None,
    ) -> None:
        self.plan, self.cluster, self.steps, self.sched = plan, cluster, steps, sched
        self.container = container
        self.backend, self.life, self.rundir, self.python = backend, life, life.rundir, python
        self.queued = backend_traits(backend).queued
        self.faults, self.telemetry = faults, telemetry
        self.shells = shells  # the run's kept-open shells to the nodes (None: node_files opens its own)
        self.results = [StepResult(step=s, concurrent=plan.concurrent_steps) for s in steps]
        base_port = 20000 + secrets.randbelow(20000)
        # Where the nodes write (remote/nodefiles.py): the run directory itself, or each node's own
        # folder that orch collects from after each step. Job scripts are written here in any case.
        self.layout: RunDataLayout = run_data_layout(cluster, self.rundir.root)
        self.files = NodeFiles(self.layout, {})
        self.specs = [
            job_spec(
                s,
                plan,
                cluster,
                backend,
                self.layout.node_path("steps", s.id),
                container.python if container else python,
                base_port + i,
                env,
                container,
                life.run_id,
            ).model_copy(update={"script": self.rundir.step_dir(s.id).absolute() / "job.sbatch"})
            for i, s in enumerate(steps)
        ]
        self.pending_since: dict[str, float] = {}
        self.serving: ServingRunner | None = None  # the run's serving steps, run after the ladder

    def _save(self, res: StepResult) -> None:
        # Durable before step_done is journaled: a run killed later keeps this step (orch runs resume).
        atomic_write(self.rundir.step_dir(res.step.id) / "result.json", res.model_dump_json(indent=2) + "\n")

    def run(self) -> None:
        """Submit, poll, judge. Whatever ends it early (Ctrl-C, a scheduler that stopped
        answering, a bug), the lifecycle cancels every job of the run still queued or running
        (cancel_live) and reverts its faults; the nodes' folders of the run are collected and
        removed whatever ends it."""
        self.life.on_cancel(self.cancel_live)
        if self.faults is not None:
            self.life.on_close(self.faults.close)  # reverts any fault still active, however the run ends
        if self.telemetry is not None:
            self.life.on_close(self.telemetry.close)
        need = self.container is not None  # its cleanup runs a line on the nodes
        with node_files(self.cluster, self.layout, self.shells, need_shells=need) as self.files:
            try:
                if self.faults is not None:
                    self.faults.start()
                if self.telemetry is not None:  # once per run: the nodes without a tool, and go on
                    for line in self.telemetry.start():
                        self.life.log(RunWarning(message=line))
                self._prepare_folders()
                if self.queued:
                    self._submit_all()
                self._loop()
            finally:
                if isinstance(self.sched, AllocationScheduler):
                    self._release()
                self._collect_rest()
                self._remove_containers()

    def _prepare_folders(self) -> None:
        """Each node's folders of the steps left to run (and allocation mode's driver folder on the
        ladder's nodes), before anything is submitted: Slurm writes --output only into a folder
        that exists. Raises InfraError naming the node."""
        folders: dict[str, list[tuple[str, ...]]] = {}
        for res in self.results:
            if res.ended_mono is None:
                for node in res.step.nodes:
                    folders.setdefault(node, []).append(("steps", res.step.id))
        if isinstance(self.sched, AllocationScheduler) and self.sched.driver_on_nodes:
            for node in folders:
                folders[node].append(("alloc",))
        self.files.prepare(folders)

    def _collect(self, res: StepResult) -> None:
        """Bring the step's files from its nodes into its step folder (nothing to do when the
        nodes write into the run directory); a node whose files did not come is a warning."""
        if not self.layout.remote:
            return
        t0 = time.monotonic()
        got = self.files.collect(res.step.nodes, "steps", res.step.id)
        for g in got:
            if g.error:
                res.warnings.append(f"{g.node}: files not collected: {g.error}")
            res.warnings += [f"{g.node}: not collected: {why}" for why in g.skipped]
        self.rundir.event(
            "step_collected", step=res.step.id, seconds=round(time.monotonic() - t0, 4),
            files=sum(g.files for g in got), bytes=sum(g.bytes for g in got),
            errors=[g.error for g in got if g.error],
        )  # fmt: skip

    def _collect_rest(self) -> None:
        """At the end, whatever ended it: the driver's output (allocation mode), then each node's
        folder of the run is removed. Failures are journaled, never raised over the run's end."""
        if not self.layout.remote:
            return
        try:
            if isinstance(self.sched, AllocationScheduler) and self.sched.driver_on_nodes:
                nodes = sorted({n for r in self.results for n in r.step.nodes})
                got = self.files.collect(nodes, "alloc")
                self.rundir.event("alloc_collected", errors=[g.error for g in got if g.error])
            errors = self.files.remove_all()
            if errors:
                self.rundir.event("node_folders_left", errors=errors)
        except OrchError as e:
            self.rundir.event("node_folders_left", errors=[str(e)])

    def _remove_containers(self) -> None:
        """At the end, whatever ended it: every container of the run left on the steps' nodes is
        removed (a rank killed with SIGKILL leaves its container running). Journaled, never raised."""
        if self.container is None:
            return
        c, run_id = self.container, self.life.run_id
        errors: list[str] = []
        for node in sorted({n for r in self.results for n in r.step.nodes}):
            errors += self.files.on_each([node], container_cleanup_line(c, node, run_id), timeout=60)
        self.rundir.event("containers_removed", errors=errors)

    def _release(self) -> None:
        """End allocation mode's allocation once the steps are judged, or the run is ending (an
        allocation made without a batch script has nothing that ends it by itself). A release
        that fails is journaled; the lifecycle's cancel still follows an error."""
        assert isinstance(self.sched, AllocationScheduler)
        try:
            self.sched.release()
        except OrchError as e:
            self.rundir.event("release_failed", error=str(e))

    def cancel_live(self) -> list[str]:
        """Cancel the run's jobs that are not known to have ended; returns their ids. A cancel
        that fails (the scheduler is what failed) is journaled, never raised over the cause."""
        live = [r.job_id for r in self.results if r.job_id and not (r.job and r.job.status.terminal)]
        ids = [j for j in live if j]
        try:
            self.sched.cancel(ids)
        except OrchError as e:
            self.rundir.event("cancel_failed", jobs=ids, error=str(e))
        return ids

    def _submit(self, i: int, after: str | None) -> None:
        res, spec = self.results[i], self.specs[i]
        res.job_id = self.sched.submit(spec, after=after)
        self.life.log(StepSubmitted(step=spec.step_id, job_id=res.job_id, after=after))

    def _submit_all(self) -> None:
        # Submitting the whole ladder ahead, chained with afterany, leaves no polling gap between
        # steps; concurrent mode drops the chain and lets Slurm place steps on free nodes.
        wanted = sorted({n for s in self.steps for n in s.nodes})
        unavailable = self.sched.unavailable_nodes(wanted)
        todo: list[int] = []
        for i in range(len(self.steps)):
            if self.results[i].ended_mono is not None:
                continue  # finished in an earlier attempt (resume)
            lost = [f"{n} is {unavailable[n]}" for n in self.steps[i].nodes if n in unavailable]
            if lost:
                self.results[i].blamed_nodes = [n for n in self.steps[i].nodes if n in unavailable]
                self._abandon([self.results[i]], "the scheduler cannot give it its nodes: " + ", ".join(lost))
                continue
            todo.append(i)
        if isinstance(self.sched, AllocationScheduler) and todo:
            # One allocation runs the steps in ladder order, one job step each; its driver writes
            # its output on the nodes (like the steps), its script is written here.
            alloc_dir = self.layout.node_path("alloc")
            script_dir = self.layout.local_path("alloc")
            ids = self.sched.submit_ladder([self.specs[i] for i in todo], alloc_dir, script_dir=script_dir)
            for k, (i, job_id) in enumerate(zip(todo, ids, strict=True)):
                self.results[i].job_id = job_id
                self.life.log(StepSubmitted(step=self.specs[i].step_id, job_id=job_id,
                                            after=ids[k - 1] if k else None))  # fmt: skip
            return
        prev: str | None = None
        for i in todo:
            self._submit(i, None if self.plan.concurrent_steps else prev)
            prev = self.results[i].job_id

    def _loop(self) -> None:
        deadline = time.monotonic() + (
            self.plan.run_timeout_s or self.plan.step_timeout_s * (len(self.steps) + 1)
        )
        while True:
            open_ = [r for r in self.results if r.verdict == "skipped" and r.ended_mono is None]
            if not open_:
                return
            if not self.queued and not any(r.job_id for r in open_):
                self._submit(self.results.index(open_[0]), None)
            ids = [r.job_id for r in open_ if r.job_id]
            states = self.sched.poll(ids)
            now = time.monotonic()
            for res in open_:
                if res.job_id and res.job_id in states:
                    self._update(res, states[res.job_id], now)
            if now > deadline:
                self._abandon(
                    [r for r in self.results if r.ended_mono is None], "the run's time limit passed"
                )
                return
            if all(r.ended_mono is not None for r in open_):
                return  # the last step was just judged: no poll interval to sit out
            if isinstance(self.sched, AllocationScheduler):
                self.sched.wait_for_news(POLL_INTERVAL_S)  # wakes when a step's srun exits
            else:
                time.sleep(POLL_INTERVAL_S)

    def _update(self, res: StepResult, state: JobState, now: float) -> None:
        old = res.job.status if res.job else None
        res.job = state
        if state.status != old:
            self.life.log(
                StepState(
                    step=res.step.id,
                    job_id=res.job_id,
                    state=state.raw_state,
                    reason=state.reason if state.status == JobStatus.PENDING else None,
                )
            )
        if state.status == JobStatus.RUNNING and res.started_mono is None:
            res.started_mono = now
            if self.faults is not None:
                self.faults.step_started(res.step, now)
            if self.telemetry is not None:
                self.telemetry.step_started(res.step)
        if state.status == JobStatus.PENDING:
            self._check_pending(res, state, now)
        if state.status.terminal:
            res.ended_mono = now
            self._judge(res)

    def _check_pending(self, res: StepResult, state: JobState, now: float) -> None:
        """Bound the wait of a queued step: it either gets its nodes or becomes an infra failure.
        Waiting for the previous step is fine; so is a busy cluster (the run's deadline bounds it)."""
        if pending_wait(state) != "unavailable":
            self.pending_since.pop(res.step.id, None)
            return
        since = self.pending_since.setdefault(res.step.id, now)
        if now - since > UNAVAILABLE_GRACE_S:
            self._abandon([res], f"the scheduler cannot give it its nodes ({state.reason})")

    def _abandon(self, results: list[StepResult], why: str) -> None:
        ids = [r.job_id for r in results if r.job_id]
        self.sched.cancel([j for j in ids if j])
        for res in results:
            res.ended_mono = time.monotonic()
            res.verdict = "infra"
            res.reasons.append(why)
            if self.telemetry is not None:
                self.telemetry.step_ended(res.step, {}, None)  # stops its sampling; no figures kept
            self._save(res)
            self.life.log(StepDone(step=res.step.id, verdict=res.verdict, reasons=res.reasons))

    def _judge(self, res: StepResult) -> None:
        spec = self.specs[self.results.index(res)]
        assert res.job is not None and res.job_id is not None
        self._collect(res)
        # The rank logs are read from the step's folder here, wherever the nodes wrote them.
        here = spec.model_copy(update={"workdir": self.rundir.step_dir(res.step.id).absolute()})
        out = self.sched.collect(res.job_id, here)
        rank0 = next((r.log for r in out.ranks if r.rank == 0), None)
        text = ""
        if rank0 is not None and os.path.lexists(rank0):
            try:
                text = read_inside(self.rundir.root, rank0).decode("utf-8", errors="replace")
            except (NotInside, OSError) as e:
                res.warnings.append(f"rank 0 output not read: {e}")
        parsed = None
        if text.strip():
            try:
                parsed = parse_nccl_tests(text)
            except OrchError as e:
                res.warnings.append(f"rank 0 output could not be parsed: {e}")
        if parsed is not None:
            res.rows = parsed.rows
            res.warnings += parsed.warnings
            res.summary = V.summarize(parsed.rows)
        if self.telemetry is not None:
            folder = self.rundir.step_dir(res.step.id)
            res.telemetry = self.telemetry.step_ended(res.step, res.summary, folder)
        verdict: V.Verdict = "pass"
        if res.job.status != JobStatus.COMPLETED:
            wrong = parsed is not None and parsed.wrong_total > 0
            verdict = "fail" if wrong else "infra"
            res.reasons.append(
                f"job {res.job_id} ended {res.job.raw_state}"
                + (f" ({res.job.reason})" if res.job.reason else "")
            )
        missing = V.missing_rows(res.rows, res.step.collectives, res.step.sizes, res.step.world_size)
        if missing and verdict == "pass":
            verdict = "infra"
        if missing:
            res.reasons.append(f"{len(missing)} expected rows missing, e.g. {', '.join(missing[:3])}")
        if parsed is not None and parsed.wrong_total:
            verdict = V.worst([verdict, "fail"])
            res.reasons.append(f"#wrong = {parsed.wrong_total}")
        fails = V.threshold_failures(self.plan, res.rows, res.summary)
        if fails:
            verdict = V.worst([verdict, "fail"])
            res.reasons += fails
        res.verdict = verdict
        self._save(res)
        self.life.log(StepDone(step=res.step.id, job_id=res.job_id, verdict=verdict, reasons=res.reasons))


def scale_test(req: ScaleTestRequest, listeners: list[Listener] | None = None) -> RunResult:
    """Run the plan's ladder on the inventory's cluster; raises OrchError for usage/infra errors
    found before anything runs and Interrupted on Ctrl-C or SIGTERM (after cancelling jobs)."""
    t0 = time.monotonic()
    cluster = load_inventory(req.inventory)
    plan = resolve_plan(req.plan, req.overrides)
    steps = expand_steps(plan, cluster, group=req.group)
    serving = expand_serving_steps(plan, cluster, group=req.group)
    backend = choose_backend(plan, cluster)
    sched = make_scheduler(backend, cluster, plan)
    fault_warnings = check_plan_faults(plan, cluster, steps, req.force_faults, serving)
    out_root = req.overrides.out_dir or req.out_dir
    _check_before_run(stack_name(None, plan, cluster), out_root, backend, steps)
    check_serving_baselines(plan, out_root)
    # The workload's Python on the nodes: --python, else the stack's; with no stack named here
    # (--stack none), the inventory's stack's (node_python): never this machine's venv on remote
    # nodes, which do not have it. Refused before the run directory is made.
    given_python = req.python or (node_python(cluster) if stack_name(None, plan, cluster) is None else None)
    container = workload_container(req.container, stack_name(None, plan, cluster), cluster, steps)
    with RunLifecycle.create(out_root, new_run_id(plan.name), listeners or [], t0=t0) as life:
        life.write_inputs(plan=plan, inventory=cluster)
        atomic_write(life.root / "steps.json", _steps_json(steps))
        if serving:
            atomic_write(life.root / SERVING_STEPS_FILE, _serving_json(serving))
        if container is not None:  # read back by resume_run: a resumed run runs where it started
            atomic_write(life.root / CONTAINER_FILE, container.model_dump_json(indent=2) + "\n")
        life.started(
            RunStarted(run_id=life.run_id, run_dir=life.root, plan=plan.name, backend=backend,
                       steps=[s.id for s in steps] + [s.id for s in serving]),
            kind="scale-test",
        )  # fmt: skip
        stack = StackOutcome()
        # One set of kept-open shells for the run: the stack's fingerprint, then the nodes' folders
        # (one SSH handshake per node per run, not one per stage); closed when the run ends.
        keep = contextlib.ExitStack()
        life.on_close(keep.close)
        shells = keep.enter_context(node_shells(cluster))
        if isinstance(sched, AllocationScheduler) and steps:
            # Allocation mode asks for its allocation now, so that Slurm queues and grants it while
            # the stack's fingerprint is checked; no step starts before the run passes its checks.
            life.on_close(sched.release)  # however the run ends, a refusal included
            alloc_dir = run_data_layout(cluster, life.root).local_path("alloc")
            try:
                sched.book(_booking_specs(plan, cluster, steps, backend, life.root, life.run_id), alloc_dir)
            except SchedulerError as e:  # asked again at submission, for the steps that can run
                life.journal("booking_failed", error=str(e))
        if (name := stack_name(None, plan, cluster)) is not None:
            try:
                stack = run_stack_stage(
                    cluster, name, [*steps, *serving], life.rundir, allow_drift=req.allow_drift, shells=shells
                )
            except OrchError as e:
                life.finish(Ending("refused", e.exit_code, str(e)))
                raise
            life.emit(
                FingerprintChecked(stack=name, drift=[line for v in stack.drift.values() for line in v])
            )
        for w in [*cluster.warnings, *fault_warnings]:
            life.log(RunWarning(message=w))
        python = given_python or stack.python or node_python(cluster)
        faults = (
            StepFaults(plan, cluster, steps, life.rundir, life.journal, force=req.force_faults)
            if any(fault_matches(pf, s) for pf in plan.faults for s in steps)
            else None
        )
        telemetry = _telemetry(plan, cluster, steps)
        runner = _Runner(
            plan, cluster, steps, sched, backend, life, python, stack.env, faults, telemetry, container,
            shells,
        )  # fmt: skip
        for res in runner.results:
            res.warnings += [line for n in res.step.nodes for line in stack.drift.get(n, [])]
            res.warnings += fault_warnings if any(fault_matches(pf, res.step) for pf in plan.faults) else []
        runner.serving = _serving_runner(
            plan, cluster, serving, sched, backend, life, python, stack.env, shells,
            force_faults=req.force_faults,
        )  # fmt: skip
        for sres in runner.serving.results:
            sres.warnings += [line for n in sres.step.nodes for line in stack.drift.get(n, [])]
        return _execute(runner)


def check_serving_baselines(plan: Plan, out_root: Path) -> None:
    """Refuse (ConfigError, exit 2) before anything runs a serving threshold against a baseline
    the run's results store does not have, or one whose run has no serving level there."""
    names = sorted({w.thresholds.baseline.name for w in plan.serving if w.thresholds.baseline is not None})
    if not names:
        return
    where = default_store_path(out_root)
    if isinstance(where, Path) and not where.exists():
        raise ConfigError(
            f"plan {plan.name}: thresholds.baseline: no baseline named {names[0]!r}: no results store at "
            f"{where}",
            hint="orch baseline list; set one with orch baseline set RUN --name " + names[0],
        )
    with ResultsStore.open(where, create=False) as store:
        for name in names:
            try:
                store.serving_baseline(name)
            except ConfigError as e:
                raise ConfigError(f"plan {plan.name}: thresholds.baseline: {e.message}", hint=e.hint) from e


def _serving_runner(
    plan: Plan,
    cluster: Cluster,
    serving: list[ServingStep],
    sched: JobScheduler,
    backend: Literal["slurm", "local"],
    life: RunLifecycle,
    python: str,
    env: dict[str, str] | None,
    shells: Mapping[str, NodeShell] | None = None,
    *,
    force_faults: bool = False,
) -> ServingRunner:
    """The run's serving steps (runs/serving.py), with the run's scheduler; in allocation mode an
    engine is a job of its own (sbatch through the same Slurm client): the ladder's allocation is
    released before the serving steps start."""
    if isinstance(sched, AllocationScheduler):
        sched = SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
    return ServingRunner(plan, cluster, serving, sched, backend, life, python, env, shells,
                         force_faults=force_faults)  # fmt: skip


def _telemetry(plan: Plan, cluster: Cluster, steps: list[Step]) -> TelemetrySampler | None:
    """The run's GPU telemetry sampler (docs/telemetry.md); None when the plan turns it off."""
    if plan.telemetry_interval_s <= 0:
        return None
    return TelemetrySampler(cluster, steps, plan.telemetry_interval_s)


def _booking_specs(
    plan: Plan, cluster: Cluster, steps: list[Step], backend: str, root: Path, run_id: str
) -> list[JobSpec]:
    """The steps' jobs as far as their allocation goes (nodes, ranks, limits, names): the python
    and environment of the stack are not known yet and are no part of it."""
    layout = run_data_layout(cluster, root)
    return [
        job_spec(s, plan, cluster, backend, layout.node_path("steps", s.id), "python", 20000, run_id=run_id)
        for s in steps
    ]


def _check_before_run(stack: str | None, out_root: Path, backend: str, steps: list[Step]) -> None:
    """Find the usage errors that would otherwise show only once a run exists (a run refused for a
    typo would stay in `runs list` and `history` as failed): an unknown or invalid stack, a
    multi-node step on the local backend, a file where the run directories go, a results store
    that is not one. Raises ConfigError."""
    if not backend_traits(backend).multi_node and (multi := [s.id for s in steps if s.nnodes > 1]):
        raise ConfigError(
            f"steps {', '.join(multi)}: the {backend} backend runs on one node only",
            hint="use --backend slurm, or --nodes 1",
        )
    if stack is not None:
        load_stack(stack)
    RunDir.check_base(out_root)
    with ResultsStore.open(default_store_path(out_root)):
        pass


def _steps_json(steps: list[Step]) -> str:
    return json.dumps({"steps": [s.model_dump(mode="json") for s in steps]}, indent=2) + "\n"


def _serving_json(steps: list[ServingStep]) -> str:
    return json.dumps({"steps": [s.model_dump(mode="json") for s in steps]}, indent=2) + "\n"


def resume_run(
    run_dir: Path,
    python: str | None = None,
    listeners: list[Listener] | None = None,
    slurm_conf: Path | None = None,
) -> RunResult:
    """Run, in run_dir, the steps of an earlier scale-test run that have no finished result; the
    finished ones are kept as they are. Raises ConfigError when nothing is left to run or the
    directory is not a scale-test run (runs/resume.py resumes every kind), and Interrupted on
    Ctrl-C or SIGTERM."""
    t0 = time.monotonic()
    record = load_run(run_dir)
    if record.status == "running":
        raise ConfigError(f"run {record.run_id} is still running (pid {record.pid})")
    if (kind := run_kind(run_dir)) != "scale-test":
        raise ConfigError(f"run {record.run_id} is a {kind} run, not a ladder", hint="orch runs resume")
    # Everything read back from the run folder is checked again here, strictly: a plan name or a
    # step id becomes a job name and a folder, so an edited file is refused, naming the value.
    plan = require_model(Plan, run_dir, run_dir / "plan.json")
    cluster = run_cluster(run_dir, slurm_conf)  # Slurm's configuration never from the run folder
    steps = ladder_steps(run_dir) or expand_steps(plan, cluster)
    done = finished_steps(run_dir, [s.id for s in steps])
    serving = serving_steps(run_dir) or []
    sdone = finished_serving(run_dir, [s.id for s in serving])
    finished = all(s.id in done for s in steps) and all(s.id in sdone for s in serving)
    if finished and record.status != "interrupted":
        raise ConfigError(f"run {record.run_id} has no unfinished steps", hint="see orch runs show")
    # An interrupted run whose steps all finished (killed while writing its result) is finished
    # here without running anything: the runner finds no open step and writes the result.
    for sid in [s.id for s in steps if s.id not in done] + [s.id for s in serving if s.id not in sdone]:
        keep_attempt(run_dir, under(run_dir, "steps", sid, what="step folder"), sid)
    backend = choose_backend(plan, cluster)
    sched = make_scheduler(backend, cluster, plan)
    todo = [s.id for s in steps if s.id not in done] + [s.id for s in serving if s.id not in sdone]
    with RunLifecycle(RunDir(run_dir), listeners or [], t0=t0) as life:
        life.resumed(
            RunStarted(run_id=life.run_id, run_dir=life.root, plan=plan.name, backend=backend,
                       steps=[s.id for s in steps] + [s.id for s in serving]),
            steps=todo,
        )  # fmt: skip
        env: dict[str, str] = {}
        if python is None:
            name = stack_name(None, plan, cluster)
            python, env = stack_python(name) if name is not None else (node_python(cluster), {})
        container = (
            require_model(StackContainer, run_dir, run_dir / CONTAINER_FILE)
            if (run_dir / CONTAINER_FILE).exists()
            else None
        )
        telemetry = _telemetry(plan, cluster, steps)
        runner = _Runner(
            plan, cluster, steps, sched, backend, life, python, env, telemetry=telemetry, container=container
        )
        for i, s in enumerate(steps):
            if s.id in done:
                runner.results[i] = done[s.id]
                runner.results[i].ended_mono = runner.results[i].ended_mono or 0.0
        runner.serving = _serving_runner(plan, cluster, serving, sched, backend, life, python, env)
        for i, ss in enumerate(serving):
            if ss.id in sdone:
                runner.serving.results[i] = sdone[ss.id]
        return _execute(runner)


def _execute(runner: _Runner) -> RunResult:
    """Run the ladder and write the result, inside the run's lifecycle. On any error the
    lifecycle cancels the jobs, then the result is written (an interrupted or infrastructure
    failure, each unfinished step saying why) with run_finished journaled."""
    runner.life.on_error(lambda ending: _finish(runner, ending))
    if runner.steps or runner.serving is None:
        runner.run()
    if runner.serving is not None:
        runner.serving.run()
    return _finish(runner, None)


def _finish(runner: _Runner, ending: Ending | None) -> RunResult:
    """The run's result from its steps (ending None: the run ran to its end and the verdict sets
    it); written to result.json, then run_finished journaled."""
    results = runner.results
    serving = runner.serving.results if runner.serving is not None else []
    if ending is not None and ending.status != "interrupted":
        for res in results:
            if res.ended_mono is None:
                res.reasons.append(f"the run ended before this step: {ending.error}")
        for sres in serving:
            if sres.verdict == "skipped":
                sres.reasons.append(f"the run ended before this step: {ending.error}")
    V.apply_efficiency([(r.step, r.summary) for r in results])
    V.apply_line_rate([(r.step, r.summary) for r in results], runner.cluster.vars.orch_fabric_gbps)
    for res in results:
        fails, notes = V.efficiency_failures(runner.plan, res.summary)
        if fails and res.verdict == "pass":
            res.verdict = "fail"
        res.reasons += fails
        res.warnings += [n for n in notes if n not in res.warnings]
    _apply_baseline(runner)
    # a node no step used gets no verdict
    used = {n for r in results for n in r.step.nodes} | {n for r in serving for n in r.step.nodes}
    nodes: dict[str, V.Verdict] = {
        n.name: V.worst(
            [r.verdict for r in results if n.name in (r.blamed_nodes or r.step.nodes)]
            + [r.verdict for r in serving if n.name in r.step.nodes]
        )
        for n in runner.cluster.nodes
        if n.name in used
    }
    if ending is None:
        ending = verdict_ending(V.worst([r.verdict for r in results] + [r.verdict for r in serving]))
    status = ending.status
    assert status != "refused"  # a refused run has no steps and no result
    result = RunResult(
        run_id=runner.rundir.run_id,
        run_dir=runner.rundir.root,
        plan=runner.plan.name,
        backend=runner.backend,
        status=status,
        exit_code=ending.exit_code,
        steps=results,
        serving=serving,
        nodes=nodes,
        wall_s=runner.life.wall_s,
    )
    atomic_write(runner.rundir.root / "result.json", result.model_dump_json(indent=2) + "\n")
    runner.life.finish(ending, wall_s=result.wall_s)
    return result


def _apply_baseline(runner: _Runner) -> None:
    """Resolve thresholds.baseline against the results store (fail each step below the fraction)."""
    th = runner.plan.thresholds.baseline
    if th is None:
        return
    try:
        with ResultsStore.open(default_store_path(runner.rundir.root.parent)) as store:
            ref = store.baseline_busbw(th.name)
    except OrchError as e:
        ref = None
        why = e.message
    for res in runner.results:
        if res.verdict == "skipped":
            continue
        fails = (
            V.baseline_failures(th, res.step.id, res.rows, ref)
            if ref is not None
            else [f"baseline {th.name!r}: {why}"]
        )
        if fails and res.verdict == "pass":
            res.verdict = "fail"
        res.reasons += fails
