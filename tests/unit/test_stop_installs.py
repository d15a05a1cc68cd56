"""roles/workload_env/files/stop_installs.py: what an interrupted provisioning left installing into
the venv is stopped by PID before the venv is removed (seen on the lab: orch killed during the
canary's install, resume removed the venv while the node's pip still wrote into it: "rmtree
failed: Directory not empty"). A process that runs from the venv but installs nothing is left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = (
    Path(__file__).resolve().parents[2] / "orchestrator/playbooks/roles/workload_env/files/stop_installs.py"
)
SLEEP = "import time; time.sleep(60)"


def test_an_install_into_the_prefix_is_stopped_and_a_workload_is_not(tmp_path: Path) -> None:
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    other = tmp_path / "other"
    # argv as the node shows them: a pip into the prefix, a workload from it, a pip elsewhere
    pip = subprocess.Popen([sys.executable, "-c", SLEEP, "pip", "install", "--prefix", str(prefix)])
    work = subprocess.Popen([sys.executable, "-c", SLEEP, f"{prefix}/bin/collbench"])
    elsewhere = subprocess.Popen([sys.executable, "-c", SLEEP, "pip", "install", "--prefix", str(other)])
    try:
        out = subprocess.run(
            [sys.executable, str(SCRIPT), "--prefix", str(prefix), "--grace", "5"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        doc = json.loads(out.stdout)
        assert doc["changed"] and [s["pid"] for s in doc["stopped"]] == [pip.pid]
        assert pip.wait(timeout=10) != 0
        assert work.poll() is None and elsewhere.poll() is None
        again = json.loads(
            subprocess.run(
                [sys.executable, str(SCRIPT), "--prefix", str(prefix)],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )
        assert again == {"changed": False, "stopped": []}
    finally:
        for p in (pip, work, elsewhere):
            p.kill()
            p.wait(timeout=10)


def test_a_prefix_that_is_not_a_venv_of_its_own_is_refused() -> None:
    for bad in ("/", "/opt", "relative/venv"):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--prefix", bad], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert proc.returncode != 0 and "refusing prefix" in proc.stderr
