"""migrate's serving figures carry the timeout and truncated-stream rates from each level's summary
(runs/migrate.serving_figures), the compare sets them beside each level (migrate/ab.serving_levels
`rates`), the report shows them, and figures of older runs without them still load."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from test_loadgen_reasons import rec

from orchestrator.metrics.serving import summarize_level
from orchestrator.migrate.ab import serving_levels
from orchestrator.models.migrate import MigrateRun, PlanRun, ServingFigures
from orchestrator.models.serving_results import RequestRecord, ServingLevelResult, ServingStepResult
from orchestrator.report.migrate import run_sections
from orchestrator.runs.migrate import serving_figures


def _figures(label: str, reasons: list[tuple[str, str]]) -> ServingFigures:
    """One level of 10 counted requests, the failed ones with the (status, reason) given."""
    recs = [rec(i, *reasons[i]) if i < len(reasons) else rec(i) for i in range(10)]
    summary = summarize_level(RequestRecord.model_validate(r) for r in recs)
    level = ServingLevelResult(level="c2", records="records.jsonl", summary=summary)
    step_id = SimpleNamespace(id=f"{label}-chat")  # serving_figures reads the step's id only
    step = ServingStepResult.model_construct(step=step_id, levels=[level])  # type: ignore[arg-type]
    (fig,) = serving_figures(label, [step])
    return fig


def _run(label: str, fig: ServingFigures) -> PlanRun:
    return PlanRun(label=label, stack="x", nodes=["n"], verdict="pass", serving=[fig])


def test_serving_figures_and_compare_rates_carry_timeouts_and_truncated_streams() -> None:
    fa = _figures("baseline", [("aborted", "timeout")])
    fb = _figures("scale", [("error", "truncated"), ("error", "truncated"), ("aborted", "cancelled")])
    assert (fa.step, fa.timeout_rate, fa.truncated_rate, fa.abort_rate) == ("chat", 0.1, 0.0, 0.1)
    assert (fb.timeout_rate, fb.truncated_rate, fb.error_rate, fb.abort_rate) == (0.0, 0.2, 0.2, 0.1)
    (lv,) = serving_levels([_run("baseline", fa)], [_run("scale", fb)], [], detect={})
    assert lv.rates["timeout_rate"] == [0.1, 0.0] and lv.rates["truncated_rate"] == [0.0, 0.2]
    assert lv.rates["error_rate"] == [0.0, 0.2] and lv.rates["abort_rate"] == [0.1, 0.1]


def test_the_report_shows_the_rates_and_old_figures_load() -> None:
    fb = _figures("scale", [("error", "truncated"), ("aborted", "timeout")])
    state = MigrateRun(run_id="r1", run_dir=Path("/tmp/r1"), from_stack="a", nodes=["n"],
                       plan_runs=[_run("scale", fb)])  # fmt: skip
    (sec,) = [s for s in run_sections(state) if s.title == "Serving figures per plan run"]
    row = dict(zip(sec.head, sec.rows[0], strict=True))
    assert [row[k] for k in ("timed out", "truncated", "errors", "aborted")] == ["10.0%"] * 4
    old = json.loads(fb.model_dump_json())
    del old["timeout_rate"], old["truncated_rate"]
    back = ServingFigures.model_validate_json(json.dumps(old))
    assert back.timeout_rate is None and back.truncated_rate is None and back.error_rate == 0.1
