"""The plan's faults during scale-test: injected while a step runs, always reverted.

When a step turns RUNNING, each fault of the plan that names the step (by id or index, or every
step when it names none) waits `at_s`, is injected over the kept-open node shells (the node-side
timer armed in the same round trip), held for its duration and reverted; `repeat` times. A sweep
at start-up removes what an earlier, killed orch left. Records go to runs/<id>/faults/.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.models.cluster import Cluster
from orchestrator.models.fault import TARGET_FORMS, WORKER_KINDS, FaultSpec, FaultTarget, PlanFault, Transport
from orchestrator.models.plan import Plan, Step
from orchestrator.models.serving import ServingStep
from orchestrator.remote.base import NodeShell
from orchestrator.store.rundir import RunDir

Log = Callable[..., None]
JOIN_TIMEOUT_S = 60.0


def plan_transport(cluster: Cluster, steps: list[Step]) -> Transport:
    """The transport the plan's collectives use: sockets on CPU nodes, RDMA NICs on GPU nodes."""
    names = {n for s in steps for n in s.nodes}
    vendors = {cluster.node(n).gpu_vendor for n in names}
    return "socket" if vendors <= {"none"} else "rdma-hw"


def fault_matches(pf: PlanFault, step: Step) -> bool:
    """Whether plan fault pf belongs to collective step (by id, by index, or to every collective
    step when it names none); never to a diagnostic step."""
    if step.diagnostic is not None:
        return False
    return pf.step is None or pf.step == step.id or pf.step == step.index


def serving_fault_matches(pf: PlanFault, step: ServingStep) -> bool:
    """Whether plan fault pf belongs to serving step (by its id only: an index or no step means
    collective steps)."""
    return isinstance(pf.step, str) and pf.step == step.id


def fault_level(pf: PlanFault, step: ServingStep) -> str:
    """The load level of serving step the fault hits: its own, else the step's first."""
    return pf.level if pf.level is not None else step.levels[0]


def check_plan_faults(
    plan: Plan, cluster: Cluster, steps: list[Step], force: bool, serving: Sequence[ServingStep] = ()
) -> list[str]:
    """Refuse faults that name no step or a bad target (ConfigError); return transport warnings.
    A fault on a serving step is refused when it names a level the step does not have, restarts a
    container (engines run as processes), or aims NODE:engine at a node without an engine."""
    from orchestrator.faults.catalog import unreachable_warning

    transport = plan_transport(cluster, steps) if steps else "socket"
    workloads = {w.name: w for w in plan.serving}
    warnings: list[str] = []
    for i, pf in enumerate(plan.faults):
        where = f"plan fault {i + 1} ({pf.kind} on {pf.target})"
        sv = [s for s in serving if serving_fault_matches(pf, s)]
        coll = [s for s in steps if fault_matches(pf, s)]
        if not sv and not coll:
            ids = [s.id for s in steps] + [s.id for s in serving]
            raise ConfigError(
                f"{where}: step {pf.step!r} is not a step of the plan ({', '.join(ids) or 'none'})",
                hint="a serving step is named by its id, e.g. lab-tiny-r1 (orch plan show lists them)",
            )
        try:
            spec = pf.spec(force=force)
        except ValidationError as e:
            raise ConfigError(f"{where}: {e.errors()[0]['msg']}") from e
        cluster.node(spec.target.node)
        if coll and pf.level is not None:
            raise ConfigError(
                f"{where}: level {pf.level!r} is for serving steps; step {pf.step!r} is a collective step"
            )
        if coll and spec.target.process is not None:
            raise ConfigError(
                f"{where}: NODE:{spec.target.process} names a serving engine; step {pf.step!r} is a "
                "collective step",
                hint="name a rank (NODE:RANK) or every rank on the node (NODE)",
            )
        for s in sv:
            _check_serving_fault(where, pf, s, workloads[s.workload].engine)
        if TARGET_FORMS[pf.kind] == "container" and spec.target.container is None and coll:
            # scale-test's collbench ranks run as plain processes (only recovery-test's probe runs
            # in the stack's image): a rank target would fail mid-run with "does not run in a container".
            raise ConfigError(
                f"{where}: scale-test steps do not run in containers, so there is no rank container"
                " to restart",
                hint="name a container (NODE:CONTAINER), or run"
                " `orch recovery-test --fault restart-container` (its probe runs in the stack's image)",
            )
        if coll and (w := unreachable_warning(pf.kind, transport)) is not None:
            warnings.append(f"{where}: {w}")
    # The share of nodes hit is checked by the fault engine over the faults active at one time
    # (plan.max_share): faults at different moments of the run may hit different nodes.
    return warnings


