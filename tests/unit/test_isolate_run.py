"""`orch isolate` as a run: each test a pipeline step (a stand-in scheduler answers), the culprit
named with its evidence in the journal, isolation.json and report.md; the pass rule; draining."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fakes import InstantScheduler

import orchestrator.runs.executor as executor
import orchestrator.runs.isolate as iso
from orchestrator.cli.isolate import render_isolation
from orchestrator.errors import ConfigError
from orchestrator.faults.safety import SafetyError
from orchestrator.inventory import load_inventory
from orchestrator.models.isolation import Culprit, Isolation
from orchestrator.models.plan import Plan, Step
from orchestrator.models.requests import IsolateRequest
from orchestrator.models.results import CollSummary
from orchestrator.models.run import RunResult, StepResult
from orchestrator.plan import load_plan
from orchestrator.remote.base import CmdResult
from orchestrator.runs.drain import drain_culprits, drain_reason
from orchestrator.scheduler.base import JobSpec
from orchestrator.scheduler.slurm import SlurmScheduler, check_drain_reason

# rank 0 of a real 2-rank collbench run (SOURCE.md beside it): all_reduce at 1M..16M
LOG = Path(__file__).parents[1] / "fixtures" / "collbench" / "a-vs-a-2ranks" / "run1-rank0.log"
SIZE = 16 * 2**20


class StandIn(InstantScheduler):
    """Jobs end at once: COMPLETED with a real collbench log, or FAILED (no log) when the job
    spans more than one node and one of them is in `bad`."""

    def __init__(self, bad: set[str]) -> None:
        super().__init__()
        self.bad = bad

    def fails(self, spec: JobSpec) -> bool:
        return len(spec.nodes) > 1 and bool(self.bad & set(spec.nodes))

    def log_for(self, spec: JobSpec) -> Path | None:
        return None if self.fails(spec) else LOG


def _inventory(tmp_path: Path, n: int = 3) -> Path:
    inv = tmp_path / "inv.yml"
    hosts = {
        f"node{i}": {"ansible_host": f"198.18.0.{10 + i}", "gpu_vendor": "none"} for i in range(1, n + 1)
    }
    # The stand-in scheduler "runs" the tests here: the run folder is declared shared, so the nodes'
    # files are the run folder's own and nothing is collected over SSH (remote/nodefiles.py).
    shared = {"orch_shared_dirs": str(tmp_path)}
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": shared}}))
    return inv


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: set[str], **kw: object
) -> tuple[iso.IsolationRun, StandIn]:
    fake = StandIn(bad)
    monkeypatch.setattr(iso, "make_scheduler", lambda *_a, **_k: fake)
    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    req = IsolateRequest(inventory=_inventory(tmp_path), size=SIZE, out_dir=tmp_path / "runs", **kw)  # type: ignore[arg-type]
    rounds: list[int] = []
    result = iso.run_isolation(req, on_round=lambda r: rounds.append(r.index))
    assert rounds == [r.index for r in result.isolation.rounds]
    return result, fake


def _argv_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _journal(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def test_a_throttled_node_is_named_with_its_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, fake = _run(tmp_path, monkeypatch, {"node3"})
    assert [(c.kind, c.nodes) for c in result.isolation.culprits] == [("node", ["node3"])]
    assert result.exit_code == 1 and result.status == "failed" and result.mode == "sequential"
    assert len(result.isolation.rounds) <= result.round_bound + 1
    # every test ran as a pipeline step of its own folder, singles with 2 ranks
    assert ["node1"] in fake.order and any(len(o) == 2 and "node3" in o for o in fake.order)
    # inventory order: rank 0 (first in Slurm's sorted node list) is where the rendezvous is
    assert all(s.nodes == sorted(s.nodes) for s in fake.specs.values())
    singles = [s for s in fake.specs.values() if len(s.nodes) == 1]
    assert singles and all(s.ranks_per_node == 2 for s in singles)
    assert all((Path(s.workdir) / "result.json").exists() for s in fake.specs.values())
    events = _journal(result.run_dir)
    started = next(e for e in events if e["event"] == "run_started")
    assert started["kind"] == "isolate" and started["mode"] == "sequential"
    assert [e["round"] for e in events if e["event"] == "isolation_round"] == list(
        range(1, len(result.isolation.rounds) + 1)
    )
    end = next(e for e in events if e["event"] == "isolation_result")
    assert [c["nodes"] for c in end["culprits"]] == [["node3"]]  # type: ignore[index, union-attr]
    assert events[-1]["event"] == "run_finished" and events[-1]["exit_code"] == 1
    saved = iso.IsolationRun.model_validate_json((result.run_dir / "isolation.json").read_text())
    assert saved.isolation.culprits[0].evidence
    report = (result.run_dir / "report.md").read_text()
    assert "node node3" in report and "FAIL" in report and "sequential" in report


def test_a_clean_cluster_has_no_culprit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = _run(tmp_path, monkeypatch, set(), concurrent=True)
    assert result.isolation.culprits == [] and result.isolation.undecided == []
    assert result.exit_code == 0 and result.mode == "concurrent"
    assert result.reference_gbs is not None and result.reference_gbs > 0


def test_isolation_refuses_an_unknown_node_and_a_timeout_past_a_minute(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nodeX"):
        iso.run_isolation(IsolateRequest(inventory=_inventory(tmp_path), nodes=["node1", "nodeX"]))
    with pytest.raises(ValueError, match="60"):
        IsolateRequest(inventory=_inventory(tmp_path), timeout_s=600)


def _res(nodes: list[str], busbw: float | None, verdict: str = "pass") -> StepResult:
    step = Step(id="t", index=0, nnodes=len(nodes), ranks_per_node=1, nodes=nodes, world_size=len(nodes),
                collectives=["all_reduce"], sizes=[SIZE])  # fmt: skip
    summary = (
        {
            "all_reduce": CollSummary(
                collective="all_reduce", size_bytes=SIZE, busbw_gbs=busbw, algbw_gbs=busbw
            )
        }
        if busbw is not None
        else {}
    )
    return StepResult(step=step, verdict=verdict, summary=summary)  # type: ignore[arg-type]


def stand_in(monkeypatch: pytest.MonkeyPatch, bad: set[str]) -> StandIn:
    """A StandIn (`bad` failing) that answers isolate's jobs, polled without a pause."""
    fake = StandIn(bad)
    monkeypatch.setattr(iso, "make_scheduler", lambda *_a, **_k: fake)
    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    return fake


