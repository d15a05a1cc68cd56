"""SIGKILL `orch scale-test` at random moments: every journal and the store stay readable, and
`orch runs resume` finishes each killed run. Local backend (no lab needed): 2 steps, 2 collectives,
small sizes. With the unit tests, not the lab's (it needs no lab): its random waits overlap the
other workers' tests there, where in the serial lab suite they were 53 s of make test."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.store.db import ResultsStore
from orchestrator.store.load import load_run

ORCH = str(Path(sys.executable).with_name("orch"))
ARGS = [
    "scale-test",
    "--backend",
    "local",
    "--gpus-per-node",
    "1,2",
    "--collectives",
    "all_reduce,alltoall",
    "--sizes",
    "1K:16K:x4",
    "--iters",
    "2",
    "--warmup",
    "1",
]
# 10 random kills in CI (ORCH_KILL_TEST_N=100 for a longer hunt): each costs about 7 s.
KILLS = int(os.environ.get("ORCH_KILL_TEST_N", "10"))


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL orch, then the rank processes it had started (they would run on as orphans)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for c in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            c.send_signal(signal.SIGKILL)


def _journal_ok(run_dir: Path) -> bool:
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        try:
            json.loads(line)
        except json.JSONDecodeError:
            if i != len(lines) - 1:  # only a torn last line is tolerated
                return False
    return True


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("ORCH_KILL_TEST_SEED", "6")))
    env = {**os.environ, "ORCH_STORE": str(tmp_path / "orch.db")}
    unreadable, killed_dirs = 0, []
    for i in range(KILLS):
        out = tmp_path / f"k{i}"
        proc = subprocess.Popen(
            [ORCH, *ARGS, "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.2, 7.0))
        _kill_tree(proc)
        dirs = [d for d in out.glob("*") if d.is_dir()]
        if not dirs:
            continue  # killed before the run directory existed
        run_dir = dirs[0]
        if not _journal_ok(run_dir):
            unreadable += 1
            continue
        rec = load_run(run_dir)
        assert rec.status in ("interrupted", "accepted"), rec.status
        if rec.status == "interrupted":
            killed_dirs.append(run_dir)
    with ResultsStore.open(tmp_path / "orch.db") as store:
        assert store.integrity_ok()
        stored = {r.run_id: r.status for r in store.runs()}
    assert unreadable == 0
    assert killed_dirs, "no kill landed inside a run; widen the window"
    for run_dir in killed_dirs:
        assert stored.get(run_dir.name) in ("interrupted", "running", None)
        done_before = {s.step.id for s in load_run(run_dir).steps if s.verdict != "skipped"}
        res = subprocess.run(
            [ORCH, "runs", "resume", str(run_dir)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        rec = load_run(run_dir)
        assert rec.status == "accepted" and not rec.pending
        assert {s.step.id for s in rec.steps} == set(rec.step_ids)
        assert done_before <= {s.step.id for s in rec.steps}
    with ResultsStore.open(tmp_path / "orch.db") as store:
        assert store.integrity_ok()
        assert all(store.run(d.name).status == "accepted" for d in killed_dirs)  # type: ignore[union-attr]
