"""What `orch recovery-test` is asked to do, as recorded in its run directory (recovery-test.json):
the request, the probe's settings, the stack's image it runs in. runs/recovery_request.py resolves it; the
run record (models/run.py) reads it back."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.envpolicy import record_env
from orchestrator.models.base import StrictModel
from orchestrator.models.container import StackContainer
from orchestrator.models.fault import FaultKind, FaultParams, Transport

Launcher = Literal["auto", "ssh", "slurm"]
"""How the recovery probe is started (RecoveryTestRequest.launcher; recovery-test --launcher)."""


class ProbeSettings(StrictModel):
    """How the probe runs; recorded in every start line and in the recovery summary."""

    size_bytes: int = Field(default=64 * 1024, ge=4)
    backend: str = "gloo"
    pg_timeout_s: float = Field(default=30.0, gt=0)
    socket_ifname: str | None = Field(default="fab0", description="GLOO/NCCL_SOCKET_IFNAME")
    max_restarts: int = Field(default=10, ge=0)
    monitor_interval_s: float = Field(default=0.1, gt=0)
    nproc_per_node: int = Field(default=2, ge=1)
    master_port: int = Field(default=29611, ge=1024, le=65535)
    step_sleep_s: float = Field(default=0.0, ge=0)
    extra_env: dict[str, str] = Field(default_factory=dict, description="NCCL_*/GLOO_* from the plan")

    def env(self) -> dict[str, str]:
        """Environment of the workers (transport settings recorded with the run)."""
        env = {"OMP_NUM_THREADS": "1", **self.extra_env}
        if self.socket_ifname:
            env.setdefault("GLOO_SOCKET_IFNAME", self.socket_ifname)
            env.setdefault("NCCL_SOCKET_IFNAME", self.socket_ifname)
        return env

    def record(self) -> dict[str, str]:
        """Flat strings for records and reports (values of allow-listed variables only)."""
        flat = {k: str(v) for k, v in self.model_dump(exclude={"extra_env"}).items()}
        flat.update({f"env.{k}": v for k, v in record_env(self.env()).items()})
        return flat


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
    in_container: bool | None = Field(
        default=None,
        description="run the probe in the stack's image with each node's runtime; None: when the fault"
        " is restart-container (resolve_container)",
    )
    container: StackContainer | None = Field(default=None, description="the image, resolved from the stack")
    launcher: Launcher = Field(
        default="ssh",
        description="ssh: torchrun agents over the kept-open shells; slurm: sbatch --requeue;"
        " auto: slurm when the inventory has Slurm (resolve_launcher)",
    )
