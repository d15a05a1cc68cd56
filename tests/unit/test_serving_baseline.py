"""thresholds.baseline of serving steps: judged against a stored baseline run, never passed unjudged.

End to end on the local backend with the stand-in engine (tests/unit/sse_server.py, as in
test_serving_run): a run of the plan is set as baseline `golden` with `orch baseline set`, then
the same plan runs against it with a ratio it cannot meet (exit 1, each miss naming step, level,
figure, both values and their n) and with loose ones (exit 0). A missing baseline is refused
before anything runs (exit 2). The judge itself is tested on summaries built from records made
in the test: a p99 with n < 100 on either side, another replica count, a level the baseline
lacks.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_cli_usage import one_error_line, run_cli
from test_serving_run import engine_pids, gone, setup

from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS, ConfigError
from orchestrator.metrics.serving import summarize_level
from orchestrator.metrics.serving_baseline import (
    BaselineLevel,
    ServingBaselineFigures,
    StoredP99,
    baseline_failures,
    baseline_ratios,
)
from orchestrator.models.serving import ServingBaseline
from orchestrator.models.serving_results import LevelSummary, RequestRecord
from orchestrator.report.formats import render_junit, render_markdown
from orchestrator.report.html import render_html
from orchestrator.runs.scale_test import scale_test
from orchestrator.store.db import ResultsStore
from orchestrator.store.load import load_run


def _with_baseline(plan: Path, baseline: str) -> None:
    """The plan's thresholds line replaced by a baseline threshold."""
    text, n = re.subn(
        r"(?m)^    thresholds: .*$", f"    thresholds: {{baseline: {baseline}}}", plan.read_text()
    )
    assert n == 1
    plan.write_text(text)


@pytest.fixture
def no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_STORE", raising=False)


@pytest.mark.usefixtures("no_store_env")
def test_serving_run_set_as_baseline_then_judged_against_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    req, pids = setup(tmp_path)
    first = scale_test(req)
    assert first.exit_code == EXIT_OK, [r.reasons for r in first.serving]
    store = tmp_path / "runs" / "orch.db"  # the run's own store: <out_dir>/orch.db
    code, out, err = run_cli(
        capsys, "baseline", "set", str(first.run_dir), "--name", "golden", "--store", str(store)
    )
    assert code == 0, err
    assert f"baseline golden = run {first.run_id}" in out
    with ResultsStore.open(store, create=False) as db:
        ref = db.serving_baseline("golden")
    assert ref.steps == {"fake-r1": 1} and {lv.level for lv in ref.levels} == {"c1", "c4"}

    # a ratio no run meets (p99 at most 0.001x the baseline's) and a throughput 10x the baseline's
    _with_baseline(Path(req.plan), "{name: golden, max_p99_ratio: 0.001, min_throughput_fraction: 10}")
    second = scale_test(req)
    assert second.exit_code == EXIT_THRESHOLDS and second.status == "failed"
    (step,) = second.serving
    assert step.verdict == "fail"
    for level in ("c1", "c4"):
        for figure in ("TTFT", "ITL", "TPOT", "E2E"):
            pat = (
                rf"step fake-r1, level {level}: {figure} p99 [0-9.e+-]+ ms is [0-9.e+-]+x baseline "
                r"golden's [0-9.e+-]+ ms \(> 0\.001x; n=\d+/\d+\)"
            )
            assert any(re.fullmatch(pat, r) for r in step.reasons), (pat, step.reasons)
        tput = (
            rf"step fake-r1, level {level}: output tokens/s [0-9.e+]+ is [0-9.e+-]+x baseline golden's "
            r"[0-9.e+]+ \(< 10x; n=100/100 successful requests\)"
        )
        assert any(re.fullmatch(tput, r) for r in step.reasons), (tput, step.reasons)
    # JUnit: one baseline case per level, failed with the misses
    root = ET.fromstring(render_junit(load_run(second.run_dir)))
    (case,) = [tc for tc in root.iter("testcase") if tc.get("classname") == "orch.serve-test.fake-r1.c4"
               and tc.get("name") == "threshold baseline golden"]  # fmt: skip
    failure = case.find("failure")
    assert failure is not None and "level c4: TTFT p99" in (failure.text or "")
    ttft = next(r for r in step.reasons if "level c4: TTFT" in r)
    assert "n=100/100" in ttft  # 100 counted requests on each side
    # the reports show each level's ratios to the baseline, the same as the reasons name
    ratio = re.search(r" is ([0-9.e+-]+x) baseline", ttft)
    assert ratio is not None
    rec = load_run(second.run_dir)
    md = render_markdown(rec)
    row = next(ln for ln in md.splitlines() if ln.startswith("| fake-r1 | c4 | golden (run "))
    assert row.split(" | ")[3] == ratio.group(1), row
    assert "p99 &lt;= 0.001x, tokens/s &gt;= 10x" in row  # md() escapes markup
    html = render_html(rec)
    assert 'id="serving-baseline"' in html and f"<td>{ratio.group(1)}</td>" in html
    assert all(gone(p) for p in engine_pids(pids))

    # loose enough for any two runs of the stand-in: judged, and passed
    _with_baseline(Path(req.plan), "{name: golden, max_p99_ratio: 100, min_throughput_fraction: 0.01}")
    third = scale_test(req)
    assert third.exit_code == EXIT_OK, [r.reasons for r in third.serving]
    assert not any("baseline" in r for s in third.serving for r in s.reasons)
    root = ET.fromstring(render_junit(load_run(third.run_dir)))
    cases = [tc for tc in root.iter("testcase") if tc.get("name") == "threshold baseline golden"]
    assert len(cases) == 2 and all(tc.find("failure") is None for tc in cases)


