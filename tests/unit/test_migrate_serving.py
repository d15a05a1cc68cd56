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
from test_migrate_run import FakeCluster
from test_serving_quality import GATE
from test_serving_run import setup

from orchestrator.migrate.ab import serving_levels
from orchestrator.models.cluster import Cluster
from orchestrator.models.migrate import MigrateRun, PlanRun, ServingFigures
from orchestrator.models.plan import Plan, Thresholds
from orchestrator.models.requests import MigrateRequest
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
    assert set(runs) == {"baseline", "control", "canary", "certify"}
    for r in runs.values():
        assert [(f.step, f.level) for f in r.serving] == [("fake-r1", "c1"), ("fake-r1", "c4")]
        assert all(f.n == 100 and f.ttft_n == 100 and f.ttft_p99_ms for f in r.serving)
    j = runs["canary"].quality["fake-r1"]
    assert not j.passed and j.b_vs_a.exact_match == 0.0
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
