"""A fault that a lab module holds on a node while it runs something: a plain module (imported as
`from labfaults import ...`, like tests/unit/fakes.py), not a test module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Lab

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator"]


def fab0_qdisc(lab: Lab, node: str) -> str:
    """`tc qdisc show dev fab0` in node's namespace."""
    return lab.slurm("ip", "netns", "exec", f"orch-{node}", "tc", "qdisc", "show", "dev", "fab0").stdout


@contextmanager
def throttled(lab: Lab, node: str, runs: Path, *, rate: str = "20mbit") -> Iterator[None]:
    """node's fab0 held at rate by `orch fault inject --kind throttle` (a tbf qdisc, 300 s at most;
    its run folder under runs) while the body runs: waited for (60 s at most) before the body, ended
    with SIGTERM after it (the CLI reverts on SIGTERM, and its timer anyway), and fab0 checked back
    to what it was."""
    before = fab0_qdisc(lab, node)
    throttle = subprocess.Popen(
        [*ORCH, "fault", "inject", "-i", str(lab.inventory), "--kind", "throttle", "--target", f"{node}:fab0",
         "--rate", rate, "--duration", "300s", "--runs", str(runs)],
        env=lab.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "tbf" not in fab0_qdisc(lab, node) and time.monotonic() < deadline and throttle.poll() is None:
            time.sleep(0.5)
        assert "tbf" in fab0_qdisc(lab, node), "the throttle did not land"
        yield
    finally:
        if throttle.poll() is None:
            os.kill(throttle.pid, signal.SIGTERM)
        throttle.communicate(timeout=60)
    assert fab0_qdisc(lab, node) == before
