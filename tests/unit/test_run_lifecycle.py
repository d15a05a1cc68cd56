"""runs/lifecycle.py: whatever ends a run, its jobs are cancelled, its faults reverted and
run_finished journaled with the status and exit code of errors.py; listeners that fail are
skipped; SIGTERM ends a run as Ctrl-C does."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ConfigError, Interrupted, SchedulerError
from orchestrator.models.events import RunEvent, RunStarted, RunWarning
from orchestrator.runs.lifecycle import Ending, RunLifecycle, error_ending, verdict_ending


def journal(life: RunLifecycle) -> list[dict[str, Any]]:
    return [json.loads(line) for line in life.rundir.journal_path.read_text().splitlines()]


class Recorder:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    def event(self, ev: RunEvent) -> None:
        self.events.append(ev)


class Broken:
    def event(self, ev: RunEvent) -> None:
        raise RuntimeError("display gone")


def open_run(tmp_path: Path, *listeners: Any) -> tuple[RunLifecycle, list[str]]:
    """A started run whose 'jobs' 7 and 8 are live; `undo` records what the end did, in order."""
    life = RunLifecycle.create(tmp_path / "runs", "r1", list(listeners))
    undo: list[str] = []

    def cancel() -> list[str]:
        undo.append("cancel")
        return ["7", "8"]

    life.on_cancel(cancel)
    life.on_close(lambda: undo.append("revert"))
    return life, undo


def start(life: RunLifecycle) -> None:
    ev = RunStarted(run_id=life.run_id, run_dir=life.root, plan="p", backend="slurm")
    life.started(ev, kind="scale-test")


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (SchedulerError("sacct failed 5 times"), "infra", 3),
        (ConfigError("bad"), "failed", 2),
        (RuntimeError("a bug"), "infra", 3),
    ],
)
def test_any_error_cancels_jobs_reverts_faults_and_finishes_the_run(
    tmp_path: Path, error: Exception, status: str, code: int
) -> None:
    life, undo = open_run(tmp_path)
    with pytest.raises(type(error)), life:
        start(life)
        raise error
    assert undo == ["cancel", "revert"]
    events = journal(life)
    assert [e["event"] for e in events] == ["run_started", "run_error", "run_finished"]
    assert events[0]["kind"] == "scale-test" and "pid" in events[0]
    assert events[1]["cancelled"] == ["7", "8"] and type(error).__name__ in events[1]["error"]
    fin = events[-1]
    assert (fin["status"], fin["exit_code"]) == (status, code) and str(error) in fin["error"]
    assert fin["wall_s"] >= 0


def test_ctrl_c_and_sigterm_end_the_run_as_interrupted(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    life, undo = open_run(tmp_path)
    with pytest.raises(Interrupted, match="jobs cancelled: 7, 8"), life:
        start(life)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next line
        pytest.fail("SIGTERM did not stop the run")
    assert undo == ["cancel", "revert"]
    events = journal(life)
    assert [e["event"] for e in events][-2:] == ["interrupted", "run_finished"]
    assert events[-1]["status"] == "interrupted" and events[-1]["exit_code"] == 130
    assert signal.getsignal(signal.SIGTERM) is before  # the process's own handler is back


def test_a_second_signal_while_winding_down_does_not_cut_it_short(tmp_path: Path) -> None:
    life = RunLifecycle.create(tmp_path / "runs", "r1")
    done: list[str] = []

    def revert() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the impatient second Ctrl-C
        done.append("reverted")

    life.on_close(revert)
    with pytest.raises(Interrupted), life:
        raise KeyboardInterrupt
    assert done == ["reverted"]
    assert journal(life)[-1]["event"] == "run_finished"


def test_a_run_that_finishes_is_closed_before_run_finished_and_ends_the_journal(tmp_path: Path) -> None:
    rec = Recorder()
    life, undo = open_run(tmp_path, rec)
    with life:
        start(life)
        life.log(RunWarning(message="w"))
        life.finish(verdict_ending("fail"))
    assert undo == ["revert"]  # nothing to cancel: the run ended by itself
    events = journal(life)
    assert [e["event"] for e in events] == ["run_started", "warning", "run_finished"]
    assert (events[-1]["status"], events[-1]["exit_code"]) == ("failed", 1)
    assert [e.kind for e in rec.events] == ["run_started", "warning", "run_finished"]


def test_a_listener_that_raises_is_logged_and_the_others_still_hear(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder()
    life, _ = open_run(tmp_path, Broken(), rec)
    with caplog.at_level(logging.ERROR, logger="orchestrator.runs.lifecycle"), life:
        start(life)
        life.finish(verdict_ending("pass"))
    assert [e.kind for e in rec.events] == ["run_started", "run_finished"]
    assert len([r for r in caplog.records if "listener Broken failed" in r.getMessage()]) == 2


def test_a_revert_that_fails_does_not_skip_the_others_nor_run_finished(tmp_path: Path) -> None:
    life, undo = open_run(tmp_path)

    def broken() -> None:
        raise OSError("node gone")

    life.on_close(broken)
    life.on_close(lambda: undo.append("second revert"))
    with pytest.raises(SchedulerError), life:
        raise SchedulerError("squeue failed")
    assert undo == ["cancel", "revert", "second revert"]
    kinds = [e["event"] for e in journal(life)]
    assert kinds[-3:] == ["run_error", "close_failed", "run_finished"]


def test_a_refused_run_is_not_undone_twice(tmp_path: Path) -> None:
    life, undo = open_run(tmp_path)
    with pytest.raises(ConfigError), life:
        start(life)
        life.finish(Ending("refused", 2, "unknown stack"))
        raise ConfigError("unknown stack")
    events = journal(life)
    assert [e["event"] for e in events] == ["run_started", "run_finished"]
    assert events[-1] == {**events[-1], "status": "refused", "exit_code": 2, "error": "unknown stack"}
    assert "wall_s" not in events[-1] and undo == ["revert"]


def test_the_exit_codes() -> None:
    assert [verdict_ending(v).exit_code for v in ("pass", "fail", "infra", "skipped")] == [0, 1, 3, 3]
    assert error_ending(KeyboardInterrupt()) == Ending("interrupted", 130)
    assert error_ending(Interrupted("x")).exit_code == 130
    assert error_ending(ConfigError("x")) == Ending("failed", 2, "x")
    assert error_ending(ValueError("v")) == Ending("infra", 3, "ValueError: v")


def test_run_finished_is_journaled_even_when_the_result_cannot_be_written(tmp_path: Path) -> None:
    life, _ = open_run(tmp_path)

    def write(ending: Ending) -> None:
        raise OSError(28, "No space left on device")

    life.on_error(write)
    with pytest.raises(SchedulerError, match="squeue failed"), life:
        raise SchedulerError("squeue failed")
    fin = journal(life)[-1]
    assert fin["event"] == "run_finished" and fin["exit_code"] == 3 and "No space left" in fin["error"]
