"""`orch migrate run` and `orch rollback`: the migration procedure as runs of the one lifecycle.

A run of kind "migrate" (or "rollback") inside RunLifecycle: its folder holds request.json,
inventory.json, plan.json, migrate.json (the phases, the compare, the proof; rewritten after each
phase), reference.json (the frozen fingerprints of A), playbooks.json (the ansible-playbook
processes its provisionings started) and report.md / report.html. The journal has
`migrate_phase` lines (started, then passed / failed / skipped with the gate, the reason and the
time). The phases themselves are migrate/procedure.py; this module gives them the real work
(ClusterOps: provisioning through Ansible, fingerprints over SSH, the plan through the step
executor of runs/executor.py, as isolate runs its tests) and the lifecycle.

`orch runs resume` of a migrate run: stop the ansible-playbook processes the run started that are
still running (runs/playbook_pids.py), read which stack every node holds, continue from the first
phase not done. A node found on neither A nor B (a provisioning stopped half-way) that the next
phase does not provision again stops the procedure, which then rolls back: no node ends on a mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.metrics.serving import run_figures_log_se
from orchestrator.migrate.arms import Arm, Renderer, arm_plan, parse_arm, renderer, with_variants
from orchestrator.migrate.procedure import Ops, Procedure, node_states
from orchestrator.models.cluster import Cluster
from orchestrator.models.decision import QualityJudgement
from orchestrator.models.events import Listener, RunKind, RunProgress, RunStarted
from orchestrator.models.fingerprint import Fingerprint, FingerprintSet
from orchestrator.models.migrate import (
    PHASES,
    MigrateRun,
    PhaseName,
    PlanRun,
    ServingFaultFigures,
    ServingFigures,
)
from orchestrator.models.plan import Plan
from orchestrator.models.requests import MigrateRequest
from orchestrator.models.serving_results import ServingStepResult
from orchestrator.paths import under
from orchestrator.runs.lifecycle import Ending, RunLifecycle
from orchestrator.runs.playbook_pids import recording, stop_left_behind
from orchestrator.stacks import load_stack
from orchestrator.store.load import require_model, run_cluster
from orchestrator.store.rundir import atomic_write, new_run_id

PLAYBOOKS_FILE = "playbooks.json"
STATE_FILE = "migrate.json"
REFERENCE_FILE = "reference.json"


OpsFactory = Callable[[RunLifecycle, Cluster, Plan | None], Ops]


def cluster_ops(life: RunLifecycle, cluster: Cluster, plan: Plan | None) -> Ops:
    """The real work on the nodes (the default OpsFactory)."""
    return ClusterOps(life, cluster, plan)


class ClusterOps:
    """Provisioning through `orch provision`'s service (the playbooks' PIDs recorded in the run
    folder), fingerprints over the kept-open SSH shells, the plan through the step executor."""

    def __init__(self, life: RunLifecycle, cluster: Cluster, plan: Plan | None) -> None:
        self.life, self.cluster, self.plan = life, cluster, plan

    def provision(self, stack: str, nodes: list[str], *, clean: bool) -> dict[str, str]:
        from orchestrator.models.requests import ProvisionRequest
        from orchestrator.provision.service import provision

        req = ProvisionRequest(
            inventory=self.cluster.source,
            stack=stack,
            limit=",".join(nodes),
            clean=clean,
            out_dir=self.life.root / "provision",
        )
        _journal_and_tell(self.life)("migrate_provision", stack=stack, nodes=nodes, clean=clean)
        with recording(self.life.root / PLAYBOOKS_FILE):
            report = provision(req)
        failed = {
            h: (o.message or o.status)
            for h, o in report.result.hosts.items()
            if h in report.result.failed_hosts
        }
        failed |= {n: "not in the playbook's results" for n in nodes if n not in report.result.hosts}
        return failed

    def fingerprint(self, stack: str, nodes: list[str]) -> tuple[dict[str, Fingerprint], dict[str, str]]:
        from orchestrator.provision.quickprint import quick_fingerprint

        return quick_fingerprint(self.cluster, load_stack(stack), nodes)

    def plan_has_faults(self) -> bool:
        return bool(self.plan and self.plan.faults)

    def plan_has_serving_faults(self) -> bool:
        return bool(self.plan and any(isinstance(f.step, str) for f in self.plan.faults))

    def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
        from orchestrator.plan import expand_serving_steps, expand_steps
        from orchestrator.runs.executor import StepExecutor, choose_backend, make_scheduler
        from orchestrator.runs.scale_test import _serving_runner
        from orchestrator.runs.step_faults import StepFaults
        from orchestrator.stacks import stack_python

        assert self.plan is not None
        t0 = time.monotonic()
        # stack is the arm, STACK[:VARIANT]: the plan runs on its stack with its variant, and the
        # run (PlanRun.stack, the journal) is named by the arm.
        arm = parse_arm(stack)
        base_plan = arm_plan(self.plan, arm)
        sub = self.cluster.model_copy(update={"nodes": [self.cluster.node(n) for n in nodes]})
        # Each plan run gets its own step ids (label-n3xg1): its folders sit beside the others'.
        pfs = (
            [
                f.model_copy(update={"step": f"{label}-{f.step}"}) if isinstance(f.step, str) else f
                for f in self.plan.faults
            ]
            if faults
            else []
        )
        plan = base_plan.model_copy(update={"faults": pfs})
        steps = [s.model_copy(update={"id": f"{label}-{s.id}"}) for s in expand_steps(plan, sub)]
        serving = [s.model_copy(update={"id": f"{label}-{s.id}"}) for s in expand_serving_steps(plan, sub)]
        backend = choose_backend(plan, sub)
        python, env = stack_python(arm.stack)
        step_faults = (
            StepFaults(plan, sub, steps, self.life.rundir, self.life.journal, force=False) if pfs else None
        )
        _journal_and_tell(self.life)(
            "migrate_plan_run", label=label, stack=stack, nodes=nodes,
            steps=[s.id for s in steps] + [s.id for s in serving],
        )  # fmt: skip
        sched = make_scheduler(backend, sub, plan)
        runner = StepExecutor(plan, sub, steps, sched, backend, self.life, python, env, step_faults)
        if steps:
            runner.run()
        shells = self.life.shells(self.cluster)  # the run's one set: GPU power per serving level
        served = _serving_runner(plan, sub, serving, sched, backend, self.life, python, env, shells)
        served.run()
        busbw: dict[str, dict[int, float]] = {}
        for res in runner.results:
            shape = res.step.id.removeprefix(f"{label}-")
            for row in res.rows:
                busbw.setdefault(f"{row.collective}@{shape}", {})[row.size_bytes] = row.out_of_place.busbw_gbs
        verdicts = [r.verdict for r in runner.results] + [r.verdict for r in served.results]
        verdict = (
            "pass"
            if verdicts and all(v == "pass" for v in verdicts)
            else ("infra" if "infra" in verdicts else "fail" if "fail" in verdicts else "skipped")
        )
        reasons = [f"{r.step.id}: {'; '.join(r.reasons)}" for r in runner.results if r.reasons]
        reasons += [f"{r.step.id}: {'; '.join(r.reasons)}" for r in served.results if r.reasons]
        return PlanRun(
            label=label,
            stack=stack,
            nodes=nodes,
            verdict=verdict,
            reasons=reasons,
            busbw=busbw,
            serving=serving_figures(label, served.results),
            serving_faults=serving_fault_figures(label, served.results),
            quality_outputs={
                r.step.id.removeprefix(f"{label}-"): r.quality.outputs
                for r in served.results
                if r.quality is not None and r.quality.error is None
            },
            wall_s=time.monotonic() - t0,
        )

    def judge_quality(self, a: PlanRun, b: PlanRun) -> dict[str, QualityJudgement]:
        """B's quality outputs judged against A's, per serving step both kept them
        (workloads/quality.judge_run: the floor is A's own A-against-A passes)."""
        from orchestrator.workloads.quality import judge_run

        assert self.plan is not None and self.plan.quality is not None
        root = self.life.root
        return {
            step: judge_run(
                self.plan.quality,
                under(root, *Path(a.quality_outputs[step]).parent.parts, what="quality outputs"),
                b_root=under(root, *Path(b.quality_outputs[step]).parent.parts, what="quality outputs"),
            )
            for step in sorted(set(a.quality_outputs) & set(b.quality_outputs))
        }


def serving_figures(label: str, results: list[ServingStepResult]) -> list[ServingFigures]:
    """Each serving step's levels as the figures the compare judges (the step id without label)."""
    out = []
    for r in results:
        for lv in r.levels:
            s = lv.summary
            if s is None:
                continue
            fig = ServingFigures(
                step=r.step.id.removeprefix(f"{label}-"), level=lv.level, n=s.n,
                ttft_p99_ms=s.ttft_ms.p99, ttft_n=s.ttft_ms.n, itl_p99_ms=s.itl_ms.p99,
                itl_n=s.itl_ms.n, tpot_p99_ms=s.tpot_ms.p99, tpot_n=s.tpot_ms.n,
                log_se=run_figures_log_se(s),
                output_tokens_per_s=s.output_tokens_per_s, slo_attainment=s.slo_attainment,
                error_rate=s.error_rate, abort_rate=s.abort_rate, timeout_rate=s.timeout_rate,
                truncated_rate=s.truncated_rate,
            )  # fmt: skip
            out.append(fig)
    return out


def serving_fault_figures(label: str, results: list[ServingStepResult]) -> list[ServingFaultFigures]:
    """Each injection of a plan fault into a serving step, with its measured outage and time to
    steady (the step id without label; None where the recovery did not measure it)."""
    out = []
    for r in results:
        for f in r.faults:
            rec = f.recovery
            out.append(ServingFaultFigures(
                step=r.step.id.removeprefix(f"{label}-"), fault=f"{f.kind} {f.target}", level=f.level,
                repeat=f.repeat, status=rec.status if rec else None, outage_s=rec.outage_s if rec else None,
                to_steady_s=rec.to_steady_s if rec else None,
            ))  # fmt: skip
    return out


def _arms(req: MigrateRequest) -> dict[str, Arm]:
    """A and B (none for a rollback) as the request gives them."""
    return {"A": Arm(req.from_stack, req.from_variant)} | (
        {"B": Arm(req.to_stack, req.to_variant)} if req.to_stack else {}
    )


def _save(life: RunLifecycle) -> Callable[[MigrateRun], None]:
    def save(state: MigrateRun) -> None:
        state.wall_s = life.wall_s
        atomic_write(life.root / STATE_FILE, state.model_dump_json(indent=2) + "\n")

    return save


def _reference(path: Path) -> FingerprintSet | None:
    return (
        require_model(FingerprintSet, path, path / REFERENCE_FILE)
        if (path / REFERENCE_FILE).exists()
        else None
    )


def migrate_report(run_dir: Path, fmt: str) -> str:
    """The report of a migrate or rollback run, rebuilt from its folder alone: "md", "html" or
    "json" (migrate.json). Raises ConfigError when the folder has no migrate.json or it is damaged."""
    from orchestrator.migrate.matrix import build_matrix
    from orchestrator.report.migrate import run_html, run_markdown

    state = require_model(MigrateRun, run_dir, run_dir / STATE_FILE)
    if fmt == "json":
        return state.model_dump_json(indent=2) + "\n"
    matrix = None
    if state.to_stack is not None:
        ref = _reference(run_dir)
        a, b = load_stack(state.from_stack), load_stack(state.to_stack)
        matrix = build_matrix(a, b, ref.nodes if ref else None)
        if state.from_variant or state.to_variant:  # the arms' variants, as `orch migrate plan` shows them
            arm_a, arm_b = Arm(state.from_stack, state.from_variant), Arm(state.to_stack, state.to_variant)
            matrix = with_variants(matrix, a, arm_a, b, arm_b)
    return run_html(state, matrix) if fmt == "html" else run_markdown(state, matrix)


def _finish(life: RunLifecycle, state: MigrateRun) -> MigrateRun:
    _save(life)(state)
    atomic_write(life.root / "report.md", migrate_report(life.root, "md"))
    atomic_write(life.root / "report.html", migrate_report(life.root, "html"))
    status = "failed" if state.status == "running" else state.status  # settled before this, always
    life.finish(Ending(status, state.exit_code, state.failure), wall_s=state.wall_s)
    return state


def _progress_line(kind: str, f: dict[str, object]) -> str | None:
    """The console line for a journal line of the procedure (None: the journal only)."""

    def names(v: object) -> str:
        return ",".join(str(x) for x in v) if isinstance(v, list) else str(v)

    if kind == "migrate_phase":
        if f.get("state") == "started":
            again = f" (attempt {f['attempt']})" if int(str(f.get("attempt", 1))) > 1 else ""
            return f"phase {f.get('phase')}: started{again}"
        took = f", {float(str(f.get('wall_s', 0.0))):.1f}s" if f.get("state") != "skipped" else ""
        return f"phase {f.get('phase')}: {f.get('state')}{took} - {f.get('reason') or f.get('gate')}"
    if kind == "migrate_provision":
        clean = " (venv removed first)" if f.get("clean") else ""
        return f"provisioning {f.get('stack')} on {names(f.get('nodes'))}{clean}"
    if kind == "migrate_plan_run":
        where = f"stack {f.get('stack')} on {names(f.get('nodes'))}"
        return f"plan run {f.get('label')}: {where}, steps {names(f.get('steps'))}"
    nodes = f.get("nodes")
    if kind == "migrate_nodes" and isinstance(nodes, list):
        return "nodes found: " + "; ".join(
            f"{n.get('node')} on {n.get('holds')}" for n in nodes if isinstance(n, dict)
        )
    return None


def _journal_and_tell(life: RunLifecycle) -> Callable[..., None]:
    """The procedure's journal: each line journaled, and the ones worth a console line told to the
    listeners as RunProgress (a migration runs for many minutes; its user sees each phase)."""

    def journal(kind: str, **fields: object) -> None:
        life.journal(kind, **fields)
        line = _progress_line(kind, fields)
        if line is not None:
            life.emit(RunProgress(message=line))

    return journal


def _procedure(
    life: RunLifecycle,
    req: MigrateRequest,
    state: MigrateRun,
    ops: Ops,
    reference: FingerprintSet | None,
    started: list[PhaseName] | None = None,
    render: Renderer = lambda side: None,
    plan: Plan | None = None,
) -> Procedure:
    a = load_stack(req.from_stack)
    b = load_stack(req.to_stack) if req.to_stack else None

    def save_reference(ref: FingerprintSet) -> None:
        atomic_write(life.root / REFERENCE_FILE, ref.model_dump_json(indent=2) + "\n")

    return Procedure(
        state,
        a,
        b,
        ops,
        rounds=req.rounds,
        no_rollback=req.no_rollback,
        reference=reference,
        journal=_journal_and_tell(life),
        save=_save(life),
        save_reference=save_reference,
        started=started or [],
        reference_from=req.reference_run.name if req.reference_run else None,
        detect={str(k): v for k, v in plan.thresholds.detect.items()} if plan else None,
        render=render,
    )


def _plan_fits(plan: Plan, cluster: Cluster, nodes: list[str], what: str) -> None:
    """Refuse (ConfigError, exit 2) before any node is touched a plan that has no step on `nodes`:
    the canary runs the plan on its own nodes, and a ladder of 2..N nodes has nothing to run on a
    1-node canary. Found here, not after the canary's provisioning."""
    from orchestrator.plan import expand_serving_steps, expand_steps

    sub = cluster.model_copy(update={"nodes": [cluster.node(n) for n in nodes]})
    try:
        steps = expand_steps(plan, sub) + expand_serving_steps(plan, sub)
    except ConfigError as e:
        raise ConfigError(
            f"plan {plan.name} cannot run on {what} ({', '.join(nodes)}): {e.message}",
            hint="give the plan a ladder with steps that fit the canary (nodes: 1..N), or a larger --canary",
        ) from e
    if not steps:
        raise ConfigError(f"plan {plan.name} has no step to run on {what} ({', '.join(nodes)})")


def run_migration(
    req: MigrateRequest, listeners: list[Listener] | None = None, ops_factory: OpsFactory = cluster_ops
) -> MigrateRun:
    """`orch migrate run` (to_stack and plan given) or `orch rollback` (neither): see the module doc.

    Raises ConfigError for an unknown stack or plan, a canary as large as the cluster, or a rollback
    reference run without a reference; Interrupted on Ctrl-C or SIGTERM (run_finished journaled;
    `orch runs resume` continues)."""
    from orchestrator.plan import resolve_plan

    t0 = time.monotonic()
    cluster = load_inventory(req.inventory)
    nodes = [n.name for n in cluster.nodes]
    a = load_stack(req.from_stack)
    kind: RunKind = "migrate" if req.to_stack else "rollback"
    plan = resolve_plan(req.plan, None) if req.plan else None
    if req.to_stack:
        load_stack(req.to_stack)
        if plan is None:
            raise ConfigError("orch migrate run needs --plan", hint="e.g. --plan smoke")
        if req.canary >= len(nodes) and len(nodes) > 1:
            raise ConfigError(
                f"--canary {req.canary}: the cluster has {len(nodes)} nodes; the canary is a subset"
            )
    render = renderer(_arms(req), plan, cluster)
    # Each arm's engines rendered now: a variant the stack lacks, or one the plan contradicts, is
    # refused (exit 2) before the run exists.
    arms = [r for r in (render("A"), render("B")) if r is not None] if plan else []
    if req.to_stack and plan is not None:
        plan_a = arm_plan(plan, _arms(req)["A"])  # the plan as A runs it (its stack, its variant)
        _plan_fits(plan_a, cluster, nodes[: req.canary], "the canary")
        _plan_fits(plan_a, cluster, nodes, "the cluster")
    reference = None
    if req.reference_run is not None:
        reference = _reference(req.reference_run)
        if reference is None:
            raise ConfigError(f"{req.reference_run}: no {REFERENCE_FILE}: its freeze phase did not pass")
        if reference.stack != a.name:
            raise ConfigError(f"{req.reference_run}: its reference is stack {reference.stack}, not {a.name}")
    with RunLifecycle.create(req.out_dir, new_run_id(kind), listeners or [], t0=t0) as life:
        life.write_inputs(request=req, inventory=cluster, **({"plan": plan} if plan else {}))
        life.started(
            RunStarted(
                run_id=life.run_id,
                run_dir=life.root,
                plan=plan.name if plan else "rollback",
                backend="ansible",
                steps=[],
            ),
            kind=kind,
            from_stack=a.name,
            to_stack=req.to_stack,
            nodes=nodes,
        )
        state = MigrateRun(
            run_id=life.run_id,
            run_dir=life.root,
            kind=kind,
            from_stack=a.name,
            to_stack=req.to_stack,
            from_variant=req.from_variant,
            to_variant=req.to_variant,
            arms=arms,
            plan=plan.name if plan else None,
            nodes=nodes,
            canary=nodes[: req.canary] if req.to_stack else [],
        )
        if reference is not None:
            atomic_write(life.root / REFERENCE_FILE, reference.model_dump_json(indent=2) + "\n")
        ops = ops_factory(life, cluster, plan)
        proc = _procedure(life, req, state, ops, reference, plan=plan, render=render)
        proc.run(PHASES if req.to_stack else ("rollback", "certify"))
        return _finish(life, state)


def resume_migration(
    run_dir: Path,
    listeners: list[Listener] | None = None,
    ops_factory: OpsFactory = cluster_ops,
    slurm_conf: Path | None = None,
) -> MigrateRun:
    """`orch runs resume` of a migrate or rollback run: see the module doc.

    Raises ConfigError when the folder is damaged, the run is still running (its orch is alive:
    its playbooks are not left behind) or every phase is done."""
    from orchestrator.store.load import load_run_to_resume

    load_run_to_resume(run_dir)  # refuses a run that still runs
    req = require_model(MigrateRequest, run_dir, run_dir / "request.json")
    cluster = run_cluster(run_dir, slurm_conf)  # Slurm's configuration never from the run folder
    plan = require_model(Plan, run_dir, run_dir / "plan.json") if (run_dir / "plan.json").exists() else None
    state = (
        require_model(MigrateRun, run_dir, run_dir / STATE_FILE) if (run_dir / STATE_FILE).exists() else None
    )
    if state is None:
        raise ConfigError(
            f"{run_dir}: no {STATE_FILE}: the run stopped before its first phase",
            hint="start it again with orch migrate run",
        )
    order: tuple[PhaseName, ...] = PHASES if state.kind == "migrate" else ("rollback", "certify")
    todo = [p for p in order if p not in {r.phase for r in state.phases}]
    if not todo:
        raise ConfigError(f"{run_dir}: every phase is done; nothing to resume")
    stopped = stop_left_behind(run_dir / PLAYBOOKS_FILE)
    with RunLifecycle.at(run_dir, listeners or []) as life:
        life.resumed(
            RunStarted(
                run_id=state.run_id, run_dir=run_dir, plan=state.plan or "rollback", backend="ansible"
            ),
            phase=todo[0],
            stopped_playbooks=stopped,
        )
        state.stopped_playbooks += stopped
        reference = _reference(run_dir)
        ops = ops_factory(life, cluster, plan)
        started = [
            e["phase"]
            for e in life.rundir.events()
            if e.get("event") == "migrate_phase" and e.get("state") == "started" and e.get("phase") in order
        ]
        render = renderer(_arms(req), plan, cluster)
        proc = _procedure(life, req, state, ops, reference, started, plan=plan, render=render)
        fps, unread = ops.fingerprint(state.from_stack, state.nodes)
        found = node_states(proc.a, state.to_stack, fps, reference)
        state.resumes.append(found)
        _journal_and_tell(life)("migrate_nodes", nodes=[s.model_dump() for s in found], unread=unread)
        redo = {
            "canary": state.canary,
            "scale": [n for n in state.nodes if n not in state.canary],
            "rollback": state.nodes,
        }.get(todo[0], [])
        mixed = [s.node for s in found if s.holds == "mixed" and s.node not in redo] + sorted(unread)
        if mixed and state.failed_phase is None and todo[0] != "freeze":
            proc.fail_before(
                todo[0],
                f"after the interruption {', '.join(mixed)} hold neither "
                f"{state.from_stack} nor {state.to_stack}: rolling back",
            )
        proc.run(order)
        return _finish(life, state)
