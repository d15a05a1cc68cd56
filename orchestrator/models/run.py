"""The result of a run and of each of its steps (what scale-test returns), and the record of a
run rebuilt from its directory (what the store keeps and the reports read)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.diagnostics import NodeDiag
from orchestrator.models.events import RunKind
from orchestrator.models.fingerprint import DriftReport, FingerprintSet
from orchestrator.models.isolation import IsolationRun
from orchestrator.models.job import JobState
from orchestrator.models.names import LongId
from orchestrator.models.plan import Plan, Step
from orchestrator.models.recovery import RecoveryRecord
from orchestrator.models.recovery_request import RecoveryTestRequest
from orchestrator.models.results import Collective, CollRow, CollSummary, Verdict
from orchestrator.models.serving_results import ServingStepResult
from orchestrator.models.stack import Stack
from orchestrator.models.telemetry import StepTelemetry


class StepResult(StrictModel):
    step: Step
    job_id: str | None = None
    job: JobState | None = None
    rows: list[CollRow] = Field(default_factory=list)
    summary: dict[Collective, CollSummary] = Field(default_factory=dict)
    verdict: Verdict = "skipped"
    reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    blamed_nodes: list[str] = Field(
        default_factory=list, description="when set, the verdict is these nodes' fault, not the others'"
    )
    concurrent: bool = False
    telemetry: StepTelemetry | None = Field(
        default=None, description="GPU telemetry during the step; samples in steps/<id>/telemetry.json"
    )
    started_mono: float | None = None
    ended_mono: float | None = None
    diagnostics: list[NodeDiag] = Field(
        default_factory=list, description="a diagnostic step's result per node or pair (docs/diagnostics.md)"
    )


class RunResult(StrictModel):
    run_id: LongId
    run_dir: Path
    plan: str
    backend: Literal["slurm", "local"]
    status: Literal["accepted", "failed", "infra", "interrupted"]
    exit_code: int
    steps: list[StepResult]
    serving: list[ServingStepResult] = Field(
        default_factory=list, description="the plan's serving steps (docs/serving.md), in plan order"
    )
    nodes: dict[str, Verdict]
    wall_s: float


RunStatus = Literal["accepted", "failed", "infra", "interrupted", "running"]


class RunRecord(StrictModel):
    """Everything a report needs about one run, rebuilt from its directory."""

    run_id: LongId
    run_dir: Path
    kind: RunKind = "scale-test"
    plan_name: str
    backend: str
    status: RunStatus
    exit_code: int | None = None
    error: str | None = Field(default=None, description="why the run was refused or stopped, as journaled")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wall_s: float | None = None
    user: str | None = None
    host: str | None = None
    pid: int | None = None
    command: str | None = None
    plan: Plan | None = None
    cluster: Cluster | None = None
    step_ids: list[str] = Field(default_factory=list, description="the ladder, in order")
    steps: list[StepResult] = Field(default_factory=list, description="finished steps, ladder order")
    serving_ids: list[str] = Field(default_factory=list, description="the serving steps planned, in order")
    serving: list[ServingStepResult] = Field(
        default_factory=list, description="finished serving steps, plan order"
    )
    nodes: dict[str, Verdict] = Field(default_factory=dict)
    recovery: list[RecoveryRecord] = Field(default_factory=list)
    stack: Stack | None = Field(default=None, description="stack.json, when the run kept its stack")
    fingerprint: FingerprintSet | None = None
    drift: DriftReport | None = None
    request: RecoveryTestRequest | None = Field(
        default=None, description="a recovery-test run's resolved request (recovery-test.json)"
    )
    warnings: list[str] = Field(default_factory=list, description="files that could not be read")
    unreadable: dict[str, str] = Field(
        default_factory=dict, description="step id -> its result file that exists but cannot be read"
    )
    resumes: int = 0
    isolation: IsolationRun | None = Field(
        default=None, description="isolation.json: an isolate run's, or the copy a scale-test --isolate keeps"
    )

    @property
    def pending(self) -> list[str]:
        """Ladder steps with no finished result."""
        done = {s.step.id for s in self.steps if s.verdict != "skipped"}
        return [s for s in self.step_ids if s not in done]

    @property
    def serving_pending(self) -> list[str]:
        """Serving steps with no finished result."""
        done = {s.step.id for s in self.serving if s.verdict != "skipped"}
        return [s for s in self.serving_ids if s not in done]

    def step(self, step_id: str) -> StepResult | None:
        return next((s for s in self.steps if s.step.id == step_id), None)
