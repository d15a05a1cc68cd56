"""Faults during serving in the results store and the reports, on a run folder built here
(serving_fault_run.py: orch's own records, two engine kills into level c4)."""

from __future__ import annotations

import re
import sqlite3
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest
from serving_fault_run import FAULT1, RECORDS, STEP, make_fault_run, records, step_result

from orchestrator.models.run import RunRecord
from orchestrator.report.formats import render_junit, render_markdown, render_openmetrics
from orchestrator.report.html import render_html
from orchestrator.store.db import MIGRATIONS, SCHEMA_VERSION, ResultsStore
from orchestrator.store.load import load_run

HOSTILE = '<script>alert("x")</script>|*_\x1b[31m'
HOSTILE_ID = '<script>alert("x")</script>|*_'  # a step id: an ESC there is the step section's to show


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_fault_run(tmp_path / "runs")


def test_the_built_run_has_the_figures_the_tests_rely_on(run: Path) -> None:
    (s,) = load_run(run).serving
    r1, r2 = (f.recovery for f in s.faults)
    assert r1 is not None and r2 is not None
    assert (r1.status, r2.status) == ("recovered", "recovered")
    assert r1.to_first_failure_s == pytest.approx(0.01) and r1.to_first_success_s == pytest.approx(2.95)
    assert r1.to_steady_s == pytest.approx(3.1) and r1.outage_s == pytest.approx(2.94)
    assert (r1.failed, r1.aborted) == (20, 0)
    assert r2.to_steady_s == pytest.approx(1.8) and (r2.failed, r2.aborted) == (8, 7)
    assert r1.ttft_after_ms is not None and r1.ttft_after_ms.n == 169  # 131..299: cut at the second fault
    assert r2.ttft_after_ms is not None and r2.ttft_after_ms.n == 82 and r2.ttft_after_ms.p99 is None


# -- store ---------------------------------------------------------------------------------------


def _faults(store: ResultsStore) -> list[tuple[object, ...]]:
    return [tuple(r) for r in store.conn.execute(
        "SELECT step_id, idx, kind, target, repeat, level, injected_at, outcome, status, to_first_failure_s,"
        " to_first_success_s, to_steady_s, outage_s, failed, aborted, ttft_during_n, ttft_during_p99_ms,"
        " ttft_after_n, ttft_after_p99_ms, restarts FROM serving_faults ORDER BY step_id, idx")]  # fmt: skip


def test_store_keeps_each_injection_and_ingest_is_idempotent(run: Path, tmp_path: Path) -> None:
    with ResultsStore.open(tmp_path / "orch.db") as s:
        s.ingest(run)
        s.ingest(run)
        rows = _faults(s)
    assert len(rows) == 2
    one, two = rows
    when = datetime.fromtimestamp(FAULT1, UTC).isoformat()
    assert one[:9] == (STEP, 0, "kill-worker", "localhost:engine", 1, "c4", when, "done", "recovered")
    assert one[9:13] == pytest.approx((0.01, 2.95, 3.1, 2.94))
    # p99 shown from n = 100; after steady it holds the 9 slow requests of the first steady window
    assert one[13:] == (20, 0, 11, None, 169, pytest.approx(800.0), 1)
    assert two[1] == 1 and two[4] == 2 and two[13:16] == (8, 7, 3) and two[17:] == (82, None, 1)


def _old_store(path: Path, version: int) -> sqlite3.Connection:
    """A store at schema ``version`` holding run 'old' with one serving step (left open)."""
    conn = sqlite3.connect(path)
    conn.executescript(";".join(MIGRATIONS[:version]) + f"; PRAGMA user_version = {version};")
    conn.execute(
        "INSERT INTO runs (run_id, run_dir, plan, backend, status, steps_planned, steps_done, ingested_at)"
        " VALUES ('old', '/x', 'serving-smoke', 'local', 'accepted', 1, 1, 'now')"
    )
    conn.execute(
        "INSERT INTO serving_steps VALUES ('old','s-r1',0,'s','vllm',1,'[]','[]','pass','[]',1.5,NULL)"
    )
    conn.commit()
    return conn


def test_v4_store_migrates_to_the_current_schema_and_keeps_its_rows(run: Path, tmp_path: Path) -> None:
    assert SCHEMA_VERSION >= 8
    path = tmp_path / "orch.db"
    conn = _old_store(path, 4)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "serving_faults" not in tables
    conn.close()
    with ResultsStore.open(path) as s:
        assert s.version == SCHEMA_VERSION
        assert s.run("old") is not None
        assert s.conn.execute("SELECT load_to_health_s FROM serving_steps").fetchone()[0] == 1.5
        assert _faults(s) == []
        s.ingest(run)
        assert len(_faults(s)) == 2


