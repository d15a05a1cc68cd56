"""Fault guards, target parsing and the node-side lines, with a recording shell (no network)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.faults import timer
from orchestrator.faults.engine import FaultEngine
from orchestrator.faults.kinds import netfilter, tc
from orchestrator.faults.safety import SafetyError, check_share
from orchestrator.faults.sweep import sweep_node
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.fault import FaultParams, FaultSpec, FaultTarget, PlanFault, parse_duration
from orchestrator.remote.base import CmdResult


class Recorder:
    def __init__(self, rc: int = 0, stdout: str = "", stderr: str = "") -> None:
        self.scripts: list[str] = []
        self.rc, self.stdout, self.stderr = rc, stdout, stderr

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        self.scripts.append(script)
        return CmdResult(argv=["sh"], rc=self.rc, stdout=self.stdout, stderr=self.stderr, elapsed_s=0.001)

    def ssh_iface(self) -> str:
        return "eth9"


def cluster(n: int = 3) -> Cluster:
    nodes = [
        Node(name=f"node{i}", address=f"10.0.0.{i}", mgmt_iface="mgmt0", rdma_ifaces=["fab0"])
        for i in range(1, n + 1)
    ]
    return Cluster(source=Path("x.ini"), nodes=nodes)


@pytest.mark.parametrize(
    "bad",
    [
        "node2:fab0;reboot",
        "node2:$(id)",
        "node2:`x`",
        "node2:a b",
        "-x:fab0",
        "node2:fab0|cat",
        "node2:fab0&",
        "node2:'q'",
        "no;de:fab0",
    ],
)
def test_metacharacters_are_refused_at_parse(bad: str) -> None:
    with pytest.raises((ValidationError, ValueError)):
        FaultTarget.parse(bad, "link-down")


def test_target_forms() -> None:
    assert FaultTarget.parse("node2:fab0", "link-down").iface == "fab0"
    assert FaultTarget.parse("node2:3", "kill-worker").rank == 3
    assert FaultTarget.parse("node2:probe-1", "restart-container").container == "probe-1"
    assert FaultTarget.parse("node2", "node-loss").node == "node2"
    with pytest.raises(ValidationError):
        FaultSpec(kind="link-down", target=FaultTarget(node="node2"))


@pytest.mark.parametrize(("iface", "match"), [("mgmt0", "management"), ("eth9", "SSH")])
def test_mgmt_and_ssh_ifaces_refused_even_with_force(iface: str, match: str) -> None:
    rec = Recorder()
    engine = FaultEngine(cluster(), {"node2": rec})
    spec = FaultSpec(kind="link-down", target=FaultTarget(node="node2", iface=iface), force=True)
    with pytest.raises(SafetyError, match=match):
        engine.prepare(spec)
    assert rec.scripts == []


def test_non_rdma_iface_needs_force() -> None:
    engine = FaultEngine(cluster(), {"node2": Recorder()})
    with pytest.raises(SafetyError, match="rdma_ifaces"):
        engine.prepare(FaultSpec(kind="throttle", target=FaultTarget(node="node2", iface="eth1")))
    engine.prepare(FaultSpec(kind="throttle", target=FaultTarget(node="node2", iface="eth1"), force=True))


def test_share_of_nodes_needs_force() -> None:
    check_share(["a"], 3, force=False)
    with pytest.raises(SafetyError):
        check_share(["a", "b"], 3, force=False)
    check_share(["a", "b"], 3, force=True)


def test_inject_arms_timer_and_injects_in_one_round_trip(tmp_path: Path) -> None:
    rec = Recorder(stdout="orch-timer 4242\n")
    engine = FaultEngine(cluster(), {"node2": rec}, record_dir=tmp_path)
    with engine.applied(
        FaultSpec(kind="link-down", target=FaultTarget(node="node2", iface="fab0"), duration_s=0)
    ) as a:
        assert a.record.outcome == "active" and a.record.timer_pid == 4242
    inject, revert = rec.scripts
    assert "setsid sh -c" in inject and "ip link set dev fab0 down" in inject
    assert inject.index("setsid") < inject.index("dev fab0 down")  # timer before the fault
    assert "ip link set dev fab0 up" in revert and "kill -TERM" in revert
    assert " -- -" not in revert  # dash rejects `kill -- -PGID`
    saved = list(tmp_path.glob("link-down-*.json"))
    assert len(saved) == 1 and '"outcome": "reverted"' in saved[0].read_text()


def test_netem_missing_is_an_outcome_not_an_error() -> None:
    rec = Recorder(rc=2, stderr="Error: Specified qdisc kind is unknown.\n")
    engine = FaultEngine(cluster(), {"node2": rec})
    active = engine.prepare(FaultSpec(kind="delay", target=FaultTarget(node="node2", iface="fab0")))
    engine.inject(active)
    assert active.record.outcome == "unsupported"
    assert active.record.message == tc.NETEM_MISSING
    assert active.reverted  # timer cancelled at once


def test_timer_line_is_valid_shell_and_quotes_values() -> None:
    line = timer.arm_and_inject("node2", "link-down-ab", "ip link set dev 'x' up", 5.0, "true")
    shlex.split(line)  # balanced quoting
    assert "/run/orch-fault/node2/link-down-ab.revert" in line


def test_iptables_rules_are_tagged_and_chain_removed_when_empty() -> None:
    a = netfilter.roce_drop("fab0", "roce-drop-1")
    assert "--dport 4791" in a.inject and "orch:roce-drop-1" in a.inject and "ORCH-FAULT" in a.inject
    assert "-X ORCH-FAULT" in a.revert


def test_tc_throttle_and_delay_lines() -> None:
    add = "tc qdisc add dev fab0 root handle 4f52: "
    revert = "tc qdisc del dev fab0 root handle 4f52:"
    t = tc.throttle("fab0", FaultParams(rate="10mbit", burst="32kb", latency_ms=50))
    assert t.inject == add + "tbf rate 10mbit burst 32kb latency 50ms" and revert in t.revert
    assert tc.delay("fab0", FaultParams(delay_ms=12.5)).inject == add + "netem delay 12.5ms"
    d = tc.delay("fab0", FaultParams(delay_ms=100, jitter_ms=2.25))
    assert d.inject == add + "netem delay 100ms 2.25ms" and revert in d.revert


def test_sweep_reports_what_it_found() -> None:
    rec = Recorder(stdout="found record link-down-1\nfound iptables chain ORCH-FAULT\n")
    assert sweep_node(rec, "node2").found == ["record link-down-1", "iptables chain ORCH-FAULT"]


def test_plan_fault_model() -> None:
    pf = PlanFault(
        kind="link-down",
        step=1,
        at_s=10,
        target="node2:fab0",
        duration="3s",
        thresholds={"max_recover_s": 30},
    )  # type: ignore[arg-type]
    spec = pf.spec()
    assert spec.duration_s == 3.0 and spec.target.iface == "fab0"
    assert parse_duration("250ms") == 0.25
    with pytest.raises(ValidationError):
        FaultParams(match_env="A=$(x)")


@pytest.mark.parametrize(
    ("state", "resumed"),
    [("down*", True), ("down", True), ("idle", False), ("drained", False), ("down*+drain", False)],
)
def test_node_loss_revert_resumes_only_a_down_node(tmp_path: Path, state: str, resumed: bool) -> None:
    import os
    import subprocess

    from orchestrator.faults.kinds import nodeloss

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for tool, body in (("sinfo", f"echo '{state}'"), ("scontrol", f'echo "$SLURM_CONF $*" >> {log}')):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    act = nodeloss.stop_slurmd([999999999], "node3", Path("/lab/slurm.conf"))
    assert act.inject == "kill -s STOP 999999999" and act.timer
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["sh", "-c", act.revert], env=env, check=True, timeout=10)  # quiet: never fails
    calls = log.read_text() if log.exists() else ""
    assert calls == ("/lab/slurm.conf update nodename=node3 state=resume\n" if resumed else "")


def test_plan_max_share_reaches_the_engine_and_is_checked_per_fault(tmp_path: Path) -> None:
    """max_share bounds what one fault hits (as the engine has always checked it), not the union of
    every node some fault of the plan touches: two one-node faults on a 3-node cluster pass."""
    import yaml

    from orchestrator.inventory import load_inventory
    from orchestrator.plan import expand_steps, load_plan
    from orchestrator.runs.step_faults import check_plan_faults

    inv = tmp_path / "inv.yml"
    hosts = {f"node{i}": {"ansible_host": f"198.18.0.{10 + i}", "rdma_ifaces": ["fab0"]} for i in (1, 2, 3)}
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    cluster = load_inventory(inv)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(
        "name: f\nladder: {nodes: [3], ranks_per_node: [1]}\ncollectives: [all_reduce]\n"
        "sizes: {min: 1M, max: 1M}\nmax_share: 0.3\nfaults:\n"
        "  - {kind: throttle, step: 0, at_s: 1, target: 'node1:fab0', duration: 1s}\n"
        "  - {kind: throttle, step: 0, at_s: 1, target: 'node2:fab0', duration: 1s}\n"
    )
    plan = load_plan(plan_file)
    assert check_plan_faults(plan, cluster, expand_steps(plan, cluster), force=False) == []
    with pytest.raises(SafetyError, match="max_share, 30%"):
        check_share(["node1"], len(cluster.nodes), force=False, max_share=plan.max_share)


def _scripts_of(kind: str, target: str) -> list[str]:
    """The lines the engine sends to the node to inject and revert ``kind`` (recorded, not run)."""
    rec = Recorder(stdout="orch-timer 4242\n")
    engine = FaultEngine(cluster(), {"node2": rec})
    spec = FaultSpec(kind=kind, target=FaultTarget.parse(target, kind), duration_s=0)  # type: ignore[arg-type]
    active = engine.prepare(spec)
    engine.inject(active)
    engine.revert(active)
    assert len(rec.scripts) >= 2, (kind, rec.scripts)
    return rec.scripts


NODE_SIDE = [
    ("link-down", "node2:fab0"),
    ("link-flap", "node2:fab0"),
    ("roce-drop", "node2:fab0"),
    ("packet-loss", "node2:fab0"),
    ("throttle", "node2:fab0"),
    ("delay", "node2:fab0"),
]


@pytest.mark.parametrize(("kind", "target"), NODE_SIDE, ids=[k for k, _ in NODE_SIDE])
def test_rendered_inject_and_revert_lines_are_valid_shell(kind: str, target: str) -> None:
    """`bash -n` and the nodes' `sh -n` (dash on Debian) accept every line, revert included."""
    for script in _scripts_of(kind, target):
        for shell in ("bash", "sh"):
            proc = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True, timeout=10)
            assert proc.returncode == 0, (shell, script, proc.stderr)


