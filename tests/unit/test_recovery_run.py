"""A recovery-test run directory is a run: journal, inputs, records with heartbeats, store, report,
compare. The probe and the nodes are replaced by synthetic heartbeats (no network)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_report import _svg_kinds

from orchestrator.errors import FaultError
from orchestrator.models.cluster import Cluster, ClusterVars, Node
from orchestrator.models.events import RecoveryDone
from orchestrator.models.fault import RecoveryResult, RecoverySummary, Stat
from orchestrator.models.recovery import RecoveryRecord
from orchestrator.report.compare import compare_runs
from orchestrator.report.formats import render
from orchestrator.runs import recovery as rt
from orchestrator.runs import recovery_records as records
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.store.db import ResultsStore
from orchestrator.store.load import load_run
from orchestrator.store.rundir import RunDir

T0 = 1000.0
OFFSETS = {"node1": 50.0, "node2": 70.0}  # node wall - orch monotonic


def _probe_lines(t0: float = T0, gap: tuple[float, float] = (0.5, 3.0)) -> list[dict[str, Any]]:
    """Two ranks (one per node) stepping every 0.1 s from t0-20 to t0+20, none inside ``gap``;
    rank 1 errors at t0+0.2 and comes back as generation 1."""
    lines: list[dict[str, Any]] = []
    for rank, node in enumerate(OFFSETS):
        step = 0
        t = t0 - 20.0
        while t < t0 + 20.0:
            if not gap[0] <= t - t0 < gap[1]:
                gen = 1 if t - t0 >= gap[1] else 0
                wall = t + OFFSETS[node]
                lines.append({"ev": "step", "rank": rank, "node": node, "step": step, "gen": gen, "world": 2,
                              "t_start": wall - 0.05, "wall": wall, "busbw_gbs": 0.01})  # fmt: skip
                step += 1
            t += 0.1
    err_wall = t0 + 0.2 + OFFSETS["node2"]
    lines.append({"ev": "error", "rank": 1, "node": "node2", "wall": err_wall, "error": "x"})
    return lines


def test_heartbeats_are_on_the_injection_axis_windowed_and_keep_errors() -> None:
    hbs, total = records.probe_heartbeats(_probe_lines(), OFFSETS, t0=T0, end_s=5.0, pre_s=2.0, cap=10_000)
    assert total == len(hbs)
    assert {h.rank for h in hbs} == {0, 1}
    assert min(h.t_s for h in hbs) >= -2.0 and max(h.t_s for h in hbs) <= 5.0
    # node clocks are corrected: both ranks' last pre-fault step lands just before 0.5 s
    for rank in (0, 1):
        before = [h.t_s for h in hbs if h.rank == rank and h.ok and h.t_s < 0.5]
        assert 0.35 < max(before) < 0.5
    (err,) = [h for h in hbs if not h.ok]
    assert err.rank == 1 and err.t_s == pytest.approx(0.2) and err.busbw_gbs is None
    assert err.step == max(h.step for h in hbs if h.rank == 1 and h.ok and h.t_s < 0.2)
    assert {h.restart_count for h in hbs if h.t_s >= 3.0} == {1}
    assert {h.restart_count for h in hbs if h.t_s < 0.5} == {0}


def test_heartbeats_are_thinned_per_rank_but_errors_stay() -> None:
    hbs, total = records.probe_heartbeats(_probe_lines(), OFFSETS, t0=T0, end_s=20.0, pre_s=20.0, cap=50)
    assert total > 300
    for rank in (0, 1):
        assert len([h for h in hbs if h.rank == rank]) <= 52
    assert any(not h.ok for h in hbs)


def _cluster() -> Cluster:
    # The probe runs with the stack's Python on remote nodes: the inventory names the stack.
    return Cluster(source=Path("x.ini"), nodes=[Node(name=n, address=n) for n in OFFSETS],
                   vars=ClusterVars(orch_stack="cpu-gloo"))  # fmt: skip


def _fake_run(recover: tuple[float, ...], stop_after: int | None = None) -> Any:
    """A stand-in for the probe part of run_recovery_test: writes one record per repeat, from
    repeat ``first`` on; with ``stop_after``, Ctrl-C comes once that many repeats are recorded."""

    def fake(t: Any, first: int) -> list[RecoveryResult]:
        req: rt.RecoveryTestRequest = t.req
        life: RunLifecycle = t.life
        results = []
        for k in range(first, len(recover)):
            if stop_after is not None and k >= stop_after:
                raise KeyboardInterrupt
            rec_s = recover[k]
            t0 = T0 + 60 * k
            r = RecoveryResult(fault_id=f"kill-{k}", kind=req.kind, repeat=k, injected_at_mono=t0,
                               verdict="recovered", detect_s=0.2, recover_s=rec_s, restore_s=rec_s + 1,
                               steps_lost=1, restarts=1, stall_s=rec_s - 0.5, stall_at_s=0.5)  # fmt: skip
            hbs, total = records.probe_heartbeats(_probe_lines(t0, (0.5, rec_s)), OFFSETS, t0=t0, end_s=8.0)
            record = records.to_record(
                r, None, target=req.target, duration_s=req.duration_s, window_s=req.window_s,
                heartbeats=hbs, heartbeats_total=total,
                mono_to_wall=lambda m: datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=m),
            )  # fmt: skip
            life.journal("recovery_done", fault=record.fault_id, repeat=k)
            (life.root / "recovery").mkdir(exist_ok=True)
            (life.root / "recovery" / f"{r.fault_id}.json").write_text(record.model_dump_json())
            life.emit(RecoveryDone(fault=record.fault_id, repeat=k, verdict=r.verdict))
            results.append(r)
        return results

    return fake


@pytest.fixture
def store_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "runs" / "orch.db"
    monkeypatch.setenv("ORCH_STORE", str(path))
    yield path


def _run(tmp_path: Path, name: str, recover: tuple[float, ...], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(rt, "_run", _fake_run(recover))
    req = rt.RecoveryTestRequest(kind="kill-worker", target="node2:1", repeat=len(recover))
    root = tmp_path / "runs" / name
    rt.run_recovery_test(_cluster(), {}, req, root)
    return root


def test_a_recovery_run_is_a_run_with_report_store_and_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_env: Path
) -> None:
    a = _run(tmp_path, "rec-a", (2.0, 2.2), monkeypatch)
    events = [e["event"] for e in RunDir(a).events()]
    assert events[0] == "run_started" and events[-1] == "run_finished"
    assert events.count("recovery_done") == 2
    assert (a / "inventory.json").exists() and (a / "recovery-test.json").exists()

    rec = load_run(a)
    assert rec.status == "accepted" and rec.exit_code == 0
    assert rec.plan_name == "recovery-kill-worker" and rec.backend == "ssh"
    assert rec.request is not None and rec.request.target == "node2:1" and rec.request.repeat == 2
    assert [r.repeat for r in rec.recovery] == [0, 1]
    assert all(r.heartbeats and r.verdict == "recovered" for r in rec.recovery)

    html = render(rec, "html", a)
    kinds = _svg_kinds(html)
    assert kinds.count("timeline") == 2 and kinds.count("distribution") == 1
    assert "orch recovery-test" in html and "node2:1" in html
    assert "2 of 2 done" in html and "0 of 0 finished" not in html and ">stall<" in html
    md = render(rec, "md", a)
    assert md.startswith("# orch recovery-test") and "repeats: 2 of 2 done" in md and "0 of 0" not in md

    with sqlite3.connect(store_env) as c:
        rows = c.execute("SELECT fault_id, recover_s FROM recoveries ORDER BY repeat").fetchall()
        status = c.execute("SELECT status FROM runs").fetchone()[0]
    assert rows == [("kill-0", 2.0), ("kill-1", 2.2)] and status == "accepted"

    b = _run(tmp_path, "rec-b", (5.0, 5.3), monkeypatch)
    cmp = compare_runs(load_run(a), load_run(b))
    assert cmp.rows == []
    verdicts = {(r.fault, r.phase): r.verdict for r in cmp.recovery}
    assert verdicts[("kill_worker", "recover")] == "worse" and verdicts[("kill_worker", "detect")] == "same"
    with ResultsStore.open(store_env) as s:
        assert {r.run_id for r in s.runs(plan="recovery-kill-worker")} == {"rec-a", "rec-b"}


def test_a_failing_recovery_run_is_journaled_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_env: Path
) -> None:
    def boom(*_a: Any) -> RecoverySummary:
        raise FaultError("the probe did not complete 30 steps within 180 s")

    monkeypatch.setattr(rt, "_run", boom)
    root = tmp_path / "runs" / "rec-x"
    with pytest.raises(FaultError):
        req = rt.RecoveryTestRequest(kind="kill-worker", target="node2:1")
        rt.run_recovery_test(_cluster(), {}, req, root)
    fin = [e for e in RunDir(root).events() if e["event"] == "run_finished"]
    assert len(fin) == 1 and "180 s" in fin[0]["error"]
    rec = load_run(root)
    assert rec.status in ("failed", "infra") and rec.exit_code == fin[0]["exit_code"] != 0


def test_old_records_without_probe_fields_still_load(tmp_path: Path) -> None:
    old = {"fault_id": "f", "fault": "kill_worker", "target": "n", "injected_at": "2026-11-01T00:00:00+00:00"}
    rec = RecoveryRecord.model_validate(old)
    assert rec.verdict is None and rec.heartbeats == []


def _summary(results: list[RecoveryResult]) -> RecoverySummary:
    none = Stat(n=0)
    verdicts = {v: sum(r.verdict == v for r in results) for v in {r.verdict for r in results}}
    return RecoverySummary(kind="kill-worker", repeats=len(results), verdicts=verdicts, detect=none,
                           recover=none, restore=none, results=results)  # fmt: skip


@pytest.fixture
def fake_cli(monkeypatch: pytest.MonkeyPatch) -> list[tuple[rt.RecoveryTestRequest, Path]]:
    """orch recovery-test in process, without nodes: what reached run_recovery_test."""
    from contextlib import nullcontext

    from orchestrator.cli import fault as cli_fault

    calls: list[tuple[rt.RecoveryTestRequest, Path]] = []

    def fake_run(cluster: Cluster, shells: Any, req: rt.RecoveryTestRequest, root: Path,
                 progress: Any = None) -> RecoverySummary:  # fmt: skip
        calls.append((rt.resolve_launcher(req, cluster), root))
        return _summary([RecoveryResult(fault_id="f0", kind="kill-worker", verdict="no-interruption",
                                        notes=["no interruption: nothing to recover from"])])  # fmt: skip

    monkeypatch.setattr(cli_fault, "run_recovery_test", fake_run)
    monkeypatch.setattr(cli_fault, "load_inventory", lambda _p: _cluster())
    monkeypatch.setattr(cli_fault, "node_shells", lambda _c: nullcontext({}))
    return calls


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    got = capsys.readouterr()
    return int(e.value.code or 0), got.out, got.err


def test_recovery_test_cli_writes_under_out_and_keeps_runs_as_a_deprecated_alias(
    tmp_path: Path, fake_cli: list[tuple[rt.RecoveryTestRequest, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(["recovery-test", "--fault", "kill-worker", "--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert fake_cli[-1][1].parent == tmp_path / "a" and "deprecated" not in err
    # a repeat without interruption reads as such, with its figures shown absent, not as a recovery
    assert "no-interruption" in out and "—" in out and "nothing to recover from" in out
    code, _, err = _cli(["recovery-test", "--fault", "kill-worker", "--runs", str(tmp_path / "b")], capsys)
    assert code == 0 and fake_cli[-1][1].parent == tmp_path / "b" and "--runs is deprecated; use --out" in err
    code, _, err = _cli(["recovery-test", "--fault", "kill-worker", "--runs", str(tmp_path / "b"),
                         "--out", str(tmp_path / "c")], capsys)  # fmt: skip
    assert code == 2 and len(fake_cli) == 2


def test_recovery_test_help_shows_the_default_inventory_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(["recovery-test", "--help"], capsys)
    assert code == 0 and "inventories/local.ini" in out.replace("\n", "").replace("│", "").replace(" ", "")
    assert str(Path(rt.__file__).parents[2]) not in out and "--runs" not in out


def test_the_launcher_defaults_to_slurm_when_the_inventory_has_slurm(tmp_path: Path) -> None:
    req = rt.RecoveryTestRequest(kind="kill-worker", target="node2:1", launcher="auto")
    remote = _cluster()  # ssh hosts, as scale-test's auto backend reads them: Slurm
    assert rt.resolve_launcher(req, remote).launcher == "slurm"
    local = Cluster(source=Path("x.ini"), nodes=[Node(name="localhost", address="localhost",
                                                      connection="local")])  # fmt: skip
    assert rt.resolve_launcher(req, local).launcher == "ssh"
    conf = local.model_copy(update={"vars": ClusterVars(orch_slurm_conf=tmp_path / "slurm.conf")})
    assert rt.resolve_launcher(req, conf).launcher == "slurm"
    assert rt.resolve_launcher(req.model_copy(update={"launcher": "ssh"}), conf).launcher == "ssh"


def test_clock_offsets_are_measured_per_node_and_under_slurm_names() -> None:
    class Shell:
        def __init__(self, off: float) -> None:
            self.off = off

        def run_script(self, script: str, timeout: float) -> Any:
            import time
            from types import SimpleNamespace

            return SimpleNamespace(stdout=f"{time.monotonic() + self.off:.9f}\n")

    shells = {"node1": Shell(50.0), "node2": Shell(70.0)}
    offsets = rt.measure_offsets(_cluster(), shells, {"n2": "node2", "stray": "nosuch"})  # type: ignore[arg-type]
    assert set(offsets) == {"node1", "node2", "n2"}
    assert offsets["n2"] == offsets["node2"] and abs(offsets["node2"] - 70.0) < 0.05
    assert abs(offsets["node1"] - 50.0) < 0.05


def test_a_record_says_no_interruption_and_the_measured_hold() -> None:
    r = RecoveryResult(fault_id="f", kind="throttle", verdict="no-interruption", injected_at_mono=T0,
                       held_s=3.042, notes=["no interruption: nothing to recover from"])  # fmt: skip
    rec = records.to_record(r, None, target="node2:fab0", duration_s=3.0, window_s=60.0, heartbeats=[],
                            mono_to_wall=lambda m: datetime(2026, 12, 1, tzinfo=UTC))  # fmt: skip
    assert rec.outcome == "no-interruption" and rec.verdict == "no-interruption"
    assert rec.timings.recover_s is None and rec.duration_s == 3.042
    stalled = r.model_copy(update={"verdict": "recovered", "recover_s": 5.1, "stall_s": 5.0})
    rec = records.to_record(stalled, None, target="node2:3", duration_s=5.0, window_s=60.0, heartbeats=[],
                            mono_to_wall=lambda m: datetime(2026, 12, 1, tzinfo=UTC))  # fmt: skip
    assert rec.outcome == "recovered" and rec.stall_s == 5.0 and rec.timings.detect_s is None


def _interrupted(monkeypatch: pytest.MonkeyPatch, root: Path, recover: tuple[float, ...]) -> Path:
    """root: a kill-worker recovery run on node2:1, one repeat per value of recover, stopped by
    Ctrl-C once its first repeat is recorded."""
    from orchestrator.errors import Interrupted

    monkeypatch.setattr(rt, "_run", _fake_run(recover, stop_after=1))
    req = rt.RecoveryTestRequest(kind="kill-worker", target="node2:1", repeat=len(recover))
    with pytest.raises(Interrupted):
        rt.run_recovery_test(_cluster(), {}, req, root)
    return root


def test_an_interrupted_recovery_run_resumes_with_the_repeats_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_env: Path
) -> None:
    from contextlib import nullcontext

    from orchestrator.errors import ConfigError
    from orchestrator.runs.resume import resume
    from orchestrator.store.load import run_kind

    root = _interrupted(monkeypatch, tmp_path / "runs" / "rec-r", (2.0, 2.2, 2.4))
    rec = load_run(root)
    assert rec.status == "interrupted" and rec.kind == "recovery-test" and run_kind(root) == "recovery-test"
    assert [r.repeat for r in rec.recovery] == [0]
    (root / "probe").mkdir(exist_ok=True)
    (root / "probe" / "hb-0.jsonl").write_text("{}\n")  # the killed attempt's heartbeats

    monkeypatch.setattr(rt, "_run", _fake_run((2.0, 2.2, 2.4)))
    opened: list[Cluster] = []

    def shells(cluster: Cluster) -> Any:
        opened.append(cluster)
        return nullcontext({})

    summary = resume(root, open_shells=shells)
    assert isinstance(summary, RecoverySummary) and [c.names for c in opened] == [["node1", "node2"]]
    assert [r.repeat for r in summary.results] == [0, 1, 2] and summary.verdicts == {"recovered": 3}
    assert summary.recover.n == 3 and summary.fault_ids == ["kill-0", "kill-1", "kill-2"]
    events = [e["event"] for e in RunDir(root).events()]
    assert events.count("run_started") == 1 and events.count("run_resumed") == 1
    assert events.count("recovery_done") == 3 and events[-1] == "run_finished"
    resumed = next(e for e in RunDir(root).events() if e["event"] == "run_resumed")
    assert resumed["repeats"] == [1, 2]
    assert (root / "attempts" / "probe.1" / "hb-0.jsonl").exists()
    rec = load_run(root)
    assert rec.status == "accepted" and rec.resumes == 1 and [r.repeat for r in rec.recovery] == [0, 1, 2]
    with sqlite3.connect(store_env) as c:
        assert c.execute("SELECT count(*) FROM recoveries").fetchone()[0] == 3
        assert c.execute("SELECT status FROM runs").fetchone()[0] == "accepted"
    with pytest.raises(ConfigError, match="no unfinished repeats"):
        resume(root, open_shells=shells)
    from orchestrator.store.rundir import who

    RunDir(root).event("run_resumed", run_id=rec.run_id, **who())  # an orch that is alive resumed it
    with pytest.raises(ConfigError, match=f"run {rec.run_id} is still running"):
        resume(root, open_shells=shells)


def test_a_failing_repeat_after_resume_fails_the_whole_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_env: Path
) -> None:
    from contextlib import nullcontext

    from orchestrator.runs.resume import resume

    root = _interrupted(monkeypatch, tmp_path / "runs" / "rec-f", (2.0, 2.2))
    ran = _fake_run((2.0, 2.2))

    def second_fails(*a: Any) -> list[RecoveryResult]:
        results: list[RecoveryResult] = ran(*a)
        return [r.model_copy(update={"verdict": "not-recovered"}) for r in results]

    monkeypatch.setattr(rt, "_run", second_fails)
    summary = resume(root, open_shells=lambda _c: nullcontext({}))
    assert isinstance(summary, RecoverySummary)
    assert summary.verdicts == {"recovered": 1, "not-recovered": 1}
    fin = [e for e in RunDir(root).events() if e["event"] == "run_finished"]
    assert [(f["status"], f["exit_code"]) for f in fin] == [("interrupted", 130), ("failed", 1)]


def test_orch_runs_resume_finishes_a_recovery_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from contextlib import nullcontext

    from orchestrator.remote import shells

    root = _interrupted(monkeypatch, tmp_path / "runs" / "rec-c", (2.0, 2.2))
    monkeypatch.setattr(rt, "_run", _fake_run((2.0, 2.2)))
    monkeypatch.setattr(shells, "node_shells", lambda _c: nullcontext({}))
    code, out, err = _cli(["runs", "resume", str(root)], capsys)
    assert code == 0, err
    assert "resumed" in out and "recovered=2" in out


def test_the_kind_of_an_older_run_folder_is_read_from_its_inputs(tmp_path: Path) -> None:
    from orchestrator.store.load import run_kind

    ladder, recovery = tmp_path / "a", tmp_path / "b"
    for d in (ladder, recovery):
        d.mkdir()
        RunDir(d).event("run_started", run_id=d.name, plan="p", backend="slurm", steps=[])
    (recovery / "recovery-test.json").write_text("{}")
    assert run_kind(ladder) == "scale-test" and run_kind(recovery) == "recovery-test"
    RunDir(ladder).event("run_started", run_id="a", kind="recovery-test")  # only the first counts
    assert run_kind(ladder) == "scale-test"
