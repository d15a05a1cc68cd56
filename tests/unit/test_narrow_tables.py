"""Run ids and figures stay whole on an 80-column terminal (issue 12, new user item 6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from test_store_build import make_run

from orchestrator.cli import common
from orchestrator.cli.common import Col, fitted_table
from orchestrator.store.db import ResultsStore

IDS = [f"20261201T02423{i}Z-acceptance-1234{i}" for i in range(3)]


def lines_at(
    width: int, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    from orchestrator.cli import main

    monkeypatch.setattr(common.out, "width", width)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code in (0, 1)
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    return lines


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    t0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    with ResultsStore.open(tmp_path / "orch.db") as db:
        for i, rid in enumerate(IDS):
            db.ingest(make_run(tmp_path, rid, plan_name="acceptance", started=t0 + timedelta(days=i)))
    # A relative path: the table's title names the store, and the test runner's tmp folder (longer
    # under pytest-xdist's workers) is not what must fit in 80 columns.
    monkeypatch.chdir(tmp_path)
    return Path("orch.db")


def test_runs_list_keeps_ids_whole(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = lines_at(80, ["runs", "list", "--store", str(store)], capsys, monkeypatch)
    for rid in IDS:
        assert any(rid in line for line in lines)
    assert not any("…" in line for line in lines)
    assert any("not shown at 80 columns" in line for line in lines)
    wide = lines_at(200, ["runs", "list", "--store", str(store)], capsys, monkeypatch)
    assert not any("not shown" in line for line in wide) and any("lab@gone" in line for line in wide)


def test_history_keeps_ids_and_figures_whole(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = lines_at(80, ["history", "--store", str(store)], capsys, monkeypatch)
    text = "\n".join(lines)
    assert "…" not in text
    for rid in IDS:
        assert sum(rid in line for line in lines) >= 2  # split tables repeat the id
    rows = [line for line in lines if IDS[0] in line]
    figures = [cell.strip() for row in rows for cell in row.split("│")[3:] if cell.strip()]
    assert len(figures) == 6 and all(float(f) > 0 for f in figures)


def test_fault_list_keeps_kinds_and_targets_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.faults.catalog import CATALOG

    lines = lines_at(80, ["fault", "list"], capsys, monkeypatch)
    for info in CATALOG.values():
        assert any(f"│ {info.kind} " in line for line in lines)
        for form in info.target.split("|"):
            assert any(f" {form} " in line for line in lines), form


def test_fitted_table_at_80_columns() -> None:
    console = Console(width=80, record=True)
    long_id = "20261201T024234Z-a-plan-with-a-long-name-99999"
    cols = [Col("run", whole=True), Col("note"), Col("extra", optional=True), Col("value", whole=True)]
    rows = [[long_id, "some words that can fold " * 3, "dropped first", "123456.789"]]
    console.print(fitted_table("t", cols, rows, 80))
    out = console.export_text().splitlines()
    assert max(len(x) for x in out) <= 80
    assert any(long_id in x and "123456.789" in x for x in out)
    assert "not shown at 80 columns: extra" in out[-1]


def test_migrate_plan_keeps_verdicts_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = lines_at(80, ["migrate", "plan", "--from", "rocm-6.2", "--to", "cuda-12.4"], capsys, monkeypatch)
    text = "\n".join(lines)
    assert "needs porting" in text and "needs config change" in text and "monitoring:" in text
