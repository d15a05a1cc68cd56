"""`orch cert resume NODE`: a drained node back into Slurm service after a passing re-test."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from orchestrator.errors import ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.models.base import StrictModel
from orchestrator.models.isolation import Round
from orchestrator.models.requests import IsolateRequest
from orchestrator.runs.drain import drain_reason
from orchestrator.runs.isolate import IsolationRun, run_isolation
from orchestrator.scheduler.slurm import SlurmScheduler

RESPOND_WAIT_S = 60.0


class ResumeOutcome(StrictModel):
    """`orch cert resume NODE`: the re-test run and whether the node is back in service."""

    node: str
    was: str = Field(description="the node's Slurm state and reason before")
    retest: IsolationRun
    resumed: bool


def resume_node(
    node: str,
    inventory: Path,
    out_dir: Path,
    on_round: Callable[[Round], None] = lambda _r: None,
    *,
    sched: SlurmScheduler | None = None,
    size: int = IsolateRequest.model_fields["size"].default,
    min_efficiency: float = IsolateRequest.model_fields["min_efficiency"].default,
) -> ResumeOutcome:
    """Return a drained node to service after a passing re-test: Slurm runs no job on a drained
    node, so the node is resumed, re-tested at once as an isolate run (alone with 2 ranks, then
    with a known-good partner: the other nodes of the inventory), and drained again, with the
    re-test's run id in the reason, when it fails. Raises ConfigError when the node is unknown or
    not drained, SchedulerError when scontrol fails, and as run_isolation."""
    cluster = load_inventory(inventory)
    cluster.node(node)
    sched = sched or SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
    state, reason = sched.node_state(node)
    if "DRAIN" not in state.upper():
        raise ConfigError(
            f"{node} is not drained (state {state or 'unknown'})",
            hint="orch cert resume is for drained nodes",
        )
    partners = [n.name for n in cluster.nodes if n.name != node]
    sched.resume_nodes([node])
    _wait_responding(sched, node)
    req = IsolateRequest(
        inventory=inventory,
        size=size,
        min_efficiency=min_efficiency,
        nodes=[node],
        known_good=partners,
        drain_bad=True,
        force=True,
        out_dir=out_dir,
    )
    retest = run_isolation(req, on_round=on_round)
    passed = not retest.isolation.culprits and not retest.isolation.undecided
    if not passed and node not in retest.drained:
        sched.drain([node], drain_reason(retest.run_id, "re-test did not pass"))
    return ResumeOutcome(
        node=node, was=f"{state} ({reason})" if reason else state, retest=retest, resumed=passed
    )


def _wait_responding(sched: SlurmScheduler, node: str, timeout_s: float = RESPOND_WAIT_S) -> None:
    """Right after a resume, Slurm may show the node not responding ('idle*' in the lab) until
    its next ping; a job submitted then would be refused the node (the runner abandons a step
    whose node is unavailable). Wait, bounded, until the scheduler calls it available."""
    deadline = time.monotonic() + timeout_s
    while sched.unavailable_nodes([node]) and time.monotonic() < deadline:
        time.sleep(1.0)
