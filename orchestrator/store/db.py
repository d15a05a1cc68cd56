"""The SQLite results store: runs, steps, collective rows, fingerprints, faults, verdicts, baselines.

The run directory stays the source of truth; the store is an index over many runs for history,
baselines and comparisons. `ingest(run_dir)` rebuilds a run's rows from its directory alone, in
one transaction, so it can be repeated at any time (after each step, after a crash, on a copied
run directory). WAL mode: readers (orch runs list) never block the writer (a running scale-test).
On a network filesystem (NFS, Lustre, ...: netfs.py reads the mount table) WAL is unsafe, and the
store uses the rollback journal (DELETE) instead; a team's shared history can live in PostgreSQL
(pg.py), with the same schema, migrations and SQL.

Location: $ORCH_STORE (a path or a postgresql:// URL without password, location.py), else
`orch.db` beside the run directories (runs/orch.db).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import Field

from orchestrator.errors import ConfigError, InfraError, OrchError
from orchestrator.metrics.serving_baseline import BaselineLevel, ServingBaselineFigures, StoredP99
from orchestrator.metrics.verdict import BaselineBusbw
from orchestrator.models.base import StrictModel
from orchestrator.models.events import RecoveryDone, RunEvent, RunFinished, RunStarted, StepDone
from orchestrator.models.fingerprint import gpu_model_of
from orchestrator.models.fleet import FleetBaseline, NodeKind, NodeSample
from orchestrator.models.run import RunRecord
from orchestrator.models.serving_recovery import ServingFaultResult
from orchestrator.models.serving_results import LevelSummary, ServingCost
from orchestrator.safefs import create_private, make_dir
from orchestrator.store import pg
from orchestrator.store.load import load_run
from orchestrator.store.location import STORE_ENV as STORE_ENV
from orchestrator.store.location import STORE_NAME as STORE_NAME
from orchestrator.store.location import PgUrl, StoreLocation, default_store, parse_store
from orchestrator.store.netfs import JournalMode, Mount, journal_mode_for
from orchestrator.store.pg import PgConnection
from orchestrator.store.rundir import RunDir

# Forward-only migrations: MIGRATIONS[i] takes the schema from version i to i + 1. Never edit a
# released entry; append a new one. PRAGMA user_version holds the version.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY, run_dir TEXT NOT NULL, plan TEXT NOT NULL, backend TEXT NOT NULL,
        status TEXT NOT NULL, exit_code INTEGER, started_at TEXT, finished_at TEXT, wall_s REAL,
        user TEXT, host TEXT, nodes TEXT, steps_planned INTEGER NOT NULL, steps_done INTEGER NOT NULL,
        ingested_at TEXT NOT NULL
    );
    CREATE INDEX runs_plan_started ON runs (plan, started_at);
    CREATE TABLE steps (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, step_id TEXT NOT NULL,
        idx INTEGER NOT NULL, nnodes INTEGER NOT NULL, ranks_per_node INTEGER NOT NULL,
        world_size INTEGER NOT NULL, nodes TEXT NOT NULL, job_id TEXT, job_state TEXT,
        verdict TEXT NOT NULL, reasons TEXT NOT NULL, PRIMARY KEY (run_id, step_id)
    );
    CREATE TABLE coll_rows (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, step_id TEXT NOT NULL,
        collective TEXT NOT NULL, size_bytes INTEGER NOT NULL, nranks INTEGER NOT NULL, dtype TEXT,
        oop_time_us REAL, oop_algbw_gbs REAL, oop_busbw_gbs REAL, oop_wrong INTEGER,
        ip_time_us REAL, ip_algbw_gbs REAL, ip_busbw_gbs REAL, ip_wrong INTEGER,
        PRIMARY KEY (run_id, step_id, collective, size_bytes)
    );
    CREATE TABLE summaries (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, step_id TEXT NOT NULL,
        collective TEXT NOT NULL, size_bytes INTEGER NOT NULL, busbw_gbs REAL NOT NULL,
        algbw_gbs REAL NOT NULL, efficiency REAL, wrong INTEGER NOT NULL,
        PRIMARY KEY (run_id, step_id, collective)
    );
    CREATE TABLE node_verdicts (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, node TEXT NOT NULL,
        verdict TEXT NOT NULL, PRIMARY KEY (run_id, node)
    );
    CREATE TABLE fingerprints (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, node TEXT NOT NULL,
        key TEXT NOT NULL, value TEXT, PRIMARY KEY (run_id, node, key)
    );
    CREATE TABLE recoveries (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, fault_id TEXT NOT NULL,
        fault TEXT NOT NULL, target TEXT NOT NULL, step_id TEXT, repeat INTEGER NOT NULL,
        injected_at TEXT NOT NULL, detect_s REAL, recover_s REAL, restore_s REAL, steps_lost INTEGER,
        outcome TEXT NOT NULL, PRIMARY KEY (run_id, fault_id)
    );
    """,
    """
    CREATE TABLE baselines (
        name TEXT PRIMARY KEY, run_id TEXT NOT NULL, set_at TEXT NOT NULL, note TEXT
    );
    """,
    # GPU telemetry of each step (docs/telemetry.md): the step's figures, and each node's
    """
    CREATE TABLE step_telemetry (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, step_id TEXT NOT NULL,
        interval_s REAL NOT NULL, mean_power_w REAL, gbs_per_w TEXT NOT NULL, notes TEXT NOT NULL,
        PRIMARY KEY (run_id, step_id)
    );
    CREATE TABLE node_telemetry (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, step_id TEXT NOT NULL,
        node TEXT NOT NULL, tool TEXT NOT NULL, samples INTEGER NOT NULL, gpus TEXT NOT NULL,
        mean_power_w REAL, max_temperature_c REAL, min_sm_clock_mhz REAL, throttled TEXT NOT NULL,
        new_ecc TEXT NOT NULL, PRIMARY KEY (run_id, step_id, node)
    );
    """,
    # Serving steps (docs/serving.md): each step, and the figures of each load level, for the
    # whole step (node '') and for each node that served (replicas)
    """
    CREATE TABLE serving_steps (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, step_id TEXT NOT NULL,
        idx INTEGER NOT NULL, workload TEXT NOT NULL, engine TEXT NOT NULL, replicas INTEGER NOT NULL,
        nodes TEXT NOT NULL, job_ids TEXT NOT NULL, verdict TEXT NOT NULL, reasons TEXT NOT NULL,
        load_to_health_s REAL, load_to_first_answer_s REAL, PRIMARY KEY (run_id, step_id)
    );
    CREATE TABLE serving_levels (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, step_id TEXT NOT NULL,
        level TEXT NOT NULL, node TEXT NOT NULL, n INTEGER NOT NULL, ok INTEGER NOT NULL,
        errors INTEGER NOT NULL, aborted INTEGER NOT NULL, duration_s REAL NOT NULL,
        ttft_n INTEGER NOT NULL, ttft_p50_ms REAL, ttft_p95_ms REAL, ttft_p99_ms REAL,
        itl_n INTEGER NOT NULL, itl_p50_ms REAL, itl_p95_ms REAL, itl_p99_ms REAL,
        tpot_n INTEGER NOT NULL, tpot_p50_ms REAL, tpot_p95_ms REAL, tpot_p99_ms REAL,
        e2e_n INTEGER NOT NULL, e2e_p50_ms REAL, e2e_p95_ms REAL, e2e_p99_ms REAL,
        output_tokens_per_s REAL, requests_per_s REAL, error_rate REAL, goodput REAL,
        cost_per_request REAL, cost_per_million_output_tokens REAL,
        PRIMARY KEY (run_id, step_id, level, node)
    );
    """,
    # Faults injected into serving steps (docs/serving.md, "Faults during serving"): each injection
    # (idx: its place in the step's faults) with its recovery figures, seconds after injection
    """
    CREATE TABLE serving_faults (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, step_id TEXT NOT NULL,
        idx INTEGER NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL, repeat INTEGER NOT NULL,
        level TEXT NOT NULL, injected_at TEXT NOT NULL, outcome TEXT NOT NULL, status TEXT,
        to_first_failure_s REAL, to_first_success_s REAL, to_steady_s REAL, outage_s REAL,
        failed INTEGER, aborted INTEGER, ttft_during_n INTEGER, ttft_during_p99_ms REAL,
        ttft_after_n INTEGER, ttft_after_p99_ms REAL, restarts INTEGER NOT NULL,
        PRIMARY KEY (run_id, step_id, idx)
    );
    """,
    # The engine variant a serving step ran (the stack's serving.engines[].variants; NULL: none,
    # and for steps stored before version 6)
    """
    ALTER TABLE serving_steps ADD COLUMN variant TEXT;
    """,
    # The fleet baseline (docs/fleet.md): each node's kind in each run (gpu_vendor, GPU model;
    # runs stored before version 7 have none until `orch runs ingest`), and the baselines built,
    # by content hash (body: the FleetBaseline's JSON)
    """
    CREATE TABLE node_kinds (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, node TEXT NOT NULL,
        vendor TEXT NOT NULL, model TEXT, PRIMARY KEY (run_id, node)
    );
    CREATE TABLE fleet_baselines (
        sha256 TEXT PRIMARY KEY, built_at TEXT NOT NULL, body TEXT NOT NULL
    );
    """,
    # The field's words (docs/serving.md, "Metrics"): the share of requests meeting every SLO,
    # stored as goodput until version 8, is slo_attainment; goodput is those requests per second
    # (for older rows: the share x n over the span, the same figure)
    """
    ALTER TABLE serving_levels RENAME COLUMN goodput TO slo_attainment;
    ALTER TABLE serving_levels ADD COLUMN request_goodput REAL;
    UPDATE serving_levels SET request_goodput = ROUND(slo_attainment * n) / duration_s
        WHERE slo_attainment IS NOT NULL AND duration_s > 0;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


_STORE_HINT = (
    "--store (or ORCH_STORE) names the results store: a SQLite file such as runs/orch.db, "
    "or a postgresql:// URL"
)


def default_store_path(runs_root: Path | None = None) -> StoreLocation:
    """$ORCH_STORE when set (a path or a postgresql:// URL), else <runs_root>/orch.db."""
    return default_store(runs_root)


class RunRow(StrictModel):
    """One run as `orch runs list` shows it."""

    run_id: str
    run_dir: Path
    plan: str
    backend: str
    status: str
    exit_code: int | None
    started_at: datetime | None
    wall_s: float | None
    user: str | None
    host: str | None
    nodes: list[str] = Field(default_factory=list)
    steps_planned: int
    steps_done: int


class Baseline(StrictModel):
    name: str
    run_id: str
    set_at: datetime
    note: str | None = None


def _dt(text: object) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) and text else None


