"""orch health and orch cert readmit on the 3-node lab, through SSH and Slurm (issue 26's must-show):
a planted kernel-log line of each kind of finding is found on its node, the fatal node is drained,
the cap (orch_max_unavailable=1) keeps the second fatal node in service, and one pass of the
re-admit loop re-tests the drained node (its fault is only in a log: the collectives pass) and
returns it.

The lab's nodes share one kernel (and /var/tmp), so each node's kernel log is a file planted over
SSH in a folder of its own and named by orch_health_kernel_log; its sysfs root is a planted tree
holding only its fabric NIC, up (the shared machine's PCIe and NIC counters are not the node's).
The lines are the verbatim published ones of tests/fixtures/health/.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import REPO, Lab, run

from orchestrator.models.health import HealthReport

FIXTURES = REPO / "tests" / "fixtures" / "health"
PLANT = "/var/tmp/orch-health-test"
PLANTED = {  # node -> the fixture whose lines its kernel log holds
    "node1": "xid79-off-bus-nvsentinel-155.txt",  # fatal: a GPU fallen off the bus, XID 79
    "node2": "xid-dmesg-ctime-gpud-pr46.txt",  # XID 13 (info) and 31 (warn): not fatal
    "node3": "amdgpu-ras-mi50-rocm-1886.txt",  # fatal: an amdgpu uncorrectable error
}


def _plant(lab: Lab, node: str, text: str) -> None:
    d, net = f"{PLANT}/{node}", f"{PLANT}/{node}/sysfs/class/net/fab0"
    script = (f"rm -rf {d} && mkdir -p {net} {d}/tools && echo up > {net}/operstate && "
              f"echo 2 > {net}/carrier_changes && cat > {d}/kern.log")  # fmt: skip
    argv = lab.ssh_argv(lab.node(node), "sh", "-c", shlex.quote(script))
    proc = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def _inventory(lab: Lab, tmp_path: Path) -> Path:
    """The lab's inventory with each node's sources planted and a failure budget of one node."""
    lines = []
    for line in lab.inventory.read_text().splitlines():
        node = line.split(" ", 1)[0]
        if node in PLANTED:
            d = f"{PLANT}/{node}"
            line += f" orch_health_kernel_log={d}/kern.log orch_health_sysfs={d}/sysfs"
            line += f" orch_health_tools_dir={d}/tools"
        lines.append(line)
        if line.strip() == "[all:vars]":
            lines.append("orch_max_unavailable=1")
    inv = tmp_path / "lab-health.ini"
    inv.write_text("\n".join(lines) + "\n")
    return inv


def _orch(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "orchestrator", *argv], check=False, timeout=timeout)


def test_health_finds_each_planted_finding_drains_within_the_cap_and_readmit_returns_the_node(
    lab: Lab, tmp_path: Path
) -> None:
    for node, fixture in PLANTED.items():
        body = "".join(ln + "\n" for ln in (FIXTURES / fixture).read_text().splitlines()
                       if not ln.startswith("# source:"))  # fmt: skip
        _plant(lab, node, body)
    inv = _inventory(lab, tmp_path)
    try:
        got = _orch("health", "-i", str(inv), "--drain", "--json", timeout=120)
        assert got.returncode == 1, got.stdout + got.stderr  # a fatal finding
        report = HealthReport.model_validate(json.loads(got.stdout[got.stdout.index("{"):]))
        by = {n.node: n for n in report.nodes}
        assert {n: by[n].errors for n in PLANTED} == {n: [] for n in PLANTED}
        one = {(f.kind, f.severity) for f in by["node1"].findings}
        assert one == {("gpu_off_bus", "fatal"), ("xid", "fatal")}
        assert {f.severity for f in by["node2"].findings} == {"info", "warn"}
        assert [(f.kind, f.severity, f.device) for f in by["node3"].findings] == [
            ("amdgpu_ras", "fatal", "0000:e3:00.0")
        ]
        assert report.fatal_nodes == ["node1", "node3"]
        # the fatal node first in inventory order is drained, naming why; the cap keeps node3 up
        assert by["node1"].drained and not by["node3"].drained and not by["node2"].drained
        assert "not drained: orch_max_unavailable=1 reached" in (by["node3"].action or "")
        state = lab.slurm("scontrol", "show", "node", "-o", "node1").stdout
        assert "DRAIN" in state and "Reason=orch health" in state and "gpu_off_bus" in state, state
        assert "DRAIN" not in lab.slurm("scontrol", "show", "node", "-o", "node3").stdout

        # one pass of the re-admit loop: node1's fault is only in its log, so its re-test passes
        back = _orch("cert", "readmit", "-i", str(inv), "--delay", "0s", "--out", str(tmp_path / "runs"))
        assert back.returncode == 0, back.stdout + back.stderr
        assert "node1" in back.stdout and "returned" in back.stdout, back.stdout
        assert "DRAIN" not in lab.slurm("scontrol", "show", "node", "-o", "node1").stdout
    finally:
        for node in PLANTED:
            lab.slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)
            lab.ssh(lab.node(node), "rm", "-rf", f"{PLANT}/{node}", check=False)
            lab.ssh(lab.node(node), "rmdir", "--ignore-fail-on-non-empty", PLANT, check=False)