@pytest.mark.usefixtures("no_store_env")
def test_missing_baseline_is_refused_before_anything_runs(tmp_path: Path) -> None:
    req, pids = setup(tmp_path)
    _with_baseline(Path(req.plan), "{name: nosuch, max_p99_ratio: 1.2}")
    with pytest.raises(ConfigError) as e:
        scale_test(req)
    assert e.value.exit_code == 2
    assert "no baseline named 'nosuch'" in e.value.message
    assert e.value.hint is not None and "orch baseline list" in e.value.hint
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/journal.jsonl"))
    assert engine_pids(pids) == []  # no engine was started


@pytest.mark.usefixtures("no_store_env")
def test_missing_baseline_in_an_existing_store_names_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    req, _ = setup(tmp_path)
    first = scale_test(req)
    store = tmp_path / "runs" / "orch.db"
    assert (
        run_cli(capsys, "baseline", "set", str(first.run_dir), "--name", "golden", "--store", str(store))[0]
        == 0
    )
    _with_baseline(Path(req.plan), "{name: other, max_p99_ratio: 1.2}")
    runs_before = sorted((tmp_path / "runs").glob("*/journal.jsonl"))
    code, _, err = run_cli(capsys, "scale-test", "-i", str(req.inventory), "--plan", req.plan,
                           "--out", str(tmp_path / "runs"))  # fmt: skip
    assert code == 2, err
    line = one_error_line(err)
    assert "no baseline named 'other'" in line and "(known: golden)" in line and "orch baseline list" in line
    assert sorted((tmp_path / "runs").glob("*/journal.jsonl")) == runs_before  # no run was made


# --- the judge, on summaries from records made here -------------------------------------------------


def _records(level: str, n: int, *, ttft_s: float, gap_s: float, tokens: int = 4) -> list[RequestRecord]:
    out = []
    for i in range(n):
        send = 1000.0 + i
        times = [send + ttft_s + j * gap_s for j in range(tokens)]
        out.append(RequestRecord(
            id=i, level=level, server="node1", send=send, first_token=times[0], token_times=times,
            end=times[-1], status="ok", input_tokens=8, output_tokens=tokens, requested_output_tokens=tokens,
        ))  # fmt: skip
    return out


def _summary(level: str, n: int, ttft_s: float = 0.1, gap_s: float = 0.01) -> LevelSummary:
    return summarize_level(_records(level, n, ttft_s=ttft_s, gap_s=gap_s))


