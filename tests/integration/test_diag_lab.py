"""Diagnostics as plan steps on the 3-node lab (docs/diagnostics.md): through real Slurm, where none
of the tools exist, each node says so ("not run: no dcgmi on node1"): the run ends infra (exit 3),
never a pass and never a traceback, and the report and `orch cert issue` say it per node.

Written with the step kind (issue 26, item 1); not yet run on the lab by its author.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.lab

ORCH = [sys.executable, "-m", "orchestrator"]
NODES = ("node1", "node2", "node3")


def orch(lab: Lab, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCH, *args], capture_output=True, text=True, env=lab.env, timeout=timeout, check=False
    )


def test_a_tool_the_nodes_lack_is_not_run_on_each_node(lab: Lab, tmp_path: Path) -> None:
    plan = tmp_path / "diag.yaml"
    plan.write_text(
        "name: diag\ncollectives: []\nstep_timeout_s: 120\n"
        "diagnostics:\n  - {tool: dcgmi-diag, level: 1}\n  - {tool: gpu-burn, duration_s: 5}\n"
    )
    proc = orch(lab, "scale-test", "-i", str(lab.inventory), "--plan", str(plan), "--stack", "none",
                "--out", str(tmp_path / "r"))  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for node in NODES:
        assert f"not run: no dcgmi on {node}" in proc.stderr, proc.stderr
        assert f"not run: no gpu_burn on {node}" in proc.stderr, proc.stderr
    (run_dir,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    result = json.loads((run_dir / "result.json").read_text())
    assert [s["step"]["id"] for s in result["steps"]] == ["diag-dcgmi-diag", "diag-gpu-burn"]
    for step in result["steps"]:
        assert step["verdict"] == "infra"
        assert [(n["node"], n["status"]) for n in step["diagnostics"]] == [(n, "missing") for n in NODES]
    rep = orch(lab, "report", str(run_dir), "--format", "md")
    assert rep.returncode == 0, rep.stderr
    md = rep.stdout  # a format other than html goes to stdout
    assert "## Diagnostics" in md and "| node2 | not run | - | not run: no dcgmi on node2 |" in md
    junit = orch(lab, "report", str(run_dir), "--format", "junit")
    assert junit.returncode == 0, junit.stderr
    root = ET.fromstring(junit.stdout)
    errors = [c.get("name") for c in root.iter("testcase") if c.find("error") is not None]
    assert {f"node {n}" for n in NODES} <= set(errors)
    cert = orch(lab, "cert", "issue", str(run_dir))
    assert "no dcgmi on node1" in cert.stdout + cert.stderr
    assert not (run_dir / "certs" / "node1.json").exists()
