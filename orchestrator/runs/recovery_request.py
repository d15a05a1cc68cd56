"""What `orch recovery-test` is asked to do: the request model, recorded in the run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.fault import (
    FaultKind,
    FaultParams,
    Transport,
)
from orchestrator.scheduler.base import inventory_backend
from orchestrator.stages.stack import node_python as node_python  # re-exported: the probe's Python
from orchestrator.workloads.probe import ProbeSettings


class ContainerMode(StrictModel):
    """Run each node's probe agent in a podman container (for restart-container)."""

    rootfs: Path = Field(description="a root filesystem folder (symlinks into the bind-mounted /usr)")
    storage: Path = Field(description="podman --root / --runroot parent, cleaned by the caller")
    binds: list[str] = Field(default_factory=list, description="SRC:DST[:ro] bind mounts")


class RecoveryTestRequest(StrictModel):
    kind: FaultKind
    target: str
    duration_s: float = 5.0
    margin_s: float = 2.0
    repeat: int = Field(default=1, ge=1, le=100)
    params: FaultParams = Field(default_factory=FaultParams)
    force: bool = False
    probe: ProbeSettings = Field(default_factory=ProbeSettings)
    transport: Transport = "socket"
    python: str | None = Field(
        default=None,
        description="the Python that runs the probe on the nodes; None: the stack's (node_python)",
    )
    warmup_steps: int = 30
    settle_steps: int = Field(
        default=30, ge=2, description="before each injection: a run of this many steps in the pre-fault band"
    )
    settle_timeout_s: float = Field(default=30.0, gt=0, description="the longest wait for that run")
    window_s: float = 60.0
    gap_s: float = 1.0
    container: ContainerMode | None = None
    launcher: Literal["auto", "ssh", "slurm"] = Field(
        default="ssh",
        description="ssh: torchrun agents over the kept-open shells; slurm: sbatch --requeue;"
        " auto: slurm when the inventory has Slurm (resolve_launcher)",
    )


def resolve_launcher(req: RecoveryTestRequest, cluster: Cluster) -> RecoveryTestRequest:
    """``auto`` made concrete, as scale-test chooses its backend (scheduler.base.inventory_backend):
    Slurm for an inventory with remote hosts or an ``orch_slurm_conf``; torchrun over SSH when every
    host is local and no Slurm is named."""
    if req.launcher != "auto":
        return req
    slurm = cluster.vars.orch_slurm_conf is not None or inventory_backend(cluster) == "slurm"
    return req.model_copy(update={"launcher": "slurm" if slurm else "ssh"})
