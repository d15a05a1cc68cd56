"""Allocation mode with sruns started by orch (scheduler/salloc.py): the salloc, each step's srun
and its environment, the order of the sruns, the end of a step seen on its srun's exit, and the
allocation released or cancelled however the run ends."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fakes import Answer, ScriptedRunner, wait_for
from test_alloc_render import Recorder, spec, srun_lines

from orchestrator.errors import SchedulerError
from orchestrator.scheduler.allocation import AllocationScheduler, srun_argv
from orchestrator.scheduler.base import JobStatus
from orchestrator.scheduler.salloc import SallocScheduler
from orchestrator.scheduler.slurm import JOB_ENV_ALLOW


class FakeProc:
    """A started salloc or srun that exits when told (or at once with `status`)."""

    def __init__(self, status: int | None = None) -> None:
        self.status = status
        self.done = threading.Event()
        self.waited = threading.Event()  # someone waits for the exit
        self.terminated = False
        if status is not None:
            self.done.set()

    def exit(self, status: int = 0) -> None:
        self.status = status
        self.done.set()

    def wait(self) -> int:
        self.waited.set()
        assert self.done.wait(10), "a fake process never exited"
        assert self.status is not None
        return self.status

    def poll(self) -> int | None:
        return self.status if self.done.is_set() else None

    def terminate(self) -> None:
        self.terminated = True
        self.exit(-15)


class FakeLaunch:
    """Launch: salloc writes `salloc_says` to its log and exits with `salloc_status`; each srun is
    a FakeProc the test ends (or that exits at once with `srun_status`)."""

    def __init__(self, salloc_says: str = "salloc: Granted job allocation 77\n", salloc_status: int = 0,
                 srun_status: int | None = None) -> None:  # fmt: skip
        self.salloc_says, self.salloc_status, self.srun_status = salloc_says, salloc_status, srun_status
        self.calls: list[tuple[list[str], dict[str, str], Path]] = []
        self.sruns: list[FakeProc] = []
        self.started = threading.Semaphore(0)

    def __call__(self, argv: list[str], env: dict[str, str], log: Path) -> FakeProc:
        self.calls.append((argv, env, log))
        if argv[0] == "salloc":
            with open(log, "a") as f:  # as salloc appends to the run's salloc.out
                f.write(self.salloc_says)
            return FakeProc(self.salloc_status)
        proc = FakeProc(self.srun_status)
        self.sruns.append(proc)
        self.started.release()
        return proc

    def next_srun(self) -> FakeProc:
        assert self.started.acquire(timeout=5), "no srun was started"
        return self.sruns[-1]


class Sacct(ScriptedRunner):
    """A CommandRunner: sacct answers with the allocation RUNNING and the given step lines."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[int, str] = {}

    def answer(self, argv: list[str]) -> Answer:
        if argv[0] != "sacct":
            return 0, "", ""
        t = "2026-12-02T05:00:00"
        lines = [f"77|RUNNING|0:0|00:00:02|node[1-2]|None|{t}|{t}|Unknown|orch-smoke-ladder"]
        lines += [
            f"77.{k}|{state}|0:0|00:00:01|node1||{t}|{t}|{t}|orch-smoke-n{k + 1}xg1"
            for k, state in sorted(self.steps.items())
        ]
        return 0, "\n".join(lines) + "\n", ""


def ladder(tmp_path: Path) -> list:  # type: ignore[type-arg]
    return [spec(1, workdir=tmp_path / "steps" / "n1xg1"), spec(2, workdir=tmp_path / "steps" / "n2xg1")]


def test_salloc_asks_for_what_the_driver_asks_for(tmp_path: Path) -> None:
    steps = ladder(tmp_path)
    driver = AllocationScheduler().render_ladder(steps)
    sbatch = [ln.removeprefix("#SBATCH ") for ln in driver.splitlines() if ln.startswith("#SBATCH ")]
    argv = SallocScheduler().salloc_argv(steps)
    assert argv[:2] == ["salloc", "--no-shell"]
    # the same allocation; --no-requeue is sbatch's only (an salloc allocation is never requeued)
    assert sorted(argv[2:]) == sorted(a for a in sbatch if a != "--no-requeue")


