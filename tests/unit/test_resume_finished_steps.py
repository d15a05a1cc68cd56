"""A run killed after its last step finished, before its result: resume finishes it, runs nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.runs.scale_test import resume_run
from orchestrator.store.load import load_run
from orchestrator.store.rundir import who

PLAN = """
name: tiny
ladder: {nodes: [1], ranks_per_node: [1]}
collectives: [sendrecv]
sizes: {min: 1K, max: 1K}
warmup_iters: 1
iters: 1
"""


def test_resume_writes_the_result_of_a_run_whose_steps_all_finished(tmp_path: Path) -> None:
    inv = tmp_path / "local.ini"
    inv.write_text("localhost ansible_connection=local gpu_vendor=none gpus_per_node=1\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "scale-test", "-i", str(inv), "--plan", str(plan),
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    # what a SIGKILL between the last step_done and run_finished leaves behind
    (run_dir / "result.json").unlink()
    journal = run_dir / "journal.jsonl"
    lines = [x for x in journal.read_text().splitlines() if json.loads(x)["event"] != "run_finished"]
    journal.write_text("\n".join(lines) + "\n")
    job_before = json.loads((run_dir / "steps" / "n1xg1" / "result.json").read_text())["job_id"]
    assert load_run(run_dir).status == "interrupted"

    result = resume_run(run_dir)

    assert result.status == "accepted" and result.exit_code == 0
    assert [s.job_id for s in result.steps] == [job_before]  # nothing ran again
    assert load_run(run_dir).status == "accepted"
    # the journal of a run whose orch is alive (this process) and not finished: not resumed
    events = [json.loads(x) for x in journal.read_text().splitlines()]
    events = [e for e in events if e["event"] != "run_finished"]
    alive = [{**e, **who()} if e["event"] == "run_started" else e for e in events]
    journal.write_text("".join(json.dumps(e) + "\n" for e in alive))
    assert load_run(run_dir).status == "running"
    with pytest.raises(ConfigError, match=f"run {result.run_id} is still running"):
        resume_run(run_dir)
