"""The scheduler protocol: render, submit, poll, cancel, collect.

Backends (slurm.py, local.py) implement JobScheduler; the runs only talk to this protocol.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field, field_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.job import JobState, JobStatus
from orchestrator.models.names import LongId, Name

__all__ = ["JobOutput", "JobScheduler", "JobSpec", "JobState", "JobStatus", "RankOutput"]


class JobSpec(StrictModel):
    """One job: N nodes x R ranks running one argv per rank (a step of the ladder, the recovery
    probe), or one batch command (the nightly entry's job).

    Every text field that reaches a job script is either an identifier (models/names.py; the job
    name, step id, node names, partition, environment variable names), a number, or a value that
    the script quotes (argv, environment values, paths). Paths never go on `#SBATCH` lines.
    """

    name: LongId = Field(description="the scheduler's job name: orch-<run id>-<step> (run_job_name)")
    step_id: Name
    nodes: list[str] = Field(description="inventory node names the job must run on; empty = any")
    nnodes: int = Field(ge=1)
    ranks_per_node: int = Field(ge=1)
    gpus_per_node: int = Field(default=0, ge=0, description="GPUs to request (gres); 0 on CPU stacks")
    argv: list[str] = Field(min_length=1, description="command each rank runs (launch=batch: the script)")
    env: dict[str, str] = Field(default_factory=dict)
    master_addr: str | None = Field(default=None, description="address rank 0 listens on for rendezvous")
    master_port: int | None = Field(default=None, ge=1024, le=65535)
    time_limit_s: int | None = Field(default=None, ge=1, description="None: the partition's limit")
    workdir: Path = Field(description="the job's working directory; its script and rank logs by default")
    partition: str | None = None
    # What the recovery probe and the nightly job need besides a ladder step:
    launch: Literal["srun", "batch"] = Field(
        default="srun", description="srun: every rank runs argv; batch: the batch script runs argv once"
    )
    rank_logs: bool = Field(default=True, description="srun writes rank-<t>.log in workdir (else: output)")
    task_env: dict[str, str] = Field(
        default_factory=dict,
        description="per-task variables set from Slurm's own, e.g. ORCH_NODE from SLURMD_NODENAME",
    )
    kill_on_bad_exit: bool = True
    exclusive: bool = True
    requeue: bool = Field(default=False, description="Slurm may requeue it (node failure, scontrol requeue)")
    cpus_per_task: int | None = Field(default=None, ge=1)
    begin: datetime | None = Field(default=None, description="sbatch --begin: not started before this")
    daily: bool = Field(default=False, description="when it starts, it submits itself again for tomorrow")
    output: Path | None = Field(default=None, description="Slurm's output file (%j allowed); default workdir")
    append_output: bool = False
    log: Path | None = Field(default=None, description="launch=batch: the command's output is appended here")
    script: Path | None = Field(
        default=None,
        description="where submit writes it, on this machine (None: workdir/job.sbatch, and submit "
        "makes workdir; else workdir is a folder on the nodes that the caller made)",
    )
    notes: list[str] = Field(default_factory=list, description="comment lines written into the script")
    extra_args: list[str] = Field(
        default_factory=list, description="more sbatch options, --option=value of plain characters"
    )

    @field_validator("argv")
    @classmethod
    def _no_nul(cls, v: list[str]) -> list[str]:
        # No program can receive a NUL in an argument: refuse it here, naming it, not at exec.
        for arg in v:
            if "\0" in arg:
                raise ValueError(f"argument {arg[:80]!r}: holds a NUL character")
        return v

    @field_validator("notes")
    @classmethod
    def _one_line(cls, v: list[str]) -> list[str]:
        for note in v:
            if not note.isprintable():
                raise ValueError(f"note {note[:80]!r}: one line of printable text only")
        return v

    @field_validator("extra_args")
    @classmethod
    def _plain_options(cls, v: list[str]) -> list[str]:
        return check_sbatch_options(v)


def check_sbatch_options(options: list[str]) -> list[str]:
    """options when each is --option=value of plain characters, the option one of sbatch's long
    options written in full (SBATCH_LONG_OPTIONS), and not one orch sets itself; raises ValueError
    naming the first that is not.

    sbatch (getopt_long) takes any unique prefix of a long option: `--job-nam=x` is --job-name,
    `--outp=` is --output. So a name that is not written in full is refused, whatever it would
    expand to, and the managed options are refused in every spelling that reaches them.
    """
    for a in options:
        m = _EXTRA_ARG.fullmatch(a)
        if not m:
            raise ValueError(f"sbatch option {a[:80]!r}: expected --option=value of plain characters")
        name = m.group(1)
        if name not in SBATCH_LONG_OPTIONS:
            expands = sorted(o for o in SBATCH_LONG_OPTIONS if o.startswith(name))
            why = (
                f"--{name} is an abbreviation (of --{', --'.join(expands)}); give the full option name"
                if expands
                else f"--{name} is not one of sbatch's options"
            )
            raise ValueError(f"sbatch option {a[:80]!r}: {why}")
        if name in MANAGED_OPTIONS:
            raise ValueError(f"sbatch option {a[:80]!r}: orch sets --{name} itself")
    return options


# Options orch sets on every job itself, or that would change whose job it is or what it runs;
# a user's extra option may not replace them.
MANAGED_OPTIONS = frozenset(
    {"export", "export-file", "output", "error", "input", "chdir", "workdir", "job-name", "begin",
     "dependency", "wrap", "get-user-env", "requeue", "no-requeue", "open-mode", "parsable", "uid",
     "gid", "batch", "container", "container-id", "propagate", "test-only", "wait"}
)  # fmt: skip
# The long options of sbatch(1) (Slurm 23.11 manual page, https://slurm.schedmd.com/sbatch.html),
# written in full: the one list abbreviations are matched against.
SBATCH_LONG_OPTIONS = frozenset(
    {"account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir", "cluster-constraint",
     "clusters", "comment", "constraint", "container", "container-id", "contiguous", "core-spec",
     "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot",
     "dependency", "distribution", "error", "exclude", "exclusive", "export", "export-file", "extra",
     "extra-node-info", "get-user-env", "gid", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node",
     "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "help", "hint", "hold", "ignore-pbs",
     "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type", "mail-user", "mcs-label",
     "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nice", "no-kill",
     "no-requeue", "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu",
     "ntasks-per-node", "ntasks-per-socket", "open-mode", "output", "overcommit", "oversubscribe",
     "parsable", "partition", "power", "prefer", "priority", "profile", "propagate", "qos", "quiet",
     "reboot", "requeue", "reservation", "resv-ports", "segment", "signal", "sockets-per-node",
     "spread-job", "switches", "test-only", "thread-spec", "threads-per-core", "time", "time-min",
     "tmp", "tres-bind", "tres-per-task", "uid", "usage", "use-min-nodes", "verbose", "version",
     "wait", "wait-all-nodes", "wckey", "workdir", "wrap"}
)  # fmt: skip
_EXTRA_ARG = re.compile(r"--([a-z][a-z-]*)=[A-Za-z0-9_.,:\[\]-]+")


def run_job_name(run_id: str, fallback: str, step_id: str) -> str:
    """The Slurm job name of a step of a run: orch-<run id>-<step>, so that `orch runs cleanup`
    can tell the run's jobs from every other job (runs/orphans.py). ``fallback`` (the plan's name)
    stands in for a spec built outside a run (a booking preview, a test)."""
    return f"orch-{run_id or fallback}-{step_id}"


def carries_run_id(job_name: str, run_id: str) -> bool:
    """Whether a Slurm job name is one orch gave a job of this run (run_job_name, or allocation
    mode's orch-<run id>-ladder)."""
    return bool(run_id) and job_name.startswith(f"orch-{run_id}-")


class QueuedJob(StrictModel):
    """A job Slurm still holds, as squeue reports it: id, owner's user name, state, name."""

    job_id: str
    user: str
    state: str
    name: str


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


def inventory_backend(cluster: Cluster) -> Literal["slurm", "local"]:
    """The backend an inventory implies: local for local hosts only, Slurm otherwise."""
    return "local" if all(n.is_local for n in cluster.nodes) else "slurm"


PendingWait = Literal["dependency", "queued", "unavailable"]
"""Why a job waits, in orch's words (see pending_wait)."""

# Slurm's pending reasons (squeue %r) for a job whose nodes Slurm will not give it (drained,
# down, a partition down or inactive, a constraint no node has): Slurm does not end such a job
# by itself. Any other reason (Resources, Priority, BeginTime ...) is a busy cluster.
_UNAVAILABLE_REASONS = ("ReqNodeNotAvail", "NodeDown", "PartitionDown", "PartitionInactive", "BadConstraints")
_DEPENDENCY_REASONS = ("Dependency",)  # Slurm's, and the local backend's "Dependency <job>"


def pending_wait(state: JobState) -> PendingWait | None:
    """Why a pending job waits: "dependency" (the job it was chained after has not ended),
    "unavailable" (its nodes cannot be given to it now: it will wait forever unless someone acts),
    "queued" (a busy cluster: resources, priority, a begin time); None when it is not pending."""
    if state.status != JobStatus.PENDING:
        return None
    reason = state.reason or ""
    if reason.startswith(_DEPENDENCY_REASONS):
        return "dependency"
    if reason.startswith(_UNAVAILABLE_REASONS):
        return "unavailable"
    return "queued"


@dataclass(frozen=True)
class BackendTraits:
    """What the run needs to know about a backend, so that it never branches on the name."""

    on_this_machine: bool
    """Ranks run as processes of this machine: one node, rendezvous on loopback, the interfaces
    of the inventory unused, and no queue (each step starts when orch submits it, after the
    previous one ended). Otherwise the ladder is submitted ahead, chained, to a queue."""

    @property
    def multi_node(self) -> bool:
        return not self.on_this_machine

    @property
    def queued(self) -> bool:
        return not self.on_this_machine


def random_port_base() -> int:
    """A random port from 20000 to 39999 for a run's jobs (a probe's port, or the first of a run's
    ports that count up from it): runs at once, or a previous run's lingering sockets, rarely meet."""
    return 20000 + secrets.randbelow(20000)


def backend_traits(backend: str) -> BackendTraits:
    """The traits of a backend named in a plan or an inventory (slurm, local)."""
    return BackendTraits(on_this_machine=backend == "local")
