"""The straggler heatmap of the HTML report in headless Chromium (Debian package `chromium`).

The run folder is built by tests/unit/test_straggler_section.py::make_pair_run: a 2-node step for
every pair of 6 nodes, each with the real collbench rows of tests/fixtures/collbench, node4's pairs
four times slower. orch's own report renders it; Chromium loads the page and dumps its DOM. No lab
needed (the module overrides conftest's autouse lab check, so the session lab is not brought up
for it); skips when chromium is not installed (`make test` installs it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_results_report import CHROMIUM, _chromium
from test_straggler_section import make_pair_run

from orchestrator.report.formats import render
from orchestrator.store.load import load_run


@pytest.fixture(autouse=True)
def _lab_nodes_usable() -> None:
    """Overrides conftest's check of the lab's nodes: this test needs no lab (nor its session
    fixture, which would bring one up)."""


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
