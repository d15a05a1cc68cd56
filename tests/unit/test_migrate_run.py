"""`orch migrate run`, `orch rollback` and their resume, over a fake cluster (no lab, no Ansible).

FakeCluster stands for the nodes: provisioning a stack replaces a node's venv (its package set and
stack record), as roles/workload_env does; the plan's busbw depends on the environment a run
launches with (TORCH_DISTRIBUTED_DEBUG=DETAIL makes sizes up to 1 MiB slower, as measured on
loopback), with seeded noise and a slow drift over time.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_cli_usage import one_error_line, run_cli

from orchestrator import __version__
from orchestrator.errors import ConfigError, Interrupted
from orchestrator.models.cluster import Cluster
from orchestrator.models.fingerprint import Fingerprint
from orchestrator.models.migrate import MigrateRun, PlanRun
from orchestrator.models.plan import Plan
from orchestrator.models.requests import MigrateRequest, ProvisionRequest
from orchestrator.provision import fingerprint as F
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.runs.migrate import resume_migration, run_migration
from orchestrator.stacks import load_stack
from orchestrator.store.rundir import RunDir

LAB_INI = Path(__file__).resolve().parents[1] / "fixtures" / "inventories" / "lab.ini"
BASE = ["torch==2.13.0+cpu", f"orch=={__version__}", "filelock==3.16.1"]
SIZES = [2**k for k in range(10, 25, 2)]  # 1 KiB .. 16 MiB


class Stop(KeyboardInterrupt):
    """orch killed in the middle of a provisioning (the fake leaves the node half-made)."""


class FakeCluster:
    def __init__(self, nodes: list[str], start: str = "cpu-gloo", seed: int = 1, noise: float = 0.03) -> None:
        self.venv: dict[str, tuple[str | None, list[str]]] = {n: self._install(start) for n in nodes}
        self.rng = random.Random(seed)
        self.noise, self.t = noise, 0
        self.fail_on: dict[str, str] = {}
        self.kill_during: str | None = None  # a stack whose provisioning is "killed" half-way
        self.keep_old_packages = False
        self.provisioned: list[tuple[str, list[str], bool]] = []
        self.faults = False

    @staticmethod
    def _install(stack: str) -> tuple[str | None, list[str]]:
        py = load_stack(stack).python
        assert py is not None
        return stack, sorted(BASE + list(py.packages))

    # --- Ops ---
    def provision(self, stack: str, nodes: list[str], *, clean: bool) -> dict[str, str]:
        self.provisioned.append((stack, nodes, clean))
        if self.kill_during == stack:
            self.kill_during = None
            self.venv[nodes[0]] = (None, ["torch==2.13.0+cpu"])  # venv removed, half reinstalled
            raise Stop
        failed = {n: self.fail_on[n] for n in nodes if n in self.fail_on}
        for n in nodes:
            if n not in failed:
                record, pkgs = self._install(stack)
                if self.keep_old_packages:
                    pkgs = sorted(set(pkgs) | set(self.venv[n][1]))
                self.venv[n] = (record, pkgs)
        return failed

    def fingerprint(self, stack: str, nodes: list[str]) -> tuple[dict[str, Fingerprint], dict[str, str]]:
        out = {}
        for n in nodes:
            record, pkgs = self.venv[n]
            raw: dict[str, object] = {
                "os": "debian-12",
                "venv": {"python": "3.11.2", "torch": "2.13.0+cpu", "orch": __version__, "packages": pkgs},
            }
            if record is not None:
                raw["stack_record"] = {"stack": record, "env": dict(load_stack(record).env)}
            out[n] = F.from_probe(n, raw)
        return out, {}

    def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
        slow = load_stack(stack).env.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL"
        series: dict[int, float] = {}
        for size in SIZES:
            self.t += 1
            fig = 1.0 * (1 - 0.0003 * self.t) * self.rng.lognormvariate(0, self.noise)
            series[size] = fig * (0.35 if slow and size <= 2**20 else 1.0)
        return PlanRun(
            label=label, stack=stack, nodes=nodes, verdict="pass", busbw={"all_reduce@n3xg1": series}
        )

    def plan_has_serving_faults(self) -> bool:
        return False

    def plan_has_faults(self) -> bool:
        return self.faults


def _factory(fake: FakeCluster):  # type: ignore[no-untyped-def]
    def make(life: RunLifecycle, cluster: Cluster, plan: Plan | None) -> FakeCluster:
        return fake

    return make


def _req(tmp_path: Path, to: str | None = "cpu-gloo-slow", **kw: object) -> MigrateRequest:
    return MigrateRequest(
        inventory=LAB_INI,
        from_stack="cpu-gloo",
        to_stack=to,
        plan="smoke" if to else None,
        out_dir=tmp_path,
        **kw,
    )  # type: ignore[arg-type]


def _run_dir(root: Path) -> Path:
    (one,) = [p for p in root.iterdir() if "-migrate-" in p.name]
    return one


def _nodes() -> list[str]:
    from orchestrator.inventory import load_inventory

    return [n.name for n in load_inventory(LAB_INI).nodes]


@pytest.fixture(scope="module")
def nodes() -> list[str]:
    return _nodes()


def test_the_worse_stack_fails_the_compare_gate_and_the_run_rolls_back(
    tmp_path: Path, nodes: list[str]
) -> None:
    fake = FakeCluster(nodes)
    r = run_migration(_req(tmp_path), ops_factory=_factory(fake))
    states = {p.phase: p.state for p in r.phases}
    assert states == {
        "freeze": "passed",
        "canary": "passed",
        "scale": "passed",
        "faults": "skipped",
        "compare": "failed",
        "rollback": "passed",
        "certify": "passed",
    }
    assert r.failed_phase == "compare" and r.exit_code == 1 and r.status == "failed" and r.rolled_back
    assert r.failure is not None and "all_reduce@n3xg1 worse at sizes" in r.failure
    # B pins numpy as well as DETAIL: a node holds one of the two at a time, so A and B take turns
    assert r.comparison is not None and r.comparison.mode == "sequential"
    assert r.comparison.order == ["baseline", "control", "scale"]
    d = r.comparison.collectives[0]
    assert d.direction == "worse" and set(d.flagged_sizes) == {s for s in SIZES if s <= 2**20}
    assert all(fake.venv[n][0] == "cpu-gloo" for n in nodes)  # every node back on A
    assert r.certification is not None and r.certification.ok and r.certification.against == "reference"
    # B went to the canary, then to the rest; A came back everywhere, each time with the venv removed
    assert fake.provisioned == [
        ("cpu-gloo-slow", nodes[:1], True),
        ("cpu-gloo-slow", nodes[1:], True),
        ("cpu-gloo", nodes, True),
    ]
    saved = MigrateRun.model_validate_json((r.run_dir / "migrate.json").read_text())
    assert saved.failed_phase == "compare" and (r.run_dir / "reference.json").exists()
    report = (r.run_dir / "report.md").read_text()
    assert (
        "## A/B compare" in report and "## Rollback proof" in report and "## Compatibility matrix" in report
    )
    assert "<table>" in (r.run_dir / "report.html").read_text()
    ends = [e for e in RunDir(r.run_dir).events() if e["event"] == "run_finished"]
    assert ends[-1]["exit_code"] == 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_against_a_flags_nothing(tmp_path: Path, nodes: list[str], seed: int) -> None:
    fake = FakeCluster(nodes, seed=seed)
    r = run_migration(_req(tmp_path, to="cpu-gloo"), ops_factory=_factory(fake))
    assert r.status == "accepted" and r.exit_code == 0 and r.failed_phase is None, r.failure
    assert r.comparison is not None and all(d.direction == "same" for d in r.comparison.collectives)
    # one installation serves both arms: they take turns on every node, A B A' | A' B A
    assert r.comparison.mode == "interleaved"
    assert [x.split("-", 1)[1] for x in r.comparison.order[:6]] == [
        "A",
        "B",
        "A-control",
        "A-control",
        "B",
        "A",
    ]
    assert r.certification is not None and r.certification.ok


def test_stacks_that_install_different_things_compare_sequentially(tmp_path: Path, nodes: list[str]) -> None:
    r = run_migration(_req(tmp_path, to="cpu-gloo-next"), ops_factory=_factory(FakeCluster(nodes)))
    assert r.comparison is not None and r.comparison.mode == "sequential"
    assert r.comparison.order == ["baseline", "control", "scale"]
    assert r.status == "accepted"


def test_a_failed_canary_without_rollback_stops_there_and_says_why(tmp_path: Path, nodes: list[str]) -> None:
    fake = FakeCluster(nodes)
    fake.fail_on[nodes[0]] = "pip: no matching distribution"
    r = run_migration(_req(tmp_path, no_rollback=True), ops_factory=_factory(fake))
    assert r.failed_phase == "canary" and r.failure is not None and f"{nodes[0]}: pip" in r.failure
    assert [p.state for p in r.phases][1:] == [
        "failed",
        "skipped",
        "skipped",
        "skipped",
        "skipped",
        "skipped",
    ]
    assert not r.rolled_back and len(fake.provisioned) == 1


def test_certify_catches_a_rollback_that_leaves_b_behind(tmp_path: Path, nodes: list[str]) -> None:
    fake = FakeCluster(nodes)
    r = run_migration(_req(tmp_path, to="cpu-gloo-next"), ops_factory=_factory(fake))
    assert r.status == "accepted"
    fake2 = FakeCluster(nodes)
    fake2.keep_old_packages = True  # a rollback that only installs A over B
    r2 = run_migration(_req(tmp_path, to="cpu-gloo-next"), ops_factory=_factory(fake2))
    assert r2.failed_phase == "certify" and r2.certification is not None and not r2.certification.ok
    assert all(any("+numpy==2.2.6" in d for d in n.differences) for n in r2.certification.nodes)


def test_rollback_alone_to_a_migrate_runs_reference(tmp_path: Path, nodes: list[str]) -> None:
    fake = FakeCluster(nodes)
    fake.kill_during = "cpu-gloo"  # the migrate run dies in its own rollback: nodes stay on B
    with pytest.raises(Interrupted):
        run_migration(_req(tmp_path), ops_factory=_factory(fake))
    run_dir = _run_dir(tmp_path)
    r = run_migration(
        MigrateRequest(inventory=LAB_INI, from_stack="cpu-gloo", reference_run=run_dir, out_dir=tmp_path),
        ops_factory=_factory(fake),
    )
    assert (
        r.kind == "rollback"
        and r.status == "accepted"
        and [p.phase for p in r.phases] == ["rollback", "certify"]
    )
    assert r.certification is not None and r.certification.against == "reference"
    assert r.certification.reference_from == run_dir.name
    assert all(fake.venv[n][0] == "cpu-gloo" for n in nodes)
    with pytest.raises(ConfigError, match="reference is stack cpu-gloo"):
        run_migration(
            MigrateRequest(
                inventory=LAB_INI, from_stack="cpu-gloo-next", reference_run=run_dir, out_dir=tmp_path
            ),
            ops_factory=_factory(fake),
        )


def _killed_in_canary_provisioning(tmp_path: Path, nodes: list[str]) -> tuple[FakeCluster, Path]:
    """A migration to the slow stack killed while it provisions the canary; its run folder."""
    fake = FakeCluster(nodes)
    fake.kill_during = "cpu-gloo-slow"
    with pytest.raises(Interrupted):
        run_migration(_req(tmp_path), ops_factory=_factory(fake))
    return fake, _run_dir(tmp_path)


def test_resume_after_a_kill_in_canary_provisioning_continues_from_the_canary(
    tmp_path: Path, nodes: list[str]
) -> None:
    fake, run_dir = _killed_in_canary_provisioning(tmp_path, nodes)
    assert [
        p.phase for p in MigrateRun.model_validate_json((run_dir / "migrate.json").read_text()).phases
    ] == ["freeze"]
    assert fake.venv[nodes[0]][0] is None  # half-made: neither A nor B
    r = resume_migration(run_dir, ops_factory=_factory(fake))
    assert r.resumes[0][0].holds == "mixed" and {s.holds for s in r.resumes[0][1:]} == {"A"}
    canary = next(p for p in r.phases if p.phase == "canary")
    assert canary.state == "passed" and canary.attempts == 2
    assert r.failed_phase == "compare" and r.rolled_back  # the slow stack, caught as before
    assert all(fake.venv[n][0] == "cpu-gloo" for n in nodes)
    events = [e for e in RunDir(run_dir).events() if e["event"] in ("run_resumed", "migrate_nodes")]
    assert [e["event"] for e in events] == ["run_resumed", "migrate_nodes"] and events[0]["phase"] == "canary"
    with pytest.raises(ConfigError, match="nothing to resume"):
        resume_migration(run_dir, ops_factory=_factory(fake))
    from orchestrator.store.rundir import who

    RunDir(run_dir).event("run_resumed", run_id=r.run_id, **who())  # an orch that is alive resumed it
    with pytest.raises(ConfigError, match="still running"):
        resume_migration(run_dir, ops_factory=_factory(fake))


def test_resume_that_finds_a_mixed_node_the_next_phase_does_not_touch_rolls_back(
    tmp_path: Path, nodes: list[str]
) -> None:
    fake, run_dir = _killed_in_canary_provisioning(tmp_path, nodes)
    state = json.loads((run_dir / "migrate.json").read_text())
    state["canary"] = [nodes[1]]  # say the canary was another node: the half-made one is outside it
    (run_dir / "migrate.json").write_text(json.dumps(state))
    r = resume_migration(run_dir, ops_factory=_factory(fake))
    assert r.failed_phase == "canary" and r.failure is not None and "hold neither" in r.failure
    assert r.rolled_back and r.certification is not None and r.certification.ok
    assert all(fake.venv[n][0] == "cpu-gloo" for n in nodes)


def test_the_cli_refuses_a_rollback_without_a_target_and_a_stack_the_run_did_not_freeze(
    tmp_path: Path, nodes: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "rollback", "-i", str(LAB_INI), "--out", str(tmp_path))
    assert code == 2 and "--to STACK or --to-run RUN_ID" in one_error_line(err)
    r = run_migration(_req(tmp_path, to="cpu-gloo-next"), ops_factory=_factory(FakeCluster(nodes)))
    code, _, err = run_cli(
        capsys,
        "rollback",
        "-i",
        str(LAB_INI),
        "--out",
        str(tmp_path),
        "--to",
        "cpu-gloo-slow",
        "--to-run",
        r.run_id,
    )
    assert code == 2 and "froze stack cpu-gloo" in one_error_line(err)
    code, out, _ = run_cli(capsys, "report", str(r.run_dir), "--format", "md", "-o", "-")
    assert code == 0 and "## Phases" in out and "| compare | passed |" in out and "mode: sequential" in out
    code, _, err = run_cli(
        capsys,
        "migrate",
        "run",
        "--from",
        "cpu-gloo",
        "--to",
        "cpu-gloo-slow",
        "-p",
        "smoke",
        "-i",
        str(LAB_INI),
        "--canary",
        "3",
        "--out",
        str(tmp_path),
    )
    assert code == 2 and "the canary is a subset" in one_error_line(err)


def test_cluster_ops_runs_the_plan_through_the_pipeline_with_labelled_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real run_plan on this machine (local backend, 2 ranks of collbench): the step folders
    carry the label, and busbw comes back per series and size."""
    import sys

    import orchestrator.stacks as stacks
    from orchestrator.inventory import DEFAULT_INVENTORY, load_inventory
    from orchestrator.models.plan import SizeRange
    from orchestrator.plan import resolve_plan
    from orchestrator.runs.lifecycle import Ending
    from orchestrator.runs.migrate import ClusterOps

    monkeypatch.setattr(stacks, "stack_python", lambda name: (sys.executable, {"OMP_NUM_THREADS": "1"}))
    smoke = resolve_plan("smoke", None)
    plan = smoke.model_copy(
        update={
            "collectives": ["all_reduce"],
            "sizes": SizeRange(min=1024, max=4096, factor=4),
            "iters": 2,
            "warmup_iters": 1,
            "ladder": smoke.ladder.model_copy(update={"ranks_per_node": "2"}),
        }
    )
    with RunLifecycle.create(tmp_path, "t-migrate-1") as life:
        run = ClusterOps(life, load_inventory(DEFAULT_INVENTORY), plan).run_plan(
            "cpu-gloo", ["localhost"], "canary", faults=False
        )
        life.finish(Ending("accepted", 0))
    assert run.verdict == "pass" and list(run.busbw) == ["all_reduce@n1xg2"]
    assert sorted(run.busbw["all_reduce@n1xg2"]) == [1024, 4096] and all(
        v > 0 for v in run.busbw["all_reduce@n1xg2"].values()
    )
    assert [p.name for p in (tmp_path / "t-migrate-1" / "steps").iterdir()] == ["canary-n1xg2"]


