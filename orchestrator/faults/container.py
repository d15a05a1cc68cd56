"""restart-container: restart the podman/docker container that holds a rank."""

from __future__ import annotations

from orchestrator.faults.base import Action, sh
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
