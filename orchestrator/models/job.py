"""What a scheduler says about a job, in orch's words (shared by every backend, the runs and
the store)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from orchestrator.models.base import StrictModel


class JobStatus(StrEnum):
    """orch's classification of a job's state, shared by every backend."""

    PENDING = "PENDING"  # waiting to start (queued, configuring, requeued, held)
    RUNNING = "RUNNING"  # running, completing, suspended: not done yet
    COMPLETED = "COMPLETED"  # terminal, success
    FAILED = "FAILED"  # terminal: the job itself failed (non-zero exit, OOM, deadline, timeout)
    CANCELLED = "CANCELLED"  # terminal: cancelled by a user or by orch
    INFRA = "INFRA"  # terminal: the infrastructure failed (NODE_FAIL, BOOT_FAIL, PREEMPTED)
    UNKNOWN = "UNKNOWN"  # the scheduler does not (or no longer) know the job

    @property
    def terminal(self) -> bool:
        return self in {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.INFRA}


class JobState(StrictModel):
    """What the scheduler says about one job right now."""

    job_id: str
    status: JobStatus
    raw_state: str = Field(description="the scheduler's own word, e.g. NODE_FAIL, CANCELLED by 0")
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    elapsed_s: float | None = None
    nodelist: str | None = None
    name: str | None = Field(default=None, description="the job's (or job step's) name, where known")
    steps: dict[str, str] = Field(
        default_factory=dict,
        description="sacct: the state of each step of the job (batch, extern, 0, 1 …) as Slurm words it",
    )
    decided_by: str | None = Field(
        default=None,
        description="sacct: the step whose state set `status` where the job's own record said "
        "COMPLETED but that step did not complete (docs/parse.md, 'Job steps')",
    )
