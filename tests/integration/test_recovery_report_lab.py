"""A recovery-test on the lab is a run: `orch report` draws its heartbeat timeline with the fault
marked and the distribution over repeats, the store holds its recoveries, and `orch compare` of two
recovery runs compares the timings. Real probe (torchrun over SSH), real SIGKILL. ~2-3 minutes.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ORCH = [sys.executable, "-m", "orchestrator"]


def _orch(env: dict[str, str], *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCH, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def _recovery_run(lab: Lab, env: dict[str, str], runs: Path, repeat: int) -> Path:
    before = {p.name for p in runs.iterdir()} if runs.exists() else set()
    proc = _orch(env, "recovery-test", "-i", str(lab.inventory), "--fault", "kill-worker",
                 "--target", "node2:2", "--repeat", str(repeat), "--out", str(runs))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (new,) = [p for p in runs.iterdir() if p.is_dir() and p.name not in before]
    return new


def test_recovery_run_reports_timeline_store_and_compare(lab: Lab, tmp_path: Path) -> None:
    env = {k: v for k, v in {**os.environ, **lab.env}.items() if k != "ORCH_STORE"}
    runs = tmp_path / "runs"
    a = _recovery_run(lab, env, runs, 2)

    journal = [json.loads(x) for x in (a / "journal.jsonl").read_text().splitlines()]
    events = [e["event"] for e in journal]
    assert events[0] == "run_started" and events[-1] == "run_finished"
    assert events.count("recovery_done") == 2
    # the lab inventory has Slurm: the probe ran as one sbatch job, and clocks were measured per repeat
    assert journal[0]["backend"] == "slurm" and (a / "probe" / "probe.sbatch").exists()
    assert [e.get("repeat") for e in journal if e["event"] == "clock_offsets"] == [None, 0, 1]
    records = [json.loads(p.read_text()) for p in sorted((a / "recovery").glob("*.json"))]
    assert len(records) == 2 and not list((a / "faults").glob("recovery-kill-worker-*.json"))
    for r in records:
        assert r["verdict"] == "recovered" and r["restarts"] >= 1
        ranks = {h["rank"] for h in r["heartbeats"]}
        assert ranks == {0, 1, 2, 3, 4, 5}, ranks
        ts = [h["t_s"] for h in r["heartbeats"] if h["ok"]]
        assert min(ts) < 0 < r["timings"]["recover_s"] <= max(ts)  # before the fault and past recovery
        # the killed generation's last steps are before the fault; the new generation's after it
        gens = {h["restart_count"] for h in r["heartbeats"]}
        assert max(gens) > min(gens)

    proc = _orch(env, "report", str(a), "--format", "html", "--out", str(tmp_path / "a.html"))
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "a.html").read_text()
    assert "2 of 2 done" in html and "0 of 0 finished" not in html
    timelines = re.findall(r'<svg class="plot" data-kind="timeline".*?</svg>', html, re.S)
    assert len(timelines) == 2
    for svg in timelines:
        assert len(re.findall(r'<g class="series"', svg)) == 6  # one per rank
        assert ">fault<" in svg and ">recover<" in svg
    assert html.count('data-kind="distribution"') == 1 and "orch recovery-test" in html

    with sqlite3.connect(runs / "orch.db") as c:
        got = c.execute("SELECT status FROM runs WHERE run_id = ?", (a.name,)).fetchone()
        n = c.execute("SELECT count(*) FROM recoveries WHERE run_id = ?", (a.name,)).fetchone()[0]
    assert got == ("accepted",) and n == 2

    b = _recovery_run(lab, env, runs, 1)
    out = tmp_path / "cmp.json"
    proc = _orch(env, "compare", str(a), str(b), "--json", str(out), "--store", str(runs / "orch.db"))
    cmp = json.loads(out.read_text())
    phases = {r["phase"]: r for r in cmp["recovery"]}
    assert set(phases) == {"detect", "recover", "restore"}, cmp["recovery"]
    assert all(r["a_median_s"] is not None and r["b_median_s"] is not None for r in phases.values())
    assert proc.returncode == (1 if any(r["verdict"] == "worse" for r in phases.values()) else 0)
    print("\n" + proc.stdout)
