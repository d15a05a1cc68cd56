"""What `orch recovery-test` is asked to do: the request model, recorded in the run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.fault import (
    FaultKind,
    FaultParams,
    Transport,
)
from orchestrator.scheduler.base import inventory_backend
from orchestrator.stacks import load_stack
from orchestrator.workloads.container import StackContainer, stack_container
from orchestrator.workloads.probe import ProbeSettings

REPO = Path(__file__).resolve().parents[2]


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
    python: str = Field(default_factory=lambda: str(REPO / ".venv" / "bin" / "python"))
    warmup_steps: int = 30
    settle_steps: int = Field(
        default=30, ge=2, description="before each injection: a run of this many steps in the pre-fault band"
    )
    settle_timeout_s: float = Field(default=30.0, gt=0, description="the longest wait for that run")
    window_s: float = 60.0
    gap_s: float = 1.0
    in_container: bool | None = Field(
        default=None,
        description="run the probe in the stack's image with each node's runtime; None: when the fault"
        " is restart-container (resolve_container)",
    )
    container: StackContainer | None = Field(default=None, description="the image, resolved from the stack")
    launcher: Literal["auto", "ssh", "slurm"] = Field(
        default="ssh",
        description="ssh: torchrun agents over the kept-open shells; slurm: sbatch --requeue;"
        " auto: slurm when the inventory has Slurm (resolve_launcher)",
    )


def resolve_container(
    req: RecoveryTestRequest, cluster: Cluster, stacks_dir: Path | None = None
) -> RecoveryTestRequest:
    """The stack's image filled in when the probe runs in containers: asked for (``in_container``),
    or by default for restart-container. Raises ConfigError naming the inventory when it names no
    stack, the stack when it has no image, or the node that has no container runtime."""
    want = req.in_container if req.in_container is not None else req.kind == "restart-container"
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
    slurm = cluster.vars.orch_slurm_conf is not None or inventory_backend(cluster) == "slurm"
    return req.model_copy(update={"launcher": "slurm" if slurm else "ssh"})