def test_a_step_without_faults_writes_no_fault_row(tmp_path: Path) -> None:
    run = make_fault_run(tmp_path / "runs")
    rec = load_run(run)
    bare = rec.serving[0].model_copy(update={"faults": []})
    from orchestrator.models.run import RunResult
    from orchestrator.store.rundir import atomic_write

    result = RunResult.model_validate_json((run / "result.json").read_text())
    atomic_write(run / "result.json", result.model_copy(update={"serving": [bare]}).model_dump_json())
    with ResultsStore.open(tmp_path / "orch.db") as s:
        s.ingest(run)
        assert _faults(s) == []
        assert s.conn.execute("SELECT count(*) FROM serving_levels").fetchone()[0] == 1


# -- reports ---------------------------------------------------------------------------------------


def _section(html: str) -> str:
    return html[html.index('<h2 id="serving">') : html.index('<h2 id="recovery">')]


def test_html_has_a_timeline_per_fault_with_the_outage_shaded_and_the_numbers(run: Path) -> None:
    section = _section(render_html(load_run(run)))
    svgs = re.findall(r'<svg class="plot" data-kind="serving-fault-timeline".*?</svg>', section, re.S)
    assert len(svgs) == 2
    first = svgs[0]
    outage = re.search(r'<rect class="outage" data-name="outage 2.94 s \(first failure to first success\)" '
                       r'x="([\d.]+)" y="\d+" width="([\d.]+)"', first)  # fmt: skip
    assert outage is not None and float(outage.group(2)) > 1
    assert "steady 3.10 s" in first and ">fault</text>" in first
    # 20 failed requests drawn as crosses, the successful ones as points, the pre-fault band
    assert first.count('class="point cross"') == 20
    assert 'data-name="pre-fault band 150 ms"' in first
    # the level's requests from 30 s before the fault: all of 0..299 (the second fault cuts nothing here)
    ok = re.search(r'<g class="series" data-name="ok: TTFT">(.*?)</g>', first, re.S)
    assert ok is not None and ok.group(1).count('<circle class="point"') == 300 - 20
    figures = ["2.95 s", "3.10 s", "2.94 s", "20 / 0", "p50 800, p99 - (n=11)", "p50 100, p99 800 (n=169)",
               "1 (healthy after 1.90 s)", "&lt;= 150 ms (from 20 requests)"]  # fmt: skip
    for figure in figures:
        assert figure in section, figure
    assert 'id="serving-faults"' in section and 'id="serving-fault-spread"' in section
    # a kill is not undone: its hold ended, nothing was reverted (the engine's restart brought it back)
    assert 'fault ended after</td><td class="num">0.10 s (nothing to revert)' in section
    assert "reverted after" not in section
    # spread over the two repeats: median (min to max, n)
    assert "2.35 (1.75 to 2.95, n=2)" in section and "2.45 (1.80 to 3.10, n=2)" in section


def test_missing_records_give_a_note_not_a_crash(run: Path) -> None:
    (run / RECORDS).unlink()
    section = _section(render_html(load_run(run)))
    assert "serving-fault-timeline" not in section
    assert f"no timeline: records {RECORDS} cannot be resolved" in section
    assert 'id="serving-faults"' in section and "2.95" in section  # the stored figures still show


