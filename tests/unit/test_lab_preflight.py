"""`orch lab up` refuses clearly when not root or when packages are missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError, LabError
from orchestrator.lab import preflight


def test_refuses_when_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="needs root") as e:
        preflight.check(accounting=True)
    assert e.value.exit_code == 3


def test_names_missing_debian_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 0)
    present = {"ip", "bridge", "nsenter", "unshare", "ssh", "ssh-keygen", "iptables", "podman", "runc"}
    monkeypatch.setattr(
        preflight.shutil, "which", lambda name, path=None: f"/usr/bin/{name}" if name in present else None
    )
    with pytest.raises(LabError) as e:
        preflight.check(accounting=True)
    assert e.value.message == (
        "missing Debian packages: mariadb-client mariadb-server munge openssh-server slurm-wlm slurmdbd"
    )
    assert e.value.hint is not None and "apt-get install -y slurm-wlm slurmdbd mariadb-server" in e.value.hint
    assert preflight.missing_packages(accounting=False) == ["munge", "openssh-server", "slurm-wlm"]


def _tree(tmp_path: Path, parent_mode: int) -> Path:
    tmp_path.chmod(0o755)
    parent = tmp_path / "parent"
    parent.mkdir()
    parent.chmod(parent_mode)
    return parent / "state"


def test_state_dir_under_good_folders_is_usable(tmp_path: Path) -> None:
    state = _tree(tmp_path, 0o755)
    assert preflight.state_dir_problem(state, owner_uid=os.getuid(), top=tmp_path) is None
    state.mkdir(mode=0o700)  # its own mode is set by `up`
    assert preflight.state_dir_problem(state, owner_uid=os.getuid(), top=tmp_path) is None
    state.chmod(0o755)
    assert preflight.state_dir_problem(state / "deeper", owner_uid=os.getuid(), top=tmp_path) is None


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        (0o1777, "writable by group or others (mode 1777); sshd StrictModes"),
        (0o775, "writable by group or others (mode 775)"),
        (0o700, "does not let other users through (mode 700); munged"),
    ],
)
def test_state_dir_below_unusable_folder_is_named(tmp_path: Path, mode: int, why: str) -> None:
    state = _tree(tmp_path, mode)
    problem = preflight.state_dir_problem(state, owner_uid=os.getuid(), top=tmp_path)
    assert problem is not None
    assert problem.startswith(f"{tmp_path / 'parent'} ")
    assert why in problem


def test_state_dir_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    state = _tree(tmp_path, 0o755)
    problem = preflight.state_dir_problem(state, owner_uid=os.getuid() + 1, top=tmp_path)
    assert problem is not None and f"owned by uid {os.getuid()}, not root" in problem


def test_state_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    state = _tree(tmp_path, 0o755)
    state.write_text("")
    problem = preflight.state_dir_problem(state, owner_uid=os.getuid(), top=tmp_path)
    assert problem == f"{state} is not a folder"


def test_check_state_dir_refuses_in_one_line_with_usage_exit(tmp_path: Path) -> None:
    # The real check (owner root, up to /): tmp_path sits below pytest's own folders (mode 700)
    # and, on most machines, /tmp (mode 1777); either way the lab could not use it.
    state = _tree(tmp_path, 0o755)
    with pytest.raises(ConfigError) as e:
        preflight.check_state_dir(state)
    assert e.value.exit_code == 2
    assert e.value.message.startswith(f"state dir {state} cannot hold the lab: ")
    assert "\n" not in e.value.message