HOSTILE_REVERT = """ip link set dev 'fab0' up; echo "it's $HOME" `id` $(id) \\; # tail"""


def test_the_revert_file_holds_the_revert_line_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The arm line's quoting: what the node-side timer will run is exactly the revert line, with
    its quotes, `$`, backquotes and backslashes, none of them expanded while arming."""
    monkeypatch.setattr(timer, "record_dir", lambda node: str(tmp_path / "rec" / node))
    (tmp_path / "bin").mkdir()
    for stub in ("setsid",):  # the timer itself is not started
        (tmp_path / "bin" / stub).write_text("#!/bin/sh\nexit 0\n")
        (tmp_path / "bin" / stub).chmod(0o755)
    line = timer.arm_and_inject("node2", "link-down-ab", HOSTILE_REVERT, 5.0, "true")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": "/nonexistent-home"}
    for shell in ("bash", "sh"):
        proc = subprocess.run([shell, "-c", line], env=env, capture_output=True, text=True, timeout=10)
        assert proc.returncode == 0, proc.stderr
        rev, _ = timer.paths("node2", "link-down-ab")
        assert Path(rev).read_bytes() == (HOSTILE_REVERT + "\n").encode()
    # and the cancel line carries the revert verbatim, as one more shell statement
    cancel = timer.cancel_and_revert(
        "node2", "link-down-ab", "printf '%s\\n' \"$X\" > " + shlex.quote(str(tmp_path / "out"))
    )
    proc = subprocess.run(
        ["sh", "-c", cancel], env={**env, "X": "a b'c"}, capture_output=True, text=True, timeout=10
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out").read_text() == "a b'c\n"
    assert not Path(rev).exists()  # the record is removed
