"""What `orch recovery-test` is asked to do: the request model (models/recovery_request.py, where
the run record reads it back) and its launcher made concrete."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.models.cluster import Cluster
from orchestrator.models.container import stack_container
from orchestrator.models.fault import TARGET_FORMS
from orchestrator.models.recovery_request import RecoveryTestRequest
from orchestrator.scheduler.base import backend_traits, inventory_backend
from orchestrator.stacks import load_stack
from orchestrator.stacks import node_python as node_python  # re-exported: the probe's Python

__all__ = ["RecoveryTestRequest", "node_python", "resolve_container", "resolve_launcher"]


def resolve_container(
    req: RecoveryTestRequest, cluster: Cluster, stacks_dir: Path | None = None
) -> RecoveryTestRequest:
    """The stack's image filled in when the probe runs in containers: asked for (``in_container``),
    or by default for restart-container. Raises ConfigError naming the inventory when it names no
    stack, the stack when it has no image, or the node that has no container runtime."""
    want = req.in_container if req.in_container is not None else TARGET_FORMS[req.kind] == "container"
    if not want or req.container is not None:
        return req
    name = cluster.vars.orch_stack
    if name is None:
        raise ConfigError(
            f"{cluster.source}: the inventory names no stack, so the probe has no image to run in",
            hint="set orch_stack=NAME in [all:vars] (the stack `orch provision` installed)",
        )
    stack = load_stack(name) if stacks_dir is None else load_stack(name, stacks_dir)
    return req.model_copy(update={"container": stack_container(stack, cluster)})


def resolve_launcher(req: RecoveryTestRequest, cluster: Cluster) -> RecoveryTestRequest:
    """``auto`` made concrete, as scale-test chooses its backend (scheduler.base.inventory_backend):
    Slurm for an inventory with remote hosts or an ``orch_slurm_conf``; torchrun over SSH when every
    host is local and no Slurm is named. A probe in containers is started over SSH (a restarted
    container would end its Slurm task)."""
    if req.launcher != "auto":
        return req
    if req.container is not None:
        return req.model_copy(update={"launcher": "ssh"})
    slurm = cluster.vars.orch_slurm_conf is not None or backend_traits(inventory_backend(cluster)).queued
    return req.model_copy(update={"launcher": "slurm" if slurm else "ssh"})
