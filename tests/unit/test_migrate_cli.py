"""`orch migrate run` and `orch rollback` at the CLI: the request each builds, the run's phases
shown, and the run's exit code as the command's (run_migration itself is test_migrate_run's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.models.migrate import MigrateRun, PhaseRecord
from orchestrator.models.requests import MigrateRequest
from orchestrator.runs import migrate as runs_migrate


def fake_migration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exit_code: int) -> list[MigrateRequest]:
    """run_migration replaced: it records each request and returns a run that exits exit_code."""
    seen: list[MigrateRequest] = []

    def run_migration(req: MigrateRequest, listeners: list[object]) -> MigrateRun:
        seen.append(req)
        return MigrateRun(
            run_id="migrate-x",
            run_dir=tmp_path / "migrate-x",
            kind="rollback" if req.to_stack is None else "migrate",
            from_stack=req.from_stack,
            to_stack=req.to_stack,
            nodes=["node1"],
            phases=[
                PhaseRecord(phase="freeze", state="passed", gate="fingerprints", reason="all equal", wall_s=1)
            ],
            exit_code=exit_code,
        )

    monkeypatch.setattr(runs_migrate, "run_migration", run_migration)
    return seen


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    code = e.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().out


def test_migrate_run_exits_with_the_runs_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = fake_migration(monkeypatch, tmp_path, exit_code=1)
    code, out = run_cli(
        capsys, "migrate", "run", "--from", "cpu-a", "--to", "cpu-b:fast", "--plan", "smoke",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 1
    assert [(r.from_stack, r.to_stack, r.to_variant, r.out_dir) for r in seen] == [
        ("cpu-a", "cpu-b", "fast", tmp_path)
    ]
    assert "freeze" in out and "report.md" in out


def test_rollback_exits_with_the_runs_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = fake_migration(monkeypatch, tmp_path, exit_code=0)
    code, out = run_cli(capsys, "rollback", "--to", "cpu-a", "--out", str(tmp_path))
    assert code == 0
    assert [(r.from_stack, r.to_stack, r.reference_run, r.out_dir) for r in seen] == [
        ("cpu-a", None, None, tmp_path)
    ]
    assert "freeze" in out and "report.md" in out
