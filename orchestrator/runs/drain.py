"""`--drain-bad` and `orch cert resume`: culprit nodes out of and back into Slurm service.

Opt-in only. Draining goes through the one Slurm client (scheduler/slurm.py drain/resume_nodes):
an argv list, no shell, the reason checked against a strict character set. Never more than the
plan's max_share of the cluster's nodes without --force (faults/safety.py check_share, the same
bound as faults). A link culprit (two nodes that each pass with others) drains nothing: neither
node is bad alone.
"""

from __future__ import annotations

from orchestrator.faults.safety import check_share
from orchestrator.models.cluster import Cluster
from orchestrator.models.isolation import Isolation
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.scheduler.slurm import drain_reason as drain_reason  # its home; isolate's callers


def drain_culprits(
    found: Isolation,
    cluster: Cluster,
    run_id: str,
    max_share: float,
    *,
    force: bool,
    sched: SlurmScheduler | None = None,
) -> list[str]:
    """Drain the node culprits of an isolation with a reason naming the run; returns the nodes
    drained. Raises SafetyError (a ConfigError) past max_share without force, SchedulerError when
    scontrol refuses."""
    bad = [c for c in found.culprits if c.kind == "node"]
    nodes = [n for c in bad for n in c.nodes]
    if not nodes:
        return []
    check_share(nodes, len(cluster.nodes), force=force, max_share=max_share, what="draining would take")
    sched = sched or SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
    for c in bad:
        sched.drain(c.nodes, drain_reason(run_id, c.why))
    return nodes
