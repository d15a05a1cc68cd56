"""Serving steps inside `orch migrate run`, through the real Procedure and the real
ClusterOps.run_plan (serving steps on the local backend with the stand-in engine of
test_serving_run, tests/unit/sse_server.py: `--echo` answers greedily, `--diverge-at N` changes
every word from token N, as a B that changes numerics would). Provisioning and fingerprints are
test_migrate_run's FakeCluster; each stack's Python prefix is a folder of its own whose
bin/transformers is the stand-in with that arm's flags.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_usage import run_cli
from test_migrate_run import LAB_INI, FakeCluster, _factory
from test_serving_quality import GATE
from test_serving_run import setup

from orchestrator.inventory import load_inventory
from orchestrator.migrate.ab import serving_levels
from orchestrator.models.cluster import Cluster
from orchestrator.models.decision import QualityJudgement
from orchestrator.models.migrate import MigrateRun, PlanRun, ServingFaultFigures, ServingFigures
from orchestrator.models.plan import Plan, Thresholds
from orchestrator.models.quality import OutputFigures
from orchestrator.models.requests import MigrateRequest
from orchestrator.models.results import Percentiles
from orchestrator.report.formats import render_junit
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.runs.migrate import ClusterOps, run_migration
from orchestrator.store.load import load_run


class Ops(ClusterOps):
    """The real run_plan and quality judgement; provisioning and fingerprints from the fake."""

    def __init__(self, life: RunLifecycle, cluster: Cluster, plan: Plan | None, fake: FakeCluster) -> None:
        super().__init__(life, cluster, plan)
        self.fake = fake
        self.provision = fake.provision  # type: ignore[method-assign]
        self.fingerprint = fake.fingerprint  # type: ignore[method-assign]


def _migrate(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    b_flags: str,
    extra: str = "",
    *,
    to: str = "cpu-gloo-next",
    rounds: int = 2,
) -> MigrateRun:
    for arm in ("a", "b"):
        (tmp_path / arm).mkdir(parents=True)
    req_a, _ = setup(tmp_path / "a", engine_flags="--echo")
    req_b, _ = setup(tmp_path / "b", engine_flags=b_flags)
    plan = Path(str(req_a.plan))
    plan.write_text(plan.read_text() + GATE + extra)
    prefix = {"cpu-gloo": str(req_a.python), "cpu-gloo-next": str(req_b.python)}
    monkeypatch.setattr("orchestrator.stacks.stack_python", lambda name: (prefix[str(name)], {}))
    fake = FakeCluster(["localhost"])
    req = MigrateRequest(
        inventory=req_a.inventory, from_stack="cpu-gloo", to_stack=to, plan=str(plan),
        out_dir=tmp_path / "runs", rounds=rounds,
    )  # fmt: skip
    state = run_migration(req, ops_factory=lambda life, cluster, p: Ops(life, cluster, p, fake))
    return state


def test_b_that_changes_answers_fails_the_canary_quality_gate_and_rolls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _migrate(tmp_path / "x", monkeypatch, "--echo --diverge-at 1")
    assert state.failed_phase == "canary" and state.exit_code == 1
    why = state.failure or ""
    assert "output quality of fake-r1 failed" in why and "exact match 0.0%" in why, why
    assert "A-against-A floor: A vs A (run twice) 100.0%" in why, why
    assert "first divergence at words 1" in why, why
    phases = {p.phase: p.state for p in state.phases}
    assert phases["scale"] == phases["compare"] == "skipped"
    assert phases["rollback"] == "passed" and state.rolled_back
    runs = {r.label: r for r in state.plan_runs}
    # every plan run ran its serving step with its figures per level, the canary on B's engine
    # (certify-confirm when the machine's load made the first re-run's timings worse than A's)
    assert set(runs) - {"certify-confirm"} == {"baseline", "control", "canary", "certify"}
    for r in runs.values():
        assert [(f.step, f.level) for f in r.serving] == [("fake-r1", "c1"), ("fake-r1", "c4")]
        assert all(f.n == 100 and f.ttft_n == 100 and f.ttft_p99_ms for f in r.serving)
        # each figure's own se within the run, for the compare's band (metrics/serving.run_log_se)
        assert all({"tput", "ttft", "itl", "tpot"} <= set(f.log_se) for f in r.serving), r.serving
    j = runs["canary"].quality["fake-r1"]
    assert not j.passed and j.b_vs_a.exact_match == 0.0
    # A's answers after the rollback are A's answers before it
    again = runs["certify"].quality["fake-r1"]
    assert again.passed and again.b_vs_a.exact_match == 1.0
    # certify re-ran A's serving figures and judged them with the band (its phase says so)
    cert = next(p for p in state.phases if p.phase == "certify")
    assert "re-run of the plan on A" in cert.gate
    # the report says why, with the gate's figures, and prints every run's serving figures
    report = (state.run_dir / "report.md").read_text()
    assert "## Output quality, B against A" in report and "FAILED" in report
    assert "exact match 0.0% (n=32)" in report and "## Serving figures per plan run" in report
    assert report.count("fake-r1 c4") >= 4  # baseline, control, canary, certify
    # JUnit of the run (orch report --format junit): one failed case that says why, with the figures
    junit = render_junit(load_run(state.run_dir))
    assert "<failure" in junit and "exact match 0.0% (n=32)" in junit, junit


def test_same_answers_pass_quality_and_a_figure_the_band_cannot_see_is_blind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # detect 1% for TTFT p99: the band is at least the 5% floor, so the compare cannot see it
    state = _migrate(tmp_path / "y", monkeypatch, "--echo", "thresholds: {detect: {ttft_p99: 1%}}\n")
    phases = {p.phase: p.state for p in state.phases}
    assert phases["canary"] == phases["scale"] == "passed", state.failure
    assert state.failed_phase == "compare"
    cmp = state.comparison
    assert cmp is not None and cmp.quality["fake-r1"].passed
    assert [(lv.step, lv.level) for lv in cmp.serving_levels] == [("fake-r1", "c1"), ("fake-r1", "c4")]
    for lv in cmp.serving_levels:
        by = {f.figure: f for f in lv.figures}
        assert set(by) == {"output_tokens_per_s", "ttft_p99", "itl_p99", "tpot_p99", "slo_attainment"}
        assert by["ttft_p99"].verdict == "blind" and by["ttft_p99"].detect == 0.01
        assert by["output_tokens_per_s"].verdict != "blind"  # no detect for it
        assert lv.blind and lv.blind[0].startswith("ttft_p99: the A-against-A band")
    assert "blind: ttft_p99" in (state.failure or "")
    assert state.rolled_back
    report = (state.run_dir / "report.md").read_text()
    assert "## Serving compare" in report and "| blind |" in report


def _run(label: str, tput: float, ttft: float, n: int = 200) -> PlanRun:
    fig = ServingFigures(step="s", level="c4", n=n, ttft_p99_ms=ttft, ttft_n=n, itl_p99_ms=5.0, itl_n=n,
                         tpot_p99_ms=5.0, tpot_n=n, output_tokens_per_s=tput, slo_attainment=1.0)  # fmt: skip
    return PlanRun(label=label, stack="x", nodes=["n"], verdict="pass", serving=[fig])


def test_serving_levels_interactive_rule_and_blind() -> None:
    a, c = [_run("a", 100.0, 50.0)], [_run("c", 101.0, 51.0)]
    # faster but a much worse TTFT p99: worse for interactive, naming the figure
    (lv,) = serving_levels(a, [_run("b", 150.0, 80.0)], c, detect={})
    assert lv.direction == "worse for interactive" and "ttft_p99" in lv.reason
    # the same figures: same, and not blind while detect is wider than the band
    (lv,) = serving_levels(a, [_run("b", 100.0, 50.0)], c, detect={"output_tokens_per_s": 0.10})
    assert lv.direction == "same" and not lv.blind
    # a control that moved 30%: the band is that wide, wider than detect 10%: blind, never same
    (lv,) = serving_levels(a, [_run("b", 100.0, 50.0)], [_run("c", 130.0, 50.0)],
                           detect={"output_tokens_per_s": 0.10})  # fmt: skip
    (tput,) = [f for f in lv.figures if f.figure == "output_tokens_per_s"]
    assert tput.verdict == "blind" and tput.change.band == pytest.approx(0.30)


def test_a_p99s_own_sampling_error_widens_its_band_as_in_compare() -> None:
    """A against A on the lab (must-show 3, run 1): TPOT p99 +9.4 % with A and A' within 1 %: one
    pair's band (+-6 %) called it worse; each run's own se of ln p99 (its order statistics and its
    drift, metrics/serving.run_log_se, as compare's compare_level) makes the band wide enough."""

    def run(label: str, tpot: float, se: float | None) -> PlanRun:
        r = _run(label, 1275.0, 16.7)
        r.serving[0].tpot_p99_ms = tpot
        r.serving[0].log_se = {"tpot": se} if se is not None else {}
        return r

    for se, verdict in ((None, "worse"), (0.05, "same")):
        a = [run("ab1-A", 3.09, se), run("ab6-A", 3.08, se)]
        b = [run("ab2-B", 3.38, se), run("ab5-B", 3.37, se)]
        c = [run("ab3-A-control", 3.10, se), run("ab4-A-control", 3.09, se)]
        (lv,) = serving_levels(a, b, c, detect={})
        (tpot,) = [f for f in lv.figures if f.figure == "tpot_p99"]
        assert tpot.verdict == verdict, (se, tpot.change)
    # a change beyond what the runs' own se allows is still worse (must-show 2: TTFT p99 +164 %)
    a = [run("ab1-A", 3.09, 0.05), run("ab6-A", 3.08, 0.05)]
    (lv,) = serving_levels(a, [run("ab2-B", 6.0, 0.05), run("ab5-B", 6.1, 0.05)], a, detect={})
    assert [f.verdict for f in lv.figures if f.figure == "tpot_p99"] == ["worse"]


def test_certify_judges_the_rerun_against_every_run_of_a(tmp_path: Path) -> None:
    """A baseline that came out apart (the lab: 1406 tokens/s against A's other runs at 1198-1276)
    fails no certify whose re-run lies among A's runs: certify's serving band is the spread of all
    of A's runs before the rollback, not baseline against control alone."""
    nodes = [n.name for n in load_inventory(LAB_INI).nodes]

    class HighBaseline(Served):
        def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
            run = super().run_plan(stack, nodes, label, faults=faults)
            ttft = {"baseline": 40.0, "control": 44.0, "certify": 47.0, "certify-confirm": 47.0}.get(label)
            if ttft is None and label.startswith("ab"):
                ttft = 46.0 + int(label[2]) % 3  # A, B and A' between 46 and 48
            if ttft is not None:
                run.serving[0].ttft_p99_ms = ttft
            return run

    state = _served(tmp_path, HighBaseline(nodes, "cpu-gloo", b_speed=1.0, certify_ttft=47.0, fail=set()))
    phases = {p.phase: p for p in state.phases}
    assert phases["compare"].state == "passed", phases["compare"].reason
    # against the baseline alone (+17.5 %, control's band +-10 %) certify would fail; against A's
    # runs (40-48 ms) it passes
    assert phases["certify"].state == "passed", phases["certify"].reason


def test_detect_reads_percentages_and_old_plan_runs_load() -> None:
    assert Thresholds.model_validate({"detect": {"ttft_p99": "10%", "output_tokens_per_s": 0.2}}).detect == {
        "ttft_p99": 0.1, "output_tokens_per_s": 0.2,
    }  # fmt: skip
    with pytest.raises(ValueError):
        Thresholds.model_validate({"detect": {"ttft_p99": "-5%"}})
    with pytest.raises(ValueError):
        Thresholds.model_validate({"detect": {"e2e_p42": "5%"}})
    old = PlanRun.model_validate({"label": "baseline", "stack": "a", "nodes": ["n"], "verdict": "pass",
                                  "busbw": {"all_reduce@n1xg1": {"1024": 1.0}}})  # fmt: skip
    assert old.serving == [] and old.quality == {}


def test_plan_show_states_what_the_compare_must_detect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    req, _ = setup(tmp_path)
    plan = Path(str(req.plan))
    plan.write_text(plan.read_text() + "thresholds: {detect: {ttft_p99: 10%, output_tokens_per_s: 0.2}}\n")
    code, out, err = run_cli(capsys, "plan", "show", "--plan", str(plan), "-i", str(req.inventory))
    assert code == 0, err
    assert "migrate compare must detect: ttft_p99 10%, output_tokens_per_s 20%" in out


def test_interleaved_compare_adds_rounds_up_to_the_bound_then_names_the_figure_blind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A against A on one installation: interleaved; TTFT p99 at 1% can never be seen (floor 5%)
    monkeypatch.setattr("orchestrator.migrate.procedure.MAX_ROUNDS", 3)
    blind = "thresholds: {detect: {ttft_p99: 1%}}\n"
    state = _migrate(tmp_path / "z", monkeypatch, "--echo", blind, to="cpu-gloo", rounds=1)
    cmp = state.comparison
    assert cmp is not None and cmp.mode == "interleaved" and cmp.rounds == 3
    assert len(cmp.order) == 9 and cmp.order[:3] == ["ab1-A", "ab2-B", "ab3-A-control"]
    assert cmp.quality["fake-r1"].passed and cmp.quality["fake-r1"].b_vs_a.exact_match == 1.0
    for lv in cmp.serving_levels:
        (ttft,) = [f for f in lv.figures if f.figure == "ttft_p99"]
        assert ttft.verdict == "blind" and ttft.change.n_a == 300  # 3 runs of A, 100 requests each
    assert state.failed_phase == "compare"
    assert "blind after 3 interleaved rounds, the bound is 3" in (state.failure or "")
    events = [json.loads(x) for x in (state.run_dir / "journal.jsonl").read_text().splitlines()]
    assert [e["rounds"] for e in events if e.get("event") == "migrate_more_rounds"] == [3]


class Served(FakeCluster):
    """test_migrate_run's fake cluster whose plan runs also carry a serving level and quality
    outputs: B (the `b` stack) at `b_speed` x A's throughput and A's TTFT p99 / `b_speed`; the
    certify re-run's TTFT p99 given; the quality judgement failing for the plan runs named."""

    def __init__(
        self,
        nodes: list[str],
        b: str,
        b_speed: float,
        certify_ttft: float,
        fail: set[str],
        control: float = 1.01,
    ) -> None:
        super().__init__(nodes)
        self.b, self.b_speed, self.certify_ttft, self.fail = b, b_speed, certify_ttft, fail
        self.control = control
        self.judged: list[tuple[str, str]] = []

    def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
        run = super().run_plan(stack, nodes, label, faults=faults)
        speed = self.b_speed if stack == self.b else 1.0
        ttft = self.certify_ttft if label.startswith("certify") else 50.0 / speed
        ttft *= self.control if label == "control" else 1.0
        run.serving = [
            ServingFigures(step="chat-r1", level="c4", n=200, ttft_p99_ms=ttft, ttft_n=200, itl_p99_ms=5.0,
                           itl_n=600, tpot_p99_ms=5.0, tpot_n=200, output_tokens_per_s=100.0 * speed,
                           slo_attainment=1.0, error_rate=0.0, abort_rate=0.0)
        ]  # fmt: skip
        run.quality_outputs = {"chat-r1": f"steps/{label}-chat-r1/quality"}
        return run

    def judge_quality(self, a: PlanRun, b: PlanRun) -> dict[str, QualityJudgement]:
        self.judged.append((a.label, b.label))
        ok = b.label not in self.fail
        none = Percentiles(n=0)
        fig = OutputFigures(name="B vs A", n=32, unit="words", exact_match=1.0 if ok else 0.5,
                            agreed=none, first_divergence=none)  # fmt: skip
        floor = fig.model_copy(update={"name": "A vs A (run twice)", "exact_match": 1.0})
        reasons = [] if ok else ["exact match 50.0% (n=32) below 0.95 x the A-against-A floor 100.0%"]
        return {"chat-r1": QualityJudgement(passed=ok, reasons=reasons, b_vs_a=fig, floor=[floor])}


def _served(tmp_path: Path, fake: Served) -> MigrateRun:
    req = MigrateRequest(inventory=LAB_INI, from_stack="cpu-gloo", to_stack=fake.b, plan="smoke",
                         out_dir=tmp_path)  # fmt: skip
    return run_migration(req, ops_factory=_factory(fake))


def test_a_failed_quality_gate_fails_the_compare_and_rolls_back_even_when_b_is_faster(tmp_path: Path) -> None:
    nodes = [n.name for n in load_inventory(LAB_INI).nodes]
    fake = Served(nodes, "cpu-gloo-next", b_speed=1.5, certify_ttft=50.0, fail={"scale"})
    state = _served(tmp_path, fake)
    # the gate ran at the canary (passed there) and in the compare (B's scale run against A's baseline)
    # and in certify: A's re-run after the rollback against A's baseline
    assert fake.judged == [("baseline", "canary"), ("baseline", "scale"), ("baseline", "certify")]
    phases = {p.phase: p.state for p in state.phases}
    assert phases["canary"] == "passed" and phases["compare"] == "failed" and state.failed_phase == "compare"
    cmp = state.comparison
    assert cmp is not None
    (lv,) = cmp.serving_levels
    assert lv.direction == "better"  # faster on every figure, and still not accepted
    assert "fails the output-quality gate" in (state.failure or "")
    assert "exact match 50.0% (n=32)" in (state.failure or "") and "A-against-A floor" in (
        state.failure or ""
    )
    assert phases["rollback"] == "passed" and state.rolled_back and phases["certify"] == "passed"


def test_certify_judges_as_serving_figures_within_the_band(tmp_path: Path) -> None:
    nodes = [n.name for n in load_inventory(LAB_INI).nodes]
    # B is A; the certify re-run on A has twice the TTFT p99: certify fails naming step, level, figure
    fake = Served(nodes, "cpu-gloo-next", b_speed=1.0, certify_ttft=100.0, fail=set())
    state = _served(tmp_path, fake)
    phases = {p.phase: p for p in state.phases}
    assert (
        phases["compare"].state == "passed" and "1 serving levels within the band" in phases["compare"].reason
    )
    assert phases["certify"].state == "failed"
    assert (
        "serving chat-r1 level c4 worse" in phases["certify"].reason
        and "ttft_p99" in phases["certify"].reason
    )


def test_certify_confirms_a_worse_rerun_before_failing(tmp_path: Path) -> None:
    """A first re-run worse than A is run again (the lab: one re-run of a gloo plan at -53 % on one
    node, gloo's slow mode, A's fingerprints exact): certify passes when the second is within the
    band and says so, and fails naming both when both are worse."""
    nodes = [n.name for n in load_inventory(LAB_INI).nodes]

    class Once(Served):
        def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
            run = super().run_plan(stack, nodes, label, faults=faults)
            if label == "baseline":
                self.base = run
            if label == "certify-confirm":  # A's own figures
                run.serving[0].ttft_p99_ms = 50.0
                run.busbw = self.base.busbw
            return run

    state = _served(tmp_path, Once(nodes, "cpu-gloo-next", b_speed=1.0, certify_ttft=100.0, fail=set()))
    phases = {p.phase: p for p in state.phases}
    labels = [r.label for r in state.plan_runs if r.label.startswith("certify")]
    assert labels == ["certify", "certify-confirm"], labels
    assert phases["certify"].state == "passed", phases["certify"].reason
    reason = phases["certify"].reason
    assert "at the second try" in reason and "ttft_p99" in reason and "not confirmed" in reason
    # both worse: failed, both named
    fake = Served(nodes, "cpu-gloo-next", b_speed=1.0, certify_ttft=100.0, fail=set())
    state = _served(tmp_path / "both", fake)
    phases = {p.phase: p for p in state.phases}
    assert phases["certify"].state == "failed"
    assert "the re-run on A is worse" in phases["certify"].reason
    assert "the second re-run on A is worse" in phases["certify"].reason
    # a failed quality gate is not noise: no second re-run
    fake = Served(nodes, "cpu-gloo-next", b_speed=1.0, certify_ttft=50.0, fail={"certify"})
    state = _served(tmp_path / "answers", fake)
    assert state.failed_phase == "certify" and "answers otherwise" in (state.failure or "")
    assert "certify-confirm" not in [r.label for r in state.plan_runs]


def test_a_failed_canary_on_one_stack_still_gives_certify_an_a_against_a_band(tmp_path: Path) -> None:
    # A to A (one stack: the compare would interleave), the canary fails its quality gate, so no
    # interleaved A' run exists; freeze ran A twice, and certify's band is A against A (50 and 70
    # ms here, a loaded machine), not the bare 5 % floor: a re-run at 65 ms is within it
    nodes = [n.name for n in load_inventory(LAB_INI).nodes]
    fake = Served(nodes, "cpu-gloo", b_speed=1.0, certify_ttft=65.0, fail={"canary"}, control=1.4)
    state = _served(tmp_path, fake)
    labels = [r.label for r in state.plan_runs]
    assert labels[:2] == ["baseline", "control"] and "certify" in labels, labels
    assert not [x for x in labels if x.startswith("ab")], labels  # no interleaved round ran
    phases = {p.phase: p for p in state.phases}
    assert state.failed_phase == "canary" and phases["rollback"].state == "passed"
    assert phases["certify"].state == "passed", phases["certify"].reason
    # and a re-run beyond A's spread (A: 50 and 70 ms; the re-run 200 ms) is still worse
    fake = Served(nodes, "cpu-gloo", b_speed=1.0, certify_ttft=200.0, fail={"canary"}, control=1.4)
    state = _served(tmp_path / "slow", fake)
    cert = next(p for p in state.phases if p.phase == "certify")
    assert cert.state == "failed" and "ttft_p99" in cert.reason, cert.reason


class FaultyCluster(FakeCluster):
    """test_migrate_run's fake nodes, with a kill-worker during a serving step: each plan run with
    faults measures the outage and time to steady given for its arm (A in freeze, B in faults)."""

    def __init__(self, nodes: list[str], a: list[tuple[float, float]], b: list[tuple[float, float]]) -> None:
        super().__init__(nodes)
        self.faults = True
        self.measured = {"faults-A": a, "faults": b}

    def plan_has_serving_faults(self) -> bool:
        return True

    def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
        run = super().run_plan(stack, nodes, label, faults=faults)
        run.serving_faults = [
            ServingFaultFigures(step="tiny-r1", fault="kill-worker node1:engine", level="c4", repeat=k + 1,
                                status="recovered", outage_s=outage, to_steady_s=steady)
            for k, (outage, steady) in enumerate(self.measured[label] if faults else [])
        ]  # fmt: skip
        return run


def _faults_migration(
    tmp_path: Path, a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> MigrateRun:
    from orchestrator.inventory import load_inventory

    fake = FaultyCluster([n.name for n in load_inventory(LAB_INI).nodes], a, b)
    req = MigrateRequest(inventory=LAB_INI, from_stack="cpu-gloo", to_stack="cpu-gloo", plan="smoke",
                         out_dir=tmp_path)  # fmt: skip
    return run_migration(req, ops_factory=_factory(fake))


def test_faults_phase_sets_b_outage_beside_a_and_fails_when_worse_beyond_tolerance(tmp_path: Path) -> None:
    # the same outage and time to steady on both arms: the faults phase passes, naming both figures
    same = _faults_migration(tmp_path / "same", [(6.0, 9.0), (6.2, 9.2)], [(6.0, 9.0), (6.2, 9.2)])
    phases = {p.phase: p for p in same.phases}
    assert phases["faults"].state == "passed", same.failure
    assert "kill-worker node1:engine on tiny-r1: outage B 6.1 s vs A 6.1 s" in phases["faults"].reason
    reason = phases["faults"].reason
    assert "steady B 9.1 s vs A 9.1 s" in reason and reason.endswith(": same"), reason
    labels = [r.label for r in same.plan_runs]
    assert "faults-A" in labels and labels.index("faults-A") < labels.index("faults")  # A in freeze
    (d,) = same.fault_compare
    assert d.verdict == "same" and d.outage.change == "same" and d.outage.n_a == d.outage.n_b == 2
    # B's outage 40% longer (beyond the 25% floor): the faults gate fails, and the run rolls back
    worse = _faults_migration(tmp_path / "worse", [(6.0, 9.0), (6.2, 9.2)], [(8.4, 9.0), (8.8, 9.2)])
    assert worse.failed_phase == "faults" and worse.exit_code == 1 and worse.rolled_back
    why = worse.failure or ""
    assert "recovers worse" in why and "outage B 8.6 s vs A 6.1 s" in why and why.endswith(": worse"), why
    (d,) = worse.fault_compare
    assert d.outage.change == "worse" and d.to_steady.change == "same" and d.verdict == "worse"
    # the report sets them in a table, with the band and the verdict, in Markdown and HTML
    report = (worse.run_dir / "report.md").read_text()
    assert "## Serving faults, B against A" in report, report
    row = "| tiny-r1 | kill-worker node1:engine | 6.1 | 8.6 | ±25% | 9.1 | 9.1 | ±25% | 2/2 | worse |"
    assert row in report, report
    assert "Serving faults, B against A" in (worse.run_dir / "report.html").read_text()
    # within the floor (+10%): same
    near = _faults_migration(tmp_path / "near", [(6.0, 9.0)], [(6.6, 9.5)])
    assert {p.phase: p.state for p in near.phases}["faults"] == "passed", near.failure


def test_recovery_figure_change_where_a_side_never_failed() -> None:
    from orchestrator.metrics.decision import recovery_figure_change

    assert recovery_figure_change("outage (s)", [0.0], [3.0]).change == "worse"  # A had none, B had one
    assert recovery_figure_change("outage (s)", [0.0], [3.0]).note == "A had none; band +-0 s"
    assert recovery_figure_change("outage (s)", [3.0], [0.0]).change == "better"
    assert recovery_figure_change("outage (s)", [0.0], [0.0]).change == "same"
    assert recovery_figure_change("outage (s)", [], [3.0]).change == "n/a"
    assert recovery_figure_change("outage (s)", [6.0], [7.4]).change == "same"  # +23%, inside the 25% floor
    assert recovery_figure_change("outage (s)", [6.0], [7.6]).change == "worse"  # +27%
    # a noisy A widens the band beyond the floor: B +40% over A's median is then the same
    noisy = recovery_figure_change("outage (s)", [3.0, 6.0, 9.0, 6.0], [8.4])
    assert noisy.change == "same" and noisy.band is not None and noisy.band > 0.4


def test_plan_run_keeps_each_serving_fault_recovery_from_the_step_result() -> None:
    from serving_fault_run import records, step_result

    from orchestrator.runs.migrate import serving_fault_figures

    res = step_result(records(recover_second=False), step_id="faults-chat-r1")
    figs = serving_fault_figures("faults", [res])
    assert [(f.step, f.fault, f.repeat) for f in figs] == [
        ("chat-r1", "kill-worker localhost:engine", 1),
        ("chat-r1", "kill-worker localhost:engine", 2),
    ]
    first, second = (f.recovery for f in res.faults)
    assert first is not None and second is not None
    assert (figs[0].outage_s, figs[0].to_steady_s, figs[0].status) == (
        first.outage_s, first.to_steady_s, first.status,
    )  # fmt: skip
    assert figs[0].outage_s is not None and figs[0].outage_s > 0
    assert figs[1].status == "not-recovered" and figs[1].to_steady_s is None


def test_a_repeat_of_b_that_never_gets_steady_again_is_worse() -> None:
    from orchestrator.migrate.fault_compare import fault_decisions

    def run(label: str, *statuses: str) -> PlanRun:
        figs = [
            ServingFaultFigures(step="s", fault="kill-worker n1:engine", level="c4", repeat=k + 1, status=st,
                                outage_s=5.0, to_steady_s=None if st == "not-recovered" else 8.0)
            for k, st in enumerate(statuses)
        ]  # fmt: skip
        return PlanRun(label=label, stack="x", nodes=["n1"], verdict="pass", serving_faults=figs)

    (d,) = fault_decisions(
        run("faults-A", "recovered", "recovered"), run("faults", "recovered", "not-recovered")
    )
    assert d.verdict == "worse" and d.to_steady.change == "same", d
    assert "B not steady again in 1 of 2 repeats (A 0 of 2)" in d.reason
    # A as lost as B: the figures decide
    (d,) = fault_decisions(
        run("faults-A", "not-recovered", "recovered"), run("faults", "recovered", "not-recovered")
    )
    assert d.verdict == "same", d
    # a fault A did not run: n/a, named
    (d,) = fault_decisions(run("faults-A"), run("faults", "recovered"))
    assert d.verdict == "n/a" and "not measured on both sides" in d.reason


def test_interleaved_labels_are_written_and_read_by_one_rule() -> None:
    from orchestrator.migrate.procedure import ab_arm, ab_label

    assert [ab_arm(ab_label(k, arm)) for k, arm in ((1, "A"), (2, "B"), (12, "A-control"))] == [
        "A", "B", "A-control",
    ]  # fmt: skip
    # freeze's and certify's labels, and look-alikes, are no interleaved arm
    others = ("faults-A", "abc-A", "ab0-A", "ab1-A-controlled", "ab1-C", "control", "certify-confirm")
    assert [ab_arm(x) for x in others] == [None] * len(others)
