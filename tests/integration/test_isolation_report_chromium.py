"""The Isolation section of the HTML report in headless Chromium (Debian package `chromium`).

The run folder is made by orch's own isolate runner (runs/isolate.py run_isolation) with
tests/unit/test_isolate_run.py's stand-in scheduler: 3 nodes, jobs spanning node3 fail, every
other test ends with a real collbench log. orch's report rebuilds the page from the folder alone;
Chromium loads it and dumps its DOM. No lab needed (the module overrides conftest's autouse lab
check, so the session lab is not brought up for it); skips when chromium is not installed.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_isolate_run import _run
from test_results_report import CHROMIUM, _chromium

from orchestrator.report.formats import render
from orchestrator.store.load import load_run


@pytest.fixture(autouse=True)
def _lab_nodes_usable() -> None:
    """Overrides conftest's check of the lab's nodes: this test needs no lab (nor its session
    fixture, which would bring one up)."""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_isolation_section_is_in_the_dom_with_the_culprit_and_its_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, _ = _run(tmp_path, monkeypatch, {"node3"})
    page = tmp_path / "report.html"
    page.write_text(render(load_run(result.run_dir), "html", result.run_dir))
    dom = _chromium(["--dump-dom", page.as_uri()], tmp_path / "p1")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [line for line in dom.stderr.splitlines() if "CONSOLE" in line] == []
    (section,) = re.findall(r'<section id="isolation">.*?</section>', dom.stdout, flags=re.S)
    assert '<h2 id="isolation-summary">Isolation</h2>' in section
    for part in ("isolation-rule", "isolation-culprits", "isolation-nodes", "isolation-rounds"):
        assert f'<table id="{part}-table">' in section, part
    # the culprit's rows: node3, a failing test with it, a passing one without it and its figure
    rows = [
        [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r, flags=re.S)]
        for r in re.findall(r'<tr class="culprit">(.*?)</tr>', section, flags=re.S)
    ]
    assert rows and {r[0] for r in rows} == {"node node3"}
    assert any(r[5] == "FAIL" and "node3" in r[4].split("+") for r in rows)
    assert any(r[5] == "pass" and "node3" not in r[4].split("+") and "GB/s (n=" in r[7] for r in rows)
    trials = re.findall(r'<tr class="trial">', section)
    assert len(trials) == sum(len(r.trials) for r in result.isolation.rounds)
    assert '<li class="culprit-name"><b>node node3</b>' in section
