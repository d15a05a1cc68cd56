"""What a run tells its listeners (the CLI's progress lines, the results store): one model per kind.

Every event also goes into the run's journal under the same name and with the same fields (see
runs/lifecycle.py); the journal may hold more (who started the run, fault records). A listener
receives a `RunEvent` and matches on its type or its `kind`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Protocol

from pydantic import Field, TypeAdapter

from orchestrator.models.base import StrictModel
from orchestrator.models.results import Verdict

RunKind = Literal["scale-test", "recovery-test", "isolate", "stragglers", "migrate", "rollback"]
"""What a run directory holds; `orch runs resume` dispatches on it."""


class RunStarted(StrictModel):
    kind: Literal["run_started"] = "run_started"
    run_id: str
    run_dir: Path
    plan: str
    backend: str
    steps: list[str] = Field(default_factory=list, description="the ladder's step ids; [] for recovery-test")


class StepSubmitted(StrictModel):
    kind: Literal["step_submitted"] = "step_submitted"
    step: str
    job_id: str | None
    after: str | None = None


class StepState(StrictModel):
    kind: Literal["step_state"] = "step_state"
    step: str
    job_id: str | None
    state: str = Field(description="the scheduler's own word for the job's state")
    reason: str | None = Field(default=None, description="why it waits, in the scheduler's words")


class StepDone(StrictModel):
    kind: Literal["step_done"] = "step_done"
    step: str
    job_id: str | None = None
    verdict: Verdict
    reasons: list[str] = Field(default_factory=list)


class FingerprintChecked(StrictModel):
    kind: Literal["fingerprint"] = "fingerprint"
    stack: str
    drift: list[str] = Field(default_factory=list, description="one line per field that differs")


class RunWarning(StrictModel):
    kind: Literal["warning"] = "warning"
    message: str


class RunProgress(StrictModel):
    """A line of progress of long work that is not a ladder step (a migration's phases, its
    provisioning and plan runs); the journal has its own line for it."""

    kind: Literal["progress"] = "progress"
    message: str


class RecoveryDone(StrictModel):
    kind: Literal["recovery_done"] = "recovery_done"
    fault: str = Field(description="the fault id (recovery/<fault>.json)")
    repeat: int
    verdict: str


class RunInterrupted(StrictModel):
    kind: Literal["interrupted"] = "interrupted"
    cancelled: list[str] = Field(default_factory=list, description="jobs of the run cancelled")


class RunError(StrictModel):
    kind: Literal["run_error"] = "run_error"
    error: str
    cancelled: list[str] = Field(default_factory=list, description="jobs of the run cancelled")


class RunFinished(StrictModel):
    kind: Literal["run_finished"] = "run_finished"
    status: str = Field(description="accepted, failed, infra, interrupted, or refused (before any step)")
    exit_code: int


RunEvent = Annotated[
    RunStarted
    | StepSubmitted
    | StepState
    | StepDone
    | FingerprintChecked
    | RunWarning
    | RunProgress
    | RecoveryDone
    | RunInterrupted
    | RunError
    | RunFinished,
    Field(discriminator="kind"),
]
RUN_EVENT: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
"""Validates a dict (e.g. a journal line's fields with its `event` as `kind`) into its event."""


class Listener(Protocol):
    """Receives a run's events. One that raises is logged and skipped; the others still get it."""

    def event(self, ev: RunEvent) -> None: ...
