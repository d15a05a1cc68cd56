"""Checks before `up`: root, every binary the lab needs (named by its Debian package), a usable state dir."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from orchestrator.errors import ConfigError, LabError

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


def state_dir_problem(state_dir: Path, *, owner_uid: int = 0, top: Path = Path("/")) -> str | None:
    """Why the lab's daemons could not use ``state_dir``, or None when they can.

    The lab keeps root's authorized_keys, munge's key and socket and MariaDB's datadir under the
    state dir. sshd (StrictModes) refuses an authorized_keys file when any folder above it is not
    owned by root or is writable by group or others (the sticky bit of /tmp does not count), and
    munged and mariadbd run as their own users, so every folder above must let others through
    (o+x). Each existing folder from ``top`` down to the state dir is checked; folders still to
    be made are created by `up` with mode 755. ``owner_uid`` and ``top`` exist for the tests.
    """
    target = state_dir.resolve()
    chain = [target, *target.parents]
    top = top.resolve()
    if top in chain:
        chain = chain[: chain.index(top) + 1]
    for folder in reversed(chain):
        try:
            st = folder.stat()
        except FileNotFoundError:
            break
        except OSError as e:
            return f"cannot inspect {folder}: {e.strerror}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{folder} is not a folder"
        if st.st_uid != owner_uid:
            return f"{folder} is owned by uid {st.st_uid}, not root (sshd StrictModes refuses keys below it)"
        if folder == target:
            break  # `up` sets the state dir's own mode
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o022:
            return (
                f"{folder} is writable by group or others (mode {mode:o}); "
                "sshd StrictModes refuses the lab's authorized_keys below it"
            )
        if not mode & 0o001:
            return (
                f"{folder} does not let other users through (mode {mode:o}); "
                "munged and mariadbd, which run as their own users, cannot reach the state dir"
            )
    return None


def check_state_dir(state_dir: Path) -> None:
    """Refuse a state dir the lab's daemons cannot use.

    Raises:
        ConfigError: the state dir or a folder above it has the wrong owner or mode (named).
    """
    problem = state_dir_problem(state_dir)
    if problem is not None:
        raise ConfigError(
            f"state dir {state_dir} cannot hold the lab: {problem}",
            hint="choose one whose every parent is root's, mode 755 (e.g. the default /var/lib/orch-lab)",
        )