def test_cluster_ops_provisions_with_the_venv_removed_and_names_failed_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: list[str]
) -> None:
    import orchestrator.provision.service as service
    from orchestrator.inventory import load_inventory
    from orchestrator.provision.runner import HostOutcome, PlaybookResult
    from orchestrator.runs.lifecycle import Ending
    from orchestrator.runs.migrate import ClusterOps

    seen: list[ProvisionRequest] = []

    def fake(req: ProvisionRequest) -> service.ProvisionReport:
        seen.append(req)
        hosts = {
            nodes[0]: HostOutcome(host=nodes[0], ok=3, changed=2),
            nodes[1]: HostOutcome(host=nodes[1], failed=1, message="pip: no wheel for numpy"),
        }
        res = PlaybookResult(
            playbook="provision.yml",
            status="failed",
            rc=2,
            hosts=hosts,
            artifacts_dir=tmp_path,
            elapsed_s=1.0,
        )
        return service.ProvisionReport(stack=req.stack, run_dir=tmp_path, result=res)

    monkeypatch.setattr(service, "provision", fake)
    with RunLifecycle.create(tmp_path, "t-migrate-2") as life:
        failed = ClusterOps(life, load_inventory(LAB_INI), None).provision("cpu-gloo-next", nodes, clean=True)
        life.finish(Ending("accepted", 0))
    assert seen[0].clean and seen[0].limit == ",".join(nodes) and seen[0].stack == "cpu-gloo-next"
    assert failed == {nodes[1]: "pip: no wheel for numpy", nodes[2]: "not in the playbook's results"}


