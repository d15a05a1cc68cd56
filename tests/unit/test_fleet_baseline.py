"""The fleet baseline (certs/fleet.py): synthetic stores built through ResultsStore.ingest from run
folders whose certificates are issued by certs.service.issue, as `orch cert issue` does."""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_store_build import real_rows

from orchestrator.certs import digest, fleet, service
from orchestrator.metrics import decision
from orchestrator.metrics import verdict as V
from orchestrator.models.cert import Certificate
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.plan import Step
from orchestrator.models.run import RunResult, StepResult
from orchestrator.plan import resolve_plan
from orchestrator.scheduler.base import JobState, JobStatus
from orchestrator.store.db import MIGRATIONS, SCHEMA_VERSION, ResultsStore
from orchestrator.store.rundir import RunDir, atomic_write

T0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
NODES = [f"node{i}" for i in range(1, 9)]
# A healthy, noisy fleet: each node's own factor within +-12% (no pattern to it).
NOISY = dict(zip(NODES, (1.00, 0.91, 1.09, 0.95, 1.12, 0.88, 1.04, 0.97), strict=True))


def make_fleet_run(
    root: Path,
    run_id: str,
    single: dict[str, float],
    pair: dict[str, float],
    *,
    model: str = "H100",
    start: datetime = T0,
) -> Path:
    """A finished run of every node alone and every pair of nodes, all passed: a node's single
    busbw is the real collbench rows x single[node]; a pair's is x sqrt(pair[a] x pair[b])."""
    cluster = Cluster(
        source=Path("fleet.ini"),
        nodes=[Node(name=n, address=n, gpu_vendor="nvidia", gpu_model=model) for n in single],
    )
    plan = resolve_plan("smoke")
    rd = RunDir.create(root, run_id)
    rd.write_model("plan.json", plan)
    rd.write_model("inventory.json", cluster)
    groups = [[n] for n in single] + [list(p) for p in itertools.combinations(single, 2)]
    results = []
    for i, nodes in enumerate(groups):
        f = single[nodes[0]] if len(nodes) == 1 else math.sqrt(pair[nodes[0]] * pair[nodes[1]])
        st = Step(id="-".join(["s" if len(nodes) == 1 else "p", *nodes]), index=i, nnodes=len(nodes),
                  ranks_per_node=1, nodes=nodes, world_size=len(nodes), collectives=["all_reduce"],
                  sizes=plan.sizes.values())  # fmt: skip
        rows = []
        for r in real_rows():
            if r.collective != "all_reduce":
                continue
            oop = r.out_of_place.model_copy(update={"busbw_gbs": r.out_of_place.busbw_gbs * f})
            rows.append(r.model_copy(update={"nranks": len(nodes), "out_of_place": oop}))
        job = JobState(job_id=f"j{i}", status=JobStatus.COMPLETED, raw_state="COMPLETED")
        res = StepResult(step=st, job_id=f"j{i}", rows=rows, summary=V.summarize(rows), verdict="pass",
                         job=job)  # fmt: skip
        atomic_write(rd.step_dir(st.id) / "result.json", res.model_dump_json())
        results.append(res)
    result = RunResult(run_id=run_id, run_dir=rd.root, plan=plan.name, backend="local", status="accepted",
                       exit_code=0, steps=results, nodes=dict.fromkeys(single, "pass"),
                       wall_s=1.0)  # fmt: skip
    atomic_write(rd.root / "result.json", result.model_dump_json())
    events = [
        {"t": start.isoformat(), "event": "run_started", "run_id": run_id, "plan": plan.name,
         "backend": "local", "steps": [s.step.id for s in results], "pid": 999_999_999, "host": "gone"},
        {"t": (start + timedelta(seconds=9)).isoformat(), "event": "run_finished", "status": "accepted",
         "exit_code": 0, "wall_s": 1.0},
    ]  # fmt: skip
    rd.journal_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return rd.root


def _store(tmp_path: Path, *runs: Path, certify: bool = True) -> ResultsStore:
    db = ResultsStore.open(tmp_path / "orch.db")
    for r in runs:
        if certify:
            service.issue(r, now=T0 + timedelta(hours=1))
        db.ingest(r)
    return db


def test_baseline_is_the_median_and_mad_of_certified_nodes(tmp_path: Path) -> None:
    run = make_fleet_run(tmp_path, "r1", NOISY, NOISY)
    with _store(tmp_path, run) as db:
        b = fleet.build(db, now=T0)
    assert b.runs == ["r1"] and b.k == decision.K
    single = [f for f in b.figures if f.scope == "single"]
    biggest = max(single, key=lambda f: f.size_bytes)
    top = max(r.out_of_place.busbw_gbs for r in real_rows() if r.collective == "all_reduce"
              and r.size_bytes == biggest.size_bytes)  # fmt: skip
    values = sorted(top * v for v in NOISY.values())
    assert biggest.kind == "nvidia H100" and biggest.nodes == 8
    assert biggest.median_gbs == pytest.approx((values[3] + values[4]) / 2)
    ln = [math.log(v) for v in values]
    logs = sorted(abs(x - statistics.median(ln)) for x in ln)
    assert biggest.mad == pytest.approx((logs[3] + logs[4]) / 2)
    assert {f.scope for f in b.figures} == {"single", "pair"}
    assert b.sha256 == digest.sha256(b.model_dump(mode="json", exclude={"sha256", "built_at"}))


