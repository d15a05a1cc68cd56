"""`orch health`: sample every node once (over the kept-open shells, or this machine with --local),
and drain the nodes with a fatal finding, under a cap (docs/health.md).

Draining goes through the one Slurm client (scheduler/slurm.py drain, drain_reason), as isolate's
--drain-bad does. The cap (the inventory's orch_max_unavailable, --max-unavailable on --local) bounds
how many nodes are out of service after the drains, counting those Slurm already shows drained or
down: a fatal node beyond it is reported with why it was not drained. This module imports no SSH,
Ansible, rich or plan code at load, so that `--local` (a HealthCheckProgram) starts fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from orchestrator.errors import OrchError
from orchestrator.health.sample import parse_sample, sample_script
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.health import HealthReport, HealthSources, NodeHealth
from orchestrator.remote.base import NodeShell
from orchestrator.scheduler.slurm import SlurmScheduler, drain_reason
from orchestrator.text import plural

SAMPLE_TIMEOUT_S = 60.0
# the "run id" in a drain reason: `orch health: <why>`
DRAIN_TAG = "health"


def sources_of(node: Node) -> HealthSources:
    """Where node's sources are, from its inventory variables (unset: the real ones)."""
    return HealthSources(
        kernel_log=node.health_kernel_log,
        sysfs=node.health_sysfs or "/sys",
        tools_dir=node.health_tools_dir,
        ifaces=list(node.rdma_ifaces),
    )


def sample_node(
    name: str, shell: NodeShell, src: HealthSources, timeout: float = SAMPLE_TIMEOUT_S
) -> NodeHealth:
    """One node's sample through its shell; a node that cannot be reached is an error, not a raise."""
    try:
        res = shell.run_script(sample_script(src), timeout=timeout)
    except OrchError as e:
        return NodeHealth(node=name, errors=[f"not sampled: {e.message}"])
    findings, errors = parse_sample(name, res.stdout, src.ifaces)
    if not res.ok:
        errors.append(f"the sample exited {res.rc}: {res.stderr.strip()[-200:]}")
    return NodeHealth(node=name, findings=findings, errors=errors)


def sample_cluster(cluster: Cluster, shells: Mapping[str, NodeShell], workers: int = 16) -> list[NodeHealth]:
    """Every node's sample, in inventory order (at most `workers` at once)."""
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(cluster.nodes)))) as pool:
        futures = [pool.submit(sample_node, n.name, shells[n.name], sources_of(n)) for n in cluster.nodes]
        return [f.result() for f in futures]


def why_fatal(node: NodeHealth) -> str:
    """The drain reason's text: the fatal findings' kinds and devices."""
    fatal = [f for f in node.findings if f.severity == "fatal"]
    return "; ".join(f"{f.kind} {f.device or ''}".strip() for f in fatal)


def drain_fatal(
    nodes: list[NodeHealth], names: list[str], max_unavailable: int, sched: SlurmScheduler
) -> list[str]:
    """Drain each fatal node not already out of service while the nodes out of service (of `names`,
    as sinfo shows them) stay within max_unavailable; returns the nodes drained. Each fatal node's
    `action` says what was done and why. Raises SchedulerError when sinfo or scontrol fails."""
    out = sched.unavailable_nodes(names)
    drained: list[str] = []
    for n in nodes:
        if not n.fatal:
            continue
        if n.node in out:
            n.action = f"already out of service ({out[n.node]})"
            continue
        if len(out) + len(drained) >= max_unavailable:
            n.action = (
                f"not drained: orch_max_unavailable={max_unavailable} reached "
                f"({plural(len(out) + len(drained), 'node')} out of service)"
            )
            continue
        reason = drain_reason(DRAIN_TAG, why_fatal(n))
        sched.drain([n.node], reason)
        n.drained, n.action = True, f"drained: {reason}"
        drained.append(n.node)
    return drained


def health_report(
    nodes: list[NodeHealth],
    *,
    local: bool,
    drain: bool,
    max_unavailable: int,
    sched: SlurmScheduler | None,
    names: list[str],
) -> HealthReport:
    """The report of one sample of `nodes`; with drain, their fatal nodes drained under the cap
    (sched: the cluster's Slurm). Raises SchedulerError."""
    if drain and sched is not None:
        drain_fatal(nodes, names, max_unavailable, sched)
    elif any(n.fatal for n in nodes):
        for n in nodes:
            if n.fatal:
                n.action = "not drained (without --drain)"
    return HealthReport(
        taken_at=datetime.now(UTC), local=local, drain=drain, max_unavailable=max_unavailable, nodes=nodes
    )


def check_cluster(
    cluster: Cluster,
    *,
    drain: bool,
    sched: SlurmScheduler | None = None,
    shells: Mapping[str, NodeShell] | None = None,
) -> HealthReport:
    """Sample every node of the inventory over its kept-open shell, then drain as health_report."""
    from orchestrator.remote.shells import node_shells

    if drain and sched is None:
        sched = SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
    if shells is not None:
        nodes = sample_cluster(cluster, shells)
    else:
        with node_shells(cluster) as opened:
            nodes = sample_cluster(cluster, opened)
    return health_report(nodes, local=False, drain=drain, max_unavailable=cluster.vars.orch_max_unavailable,
                         sched=sched, names=cluster.names)  # fmt: skip


def check_here(
    node: str,
    src: HealthSources,
    *,
    drain: bool,
    max_unavailable: int,
    sched: SlurmScheduler | None = None,
    shell: NodeShell | None = None,
) -> HealthReport:
    """Sample this machine as `node` (a Slurm HealthCheckProgram); with drain, drain it through
    scontrol when it is fatal and fewer than max_unavailable nodes of the cluster are out of service."""
    from orchestrator.remote.local import LocalShell

    result = sample_node(node, shell or LocalShell(), src)
    names: list[str] = []
    if drain and result.fatal:
        sched = sched or SlurmScheduler()
        names = sched.node_names()
    return health_report(
        [result], local=True, drain=drain, max_unavailable=max_unavailable, sched=sched, names=names
    )