def failed_smoke_run(tmp_path: Path, steps: list[StepResult], plan: Plan | None = None) -> RunResult:
    """A failed scale-test of the smoke plan (or `plan`) in tmp_path/runs/smoke-1, with these steps."""
    parent = tmp_path / "runs" / "smoke-1"
    parent.mkdir(parents=True, exist_ok=True)
    (parent / "plan.json").write_text((plan or load_plan("smoke")).model_dump_json())
    return RunResult(run_id="smoke-1", run_dir=parent, plan="smoke", backend="slurm", status="failed",
                     exit_code=1, steps=steps, nodes={}, wall_s=1.0)  # fmt: skip


def test_the_pass_rule_singles_against_the_median_single_groups_against_efficiency() -> None:
    req = IsolateRequest(inventory=Path("x"), tolerance=0.2, min_efficiency=0.5)
    singles = iso.judge([_res(["a"], 1.0), _res(["b"], 0.9), _res(["c"], 0.85), _res(["d"], 0.6)], req)
    assert [o.passed for o in singles] == [True, True, True, False]  # median 0.875: 0.6 < 80 % of it
    assert "80% of the median single (0.875)" in singles[3].detail
    # one single that ran fast (seen on the 8-node lab) fails no healthy node and no healthy group;
    # against the best single (3.0) the three others and the group would fail
    fast = iso.judge([_res(["a"], 3.0), _res(["b"], 1.0), _res(["c"], 0.9), _res(["d", "e"], 0.6)], req)
    assert [o.passed for o in fast] == [True, True, True, True]
    groups = iso.judge(
        [_res(["a", "b"], 0.6), _res(["c", "d"], 0.4), _res(["e", "f"], None, "infra")], req, [1.0, 0.9, 3.0]
    )
    assert [o.passed for o in groups] == [True, False, False]  # the reference: median 1.0
    assert "efficiency 40.0% < 50% of the median single (1)" in groups[1].detail
    assert "infra" in groups[2].detail
    floor = IsolateRequest(inventory=Path("x"), min_gbs=0.5)
    assert not iso.judge([_res(["a", "b"], 0.45)], floor)[0].passed