def test_a_healthy_noisy_fleet_names_no_outlier(tmp_path: Path) -> None:
    run = make_fleet_run(tmp_path, "r1", NOISY, NOISY)
    with _store(tmp_path, run) as db:
        assert fleet.outliers(db, fleet.build(db, now=T0)) == []


def test_a_throttled_link_that_passes_the_thresholds_is_an_outlier_on_pairs_only(tmp_path: Path) -> None:
    # node6's fabric at half speed (its pairs at about 70%): it passed every step (no threshold
    # failed, it is certified), and its single figures are its kind's; its pair figures are not.
    pair = {**NOISY, "node6": 0.50}
    run = make_fleet_run(tmp_path, "r1", NOISY, pair)
    with _store(tmp_path, run) as db:
        assert (run / "certs" / "node6.json").is_file()
        b = fleet.build(db, now=T0)
        found = fleet.outliers(db, b)
    assert found and {o.node for o in found} == {"node6"}
    assert {o.figure.scope for o in found} == {"pair"}
    o = found[-1]
    assert o.value_gbs < o.limit_gbs < o.figure.median_gbs and o.k == b.k and o.figure.mad > 0


def test_k_is_settable(tmp_path: Path) -> None:
    pair = {**NOISY, "node6": 0.50}
    run = make_fleet_run(tmp_path, "r1", NOISY, pair)
    with _store(tmp_path, run) as db:
        assert fleet.outliers(db, fleet.build(db, k=3.0, now=T0))
        assert fleet.outliers(db, fleet.build(db, k=50.0, now=T0)) == []


def test_only_certified_figures_make_the_baseline_and_kinds_stay_apart(tmp_path: Path) -> None:
    h100 = make_fleet_run(tmp_path, "r1", NOISY, NOISY)
    mi300 = make_fleet_run(tmp_path, "r2", {f"amd{i}": 2.0 for i in range(4)},
                           {f"amd{i}": 2.0 for i in range(4)}, model="MI300X")  # fmt: skip
    with _store(tmp_path, h100) as db:
        db.ingest(mi300)  # never certified: no figure of its own kind
        b = fleet.build(db, now=T0)
    assert {f.kind for f in b.figures} == {"nvidia H100"} and b.runs == ["r1"]


def test_the_baseline_is_stored_by_its_hash_and_found_by_a_prefix(tmp_path: Path) -> None:
    run = make_fleet_run(tmp_path, "r1", NOISY, NOISY)
    with _store(tmp_path, run) as db:
        b = fleet.build(db, now=T0)
        db.save_fleet_baseline(b)
        db.save_fleet_baseline(b)  # the same content again: one row
        assert db.fleet_baseline() == b
        assert db.fleet_baseline(b.sha256.removeprefix("sha256:")[:12]) == b
        assert fleet.intact(b) and not fleet.intact(b.model_copy(update={"k": 9.0}))


def test_a_certificate_names_the_baseline_and_an_outlier_is_refused(tmp_path: Path) -> None:
    run = make_fleet_run(tmp_path, "r1", NOISY, {**NOISY, "node6": 0.50})
    with _store(tmp_path, run) as db:
        db.save_fleet_baseline(b := fleet.build(db, now=T0))
        sha, reasons = fleet.judge_run(db, "r1")
    assert sha == b.sha256 and list(reasons) == ["node6"]
    res = service.issue(run, now=T0, baseline_sha256=sha, baseline_reasons=reasons)
    assert [r.node for r in res.refused] == ["node6"] and "fleet outlier: pair" in res.refused[0].reasons[0]
    cert = Certificate.model_validate_json((run / "certs" / "node1.json").read_text())
    assert cert.baseline_sha256 == b.sha256 and service.verify(run / "certs" / "node1.json").ok


