"""The lab hides the controller's checkout and home from its nodes; run data is collected.

The lab was brought up from this checkout (`orch lab up` or the conftest), so every node's mount
namespace masks it. A run directory inside the checkout (its runs/) is then invisible to the
nodes: they write into their own /var/tmp/orch, and orch brings the files home after each step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestrator.lab import daemons
from orchestrator.lab.masks import MaskPlan, mount_lines

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator"]


def orch(lab: Lab, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, env=lab.env, timeout=timeout,
                          check=False, cwd=REPO)  # fmt: skip


@pytest.fixture
def in_checkout() -> Iterator[Path]:
    """A fresh folder under the checkout's runs/ (hidden from the nodes), removed afterwards."""
    path = REPO / "runs" / f"nodefiles-test-{os.getpid()}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_nodes_see_neither_the_checkout_nor_home_and_keep_their_own_scratch(lab: Lab) -> None:
    masks = lab.state().config.masks
    assert REPO in masks.hidden, masks
    node1, node2 = lab.node("node1"), lab.node("node2")
    listing = lab.ssh(node1, "ls", "-A", str(REPO), check=False)
    assert listing.returncode != 0 or listing.stdout.strip() == "", listing.stdout
    assert lab.ssh(node1, "test", "-e", str(REPO / "pyproject.toml"), check=False).returncode != 0
    home = lab.ssh(node1, "ls", "-A", os.environ.get("HOME", "/root"), check=False).stdout.split()
    assert not set(home) & {".pyenv", ".cache", ".bashrc"} - {n for n in home if n.startswith(".ansible")}
    # Each node's /var/tmp/orch is its own, as on separate disks.
    mark = f"/var/tmp/orch/seen-{os.getpid()}"
    lab.ssh(node1, "touch", mark)
    try:
        assert lab.ssh(node2, "test", "-e", mark, check=False).returncode != 0
        assert not Path(mark).exists()
    finally:
        lab.ssh(node1, "rm", "-f", mark, check=False)


def test_a_shared_folder_inside_the_hidden_checkout_is_seen(lab: Lab, in_checkout: Path) -> None:
    # The recipe of `orch lab up --shared PATH`, applied in node1's namespaces to `cat` instead
    # of a daemon: the checkout masked, the shared folder inside it bound back.
    (in_checkout / "hello").write_text("from the share\n")
    cfg = lab.config
    node = lab.node("node1")
    plan = MaskPlan(hidden=[REPO], shared=[in_checkout])
    stash = cfg.run_dir / "share" / f"test-{os.getpid()}"
    scratch = cfg.node_scratch(node)
    lines = mount_lines(plan, cfg.node_home(node), scratch, stash)
    script = f"cat {in_checkout / 'hello'} && ls -A {REPO} && ! ls {REPO / 'orchestrator'}"
    argv = daemons.in_node(node.netns, cfg.run_dir / "cg" / f"test-{os.getpid()}", cfg.node_dir(node) / "opt",
                           ["sh", "-c", script], lines)  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["from the share", "runs"]


def test_scale_test_into_the_hidden_checkout_collects_the_rank_logs(lab: Lab, in_checkout: Path) -> None:
    proc = orch(lab, "scale-test", "-i", str(lab.inventory), "--nodes", "1,2", "--gpus-per-node", "1",
                "--collectives", "all_reduce", "--sizes", "1K:64K:x4", "--slurm-mode", "per-step",
                "--out", str(in_checkout))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in in_checkout.iterdir() if p.is_dir() and p.name != "cron"]
    result = json.loads((run_dir / "result.json").read_text())
    assert [s["verdict"] for s in result["steps"]] == ["pass", "pass"]
    for step in result["steps"]:
        folder = run_dir / "steps" / step["step"]["id"]
        ranks = sorted(p.name for p in folder.glob("rank-*.log"))
        assert ranks == [f"rank-{r}.log" for r in range(step["step"]["world_size"])]
        assert list(folder.glob("slurm-*.out")), "the batch step's output is collected too"
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    collected = [e for e in events if e["event"] == "step_collected"]
    assert len(collected) == 2 and all(not e["errors"] and e["files"] >= 2 for e in collected)
    print("\ncollection per step (s): " + ", ".join(f"{e['step']} {e['seconds']:.3f}" for e in collected))
    # Nothing of the run is left in the nodes' own folders.
    for name in ("node1", "node2"):
        left = lab.ssh(lab.node(name), "ls", "-A", f"/var/tmp/orch/{run_dir.name}", check=False)
        assert left.returncode != 0, left.stdout


@pytest.mark.parametrize("launcher", ["ssh", "slurm"])
def test_recovery_test_from_the_hidden_checkout(lab: Lab, in_checkout: Path, launcher: str) -> None:
    proc = orch(lab, "recovery-test", "-i", str(lab.inventory), "--fault", "kill-worker", "--repeat", "1",
                "--duration", "0s", "--launcher", launcher, "--out", str(in_checkout))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in in_checkout.iterdir() if p.is_dir()]
    request = json.loads((run_dir / "recovery-test.json").read_text())
    assert request["python"] == "/opt/orch/venv/bin/python"  # the stack's, not the checkout's venv
    assert list((run_dir / "probe").glob("hb-rank*.jsonl")), "heartbeats were followed"
    (record,) = list((run_dir / "recovery").glob("*.json"))
    assert json.loads(record.read_text())["verdict"] == "recovered"