class Recorder:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], *, timeout: float | None = None, env: dict[str, str] | None = None,
            **_kw: object) -> CmdResult:  # fmt: skip
        self.calls.append(list(argv))
        return CmdResult(argv=argv, rc=0, stdout="", stderr="", elapsed_s=0.0)


def test_drain_goes_through_scontrol_as_argv_with_a_checked_reason(tmp_path: Path) -> None:
    rec = Recorder()
    sched = SlurmScheduler(runner=rec)  # type: ignore[arg-type]
    bad = Culprit(kind="node", nodes=["node3"], why="fails with partners; $(x)", evidence=[])
    found = Isolation(rounds=[], culprits=[bad], good=["node1", "node2"])
    cluster = load_inventory(_inventory(tmp_path))
    assert drain_culprits(found, cluster, "isolate-1", 0.5, force=False, sched=sched) == ["node3"]
    argv = rec.calls[0]
    assert argv[:4] == ["scontrol", "update", "nodename=node3", "state=drain"]
    assert argv[4].startswith("reason=orch isolate-1: ") and "$" not in argv[4] and "(x)" in argv[4]
    for bad in ('a"b', "a$b", "a`b", "a\nb", "", "x" * 201):
        with pytest.raises(ConfigError):
            check_drain_reason(bad)
    assert drain_reason("r1", 'say "hi"; rm') == "orch r1: say  hi ; rm"


def test_drain_refuses_more_than_the_share_without_force(tmp_path: Path) -> None:
    rec = Recorder()
    sched = SlurmScheduler(runner=rec)  # type: ignore[arg-type]
    culprits = [Culprit(kind="node", nodes=[n], why="bad", evidence=[]) for n in ("node1", "node2")]
    two = Isolation(rounds=[], culprits=culprits, good=["node3"])
    cluster = load_inventory(_inventory(tmp_path))
    with pytest.raises(SafetyError, match="max_share"):
        drain_culprits(two, cluster, "r1", 0.5, force=False, sched=sched)
    assert rec.calls == []
    assert drain_culprits(two, cluster, "r1", 0.5, force=True, sched=sched) == ["node1", "node2"]
    link = Isolation(
        rounds=[], culprits=[Culprit(kind="link", nodes=["node1", "node2"], why="link", evidence=[])], good=[]
    )
    assert drain_culprits(link, cluster, "r1", 0.5, force=False, sched=sched) == []


def test_scale_test_isolate_runs_on_the_failed_multinode_steps_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = stand_in(monkeypatch, {"node3"})
    plan = load_plan("smoke").model_copy(update={"step_timeout_s": 600})
    steps = [
        _res(["node1"], 1.0),
        _res(["node1", "node2"], 0.5),
        _res(["node1", "node2", "node3"], 0.01, "fail"),
    ]
    result = failed_smoke_run(tmp_path, steps, plan)
    parent = result.run_dir
    assert iso.failed_multinode_nodes(result) == (["node1", "node2", "node3"], [])
    found = iso.isolate_after_scale_test(result, _inventory(tmp_path))
    assert found is not None and found.parent_run == "smoke-1"
    assert [c.nodes for c in found.isolation.culprits] == [["node3"]]
    assert found.run_dir.parent == parent.parent and found.run_dir != parent
    assert all(s.time_limit_s <= 60 for s in fake.specs.values())
    assert json.loads((parent / "isolation.json").read_text())["run_id"] == found.run_id
    steps[2].verdict = "pass"
    assert iso.isolate_after_scale_test(result, _inventory(tmp_path)) is None


