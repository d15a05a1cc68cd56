"""The scheduler protocol: render, submit, poll, cancel, collect.

Backends (slurm.py, local.py) implement JobScheduler; the pipeline only talks to this protocol.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Protocol

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


class JobSpec(StrictModel):
    """One step of the ladder as a job: N nodes x R ranks running one argv per rank."""

    name: str
    step_id: str
    nodes: list[str] = Field(description="inventory node names the job must run on; empty = any")
    nnodes: int = Field(ge=1)
    ranks_per_node: int = Field(ge=1)
    gpus_per_node: int = Field(default=0, ge=0, description="GPUs to request (gres); 0 on CPU stacks")
    argv: list[str] = Field(min_length=1, description="command each rank runs")
    env: dict[str, str] = Field(default_factory=dict)
    master_addr: str = Field(description="address rank 0 listens on for rendezvous")
    master_port: int = Field(ge=1024, le=65535)
    time_limit_s: int = Field(ge=1)
    workdir: Path = Field(description="where the job script and per-rank logs are written")
    partition: str | None = None


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


class RankOutput(StrictModel):
    rank: int
    node: str | None = None
    log: Path


class JobOutput(StrictModel):
    job_id: str
    ranks: list[RankOutput]


class JobScheduler(Protocol):
    """What every backend offers. Every call is bounded in time."""

    name: str

    def render(self, spec: JobSpec) -> str:
        """The job script (or launch description) for spec, without side effects."""
        ...

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        """Start or queue the job; return its id. `after`: a job id it must wait for."""
        ...

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        """Current state of each job."""
        ...

    def cancel(self, job_ids: list[str]) -> None:
        """Cancel the jobs; idempotent."""
        ...

    def collect(self, job_id: str, spec: JobSpec) -> JobOutput:
        """Where each rank's output lies once the job is done."""
        ...

    def unavailable_nodes(self, nodes: list[str]) -> dict[str, str]:
        """The nodes the scheduler will not run jobs on now (drained, down), with its word for why."""
        ...