class ResultsStore:
    """An open results store; use as a context manager (ResultsStore.open(path))."""

    def __init__(self, conn: sqlite3.Connection | PgConnection, path: StoreLocation) -> None:
        self.conn, self.path = conn, path
        # SQLite only: "wal", or "delete" on a network filesystem (then netfs_mount is that mount).
        self.journal_mode: JournalMode | None = None
        self.netfs_mount: Mount | None = None

    @classmethod
    def open(cls, path: StoreLocation | str, *, create: bool = True) -> ResultsStore:
        """Open (create unless ``create`` is False, migrate) the store at path: a SQLite file or a
        PostgreSQL URL.

        Raises:
            ConfigError: path is a folder or not an SQLite file (a wrong --store / ORCH_STORE), the
                store is missing and ``create`` is False, a URL carries a password, or the schema
                is too new.
            InfraError: the database or the filesystem fails.
        """
        path = parse_store(path) if isinstance(path, str) else path
        if isinstance(path, PgUrl):
            from orchestrator.store.pg import connect

            store = cls(connect(path), path)
            try:
                store.migrate()
            except BaseException:
                store.conn.close()
                raise
            return store
        if path.is_dir():
            raise ConfigError(f"results store {path} is a folder", hint=_STORE_HINT)
        if not create and not path.exists():
            raise ConfigError(f"no results store at {path}", hint=_STORE_HINT)
        try:
            make_dir(path.parent)
            mode, mount = journal_mode_for(path)
            # SQLite gives -wal and -shm the database file's mode: make that one 0600 (0640) first.
            create_private(path)
            conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA journal_mode={mode.upper()}")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            store = cls(conn, path)
            store.journal_mode, store.netfs_mount = mode, mount
            store.migrate()
        except sqlite3.DatabaseError as e:
            if getattr(e, "sqlite_errorname", "") == "SQLITE_NOTADB":
                raise ConfigError(f"results store {path} is not an SQLite file", hint=_STORE_HINT) from e
            if getattr(e, "sqlite_errorname", "") == "SQLITE_FULL":
                raise InfraError(
                    f"results store {path}: no space left on its filesystem ({e})", hint="free space there"
                ) from e
            raise InfraError(f"results store {path}: {e}", hint="check the file, or move it away") from e
        except sqlite3.Error as e:
            raise InfraError(f"results store {path}: {e}", hint="check the file, or move it away") from e
        except OSError as e:
            raise InfraError(f"results store {path}: {e.strerror}") from e
        return store

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection | PgConnection]:
        if isinstance(self.conn, PgConnection):
            self.conn.begin()
        else:
            self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    @property
    def version(self) -> int:
        if isinstance(self.conn, PgConnection):
            return self.conn.user_version()
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self) -> None:
        """Bring the schema to SCHEMA_VERSION, one transaction per step; refuses a newer store."""
        if self.version > SCHEMA_VERSION:
            raise ConfigError(
                f"results store {self.path} has schema {self.version}; "
                f"this orch knows up to {SCHEMA_VERSION}",
                hint="upgrade orch",
            )
        while self.version < SCHEMA_VERSION:
            target = self.version + 1
            with self._tx() as c:
                if self.version != target - 1:  # another process migrated while we waited for the lock
                    continue
                for stmt in MIGRATIONS[target - 1].split(";"):
                    if stmt.strip():
                        c.execute(pg.ddl(stmt) if isinstance(c, PgConnection) else stmt)
                if isinstance(c, PgConnection):
                    c.set_user_version(target)
                else:
                    c.execute(f"PRAGMA user_version = {target}")

    # --- writing -------------------------------------------------------------------------------

    def ingest(self, run_dir: Path) -> RunRecord:
        """(Re)load one run from its directory; idempotent. Raises ConfigError for a non-run dir."""
        rec = load_run(run_dir)
        now = datetime.now(UTC).isoformat()
        rid = rec.run_id
        with self._tx() as c:
            c.execute("DELETE FROM runs WHERE run_id = ?", (rid,))
            c.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    rid, str(run_dir.resolve()), rec.plan_name, rec.backend, rec.status, rec.exit_code,
                    rec.started_at.isoformat() if rec.started_at else None,
                    rec.finished_at.isoformat() if rec.finished_at else None,
                    rec.wall_s, rec.user, rec.host,
                    json.dumps(rec.cluster.names if rec.cluster else sorted(rec.nodes)),
                    len(rec.step_ids) + len(rec.serving_ids),
                    len([s for s in rec.steps if s.verdict != "skipped"])
                    + len([s for s in rec.serving if s.verdict != "skipped"]),
                    now,
                ),
            )  # fmt: skip
            for s in rec.steps:
                st = s.step
                c.execute(
                    "INSERT INTO steps VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (rid, st.id, st.index, st.nnodes, st.ranks_per_node, st.world_size,
                     json.dumps(st.nodes), s.job_id, s.job.raw_state if s.job else None, s.verdict,
                     json.dumps(s.reasons)),
                )  # fmt: skip
                c.executemany(
                    "INSERT INTO coll_rows VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    _last_wins(4, [
                        (rid, st.id, r.collective, r.size_bytes, r.nranks, r.dtype,
                         r.out_of_place.time_us, r.out_of_place.algbw_gbs, r.out_of_place.busbw_gbs,
                         r.out_of_place.wrong,
                         r.in_place.time_us if r.in_place else None,
                         r.in_place.algbw_gbs if r.in_place else None,
                         r.in_place.busbw_gbs if r.in_place else None,
                         r.in_place.wrong if r.in_place else None)
                        for r in s.rows
                    ]),
                )  # fmt: skip
                c.executemany(
                    "INSERT INTO summaries VALUES (?,?,?,?,?,?,?,?)",
                    [
                        (rid, st.id, cs.collective, cs.size_bytes, cs.busbw_gbs, cs.algbw_gbs,
                         cs.efficiency, cs.wrong)
                        for cs in s.summary.values()
                    ],
                )  # fmt: skip
                if (t := s.telemetry) is not None:
                    c.execute(
                        "INSERT INTO step_telemetry VALUES (?,?,?,?,?,?)",
                        (rid, st.id, t.interval_s, t.mean_power_w, json.dumps(t.gbs_per_w),
                         json.dumps(t.notes)),
                    )  # fmt: skip
                    c.executemany(
                        "INSERT INTO node_telemetry VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        _last_wins(3, [
                            (rid, st.id, n.node, n.tool, n.samples, json.dumps(n.gpus), n.mean_power_w,
                             n.max_temperature_c, n.min_sm_clock_mhz, json.dumps(n.throttled),
                             json.dumps(n.new_ecc))
                            for n in t.nodes
                        ]),
                    )  # fmt: skip
            for sv in rec.serving:
                st2 = sv.step
                health = [e.load_to_health_s for e in sv.engines if e.load_to_health_s is not None]
                first = [e.load_to_first_answer_s for e in sv.engines if e.load_to_first_answer_s is not None]
                c.execute(
                    "INSERT INTO serving_steps VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (rid, st2.id, st2.index, st2.workload, st2.engine, st2.replicas, json.dumps(st2.nodes),
                     json.dumps([e.job_id for e in sv.engines if e.job_id]), sv.verdict,
                     json.dumps(sv.reasons), max(health, default=None), max(first, default=None),
                     st2.variant),
                )  # fmt: skip
                c.executemany(
                    _SERVING_LEVELS_INSERT,
                    _last_wins(4, [
                        _serving_level_row(rid, st2.id, lv.level, node, s_, lv.cost if node == "" else None)
                        for lv in sv.levels
                        for node, s_ in [("", lv.summary), *lv.per_node.items()]
                        if s_ is not None
                    ]),
                )  # fmt: skip
                c.executemany(
                    "INSERT INTO serving_faults VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [_serving_fault_row(rid, st2.id, i, f) for i, f in enumerate(sv.faults)],
                )
            c.executemany(
                "INSERT INTO node_verdicts VALUES (?,?,?)", [(rid, n, v) for n, v in rec.nodes.items()]
            )
            c.executemany(
                "INSERT INTO fingerprints VALUES (?,?,?,?)", _last_wins(3, _fingerprint_rows(rid, rec))
            )
            c.executemany("INSERT INTO node_kinds VALUES (?,?,?,?)", _last_wins(2, _kind_rows(rid, rec)))
            c.executemany(
                "INSERT INTO recoveries VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                _last_wins(2, [
                    (rid, f.fault_id, f.fault, f.target, f.step, f.repeat, f.injected_at.isoformat(),
                     f.timings.detect_s, f.timings.recover_s, f.timings.restore_s, f.timings.steps_lost,
                     f.outcome)
                    for f in rec.recovery
                ]),
            )  # fmt: skip
        return rec

    def set_baseline(self, name: str, run_id: str, note: str | None = None) -> Baseline:
        """Name a stored run as a baseline (replacing an earlier one of that name)."""
        if self.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise ConfigError(f"run {run_id} is not in the results store {self.path}")
        b = Baseline(name=name, run_id=run_id, set_at=datetime.now(UTC), note=note)
        with self._tx() as c:
            c.execute("DELETE FROM baselines WHERE name = ?", (b.name,))
            c.execute(
                "INSERT INTO baselines VALUES (?,?,?,?)",
                (b.name, b.run_id, b.set_at.isoformat(), b.note),
            )
        return b

    # --- reading -------------------------------------------------------------------------------

    def _run_row(self, r: sqlite3.Row | pg.Row) -> RunRow:
        return RunRow(
            run_id=r["run_id"], run_dir=Path(r["run_dir"]), plan=r["plan"], backend=r["backend"],
            status=r["status"], exit_code=r["exit_code"], started_at=_dt(r["started_at"]),
            wall_s=r["wall_s"], user=r["user"], host=r["host"], nodes=json.loads(r["nodes"] or "[]"),
            steps_planned=r["steps_planned"], steps_done=r["steps_done"],
        )  # fmt: skip

    def runs(
        self, *, plan: str | None = None, since: datetime | None = None, limit: int | None = None
    ) -> list[RunRow]:
        """Stored runs, newest first."""
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if plan:
            sql += " AND plan = ?"
            args.append(plan)
        if since:
            sql += " AND started_at >= ?"
            args.append(since.isoformat())
        sql += " ORDER BY started_at DESC NULLS LAST, run_id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [self._run_row(r) for r in self.conn.execute(sql, args)]

    def run(self, ref: str) -> RunRow | None:
        """A run by id or unique id prefix, or a baseline's run by the baseline's name."""
        row = self.conn.execute("SELECT * FROM runs WHERE run_id = ?", (ref,)).fetchone()
        if row is None:
            b = self.conn.execute("SELECT run_id FROM baselines WHERE name = ?", (ref,)).fetchone()
            if b is not None:
                row = self.conn.execute("SELECT * FROM runs WHERE run_id = ?", (b[0],)).fetchone()
        if row is None:
            hits = self.conn.execute(
                "SELECT * FROM runs WHERE run_id LIKE ? ESCAPE '\\'", (_like_prefix(ref),)
            ).fetchall()
            if len(hits) > 1:
                raise ConfigError(f"{ref!r} matches {len(hits)} runs", hint="give more of the run id")
            row = hits[0] if hits else None
        return self._run_row(row) if row is not None else None

    def baselines(self) -> list[Baseline]:
        return [
            Baseline(name=r["name"], run_id=r["run_id"], set_at=datetime.fromisoformat(r["set_at"]),
                     note=r["note"])
            for r in self.conn.execute("SELECT * FROM baselines ORDER BY name")
        ]  # fmt: skip

    def baseline(self, name: str) -> Baseline | None:
        return next((b for b in self.baselines() if b.name == name), None)

    def baseline_busbw(self, name: str) -> BaselineBusbw:
        """busbw by (step, collective, size) of the baseline's run; raises ConfigError if unknown."""
        b = self.baseline(name)
        if b is None:
            raise ConfigError(f"no baseline named {name!r}", hint="orch baseline set RUN --name " + name)
        return self.busbw(b.run_id)

    def serving_baseline(self, name: str) -> ServingBaselineFigures:
        """The serving figures of a baseline's run: its serving steps (replicas) and each level's
        step-wide row of serving_levels (node ''); raises ConfigError when no baseline has that name
        or its run has no serving level in the store."""
        b = self.baseline(name)
        if b is None:
            known = ", ".join(x.name for x in self.baselines()) or "none"
            raise ConfigError(
                f"no baseline named {name!r} in the results store {self.path} (known: {known})",
                hint="orch baseline list; set one with orch baseline set RUN --name " + name,
            )
        steps = {
            str(r["step_id"]): int(r["replicas"])
            for r in self.conn.execute(
                "SELECT step_id, replicas FROM serving_steps WHERE run_id = ?", (b.run_id,)
            )
        }
        figures = ("ttft", "itl", "tpot", "e2e")
        levels = [
            BaselineLevel(
                step=r["step_id"],
                level=r["level"],
                replicas=steps.get(r["step_id"]),
                ok=r["ok"],
                output_tokens_per_s=r["output_tokens_per_s"],
                p99={m: StoredP99(n=r[f"{m}_n"], p99=r[f"{m}_p99_ms"]) for m in figures},
            )
            for r in self.conn.execute(
                "SELECT * FROM serving_levels WHERE run_id = ? AND node = '' ORDER BY step_id, level",
                (b.run_id,),
            )
        ]
        if not levels:
            raise ConfigError(
                f"baseline {name!r} (run {b.run_id}) has no serving levels in the results store {self.path}",
                hint="set a run with serving steps as this baseline: orch baseline set RUN --name " + name,
            )
        return ServingBaselineFigures(name=name, run_id=b.run_id, levels=levels, steps=steps)

    def busbw(self, run_id: str) -> BaselineBusbw:
        rows = self.conn.execute(
            "SELECT step_id, collective, size_bytes, oop_busbw_gbs FROM coll_rows WHERE run_id = ?", (run_id,)
        )
        return {(r[0], r[1], int(r[2])): float(r[3]) for r in rows}

    def summaries(self, run_ids: list[str]) -> list[dict[str, Any]]:
        """Largest-size summary rows (run_id, step_id, collective, busbw_gbs, efficiency) of runs."""
        if not run_ids:
            return []
        wanted = set(run_ids)
        rows = self.conn.execute(
            "SELECT s.run_id, s.step_id, s.collective, s.size_bytes, s.busbw_gbs, s.efficiency, t.idx "
            "FROM summaries s JOIN steps t USING (run_id, step_id)"
        )
        return [dict(r) for r in rows if r["run_id"] in wanted]

    def node_samples(self) -> list[NodeSample]:
        """Every busbw figure (out of place) of a passed single-node or node-pair step, with its run."""
        rows = self.conn.execute(
            "SELECT s.run_id, r.started_at, s.step_id, s.nodes, s.ranks_per_node, c.collective, "
            "c.size_bytes, c.oop_busbw_gbs FROM steps s JOIN runs r ON r.run_id = s.run_id "
            "JOIN coll_rows c ON c.run_id = s.run_id AND c.step_id = s.step_id "
            "WHERE s.nnodes IN (1, 2) AND s.verdict = 'pass' AND c.oop_busbw_gbs IS NOT NULL"
        )
        return [
            NodeSample(run_id=r[0], started_at=_dt(r[1]), step_id=r[2], nodes=json.loads(r[3]),
                       ranks_per_node=r[4], collective=r[5], size_bytes=int(r[6]), busbw_gbs=float(r[7]))
            for r in rows
        ]  # fmt: skip

    def node_kinds(self) -> dict[tuple[str, str], NodeKind]:
        """(run id, node) -> the node's kind in that run (none for runs stored before version 7)."""
        rows = self.conn.execute("SELECT run_id, node, vendor, model FROM node_kinds")
        return {(r[0], r[1]): NodeKind(vendor=r[2], model=r[3]) for r in rows}

    def save_fleet_baseline(self, b: FleetBaseline) -> None:
        """Store a fleet baseline under its content hash (the same hash again: kept as first stored)."""
        with self._tx() as c:
            if c.execute("SELECT 1 FROM fleet_baselines WHERE sha256 = ?", (b.sha256,)).fetchone() is None:
                c.execute(
                    "INSERT INTO fleet_baselines VALUES (?,?,?)",
                    (b.sha256, b.built_at.isoformat(), b.model_dump_json()),
                )

    def fleet_baseline(self, ref: str | None = None) -> FleetBaseline | None:
        """The fleet baseline whose hash is (or starts with) ref, else the newest one; None: none.

        Raises ConfigError when ref matches several baselines.
        """
        if ref is None:
            row = self.conn.execute(
                "SELECT body FROM fleet_baselines ORDER BY built_at DESC, sha256 LIMIT 1"
            ).fetchone()
            return FleetBaseline.model_validate_json(row[0]) if row is not None else None
        want = ref if ref.startswith("sha256:") else "sha256:" + ref
        hits = self.conn.execute(
            "SELECT body FROM fleet_baselines WHERE sha256 LIKE ? ESCAPE '\\'", (_like_prefix(want),)
        ).fetchall()
        if len(hits) > 1:
            raise ConfigError(f"{ref!r} matches {len(hits)} fleet baselines", hint="give more of the hash")
        return FleetBaseline.model_validate_json(hits[0][0]) if hits else None

    def integrity_ok(self) -> bool:
        """SQLite's integrity_check; PostgreSQL checks its own pages, and answers a query."""
        if isinstance(self.conn, PgConnection):
            return bool(self.conn.execute("SELECT 1 AS ok").fetchall()[0]["ok"] == 1)
        return bool(self.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok")


_SERVING_LEVELS_INSERT = (
    "INSERT INTO serving_levels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)  # 32 columns: _serving_level_row


def _serving_level_row(
    rid: str, step_id: str, level: str, node: str, s: LevelSummary, cost: ServingCost | None
) -> tuple[Any, ...]:
    """One row of serving_levels: a level's figures for the whole step (node '') or one node."""
    pcts = [v for p in (s.ttft_ms, s.itl_ms, s.tpot_ms, s.e2e_ms) for v in (p.n, p.p50, p.p95, p.p99)]
    return (
        rid, step_id, level, node, s.n, s.ok, s.errors, s.aborted, s.duration_s, *pcts,
        s.output_tokens_per_s, s.requests_per_s, s.error_rate, s.slo_attainment,
        cost.per_request if cost else None, cost.per_million_output_tokens if cost else None,
        s.request_goodput,
    )  # fmt: skip


def _serving_fault_row(rid: str, step_id: str, idx: int, f: ServingFaultResult) -> tuple[Any, ...]:
    """One row of serving_faults: an injection and its recovery (NULLs where it has none)."""
    r = f.recovery
    during, after = (r.ttft_during_ms, r.ttft_after_ms) if r else (None, None)
    return (
        rid, step_id, idx, f.kind, f.target, f.repeat, f.level,
        datetime.fromtimestamp(f.injected_at, UTC).isoformat(), f.outcome, r.status if r else None,
        r.to_first_failure_s if r else None, r.to_first_success_s if r else None,
        r.to_steady_s if r else None, r.outage_s if r else None, r.failed if r else None,
        r.aborted if r else None, during.n if during else None, during.p99 if during else None,
        after.n if after else None, after.p99 if after else None, len(f.restarts),
    )  # fmt: skip


def _last_wins(key_len: int, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """rows without repeats of their primary key (the first key_len values), the last one kept:
    what SQLite's INSERT OR REPLACE did, in SQL both dialects share."""
    return list({r[:key_len]: r for r in rows}.values())


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _fingerprint_rows(run_id: str, rec: RunRecord) -> list[tuple[str, str, str, str]]:
    """Flatten fingerprint.json (node -> field -> value) into rows."""
    if rec.fingerprint is None:
        return []
    return [
        (run_id, node, field, json.dumps(value))
        for node, fp in rec.fingerprint.nodes.items()
        for field, value in fp.model_dump(mode="json").items()
    ]


def _kind_rows(run_id: str, rec: RunRecord) -> list[tuple[str, str, str, str | None]]:
    """Each node's kind in the run: the inventory's gpu_vendor and gpu_model, else the GPU names of
    its fingerprint (a run without an inventory: none)."""
    if rec.cluster is None:
        return []
    fps = rec.fingerprint.nodes if rec.fingerprint else {}
    out: list[tuple[str, str, str, str | None]] = []
    for n in rec.cluster.nodes:
        fp = fps.get(n.name)
        seen = gpu_model_of(fp.gpus) if fp is not None and fp.gpus else None
        model = None if n.gpu_vendor == "none" else (n.gpu_model or seen)
        out.append((run_id, n.name, n.gpu_vendor, model))
    return out


def resolve_run_dir(ref: str, store_path: StoreLocation | None = None) -> Path:
    """A run directory from a path, a run id (or prefix) or a baseline name; raises ConfigError."""
    path = Path(ref)
    if (path / "journal.jsonl").exists() or (path / "plan.json").exists():
        return path
    sp = store_path or default_store_path()
    if isinstance(sp, PgUrl) or sp.exists():
        with ResultsStore.open(sp) as store:
            row = store.run(ref)
        if row is not None:
            return row.run_dir
    guess = sp.parent / ref if isinstance(sp, Path) else None
    if guess is not None and (guess / "journal.jsonl").exists():
        return guess
    raise ConfigError(f"no run {ref!r}: not a run directory, nor a run or baseline in {sp}",
                      hint="orch runs list")  # fmt: skip


class StoreListener:
    """Pipeline listener: ingests the run after its start, each finished step (or recovery-test
    repeat) and its end.

    A store failure never stops the run (the run directory is the source of truth; `orch runs
    ingest` rebuilds the store); it is journaled as store_error.
    """

    def __init__(self, path: StoreLocation) -> None:
        self.path = path
        self.run_dir: Path | None = None

    def event(self, ev: RunEvent) -> None:
        if isinstance(ev, RunStarted):
            self.run_dir = ev.run_dir
        if self.run_dir is None or not isinstance(ev, RunStarted | StepDone | RecoveryDone | RunFinished):
            return
        try:
            with ResultsStore.open(self.path) as store:
                store.ingest(self.run_dir)
        except (OrchError, sqlite3.Error, OSError) as e:
            with suppress(OrchError):
                RunDir(self.run_dir).event("store_error", store=str(self.path), error=str(e))
