"""Allocation mode's step states, from sacct job-step lines recorded on the lab
(tests/fixtures/slurm/sacct-*-alloc-*.txt, written by record-alloc.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import SchedulerError
from orchestrator.remote.base import CmdResult
from orchestrator.scheduler.allocation import AllocationScheduler, step_state
from orchestrator.scheduler.base import JobState, JobStatus
from orchestrator.scheduler.slurm_state import parse_sacct

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"
NAMES = ("orch-rec-n1xg1", "orch-rec-n2xg1", "orch-rec-n2xg1b")


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


def alloc_id(text: str) -> str:
    first = next(ln for ln in text.splitlines() if not ln.startswith("#"))
    return first.split("|", 1)[0]


class Replay:
    """A CommandRunner that answers sacct with one recorded output and squeue with nothing."""

    def __init__(self, sacct: str, *, sacct_rc: int = 0) -> None:
        self.sacct, self.sacct_rc = sacct, sacct_rc
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], *, timeout: float | None = None, **_: object) -> CmdResult:
        self.calls.append(argv)
        if argv[0] == "sacct":
            return CmdResult(argv=argv, rc=self.sacct_rc, stdout=self.sacct if self.sacct_rc == 0 else "",
                             stderr="" if self.sacct_rc == 0 else "sacct: error", elapsed_s=0.0)  # fmt: skip
        return CmdResult(argv=argv, rc=1, stdout="", stderr="Invalid job id", elapsed_s=0.0)


def poll_recorded(name: str) -> dict[str, JobState]:
    text = recorded(name)
    alloc = alloc_id(text)
    sched = AllocationScheduler(runner=Replay(text))  # type: ignore[arg-type]
    ids = [f"{alloc}.{k}" for k in range(3)]
    sched._names.update(dict(zip(ids, NAMES, strict=True)))
    states = sched.poll(ids)
    assert list(states) == ids
    return {name: states[i] for name, i in zip(NAMES, ids, strict=True)}


def test_step_lines_are_kept_apart_from_their_job() -> None:
    text = recorded("sacct-FAILED-alloc-steps.txt")
    alloc = alloc_id(text)
    states = parse_sacct(text, steps=True)
    assert {f"{alloc}", f"{alloc}.batch", f"{alloc}.0", f"{alloc}.1", f"{alloc}.2"} <= set(states)
    assert states[f"{alloc}.1"].name == "orch-rec-n2xg1"
    assert set(parse_sacct(text)) == {alloc}  # folded, as per-step mode reads it


def test_finished_ladder_each_step_its_own_outcome() -> None:
    got = poll_recorded("sacct-FAILED-alloc-steps.txt")
    assert [s.status for s in got.values()] == [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.COMPLETED]
    assert got["orch-rec-n2xg1"].exit_code == 3
    assert got["orch-rec-n2xg1"].nodelist == "node[1-2]"
    assert got["orch-rec-n1xg1"].elapsed_s is not None


def test_mid_ladder_later_steps_wait_their_turn() -> None:
    got = poll_recorded("sacct-RUNNING-alloc-mid-ladder.txt")
    assert [s.status for s in got.values()] == [JobStatus.COMPLETED, JobStatus.RUNNING, JobStatus.PENDING]
    assert got["orch-rec-n2xg1b"].reason is None  # not a Slurm pending reason: the driver's order


def test_cancelled_allocation_ends_the_steps_it_never_ran() -> None:
    got = poll_recorded("sacct-CANCELLED-alloc-scancel.txt")
    assert got["orch-rec-n1xg1"].status == JobStatus.COMPLETED
    assert got["orch-rec-n2xg1"].status == JobStatus.CANCELLED
    never = got["orch-rec-n2xg1b"]
    assert never.status == JobStatus.CANCELLED and never.status.terminal
    assert "ended" in (never.reason or "")


def test_steps_are_matched_by_name_not_number() -> None:
    text = recorded("sacct-FAILED-alloc-steps.txt")
    alloc = alloc_id(text)
    sched = AllocationScheduler(runner=Replay(text))  # type: ignore[arg-type]
    # as if the first srun never started: Slurm numbered the next one .0
    sched._names.update({f"{alloc}.0": "orch-rec-missing", f"{alloc}.1": "orch-rec-n1xg1"})
    states = sched.poll([f"{alloc}.0", f"{alloc}.1"])
    assert states[f"{alloc}.1"].status == JobStatus.COMPLETED and states[f"{alloc}.1"].exit_code == 0
    assert states[f"{alloc}.0"].status == JobStatus.INFRA  # the allocation ended without it


def test_pending_allocation_gives_its_reason_to_every_step() -> None:
    alloc = JobState(job_id="7", status=JobStatus.PENDING, raw_state="PENDING", reason="ReqNodeNotAvail")
    got = step_state("7.2", None, alloc)
    assert (got.status, got.reason, got.job_id) == (JobStatus.PENDING, "ReqNodeNotAvail", "7.2")


@pytest.mark.parametrize(
    ("raw", "alloc_status", "status"),
    [
        ("NODE_FAIL", JobStatus.INFRA, JobStatus.INFRA),
        ("TIMEOUT", JobStatus.FAILED, JobStatus.INFRA),
        ("CANCELLED by 0", JobStatus.CANCELLED, JobStatus.CANCELLED),
    ],
)
def test_running_step_of_an_ended_allocation_ends_with_it(
    raw: str, alloc_status: JobStatus, status: JobStatus
) -> None:
    alloc = JobState(job_id="7", status=alloc_status, raw_state=raw)
    line = JobState(job_id="7.1", status=JobStatus.RUNNING, raw_state="RUNNING", elapsed_s=4.0)
    got = step_state("7.1", line, alloc)
    assert got.status == status and got.raw_state == raw and got.elapsed_s == 4.0
    assert "while this step ran" in (got.reason or "")


def test_step_still_running_in_sacct_after_its_driver_completed_is_not_ended() -> None:
    alloc = JobState(job_id="7", status=JobStatus.COMPLETED, raw_state="COMPLETED")
    line = JobState(job_id="7.2", status=JobStatus.RUNNING, raw_state="RUNNING")
    assert step_state("7.2", line, alloc).status == JobStatus.RUNNING  # slurmdbd is behind


def test_step_line_without_its_name_yet_is_taken_by_its_number() -> None:
    text = recorded("sacct-FAILED-alloc-steps.txt")
    alloc = alloc_id(text)
    unnamed = text.replace("|orch-rec-n2xg1\n", "|\n")
    assert unnamed != text
    sched = AllocationScheduler(runner=Replay(unnamed))  # type: ignore[arg-type]
    sched._names[f"{alloc}.1"] = "orch-rec-n2xg1"
    assert sched.poll([f"{alloc}.1"])[f"{alloc}.1"].exit_code == 3


def test_failing_sacct_is_retried_then_an_infrastructure_error_naming_per_step_mode() -> None:
    now = [0.0]
    replay = Replay("", sacct_rc=1)
    sched = AllocationScheduler(runner=replay, max_failures=3, failure_window_s=10.0, clock=lambda: now[0])  # type: ignore[arg-type]
    for t in (0.0, 5.0, 9.0, 9.5):  # bounded like per-step mode's polls: a count and a time both
        now[0] = t
        assert sched.poll(["7.0"]) == {}  # no news this poll, not a guess
    now[0] = 10.0
    with pytest.raises(SchedulerError) as e:
        sched.poll(["7.0"])
    assert "per-step" in str(e.value.hint) and "sacct failed 5 times" in e.value.message


def test_a_sacct_that_answers_again_resets_the_count() -> None:
    text = recorded("sacct-FAILED-alloc-steps.txt")
    alloc = alloc_id(text)
    now = [0.0]
    replay = Replay("", sacct_rc=1)
    sched = AllocationScheduler(runner=replay, max_failures=2, failure_window_s=1.0, clock=lambda: now[0])  # type: ignore[arg-type]
    sched._names[f"{alloc}.0"] = NAMES[0]
    assert sched.poll([f"{alloc}.0"]) == {}
    replay.sacct, replay.sacct_rc = text, 0
    assert sched.poll([f"{alloc}.0"])[f"{alloc}.0"].status == JobStatus.COMPLETED
    replay.sacct_rc = 1
    now[0] = 5.0
    assert sched.poll([f"{alloc}.0"]) == {}  # one failure after an answer: counted from 1 again


def test_disabled_accounting_is_refused_at_once() -> None:
    class NoAccounting(Replay):
        def run(self, argv: list[str], *, timeout: float | None = None, **_: object) -> CmdResult:
            return CmdResult(argv=argv, rc=1, stdout="", elapsed_s=0.0,
                             stderr="sacct: error: Slurm accounting storage is disabled")  # fmt: skip

    with pytest.raises(SchedulerError) as e:
        AllocationScheduler(runner=NoAccounting("")).poll(["7.0"])  # type: ignore[arg-type]
    assert "per-step" in str(e.value.hint)
