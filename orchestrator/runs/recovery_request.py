"""What `orch recovery-test` is asked to do: the request model (models/recovery_request.py, where
the run record reads it back) and its launcher made concrete."""

from __future__ import annotations

from orchestrator.models.cluster import Cluster
from orchestrator.models.recovery_request import REPO as REPO  # re-exported: the probe jobs
from orchestrator.models.recovery_request import ContainerMode as ContainerMode  # re-exported
from orchestrator.models.recovery_request import RecoveryTestRequest
from orchestrator.scheduler.base import backend_traits, inventory_backend

__all__ = ["REPO", "ContainerMode", "RecoveryTestRequest", "resolve_launcher"]


def resolve_launcher(req: RecoveryTestRequest, cluster: Cluster) -> RecoveryTestRequest:
    """``auto`` made concrete, as scale-test chooses its backend (scheduler.base.inventory_backend):
    Slurm for an inventory with remote hosts or an ``orch_slurm_conf``; torchrun over SSH when every
    host is local and no Slurm is named."""
    if req.launcher != "auto":
        return req
    slurm = cluster.vars.orch_slurm_conf is not None or backend_traits(inventory_backend(cluster)).queued
    return req.model_copy(update={"launcher": "slurm" if slurm else "ssh"})
