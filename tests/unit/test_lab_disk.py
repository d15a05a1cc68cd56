"""The lab's disk (orchestrator/lab/disk.py): each node's /opt measured, purged, and the free disk
checked against the stack's per-node figure before `orch lab up` and `orch provision` on the lab.
Disk usage and free space are faked: nothing here needs root or a big disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import LabError
from orchestrator.lab import disk, lab, preflight
from orchestrator.lab.config import LAB_STACK, LabConfig, make_config, node_opt
from orchestrator.models.stack import Stack
from orchestrator.stacks import load_stack

GB = disk.GB


def _stack(gb: float | None) -> Stack:
    data = load_stack(LAB_STACK).model_dump()
    data["node_disk_gb"] = gb
    return Stack.model_validate(data)


def test_the_labs_stack_carries_its_per_node_figure_as_data() -> None:
    """~2.1 GB a node for cpu-gloo with its image, from its manifest (not a number in the code)."""
    assert load_stack(LAB_STACK).node_disk_gb == 2.1


def test_tree_bytes_counts_blocks_each_inode_once_and_no_symlink_target(tmp_path: Path) -> None:
    root = tmp_path / "opt"
    (root / "orch").mkdir(parents=True)
    big = root / "orch" / "lib.so"
    big.write_bytes(os.urandom(300_000))
    os.link(big, root / "orch" / "hard")  # a hard link is the same blocks
    outside = tmp_path / "outside"
    outside.write_bytes(os.urandom(500_000))
    (root / "link").symlink_to(outside)
    got = disk.tree_bytes(root)
    blocks = big.stat().st_blocks * 512
    assert blocks <= got < blocks + 64 * 1024  # the file once, plus folders and the link itself
    assert got < 500_000  # the symlink's target is not counted
    assert disk.tree_bytes(tmp_path / "missing") == 0


def test_need_is_the_per_node_figure_less_what_each_node_holds(tmp_path: Path) -> None:
    held = {"node1": 0, "node2": 1 * GB, "node3": 3 * GB}
    sizes = {node_opt(tmp_path, n): b for n, b in held.items()}
    need = disk.disk_need(
        _stack(2.1), tmp_path, list(held), size_of=sizes.__getitem__, free_of=lambda _: 10 * GB
    )
    assert need is not None
    assert need.held == held
    assert need.needed_bytes == round(2.1 * GB) + round(1.1 * GB)  # node3 holds more than a stack
    assert not need.short


def test_refusal_names_what_is_needed_and_what_is_free(tmp_path: Path) -> None:
    nodes = [f"node{i}" for i in range(1, 9)]
    with pytest.raises(LabError) as e:
        disk.check_disk(
            disk.disk_need(_stack(2.1), tmp_path, nodes, size_of=lambda _: 0, free_of=lambda _: 5 * GB)
        )
    msg = str(e.value)
    assert "needs 16.8 GB" in msg and "5.0 GB free" in msg and "2.1 GB a node" in msg
    assert "on 8 node(s)" in msg and str(tmp_path) in msg
    assert "--purge" in (e.value.hint or "")
    # just enough: no refusal
    assert disk.check_disk(
        disk.disk_need(_stack(2.1), tmp_path, nodes, size_of=lambda _: 0, free_of=lambda _: round(16.8 * GB))
    )


def test_a_stack_without_a_figure_is_not_checked(tmp_path: Path) -> None:
    assert disk.disk_need(_stack(None), tmp_path, ["node1"], size_of=lambda _: 0, free_of=lambda _: 0) is None
    assert disk.check_disk(None) is None


def test_purge_removes_every_nodes_opt_and_nothing_else(tmp_path: Path) -> None:
    for n in ("node1", "node2"):
        (node_opt(tmp_path, n) / "orch" / "venv").mkdir(parents=True)
        (node_opt(tmp_path, n) / "orch" / "venv" / "python").write_bytes(b"x" * 9000)
        (node_opt(tmp_path, n).parent / "home").mkdir()
    (tmp_path / "nodes" / "node3").mkdir()  # a node with no /opt
    gone = disk.purge_opt(tmp_path)
    assert sorted(gone) == ["node1", "node2"] and all(b >= 9000 for b in gone.values())
    assert not node_opt(tmp_path, "node1").exists() and not node_opt(tmp_path, "node2").exists()
    assert (tmp_path / "nodes" / "node1" / "home").is_dir()
    assert disk.purge_opt(tmp_path) == {}  # safe to repeat


def _cfg(tmp_path: Path, nodes: int = 3) -> LabConfig:
    return make_config(
        nodes=nodes,
        state_dir=tmp_path / "state",
        inventory_out=tmp_path / "lab.ini",
        accounting=False,
        hostname="box",
        cpus=2,
    )


def test_up_refuses_before_starting_anything_when_the_disk_is_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preflight, "check", lambda accounting: None)
    monkeypatch.setattr(preflight, "check_state_dir", lambda state_dir: None)
    monkeypatch.setattr(lab, "_running_elsewhere", lambda cfg: None)
    monkeypatch.setattr(disk, "free_bytes", lambda path: 6 * GB)

    def started(*a: object, **k: object) -> None:
        raise AssertionError("the lab was started")

    monkeypatch.setattr(lab, "_start", started)
    monkeypatch.setattr(lab, "_has_remains", lambda cfg: False)
    with pytest.raises(LabError, match=r"stack cpu-gloo on 3 node\(s\) needs 6\.3 GB"):
        lab.up(_cfg(tmp_path))


def _nothing_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """lab.down with no lab process, namespace, link or runtime file to remove."""
    from orchestrator.lab import daemons, files, netns

    monkeypatch.setattr(daemons, "running_state_dirs", lambda: [])
    monkeypatch.setattr(daemons, "stray_processes", lambda state_dir: [])
    monkeypatch.setattr(netns, "lab_namespaces", lambda: [])
    monkeypatch.setattr(netns, "lab_links", lambda: [])
    monkeypatch.setattr(files, "remove_runtime", lambda cfg: None)


def test_down_purge_removes_the_nodes_opt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _nothing_running(monkeypatch)
    cfg = _cfg(tmp_path)
    opt = node_opt(tmp_path / "state", "node2") / "orch"
    opt.mkdir(parents=True)
    (opt / "f").write_bytes(b"y" * 5000)
    kept = lab.down(cfg)
    assert kept.purged == {} and opt.is_dir()
    result = lab.down(cfg, purge=True)
    assert list(result.purged) == ["node2"] and not opt.exists()


def _node_tree(state_dir: Path, name: str, files: int = 50) -> Path:
    folder = state_dir / "nodes" / name
    venv = folder / "opt" / "orch" / "venv"
    venv.mkdir(parents=True)
    for i in range(files):
        (venv / f"f{i}").write_bytes(b"z" * 100)
    return folder


def test_discard_takes_the_folders_away_at_once_and_lab_down_finishes_their_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nothing_running(monkeypatch)
    cfg = _cfg(tmp_path)
    state = tmp_path / "state"
    kept, gone = _node_tree(state, "node1"), [_node_tree(state, n) for n in ("node4", "node5")]
    disk.discard(state, [*gone, state / "nodes" / "node9"])  # one that does not exist: nothing to do
    assert not any(g.exists() for g in gone) and disk.node_names(state) == ["node1"]
    # a removal cut short (its process killed) leaves a folder under discarded/: down removes it
    left = disk.discarded_root(state) / "node6.cut"
    left.mkdir(parents=True, exist_ok=True)
    (left / "f").write_bytes(b"x")
    lab.down(cfg)
    assert not disk.discarded_root(state).exists()
    assert (kept / "opt" / "orch" / "venv" / "f0").is_file()  # nothing else touched
    lab.down(cfg)  # safe to repeat


def test_discard_refuses_a_folder_outside_the_state_dir(tmp_path: Path) -> None:
    state, outside = tmp_path / "state", tmp_path / "elsewhere"
    state.mkdir()
    outside.mkdir()
    for bad in (outside, state / ".." / "elsewhere", state):
        with pytest.raises(LabError, match="not under the lab's state dir"):
            disk.discard(state, [bad])
    assert outside.is_dir() and state.is_dir()


def test_provision_on_the_lab_refuses_when_the_disk_is_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.provision import service

    state = tmp_path / "state"
    inv = tmp_path / "lab.ini"
    inv.write_text(
        "[lab]\nnode1 ansible_host=198.18.0.11\nnode2 ansible_host=198.18.0.12\n\n"
        f"[all:vars]\norch_lab_state={state}\n"
    )
    monkeypatch.setattr(disk, "free_bytes", lambda path: 3 * GB)

    def ran(*a: object, **k: object) -> None:
        raise AssertionError("ansible ran")

    monkeypatch.setattr(service, "execute", ran)
    monkeypatch.setattr(service, "prepare_wheelhouse", ran)
    with pytest.raises(LabError, match=r"needs 4\.2 GB"):
        service.provision(service.ProvisionRequest(inventory=inv, stack=LAB_STACK, out_dir=tmp_path / "runs"))
    # --limit node1: one node's stack fits in 3 GB, so provisioning goes on (to ansible, faked here)
    with pytest.raises(AssertionError, match="ran"):
        service.provision(
            service.ProvisionRequest(inventory=inv, stack=LAB_STACK, limit="node1", out_dir=tmp_path / "runs")
        )


def test_status_of_a_state_dir_with_no_lab_still_shows_what_its_nodes_opt_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The labs that filled the disk were old state dirs with no lab recorded any more."""
    from orchestrator.lab import daemons, netns

    monkeypatch.setattr(daemons, "running_state_dirs", lambda: [])
    monkeypatch.setattr(netns, "lab_namespaces", lambda: [])
    monkeypatch.setattr(netns, "lab_links", lambda: [])
    cfg = _cfg(tmp_path)
    opt = node_opt(cfg.state_dir, "node3") / "orch"
    opt.mkdir(parents=True)
    (opt / "f").write_bytes(b"z" * 20000)
    (cfg.state_dir / "nodes" / "node1").mkdir()
    st = lab.status(cfg)
    assert st.running is False
    assert st.opt_left["node1"] == 0 and st.opt_left["node3"] >= 20000
