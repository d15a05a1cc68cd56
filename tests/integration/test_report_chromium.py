"""orch's HTML report in headless Chromium (Debian package `chromium`): the Isolation section and the
straggler heatmap. No lab needed (the module overrides conftest's autouse lab check, so the session
lab is not brought up for it); skips when chromium is not installed (`make test` installs it).

- The isolation run folder is made by orch's own isolate runner (runs/isolate.py run_isolation) with
  tests/unit/test_isolate_run.py's stand-in scheduler: 3 nodes, jobs spanning node3 fail, every
  other test ends with a real collbench log.
- The stragglers run folder is built by tests/unit/test_straggler_section.py::make_pair_run: a 2-node
  step for every pair of 6 nodes, each with the real collbench rows of tests/fixtures/collbench,
  node4's pairs four times slower.

orch's report rebuilds each page from the folder alone; Chromium loads it and dumps its DOM.
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
from test_straggler_section import make_pair_run

from orchestrator.report.formats import render
from orchestrator.store.load import load_run


@pytest.fixture(autouse=True)
def _lab_nodes_usable() -> None:
    """Overrides conftest's check of the lab's nodes: these tests need no lab (nor its session
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


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_straggler_heatmap_is_in_the_dom_with_the_slow_node_marked(tmp_path: Path) -> None:
    run = make_pair_run(tmp_path, "pairs")
    page = tmp_path / "report.html"
    page.write_text(render(load_run(run), "html", run))
    shot = tmp_path / "report.png"
    res = _chromium(["--window-size=1280,2400", f"--screenshot={shot}", page.as_uri()], tmp_path / "p1")
    assert res.returncode == 0, res.stderr[-2000:]
    assert [line for line in res.stderr.splitlines() if "CONSOLE" in line] == []
    assert shot.exists() and shot.stat().st_size > 20_000
    dom = _chromium(["--dump-dom", page.as_uri()], tmp_path / "p2")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [line for line in dom.stderr.splitlines() if "CONSOLE" in line] == []
    (section,) = re.findall(r'<section id="stragglers-1".*?</section>', dom.stdout, flags=re.S)
    (svg,) = re.findall(r'<svg class="plot" data-kind="heatmap".*?</svg>', section, flags=re.S)
    # one cell per ordered pair of the 6 nodes, each with a tooltip naming both
    cells = re.findall(r'<rect class="cell"[^>]*>\s*<title>([^<]+)</title>', svg)
    assert len(cells) == 6 * 5
    pairs = {tuple(t.split(":")[0].split(" - ")) for t in cells}
    assert len(pairs) == 30 and all(a != b for a, b in pairs)  # type: ignore[misc]
    # node4's row and column are marked, and no other node's
    flagged = re.findall(r'<text class="tick (row|col) flagged"[^>]*>([^<]+)</text>', svg)
    assert sorted(flagged) == [("col", "node4"), ("row", "node4")]
    assert "node4: median" in section


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_decide_page_shows_every_row_with_its_figure_or_why_it_is_missing(tmp_path: Path) -> None:
    from orchestrator.report.decide import ROWS, decide, page_html

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "old_runs"
    a = load_run(fixtures / "serving" / "20261204T235843Z-serve-test-f7ca")
    page = tmp_path / "decide.html"
    page.write_text(page_html(decide([a], [a])))
    dom = _chromium(["--dump-dom", page.as_uri()], tmp_path / "p3")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [line for line in dom.stderr.splitlines() if "CONSOLE" in line] == []
    (section,) = re.findall(r'<section id="decide" class="overall-undecided">.*?</section>', dom.stdout,
                            flags=re.S)  # fmt: skip
    rows = [
        [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r, flags=re.S)]
        for r in re.findall(r'<tr class="row">(.*?)</tr>', section, flags=re.S)
    ]
    assert [r[0] for r in rows] == list(ROWS)
    for name, a_fig, b_fig, verdict, why in rows:
        assert why, name  # every row says why: its band and n, or what is missing
        assert (a_fig == b_fig == "-") == (verdict == "missing"), name
    assert {r[0] for r in rows if r[3] == "missing"} >= {"capacity at SLO", "output quality"}
    assert "undecided: no figure for" in section and "capacity at SLO" in section
