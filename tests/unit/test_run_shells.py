"""One set of kept-open shells per run (issue 22, item 4): the stack's fingerprint, the nodes'
folders, faults and telemetry of a scale-test all use the run's set, so one run opens one
connection per node; the set closes when the run ends, after the faults are reverted."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

import orchestrator.remote.shells as shells_mod
from orchestrator.models.cluster import Node
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.remote.base import CmdResult, NodeShell
from orchestrator.remote.local import LocalShell
from orchestrator.runs.scale_test import scale_test

PLAN = """
name: shells
ladder: {nodes: [1], ranks_per_node: [1]}
collectives: [all_reduce]
sizes: {min: 1K, max: 1K}
warmup_iters: 1
iters: 2
step_timeout_s: 120
telemetry_interval_s: 0.2
faults:
  - {kind: kill-worker, step: 0, at_s: 0, target: 'localhost:0', duration: 1s}
"""


class _Conn:
    """A node's connection as the fake connector makes it: every line answers rc 0, no output
    (no GPU tool for telemetry, no process for the fault to find)."""

    def __init__(self, node: str, log: list[str]) -> None:
        self.node, self.log, self.closed = node, log, False

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        assert not self.closed, f"{self.node}: a line sent after the run's shells were closed"
        self.log.append(script)
        return CmdResult(argv=["sh", "-c", script], rc=0, stdout="", stderr="", elapsed_s=0.0)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def connector(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], list[_Conn]]:
    opened: Counter[str] = Counter()
    conns: list[_Conn] = []
    lock = threading.Lock()
    lines: list[str] = []

    def connect(node: Node, connect_timeout: float) -> NodeShell:
        with lock:
            opened[node.name] += 1
            conns.append(_Conn(node.name, lines))
            return conns[-1]

    monkeypatch.setattr(shells_mod, "open_shell", connect)
    return opened, conns


def test_a_run_with_faults_and_telemetry_opens_one_connection_per_node(
    tmp_path: Path, connector: tuple[Counter[str], list[_Conn]]
) -> None:
    opened, conns = connector
    inv = tmp_path / "inv.ini"
    inv.write_text("localhost ansible_connection=local gpu_vendor=none gpus_per_node=1\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    req = ScaleTestRequest(inventory=inv, plan=str(plan), out_dir=tmp_path / "runs", force_faults=True)
    result = scale_test(req)
    journal = (result.run_dir / "journal.jsonl").read_text()
    assert "faults_swept" in journal  # the faults ran their sweep through the run's shells
    assert conns and conns[0].log, "nothing ran through the run's shells"
    assert opened == Counter({"localhost": 1})
    assert all(c.closed for c in conns)  # closed by the lifecycle when the run ended


class _Counted:
    """This machine's shell (the fault must really find and kill the engine), counted as one
    connection when made and marked closed when the run closes it."""

    def __init__(self) -> None:
        self.shell, self.closed = LocalShell(), False

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        assert not self.closed, "a line sent after the run's shells were closed"
        return self.shell.run_script(script, timeout=timeout)

    def close(self) -> None:
        self.closed = True


def test_serving_faults_and_telemetry_use_the_runs_one_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_serving_fault_injection import plan_setup

    opened: Counter[str] = Counter()
    made: list[_Counted] = []

    def connect(node: Node, connect_timeout: float) -> NodeShell:
        opened[node.name] += 1
        made.append(_Counted())
        return made[-1]

    monkeypatch.setattr(shells_mod, "open_shell", connect)
    req, _ = plan_setup(tmp_path, duration=3)
    result = scale_test(req)  # type: ignore[arg-type]
    (step,) = result.serving
    (fault,) = step.faults
    assert fault.outcome == "done", fault  # the kill went through the run's shell
    assert opened == Counter({"localhost": 1})
    assert all(c.closed for c in made)