def test_a_serving_plan_with_better_throughput_and_worse_p99_fails_the_compare() -> None:
    from orchestrator.migrate.procedure import compare_runs

    def run(label: str, tput: float, p99: float) -> PlanRun:
        return PlanRun(label=label, stack="s", nodes=["n1"], verdict="pass", throughput=tput, p99_s=p99)

    a = [run("a1", 100, 1.0), run("a2", 102, 1.02)]
    faster_but_late = compare_runs(a, [run("b1", 130, 1.6)], [], mode="interleaved", why_mode="", order=[])
    assert faster_but_late.serving is not None
    assert faster_but_late.serving.direction == "worse for interactive"
    assert faster_but_late.worse == [f"serving worse for interactive: {faster_but_late.serving.reason}"]
    assert "more throughput does not buy back a worse p99" in faster_but_late.serving.reason
    same = compare_runs(a, [run("b1", 101, 1.01)], [], mode="interleaved", why_mode="", order=[])
    assert same.serving is not None and same.serving.direction == "same" and same.worse == []


def test_a_plan_with_no_step_on_the_canary_is_refused_before_any_node_is_touched(
    tmp_path: Path, nodes: list[str]
) -> None:
    """Seen on the lab: a ladder of 2..N nodes has nothing to run on a 1-node canary, and the
    canary gate failed only after B had been installed on it."""
    plan = tmp_path / "p.yaml"
    plan.write_text(
        "name: wide\nladder: {nodes: '2..N', ranks_per_node: [1]}\ncollectives: [all_reduce]\n"
        "sizes: {min: 1K, max: 16M, factor: 4}\n"
    )
    fake = FakeCluster(nodes)
    req = _req(tmp_path).model_copy(update={"plan": str(plan)})
    with pytest.raises(ConfigError, match=r"plan wide cannot run on the canary \(" + nodes[0]) as e:
        run_migration(req, ops_factory=_factory(fake))
    assert e.value.hint is not None and "--canary" in e.value.hint
    assert fake.provisioned == [] and not [p for p in tmp_path.iterdir() if "-migrate-" in p.name]
    # with a canary of two nodes it fits
    r = run_migration(req.model_copy(update={"canary": 2}), ops_factory=_factory(fake))
    assert r.failed_phase != "canary" and fake.provisioned[0] == ("cpu-gloo-slow", nodes[:2], True)
