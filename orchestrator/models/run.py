"""The result of a run and of each of its steps: what the pipeline returns, the store keeps and
the reports read."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.job import JobState
from orchestrator.models.names import LongId
from orchestrator.models.plan import Step
from orchestrator.models.results import Collective, CollRow, CollSummary, Verdict


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
    started_mono: float | None = None
    ended_mono: float | None = None


class RunResult(StrictModel):
    run_id: LongId
    run_dir: Path
    plan: str
    backend: Literal["slurm", "local"]
    status: Literal["accepted", "failed", "infra", "interrupted"]
    exit_code: int
    steps: list[StepResult]
    nodes: dict[str, Verdict]
    wall_s: float
