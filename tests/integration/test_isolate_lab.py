"""`orch isolate` on the lab: a 20 mbit tbf throttle on node3's fabric interface (through the fault
engine: `orch fault inject`, reverted in finally and by its node-side timer) is found as node3 and
no other node, within ceil(log2 N) + 2 rounds; --drain-bad drains it with the run id in the
reason and `orch cert resume` brings it back once the throttle is gone. A clean lab names no one.

The lab's 3 nodes share 2 CPUs: singles and pairs are noisy (about 30 % run to run), so these
tests loosen the pass rule (singles within 70 % of the best, pairs at 5 % of the best single);
a 20 mbit link (2.5 MB/s) is still two orders of magnitude below it.
"""

from __future__ import annotations

import json
import math
import os
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

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator"]
LOOSE = ["--size", "4M", "--iters", "3", "--timeout", "30", "--tolerance", "0.7", "--min-efficiency", "0.05"]


def orch(lab: Lab, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCH, *args], capture_output=True, text=True, env=lab.env, timeout=timeout, check=False, cwd=REPO
    )


def _tc(lab: Lab, node: str) -> str:
    return lab.slurm("ip", "netns", "exec", f"orch-{node}", "tc", "qdisc", "show", "dev", "fab0").stdout


def _isolation(out: Path) -> dict:  # type: ignore[type-arg]
    (path,) = list(out.glob("*isolate*/isolation.json"))
    return json.loads(path.read_text())


def _node_line(lab: Lab, node: str) -> str:
    return lab.slurm("scontrol", "show", "node", "-o", node).stdout


def test_a_throttled_node_is_named_drained_and_resumed(lab: Lab, tmp_path: Path) -> None:
    before = _tc(lab, "node3")
    throttle = subprocess.Popen(
        [*ORCH, "fault", "inject", "-i", str(lab.inventory), "--kind", "throttle", "--target", "node3:fab0",
         "--rate", "20mbit", "--duration", "240s", "--runs", str(tmp_path / "faults")],
        env=lab.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "tbf" not in _tc(lab, "node3") and time.monotonic() < deadline and throttle.poll() is None:
            time.sleep(0.5)
        assert "tbf" in _tc(lab, "node3"), "the throttle did not land"
        proc = orch(
            lab, "isolate", "-i", str(lab.inventory), *LOOSE, "--drain-bad", "--out", str(tmp_path / "r")
        )
    finally:
        if throttle.poll() is None:
            os.kill(throttle.pid, signal.SIGTERM)  # the CLI reverts on SIGTERM (and the timer anyway)
        throttle.communicate(timeout=60)
    assert _tc(lab, "node3") == before
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = _isolation(tmp_path / "r")
    culprits = found["isolation"]["culprits"]
    assert [(c["kind"], c["nodes"]) for c in culprits] == [("node", ["node3"])], proc.stdout
    assert len(found["isolation"]["rounds"]) <= math.ceil(math.log2(3)) + 2
    assert found["mode"] == "sequential" and "rounds run sequential" in proc.stderr
    assert "round 1: single node1" in proc.stderr  # the rounds were printed as they went
    assert any(not t["outcome"]["passed"] and "node3" in t["group"] for t in culprits[0]["evidence"])
    print(f"isolate: {len(found['isolation']['rounds'])} rounds, {found['wall_s']:.1f} s")
    try:
        line = _node_line(lab, "node3")
        assert "DRAIN" in line and f"orch {found['run_id']}:" in line, line
        back = orch(lab, "cert", "resume", "node3", "-i", str(lab.inventory), "--size", "4M",
                    "--min-efficiency", "0.05", "--out", str(tmp_path / "r2"))  # fmt: skip
        assert back.returncode == 0, back.stdout + back.stderr
        assert "DRAIN" not in _node_line(lab, "node3")
    finally:
        lab.slurm("scontrol", "update", "nodename=node3", "state=resume", check=False)


def test_a_clean_lab_names_no_culprit(lab: Lab, tmp_path: Path) -> None:
    proc = orch(lab, "isolate", "-i", str(lab.inventory), *LOOSE, "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = _isolation(tmp_path)
    assert found["isolation"]["culprits"] == [] and found["isolation"]["undecided"] == []
    assert sorted(found["isolation"]["good"]) == ["node1", "node2", "node3"]
    print(f"isolate (clean): {len(found['isolation']['rounds'])} rounds, {found['wall_s']:.1f} s")
