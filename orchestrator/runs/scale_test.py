"""`orch scale-test`: resolve → plan → submit the ladder → poll → collect → verdict.

The stages report progress to listeners (the CLI's rich renderer is one); nothing here prints or
exits. Every wait is bounded. The run's lifecycle (run directory, journal, store, signals, jobs
cancelled and faults reverted on any error, run_finished, exit code) is runs/lifecycle.py's; the
ladder's steps are run by the step executor (runs/executor.py), its serving steps by
runs/serving.py, the stack stage is runs/stack_stage.py and the plan's faults runs/step_faults.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from orchestrator.diagnostics.plan_steps import with_diag_steps
from orchestrator.errors import ConfigError, OrchError, SchedulerError
from orchestrator.inventory import load_inventory
from orchestrator.metrics import verdict as V
from orchestrator.models.cluster import Cluster
from orchestrator.models.container import StackContainer
from orchestrator.models.events import FingerprintChecked, RunStarted, RunWarning
from orchestrator.models.events import Listener as Listener  # re-exported: callers of scale_test
from orchestrator.models.plan import Plan, Step
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.models.run import RunResult as RunResult  # re-exported: callers of scale_test
from orchestrator.models.run import StepResult as StepResult
from orchestrator.models.serving import ServingStep
from orchestrator.paths import under
from orchestrator.plan import expand_serving_steps, expand_steps, resolve_plan
from orchestrator.remote.base import NodeShell
from orchestrator.remote.nodefiles import run_data_layout
from orchestrator.runs.executor import StepExecutor, choose_backend, job_spec, make_scheduler, steps_json
from orchestrator.runs.lifecycle import Ending, RunLifecycle, keep_attempt, verdict_ending
from orchestrator.runs.serving import ServingRunner
from orchestrator.runs.stack_stage import StackOutcome, run_stack_stage, workload_container
from orchestrator.runs.step_faults import StepFaults, check_plan_faults, fault_matches
from orchestrator.scheduler.allocation import AllocationScheduler
from orchestrator.scheduler.base import JobScheduler, JobSpec, backend_traits
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.stacks import load_stack, node_python, stack_name, stack_python
from orchestrator.store.db import ResultsStore, default_store_path
from orchestrator.store.load import (
    SERVING_STEPS_FILE,
    finished_serving,
    finished_steps,
    ladder_steps,
    load_run_to_resume,
    require_model,
    run_cluster,
    run_kind,
    serving_steps,
)
from orchestrator.store.rundir import RunDir, atomic_write, new_run_id
from orchestrator.telemetry.sampler import TelemetrySampler

CONTAINER_FILE = "container.json"
"""The stack's image the ladder ran in (run folder), read back by resume_run."""


def scale_test(req: ScaleTestRequest, listeners: list[Listener] | None = None) -> RunResult:
    """Run the plan's ladder on the inventory's cluster; raises OrchError for usage/infra errors
    found before anything runs and Interrupted on Ctrl-C or SIGTERM (after cancelling jobs)."""
    t0 = time.monotonic()
    cluster = load_inventory(req.inventory)
    plan = resolve_plan(req.plan, req.overrides)
    steps = with_diag_steps(plan, cluster, expand_steps(plan, cluster, group=req.group), group=req.group)
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
        atomic_write(life.root / "steps.json", steps_json(steps))
        if serving:
            atomic_write(life.root / SERVING_STEPS_FILE, steps_json(serving))
        if container is not None:  # read back by resume_run: a resumed run runs where it started
            atomic_write(life.root / CONTAINER_FILE, container.model_dump_json(indent=2) + "\n")
        life.started(
            RunStarted(run_id=life.run_id, run_dir=life.root, plan=plan.name, backend=backend,
                       steps=[s.id for s in steps] + [s.id for s in serving]),
            kind="scale-test",
        )  # fmt: skip
        stack = StackOutcome()
        # The run's one set of kept-open shells (runs/lifecycle.py): the stack's fingerprint, the
        # nodes' folders, faults, serving faults and telemetry; one SSH connection per node per run.
        shells = life.shells(cluster)
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
            StepFaults(plan, cluster, steps, life.rundir, life.journal, force=req.force_faults, shells=shells)
            if any(fault_matches(pf, s) for pf in plan.faults for s in steps)
            else None
        )
        telemetry = _telemetry(plan, cluster, steps, shells)
        ladder = StepExecutor(
            plan, cluster, steps, sched, backend, life, python, stack.env, faults, telemetry, container,
            shells,
        )  # fmt: skip
        for res in ladder.results:
            res.warnings += [line for n in res.step.nodes for line in stack.drift.get(n, [])]
            res.warnings += fault_warnings if any(fault_matches(pf, res.step) for pf in plan.faults) else []
        serving_run = _serving_runner(
            plan, cluster, serving, sched, backend, life, python, stack.env, shells,
            force_faults=req.force_faults,
        )  # fmt: skip
        for sres in serving_run.results:
            sres.warnings += [line for n in sres.step.nodes for line in stack.drift.get(n, [])]
        return _execute(ladder, serving_run)


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
    # GPU power per level through the run's one kind of sampler (telemetry/sampler.py), over the
    # run's shells; without them (migrate's plan runs) no power is sampled, and energy says so
    telemetry = _telemetry(plan, cluster, serving, shells) if shells is not None and serving else None
    off = (
        f"telemetry off (telemetry_interval_s {plan.telemetry_interval_s:g})"
        if plan.telemetry_interval_s <= 0
        else "power not sampled: this kind of run keeps no shells to the nodes for telemetry"
    )
    return ServingRunner(plan, cluster, serving, sched, backend, life, python, env, shells,
                         force_faults=force_faults, telemetry=telemetry, no_telemetry=off)  # fmt: skip


