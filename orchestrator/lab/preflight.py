"""Checks before `up`: root, and every binary the lab needs, named by its Debian package."""

from __future__ import annotations

import os
import shutil

from orchestrator.errors import LabError

# binary -> Debian package that ships it
REQUIRED: dict[str, str] = {
    "ip": "iproute2",
    "bridge": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "munged": "munge",
    "slurmctld": "slurm-wlm",
    "slurmd": "slurm-wlm",
    "sinfo": "slurm-wlm",
    "sbatch": "slurm-wlm",
    "sacct": "slurm-wlm",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "iptables": "iptables",
    "podman": "podman",
    "runc": "runc",
}
ACCOUNTING: dict[str, str] = {
    "slurmdbd": "slurmdbd",
    "sacctmgr": "slurm-wlm",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
}
ALL_PACKAGES = "slurm-wlm slurmdbd mariadb-server munge openssh-server iproute2 iptables podman runc"
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def missing_packages(accounting: bool) -> list[str]:
    """Debian packages whose binaries are not found, sorted, each once."""
    needed = dict(REQUIRED)
    if accounting:
        needed.update(ACCOUNTING)
    return sorted({pkg for binary, pkg in needed.items() if shutil.which(binary, path=SEARCH_PATH) is None})


def check(accounting: bool) -> None:
    """Refuse to start the lab unless run as root with every package installed.

    Raises:
        LabError: not root, or packages missing (named, with the apt-get line to install them).
    """
    if os.geteuid() != 0:
        raise LabError(
            "the virtual lab needs root (network namespaces, bridges, daemons)",
            hint="run it as root, e.g. `sudo .venv/bin/orch lab up`",
        )
    missing = missing_packages(accounting)
    if missing:
        raise LabError(
            f"missing Debian packages: {' '.join(missing)}",
            hint=f"apt-get update && apt-get install -y {ALL_PACKAGES}",
        )
