"""The stack stage of scale-test: fingerprint the nodes, refuse steps on drifted nodes; the image
the steps' workloads run in. Which stack a run uses and its Python are stacks.py's.

Every run whose inventory (orch_stack), plan (stack) or flag (--stack) names a stack records the
fingerprint of its nodes (fingerprint.json, drift.json in the run directory). A step that includes
a node that differs from the stack is refused before anything is submitted, unless --allow-drift;
then the drift is carried into the step's warnings and the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from orchestrator.errors import ConfigError, InfraError
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.container import ContainerChoice, StackContainer, stack_container
from orchestrator.models.plan import Step
from orchestrator.models.serving import ServingStep
from orchestrator.remote.base import NodeShell
from orchestrator.stacks import stack_python
from orchestrator.store.rundir import RunDir, atomic_write


class StackOutcome(StrictModel):
    """What the run takes from the stack: the workload's Python and environment, and the drift."""

    stack: str | None = None
    python: str | None = Field(default=None, description="the stack's Python on the nodes, if it has one")
    env: dict[str, str] = Field(default_factory=dict)
    drift: dict[str, list[str]] = Field(default_factory=dict, description="node -> drift lines")


def refused_steps(steps: Sequence[Step | ServingStep], drifted: set[str]) -> list[str]:
    """'n2xg1 (node2)' for each step that includes a drifted node."""
    out = []
    for s in steps:
        bad = [n for n in s.nodes if n in drifted]
        if bad:
            out.append(f"{s.id} ({', '.join(bad)})")
    return out


def run_stack_stage(
    cluster: Cluster,
    name: str,
    steps: Sequence[Step | ServingStep],
    rundir: RunDir,
    *,
    allow_drift: bool,
    shells: Mapping[str, NodeShell] | None = None,
) -> StackOutcome:
    """Fingerprint the nodes the steps use and check them against stack `name`.

    The probe runs over kept-open SSH shells (orchestrator/provision/quickprint.py). Raises
    ConfigError (exit 2) naming the refused steps and the drift when a step includes a drifted node
    and allow_drift is false; InfraError (exit 3) when a node cannot be fingerprinted.
    """
    from orchestrator.provision.fingerprint import FingerprintSet, check_drift
    from orchestrator.provision.quickprint import quick_fingerprint
    from orchestrator.stacks import load_stack

    used = sorted({n for s in steps for n in s.nodes})
    found, failed = quick_fingerprint(cluster, load_stack(name), used, shells=shells)
    fps = FingerprintSet(stack=name, nodes=found)
    atomic_write(rundir.root / "fingerprint.json", fps.model_dump_json(indent=2) + "\n")
    if failed:
        rundir.event("fingerprint_failed", nodes=failed)
        raise InfraError(
            "cannot fingerprint " + "; ".join(f"{n}: {why}" for n, why in sorted(failed.items())),
            hint="check that the nodes are reachable over SSH (orch inventory show, orch lab status)",
        )
    drift = check_drift(cluster, name, fps.nodes)
    drift.missing = [m for m in drift.missing if m in used]
    atomic_write(rundir.root / "drift.json", drift.model_dump_json(indent=2) + "\n")
    lines = {line.split(":", 1)[0]: line for line in drift.lines()}
    by_node = {node: [lines[node]] for node in drift.drifted if node in lines}
    rundir.event("fingerprint", stack=name, drift=drift.lines())
    refused = refused_steps(steps, set(drift.drifted))
    if refused and not allow_drift:
        rundir.event("refused", steps=refused, reason="drift")
        raise ConfigError(
            f"steps {', '.join(refused)} include nodes that differ from stack {name}: "
            + "; ".join(drift.lines()),
            hint="provision them (orch provision --stack " + name + ") or pass --allow-drift",
        )
    python, env = stack_python(name)
    return StackOutcome(stack=name, python=python, env=env, drift=by_node)


def workload_container(
    choice: ContainerChoice, name: str | None, cluster: Cluster, steps: list[Step]
) -> StackContainer | None:
    """The image the steps' workloads run in, or None to run them from the stack's tree.

    ``off``: none. ``on``: the stack's image (a registry image, or the one `orch provision` builds
    on each node). ``auto``: the stack's registry image when it names one; a stack whose image is
    only built from its tree (the CPU stack: for restart-container) runs its workloads from /opt.
    Raises ConfigError naming the stack or the node when ``on`` cannot be met (no stack, no image,
    a node of the steps without a container runtime).
    """
    if choice == "off":
        return None
    from orchestrator.stacks import load_stack

    stack = load_stack(name) if name is not None else None
    if choice == "auto" and (stack is None or stack.image is None):
        return None
    if stack is None:
        raise ConfigError(
            f"{cluster.source}: --container on needs a stack (its image), and none is named",
            hint="set orch_stack in the inventory, or --stack NAME",
        )
    used = {n for s in steps for n in s.nodes}
    nodes = cluster.model_copy(update={"nodes": [n for n in cluster.nodes if n.name in used]})
    return stack_container(stack, nodes)
