"""The step executor every ladder-shaped run shares: scale-test's ladder (runs/scale_test.py),
isolate's rounds (runs/isolate.py), stragglers' pairs (runs/stragglers.py) and the plan a migration
runs (runs/migrate.py).

Its interface:

- ``StepExecutor(plan, cluster, steps, sched, backend, life, python, ...)``: one step per job
  (job_spec); ``run()`` submits, polls, collects each step's files from its nodes and judges each
  step (parsed rows, thresholds, missing rows), inside the caller's RunLifecycle, which cancels the
  live jobs and reverts the faults on any error; ``results`` holds one StepResult per step, in
  order (a caller that resumes a run puts its finished results there before ``run()``);
  ``cancel_live()`` cancels the jobs not known to have ended.
- ``choose_backend`` and ``make_scheduler``: the run's backend and its scheduler.
- ``job_spec``: the job of one step; ``steps_json``: the steps as a run folder records them.

Nothing here prints or exits; every wait is bounded (the plan's run_timeout_s, else its step
timeouts).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from orchestrator.diagnostics.plan_steps import diag_step_spec, judge_diag_step
from orchestrator.errors import ConfigError, OrchError
from orchestrator.metrics import verdict as V
from orchestrator.models.cluster import Cluster
from orchestrator.models.container import RUN_LABEL, StackContainer
from orchestrator.models.events import RunWarning, StepDone, StepState, StepSubmitted
from orchestrator.models.plan import Plan, Step
from orchestrator.models.run import StepResult
from orchestrator.models.serving import ServingStep
from orchestrator.remote.base import NodeShell
from orchestrator.remote.nodefiles import NodeFiles, RunDataLayout, node_files, run_data_layout
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.runs.step_faults import StepFaults
from orchestrator.safefs import NotInside, read_inside
from orchestrator.scheduler.allocation import AllocationScheduler
from orchestrator.scheduler.backends import make_scheduler as make_scheduler  # re-exported
from orchestrator.scheduler.base import (
    JobScheduler,
    JobSpec,
    JobState,
    JobStatus,
    RankOutput,
    backend_traits,
    inventory_backend,
    pending_wait,
    random_port_base,
    run_job_name,
)
from orchestrator.store.rundir import atomic_write
from orchestrator.telemetry.sampler import TelemetrySampler
from orchestrator.workloads.nccltests import parse_nccl_tests

__all__ = [
    "CONTAINER_ENV",
    "StepExecutor",
    "choose_backend",
    "container_cleanup_line",
    "job_spec",
    "make_scheduler",
    "steps_json",
]

POLL_INTERVAL_S = 0.5
# What a rank in a container is given from its task (by name): Slurm's rank variables, the local
# backend's, and the rendezvous; the stack's own variables are added to these.
CONTAINER_ENV = (
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURMD_NODENAME",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
)  # fmt: skip
# A job that waits for nodes the scheduler will not give it (drained, down) is an infrastructure
# failure once it has waited this long; the scheduler does not end such a job by itself.
UNAVAILABLE_GRACE_S = 10.0


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
    here = backend_traits(backend).on_this_machine
    if here and step.nnodes > 1:
        raise ConfigError(f"step {step.id}: the {backend} backend runs on one node only (asks {step.nnodes})")
    if step.diagnostic is not None:  # the tool on the nodes themselves, never in the stack's container
        name = run_job_name(run_id, plan.name, step.id)
        spec = diag_step_spec(step, plan, cluster, name=name, workdir=workdir)
        # on this machine the node's name is the inventory's, not Slurm's (the wrapper's $ORCH_NODE)
        here_env = {"nodes": [], "task_env": {}, "env": {**spec.env, "ORCH_NODE": step.nodes[0]}}
        return spec.model_copy(update=here_env) if here else spec
    nodes = [cluster.node(n) for n in step.nodes]
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


class StepExecutor:
    """The execution stage of one run: submit, poll, collect, judge (the module's docstring)."""

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
        base_port = random_port_base()
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
        if res.step.diagnostic is not None:
            self._judge_diag(res, out.ranks)
            return
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
        self._end_telemetry(res)
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

    def _end_telemetry(self, res: StepResult) -> None:
        if self.telemetry is not None:
            folder = self.rundir.step_dir(res.step.id)
            res.telemetry = self.telemetry.step_ended(res.step, res.summary, folder)

    def _judge_diag(self, res: StepResult, ranks: Sequence[RankOutput]) -> None:
        """A diagnostic step: every task's log judged per node (diagnostics/plan_steps.py); the job's
        own end says nothing more (a node without the tool ends its task with 127)."""
        assert res.job is not None
        logs: dict[str, str] = {}
        for r in ranks:
            if os.path.lexists(r.log):
                try:
                    logs[r.log.name] = read_inside(self.rundir.root, r.log).decode("utf-8", errors="replace")
                except (NotInside, OSError) as e:
                    res.warnings.append(f"rank {r.rank} output not read: {e}")
        self._end_telemetry(res)  # the GPUs' power and temperatures under a burn, say
        judged = judge_diag_step(res.step, logs)
        res.diagnostics, res.verdict, res.blamed_nodes = judged.nodes, judged.verdict, judged.blamed
        res.reasons += judged.reasons
        if res.job.status != JobStatus.COMPLETED:
            res.warnings.append(f"job {res.job_id} ended {res.job.raw_state}")
        self._save(res)
        self.life.log(StepDone(step=res.step.id, job_id=res.job_id, verdict=res.verdict, reasons=res.reasons))


def steps_json(steps: Sequence[Step | ServingStep]) -> str:
    """The steps as a run folder records them (steps.json, serving-steps.json)."""
    return json.dumps({"steps": [s.model_dump(mode="json") for s in steps]}, indent=2) + "\n"
