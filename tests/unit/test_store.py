"""The SQLite results store and the run-directory loader."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_store_build import make_run

from orchestrator.errors import ConfigError
from orchestrator.metrics.verdict import baseline_failures
from orchestrator.models.fingerprint import DriftReport, FieldDrift, Fingerprint, FingerprintSet
from orchestrator.models.plan import BaselineThreshold
from orchestrator.report.formats import render
from orchestrator.store.db import MIGRATIONS, SCHEMA_VERSION, ResultsStore, resolve_run_dir
from orchestrator.store.load import load_run


def _count(store: ResultsStore, table: str) -> int:
    return int(store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_new_store_is_wal_at_the_current_version(tmp_path: Path) -> None:
    with ResultsStore.open(tmp_path / "orch.db") as s:
        assert s.version == SCHEMA_VERSION
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_old_store_migrates_forward_and_keeps_rows(tmp_path: Path) -> None:
    path = tmp_path / "orch.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    conn.execute(
        "INSERT INTO runs (run_id, run_dir, plan, backend, status, steps_planned, steps_done, ingested_at)"
        " VALUES ('old', '/x', 'smoke', 'local', 'accepted', 1, 1, 'now')"
    )
    conn.commit()
    conn.close()
    with ResultsStore.open(path) as s:
        assert s.version == SCHEMA_VERSION
        assert s.run("old") is not None
        assert s.baselines() == []


def test_newer_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "orch.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(ConfigError, match="schema"):
        ResultsStore.open(path)


def test_ingest_is_idempotent(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    with ResultsStore.open(tmp_path / "orch.db") as s:
        s.ingest(run)
        counts = {t: _count(s, t) for t in ("runs", "steps", "coll_rows", "summaries", "node_verdicts")}
        s.ingest(run)
        assert {t: _count(s, t) for t in counts} == counts
        assert counts["coll_rows"] == 3 * 36
        assert s.runs()[0].status == "accepted"


def test_killed_run_is_interrupted_with_its_finished_steps(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1", finished=False, done_steps=2)
    with open(run / "journal.jsonl", "a") as fh:
        fh.write('{"t": "2026-11-01T02:00:09+00:00", "event": "step_st')  # torn last line
    rec = load_run(run)
    assert rec.status == "interrupted"
    assert [s.step.id for s in rec.steps] == ["n1xg1", "n1xg2"]
    assert rec.pending == ["n1xg4"]
    with ResultsStore.open(tmp_path / "orch.db") as s:
        s.ingest(run)
        row = s.run("r1")
        assert row is not None and row.status == "interrupted" and row.steps_done == 2


def test_run_of_a_live_process_is_running(tmp_path: Path) -> None:
    import os

    run = make_run(tmp_path, "r1", finished=False, done_steps=1)
    text = (
        (run / "journal.jsonl")
        .read_text()
        .replace('"pid": 999999999, "host": "gone"', f'"pid": {os.getpid()}, "host": "{os.uname().nodename}"')
    )
    (run / "journal.jsonl").write_text(text)
    assert load_run(run).status == "running"


def test_baseline_and_run_lookup(tmp_path: Path) -> None:
    make_run(tmp_path, "20261101T020000Z-smoke-aaaa")
    with ResultsStore.open(tmp_path / "orch.db") as s:
        s.ingest(tmp_path / "20261101T020000Z-smoke-aaaa")
        s.set_baseline("golden", "20261101T020000Z-smoke-aaaa")
        ref = s.baseline_busbw("golden")
        assert len(ref) == 3 * 36
        with pytest.raises(ConfigError):
            s.baseline_busbw("nope")
    assert resolve_run_dir("20261101T02", tmp_path / "orch.db").name == "20261101T020000Z-smoke-aaaa"
    assert resolve_run_dir("golden", tmp_path / "orch.db").name == "20261101T020000Z-smoke-aaaa"
    with pytest.raises(ConfigError):
        resolve_run_dir("missing", tmp_path / "orch.db")


def test_baseline_threshold_fails_exactly_the_slow_rows(tmp_path: Path) -> None:
    base = load_run(make_run(tmp_path, "base"))
    slow = load_run(make_run(tmp_path, "slow", scale={("n1xg4", "alltoall", 1 << 20): 0.5}))
    ref = {
        (s.step.id, r.collective, r.size_bytes): r.out_of_place.busbw_gbs for s in base.steps for r in s.rows
    }
    th = BaselineThreshold(name="golden", min_fraction=0.9)
    step = slow.step("n1xg4")
    assert step is not None
    reasons = baseline_failures(th, "n1xg4", step.rows, ref)
    assert len(reasons) == 1 and reasons[0].startswith("alltoall at 1048576 B")
    assert baseline_failures(th, "n9xg9", step.rows, ref) == ["baseline 'golden' has no step n9xg9"]


def test_fingerprint_and_drift_are_read_typed_and_stored(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    fps = FingerprintSet(stack="cpu-gloo", nodes={"node1": Fingerprint(node="node1", torch="2.5.1+cpu")})
    drift = DriftReport(
        stack="cpu-gloo",
        nodes={
            "node1": [FieldDrift(field="torch", expected="2.5.1", found="2.4.0", verdict="needs porting")]
        },
    )
    (run / "fingerprint.json").write_text(fps.model_dump_json())
    (run / "drift.json").write_text(drift.model_dump_json())
    rec = load_run(run)
    assert rec.fingerprint == fps and rec.drift == drift and rec.warnings == []
    html = render(rec, "html", run)
    assert "needs porting" in html and "2.5.1+cpu" in html
    with ResultsStore.open(tmp_path / "orch.db") as s:
        s.ingest(run)
        rows = s.conn.execute("SELECT node, key, value FROM fingerprints WHERE key = 'torch'").fetchall()
    assert [tuple(r) for r in rows] == [("node1", "torch", '"2.5.1+cpu"')]


def test_a_fingerprint_of_another_shape_is_a_warning(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    (run / "fingerprint.json").write_text('{"node1": {"torch": "2.5.1"}}')
    rec = load_run(run)
    assert rec.fingerprint is None
    assert [w for w in rec.warnings if w.startswith("fingerprint.json: invalid")], rec.warnings
