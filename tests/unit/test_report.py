"""Reports rebuilt from a run directory: HTML (plots), JUnit (schema), OpenMetrics (real parser), Markdown."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_store_build import make_run

from orchestrator.models.recovery import Heartbeat, RecoveryRecord, RecoveryTimings
from orchestrator.report.formats import render
from orchestrator.store.load import load_run
from orchestrator.store.rundir import atomic_write

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "junit" / "junit-10.xsd"


class _Svgs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.kinds: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg" and a.get("class") == "plot":
            self.kinds.append(a.get("data-kind") or "")


def _svg_kinds(html: str) -> list[str]:
    p = _Svgs()
    p.feed(html)
    return p.kinds


def _with_recovery(run: Path) -> None:
    for rep, detect in enumerate((0.4, 0.6, 0.5)):
        rec = RecoveryRecord(
            fault_id=f"kill-{rep}",
            fault="kill_worker",
            target="localhost",
            step="n1xg2",
            repeat=rep,
            injected_at=datetime(2026, 11, 1, 2, 0, 5, tzinfo=UTC),
            timings=RecoveryTimings(
                detect_s=detect, recover_s=detect + 2, restore_s=detect + 3, steps_lost=2
            ),
            heartbeats=[Heartbeat(rank=r, step=s, t_s=s * 0.5 - 2) for r in range(2) for s in range(12)],
        )
        atomic_write(run / "recovery" / f"kill-{rep}.json", rec.model_dump_json())


def test_html_has_a_plot_per_collective_scaling_and_recovery(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    _with_recovery(run)
    html = render(load_run(run), "html", run)
    kinds = _svg_kinds(html)
    assert kinds.count("busbw") == 6
    assert {"scaling", "efficiency", "timeline", "distribution"} <= set(kinds)
    assert 'href="steps/n1xg4/rank-0.log"' in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")


def test_html_of_an_interrupted_run_says_so(tmp_path: Path) -> None:
    html = render(load_run(make_run(tmp_path, "r1", finished=False, done_steps=1)), "html", None)
    assert 'id="verdict">interrupted<' in html
    assert "not run" in html


@pytest.mark.parametrize("finished", [True, False])
def test_junit_validates_against_the_junit_schema(tmp_path: Path, finished: bool) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    if not XSD.exists():
        pytest.skip("tests/fixtures/junit/junit-10.xsd not present")
    rec = load_run(make_run(tmp_path, "r1", finished=finished, done_steps=None if finished else 2))
    rec.plan.thresholds.min_scaling_efficiency = 0.8  # type: ignore[union-attr]
    text = render(rec, "junit")
    xmlschema.XMLSchema(str(XSD)).validate(text)
    suite = ET.fromstring(text).find("testsuite")
    assert suite is not None
    assert suite.get("tests") == str(3 * 2)  # 3 steps x (step + efficiency threshold)
    # n1xg1 (1 rank) has no like-with-like reference: its efficiency case is skipped, not passed
    assert int(suite.get("skipped") or 0) == (1 if finished else 1 + 2)
    names = [c.get("name") for c in suite.iter("testcase")]
    assert "scaling efficiency >= 0.8 (intra-node vs n1xg2)" in names
    assert "scaling efficiency >= 0.8 (no reference)" in names


def test_openmetrics_is_accepted_by_prometheus_client(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as prom

    run = make_run(tmp_path, "r1")
    _with_recovery(run)
    text = render(load_run(run), "openmetrics")
    fams = {f.name: f for f in om(text)}
    assert len(fams["orch_busbw_gigabytes_per_second"].samples) == 3 * 36
    assert len(fams["orch_recovery_seconds"].samples) == 9
    assert {f.name for f in prom(text)} >= {"orch_busbw_gigabytes_per_second", "orch_run_accepted"}


def test_markdown_lists_steps_and_logs(tmp_path: Path) -> None:
    md = render(load_run(make_run(tmp_path, "r1")), "md", tmp_path)
    assert "| n1xg4 | 4 | all_reduce | 1M |" in md
    assert "(r1/steps/n1xg1/rank-0.log)" in md
