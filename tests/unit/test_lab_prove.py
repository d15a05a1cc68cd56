"""`orch lab up` proves each node before it says up, and never mistakes a running lab for leftovers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import LabError, RemoteError
from orchestrator.lab import daemons, lab, netns, prove
from orchestrator.lab.config import LabConfig
from orchestrator.models.cluster import Node
from orchestrator.remote.base import CmdResult


def _cfg(tmp_path: Path, nodes: int = 3) -> LabConfig:
    return LabConfig(nodes=nodes, state_dir=tmp_path / "state")


class FakeShell:
    """Stands in for SshShell: node2 refuses logins, node3's munge fails, the rest answer."""

    def __init__(self, node: Node, **_: object) -> None:
        self.name = node.name

    def connect(self) -> None:
        if self.name == "node2":
            raise RemoteError("node2: SSH refused: Authentication failed.")

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        rc = 1 if self.name == "node3" and script.startswith("munge") else 0
        return CmdResult(
            argv=["sh", "-c", script],
            rc=rc,
            stdout="",
            stderr="unmunge: Error: Invalid credential",
            elapsed_s=0.0,
        )

    def close(self) -> None:
        return None


def test_prove_node_names_what_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prove, "SshShell", FakeShell)
    cfg = _cfg(tmp_path)
    node1, node2, node3 = cfg.node_specs
    assert prove.prove_node(cfg, node1) is None
    assert prove.prove_node(cfg, node2) == "SSH login failed: SSH refused: Authentication failed."
    assert prove.prove_node(cfg, node3) == (
        "munge credential round trip failed (exit 1): unmunge: Error: Invalid credential"
    )
    with pytest.raises(LabError, match=r"^lab not usable: node2: SSH login failed") as e:
        prove.prove(cfg, {})
    assert e.value.exit_code == 3


def test_prove_srun_names_the_node_without_a_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(tmp_path)
    seen: list[list[str]] = []

    def fake_run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="node1\nnode3\n", stderr="")

    monkeypatch.setattr(prove.shell, "run", fake_run)
    with pytest.raises(LabError, match="did not run on node2 "):
        prove._prove_srun(cfg, {})
    assert "--nodelist=node1,node2,node3" in seen[0]


def test_status_of_another_state_dir_names_the_running_lab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = tmp_path / "running"
    monkeypatch.setattr(daemons, "running_state_dirs", lambda: [running])
    monkeypatch.setattr(netns, "lab_namespaces", lambda: ["orch-node1"])
    monkeypatch.setattr(netns, "lab_links", lambda: ["orch-mgmt"])
    st = lab.status(_cfg(tmp_path))
    assert st.elsewhere == str(running)
    assert st.leftovers == [] and not st.healthy
    with pytest.raises(LabError, match=f"a lab runs from state dir {running}, not .*would destroy it"):
        lab.down(_cfg(tmp_path))


def test_status_without_a_running_lab_lists_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemons, "running_state_dirs", lambda: [])
    monkeypatch.setattr(netns, "lab_namespaces", lambda: ["orch-node1"])
    monkeypatch.setattr(netns, "lab_links", lambda: ["orch-mgmt"])
    st = lab.status(_cfg(tmp_path))
    assert st.elsewhere is None
    assert st.leftovers == ["orch-node1", "orch-mgmt"]
