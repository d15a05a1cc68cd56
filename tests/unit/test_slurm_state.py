"""Slurm state parsing and classification.

Recorded outputs live in tests/fixtures/slurm/, one case per file, named
`<sacct|squeue|scontrol>-<EXPECTED STATUS>-<what>.txt` and starting with a `# source:` line; each
file is one test case. The mechanics tests below use single constructed lines only to pin the
field splitting; they are not stand-ins for recorded outputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Answer, ScriptedRunner

from orchestrator.errors import ConfigError, ParseError
from orchestrator.scheduler.base import JobState, JobStatus
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.scheduler.slurm_state import (
    SACCT_FIELDS,
    SACCT_FORMAT,
    SQUEUE_FORMAT,
    classify,
    parse_elapsed,
    parse_exit_code,
    parse_sacct,
    parse_scontrol,
    parse_squeue,
)

SLURM = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RECORDED = sorted(SLURM.glob("*.txt")) if SLURM.is_dir() else []
PARSE = {"sacct": parse_sacct, "squeue": parse_squeue, "scontrol": parse_scontrol}


@pytest.mark.parametrize(
    ("word", "status"),
    [
        ("COMPLETED", JobStatus.COMPLETED),
        ("FAILED", JobStatus.FAILED),
        ("TIMEOUT", JobStatus.FAILED),
        ("OUT_OF_MEMORY", JobStatus.FAILED),
        ("DEADLINE", JobStatus.FAILED),
        ("CANCELLED", JobStatus.CANCELLED),
        ("CANCELLED by 0", JobStatus.CANCELLED),
        ("NODE_FAIL", JobStatus.INFRA),
        ("BOOT_FAIL", JobStatus.INFRA),
        ("PREEMPTED", JobStatus.INFRA),
        ("PENDING", JobStatus.PENDING),
        ("REQUEUED", JobStatus.PENDING),
        ("REQUEUE_HOLD", JobStatus.PENDING),
        ("RESIZING", JobStatus.PENDING),
        ("CONFIGURING", JobStatus.PENDING),
        ("RUNNING", JobStatus.RUNNING),
        ("COMPLETING", JobStatus.RUNNING),
        ("SUSPENDED", JobStatus.RUNNING),
        ("STAGE_OUT", JobStatus.RUNNING),
        ("SIGNALING", JobStatus.RUNNING),
        ("PD", JobStatus.PENDING),
        ("", JobStatus.UNKNOWN),
        ("SOMETHING_NEW", JobStatus.UNKNOWN),
    ],
)
def test_classify(word: str, status: JobStatus) -> None:
    assert classify(word) == status
    assert (status.terminal) == (
        status in {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.INFRA}
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:00:05", 5),
        ("01:02:03", 3723),
        ("2-00:00:01", 172801),
        ("05:07", 307),
        ("INVALID", None),
        ("", None),
    ],
)
def test_elapsed(text: str, seconds: float | None) -> None:
    assert parse_elapsed(text) == seconds


def test_exit_code() -> None:
    assert parse_exit_code("0:15") == (0, 15)
    assert parse_exit_code("1:0") == (1, 0)
    assert parse_exit_code("") == (None, None)


def test_formats_are_explicit() -> None:
    assert SACCT_FORMAT.endswith("JobName") and "State" in SACCT_FORMAT
    assert SQUEUE_FORMAT.count("|") == 4


def test_sacct_steps_fold_and_pipe_in_name() -> None:
    # constructed lines in SACCT_FIELDS order, to pin the splitting rules
    line = "42|CANCELLED by 0|0:15|00:01:02|node1|None|t|t|t|name|with|pipes"
    text = "\n".join(
        [
            line,
            "42.batch|CANCELLED|0:15|00:01:02|node1||t|t|t|batch",
            "42.0|FAILED|1:0|00:01:00|node1||t|t|t|x",
        ]
    )
    states = parse_sacct(text)
    assert list(states) == ["42"]
    st = states["42"]
    assert st.status == JobStatus.CANCELLED and st.raw_state == "CANCELLED by 0"
    assert (st.exit_code, st.signal, st.elapsed_s, st.nodelist) == (0, 15, 62.0, "node1")
    assert len(SACCT_FIELDS) == 10


def test_sacct_header_decides_order() -> None:
    states = parse_sacct("JobID|JobName|State|ExitCode\n7|a|COMPLETED|0:0\n")
    assert states["7"].status == JobStatus.COMPLETED


def test_short_lines_raise() -> None:
    with pytest.raises(ParseError):
        parse_sacct("42|COMPLETED\n")
    with pytest.raises(ParseError):
        parse_squeue("1|RUNNING\n")
    with pytest.raises(ParseError):
        parse_scontrol("nothing here\n")


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_recorded_output(path: Path) -> None:
    kind, expected, _ = path.name.split("-", 2)
    text = path.read_text()
    assert text.startswith("# source:")
    states = PARSE[kind](text)
    assert states
    assert all(s.status == JobStatus(expected) for s in states.values())


def _recorded(name: str) -> str:
    return "".join(
        ln for ln in (SLURM / name).read_text().splitlines(keepends=True) if not ln.startswith("#")
    )


def test_why_a_job_waits_is_answered_in_orchs_words() -> None:
    from orchestrator.scheduler.base import JobState, pending_wait

    (begin,) = parse_squeue(_recorded("squeue-PENDING-begintime.txt")).values()
    (held,) = parse_squeue(_recorded("squeue-PENDING-held.txt")).values()
    assert pending_wait(begin) == "queued" and pending_wait(held) == "queued"

    def pending(reason: str | None) -> JobState:
        return JobState(job_id="1", status=JobStatus.PENDING, raw_state="PENDING", reason=reason)

    assert pending_wait(pending("ReqNodeNotAvail, UnavailableNodes:node3")) == "unavailable"
    assert pending_wait(pending("PartitionDown")) == "unavailable"
    assert pending_wait(pending("Dependency")) == "dependency"
    assert pending_wait(pending("Dependency 12")) == "dependency"  # the local backend's chain
    assert pending_wait(pending(None)) == "queued"
    running = JobState(job_id="1", status=JobStatus.RUNNING, raw_state="RUNNING")
    assert pending_wait(running) is None


class _Queue(ScriptedRunner):
    """squeue as a cancelled job leaves it: listed (COMPLETING) for two polls, then gone."""

    def __init__(self, listed_for: int) -> None:
        super().__init__()
        self.listed_for = listed_for

    def answer(self, argv: list[str]) -> Answer:
        return 0, "41\n42\n" if len(self.calls) <= self.listed_for else "", ""


def test_wait_gone_waits_until_squeue_no_longer_lists_the_jobs() -> None:
    q = _Queue(listed_for=2)
    assert SlurmScheduler(runner=q).wait_gone(["41", "42"], timeout=30) == []
    assert len(q.calls) == 3 and q.calls[0][:4] == ["squeue", "-h", "-o", "%i"] and q.calls[0][-1] == "41,42"
    stuck = _Queue(listed_for=10**6)
    assert SlurmScheduler(runner=stuck).wait_gone(["41", "42"], timeout=0.2) == ["41", "42"]
    with pytest.raises(ConfigError):
        SlurmScheduler(runner=q).wait_gone(["41;x"], timeout=1)


def _sacct(text: str) -> SlurmScheduler:
    """orch's Slurm scheduler whose sacct answers with one recorded output (the shared fake runner)."""
    return SlurmScheduler(runner=ScriptedRunner({"sacct": (0, text, "")}), use_sacct=True)


