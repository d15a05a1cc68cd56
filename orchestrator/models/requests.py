"""What each command asks of a run, as the CLI parsed it: the request models of scale-test,
isolate, stragglers, migrate (and rollback) and provision. recovery-test's request is
models/recovery_request.py (its run folder records it with the probe's settings).

The services take these (runs/scale_test.py, runs/isolate.py, runs/stragglers.py, runs/migrate.py,
provision/service.py); runs/ records some of them in the run folder (request.json).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.container import ContainerChoice
from orchestrator.models.names import Name
from orchestrator.models.plan import Plan, PlanOverrides
from orchestrator.models.results import PlanCollective

MAX_TIMEOUT_S = 60
"""The longest time limit of one isolation test or straggler pair (s): a test is short by design."""
MIN_PARTNERS = 3
"""The straggler rule judges a node with at least this many partners (metrics/stragglers.py)."""


class ScaleTestRequest(StrictModel):
    """Everything `orch scale-test` needs, as the CLI parsed it."""

    inventory: Path
    plan: str | None = Field(default=None, description="built-in plan name or YAML file; None = smoke")
    overrides: PlanOverrides = Field(default_factory=PlanOverrides)
    out_dir: Path = Path("runs")
    python: str | None = Field(
        default=None,
        description="the Python that runs collbench on the nodes (default: the stack's, or this one)",
    )
    group: str | None = Field(default=None, description="inventory group or hosts to run on")
    allow_drift: bool = Field(default=False, description="run steps on nodes that differ from the stack")
    force_faults: bool = Field(
        default=False, description="let plan faults hit more than the safe share of nodes"
    )
    container: ContainerChoice = Field(
        default="auto", description="run collbench in the stack's image (runs/stack_stage.workload_container)"
    )


class IsolateRequest(StrictModel):
    """Everything `orch isolate` needs, as the CLI parsed it."""

    inventory: Path
    nodes: list[str] | None = Field(default=None, description="the suspects; None = every node")
    known_good: list[str] = Field(default_factory=list, description="partners known to pass")
    collective: PlanCollective = "all_reduce"
    size: int = Field(default=64 * 2**20, ge=1)
    timeout_s: int = Field(default=MAX_TIMEOUT_S, ge=5, le=MAX_TIMEOUT_S)
    iters: int = Field(default=5, ge=1)
    warmup_iters: int = Field(default=1, ge=0)
    tolerance: float = Field(default=0.2, ge=0, lt=1, description="singles: within this of the median")
    min_efficiency: float = Field(default=0.5, gt=0, le=1, description="groups: of the median single")
    min_gbs: float | None = Field(default=None, gt=0, description="absolute busbw floor, GB/s")
    concurrent: bool = Field(default=False, description="a round's disjoint tests run together")
    max_share: float = Field(default=Plan.model_fields["max_share"].default, gt=0, le=1)
    drain_bad: bool = False
    force: bool = Field(default=False, description="drain more than max_share of the nodes")
    out_dir: Path = Path("runs")
    python: str | None = None
    gpu_models: dict[str, str] = Field(
        default_factory=dict,
        description="node -> GPU model from a fingerprint, for nodes whose inventory sets no gpu_model",
    )


class StragglersRequest(StrictModel):
    """Everything `orch stragglers` needs, as the CLI parsed it."""

    inventory: Path
    nodes: list[str] | None = Field(default=None, description="None = every node")
    collective: PlanCollective = Field(
        default="sendrecv", description="the CLI offers sendrecv and alltoall; any collective reads"
    )
    size: int = Field(default=2**20, ge=1)
    iters: int = Field(default=20, ge=1)
    warmup_iters: int = Field(default=3, ge=0)
    timeout_s: int = Field(default=MAX_TIMEOUT_S, ge=5, le=MAX_TIMEOUT_S)
    sample: int | None = Field(
        default=None, ge=MIN_PARTNERS, description="pairs per node at least (None: every pair)"
    )
    seed: int = 0
    concurrent: bool = Field(default=False, description="a round's disjoint pairs run together")
    out_dir: Path = Path("runs")
    python: str | None = None


class MigrateRequest(StrictModel):
    """Everything `orch migrate run` (or `orch rollback`) needs, as the CLI parsed it."""

    inventory: Path
    from_stack: str = Field(description="A: the stack the nodes run now (rollback: the one to go back to)")
    to_stack: str | None = Field(default=None, description="B; None for a rollback")
    from_variant: Name | None = Field(default=None, description="A's engine variant (--from STACK:VARIANT)")
    to_variant: Name | None = Field(default=None, description="B's engine variant (--to STACK:VARIANT)")
    plan: str | None = Field(default=None, description="built-in plan name or file; None for a rollback")
    canary: int = Field(default=1, ge=1)
    rounds: int = Field(default=2, ge=1, description="interleaved rounds of A, B and A'")
    no_rollback: bool = False
    reference_run: Path | None = Field(default=None, description="rollback: the migrate run whose reference")
    out_dir: Path = Path("runs")


class ProvisionRequest(StrictModel):
    """Everything `orch provision` needs, as the CLI parsed it (migrate's provisionings too)."""

    inventory: Path
    stack: str
    check: bool = False
    limit: str | None = None
    out_dir: Path = Path("runs")
    vault_password_file: Path | None = None
    become: bool = False
    become_password: str | None = Field(default=None, repr=False)
    wheelhouse: Path | None = Field(default=None, description="default: ~/.cache/orch/wheelhouse/<stack>")
    orch_wheel: Path | None = Field(
        default=None, description="orch's wheel for the nodes (default: see provision/orchwheel.py)"
    )
    clean: bool = Field(default=False, description="remove the stack's venv first (roles/workload_env)")
