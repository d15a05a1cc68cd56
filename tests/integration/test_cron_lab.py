"""`orch cron install` on the lab, end to end: Slurm starts the entry's job at HH:MM, the job runs
the plan, and the run lands in `orch history`.

Debian's Slurm 22.05 ships no scrontab binary, so the entry is the sbatch-begin fallback: a job
held with --begin that resubmits itself for the next day, then runs the plan. Takes about 2
minutes (the schedule is the next whole minute). The entry's jobs are named ``orchcron-*``
(outside ``orch-*``); the entry is removed and its jobs cancelled in finally.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Lab

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator"]
pytestmark = pytest.mark.slow
# The entry's job holds a CPU for the whole run and steps are --exclusive: it sits on node3 and the
# plan's steps use node1 and node2 (n1: node1, n2: node1+node2).
SMALL = ["--nodes", "1,2", "--gpus-per-node", "1", "--collectives", "all_reduce", "--sizes", "1K:4K:x2",
         "--iters", "2", "--warmup", "1"]


def test_cron_entry_runs_the_plan_and_lands_in_history(lab: Lab, tmp_path: Path) -> None:
    from conftest import run

    runs = tmp_path / "runs"
    name = f"flt{os.getpid()}"
    env = {k: v for k, v in {**os.environ, **lab.env}.items() if k != "ORCH_STORE"}
    now = datetime.now()
    # the next whole minute when 10 s are left for the install (it takes 2-5 s), else the one after
    at = (now + timedelta(minutes=1 if now.second < 50 else 2)).strftime("%H:%M")
    # The entry's job runs orch on node3, which sees neither the checkout (where lab.inventory
    # lies) nor its venv: it reads the lab's own copy of the inventory and runs the stack's orch.
    inv = ["--inventory", str(lab.config.state_inventory), "--out", str(runs), "--mode", "sbatch-begin"]
    try:
        install = [*ORCH, "cron", "install", "--plan", "smoke", "--name", name, "--at", at, *inv,
                   "--job-arg=--nodelist=node3", "--", *SMALL]
        out = run(install, env=env).stdout
        # smoke: run_timeout_s 1800 + 600 s margin = 40 min
        assert "time limit 40 min" in out, out
        listed = run([*ORCH, "cron", "list", *inv], env=env).stdout
        row = next((ln for ln in listed.splitlines() if ln.split()[:1] == [name]), listed)
        assert "sbatch --begin (resubmits itself)" in row and "40 min" in row and "PENDING" in row, row
        job = row.split("job ", 1)[1].split()[0]
        shown = lab.slurm("scontrol", "show", "job", job).stdout
        assert "TimeLimit=00:40:00" in shown and f"JobName=orchcron-{name}" in shown, shown

        # Slurm starts it at HH:MM; it resubmits itself for tomorrow, then runs the plan.
        # Wait for the run's journal to say it finished (a refused run, e.g. an unreachable node at
        # fingerprinting, ends there too, without result.json): fail at once with its reason.
        deadline = time.monotonic() + 300
        finished = None
        while time.monotonic() < deadline and finished is None:
            done = [j for j in runs.glob("*/journal.jsonl") if '"run_finished"' in j.read_text()]
            finished = done[0] if done else None
            time.sleep(2)
        log = runs / "cron" / f"{name}.log"
        assert finished is not None, log.read_text() if log.exists() else "no log"
        result = finished.parent / "result.json"
        assert result.exists(), (log.read_text() if log.exists() else "") + finished.read_text()[-2000:]
        run_id = result.parent.name
        # scontrol (the controller's view; slurmdbd may lag behind by seconds)
        fields = dict(w.split("=", 1) for w in lab.slurm("scontrol", "-o", "show", "job", job).stdout.split()
                      if "=" in w)
        assert fields["JobState"] in ("RUNNING", "COMPLETING", "COMPLETED"), fields["JobState"]
        start = datetime.fromisoformat(fields["StartTime"])
        assert start.strftime("%H:%M") >= at  # held to the --at minute, not run at once
        tomorrow = run([*ORCH, "cron", "list", *inv], env=env).stdout
        again = next((ln for ln in tomorrow.splitlines() if ln.split()[:1] == [name]), tomorrow)
        # the job id as a word: job 15 held to 15:25 once made a substring test fail
        assert "PENDING" in again and again.split("job ", 1)[1].split()[0] != job, again

        hist = run([*ORCH, "history", "--plan", "smoke", "--store", str(runs / "orch.db")], env=env).stdout
        assert run_id in hist, hist
        print(f"\ncron: entry {name} at {at}; job {job} started {start:%H:%M:%S}; run {run_id} in history")
    finally:
        run([*ORCH, "cron", "remove", name, *inv], env=env, check=False)
        lab.slurm("scancel", "--name", f"orchcron-{name}", check=False)
