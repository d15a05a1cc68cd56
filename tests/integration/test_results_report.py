"""The HTML report in headless Chromium (Debian package `chromium`): no console errors, plots in the DOM.

Uses the run directory in ORCH_REPORT_RUN when set (e.g. a lab run), else a synthetic one built from
real collbench output. Skips when chromium is not installed (`make test` installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_store_build import make_run

from orchestrator.report.formats import render
from orchestrator.store.load import load_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
]


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_opens_in_chromium_with_plots_and_no_console_errors(tmp_path: Path) -> None:
    run = (
        Path(os.environ["ORCH_REPORT_RUN"]) if os.environ.get("ORCH_REPORT_RUN") else make_run(tmp_path, "r1")
    )
    rec = load_run(run)
    page = tmp_path / "report.html"
    page.write_text(render(rec, "html", run))
    shot = tmp_path / "report.png"
    res = _chromium(["--window-size=1280,2400", f"--screenshot={shot}", page.as_uri()], tmp_path / "p1")
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 20_000
    console = [line for line in res.stderr.splitlines() if "CONSOLE" in line]
    assert console == []
    dom = _chromium(["--dump-dom", page.as_uri()], tmp_path / "p2")
    assert dom.returncode == 0
    plots = re.findall(r'<svg class="plot" data-kind="(\w+)"', dom.stdout)
    n_colls = len({r.collective for s in rec.steps for r in s.rows})
    assert plots.count("busbw") == n_colls
    assert {"scaling", "efficiency"} <= set(plots)
    assert dom.stdout.count('<path class="line"') >= n_colls
    keep = os.environ.get("ORCH_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
