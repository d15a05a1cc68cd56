"""Which folders each lab node must not see, and the mount lines that hide them (lab/masks.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.lab.config import LabConfig
from orchestrator.lab.masks import NODE_SCRATCH, MaskPlan, mount_lines, plan_masks
from orchestrator.lab.render import inventory

STATE = Path("/var/lib/orch-lab")


def test_checkout_venv_and_cwd_are_hidden_and_home_is_the_nodes_own() -> None:
    plan = plan_masks(
        {"checkout": Path("/work/orch"), "venv": Path("/work/venvs/orch"), "cwd": Path("/work/orch")},
        Path("/home/alice"),
        [],
        STATE,
    )
    assert plan.hidden == [Path("/work/orch"), Path("/work/venvs/orch")]
    assert plan.home == Path("/home/alice")
    assert plan.notes == []


@pytest.mark.parametrize("path", ["/", "/usr", "/var", "/tmp", "/var/tmp", "/usr/local"])
def test_a_system_folder_or_a_parent_of_one_is_skipped_with_a_note(path: str) -> None:
    # orch installed system-wide has sys.prefix /usr; `lab up` may be run from / or /tmp.
    plan = plan_masks({"venv": Path(path)}, None, [], STATE)
    assert plan.hidden == []
    assert plan.notes and path in plan.notes[0] and "system folder" in plan.notes[0]


def test_a_folder_inside_opt_is_skipped_nodes_have_their_own() -> None:
    plan = plan_masks({"venv": Path("/opt/orch/venv")}, None, [], STATE)
    assert plan.hidden == [] and "their own /opt" in plan.notes[0]


@pytest.mark.parametrize("holder", ["/work", "/work/lab"])
def test_a_mask_that_holds_the_state_dir_is_refused(holder: str) -> None:
    with pytest.raises(ConfigError, match="holds the lab's state dir") as e:
        plan_masks({"cwd": Path(holder)}, None, [], Path("/work/lab"))
    assert e.value.exit_code == 2


def test_home_that_holds_the_state_dir_is_refused_too() -> None:
    with pytest.raises(ConfigError, match="home /root holds"):
        plan_masks({}, Path("/root"), [], Path("/root/lab-state"))


def test_a_folder_inside_the_state_dir_is_left_visible() -> None:
    plan = plan_masks({"cwd": STATE / "nodes"}, None, [], STATE)
    assert plan.hidden == [] and "inside the lab's state dir" in plan.notes[0]


def test_masks_inside_other_masks_are_folded() -> None:
    plan = plan_masks({"checkout": Path("/root/src/orch"), "venv": Path("/root/src/orch/.venv")},
                      Path("/root"), [], STATE)  # fmt: skip
    assert plan.hidden == [] and plan.home == Path("/root")
    assert len(plan.notes) == 2 and all("inside masked /root" in n for n in plan.notes)


def test_a_relative_shared_path_is_refused() -> None:
    with pytest.raises(ConfigError, match="absolute"):
        plan_masks({}, None, [Path("runs")], STATE)


def test_mount_lines_bind_the_share_back_over_the_mask_then_make_the_masks_read_only() -> None:
    plan = MaskPlan(
        hidden=[Path("/work/orch")], home=Path("/root"), shared=[Path("/work/orch/runs"), Path("/srv/x")]
    )
    assert plan.shared_under_masks() == [Path("/work/orch/runs")]
    lines = mount_lines(plan, Path("/s/n1/home"), Path("/s/n1/scratch"), Path("/s/run/share/n1-sshd"))
    assert lines == [
        f"mount --bind /s/n1/scratch {NODE_SCRATCH}",
        "mkdir -p /s/run/share/n1-sshd/0",
        "mount --rbind /work/orch/runs /s/run/share/n1-sshd/0",
        "mount --bind /s/n1/home /root",
        "mount -t tmpfs -o mode=0755,size=1m orch-hidden /work/orch",
        "mkdir -p /work/orch/runs",
        "mount --rbind /s/run/share/n1-sshd/0 /work/orch/runs",
        "mount -o remount,ro /work/orch",
    ]


def test_mount_lines_quote_paths() -> None:
    odd = Path("/work/my orch;x")
    lines = mount_lines(MaskPlan(hidden=[odd]), Path("/h"), Path("/s"), Path("/st"))
    assert f"mount -t tmpfs -o mode=0755,size=1m orch-hidden {shlex.quote(str(odd))}" in lines


def test_the_lab_inventory_names_the_node_dir_and_the_shares() -> None:
    cfg = LabConfig(masks=MaskPlan(shared=[Path("/srv/share")]))
    text = inventory(cfg)
    assert f"orch_node_dir={NODE_SCRATCH}" in text
    assert "orch_shared_dirs=/srv/share" in text
    assert "orch_shared_dirs" not in inventory(LabConfig())