def test_cert_resume_retests_a_drained_node_and_drains_it_again_when_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runs.node_resume import resume_node

    class Slurm(Recorder):
        def run(self, argv: list[str], **kw: object) -> CmdResult:
            out = "NodeName=node3 State=IDLE+DRAIN Reason=orch isolate-1: bad [root@2026-12-01T07:00:00]"
            self.calls.append(list(argv))
            text = out if argv[1] == "show" else "node3|idle\n" if argv[0] == "sinfo" else ""
            return CmdResult(argv=argv, rc=0, stdout=text, stderr="", elapsed_s=0.0)

    for bad, resumed in ((set(), True), ({"node3"}, False)):
        rec = Slurm()
        fake = StandIn(bad)
        monkeypatch.setattr(iso, "make_scheduler", lambda *_a, _f=fake, **_k: _f)
        monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
        monkeypatch.setattr(
            "orchestrator.runs.drain.SlurmScheduler", lambda _r=rec, **_k: SlurmScheduler(runner=_r)
        )  # type: ignore[arg-type]
        res = resume_node(
            "node3", _inventory(tmp_path), tmp_path / "runs", sched=SlurmScheduler(runner=rec), size=SIZE
        )  # type: ignore[arg-type]
        assert res.resumed is resumed and res.was.startswith("IDLE+DRAIN")
        states = [a[3] for a in rec.calls if a[:2] == ["scontrol", "update"]]
        assert states == (["state=resume"] if resumed else ["state=resume", "state=drain"])
        assert ["node1", "node3"] in fake.order or ["node2", "node3"] in fake.order
        if not resumed:
            drain = next(a for a in rec.calls if "state=drain" in a)
            assert drain[4].startswith(f"reason=orch {res.retest.run_id}: ")


def test_runs_resume_refuses_an_isolate_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.runs.resume import resume

    result, _ = _run(tmp_path, monkeypatch, set())
    with pytest.raises(ConfigError, match="isolate run"):
        resume(result.run_dir, open_shells=lambda _c: None)  # type: ignore[arg-type, return-value]


def test_scale_test_isolate_takes_its_tests_and_pass_rule_from_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.models.plan import IsolationRule

    seen: list[IsolateRequest] = []

    def fake_run(req: IsolateRequest, **_kw: object) -> iso.IsolationRun:
        seen.append(req)
        raise RuntimeError("stop here")

    monkeypatch.setattr(iso, "run_isolation", fake_run)
    rule = {"size": "4M", "iters": 3, "timeout_s": 20, "tolerance": 0.7, "min_efficiency": 0.05}
    rule["min_gbs"] = 0.01
    plan = Plan.model_validate({**load_plan("smoke").model_dump(), "isolation": rule})
    result = failed_smoke_run(tmp_path, [_res(["node1", "node2"], 0.01, "fail")], plan)
    parent = result.run_dir
    with pytest.raises(RuntimeError, match="stop here"):
        iso.isolate_after_scale_test(result, _inventory(tmp_path))
    (req,) = seen
    assert (req.size, req.iters, req.timeout_s) == (4 * 2**20, 3, 20)
    assert (req.tolerance, req.min_efficiency, req.min_gbs) == (0.7, 0.05, 0.01)
    # without the section: isolate's defaults, the plan's largest size up to 64M, its timeout up to 60 s
    plan = load_plan("smoke").model_copy(update={"step_timeout_s": 45})
    (parent / "plan.json").write_text(plan.model_dump_json())
    with pytest.raises(RuntimeError, match="stop here"):
        iso.isolate_after_scale_test(result, _inventory(tmp_path))
    default = IsolationRule()
    assert (seen[1].size, seen[1].timeout_s) == (plan.sizes.max, 45)
    assert (seen[1].tolerance, seen[1].min_efficiency) == (default.tolerance, default.min_efficiency)
    with pytest.raises(ValueError, match="less than or equal to 60"):
        IsolationRule(timeout_s=61)


class LinkStandIn(StandIn):
    """As StandIn, and a job that holds both ends of a bad link fails too."""

    def __init__(self, bad: set[str], link: tuple[str, str] | None = None) -> None:
        super().__init__(bad)
        self.link = link

    def fails(self, spec: JobSpec) -> bool:
        return super().fails(spec) or (self.link is not None and set(self.link) <= set(spec.nodes))