def test_a_certificate_without_a_baseline_keeps_its_hash(tmp_path: Path) -> None:
    # issued before the fleet baseline existed: baseline_sha256 null in the hashed body; and a
    # format 1 file without the field at all: both verify as they are
    run = make_fleet_run(tmp_path, "r1", NOISY, NOISY)
    service.issue(run, now=T0)
    path = run / "certs" / "node1.json"
    data = json.loads(path.read_text())
    assert data["baseline_sha256"] is None and service.verify(path).ok
    body = {k: v for k, v in data.items() if k not in ("content_hash", "field_digests", "signature")}
    body["field_digests"] = data["field_digests"]
    assert digest.sha256(body) == data["content_hash"]
    old = {k: v for k, v in data.items() if k not in ("baseline_sha256", "content_hash", "field_digests")}
    old["format"] = 1
    sealed = digest.seal(old)
    assert "baseline_sha256" not in sealed and digest.changes(sealed) == []
    assert Certificate.model_validate(sealed).baseline_sha256 is None


def test_a_store_of_schema_6_is_read_and_its_runs_are_named_until_ingested(tmp_path: Path) -> None:
    run = make_fleet_run(tmp_path, "r1", NOISY, NOISY)
    service.issue(run, now=T0)
    path = tmp_path / "old.db"
    with ResultsStore.open(path) as db:
        db.ingest(run)
    conn = sqlite3.connect(path)  # back to what a schema-6 orch wrote
    conn.executescript(
        "DROP TABLE node_kinds; DROP TABLE fleet_baselines; "
        "ALTER TABLE serving_levels DROP COLUMN request_goodput; "
        "ALTER TABLE serving_levels RENAME COLUMN slo_attainment TO goodput; PRAGMA user_version = 6;"
    )  # and schema 8's rename of goodput undone
    conn.close()
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 7
    with ResultsStore.open(path) as db:
        assert db.version == SCHEMA_VERSION and db.run("r1") is not None
        b = fleet.build(db, now=T0)
        assert b.figures == [] and any("r1" in n and "orch runs ingest" in n for n in b.notes)
        db.ingest(run)
        assert fleet.build(db, now=T0).figures


def _orch(argv: list[str]) -> int:
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0)


def test_the_cli_builds_stores_lists_and_issues_against_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_fleet_run(tmp_path, "r1", NOISY, {**NOISY, "node6": 0.50})
    db = str(tmp_path / "orch.db")
    _store(tmp_path, run).conn.close()
    assert _orch(["fleet", "baseline", "--store", db, "--json"]) == 0
    sha = json.loads(capsys.readouterr().out)["sha256"]
    assert _orch(["fleet", "outliers", "--store", db, "--json"]) == 1
    listed = json.loads(capsys.readouterr().out)
    assert listed["baseline"] == sha and {o["node"] for o in listed["outliers"]} == {"node6"}
    assert _orch(["fleet", "outliers", "--store", db, "--baseline", sha[7:19]]) == 1
    assert "node6" in capsys.readouterr().out
    assert _orch(["cert", "issue", str(run), "--fleet-baseline", "latest", "--store", db]) == 1
    assert "fleet outlier" in capsys.readouterr().out
    cert = json.loads((run / "certs" / "node1.json").read_text())
    assert cert["baseline_sha256"] == sha
    assert _orch(["fleet", "outliers", "--store", db, "--baseline", "0" * 12]) == 2


def test_a_stored_baseline_edited_in_the_store_is_refused(tmp_path: Path) -> None:
    from orchestrator.errors import ConfigError

    run = make_fleet_run(tmp_path, "r1", NOISY, NOISY)
    with _store(tmp_path, run) as db:
        b = fleet.build(db, now=T0)
        db.save_fleet_baseline(b)
        looser = b.model_copy(update={"k": 50.0}).model_dump_json()
        db.conn.execute("UPDATE fleet_baselines SET body = ?", (looser,))
        with pytest.raises(ConfigError, match="no longer matches its hash"):
            fleet.judge_run(db, "r1")
        with pytest.raises(ConfigError, match="no fleet baseline"):
            fleet.judge_run(db, "r1", "f" * 20)


def test_an_old_run_and_its_format_1_certificate_feed_the_baseline_unchanged(tmp_path: Path) -> None:
    import shutil

    src = Path(__file__).resolve().parents[1] / "fixtures" / "old_runs" / "certificate" / "r1"
    run = Path(shutil.copytree(src, tmp_path / "r1"))
    cert = run / "certs" / "localhost.json"
    before = json.loads(cert.read_text())
    assert "baseline_sha256" not in before and service.verify(cert).ok
    with ResultsStore.open(tmp_path / "orch.db") as db:
        db.ingest(run)
        b = fleet.build(db, now=T0)
    assert b.runs == ["r1"] and {f.kind for f in b.figures} == {"cpu"}
    assert {f.nodes for f in b.figures} == {1} and any("fewer than 3" in n for n in b.notes)
    assert json.loads(cert.read_text()) == before and service.verify(cert).ok


def test_the_cli_creates_no_store(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    assert _orch(["fleet", "baseline", "--store", str(missing)]) == 2
    assert _orch(["fleet", "outliers", "--store", str(missing)]) == 2
    assert not missing.exists()
