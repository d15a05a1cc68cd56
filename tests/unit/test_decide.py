"""orch decide: one page, a buyer's rows; a missing row makes the call undecided and is named."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from test_store_build import make_run

from orchestrator.metrics.decision import quality_verdict
from orchestrator.metrics.quality import compare_outputs
from orchestrator.models.decide import DecidePage, DecideRow
from orchestrator.models.quality import Output
from orchestrator.models.quality_gate import QualityGate
from orchestrator.models.run import RunRecord
from orchestrator.models.serving_results import ServingQuality
from orchestrator.report.decide import ROWS, decide, decide_overall, page_html, page_markdown
from orchestrator.store.load import load_run

OLD = Path(__file__).parent.parent / "fixtures" / "old_runs"
SERVING = OLD / "serving" / "20261204T235843Z-serve-test-f7ca"
FAULTS = OLD / "serving-faults" / "20261204T235916Z-serve-fault-4605"


def _slower_ttft(rec: RunRecord, factor: float) -> RunRecord:
    """The run with every level's TTFT percentiles multiplied by factor."""
    rec = rec.model_copy(deep=True)
    for sv in rec.serving:
        for lv in sv.levels:
            s = lv.summary
            if s is not None:
                t = s.ttft_ms
                lv.summary = s.model_copy(update={"ttft_ms": t.model_copy(update={
                    q: getattr(t, q) * factor for q in ("mean", "p50", "p95", "p99") if getattr(t, q)
                })})  # fmt: skip
    return rec


def _slower_steady(rec: RunRecord, factor: float) -> RunRecord:
    rec = rec.model_copy(deep=True)
    for sv in rec.serving:
        for f in sv.faults:
            if f.recovery is not None and f.recovery.to_steady_s is not None:
                f.recovery = f.recovery.model_copy(update={"to_steady_s": f.recovery.to_steady_s * factor})
    return rec


def _row(page: DecidePage, name: str) -> DecideRow:
    return next(r for r in page.rows if r.row == name)


def test_a_against_itself_is_same_where_measured_and_undecided_naming_every_missing_row() -> None:
    a = load_run(SERVING)
    page = decide([a], [a])
    assert [r.row for r in page.rows] == list(ROWS)
    assert _row(page, "latency").verdict == "same"
    net = _row(page, "network")  # its one step ran one rank: busbw 0, nothing to judge
    assert net.verdict == "missing" and "2 shared, each n/a" in net.why
    missing = {"model compatibility", "output quality", "capacity at SLO", "cost per 1M tokens at capacity",
               "fault behaviour", "network", "operational effort"}  # fmt: skip
    assert set(page.missing) == missing
    assert page.overall == "undecided"
    assert all(m in page.why for m in missing)
    # every missing row says why, and shows no figure it does not have
    assert all(r.why and r.a is None and r.b is None for r in page.rows if r.verdict == "missing")
    # the measured rows show both figures with the samples behind them
    lat = _row(page, "latency")
    assert lat.a is not None and "n=100" in lat.a and lat.b is not None


def test_a_slower_first_token_is_worse_latency_with_the_levels_named() -> None:
    a = load_run(SERVING)
    page = decide([a], [_slower_ttft(a, 4.0)])
    lat = _row(page, "latency")
    assert lat.verdict == "worse"
    assert "worse at" in lat.why and "c4" in lat.why
    assert any("TTFT p99" in d for d in lat.details)
    # the same run twice is not
    assert _row(decide([a], [_slower_ttft(a, 1.0)]), "latency").verdict == "same"


def test_network_is_the_collective_compare_of_the_shared_steps(tmp_path: Path) -> None:
    a = load_run(make_run(tmp_path, "a"))
    same = _row(decide([a], [load_run(make_run(tmp_path, "b"))]), "network")
    assert same.verdict == "same" and "GB/s" in (same.a or "") and "worse" not in same.why.split(":")[0]
    slow = _row(decide([a], [load_run(make_run(tmp_path, "c", factor=0.5))]), "network")
    assert slow.verdict == "worse"
    assert slow.details and all("-> worse" in d or "-> n/a" in d for d in slow.details)


def test_fault_behaviour_compares_time_to_steady_with_its_repeats() -> None:
    a = load_run(FAULTS)
    same = _row(decide([a], [a]), "fault behaviour")
    assert same.verdict == "same" and "n=3" in (same.a or "")
    worse = _row(decide([a], [_slower_steady(a, 5.0)]), "fault behaviour")
    assert worse.verdict == "worse"
    assert any("pause-worker to steady" in d and "-> worse" in d for d in worse.details)


