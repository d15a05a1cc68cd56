"""Faults against the running 3-node lab: real processes, iptables, tc, ip, podman, torchrun.

Uses the session's lab (tests/integration/conftest.py: brought up when none is healthy, skipped only
without root). Every fault is
reverted in finally by the engine; each test compares the nodes' iptables/tc/link listings before
and after.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from orchestrator.faults.engine import FaultEngine
from orchestrator.faults.kinds.tc import NETEM_MISSING
from orchestrator.faults.safety import SafetyError
from orchestrator.inventory import load_inventory
from orchestrator.models.cluster import Cluster
from orchestrator.models.container import runtime_argv
from orchestrator.models.fault import FaultSpec, FaultTarget
from orchestrator.remote.base import NodeShell
from orchestrator.remote.shells import node_shells
from orchestrator.runs.recovery import run_recovery_test
from orchestrator.runs.recovery_request import RecoveryTestRequest

if TYPE_CHECKING:
    from conftest import Lab

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventories" / "lab.ini"


@pytest.fixture(scope="module")
def cluster(lab: Lab) -> Cluster:
    """The session's lab (brought up when none is healthy; skipped only without root)."""
    assert lab.inventory.resolve() == INVENTORY.resolve(), f"the lab's inventory is {lab.inventory}"
    return load_inventory(INVENTORY)


@pytest.fixture(scope="module")
def shells(cluster: Cluster) -> Iterator[dict[str, NodeShell]]:
    with node_shells(cluster) as s:
        yield s


def listing(shell: NodeShell) -> str:
    """iptables rules (no counters), qdiscs and link states of a node."""
    script = "iptables -w 5 -S; echo ---; tc qdisc show; echo ---; ip -br link show | awk '{print $1, $2}'"
    return shell.run_script(script, timeout=20).stdout


def listings(shells: dict[str, NodeShell]) -> dict[str, str]:
    return {n: listing(s) for n, s in shells.items()}


@pytest.fixture
def unchanged(shells: dict[str, NodeShell]) -> Iterator[None]:
    before = listings(shells)
    yield
    assert listings(shells) == before


def test_mgmt_ssh_and_metachar_targets_are_refused(
    cluster: Cluster, shells: dict[str, NodeShell], unchanged: None, tmp_path: Path
) -> None:
    engine = FaultEngine(cluster, shells, record_dir=tmp_path)
    with pytest.raises(SafetyError, match="management interface"):
        engine.prepare(FaultSpec(kind="link-down", target=FaultTarget(node="node2", iface="mgmt0")))
    node2 = cluster.node("node2").model_copy(update={"mgmt_iface": None})
    other = cluster.model_copy(update={"nodes": [node2 if n.name == "node2" else n for n in cluster.nodes]})
    with pytest.raises(SafetyError, match="SSH"):
        FaultEngine(other, shells).prepare(
            FaultSpec(kind="link-down", target=FaultTarget(node="node2", iface="mgmt0"), force=True)
        )
    for bad in ("node2:fab0;reboot", "node2:$(id)", "node2;x:fab0", "node2:fab0 lo"):
        with pytest.raises((ValidationError, ValueError)):
            FaultSpec(kind="link-down", target=FaultTarget.parse(bad, "link-down"))
    assert list(tmp_path.iterdir()) == []


def test_delay_reports_missing_netem(
    cluster: Cluster, shells: dict[str, NodeShell], unchanged: None, tmp_path: Path
) -> None:
    engine = FaultEngine(cluster, shells, record_dir=tmp_path)
    with engine.applied(FaultSpec(kind="delay", target=FaultTarget(node="node2", iface="fab0"))) as a:
        assert a.record.outcome == "unsupported"
        assert a.record.message == NETEM_MISSING
    assert engine.sweep() == [r.model_copy(update={"found": []}) for r in engine.sweep()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "target", "duration"),
    [
        ("kill-worker", "node2:3", 0.0),
        ("link-down", "node2:fab0", 3.0),
        ("link-flap", "node2:fab0", 3.0),
        ("roce-drop", "node2:fab0", 3.0),
        ("packet-loss", "node2:fab0", 3.0),
        ("throttle", "node2:fab0", 3.0),
    ],
)
def test_fault_against_live_probe(
    cluster: Cluster,
    shells: dict[str, NodeShell],
    unchanged: None,
    tmp_path: Path,
    kind: str,
    target: str,
    duration: float,
) -> None:
    req = RecoveryTestRequest.model_validate({"kind": kind, "target": target, "duration_s": duration})
    summary = run_recovery_test(cluster, shells, req, tmp_path / f"run-{kind}")
    (r,) = summary.results
    assert r.verdict in ("recovered", "no-interruption"), r
    if r.verdict == "recovered":
        assert r.recover_s is not None and r.restore_s is not None
        # detect is an error line or a restart; a fault that only stalled the probe has none
        assert r.detect_s is not None or (r.stall_s is not None and r.stall_s > 0), r
    else:
        assert r.recover_s is None and r.busbw_min_ratio is not None  # nothing recovered; the dip
    if kind == "kill-worker":
        assert r.verdict == "recovered" and r.restarts >= 1
    assert (tmp_path / f"run-{kind}" / "faults" / f"recovery-{kind}.json").exists()
    assert (tmp_path / f"run-{kind}" / "recovery" / f"{r.fault_id}.json").exists()


