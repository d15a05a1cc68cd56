"""What a new user stumbled on: each missing input or wrong path is one line with the right exit
code, and nothing is left behind (issue 12, items 3, 8, 11, 13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import ScriptedRunner
from test_store_build import make_run

from orchestrator.cli import main
from orchestrator.cli.runs import user_at_host
from orchestrator.errors import SchedulerError
from orchestrator.runs.nightly import CronManager
from orchestrator.store.db import ResultsStore


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    got = capsys.readouterr()
    code = e.value.code
    return (code if isinstance(code, int) else 1), got.out, got.err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder and no ORCH_STORE: the default store is ./runs/orch.db."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_STORE", raising=False)
    return tmp_path


# --- item 13: runs list creates no store, shows what is known -------------------------------------


def test_runs_list_without_a_store_creates_none(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "runs", "list")
    assert code == 0
    assert "no runs recorded yet (no results store at runs/orch.db)" in out
    assert not (here / "runs").exists()


def test_runs_list_of_an_explicit_missing_store_names_it_and_creates_none(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run_cli(capsys, "runs", "list", "--store", "typo.db")
    assert code == 0
    assert "no runs recorded yet (no results store at typo.db)" in out
    monkeypatch.setenv("ORCH_STORE", str(here / "night" / "orch.db"))
    code, out, _ = run_cli(capsys, "baseline", "list")
    assert code == 0
    assert f"no baselines (no results store at {here / 'night' / 'orch.db'})" in out
    assert sorted(p.name for p in here.iterdir()) == []


def test_user_at_host_shows_what_is_known() -> None:
    assert user_at_host(None, None) == "-"
    assert user_at_host("ana", None) == "ana@-"
    assert user_at_host(None, "gpu01") == "-@gpu01"
    assert user_at_host("ana", "gpu01") == "ana@gpu01"


# --- item 11: a store that is not one, a folder given as a file, a file given as a folder -------------


@pytest.mark.parametrize("kind", ["text file", "folder"])
def test_a_store_that_is_not_sqlite_is_a_usage_error(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    bogus = here / "notes.txt"
    if kind == "folder":
        bogus.mkdir()
    else:
        bogus.write_text("not a database\n" * 100)
    monkeypatch.setenv("ORCH_STORE", str(bogus))
    code, _, err = run_cli(capsys, "runs", "list")
    assert code == 2
    line = one_error_line(err)
    assert f"results store {bogus} is " in line and "ORCH_STORE" in line


def test_report_out_a_folder_is_a_usage_error(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(here / "runs", "r1")
    target = here / "reports"
    target.mkdir()
    code, _, err = run_cli(capsys, "report", str(run), "--format", "md", "-o", str(target))
    assert code == 2
    assert f"--out {target} is a folder" in one_error_line(err)
    assert list(target.iterdir()) == []


def _runs_recorded(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("*/journal.jsonl")) if root.is_dir() else []


def test_scale_test_out_a_file_is_a_usage_error(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = here / "runs.txt"
    target.write_text("")
    code, _, err = run_cli(capsys, "scale-test", "--stack", "none", "--out", str(target))
    assert code == 2
    assert f"{target} is a file" in one_error_line(err)
    assert target.read_text() == ""


# --- item 3: usage errors of scale-test leave no run ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--stack", "nosuch"], "nosuch"),
        (["--stack", "none", "--group", "nosuch"], "nosuch"),
        (["--stack", "none", "--plan", "nosuch"], "nosuch"),
        (["--stack", "none", "--nodes", "0"], "nodes"),
        (["--stack", "none", "--sizes", "bogus"], "bogus"),
        (["--stack", "none", "-i", "LAB", "--backend", "local", "--nodes", "1,2"], "local backend"),
    ],
)
def test_scale_test_usage_errors_leave_no_run(
    here: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    out_dir = here / "runs"
    lab_ini = here / "lab.ini"
    lab_ini.write_text(
        "[lab]\nnode1 ansible_host=198.18.0.11 fabric_address=198.18.1.11\n"
        "node2 ansible_host=198.18.0.12 fabric_address=198.18.1.12\n"
    )
    args = [str(lab_ini) if a == "LAB" else a for a in args]
    code, _, err = run_cli(capsys, "scale-test", "--out", str(out_dir), *args)
    assert code == 2, err
    assert says in one_error_line(err)
    assert _runs_recorded(out_dir) == []
    store = out_dir / "orch.db"
    if store.exists():
        with ResultsStore.open(store) as db:
            assert db.runs() == []


def test_scale_test_with_a_bad_store_leaves_no_run(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bogus = here / "store.txt"
    bogus.write_text("x" * 200)
    monkeypatch.setenv("ORCH_STORE", str(bogus))
    code, _, err = run_cli(capsys, "scale-test", "--stack", "none", "--out", str(here / "runs"))
    assert code == 2
    assert "is not an SQLite file" in one_error_line(err)
    assert _runs_recorded(here / "runs") == []


# --- item 8: missing inputs are not silent --------------------------------------------------------


def test_history_with_an_unknown_baseline(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = here / "orch.db"
    with ResultsStore.open(store) as db:
        db.ingest(make_run(here / "runs", "r1"))
    code, _, err = run_cli(capsys, "history", "--baseline", "nosuch", "--store", str(store))
    assert code == 2
    assert "no baseline named 'nosuch' (known: none)" in one_error_line(err)


def test_compare_against_a_run_without_data(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = make_run(here / "runs", "good")
    empty = make_run(here / "runs", "empty", done_steps=0)
    code, _, err = run_cli(capsys, "compare", str(good), str(empty), "--store", str(here / "orch.db"))
    assert code == 2
    assert "run empty has nothing to compare: no measurement in" in one_error_line(err)


def test_runs_cleanup_of_a_missing_folder(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "runs", "cleanup", "--runs", str(here / "nonexistent"))
    assert code == 2
    assert "no such folder" in one_error_line(err)


def failing_squeue() -> ScriptedRunner:
    """A runner where squeue fails as it does when slurmctld cannot be reached."""
    err = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    return ScriptedRunner({"squeue": (1, "", err)})


def test_cron_list_fails_when_squeue_fails(tmp_path: Path) -> None:
    mgr = CronManager(failing_squeue(), None, "sbatch-begin")
    with pytest.raises(SchedulerError, match="Unable to contact slurm controller") as e:
        mgr.list(tmp_path)
    assert e.value.exit_code == 3


# --- item 11: a closed pipe ends orch quietly -----------------------------------------------------


@pytest.mark.parametrize("args", [["plan", "show"], ["--help"], ["schema", "plan"], ["runs", "list"]])
def test_closed_stdout_exits_quietly(tmp_path: Path, args: list[str]) -> None:
    # `orch plan show | head -1`, with the reader already gone: no traceback, no noise, exit 0.
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k != "ORCH_STORE"}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path, env=env,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")