def _check_serving_fault(where: str, pf: PlanFault, step: ServingStep, engine: str) -> None:
    """Refuse (ConfigError) what a fault cannot do to serving step."""
    from orchestrator.faults.catalog import fault_info

    if not fault_info(pf.kind).serving:
        raise ConfigError(
            f"{where}: serving step {step.id}: its engines run as processes (a Slurm job or a local "
            "process), not in containers: there is no container to restart",
            hint="use kill-worker NODE:engine with the workload's restart policy (restart: "
            "{max_restarts: 1}) to measure the service's recovery",
        )
    if pf.level is not None and pf.level not in step.levels:
        raise ConfigError(
            f"{where}: serving step {step.id} has no level {pf.level!r} "
            f"(its levels: {', '.join(step.levels)})"
        )
    target = FaultTarget.parse(pf.target, pf.kind)
    if target.process == "engine" or (pf.kind in WORKER_KINDS and target.rank is None):
        if engine == "external":
            raise ConfigError(
                f"{where}: serving step {step.id}: engine external is not started by orch; it has no "
                "engine process to signal"
            )
        per = step.nodes_per_replica
        hosts = [step.nodes[r * per] for r in range(step.replicas)]
        if target.node not in hosts:
            raise ConfigError(
                f"{where}: serving step {step.id} runs no engine on {target.node} "
                f"(its engines run on {', '.join(hosts)})"
            )
    if target.process is None and pf.kind in WORKER_KINDS:
        raise ConfigError(
            f"{where}: serving step {step.id}: an engine has no ranks; name it as {target.node}:engine"
        )


class FaultThreads:
    """What the faults of ladder steps and of serving steps share: the fault engine (one call at a
    time, under _lock), the threads that inject and revert, and what close() closes."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._exit = contextlib.ExitStack()
        self._engine: Any = None

    def close(self) -> None:
        """Stop waiting faults, revert active ones (their threads' finally), close the shells."""
        self._stop.set()
        for t in self._threads:
            t.join(JOIN_TIMEOUT_S)
        self._exit.close()


class StepFaults(FaultThreads):
    """Runs the plan's faults against the steps as they start; close() reverts whatever is active."""

    def __init__(
        self,
        plan: Plan,
        cluster: Cluster,
        steps: list[Step],
        rundir: RunDir,
        log: Log,
        *,
        force: bool,
        shells: Mapping[str, NodeShell] | None = None,
    ) -> None:
        self.plan, self.cluster, self.rundir, self.log, self.force = plan, cluster, rundir, log, force
        self.shells = shells  # the run's kept-open shells (None: opened by start(), closed by close())
        # the start-up sweep covers the nodes this run uses: an unrelated dead node must not stop it
        self.nodes = sorted({n for s in steps for n in s.nodes})
        super().__init__()

    def start(self) -> None:
        """Connect to every node and sweep what an earlier run left; raises OrchError."""
        if not self.plan.faults:
            return
        from orchestrator.faults.engine import FaultEngine
        from orchestrator.remote.shells import node_shells

        if self.shells is None:
            self.shells = self._exit.enter_context(node_shells(self.cluster))
        self._engine = FaultEngine(
            self.cluster, self.shells, record_dir=self.rundir.root / "faults", max_share=self.plan.max_share
        )
        swept = self._engine.sweep(self.nodes)
        self.log("faults_swept", nodes=self.nodes, removed={r.node: r.found for r in swept if r.found})

    def step_started(self, step: Step, started_mono: float) -> None:
        """Schedule the faults that belong to this step."""
        for pf in self.plan.faults:
            if self._engine is not None and fault_matches(pf, step):
                t = threading.Thread(target=self._run, args=(pf, step, started_mono), daemon=True)
                self._threads.append(t)
                t.start()

    def _run(self, pf: PlanFault, step: Step, started_mono: float) -> None:
        try:
            self._run_repeats(pf, step, started_mono)
        except Exception as e:  # a thread must not die silently: the journal says what happened
            self.log("fault_error", step=step.id, fault_kind=pf.kind, target=pf.target, error=str(e))

    def _run_repeats(self, pf: PlanFault, step: Step, started_mono: float) -> None:
        if self._stop.wait(max(0.0, started_mono + pf.at_s - time.monotonic())):
            return
        spec: FaultSpec = pf.spec(force=self.force)
        for n in range(pf.repeat):
            if self._stop.is_set():
                return
            with self._lock:
                active = self._engine.prepare(spec)
            try:
                with self._lock:
                    self._engine.inject(active)
                rec = active.record
                self.log("fault_injected", step=step.id, fault=rec.id, fault_kind=pf.kind, target=pf.target,
                         repeat=n + 1, outcome=rec.outcome, message=rec.message)  # fmt: skip
                self._stop.wait(spec.duration_s)
            finally:
                with self._lock:
                    rec = self._engine.revert(active)  # idempotent; the node-side timer backs it up
            self.log("fault_reverted", step=step.id, fault=rec.id, outcome=rec.outcome)