def test_records_outside_the_run_folder_are_not_read(run: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text((run / RECORDS).read_text())
    rec = load_run(run)
    s = rec.serving[0]
    lv = s.levels[0].model_copy(update={"records": "../../elsewhere.jsonl"})
    rec = rec.model_copy(update={"serving": [s.model_copy(update={"levels": [lv]})]})
    section = _section(render_html(rec))
    assert "serving-fault-timeline" not in section and "resolves outside" in section


def hostile(rec: RunRecord) -> RunRecord:
    """The run with a fault kind, target and step id that are markup and terminal escapes (a plan
    could not hold them; a run folder could)."""
    s = rec.serving[0]
    step = s.step.model_copy(update={"id": HOSTILE_ID})
    faults = [f.model_copy(update={"target": HOSTILE, "kind": HOSTILE}) for f in s.faults]
    return rec.model_copy(update={"serving": [s.model_copy(update={"step": step, "faults": faults})]})


def test_hostile_step_and_target_are_escaped_everywhere(run: Path) -> None:
    rec = hostile(load_run(run))
    html = render_html(rec)
    assert "<script>" not in html and "\x1b" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;|*_\\x1b[31m" in html  # svg, tables
    md = render_markdown(rec)
    assert "<script>" not in md and "\x1b" not in md and "\\|" in md
    root = ET.fromstring(render_junit(rec))  # well-formed despite ESC
    names = [n for tc in root.iter("testcase") if (n := tc.get("name") or "").startswith("fault")]
    assert len(names) == 2 and all("<script>" in n for n in names)  # text in XML, escaped by the writer
    text = render_openmetrics(rec)
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om

    fams = {f.name: f for f in om(text)}
    sample = fams["orch_serving_fault_to_steady_seconds"].samples[0]
    assert sample.labels["target"] == HOSTILE and sample.labels["step"] == HOSTILE_ID


def test_markdown_has_the_fault_table_and_the_spread(run: Path) -> None:
    text = render_markdown(load_run(run))
    assert "### Faults during serving (seconds after the fault)" in text
    assert "### Recovery over repeats (median, min to max, n)" in text
    row = "| chat-r1 | c4 | kill-worker | localhost:engine | 1 | recovered | 0.01 | 2.95 | 2.94 | 3.10 | 20 |"
    assert row + " 0 |" in text, text


def test_junit_one_case_per_injection_failing_when_not_recovered(tmp_path: Path) -> None:
    ok = load_run(make_fault_run(tmp_path / "a"))
    root = ET.fromstring(render_junit(ok))
    cases = [tc for tc in root.iter("testcase") if (tc.get("name") or "").startswith("fault ")]
    assert [tc.get("name") for tc in cases] == ["fault kill-worker localhost:engine repeat 1",
                                                "fault kill-worker localhost:engine repeat 2"]  # fmt: skip
    assert all(tc.find("failure") is None for tc in cases)
    assert cases[0].get("classname") == "orch.smoke.chat-r1.c4"
    bad = load_run(make_fault_run(tmp_path / "b", recover_second=False))
    root = ET.fromstring(render_junit(bad))
    cases = [tc for tc in root.iter("testcase") if (tc.get("name") or "").startswith("fault ")]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None and (failure.text or "").startswith("not-recovered: first failure 0.01 s")
    assert int(root.find("testsuite").get("failures") or 0) >= 1  # type: ignore[union-attr]


def test_openmetrics_fault_lines_parse(run: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as prom

    text = render_openmetrics(load_run(run))
    fams = {f.name: f for f in om(text)}
    assert {f.name for f in prom(text)} >= {"orch_serving_fault_to_steady_seconds"}
    steady = {s.labels["repeat"]: s.value for s in fams["orch_serving_fault_to_steady_seconds"].samples}
    assert steady == {"1": pytest.approx(3.1), "2": pytest.approx(1.8)}
    s = fams["orch_serving_fault_failed_requests"].samples[0]
    assert s.value == 20 and {k: s.labels[k] for k in ("step", "level", "kind", "target")} == {
        "step": STEP,
        "level": "c4",
        "kind": "kill-worker",
        "target": "localhost:engine",
    }
    assert [x.value for x in fams["orch_serving_fault_recovered"].samples] == [1.0, 1.0]


def test_a_fault_without_recovery_is_listed_and_skipped(tmp_path: Path) -> None:
    run = make_fault_run(tmp_path / "runs")
    rec = load_run(run)
    s = rec.serving[0]
    failed = s.faults[0].model_copy(update={"recovery": None, "outcome": "failed", "restarts": []})
    rec = rec.model_copy(update={"serving": [s.model_copy(update={"faults": [failed]})]})
    section = _section(render_html(rec))
    assert "not measured (fault failed)" in section and "serving-fault-timeline" not in section
    (tc,) = [tc for tc in ET.fromstring(render_junit(rec)).iter("testcase")
             if (tc.get("name") or "").startswith("fault ")]  # fmt: skip
    assert tc.find("skipped") is not None
    assert "orch_serving_fault_to_steady_seconds" not in render_openmetrics(rec)


def test_step_result_builder_matches_the_records() -> None:
    s = step_result(records())
    assert s.faults[0].injected_at == FAULT1 and s.levels[0].summary is not None
    assert s.levels[0].summary.n == 400  # warm-up left out


def test_the_load_time_table_has_a_row_per_start_each_with_its_job() -> None:
    """The engine's first start and each restart, with its own job and its time to health (the
    engine's job_id is the last restart's; the first job is kept apart)."""
    from types import SimpleNamespace

    from orchestrator.models.serving_results import EngineRun
    from orchestrator.report.serving import LOAD_HEAD, load_rows

    sres = step_result(records())
    engine = EngineRun(node="localhost", url="http://localhost:8000", job_id="local-2",
                       first_job_id="local-0", health="healthy", load_to_health_s=4.25,
                       job_state="CANCELLED")  # fmt: skip
    sres = sres.model_copy(update={"engines": [engine]})
    rows = load_rows(SimpleNamespace(serving=[sres]))  # type: ignore[arg-type]
    assert LOAD_HEAD[2] == "start" and LOAD_HEAD[-2:] == ["job", "job state"]
    assert [(r[2], r[-2], r[-1]) for r in rows] == [
        ("first", "local-0", "-"), ("restart 1", "local-1", "-"), ("restart 2", "local-2", "CANCELLED"),
    ]  # fmt: skip
    assert rows[0][4] == "4.25" and rows[1][4] == "1.4" and rows[1][3] == "healthy"


def _with_variant(run: Path, variant: str | None) -> None:
    """Rewrite the run's serving step as one that ran the stack's engine variant ``variant``."""
    from orchestrator.models.run import RunResult
    from orchestrator.safefs import atomic_write

    result = RunResult.model_validate_json((run / "result.json").read_text())
    sv = [
        x.model_copy(update={"step": x.step.model_copy(update={"variant": variant})}) for x in result.serving
    ]
    atomic_write(run / "result.json", result.model_copy(update={"serving": sv}).model_dump_json())


def test_v6_store_reads_its_goodput_as_slo_attainment_and_gains_goodput_per_second(tmp_path: Path) -> None:
    path = tmp_path / "orch.db"
    conn = _old_store(path, 5)
    conn.executescript(MIGRATIONS[5] + "; PRAGMA user_version = 6;")
    pct = ",".join(["100,NULL,NULL,NULL"] * 4)
    conn.execute(
        f"INSERT INTO serving_levels VALUES ('old','s-r1','c4','',100,99,1,0,12.5,{pct},"
        "80.0,7.9,0.01,0.97,NULL,NULL)"
    )  # the share of requests meeting every SLO, in the column once called goodput
    conn.commit()
    conn.close()
    with ResultsStore.open(path) as s:
        assert s.version == SCHEMA_VERSION
        row = s.conn.execute("SELECT slo_attainment, request_goodput FROM serving_levels").fetchone()
    assert row[0] == 0.97 and row[1] == pytest.approx(97 / 12.5)


def test_v5_store_gains_the_variant_column_and_old_rows_read_as_none(run: Path, tmp_path: Path) -> None:
    path = tmp_path / "orch.db"
    _old_store(path, 5).close()
    _with_variant(run, "aiter")
    with ResultsStore.open(path) as s:
        assert s.version == SCHEMA_VERSION
        s.ingest(run)
        rows = s.conn.execute("SELECT run_id, engine, variant FROM serving_steps ORDER BY run_id").fetchall()
    assert [tuple(r) for r in rows] == [(run.name, "transformers", "aiter"), ("old", "vllm", None)]


def test_compare_names_each_sides_engine_and_variant(tmp_path: Path) -> None:
    from rich.console import Console

    from orchestrator.cli.compare import render_serving_table
    from orchestrator.report.compare import compare_runs

    a = make_fault_run(tmp_path / "a", "20261202T120000Z-serving-aaaa")
    b = make_fault_run(tmp_path / "b", "20261202T130000Z-serving-bbbb")
    _with_variant(b, "aiter")
    c = compare_runs(load_run(a), load_run(b))
    assert {(r.engine_a, r.engine_b) for r in c.serving} == {("transformers", "transformers (aiter)")}
    assert '"engine_b":"transformers (aiter)"' in c.model_dump_json()  # orch compare --json
    console = Console(width=250, record=True)
    console.print(render_serving_table(c, only_changed=False))
    text = console.export_text()
    assert "engine A / B" in text and "transformers / transformers (aiter)" in text


def test_the_failed_count_is_named_as_the_clients_with_the_pace_it_follows(run: Path) -> None:
    """A closed-loop worker retries 50 ms after a refused connection: the failures while the engine
    is down count the client's retries, so every report names the count as the client's."""
    from orchestrator.report.serving_faults import client_pace, fault_cases

    rec = load_run(run)
    md = render_markdown(rec)
    assert "| failed (client-side count) | aborted |" in md
    section = _section(render_html(rec))
    assert 'failed / aborted (client-side count)</td><td class="num">20 / 0' in section
    assert "closed loop: each worker retries 50 ms after a refused connection" in section
    (first, _) = fault_cases(rec)
    assert "20 failed, 0 aborted (client-side count; closed loop: each worker retries 50 ms" in first.message
    assert client_pace("r0.5").startswith("open loop: the requests the plan's arrival schedule sent")