def _telemetry(
    plan: Plan,
    cluster: Cluster,
    steps: Sequence[Step | ServingStep],
    shells: Mapping[str, NodeShell] | None = None,
) -> TelemetrySampler | None:
    """The run's GPU telemetry sampler (docs/telemetry.md) over the run's shells (None: its own);
    None when the plan turns it off."""
    if plan.telemetry_interval_s <= 0:
        return None
    run_shells = None if shells is None else lambda _c: contextlib.nullcontext(shells)
    return TelemetrySampler(cluster, steps, plan.telemetry_interval_s, run_shells)


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
    record = load_run_to_resume(run_dir)
    if (kind := run_kind(run_dir)) != "scale-test":
        raise ConfigError(f"run {record.run_id} is a {kind} run, not a ladder", hint="orch runs resume")
    # Everything read back from the run folder is checked again here, strictly: a plan name or a
    # step id becomes a job name and a folder, so an edited file is refused, naming the value.
    plan = require_model(Plan, run_dir, run_dir / "plan.json")
    cluster = run_cluster(run_dir, slurm_conf)  # Slurm's configuration never from the run folder
    steps = ladder_steps(run_dir) or with_diag_steps(plan, cluster, expand_steps(plan, cluster))
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
        shells = life.shells(cluster)
        telemetry = _telemetry(plan, cluster, steps, shells)
        ladder = StepExecutor(
            plan, cluster, steps, sched, backend, life, python, env, telemetry=telemetry, container=container,
            shells=shells,
        )  # fmt: skip
        for i, s in enumerate(steps):
            if s.id in done:
                ladder.results[i] = done[s.id]
                ladder.results[i].ended_mono = ladder.results[i].ended_mono or 0.0
        serving_run = _serving_runner(plan, cluster, serving, sched, backend, life, python, env, shells)
        for i, ss in enumerate(serving):
            if ss.id in sdone:
                serving_run.results[i] = sdone[ss.id]
        return _execute(ladder, serving_run)


def _execute(runner: StepExecutor, serving_run: ServingRunner | None = None) -> RunResult:
    """Run the ladder, then the serving steps, and write the result, inside the run's lifecycle.
    On any error the lifecycle cancels the jobs, then the result is written (an interrupted or
    infrastructure failure, each unfinished step saying why) with run_finished journaled."""
    runner.life.on_error(lambda ending: _finish(runner, serving_run, ending))
    if runner.steps or serving_run is None:
        runner.run()
    if serving_run is not None:
        serving_run.run()
    return _finish(runner, serving_run, None)


def _finish(runner: StepExecutor, serving_run: ServingRunner | None, ending: Ending | None) -> RunResult:
    """The run's result from its steps (ending None: the run ran to its end and the verdict sets
    it); written to result.json, then run_finished journaled."""
    results = runner.results
    serving = serving_run.results if serving_run is not None else []
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


def _apply_baseline(runner: StepExecutor) -> None:
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
