"""Slurm's polling commands failing: bounded retries, then SchedulerError; and a run that meets an
error mid-ladder cancels its jobs and journals run_finished (a fake CommandRunner, no Slurm)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakes import Answer, ScriptedRunner, smoke_on_slurm

from orchestrator.errors import RemoteError, SchedulerError
from orchestrator.models.run import RunResult
from orchestrator.runs.executor import StepExecutor
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.runs.scale_test import _execute
from orchestrator.scheduler.base import JobOutput, JobSpec, JobState, JobStatus
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.store.rundir import new_run_id

SLURM = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def recorded(name: str) -> str:
    """A recorded Slurm output (tests/fixtures/slurm), without its '# source' line."""
    return "".join(
        ln for ln in (SLURM / name).read_text().splitlines(keepends=True) if not ln.startswith("#")
    )


SQUEUE_RUNNING = recorded("squeue-RUNNING-sleeper.txt")  # job 32, RUNNING
SACCT_COMPLETED = recorded("sacct-COMPLETED-srun.txt")  # job 29, COMPLETED
# Stand-in stderr for a controller that does not answer (the code looks only at the exit status
# and, for the benign cases, at "Invalid job id" / "accounting storage is disabled").
DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"


def slurm_answers(answers: dict[str, Answer | Exception]) -> ScriptedRunner:
    """Answers each Slurm command from `answers`; any other command fails the test."""
    return ScriptedRunner(answers, strict=True)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def sched(runner: ScriptedRunner, clock: Clock, *, use_sacct: bool = True) -> SlurmScheduler:
    return SlurmScheduler(
        runner=runner, use_sacct=use_sacct, max_failures=3, failure_window_s=5.0, clock=clock
    )


def slurm_sched(
    answers: dict[str, Answer | Exception], *, use_sacct: bool = True
) -> tuple[ScriptedRunner, Clock, SlurmScheduler]:
    """A scheduler over slurm_answers(answers) with a clock the test moves."""
    runner, clock = slurm_answers(answers), Clock()
    return runner, clock, sched(runner, clock, use_sacct=use_sacct)


def test_sacct_failures_are_retried_with_squeue_meanwhile_then_refused() -> None:
    _, clock, s = slurm_sched(
        {"sacct": (1, "", "sacct: error: slurmdbd: connection refused"), "squeue": (0, SQUEUE_RUNNING, "")}
    )
    for _ in range(4):  # 3 failures in 3 s is not yet the window; squeue answers meanwhile
        assert s.poll(["32"])["32"].status is JobStatus.RUNNING
        clock.t += 1.0
    clock.t += 1.0
    with pytest.raises(SchedulerError, match="sacct failed 5 times in a row over 5 s"):
        s.poll(["32"])


def test_a_sacct_that_answers_again_resets_the_count() -> None:
    runner, clock, s = slurm_sched(
        {"sacct": (1, "", "sacct: error: slurmdbd down"), "squeue": (0, SQUEUE_RUNNING, "")}
    )
    for _ in range(2):
        s.poll(["32"])
        clock.t += 10.0
    runner.answers["sacct"] = (0, SACCT_COMPLETED, "")
    s.poll(["32"])
    runner.answers["sacct"] = (1, "", "sacct: error: slurmdbd down")
    for _ in range(2):
        s.poll(["32"])  # two failures after the reset: no error
        clock.t += 10.0


def test_squeue_and_scontrol_both_failing_end_in_bounded_polls() -> None:
    _, clock, s = slurm_sched(
        {"sacct": (1, "", "sacct: error: down"), "squeue": (1, "", DOWN), "scontrol": (1, "", DOWN)},
        use_sacct=False,
    )  # a cluster without accounting: squeue, then scontrol
    states = s.poll(["32"])
    assert states["32"].status is JobStatus.UNKNOWN  # not known yet, not terminal
    for _ in range(5):
        clock.t += 2.0
        try:
            s.poll(["32"])
        except SchedulerError as e:
            assert re.match(r"(squeue|scontrol) failed \d+ times in a row", str(e)), e
            return
    pytest.fail("no SchedulerError after 6 polls")


def test_a_job_the_controller_forgot_is_not_a_failure() -> None:
    gone = "slurm_load_jobs error: Invalid job id specified"
    _, clock, s = slurm_sched({"sacct": (0, "", ""), "squeue": (1, "", gone), "scontrol": (1, "", gone)})
    for _ in range(10):
        assert s.poll(["32"])["32"].status is JobStatus.UNKNOWN
        clock.t += 5.0


def test_a_timeout_counts_as_a_failure() -> None:
    _, clock, s = slurm_sched(
        {"sacct": RemoteError("`sacct` did not finish within 30 s"), "squeue": (0, SQUEUE_RUNNING, "")}
    )
    for _ in range(2):
        s.poll(["32"])
        clock.t += 5.0
    with pytest.raises(SchedulerError, match="did not finish"):
        s.poll(["32"])


def test_accounting_switched_off_is_not_a_failure() -> None:
    runner, clock, s = slurm_sched(
        {"sacct": (1, "", "Slurm accounting storage is disabled"), "squeue": (0, SQUEUE_RUNNING, "")}
    )
    for _ in range(5):
        s.poll(["32"])
        clock.t += 5.0
    assert runner.commands.count("sacct") == 1  # then squeue only


# -- the run: any error mid-ladder cancels its jobs and journals run_finished ------------------


class FakeSlurm:
    """Submits ids 101, 102, ...; polls step 1 COMPLETED, the others RUNNING, then `fail` from
    the given poll on."""

    name = "slurm"

    def __init__(self, fail: BaseException, at_poll: int) -> None:
        self.fail, self.at_poll = fail, at_poll
        self.polls = 0
        self.submitted: list[str] = []
        self.cancelled: list[str] = []

    def render(self, spec: JobSpec) -> str:
        return ""

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        self.submitted.append(str(101 + len(self.submitted)))
        return self.submitted[-1]

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        self.polls += 1
        if self.polls >= self.at_poll:
            raise self.fail
        return {j: JobState(job_id=j, status=JobStatus.COMPLETED if j == "101" else JobStatus.RUNNING,
                            raw_state="COMPLETED" if j == "101" else "RUNNING") for j in job_ids}  # fmt: skip

    def cancel(self, job_ids: list[str]) -> None:
        self.cancelled += job_ids

    def collect(self, job_id: str, spec: JobSpec) -> JobOutput:
        return JobOutput(job_id=job_id, ranks=[])

    def unavailable_nodes(self, nodes: list[str]) -> dict[str, str]:
        return {}


def _runner(tmp_path: Path, fake: FakeSlurm) -> StepExecutor:
    host = {"ansible_host": "198.18.0.1", "gpu_vendor": "none", "gpus_per_node": 1}
    hosts = {f"node{i}": {**host, "ansible_host": f"198.18.0.{i}"} for i in (1, 2, 3)}
    # The run folder is on a share the nodes see (no node folders to make or collect over SSH).
    cluster, plan, steps = smoke_on_slurm(tmp_path, hosts, {"orch_shared_dirs": str(tmp_path)})
    life = RunLifecycle.create(tmp_path / "runs", new_run_id(plan.name))
    return StepExecutor(plan, cluster, steps, fake, "slurm", life, "/x/python")


def execute(runner: StepExecutor) -> RunResult:
    """The ladder inside its run's lifecycle, as scale_test runs it."""
    with runner.life:
        return _execute(runner)