@pytest.mark.parametrize(
    ("bad", "link", "named"),
    [({"node6"}, None, ("node", ["node6"])), (set(), ("node2", "node5"), ("link", ["node2", "node5"]))],
)
def test_eight_nodes_a_bad_node_in_five_rounds_a_bad_link_as_the_pair(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bad: set[str],
    link: tuple[str, str] | None,
    named: tuple[str, list[str]],
) -> None:
    # the lab's 8-node must-show, run path and all (steps, judging, isolation.json), jobs answered
    # by a stand-in: node6 fails only with others (a throttled fabric link, not its own loopback)
    fake = LinkStandIn(bad, link)
    monkeypatch.setattr(iso, "make_scheduler", lambda *_a, **_k: fake)
    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    req = IsolateRequest(inventory=_inventory(tmp_path, 8), size=SIZE, out_dir=tmp_path / "runs")
    result = iso.run_isolation(req)
    assert [(c.kind, c.nodes) for c in result.isolation.culprits] == [named]
    assert result.isolation.undecided == [] and result.exit_code == 1
    if link is None:
        assert len(result.isolation.rounds) <= 5  # ceil(log2 8) + 2
    assert sorted(result.isolation.good) == [f"node{i}" for i in range(1, 9) if f"node{i}" not in bad]
    assert all(s.nodes == sorted(s.nodes, key=lambda n: int(n[4:])) for s in fake.specs.values())


def test_a_repeat_single_is_judged_beyond_its_kinds_noise_band() -> None:
    # The loaded 8-node lab (issue 26): node1 and node2 gave 0.35 and 0.34 against a median single
    # of 0.55, their neighbours 0.48-0.83 (the figures between are filled in, the median kept).
    req = IsolateRequest(inventory=Path("x"))  # tolerance 0.2
    round1 = [0.35, 0.34, 0.48, 0.55, 0.55, 0.62, 0.7, 0.83]
    first = iso.judge([_res([f"n{i}"], f) for i, f in enumerate(round1)], req)
    assert [o.passed for o in first] == [False, False, True, True, True, True, True, True]  # suspects
    passed = iso.passed_singles([_res([f"n{i}"], f) for i, f in enumerate(round1)], first)
    # the repeat, even as low as the first figure, is within the band of its kind's singles: r < 0.8
    (again,) = iso.judge([_res(["n0"], 0.35)], req, passed)
    assert again.passed and again.min_ratio is not None and again.min_ratio < 1 - req.tolerance
    assert again.reference is not None and again.min_ratio * again.reference < 0.35
    # a node far beyond the band fails its repeat too
    (bad,) = iso.judge([_res(["n0"], 0.1)], req, passed)
    assert not bad.passed and "of the median single" in bad.detail
    # a quiet kind: the band is the tolerance, 80 % of the median
    (quiet,) = iso.judge([_res(["n0"], 0.75)], req, [1.0, 1.0, 1.01, 0.99, 1.0])
    assert not quiet.passed and quiet.min_ratio == pytest.approx(0.8)


def test_the_noise_band_at_a_repeat_is_every_single_of_the_kind_the_suspects_included() -> None:
    # CI's loaded 8-node lab, clean (2026-12-05): round 1 gave these singles; node7 (0.556) and its
    # repeat (0.526) both fell under 80 % of the median while the passing singles clustered at
    # 0.76-0.79 (MAD of their logs 0.03: the band was the tolerance, and node7 was named). The
    # kind's noise is every single it gave, the three low ones included.
    req = IsolateRequest(inventory=Path("x"))  # tolerance 0.2
    round1 = [1.171, 0.3452, 0.7683, 1.075, 0.7629, 0.7854, 0.5559, 0.4585]
    results = [_res([f"node{i + 1}"], f) for i, f in enumerate(round1)]
    singles: dict[str, list[float]] = {}
    measured: dict[str, list[float]] = {}
    kind = {f"node{i + 1}": "cpu" for i in range(8)}
    first = iso.judge_by_kind(results, req, singles, kind, measured)
    assert [o.passed for o in first] == [True, False, True, True, True, True, False, False]
    assert measured["cpu"] == round1 and len(singles["cpu"]) == 5
    # the band of the passing singles alone (the rule before) convicts the repeat
    (old,) = iso.judge([_res(["node7"], 0.5257)], req, list(singles["cpu"]))
    assert not old.passed and old.min_ratio == pytest.approx(0.8)
    (again,) = iso.judge_by_kind([_res(["node7"], 0.5257)], req, singles, kind, measured)
    assert again.passed and again.min_ratio is not None and again.min_ratio < 0.5
    # a node far below every single of its kind still fails its repeat
    (bad,) = iso.judge_by_kind([_res(["node7"], 0.05)], req, singles, kind, measured)
    assert not bad.passed