def test_each_srun_is_the_drivers_into_the_allocation_in_the_steps_folder(tmp_path: Path) -> None:
    steps = ladder(tmp_path)
    in_driver = srun_lines(AllocationScheduler().render_ladder(steps))
    for s, drv in zip(steps, in_driver, strict=True):
        argv = SallocScheduler.step_argv("77", s)
        assert argv[:3] == ["srun", "--jobid=77", f"--chdir={s.workdir}"]
        assert [argv[0], *argv[3:]] == drv == srun_argv(s)


def test_an_srun_gets_the_allow_list_and_its_steps_exports_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_SECRET_TOKEN", "x")
    monkeypatch.setenv("SLURM_JOB_ID", "12")  # orch inside a job (the nightly entry): not handed on
    monkeypatch.setenv("PATH", "/usr/bin")
    env = SallocScheduler(slurm_conf=Path("/etc/lab/slurm.conf")).step_env(spec(2))
    assert env["PATH"] == "/usr/bin" and env["SLURM_CONF"] == "/etc/lab/slurm.conf"
    assert env["MASTER_ADDR"] == "198.18.1.11" and env["MASTER_PORT"] == "29502"
    assert env["GLOO_SOCKET_IFNAME"] == "fab0"
    assert set(env) <= {*JOB_ENV_ALLOW, "SLURM_CONF", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"}


def test_sruns_run_one_after_another_in_ladder_order(tmp_path: Path) -> None:
    launch = FakeLaunch()
    sched = SallocScheduler(runner=Sacct(), launch=launch)  # type: ignore[arg-type]
    steps = ladder(tmp_path)
    ids = sched.submit_ladder(steps, tmp_path / "alloc")
    assert ids == ["77.0", "77.1"]
    first = launch.next_srun()
    wait_for(first.waited.is_set, 5, "the driver waits for the first srun's exit")
    assert len(launch.sruns) == 1  # the second waits for the first srun's exit
    first.exit(0)
    launch.next_srun().exit(0)
    assert [c[0][1] for c in launch.calls] == ["--no-shell", "--jobid=77", "--jobid=77"]
    tails = [c[0][-len(s.argv) :] for c, s in zip(launch.calls[1:], steps, strict=True)]
    assert tails == [s.argv for s in steps]
    assert (tmp_path / "alloc" / "commands.sh").read_text().count("srun --jobid=77") == 2
    sched.release()


def test_salloc_that_names_no_job_is_refused_with_its_message(tmp_path: Path) -> None:
    launch = FakeLaunch("salloc: error: Invalid partition name specified\n", salloc_status=1)
    sched = SallocScheduler(runner=Sacct(), launch=launch)  # type: ignore[arg-type]
    with pytest.raises(SchedulerError, match="Invalid partition name"):
        sched.submit_ladder(ladder(tmp_path), tmp_path / "alloc")


def test_a_queued_allocation_is_named_at_once_and_no_srun_starts_before_it_is_granted(tmp_path: Path) -> None:
    says = "salloc: Pending job allocation 77\nsalloc: job 77 queued and waiting for resources\n"
    launch = FakeLaunch(says)
    salloc = FakeProc()
    plain = launch.__call__

    def held(argv: list[str], env: dict[str, str], log: Path) -> FakeProc:
        got = plain(argv, env, log)
        return salloc if argv[0] == "salloc" else got

    sched = SallocScheduler(runner=Sacct(), launch=held)
    assert sched.submit_ladder(ladder(tmp_path), tmp_path / "alloc") == ["77.0", "77.1"]
    wait_for(salloc.waited.is_set, 5, "the driver waits for the allocation to be granted")
    assert launch.sruns == []
    salloc.exit(0)  # granted
    launch.next_srun().exit(0)
    sched.release()


def _first_srun(tmp_path: Path) -> tuple[Sacct, FakeLaunch, SallocScheduler, list[str], FakeProc]:
    """A ladder submitted to a new allocation (sacct answering), its first srun started."""
    runner = Sacct()
    launch = FakeLaunch()
    sched = SallocScheduler(runner=runner, launch=launch)  # type: ignore[arg-type]
    ids = sched.submit_ladder(ladder(tmp_path), tmp_path / "alloc")
    return runner, launch, sched, ids, launch.next_srun()


def test_the_loop_wakes_when_an_srun_exits_and_sees_the_end_in_sacct(tmp_path: Path) -> None:
    runner, _, sched, ids, first = _first_srun(tmp_path)
    runner.steps[0] = "RUNNING"
    assert sched.poll(ids)["77.0"].status == JobStatus.RUNNING
    threading.Timer(0.1, first.exit).start()
    t0 = time.monotonic()
    sched.wait_for_news(5.0)
    assert time.monotonic() - t0 < 2.0  # not the whole timeout
    # sacct is a moment behind: the step still RUNNING there, so the next wait is a short one
    assert sched.poll(ids)["77.0"].status == JobStatus.RUNNING
    t0 = time.monotonic()
    sched.wait_for_news(5.0)
    assert time.monotonic() - t0 < 1.0
    runner.steps[0] = "COMPLETED"
    assert sched.poll(ids)["77.0"].status == JobStatus.COMPLETED
    sched.release()


def test_an_srun_that_started_no_step_ends_it_as_infra_after_a_grace(tmp_path: Path) -> None:
    now = [100.0]
    launch = FakeLaunch(srun_status=1)
    sched = SallocScheduler(runner=Sacct(), launch=launch, clock=lambda: now[0], srun_grace_s=10.0)  # type: ignore[arg-type]
    ids = sched.submit_ladder(ladder(tmp_path), tmp_path / "alloc")
    launch.next_srun()
    launch.next_srun()
    (tmp_path / "alloc" / "srun-77.out").write_text("srun: error: Unable to create step for job 77\n")
    # no wait needed: the driver notes the first srun's exit before it starts the second
    assert sched.poll(ids)["77.0"].status == JobStatus.PENDING  # slurmdbd may be behind
    now[0] += 11
    state = sched.poll(ids)["77.0"]
    assert state.status == JobStatus.INFRA
    assert "srun exited 1" in (state.reason or "") and "Unable to create step" in (state.reason or "")
    sched.release()


def test_cancel_starts_no_further_srun_and_scancels_the_allocation(tmp_path: Path) -> None:
    runner, launch, sched, ids, first = _first_srun(tmp_path)
    sched.cancel(ids)
    assert ["scancel", "77"] in runner.calls
    first.exit(143)  # scancel ended the running step
    wait_for(
        lambda: not any(t.name == "orch-alloc-77" for t in threading.enumerate()),
        5,
        "the allocation's driver thread ended",
    )
    assert len(launch.sruns) == 1


def test_release_ends_the_allocation_once_and_a_running_srun(tmp_path: Path) -> None:
    runner = Recorder("")
    launch = FakeLaunch()
    sched = SallocScheduler(runner=runner, launch=launch)  # type: ignore[arg-type]
    sched.submit_ladder(ladder(tmp_path), tmp_path / "alloc")
    srun = launch.next_srun()
    sched.release()
    sched.release()
    assert [c for c in runner.calls if c[0] == "scancel"] == [["scancel", "77"]]
    assert srun.terminated


def test_a_booked_allocation_is_the_one_the_steps_run_in(tmp_path: Path) -> None:
    launch = FakeLaunch()
    sched = SallocScheduler(runner=Recorder(""), launch=launch)  # type: ignore[arg-type]
    steps = ladder(tmp_path)
    sched.book(steps, tmp_path / "alloc")
    assert sched.submit_ladder(steps, tmp_path / "alloc") == ["77.0", "77.1"]
    launch.next_srun().exit(0)
    launch.next_srun().exit(0)
    assert [c[0][0] for c in launch.calls] == ["salloc", "srun", "srun"]
    sched.release()


def test_a_booking_for_other_steps_is_cancelled_and_a_new_allocation_made(tmp_path: Path) -> None:
    runner = Recorder("")
    launch = FakeLaunch()
    sched = SallocScheduler(runner=runner, launch=launch)  # type: ignore[arg-type]
    steps = ladder(tmp_path)
    sched.book(steps, tmp_path / "alloc")
    sched.submit_ladder(steps[:1], tmp_path / "alloc")  # the 2-node step was abandoned meanwhile
    assert [c[0][0] for c in launch.calls][:2] == ["salloc", "salloc"]
    assert [c for c in runner.calls if c[0] == "scancel"] == [["scancel", "77"]]
    sched.release()


def test_a_booking_never_used_is_released(tmp_path: Path) -> None:
    runner = Recorder("")
    sched = SallocScheduler(runner=runner, launch=FakeLaunch())  # type: ignore[arg-type]
    sched.book(ladder(tmp_path), tmp_path / "alloc")  # then the fingerprint refused the run
    sched.release()
    assert [c for c in runner.calls if c[0] == "scancel"] == [["scancel", "77"]]


def failing_sacct() -> ScriptedRunner:
    """A CommandRunner: the nodes idle, sacct always fails, squeue and scancel answer nothing."""
    idle = "".join(f"node{i}|idle\n" for i in (1, 2, 3))
    return ScriptedRunner({"sacct": (1, "", "sacct: error: slurmdbd down"), "sinfo": (0, idle, "")})


def test_an_error_mid_ladder_ends_the_allocation_once_and_finishes_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from test_scheduler_errors import _runner, execute

    from orchestrator.runs import executor

    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    slurm = failing_sacct()
    t = [0.0]

    def tick() -> float:
        t[0] += 5.0
        return t[0]

    launch = FakeLaunch()
    sched = SallocScheduler(runner=slurm, launch=launch, clock=tick)  # type: ignore[arg-type]
    runner = _runner(tmp_path, sched)  # type: ignore[arg-type]
    with pytest.raises(SchedulerError, match="sacct failed 5 times in a row"):
        execute(runner)
    assert [c for c in slurm.calls if c[0] == "scancel"] == [["scancel", "77"]]
    assert launch.sruns and launch.sruns[0].terminated  # the running step's srun
    events = [json.loads(line) for line in runner.rundir.journal_path.read_text().splitlines()]
    assert [e["job_id"] for e in events if e["event"] == "step_submitted"] == ["77.0", "77.1", "77.2"]
    assert events[-1]["event"] == "run_finished" and events[-1]["exit_code"] == 3


def test_a_new_salloc_is_named_by_its_own_line_not_an_earlier_one(tmp_path: Path) -> None:
    """The booking waits (a drained node); the steps that can run get an allocation of their own:
    its id is the second salloc's, not the first one's line in the same salloc.out."""
    runner = Recorder("")
    launch = FakeLaunch("salloc: Pending job allocation 77\n")
    sched = SallocScheduler(runner=runner, launch=launch)  # type: ignore[arg-type]
    steps = ladder(tmp_path)
    sched.book(steps, tmp_path / "alloc")
    launch.salloc_says = "salloc: Granted job allocation 78\n"
    assert sched.submit_ladder(steps[:1], tmp_path / "alloc") == ["78.0"]
    assert [c for c in runner.calls if c[0] == "scancel"] == [["scancel", "77"]]
    assert launch.next_srun() and launch.calls[-1][0][1] == "--jobid=78"
    sched.release()


def test_cancelling_no_step_stops_nothing(tmp_path: Path) -> None:
    """A step abandoned before submission (its node drained) is cancelled with no id: the
    others' sruns still start."""
    launch = FakeLaunch()
    sched = SallocScheduler(runner=Recorder(""), launch=launch)  # type: ignore[arg-type]
    sched.cancel([])
    sched.submit_ladder(ladder(tmp_path), tmp_path / "alloc")
    launch.next_srun().exit(0)
    launch.next_srun().exit(0)
    sched.release()


def test_salloc_and_srun_get_orchs_own_slurm_conf_unless_the_scheduler_has_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run resumed without --inventory takes orch's own SLURM_CONF (never the run folder's): the
    lab's resume met "salloc: fatal: Could not establish a configuration source" when salloc's
    allow-listed environment dropped it."""
    from orchestrator.scheduler.salloc import SallocScheduler

    monkeypatch.setenv("SLURM_CONF", "/etc/orch-test/slurm.conf")
    monkeypatch.setenv("SLURM_JOB_ID", "99")  # an enclosing job's: never passed on
    assert SallocScheduler().base_env()["SLURM_CONF"] == "/etc/orch-test/slurm.conf"
    assert "SLURM_JOB_ID" not in SallocScheduler().base_env()
    given = SallocScheduler(slurm_conf=Path("/var/lib/orch-lab/slurm.conf")).base_env()
    assert given["SLURM_CONF"] == "/var/lib/orch-lab/slurm.conf"
    monkeypatch.delenv("SLURM_CONF")
    assert "SLURM_CONF" not in SallocScheduler().base_env()
