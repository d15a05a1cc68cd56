"""`orch lab up` refuses clearly when not root or when packages are missing."""

from __future__ import annotations

import pytest

from orchestrator.errors import LabError
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
