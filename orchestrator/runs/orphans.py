"""Slurm jobs left behind by a scale-test whose orch process died (SIGKILL, OOM, a lost machine).

A killed orch cannot cancel its jobs; the journal can still name them. A run whose `run_started`
(or `run_resumed`) process is dead on this host, with no `run_finished` after it, is interrupted;
its `step_submitted` jobs without a `step_done` are orphans. `orch runs cleanup` cancels those that
Slurm still holds and journals `orphans_cancelled` in the run, so a second cleanup does nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.safefs import NotInside, read_inside
from orchestrator.scheduler.base import JobScheduler, JobStatus
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.store.load import load_run
from orchestrator.store.rundir import RunDir

SchedulerFor = Callable[[Path | None], JobScheduler]
# A Slurm job id, or allocation mode's ALLOC.K; anything else in a journal was not written by orch
# and never reaches sacct or scancel (a "--user=..." would be read as an option).
_JOB_ID = re.compile(r"[0-9]+(\.[0-9]+)?")


class OrphanReport(StrictModel):
    """What cleanup found in one interrupted run and what it cancelled."""

    run_id: str
    jobs: list[str]
    cancelled: list[str]


def orphan_job_ids(run_dir: Path) -> list[str]:
    """Jobs of an interrupted run that the journal shows submitted and never done; [] otherwise."""
    try:
        record = load_run(run_dir)
    except (ConfigError, OSError):  # not a run directory: not ours to clean
        return []
    if record.status != "interrupted":
        return []
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
    return [j for j in dict.fromkeys(submitted) if j not in settled]


def _slurm_conf(run_dir: Path) -> Path | None:
    try:
        cluster = Cluster.model_validate_json(read_inside(run_dir, run_dir / "inventory.json"))
    except (OSError, NotInside, ValidationError):
        return None
    return cluster.vars.orch_slurm_conf


def _slurm(conf: Path | None) -> JobScheduler:
    return SlurmScheduler(slurm_conf=conf)


def cleanup_orphans(runs_root: Path, scheduler_for: SchedulerFor = _slurm) -> list[OrphanReport]:
    """Cancel the still-live Slurm jobs of every interrupted run under runs_root.

    Raises SchedulerError when Slurm cannot be asked or refuses the cancel.
    """
    reports: list[OrphanReport] = []
    if not runs_root.is_dir():
        return reports
    for run_dir in sorted(p for p in runs_root.iterdir() if (p / "journal.jsonl").is_file()):
        jobs = orphan_job_ids(run_dir)
        if not jobs:
            continue
        sched = scheduler_for(_slurm_conf(run_dir))
        # A ladder step of allocation mode (ALLOC.K) lives and dies with its allocation ALLOC.
        owner = {j: j.partition(".")[0] for j in jobs}
        states = sched.poll(sorted(set(owner.values())))
        live = [j for j in jobs if (s := states.get(owner[j])) is not None and not s.status.terminal
                and s.status is not JobStatus.UNKNOWN]  # fmt: skip
        if live:
            sched.cancel(sorted({owner[j] for j in live}))
        RunDir(run_dir).event("orphans_cancelled", cancelled=jobs, live=live)
        reports.append(OrphanReport(run_id=run_dir.name, jobs=jobs, cancelled=live))
    return reports