def test_a_completed_job_whose_srun_step_was_killed_did_not_complete() -> None:
    # published: martius-lab/cluster_utils#87, four jobs COMPLETED 0:0 whose step .0 is CANCELLED 0:10
    states = parse_sacct(_recorded("sacct-CANCELLED-srun-step-signal.txt"))
    assert list(states) == ["239023", "239024", "239025", "239026"]
    for st in states.values():
        assert st.raw_state == "COMPLETED" and (st.exit_code, st.signal) == (0, 0)
        assert st.status is JobStatus.CANCELLED and st.decided_by == "0"
        assert st.steps == {"batch": "COMPLETED", "extern": "COMPLETED", "0": "CANCELLED"}


def test_the_worst_step_decides_and_extern_does_not_count() -> None:
    # constructed lines in SACCT_FIELDS order, to pin the order INFRA > FAILED > CANCELLED
    def job(*steps: tuple[str, str]) -> JobState:
        rows = ["5|COMPLETED|0:0|00:00:09|n1|None|t|t|t|j"]
        rows += [f"5.{k}|{state}|0:0|00:00:09|n1||t|t|t|s" for k, state in steps]
        return parse_sacct("\n".join(rows))["5"]

    mixed = job(("batch", "COMPLETED"), ("0", "CANCELLED"), ("1", "OUT_OF_MEMORY"), ("2", "COMPLETED"))
    assert (mixed.status, mixed.decided_by) == (JobStatus.FAILED, "1")
    assert job(("0", "FAILED"), ("1", "NODE_FAIL")).status is JobStatus.INFRA
    assert job(("batch", "FAILED")).status is JobStatus.FAILED  # the script counts like a step
    ext = job(("batch", "COMPLETED"), ("extern", "CANCELLED"), ("0", "COMPLETED"))
    assert (ext.status, ext.decided_by) == (JobStatus.COMPLETED, None)
    late = job(("0", "RUNNING"))  # accounting catching up: no change
    assert late.status is JobStatus.COMPLETED


def test_a_job_whose_own_record_is_not_completed_keeps_its_word() -> None:
    # orch's scancel of an allocation (and of a serving engine): CANCELLED by 0 stays CANCELLED
    (alloc,) = parse_sacct(_recorded("sacct-CANCELLED-alloc-scancel.txt")).values()
    assert alloc.status is JobStatus.CANCELLED and alloc.decided_by is None
    assert alloc.steps == {"batch": "CANCELLED", "0": "COMPLETED", "1": "CANCELLED"}
    (timeout,) = parse_sacct(_recorded("sacct-FAILED-timeout.txt")).values()
    assert timeout.status is JobStatus.FAILED and timeout.raw_state == "TIMEOUT"
    (nodefail,) = parse_sacct(_recorded("sacct-INFRA-node-fail.txt")).values()
    assert nodefail.status is JobStatus.INFRA


def test_orchs_scheduler_judges_its_jobs_by_their_steps() -> None:
    killed = _sacct(_recorded("sacct-CANCELLED-srun-step-signal.txt"))
    got = killed.poll(["239023", "239026"])
    assert set(got) == {"239023", "239026"}
    assert all(s.status is JobStatus.CANCELLED and s.decided_by == "0" for s in got.values())
    # the lab's allocation cancelled by orch keeps CANCELLED; one whose step 1 exited 3 is FAILED
    cancelled = _sacct(_recorded("sacct-CANCELLED-alloc-scancel.txt"))
    assert cancelled.poll(["77"])["77"].status is JobStatus.CANCELLED
    failed = _sacct(_recorded("sacct-FAILED-alloc-steps.txt"))
    st = failed.poll(["76"])["76"]
    assert (st.status, st.raw_state, st.decided_by) == (JobStatus.FAILED, "COMPLETED", "1")
