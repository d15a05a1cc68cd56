"""Allocation mode on the 3-node lab: the ladder as job steps of one allocation (issue 13: 6)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.lab

ORCH = [sys.executable, "-m", "orchestrator"]
SMALL = ["--collectives", "all_reduce,all_gather", "--sizes", "64K:256K:x4"]


def journal(run_dir: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()]


def orch_jobs(lab: Lab) -> list[str]:
    out = lab.slurm("squeue", "--noheader", "-o", "%i %j").stdout
    return [line.split()[0] for line in out.splitlines() if " orch-" in line]


@pytest.fixture(autouse=True)
def _no_orch_jobs_left(lab: Lab) -> None:
    if ids := orch_jobs(lab):
        lab.slurm("scancel", *ids)


def test_ladder_runs_as_steps_of_one_allocation(lab: Lab, tmp_path: Path) -> None:
    proc = subprocess.run(
        [*ORCH, "scale-test", "-i", str(lab.inventory), "--gpus-per-node", "1", "--slurm-mode", "allocation",
         *SMALL, "--out", str(tmp_path)],
        capture_output=True, text=True, env=lab.env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    result = json.loads((run_dir / "result.json").read_text())
    steps = result["steps"]
    assert [s["step"]["id"] for s in steps] == ["n1xg1", "n2xg1", "n3xg1"]
    allocs = {s["job_id"].partition(".")[0] for s in steps}
    assert len(allocs) == 1, [s["job_id"] for s in steps]
    (alloc,) = allocs
    # each ladder step is one job step of the allocation, on its own nodes, with its own rows
    assert [s["job_id"] for s in steps] == [f"{alloc}.0", f"{alloc}.1", f"{alloc}.2"]
    assert [s["job"]["nodelist"] for s in steps] == ["node1", "node[1-2]", "node[1-3]"]
    for s in steps:
        assert s["verdict"] == "pass", s["reasons"]
        assert len(s["rows"]) == 2 * 2 and all(r["nranks"] == s["step"]["world_size"] for r in s["rows"])
        step_dir = run_dir / "steps" / s["step"]["id"]
        assert json.loads((step_dir / "result.json").read_text())["job_id"] == s["job_id"]
        assert sorted(p.name for p in step_dir.glob("rank-*.log")) == [
            f"rank-{r}.log" for r in range(s["step"]["world_size"])
        ]
    kinds = [(e["event"], e.get("step")) for e in journal(run_dir)]
    for sid in ("n1xg1", "n2xg1", "n3xg1"):
        assert kinds.index(("step_submitted", sid)) < kinds.index(("step_done", sid))
        assert ("step_state", sid) in kinds
    lines = lab.slurm("sacct", "--parsable2", "--noheader", "-o", "JobID,JobName,State", "-j", alloc).stdout
    named = {ln.split("|")[0]: ln.split("|")[1:] for ln in lines.splitlines()}
    # Job names carry the run's id (orch runs cleanup cancels only those): orch-<run id>-<step>.
    assert named[f"{alloc}.1"] == [f"orch-{run_dir.name}-n2xg1", "COMPLETED"], lines


def test_sigint_mid_ladder_leaves_no_job(lab: Lab, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*ORCH, "scale-test", "-i", str(lab.inventory), "--gpus-per-node", "1", "--slurm-mode", "allocation",
         "--collectives", "all_reduce", "--sizes", "1M:16M:x4", "--iters", "40", "--out", str(tmp_path)],
        env={**lab.env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        mid = False
        while time.monotonic() < deadline and not mid:
            dirs = [p for p in tmp_path.iterdir() if (p / "journal.jsonl").exists()]
            events = journal(dirs[0]) if dirs else []
            mid = any(e["event"] == "step_state" and e.get("step") == "n2xg1" and e["state"] == "RUNNING"
                      for e in events)  # fmt: skip
            time.sleep(0.2)
        assert mid, "step n2xg1 never ran"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130, stdout + stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    events = journal(run_dir)
    alloc = next(e["job_id"] for e in events if e["event"] == "step_submitted").partition(".")[0]
    assert any(e["event"] == "interrupted" for e in events)
    # scancel is asynchronous: the allocation may show as COMPLETING for a moment.
    deadline = time.monotonic() + 20
    while alloc in orch_jobs(lab) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert alloc not in orch_jobs(lab), "the allocation outlived orch"
    done = [e["step"] for e in events if e["event"] == "step_done"]
    assert done == ["n1xg1"], done  # n1 finished before the signal; n2, n3 never finished
