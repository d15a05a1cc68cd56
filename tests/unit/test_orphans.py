"""`orch runs cleanup`: the Slurm jobs of a run whose orch died are found in its journal and cancelled."""

from __future__ import annotations

import os
import pwd
import subprocess
from contextlib import nullcontext
from pathlib import Path

import pytest

from orchestrator.runs.orphans import cleanup_orphans, orphan_job_ids
from orchestrator.runs.resume import resume
from orchestrator.scheduler.base import JobStatus, QueuedJob
from orchestrator.store.rundir import RunDir

ME = pwd.getpwuid(os.getuid()).pw_name


class FakeSlurm:
    """squeue as cleanup asks it: the queued jobs with their user and name (run id in the name)."""

    name = "slurm"

    def __init__(self, states: dict[str, JobStatus], *, run_id: str = "", user: str = ME,
                 names: dict[str, str] | None = None) -> None:  # fmt: skip
        self.states, self.run_id, self.user, self.names = states, run_id, user, names or {}
        self.cancelled: list[str] = []

    def my_queued_jobs(self) -> list[QueuedJob]:
        return [
            QueuedJob(
                job_id=j, user=self.user, state=s.value, name=self.names.get(j, f"orch-{self.run_id}-step")
            )
            for j, s in self.states.items()
            if not s.terminal
        ]

    def cancel(self, job_ids: list[str]) -> None:
        self.cancelled += job_ids


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def make_run(
    root: Path, name: str, pid: int, *, finished: bool = False, jobs: tuple[str, ...] = ("11", "12", "13")
) -> Path:
    rd = RunDir.create(root, name)
    rd.event("run_started", run_id=name, steps=["n1xg1", "n2xg1", "n3xg1"], pid=pid, host=os.uname().nodename)
    for k, job in enumerate(jobs):
        rd.event("step_submitted", step=f"n{k + 1}xg1", job_id=job, after=None)
    rd.event("step_done", step="n1xg1", job_id=jobs[0], verdict="pass", reasons=[])
    if finished:
        rd.event("run_finished", status="accepted", exit_code=0, wall_s=1.0)
    return rd.root


def test_dead_run_jobs_are_cancelled_once(tmp_path: Path) -> None:
    make_run(tmp_path, "smoke-dead", dead_pid())
    assert orphan_job_ids(tmp_path / "smoke-dead") == ["12", "13"]
    slurm = FakeSlurm({"12": JobStatus.RUNNING, "13": JobStatus.PENDING}, run_id="smoke-dead")
    (report,) = cleanup_orphans(tmp_path, slurm)
    assert report.cancelled == ["12", "13"] and slurm.cancelled == ["12", "13"]
    assert orphan_job_ids(tmp_path / "smoke-dead") == []
    assert cleanup_orphans(tmp_path, slurm) == []


def test_allocation_steps_are_cancelled_with_their_allocation(tmp_path: Path) -> None:
    make_run(tmp_path, "smoke-alloc", dead_pid(), jobs=("40.0", "40.1", "40.2"))
    assert orphan_job_ids(tmp_path / "smoke-alloc") == ["40.1", "40.2"]
    slurm = FakeSlurm({"40": JobStatus.RUNNING}, run_id="smoke-alloc")  # the allocation, not the ladder's ids
    (report,) = cleanup_orphans(tmp_path, slurm)
    assert report.cancelled == ["40.1", "40.2"] and slurm.cancelled == ["40"]


def test_a_tampered_job_id_never_reaches_slurm(tmp_path: Path) -> None:
    make_run(tmp_path, "smoke-bad", dead_pid(), jobs=("11", "--user=someone", "12;reboot", "13.1"))
    assert orphan_job_ids(tmp_path / "smoke-bad") == ["13.1"]


def test_ended_jobs_are_not_cancelled(tmp_path: Path) -> None:
    make_run(tmp_path, "smoke-dead", dead_pid())
    slurm = FakeSlurm({"12": JobStatus.COMPLETED, "13": JobStatus.RUNNING}, run_id="smoke-dead")
    (report,) = cleanup_orphans(tmp_path, slurm)
    assert report.cancelled == ["13"]


def test_live_and_finished_runs_are_left_alone(tmp_path: Path) -> None:
    make_run(tmp_path, "smoke-live", os.getpid())
    make_run(tmp_path, "smoke-done", dead_pid(), finished=True)
    slurm = FakeSlurm({"12": JobStatus.RUNNING, "13": JobStatus.RUNNING})
    assert cleanup_orphans(tmp_path, slurm) == []
    assert slurm.cancelled == []


def test_jobs_cancelled_on_ctrl_c_are_not_orphans(tmp_path: Path) -> None:
    run = make_run(tmp_path, "smoke-int", dead_pid())
    RunDir(run).event("interrupted", cancelled=["12", "13"])
    assert orphan_job_ids(run) == []


def test_resume_cancels_the_killed_runs_live_jobs_before_it_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine job of a killed serving step holds its node until its time limit: resume cancels
    the run's live orphans first (then the kind's own resume runs, here stopped at once)."""
    run = make_run(tmp_path, "smoke-dead", dead_pid())
    slurm = FakeSlurm({"12": JobStatus.RUNNING, "13": JobStatus.COMPLETED}, run_id="smoke-dead")
    monkeypatch.setattr("orchestrator.scheduler.slurm.SlurmScheduler", lambda slurm_conf=None: slurm)

    class Stop(Exception):
        pass

    def resume_run(run_dir: Path, **_kw: object) -> None:
        assert slurm.cancelled == ["12"]  # before the run goes on
        raise Stop

    monkeypatch.setattr("orchestrator.runs.resume.resume_run", resume_run)
    with pytest.raises(Stop):
        resume(run, open_shells=lambda c: nullcontext({}))
    assert orphan_job_ids(run) == [] and slurm.cancelled == ["12"]
