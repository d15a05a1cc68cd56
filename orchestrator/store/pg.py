"""The PostgreSQL side of the results store: a connection that speaks the SQLite store's SQL.

One schema, two dialects. The store's statements are written once (db.py) with `?` placeholders
and portable SQL; this module adapts them:

- placeholders: `?` becomes `%s` (psycopg); the store's SQL has no other `?` nor `%`;
- DDL: INTEGER becomes BIGINT and REAL DOUBLE PRECISION (SQLite's are 8 bytes; size_bytes passes
  2**31), and the column `user` (a reserved word in PostgreSQL) is quoted;
- schema version: the table orch_schema instead of SQLite's PRAGMA user_version;
- writers are serialised by a transaction-level advisory lock, as BEGIN IMMEDIATE does in SQLite.

psycopg 3 (the `postgres` extra) is imported only when a postgresql:// store is opened. libpq
finds the password in ~/.pgpass ($PGPASSFILE) or the service file; the URL never carries it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from orchestrator.errors import ConfigError, InfraError
from orchestrator.store.location import PgUrl

# pg_advisory_xact_lock key of the store's writers ("orch" in ASCII).
WRITE_LOCK = 0x6F726368
_DDL = [
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"(?<![\w\"])user(?= TEXT\b)"), '"user"'),
]


def ddl(stmt: str) -> str:
    """A migration statement of db.MIGRATIONS in PostgreSQL's dialect."""
    for pat, repl in _DDL:
        stmt = pat.sub(repl, stmt)
    return stmt


class Row(dict[str, Any]):
    """A result row readable by column name and by position, like sqlite3.Row."""

    def __init__(self, names: Sequence[str], values: Sequence[Any]) -> None:
        super().__init__(zip(names, values, strict=True))
        self._values = tuple(values)

    def __getitem__(self, key: str | int) -> Any:
        return self._values[key] if isinstance(key, int) else super().__getitem__(key)


class Cursor:
    """The rows of one statement (fetchone / fetchall / iteration)."""

    def __init__(self, rows: list[Row]) -> None:
        self._rows = rows

    def fetchone(self) -> Row | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Row]:
        return list(self._rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)


class PgConnection:
    """A psycopg connection in autocommit mode (transactions are the store's BEGIN/COMMIT)."""

    def __init__(self, conn: Any, url: PgUrl) -> None:
        self._conn, self.url = conn, url

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        import psycopg

        try:
            with self._conn.cursor() as cur:
                cur.execute(sql.replace("?", "%s"), args)
                if cur.description is None:
                    return Cursor([])
                names = [d.name for d in cur.description]
                return Cursor([Row(names, r) for r in cur.fetchall()])
        except psycopg.Error as e:
            raise InfraError(f"results store {self.url}: {e}".strip()) from e

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> Cursor:
        """One statement over many rows (psycopg batches them in pipeline mode); returns no rows."""
        import psycopg

        rows = list(seq)
        if rows:
            try:
                with self._conn.cursor() as cur:
                    cur.executemany(sql.replace("?", "%s"), rows)
            except psycopg.Error as e:
                raise InfraError(f"results store {self.url}: {e}".strip()) from e
        return Cursor([])

    def close(self) -> None:
        self._conn.close()

    # --- dialect ---------------------------------------------------------------------------------

    def begin(self) -> None:
        self.execute("BEGIN")
        self.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))

    def user_version(self) -> int:
        if self.execute("SELECT to_regclass('orch_schema') AS t").fetchall()[0]["t"] is None:
            return 0
        row = self.execute("SELECT max(version) AS v FROM orch_schema").fetchone()
        return int(row["v"]) if row is not None and row["v"] is not None else 0

    def set_user_version(self, version: int) -> None:
        self.execute("CREATE TABLE IF NOT EXISTS orch_schema (version BIGINT NOT NULL)")
        self.execute("DELETE FROM orch_schema")
        self.execute("INSERT INTO orch_schema VALUES (?)", (version,))


def connect(url: PgUrl, timeout_s: int = 10) -> PgConnection:
    """Connect to the store's database; InfraError when the server refuses, ConfigError without psycopg."""
    try:
        import psycopg
    except ImportError as e:
        raise ConfigError(
            f"results store {url}: PostgreSQL needs the psycopg driver",
            hint="pip install 'orch[postgres]'",
        ) from e
    try:
        conn = psycopg.connect(url.url, autocommit=True, connect_timeout=timeout_s, application_name="orch")
    except psycopg.Error as e:
        raise InfraError(
            f"results store {url}: {e}".strip(),
            hint="check the server, and the password in ~/.pgpass ($PGPASSFILE) or the service file",
        ) from e
    return PgConnection(conn, url)
