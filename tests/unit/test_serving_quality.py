"""The output-quality gate in scale-test (docs/quality.md, "In scale-test"), through the real
scale_test with the stand-in engine of test_serving_run (tests/unit/sse_server.py, `--echo`: it
answers greedily, the prompt's words in turn; `--diverge-at N`: every word from token N changed,
as an engine update that changes numerics would).

A run with `quality:` keeps its outputs and records its own A-against-A floor; it is set as
baseline `golden`; a later run whose thresholds name `golden` is judged against its outputs: the
same engine passes, a diverging one fails the step naming the exact match and the floor.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_cli_usage import run_cli
from test_serving_baseline import _with_baseline, no_store_env  # noqa: F401 (its fixture)
from test_serving_run import setup

from orchestrator.cli.run import render_serving
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.report.formats import render_junit, render_markdown
from orchestrator.report.html import render_html
from orchestrator.runs.scale_test import scale_test
from orchestrator.store.load import load_run

GATE = "quality: {max_tokens: 4, concurrency: 2, min_exact_match_of_floor: 0.95}\n"


def _arm(folder: Path, runs: Path, flags: str) -> ScaleTestRequest:
    """test_serving_run's setup in a folder of its own, its runs in the shared runs folder (one store)."""
    folder.mkdir()
    req, _ = setup(folder, engine_flags=flags)
    return req.model_copy(update={"out_dir": runs})


def _plan(plan: Path, baseline: str | None = None) -> None:
    plan.write_text(plan.read_text() + GATE)
    if baseline is not None:
        _with_baseline(plan, baseline)


@pytest.mark.usefixtures("no_store_env")
def test_quality_gate_in_scale_test_against_a_stored_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    req = _arm(tmp_path / "a", runs, "--echo")
    _plan(Path(str(req.plan)))
    first = scale_test(req)
    assert first.exit_code == EXIT_OK, [r.reasons for r in first.serving]
    (step,) = first.serving
    q = step.quality
    assert q is not None and q.error is None and q.judgement is None and q.baseline is None
    # this run's own floor: A run twice, A at 1 against 2; a greedy engine agrees with itself
    assert [f.name for f in q.floor] == ["A vs A (run twice)", "A c1 vs c2"]
    assert all(f.exact_match == 1.0 and f.n == 32 for f in q.floor)
    assert {p.name for p in (first.run_dir / q.outputs).iterdir()} == {
        "inputs.json", "A-c2-1.jsonl", "A-c2-2.jsonl", "A-c1.jsonl"
    }  # fmt: skip
    # the stored run reads back with its quality result
    (stored,) = load_run(first.run_dir).serving
    assert stored.quality == q
    code, _, err = run_cli(
        capsys, "baseline", "set", str(first.run_dir), "--name", "golden", "--store", str(runs / "orch.db")
    )
    assert code == 0, err
    loose = "{name: golden, min_throughput_fraction: 0.001}"

    # an engine update that changes answers: the step fails naming exact match and floor
    req_b = _arm(tmp_path / "b", runs, "--echo --diverge-at 1")
    _plan(Path(str(req_b.plan)), loose)
    worse = scale_test(req_b)
    assert worse.exit_code == EXIT_THRESHOLDS
    (step,) = worse.serving
    assert step.verdict == "fail" and step.quality is not None
    j = step.quality.judgement
    assert j is not None and not j.passed and j.b_vs_a.exact_match == 0.0
    assert step.quality.baseline_run == first.run_id
    (reason,) = [r for r in step.reasons if "output quality" in r]
    assert f"step fake-r1: output quality against baseline golden (run {first.run_id}): " in reason
    assert "exact match 0" in reason and "A-against-A floor 100" in reason
    # shown in the report and in JUnit
    rec = load_run(worse.run_dir)
    assert "Output quality" in render_markdown(rec) and "**FAIL**" in render_markdown(rec)
    assert 'id="quality-fake-r1"' in render_html(rec) and "exact match 0.0%" in render_html(rec)
    capsys.readouterr()
    render_serving(worse.run_id, worse.serving)
    printed = capsys.readouterr().out
    shown = f"fake-r1: output quality against baseline golden (run {first.run_id}): exact match 0.0%"
    assert shown in printed
    junit = render_junit(rec)
    assert 'name="quality fake-r1 against baseline golden"' in junit and "exact match 0" in junit

    # the same engine again: passes, judged against the baseline's floor
    req_c = _arm(tmp_path / "c", runs, "--echo")
    _plan(Path(str(req_c.plan)), loose)
    same = scale_test(req_c)
    assert same.exit_code == EXIT_OK, [r.reasons for r in same.serving]
    (step,) = same.serving
    assert step.quality is not None and step.quality.judgement is not None
    assert step.quality.judgement.passed and step.quality.judgement.b_vs_a.exact_match == 1.0

    # a baseline without outputs (made before the plan had quality:) is named, not judged against
    shutil.rmtree(first.run_dir / "steps/fake-r1/quality")
    req_d = _arm(tmp_path / "d", runs, "--echo --diverge-at 0")
    _plan(Path(str(req_d.plan)), loose)
    unjudged = scale_test(req_d)
    assert unjudged.exit_code == EXIT_OK, [r.reasons for r in unjudged.serving]
    (step,) = unjudged.serving
    assert step.quality is not None and step.quality.judgement is None
    assert any(f"baseline golden (run {first.run_id}) kept no quality outputs" in w for w in step.warnings)
    junit = render_junit(load_run(unjudged.run_dir))
    assert 'name="quality fake-r1 against baseline golden"' in junit and "<skipped" in junit