class FlakyStandIn(LinkStandIn):
    """As LinkStandIn, and healthy nodes whose first single job fails (one bad sample), then pass."""

    def __init__(self, bad: set[str], once: set[str]) -> None:
        super().__init__(bad)
        self.once = set(once)
        self.doomed: set[str] = set()

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        if len(spec.nodes) == 1 and spec.nodes[0] in self.once:
            self.once.discard(spec.nodes[0])
            self.doomed.add(str(spec.workdir))
        return super().submit(spec, after=after)

    def fails(self, spec: JobSpec) -> bool:
        return super().fails(spec) or str(spec.workdir) in self.doomed


def test_drain_bad_drains_the_confirmed_culprit_not_the_unconfirmed_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FlakyStandIn({"node6"}, {"node2"})
    monkeypatch.setattr(iso, "make_scheduler", lambda *_a, **_k: fake)
    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    rec = Recorder()
    real = iso.drain_culprits

    def drain(found: Isolation, cluster: object, run_id: str, share: float, *, force: bool) -> list[str]:
        return real(found, cluster, run_id, share, force=force, sched=SlurmScheduler(runner=rec))  # type: ignore[arg-type]

    monkeypatch.setattr(iso, "drain_culprits", drain)
    req = IsolateRequest(inventory=_inventory(tmp_path, 8), size=SIZE, out_dir=tmp_path / "runs",
                             drain_bad=True)  # fmt: skip
    result = iso.run_isolation(req)
    assert [(c.kind, c.nodes) for c in result.isolation.culprits] == [("node", ["node6"])]
    assert [(u.kind, u.nodes) for u in result.isolation.unconfirmed] == [("node", ["node2"])]
    u = result.isolation.unconfirmed[0]
    assert not u.first.outcome.passed and u.repeat.outcome.passed and u.repeat.purpose == "confirm"
    assert result.drained == ["node6"] and [c[2] for c in rec.calls] == ["nodename=node6"]
    # the search and its confirmation round, and round 2: node2 alone again
    assert len(result.isolation.rounds) <= result.round_bound + 1
    assert [t.group for t in result.isolation.rounds[1].trials] == [["node2"]]
    assert result.exit_code == 1
    report = (result.run_dir / "report.md").read_text()
    assert "unconfirmed node node2" in report and "passed the repeat" in report
    saved = iso.IsolationRun.model_validate_json((result.run_dir / "isolation.json").read_text())
    assert saved.isolation.unconfirmed == result.isolation.unconfirmed


def test_a_clean_cluster_with_one_bad_sample_names_no_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FlakyStandIn(set(), {"node1"})
    monkeypatch.setattr(iso, "make_scheduler", lambda *_a, **_k: fake)
    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    req = IsolateRequest(inventory=_inventory(tmp_path, 8), size=SIZE, out_dir=tmp_path / "runs")
    result = iso.run_isolation(req)
    assert result.isolation.culprits == [] and result.isolation.undecided == []
    assert [u.nodes for u in result.isolation.unconfirmed] == [["node1"]]
    assert result.exit_code == 0 and result.status == "accepted"
    assert "node1" in result.isolation.good  # searched with partners after its repeat
    # the repeat measures longer than the test that made the suspect; the other rounds as asked
    iters = {s.step_id: _argv_value(s.argv, "--iters") for s in fake.specs.values()}
    warm = {s.step_id: _argv_value(s.argv, "--warmup") for s in fake.specs.values()}
    assert iters.pop("r2-t1-single") == "20" and warm.pop("r2-t1-single") == "5"
    assert set(iters.values()) == {str(req.iters)} and set(warm.values()) == {str(req.warmup_iters)}
    assert iso.repeat_settings(8, 7) == (32, 7)
    started = [e for e in _journal(result.run_dir) if e["event"] == "isolation_round_started"]
    assert [(e["iters"], e["warmup_iters"]) for e in started[:2]] == [(5, 1), (20, 5)]
    assert result.rule_params is not None and result.rule_params.repeat_iters == 20
    render_isolation(result)
    printed = capsys.readouterr().out
    assert "no culprit" in printed and "unconfirmed node node1: failed once" in printed
    assert "passed the repeat" in printed and "in round 2" in printed
