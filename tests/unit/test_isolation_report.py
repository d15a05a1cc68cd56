"""The Isolation section of the report (report/isolation.py), from real isolate run folders.

The run folders are made by orch's own runner (runs/isolate.py run_isolation and
isolate_after_scale_test) with test_isolate_run's stand-in scheduler: its tests end at once with
a real collbench log, or fail when a job spans a bad node. The report is then rebuilt from the
folder alone (store.load.load_run, report.formats.render), as `orch report` does.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from test_isolate_run import _inventory, _res, _run, failed_smoke_run, stand_in

import orchestrator.runs.isolate as iso
from orchestrator.models.isolation import IsolationRun
from orchestrator.report.formats import render
from orchestrator.store.load import load_run

# Text a user can put in an edited run folder: tags, Markdown emphasis, a link, table columns.
EVIL = '<script>alert(1)</script> **bold** [x](javascript:alert(1)) | col `tick` _u_ <img src=x onerror="y">'


def _section(page: str) -> str:
    (sec,) = re.findall(r'<section id="isolation">.*?</section>', page, flags=re.S)
    return sec


def _rows(sec: str, cls: str) -> list[list[str]]:
    rows = re.findall(rf'<tr class="{cls}">(.*?)</tr>', sec, flags=re.S)
    return [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r, flags=re.S)] for r in rows]


def test_a_bad_node_is_in_the_section_with_its_convicting_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, _ = _run(tmp_path, monkeypatch, {"node3"})
    rec = load_run(result.run_dir)
    assert rec.kind == "isolate" and rec.isolation is not None
    page = render(rec, "html", result.run_dir)
    assert "<h1>orch isolate " in page
    sec = _section(page)
    assert "sequential: a round&#x27;s tests ran one after another" in sec
    culprit = _rows(sec, "culprit")
    assert culprit and {r[0] for r in culprit} == {"node node3"}
    # the evidence: a failing test holding node3, and a passing one without it, with its figure
    # against the rule's reference (the median single, how many singles, the share asked for)
    assert any(r[5] == "FAIL" and "node3" in r[4].split("+") for r in culprit)
    cleared = [r for r in culprit if r[5] == "pass" and "node3" not in r[4].split("+")]
    assert cleared and all(float(r[6]) > 0 for r in cleared)
    assert all(re.search(r"of the median single of the run so far [\d.]+ GB/s \(n=\d+\); rule >= 50%", r[7])
               for r in cleared if "+" in r[4])  # fmt: skip
    # every test of every round, each with its step, its wall time and its round's wall time
    trials = _rows(sec, "trial")
    assert len(trials) == sum(len(r.trials) for r in result.isolation.rounds)
    assert all(re.fullmatch(r"r\d+-t\d+-(single|pair|set)", t[2]) for t in trials)
    assert all(t[1] != "-" and t[8] != "-" for t in trials)
    singles = [t for t in trials if t[4].startswith("single")]
    assert singles and all("of the round's median single" in t[6] and "(n=3)" in t[6] for t in singles)
    # the rule with its numbers, and each iteration count the figures are means of
    assert "<td>tolerance</td><td>0.2</td>" in sec and "<td>min_efficiency</td><td>0.5</td>" in sec
    assert "busbw GB/s (mean of 5 timed iterations; a single&#x27;s repeat: of 20)" in sec
    assert "<td>a single&#x27;s repeat</td><td>20 timed, 5 warm-up</td>" in sec
    assert "cleared: node1, node2" in sec and "undecided: none" in sec
    text = render(rec, "md", result.run_dir)
    assert "## Isolation" in text and "- **node node3**:" in text and "### Rounds" in text
    assert "| node3 | culprit (node) |" in text


def test_a_clean_run_says_no_culprit_and_lists_every_node_cleared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, _ = _run(tmp_path, monkeypatch, set(), concurrent=True)
    rec = load_run(result.run_dir)
    sec = _section(render(rec, "html", result.run_dir))
    assert "no culprit: all 3 nodes cleared" in sec
    assert "concurrent: a round&#x27;s tests on disjoint nodes ran together" in sec
    assert _rows(sec, "culprit") == []
    nodes = re.findall(r"<tr><td>(node\d)</td><td>(\w+)</td>", sec)
    assert sorted(nodes) == [("node1", "cleared"), ("node2", "cleared"), ("node3", "cleared")]
    text = render(rec, "md", result.run_dir)
    assert "no culprit: all 3 nodes cleared" in text and "drained: none" in text


def test_every_value_of_an_edited_isolation_json_is_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, _ = _run(tmp_path, monkeypatch, {"node3"})
    path = result.run_dir / "isolation.json"
    data = json.loads(path.read_text())
    data["isolation"]["culprits"][0]["why"] = EVIL
    data["isolation"]["culprits"][0]["evidence"][0]["outcome"]["detail"] = EVIL
    data["drained"], data["drain_reasons"], data["drain_refused"] = ["node3"], {"node3": EVIL}, EVIL
    data["partitions"][0]["note"] = EVIL
    data["rule"] = EVIL
    path.write_text(json.dumps(data))
    rec = load_run(result.run_dir)
    assert rec.isolation is not None and rec.isolation.drain_reasons == {"node3": EVIL}
    sec = _section(render(rec, "html", result.run_dir))
    assert "<script" not in sec and "<img" not in sec and "<b>bold" not in sec
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in sec
    drained = re.findall(r"<tr><td>node3</td><td>drained</td><td>(.*?)</td></tr>", sec)
    assert [html.unescape(d) for d in drained] == [EVIL]  # shown as the text it is
    text = render(rec, "md", result.run_dir)
    assert "<script" not in text and "<img" not in text, [ln for ln in text.splitlines() if "<script" in ln]
    assert "](javascript" not in text.replace("\\](javascript", "")  # only as escaped text
    assert "**bold**" not in text and "\\*\\*bold\\*\\*" in text
    (row,) = [ln for ln in text.splitlines() if ln.startswith("| node3 | drained |")]
    assert len(re.findall(r"(?<!\\)\|", row)) == 4  # the reason's '|' makes no column


def test_a_scale_test_that_ran_isolate_has_the_section_with_the_linked_runs_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in(monkeypatch, {"node3"})
    result = failed_smoke_run(
        tmp_path, [_res(["node1"], 1.0), _res(["node1", "node2", "node3"], 0.01, "fail")]
    )
    parent = result.run_dir
    found = iso.isolate_after_scale_test(result, _inventory(tmp_path))
    assert found is not None
    rec = load_run(parent)
    assert rec.isolation is not None and rec.isolation.run_id == found.run_id
    sec = _section(render(rec, "html", parent))
    assert f"linked isolate run {found.run_id}, after this scale-test" in sec
    assert {r[0] for r in _rows(sec, "culprit")} == {"node node3"}
    trials = _rows(sec, "trial")
    assert trials and all(t[8] != "-" for t in trials)  # read from the linked run's own folder
    # without the linked folder the section still stands, and says what it cannot show
    moved = tmp_path / "elsewhere"
    found.run_dir.rename(moved)
    sec = _section(render(load_run(parent), "html", parent))
    assert "folder is not beside this one" in sec and all(t[8] == "-" for t in _rows(sec, "trial"))
    assert {r[0] for r in _rows(sec, "culprit")} == {"node node3"}


def test_a_run_without_isolation_has_no_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = _run(tmp_path, monkeypatch, set())
    (result.run_dir / "isolation.json").unlink()
    rec = load_run(result.run_dir)
    assert rec.isolation is None
    assert 'id="isolation"' not in render(rec, "html", result.run_dir)
    assert "## Isolation" not in render(rec, "md", result.run_dir)


def test_isolation_json_of_an_older_run_reads_and_says_what_was_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, _ = _run(tmp_path, monkeypatch, {"node3"})
    path = result.run_dir / "isolation.json"
    data = json.loads(path.read_text())
    for key in ("rule_params", "drain_reasons"):
        data.pop(key)
    for rnd in data["isolation"]["rounds"]:
        for t in rnd["trials"]:
            for key in ("against", "reference", "samples", "min_ratio"):
                t["outcome"].pop(key)
    path.write_text(json.dumps(data))
    IsolationRun.model_validate(data)
    sec = _section(render(load_run(result.run_dir), "html", result.run_dir))
    assert "not recorded" in sec and "iterations not recorded" in sec


def test_orch_report_rebuilds_the_section_from_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    result, _ = _run(tmp_path, monkeypatch, {"node3"})
    (result.run_dir / "report.md").unlink()  # nothing but the run's own records
    runner = CliRunner()
    for fmt in ("html", "md"):
        out = tmp_path / f"again.{fmt}"
        r = runner.invoke(
            app, ["report", str(result.run_dir), "-f", fmt, "-o", str(out)], standalone_mode=False
        )
        assert r.exception is None and r.return_value == 0, r.output
        assert "node node3" in out.read_text() and "Culprits and their evidence" in out.read_text()
    assert 'id="isolation"' in (tmp_path / "again.html").read_text()