@pytest.mark.parametrize("fail", [SchedulerError("sacct failed 5 times in a row"), RuntimeError("a bug")])
def test_an_error_mid_ladder_cancels_the_jobs_and_finishes_the_run(tmp_path: Path, fail: Exception) -> None:
    fake = FakeSlurm(fail, at_poll=3)
    runner = _runner(tmp_path, fake)
    with pytest.raises(type(fail)):
        execute(runner)
    assert fake.submitted == ["101", "102", "103"]
    assert fake.cancelled == ["102", "103"]  # 101 had ended
    events = [json.loads(line) for line in runner.rundir.journal_path.read_text().splitlines()]
    assert events[-1]["event"] == "run_finished" and events[-1]["exit_code"] == 3
    assert str(fail) in events[-1]["error"]
    assert any(e["event"] == "run_error" and e["cancelled"] == ["102", "103"] for e in events)
    result = json.loads((runner.rundir.root / "result.json").read_text())
    assert result["status"] == "infra" and result["exit_code"] == 3


def test_a_cancel_that_fails_too_does_not_hide_the_cause(tmp_path: Path) -> None:
    fake = FakeSlurm(SchedulerError("squeue failed 5 times in a row"), at_poll=2)

    def cancel(job_ids: list[str]) -> None:
        raise SchedulerError("scancel: Unable to contact slurm controller")

    fake.cancel = cancel  # type: ignore[method-assign]
    runner = _runner(tmp_path, fake)
    with pytest.raises(SchedulerError, match="squeue failed"):
        execute(runner)
    events = [json.loads(line) for line in runner.rundir.journal_path.read_text().splitlines()]
    assert [e["event"] for e in events][-3:] == ["cancel_failed", "run_error", "run_finished"]


def alloc_slurm() -> ScriptedRunner:
    """A CommandRunner for allocation mode: the nodes idle, sbatch prints 500, sacct always fails,
    squeue and scancel answer nothing."""
    idle = "".join(f"node{i}|idle\n" for i in (1, 2, 3))
    return ScriptedRunner({"sbatch": (0, "500\n", ""), "sacct": (1, "", DOWN), "sinfo": (0, idle, "")})


def test_allocation_mode_sacct_failing_cancels_the_allocation_and_finishes_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runs import executor
    from orchestrator.scheduler.allocation import AllocationScheduler

    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    slurm = alloc_slurm()
    clock = Clock()

    def tick() -> float:
        clock.t += 5.0
        return clock.t

    sched = AllocationScheduler(runner=slurm, clock=tick)  # type: ignore[arg-type]
    runner = _runner(tmp_path, sched)  # type: ignore[arg-type]
    with pytest.raises(SchedulerError, match="sacct failed 5 times in a row") as e:
        execute(runner)
    assert "per-step" in str(e.value.hint)
    sbatch = next(c for c in slurm.calls if c[0] == "sbatch")
    assert sbatch[-1] == str((runner.rundir.root / "alloc" / "alloc.sbatch").absolute())
    assert [c for c in slurm.calls if c[0] == "scancel"] == [["scancel", "500"]]
    events = [json.loads(line) for line in runner.rundir.journal_path.read_text().splitlines()]
    assert [e["job_id"] for e in events if e["event"] == "step_submitted"] == ["500.0", "500.1", "500.2"]
    assert any(e["event"] == "run_error" and e["cancelled"] == ["500.0", "500.1", "500.2"] for e in events)
    assert events[-1]["event"] == "run_finished" and events[-1]["exit_code"] == 3
