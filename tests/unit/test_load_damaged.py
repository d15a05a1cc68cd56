"""A run whose result files are damaged is never read as accepted, and the file is named
(issue 12, new user item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_store_build import make_run

from orchestrator.store.db import ResultsStore
from orchestrator.store.load import load_run


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:300])


def test_truncated_step_result_is_not_accepted_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path, "r1")
    (run / "result.json").unlink()  # killed while writing the run's result: the steps are the record
    assert load_run(run).status == "accepted"
    _truncate(run / "steps" / "n1xg2" / "result.json")
    rec = load_run(run)
    assert rec.status == "failed"
    assert rec.unreadable == {"n1xg2": "steps/n1xg2/result.json"}
    assert any(w.startswith("steps/n1xg2/result.json: unreadable") for w in rec.warnings)
    with ResultsStore.open(tmp_path / "orch.db") as db:
        db.ingest(run)
        row = db.run("r1")
        assert row is not None and row.status == "failed"

    from orchestrator.cli import main

    with pytest.raises(SystemExit):
        main(["runs", "show", str(run)])
    got = capsys.readouterr()
    assert "failed" in got.out and "accepted" not in got.out
    n1xg2 = next(line for line in got.out.splitlines() if "n1xg2" in line)
    assert "unreadable" in n1xg2 and "steps/n1xg2/result.json" in n1xg2 and "not run" not in n1xg2
    assert "not accepted: steps/n1xg2/result.json cannot be read" in got.err


def test_truncated_run_result_is_not_accepted(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    _truncate(run / "result.json")
    rec = load_run(run)
    assert rec.status == "failed"
    assert any(w.startswith("result.json: unreadable") for w in rec.warnings)
    assert "not accepted: result.json cannot be read" in rec.warnings


def test_a_step_never_run_is_still_not_run(tmp_path: Path) -> None:
    rec = load_run(make_run(tmp_path, "r1", finished=False, done_steps=1))
    assert rec.status == "interrupted" and rec.unreadable == {} and rec.pending == ["n1xg2", "n1xg4"]
