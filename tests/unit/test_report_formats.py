"""The report-format registry: every format reachable through it (render, extension, the CLI's
choices and help), and an unknown one refused with the known ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_store_build import make_run

from orchestrator.cli.report import report_cmd
from orchestrator.errors import ConfigError
from orchestrator.report.formats import (
    EXTENSIONS,
    FORMATS,
    REPORT_FORMATS,
    render,
    render_junit,
    render_markdown,
    render_openmetrics,
    report_format,
)
from orchestrator.store.load import load_run


def test_the_formats_and_their_files() -> None:
    assert FORMATS == ("html", "md", "json", "junit", "openmetrics")  # the order of --format's help
    assert EXTENSIONS == {
        "html": "html",
        "md": "md",
        "json": "json",
        "junit": "junit.xml",
        "openmetrics": "prom",
    }
    assert all(REPORT_FORMATS[n].name == n for n in FORMATS)


def test_an_unknown_format_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        report_format("csv")
    assert "unknown report format 'csv'" in e.value.message
    assert all(n in e.value.message for n in FORMATS)
    rec = load_run(make_run(tmp_path, "r1"))
    with pytest.raises(ConfigError, match="known: html, md, json, junit, openmetrics"):
        render(rec, "csv")


def test_every_format_renders_through_the_registry(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    rec = load_run(run)
    texts = {n: render(rec, n, run) for n in FORMATS}
    assert texts["md"] == render_markdown(rec, run)
    assert texts["junit"] == render_junit(rec)
    assert texts["openmetrics"] == render_openmetrics(rec)
    assert texts["json"] == rec.model_dump_json(indent=2) + "\n"
    assert texts["html"].lstrip().lower().startswith("<!doctype html>")


def test_the_cli_help_lists_the_registry() -> None:
    from typing import get_type_hints

    help_text = get_type_hints(report_cmd, include_extras=True)["fmt"].__metadata__[0].help
    assert help_text == "html, md, json, junit or openmetrics."


def test_section_tables_escape_every_cell_in_both_formats() -> None:
    from orchestrator.report.sections import html_table, md_table

    head, rows = ["node", "why"], [["node1", "a|b <i>"]]
    assert md_table(head, rows) == ["| node | why |", "|---|---|", "| node1 | a\\|b &lt;i&gt; |"]
    html = html_table(head, rows, ident="rounds", row_class="trial")
    assert html[0] == '<table id="rounds-table"><tr><th>node</th><th>why</th></tr>'
    assert html[1] == '<tr class="trial"><td>node1</td><td>a|b &lt;i&gt;</td></tr>' and html[-1] == "</table>"
    assert html_table(head, [])[0].startswith("<table><tr>")  # no ident: no id


def test_a_run_without_step_cases_is_one_case_with_its_verdict(tmp_path: Path) -> None:
    """An isolate run (old_runs: node3 named, exit 1) has no step or threshold cases: its JUnit
    holds the run as one failed case, so that a CI reading the file fails it (it said tests="0"
    failures="0" before)."""
    import shutil
    import xml.etree.ElementTree as ET

    src = Path(__file__).parents[1] / "fixtures" / "old_runs" / "isolate" / "20261204T235933Z-isolate-6ab3"
    run_dir = Path(shutil.copytree(src, tmp_path / src.name))
    rec = load_run(run_dir)
    assert rec.status == "failed" and rec.steps == []
    root = ET.fromstring(render(rec, "junit"))
    (case,) = list(root.iter("testcase"))
    assert case.get("name") == f"isolate {rec.run_id}"
    assert (root.get("tests"), root.get("failures")) == ("1", "1")
    failure = case.find("failure")
    assert failure is not None and "run failed, exit 1" in (failure.get("message") or "")
    accepted = rec.model_copy(update={"status": "accepted", "exit_code": 0})
    root = ET.fromstring(render(accepted, "junit"))
    assert (root.get("tests"), root.get("failures")) == ("1", "0")