@pytest.mark.parametrize(
    ("verdicts", "overall"),
    [
        (["same", "better", "same"], "better"),
        (["better", "worse", "same"], "worse"),
        (["same", "same"], "same"),
        (["better", "missing", "worse"], "undecided"),
    ],
)
def test_the_overall_rule(verdicts: list[str], overall: str) -> None:
    names = list(ROWS)
    rows = [DecideRow(row=names[i], a="1", b="2", verdict=v, why="x") for i, v in enumerate(verdicts)]
    got, why = decide_overall(rows)
    assert got == overall
    if overall == "undecided":
        assert why == f"undecided: no figure for {names[1]}"
    elif overall in ("better", "worse"):
        assert names[verdicts.index(overall)] in why


def test_every_format_escapes_what_it_prints() -> None:
    a = load_run(SERVING)
    page = decide([a], [a])
    hostile = "<script>alert(1)</script>|**x**"
    first = page.rows[0].model_copy(update={"why": hostile})
    page = page.model_copy(update={"rows": [first, *page.rows[1:]]})
    html = page_html(page)
    assert "<script>" not in html and "&lt;script&gt;" in html
    md = page_markdown(page)
    assert "<script>" not in md and "\\|" in md
    assert "overall" in md and "undecided" in md
    assert DecidePage.model_validate_json(page.model_dump_json()) == page


