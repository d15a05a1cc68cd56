"""Guards that run before anything reaches a node.

- Targets and interfaces with shell metacharacters never get past FaultTarget validation; the
  check is repeated here for values built in code.
- The management interface and the interface that carries orch's own SSH are never targets,
  whatever --force says.
- An interface that is not one of the node's rdma_ifaces needs --force.
- Hitting more than ``max_share`` of the cluster's nodes needs --force. The share is the plan's
  ``max_share`` (models/plan.py); draining nodes (runs/drain.py) is bounded by the same check.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.errors import ConfigError
from orchestrator.models.cluster import Node
from orchestrator.models.fault import IFACE_KINDS, FaultSpec, plain_word_problem
from orchestrator.models.plan import Plan
from orchestrator.text import plural

DEFAULT_MAX_SHARE: float = Plan.model_fields["max_share"].default


class SafetyError(ConfigError):
    """A fault was refused before anything ran."""


def check_words(spec: FaultSpec) -> None:
    """Refuse any target word a shell could read as syntax; raises SafetyError."""
    for label, value in (
        ("node", spec.target.node),
        ("interface", spec.target.iface),
        ("container", spec.target.container),
    ):
        if value is not None and (why := plain_word_problem(value)) is not None:
            raise SafetyError(f"refused: target {label} {value!r} {why}")


def check_iface(spec: FaultSpec, node: Node, ssh_iface: str | None) -> None:
    """Refuse the management and SSH interfaces; others outside rdma_ifaces need --force."""
    iface = spec.target.iface
    if spec.kind not in IFACE_KINDS or iface is None:
        return
    if node.mgmt_iface is not None and iface == node.mgmt_iface:
        raise SafetyError(
            f"refused: {node.name}:{iface} is the management interface (mgmt_iface); it is never a target"
        )
    if ssh_iface is not None and iface == ssh_iface:
        raise SafetyError(
            f"refused: {node.name}:{iface} carries orch's own SSH connection; it is never a target"
        )
    if iface not in node.rdma_ifaces and not spec.force:
        raise SafetyError(
            f"refused: {node.name}:{iface} is not one of the node's rdma_ifaces "
            f"({', '.join(node.rdma_ifaces) or 'none'})",
            hint="add --force to target it anyway",
        )


def check_share(
    targets: Iterable[str],
    cluster_size: int,
    *,
    force: bool,
    max_share: float = DEFAULT_MAX_SHARE,
    what: str = "the fault hits",
) -> None:
    """Refuse hitting more than ``max_share`` of the nodes without --force; raises SafetyError.
    ``what`` starts the message ('draining would take')."""
    hit = len(set(targets))
    if cluster_size > 0 and hit / cluster_size > max_share and not force:
        raise SafetyError(
            f"refused: {what} {hit} of {plural(cluster_size, 'node')} (more than the plan's "
            f"max_share, {max_share:.0%})",
            hint="add --force if that is what you mean",
        )
