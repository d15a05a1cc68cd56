"""The PostgreSQL results store against a real server that the tests start (pgserver.py), and the
rule that a store URL never carries a password."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from pgserver import PgServer, pg_server
from serving_fault_run import make_fault_run
from test_store_build import make_run

from orchestrator.errors import ConfigError, InfraError
from orchestrator.runs.nightly import CronEntry, render_scrontab_block
from orchestrator.store.db import SCHEMA_VERSION, ResultsStore, resolve_run_dir
from orchestrator.store.location import PgUrl, parse_store, pg_url

_DB = itertools.count()


@pytest.fixture(scope="session")
def pg() -> Iterator[PgServer]:
    with pg_server() as server:
        yield server


@pytest.fixture
def pg_db(pg: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh database; libpq finds the password in $PGPASSFILE only."""
    name = f"t{next(_DB)}"
    pg.admin(f"CREATE DATABASE {name}")
    monkeypatch.setenv("PGPASSFILE", str(pg.write_pgpass(tmp_path / "pgpass")))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)
    return pg.url(name)


# --- no password in a store URL (no server needed) ----------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://orch:s3cret-pw@db.example:5432/orch",
        "postgres://orch:s3cret-pw@db.example/orch",
        "postgresql://db.example/orch?user=orch&password=s3cret-pw",
        "postgresql:///orch?sslpassword=s3cret-pw",
    ],
)
def test_url_with_a_password_is_refused_and_not_echoed(url: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_store(url)
    assert "s3cret-pw" not in str(e.value) and "***" in str(e.value)
    assert e.value.hint is not None and ".pgpass" in e.value.hint and "service" in e.value.hint


def test_urls_without_password_and_paths_are_accepted(tmp_path: Path) -> None:
    for url in ("postgresql://orch@db.example:5432/orch", "postgres://db/orch",
                "postgresql:///orch?host=/run/postgresql", "postgresql:///?service=orch"):  # fmt: skip
        assert parse_store(url) == PgUrl(url=url)
    assert parse_store(str(tmp_path / "orch.db")) == tmp_path / "orch.db"
    with pytest.raises(ConfigError, match="unknown scheme"):
        parse_store("mysql://db/orch")


def test_cron_entry_refuses_a_password_url_and_writes_the_url_it_was_given(tmp_path: Path) -> None:
    base = dict(name="n", at="02:00", inventory=tmp_path / "i.ini", plan="nightly", out_dir=tmp_path,
                orch="/usr/bin/orch", workdir=tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match="carries a password") as e:
        CronEntry.model_validate({**base, "store": "postgresql://orch:hunter2@db/orch"})
    assert "hunter2" not in str(e.value)
    entry = CronEntry.model_validate({**base, "store": "postgresql://orch@db/orch"})
    assert entry.env()["ORCH_STORE"] == "postgresql://orch@db/orch"
    assert "ORCH_STORE=postgresql://orch@db/orch " in render_scrontab_block(entry)


# --- against the server ---------------------------------------------------------------------------


def test_new_pg_store_is_at_the_current_version_and_migrates_once(pg_db: str) -> None:
    with ResultsStore.open(pg_db) as s:
        assert s.version == SCHEMA_VERSION
        tables = {r["table_name"] for r in s.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")}  # fmt: skip
        assert {"runs", "steps", "coll_rows", "summaries", "baselines", "orch_schema"} <= tables
        # one schema, two dialects: 8-byte integers and floats, as in SQLite
        cols = "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'coll_rows'"
        kinds = {r["column_name"]: r["data_type"] for r in s.conn.execute(cols)}
        assert kinds["size_bytes"] == "bigint" and kinds["oop_busbw_gbs"] == "double precision"
    with ResultsStore.open(pg_db) as s:  # a second open finds the schema and changes nothing
        assert s.version == SCHEMA_VERSION
        assert s.conn.execute("SELECT count(*) AS n FROM orch_schema").fetchall()[0]["n"] == 1


def test_pg_and_sqlite_hold_the_same_rows(pg_db: str, tmp_path: Path) -> None:
    runs = [make_run(tmp_path, f"2026110{d}T020000Z-nightly-{d}aaa") for d in (1, 2)]
    found = {}
    for loc in (parse_store(pg_db), tmp_path / "orch.db"):
        with ResultsStore.open(loc) as s:
            for r in runs:
                s.ingest(r)
                s.ingest(r)  # idempotent
            s.set_baseline("golden", runs[0].name, note="first")
            s.set_baseline("golden", runs[1].name)  # replaces
            found[type(loc).__name__] = (
                [r.model_dump() for r in s.runs()],
                s.busbw(runs[0].name),
                sorted(map(str, s.summaries([r.name for r in runs]))),
                [(b.name, b.run_id, b.note) for b in s.baselines()],
                s.run("20261101T02"),
                s.integrity_ok(),
            )
    pg_rows, sq_rows = found["PgUrl"], found["PosixPath"]
    assert pg_rows == sq_rows
    assert len(pg_rows[1]) == 3 * 36 and pg_rows[3] == [("golden", runs[1].name, None)]
    assert [r["run_id"] for r in pg_rows[0]] == [runs[1].name, runs[0].name]
    assert resolve_run_dir("golden", parse_store(pg_db)) == runs[1].resolve()


def test_pg_and_sqlite_hold_the_same_serving_fault_rows(pg_db: str, tmp_path: Path) -> None:
    run = make_fault_run(tmp_path / "runs")
    found = []
    for loc in (parse_store(pg_db), tmp_path / "orch.db"):
        with ResultsStore.open(loc) as s:
            s.ingest(run)
            s.ingest(run)  # idempotent
            found.append([tuple(r[i] for i in range(len(r))) for r in s.conn.execute(
                "SELECT * FROM serving_faults ORDER BY step_id, idx")])  # fmt: skip
    assert found[0] == found[1] and len(found[0]) == 2
    assert found[0][0][3:6] == ("kill-worker", "localhost:engine", 1)


def test_newer_pg_store_is_refused(pg_db: str) -> None:
    with ResultsStore.open(pg_db) as s:
        s.conn.execute("UPDATE orch_schema SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(ConfigError, match="schema"):
        ResultsStore.open(pg_db)


def test_password_comes_from_the_pgpass_file_only(pg: PgServer, pg_db: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    empty = tmp_path / "empty-pgpass"
    empty.write_text("")
    empty.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(empty))
    with pytest.raises(InfraError) as e:
        ResultsStore.open(pg_db)
    assert pg.password not in str(e.value) and e.value.hint is not None and "pgpass" in e.value.hint
    with pytest.raises(ConfigError):
        ResultsStore.open(pg_db.replace("orch@", f"orch:{pg.password}@"))


def test_service_file_names_the_server(pg: PgServer, pg_db: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    db = pg_db.rsplit("/", 1)[1]
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[orchstore]\nhost=127.0.0.1\nport={pg.port}\nuser=orch\ndbname={db}\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    url = pg_url("postgresql:///?service=orchstore")
    with ResultsStore.open(url) as s:
        assert s.version == SCHEMA_VERSION
        assert s.conn.execute("SELECT current_database() AS d").fetchall()[0]["d"] == db


def test_scale_test_refuses_a_password_store_before_it_makes_a_run_directory(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "ORCH_STORE": "postgresql://orch:hunter2@127.0.0.1/orch"}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "scale-test", "--plan", "smoke", "--out",
                           str(tmp_path / "runs")], capture_output=True, text=True, env=env, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "hunter2" not in proc.stdout + proc.stderr and ".pgpass" in proc.stdout + proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
