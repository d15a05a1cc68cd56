"""restart-container: restart the podman/docker container that holds a rank."""

from __future__ import annotations

from orchestrator.errors import FaultError
from orchestrator.faults.base import ALL_TRANSPORTS, Action, BuildContext, FaultInfo, sh
from orchestrator.faults.resolve import target_processes
from orchestrator.models.cluster import ContainerRuntime
from orchestrator.models.container import PODMAN_FLAGS
from orchestrator.models.fault import FaultSpec


def restart_container(spec: FaultSpec, runtime: ContainerRuntime, container: str) -> Action:
    """``RUNTIME restart -t T ID``; the instant is the call (the container dies at once)."""
    p = spec.params
    storage: list[str] = []
    if runtime == "podman":
        storage += PODMAN_FLAGS
        storage += ["--root", p.podman_root] if p.podman_root else []
        storage += ["--runroot", p.podman_runroot] if p.podman_runroot else []
    argv = [runtime, *storage, "restart", "-t", str(p.restart_timeout_s), container]
    # podman 4.3 can fail a restart whose container already exited on the stop signal
    # ("container state improper: stopped"): then the restart is finished with a start.
    start = [runtime, *storage, "start", container]
    return Action(inject=f"{sh(*argv)} || {sh(*start)}", timer=False, instant="call")


def _build(ctx: BuildContext) -> Action:
    """The named container, or the one that holds the target rank."""
    t, node = ctx.spec.target, ctx.node
    if t.container is None:
        ids = sorted({c for _, c in target_processes(ctx) if c})
        if not ids:
            raise FaultError(f"{node.name}: rank {t.rank} does not run in a container")
        ctx.resolved[:] = ids
        name = ids[0]
    else:
        ctx.resolved.append(t.container)
        name = t.container
    if node.container_runtime == "none":
        raise FaultError(
            f"{node.name}: container_runtime is none", hint="set container_runtime in the inventory"
        )
    return restart_container(ctx.spec, node.container_runtime, name)


KINDS = (
    FaultInfo(
        "restart-container",
        ALL_TRANSPORTS,
        "none (restart is the fault)",
        False,
        "podman/docker restart of the container that holds the rank",
        build=_build,
        order=30,
        finds_processes=True,
        serving=False,  # a serving step's engines run as processes, not in containers
    ),
)
