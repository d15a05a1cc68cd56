"""Slurm jobs left behind by a scale-test whose orch process died (SIGKILL, OOM, a lost machine).

A killed orch cannot cancel its jobs; the journal can still name them. A run whose `run_started`
(or `run_resumed`) process is dead on this host, with no `run_finished` after it, is interrupted;
its `step_submitted` jobs without a `step_done` are orphans. `orch runs cleanup` cancels those that
Slurm still holds and journals `orphans_cancelled` in the run, so a second cleanup does nothing.

A run folder is data, not configuration (docs/reliability.md, threat model): anyone who can write
into a shared runs root could plant one. So cleanup

- takes the Slurm configuration from orch's own environment or from the inventory on its command
  line, never from the run folder (its inventory.json's orch_slurm_conf once made sacct load a
  planted PluginDir library as root);
- refuses a run folder that someone else owns or that others may write into, naming the reason;
- cancels only jobs that Slurm itself lists as the current user's and whose name carries the
  run's id (job names are orch-<run id>-<step>), whatever ids the journal names.
"""

from __future__ import annotations

import os
import pwd
import re
from pathlib import Path
from typing import Protocol

from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel
from orchestrator.safefs import untrusted_folder
from orchestrator.scheduler.base import QueuedJob, carries_run_id
from orchestrator.store.load import load_run
from orchestrator.store.rundir import RunDir

# A Slurm job id, or allocation mode's ALLOC.K; anything else in a journal was not written by orch
# and never reaches sacct or scancel (a "--user=..." would be read as an option).
_JOB_ID = re.compile(r"[0-9]+(\.[0-9]+)?")


class OrphanSlurm(Protocol):
    """What cleanup asks of Slurm (scheduler/slurm.py SlurmScheduler has it)."""

    def my_queued_jobs(self) -> list[QueuedJob]:
        """The current user's jobs Slurm still holds, with the user and name Slurm reports."""
        ...

    def cancel(self, job_ids: list[str]) -> None:
        """scancel the jobs."""
        ...


class OrphanReport(StrictModel):
    """What cleanup found in one interrupted run and what it cancelled (or why it refused it)."""

    run_id: str
    jobs: list[str]
    cancelled: list[str]
    refused: str | None = None


def _orphans(run_dir: Path) -> tuple[str, list[str]]:
    """The run id and the jobs of an interrupted run that the journal shows submitted and never
    done; ("", []) when it is no interrupted run."""
    try:
        record = load_run(run_dir)
    except (ConfigError, OSError):  # not a run directory: not ours to clean
        return "", []
    if record.status != "interrupted":
        return "", []
    submitted: list[str] = []
    settled: set[str] = set()
    for ev in RunDir(run_dir).events():
        kind, job = ev.get("event"), ev.get("job_id")
        if kind == "step_submitted" and isinstance(job, str) and _JOB_ID.fullmatch(job):
            submitted.append(job)
        elif kind == "step_done" and isinstance(job, str):
            settled.add(job)
        elif kind in ("interrupted", "orphans_cancelled"):
            settled.update(str(j) for j in ev.get("cancelled") or [] if j)
    return record.run_id, [j for j in dict.fromkeys(submitted) if j not in settled]


def orphan_job_ids(run_dir: Path) -> list[str]:
    """Jobs of an interrupted run that the journal shows submitted and never done; [] otherwise."""
    return _orphans(run_dir)[1]


def current_user() -> str:
    """The user name Slurm reports for this process's jobs."""
    return pwd.getpwuid(os.getuid()).pw_name


def cleanup_orphans(runs_root: Path, sched: OrphanSlurm) -> list[OrphanReport]:
    """Cancel the still-live Slurm jobs of every interrupted run under runs_root (module doc).

    A run folder that fails the trust check is reported with the reason and left untouched.
    Raises SchedulerError when Slurm cannot be asked or refuses the cancel.
    """
    reports: list[OrphanReport] = []
    if not runs_root.is_dir():
        return reports
    queued: list[QueuedJob] | None = None
    me = current_user()
    for run_dir in sorted(p for p in runs_root.iterdir() if (p / "journal.jsonl").is_file()):
        if (why := untrusted_folder(run_dir)) is not None:
            reports.append(
                OrphanReport(run_id=run_dir.name, jobs=[], cancelled=[], refused=f"{run_dir} {why}")
            )
            continue
        if not _orphans(run_dir)[1]:
            continue
        if queued is None:
            queued = sched.my_queued_jobs()
        if (report := cancel_orphans_of(run_dir, sched, queued, me)) is not None:
            reports.append(report)
    return reports


def cancel_orphans_of(
    run_dir: Path, sched: OrphanSlurm, queued: list[QueuedJob] | None = None, me: str | None = None
) -> OrphanReport | None:
    """Cancel the still-live Slurm jobs of the interrupted run in run_dir (a trusted folder: the
    caller checked it), journal `orphans_cancelled`; None when it has none. `orch runs resume`
    calls it first: an engine job of a killed serving step holds its node until its time limit,
    and the step run again would wait behind it. Raises SchedulerError as cleanup_orphans."""
    run_id, jobs = _orphans(run_dir)
    if not jobs:
        return None
    queued = sched.my_queued_jobs() if queued is None else queued
    me = current_user() if me is None else me
    # A ladder step of allocation mode (ALLOC.K) lives and dies with its allocation ALLOC.
    owner = {j: j.partition(".")[0] for j in jobs}
    ours = {q.job_id for q in queued if q.user == me and carries_run_id(q.name, run_id)}
    live = [j for j in jobs if owner[j] in ours]
    if live:
        sched.cancel(sorted({owner[j] for j in live}))
    RunDir(run_dir).event("orphans_cancelled", cancelled=jobs, live=live)
    return OrphanReport(run_id=run_dir.name, jobs=jobs, cancelled=live)