@pytest.mark.slow
def test_restart_container_from_the_cli_in_the_stack_image(
    cluster: Cluster, shells: dict[str, NodeShell], unchanged: None, tmp_path: Path
) -> None:
    """The documented command line, from a folder outside the checkout: the probe runs in cpu-gloo's
    image (built on each node by `orch provision`, nothing of the checkout mounted), and each of
    the 3 restarts is recovered from."""
    (tmp_path / "inventories").mkdir()
    (tmp_path / "inventories" / "lab.ini").symlink_to(INVENTORY)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    line = "orch recovery-test -i inventories/lab.ini --fault restart-container --repeat 3"
    argv = [sys.executable, "-m", "orchestrator", *shlex.split(line)[1:]]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    (run,) = (tmp_path / "runs").glob("*-recovery-restart-container-*")
    records = [json.loads(p.read_text()) for p in sorted((run / "recovery").glob("*.json"))]
    assert [r["verdict"] for r in records] == ["recovered"] * 3, proc.stdout
    request = json.loads((run / "recovery-test.json").read_text())
    assert request["container"]["image"] == "localhost/orch-stack/cpu-gloo:provisioned"
    assert request["launcher"] == "ssh"
    # every container of the run was removed (rm -f) when it ended
    ps = shlex.join([*runtime_argv("podman", "/opt/orch/containers"), "ps", "-a", "--format", "{{.Names}}"])
    for name, shell in shells.items():
        res = shell.run_script(ps, timeout=60)
        assert res.ok and run.name not in res.stdout, (name, res.stdout)


KILLED_ORCH = """
import sys, time
from pathlib import Path
from orchestrator.faults.engine import FaultEngine
from orchestrator.remote.shells import node_shells
from orchestrator.inventory import load_inventory
from orchestrator.models.fault import FaultSpec, FaultTarget
c = load_inventory(Path(sys.argv[1]))
with node_shells(c) as shells:
    e = FaultEngine(c, shells)
    a = e.prepare(FaultSpec(kind=sys.argv[2], target=FaultTarget(node="node2", iface="fab0"),
                            duration_s=3.0, margin_s=1.0))
    e.inject(a)
    print("ACTIVE", a.record.outcome, flush=True)
    time.sleep(3600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["link-down", "roce-drop"])
def test_node_timer_reverts_after_orch_is_sigkilled(
    cluster: Cluster, shells: dict[str, NodeShell], kind: str
) -> None:
    before = listings(shells)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_ORCH, str(INVENTORY), kind], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["ACTIVE", "active"]
        during = listing(shells["node2"])
        assert during != before["node2"]
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        proc.kill()
        proc.wait()
    # duration 3 s + margin 1 s; poll until restored, bounded by duration + margin + 3 s.
    while listing(shells["node2"]) != before["node2"] and time.monotonic() < killed_at + 7.0:
        time.sleep(0.2)
    assert listings(shells) == before
    assert all(r.found == [] for r in FaultEngine(cluster, shells).sweep())


@pytest.mark.slow
def test_pause_of_known_length_is_measured_within_100ms(
    cluster: Cluster, shells: dict[str, NodeShell], unchanged: None, tmp_path: Path
) -> None:
    # 3 pauses of 5 s, each checked (5 of them took 51 s of CI; each one is its own measurement)
    req = RecoveryTestRequest(kind="pause-worker", target="node2:3", duration_s=5.0, repeat=3, window_s=30)
    summary = run_recovery_test(cluster, shells, req, tmp_path / "run")
    assert len(summary.results) == 3
    for r in summary.results:
        assert r.recover_s is not None and r.step_median_s is not None and r.held_s is not None, r
        # the measured hold (revert - inject instants), not the nominal 5.0 s, plus one step
        expected = r.held_s + r.step_median_s
        assert abs(r.recover_s - expected) <= 0.100, (r.recover_s, expected, r.held_s)
        assert r.detect_s is None and r.stall_s is not None  # nothing detects a pause; it stalls