def test_orch_decide_writes_every_format_and_exits_1_when_undecided(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(SERVING, a)
    shutil.copytree(SERVING, b)
    out = [tmp_path / f"page.{x}" for x in ("html", "md", "json")]
    r = subprocess.run(
        [sys.executable, "-m", "orchestrator", "decide", str(a), str(b), "--store", str(tmp_path / "s.db"),
         "--html", str(out[0]), "--md", str(out[1]), "--json", str(out[2])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "overall: undecided" in r.stdout
    page = DecidePage.model_validate(json.loads(out[2].read_text()))
    assert page.overall == "undecided" and "capacity at SLO" in page.missing
    assert 'class="overall-undecided"' in out[0].read_text()
    assert "**overall**: undecided" in out[1].read_text()


def _with_capacity(rec: RunRecord, caps: list[float], *, node_hour: float | None = 3.6,
                   staff: float | None = 730.0) -> RunRecord:  # fmt: skip
    """The run with a capacity search on its serving step: one repeat per capacity in caps (found,
    precision 2 req/s), priced at the capacity by cost_at from a node-hour price and staff (staff
    None: the staff part missing)."""
    from orchestrator.metrics.cost import cost_at
    from orchestrator.models.cost import CostModel
    from orchestrator.models.serving import CapacitySearch
    from orchestrator.models.serving_results import CapacityRepeat, CapacityResult

    rec = rec.model_copy(deep=True)
    search = CapacitySearch(target_attainment=0.9, min_rate=2, max_rate=66, precision=2)
    repeats = [CapacityRepeat(repeat=i, status="found", capacity=c, upper=c + 2, reason="found")
               for i, c in enumerate(caps)]  # fmt: skip
    mid = statistics.median(caps)
    model = CostModel(node_hour=node_hour, staff_per_month=staff)
    cost = cost_at(requests_per_s=mid, output_tokens_per_s=mid * 64, model=model, nodes=1, watts=None,
                   outage_s=None, rate=f"capacity {mid:g} req/s")  # fmt: skip
    cap = CapacityResult(search=search, probe_bound=7, repeats=repeats, capacity=mid,
                         spread=max(caps) - min(caps), cost_at=cost)  # fmt: skip
    rec.serving[0].capacity = cap
    return rec


def test_capacity_is_judged_within_the_searches_precision_and_spread() -> None:
    a = load_run(SERVING)
    same = _row(decide([_with_capacity(a, [40, 42])], [_with_capacity(a, [42, 44])]), "capacity at SLO")
    assert same.verdict == "same"  # 41 vs 43: within 2 + 2 of precision and 2 + 2 of spread
    assert same.a == "fake-r1 41 ± 4 req/s (n=2 repeats)"
    more = _row(decide([_with_capacity(a, [40, 42])], [_with_capacity(a, [60, 62])]), "capacity at SLO")
    assert more.verdict == "better" and "capacity at SLO (req/s) +48.8%" in more.details[0]
    only_a = _row(decide([_with_capacity(a, [40, 42])], [a]), "capacity at SLO")
    assert only_a.verdict == "missing" and "a capacity search on A only" in only_a.why


def test_cost_at_capacity_needs_every_part_on_both_sides_and_is_judged_lower_is_better() -> None:
    a = load_run(SERVING)
    # a node-hour price with staff: downtime is still missing (no fault measured), so the row shows
    # both costs and stays missing, naming the part
    row = _row(decide([_with_capacity(a, [40, 42])], [_with_capacity(a, [60, 62])]),
               "cost per 1M tokens at capacity")  # fmt: skip
    assert row.verdict == "missing" and "missing downtime" in row.why
    assert row.a is not None and "per 1M output tokens" in row.a and "partial" in row.a
    # with downtime known (a failure rate and an outage), the dearer side is worse
    from orchestrator.metrics.cost import cost_at
    from orchestrator.models.cost import CostModel

    def whole(rec: RunRecord, price: float) -> RunRecord:
        cap = rec.serving[0].capacity
        assert cap is not None and cap.capacity is not None
        model = CostModel(node_hour=price, staff_per_month=730, failures_per_month=1)
        cap.cost_at = cost_at(requests_per_s=cap.capacity, output_tokens_per_s=cap.capacity * 64, model=model,
                              nodes=1, watts=None, outage_s=30, rate="capacity")  # fmt: skip
        return rec

    cheap, dear = whole(_with_capacity(a, [40, 42]), 3.6), whole(_with_capacity(a, [40, 42]), 9.0)
    row = _row(decide([cheap], [dear]), "cost per 1M tokens at capacity")
    assert row.verdict == "worse" and row.details and "-> worse" in row.details[0]
    assert _row(decide([dear], [cheap]), "cost per 1M tokens at capacity").verdict == "better"


def _judged_against(rec: RunRecord, baseline: RunRecord, *, diverge: bool) -> RunRecord:
    """rec as a new run whose serving steps were judged against baseline's stored outputs: B's
    answers equal A's, or differ from the second word on (metrics.quality and the decision module)."""
    gate = QualityGate(min_exact_match_of_floor=0.95)
    a = [Output(id=f"p{i}", status="ok", text=f"w{i} x y") for i in range(20)]
    b = [o.model_copy(update={"text": o.text.replace(" x", " z")}) if diverge else o for o in a]
    floor = [compare_outputs("A vs A (run twice)", a, a)]
    j = quality_verdict(gate, compare_outputs("B vs A", a, b), floor)
    rec = rec.model_copy(deep=True, update={"run_id": rec.run_id + "-b"})
    for sv in rec.serving:
        sv.quality = ServingQuality(outputs=f"steps/{sv.step.id}/quality", engine="localhost", floor=floor,
                                    baseline="golden", baseline_run=baseline.run_id, judgement=j)  # fmt: skip
    return rec


def test_output_quality_is_the_gate_judged_against_the_other_sides_run() -> None:
    a = load_run(SERVING)
    same = _row(decide([a], [_judged_against(a, a, diverge=False)]), "output quality")
    assert same.verdict == "same" and same.b is not None and "exact match 100.0% (n=20)" in same.b
    assert same.a is not None and "A-against-A floor 100.0%" in same.a and a.run_id in same.a
    worse = _row(decide([a], [_judged_against(a, a, diverge=True)]), "output quality")
    assert worse.verdict == "worse" and worse.b is not None and "exact match 0.0%" in worse.b
    assert any("failed: exact match 0.0%" in d for d in worse.details)
    # A's run holding the judgement against B's counts too, each figure in its own side's column:
    # the exact match under A (the judged run), the floor under B (the baseline)
    b = a.model_copy(deep=True, update={"run_id": a.run_id + "-other"})
    on_a = _row(decide([_judged_against(a, b, diverge=True)], [b]), "output quality")
    assert on_a.verdict == "worse"
    assert on_a.a is not None and "exact match 0.0% (n=20)" in on_a.a and "floor" not in on_a.a
    assert on_a.b is not None and f"B-against-B floor 100.0% (baseline run {b.run_id})" in on_a.b
    assert "exact match" not in on_a.b
    # judged against a run of neither side: missing, saying why
    other = _judged_against(a, b, diverge=False)
    row = _row(decide([a], [other]), "output quality")
    assert row.verdict == "missing" and "judged against a run of the other" in row.why


def test_without_a_capacity_the_cost_row_names_the_fixed_level_cost_once_and_either_side_s() -> None:
    a = load_run(SERVING)
    row = _row(decide([a], [a]), "cost per 1M tokens at capacity")
    assert row.verdict == "missing" and row.a is None and row.b is None
    assert row.why.startswith("no capacity to price; at the fixed level fake-r1 c4: A 0.1785, B 0.1785 ")
    assert row.why.count("fixed level") == 1 and "not compared" in row.why
    # a cost on B's side only (A's levels unpriced, B's free) is still shown
    unpriced, free = a.model_copy(deep=True), a.model_copy(deep=True)
    for sv in unpriced.serving:
        for lv in sv.levels:
            lv.cost = None
    for sv in free.serving:
        for lv in sv.levels:
            assert lv.cost is not None
            lv.cost = lv.cost.model_copy(update={"per_million_output_tokens": 0.0})
    row = _row(decide([unpriced], [free]), "cost per 1M tokens at capacity")
    assert "at the fixed level fake-r1 c4: A -, B 0 per 1M output tokens" in row.why