def _ref(s: LevelSummary, *, step: str = "w-r1", replicas: int = 1) -> ServingBaselineFigures:
    p99 = {
        m: StoredP99(n=getattr(s, f"{m}_ms").n, p99=getattr(s, f"{m}_ms").p99)
        for m in ("ttft", "itl", "tpot", "e2e")
    }
    lv = BaselineLevel(step=step, level=s.level, replicas=replicas, ok=s.ok,
                       output_tokens_per_s=s.output_tokens_per_s, p99=p99)  # fmt: skip
    return ServingBaselineFigures(name="golden", run_id="run-1", levels=[lv], steps={step: replicas})


TH = ServingBaseline(name="golden", max_p99_ratio=1.2, min_throughput_fraction=0.9)


def test_same_figures_pass_and_a_slower_first_token_is_named() -> None:
    base = _summary("c8", 100)
    assert baseline_failures("w-r1", 1, TH, _ref(base), base) == []
    slow = _summary("c8", 100, ttft_s=0.2)
    fails = baseline_failures("w-r1", 1, TH, _ref(base), slow)
    assert (
        fails[0] == "step w-r1, level c8: TTFT p99 200 ms is 2x baseline golden's 100 ms (> 1.2x; n=100/100)"
    )
    assert any(f.startswith("step w-r1, level c8: E2E p99 ") for f in fails)


def test_a_p99_under_n_100_on_either_side_is_a_miss_not_a_pass() -> None:
    base, few = _summary("c8", 100), _summary("c8", 99)
    for ref, mine, side in ((base, few, "this run"), (few, base, "baseline golden")):
        fails = baseline_failures(
            "w-r1", 1, ServingBaseline(name="golden", max_p99_ratio=100), _ref(ref), mine
        )
        ttft = next(f for f in fails if "TTFT" in f)
        assert ttft.startswith(f"step w-r1, level c8: TTFT p99 not defined on {side} (n=")
        assert "a p99 needs n >= 100" in ttft and "not shown within 100x" in ttft


def test_another_replica_count_or_a_missing_level_is_not_judged_and_missed() -> None:
    base = _summary("c8", 100)
    (why,) = baseline_failures("w-r1", 1, TH, _ref(base, replicas=2), base)
    assert why == (
        "step w-r1, level c8: baseline golden ran step w-r1 with 2 replica(s), this run with 1: "
        "not judged against it"
    )
    (why,) = baseline_failures("w-r1", 1, TH, _ref(base), _summary("c4", 100))
    assert "has no level c4 of step w-r1: not judged against it" in why
    (why,) = baseline_failures("w-r2", 2, TH, _ref(base), base)
    assert "has no step w-r2" in why


def test_throughput_below_the_fraction_names_both_values() -> None:
    base = _summary("c8", 100)
    slow = base.model_copy(update={"output_tokens_per_s": base.output_tokens_per_s * 0.5})  # type: ignore[operator]
    fails = baseline_failures(
        "w-r1", 1, ServingBaseline(name="golden", min_throughput_fraction=0.9), _ref(base), slow
    )
    (why,) = fails
    assert why.startswith("step w-r1, level c8: output tokens/s ") and "is 0.5x baseline golden's" in why
    assert why.endswith("(< 0.9x; n=100/100 successful requests)")


def test_the_ratios_the_reports_show_are_this_runs_over_the_baselines() -> None:
    base = _summary("c8", 100)
    slow = _summary("c8", 100, ttft_s=0.2)
    r = baseline_ratios("w-r1", 1, TH, _ref(base), slow)
    assert r is not None and (r.name, r.run_id) == ("golden", "run-1")
    assert r.p99["ttft"] == pytest.approx(2.0)
    assert r.throughput == pytest.approx(slow.output_tokens_per_s / base.output_tokens_per_s)  # type: ignore[operator]
    assert (r.max_p99_ratio, r.min_throughput_fraction) == (1.2, 0.9)
    # a p99 below n = 100 has no ratio; another replica count or a missing level: no ratios at all
    few = baseline_ratios("w-r1", 1, TH, _ref(base), _summary("c8", 99))
    assert few is not None and few.p99["ttft"] is None
    assert baseline_ratios("w-r1", 1, TH, _ref(base, replicas=2), base) is None
    assert baseline_ratios("w-r1", 1, TH, _ref(base), _summary("c4", 100)) is None
