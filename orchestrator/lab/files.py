"""The lab's files: folders with the owners each daemon wants, keys, and rendered configs.

Keys (munge key, SSH client key, host keys) are kept across `down`/`up` so that known_hosts and
the inventory stay valid; configs are rewritten on every `up`.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from orchestrator.lab import render, shell
from orchestrator.lab.config import LabConfig, NodeSpec
from orchestrator.lab.masks import NODE_SCRATCH
from orchestrator.safefs import atomic_write


def _mkdir(path: Path, mode: int = 0o755, owner: str | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    if owner:
        pw = pwd.getpwnam(owner)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    # A fresh 0600 temporary file, chmod to mode, rename: a secret (slurmdbd.conf's database
    # password) is never readable by others, whatever the umask, and no planted link is followed.
    atomic_write(path, text, mode)


def write_munge_key(path: Path, owner: str = "munge") -> None:
    """Create the munge key (1 KiB of random bytes, mode 0400, owned by owner) unless it exists."""
    if not path.exists():
        atomic_write(path, os.urandom(1024), 0o400)
    pw = pwd.getpwnam(owner)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    os.chmod(path, 0o400)


def write_slurmdbd_conf(path: Path, text: str) -> None:
    """slurmdbd.conf holds the database password: 0600 from its first byte (slurmdbd refuses more)."""
    _write(path, text, 0o600)


def host_key(cfg: LabConfig, node: NodeSpec) -> Path:
    """The node's private ed25519 host key."""
    return cfg.node_dir(node) / "ssh_host_ed25519_key"


def _keygen(path: Path, comment: str) -> None:
    if not path.exists():
        shell.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def mysql_datadir(cfg: LabConfig) -> Path:
    """MariaDB's data folder (kept across labs, so sacct history survives `down`)."""
    return cfg.state_dir / "mysql"


def munge_key(cfg: LabConfig) -> Path:
    """The lab's own munge key (never /etc/munge/munge.key)."""
    return cfg.state_dir / "munge" / "munge.key"


def prepare(cfg: LabConfig, db_password: str) -> None:
    """Create every folder, key and config file the lab needs under the state dir.

    Raises:
        LabError: ssh-keygen fails.
    """
    sd = cfg.state_dir
    _mkdir(sd)
    clear_slurm_state(cfg)
    for sub in ("log", "run", "slurmctld", "slurmd", "run/cg"):
        _mkdir(sd / sub)
    _mkdir(sd / "ssh", 0o700)
    _mkdir(sd / "munge", 0o700, owner="munge")
    _mkdir(cfg.munge_socket.parent, 0o755, owner="munge")
    if cfg.accounting:
        _mkdir(mysql_datadir(cfg), 0o750, owner="mysql")
        _mkdir(cfg.mariadb_socket.parent, 0o755, owner="mysql")
    _mkdir(Path("/run/sshd"), 0o755)
    NODE_SCRATCH.mkdir(parents=True, exist_ok=True)  # the mount point of each node's scratch
    _mkdir(sd / "run" / "share")

    write_munge_key(munge_key(cfg))

    _keygen(cfg.client_key, "orch-lab-client")
    _write(sd / "ssh" / "authorized_keys", cfg.client_key.with_suffix(".pub").read_text(), 0o600)

    host_pubs: dict[str, str] = {}
    for node in cfg.node_specs:
        ndir = cfg.node_dir(node)
        _mkdir(ndir, 0o700)
        _mkdir(ndir / "opt")
        _mkdir(cfg.node_home(node), 0o700)
        _mkdir(cfg.node_scratch(node), 0o1777)  # like /var/tmp: any job user may make its folder
        _keygen(host_key(cfg, node), f"orch-lab-{node.name}")
        host_pubs[node.name] = host_key(cfg, node).with_suffix(".pub").read_text()
        _write(ndir / "sshd_config", render.sshd_config(cfg, node), 0o600)

    _write(cfg.known_hosts, render.known_hosts(cfg.node_specs, host_pubs))
    _write(cfg.slurm_conf, render.slurm_conf(cfg))
    _write(sd / "cgroup.conf", render.cgroup_conf())
    dbd = sd / "slurmdbd.conf"
    if cfg.accounting:
        write_slurmdbd_conf(dbd, render.slurmdbd_conf(cfg, db_password))
    elif dbd.exists():
        dbd.unlink()
    inventory = render.inventory(cfg)
    _write(cfg.state_inventory, inventory)
    if cfg.inventory_out != cfg.state_inventory:
        cfg.inventory_out.parent.mkdir(parents=True, exist_ok=True)
        _write(cfg.inventory_out, inventory)


def clear_slurm_state(cfg: LabConfig) -> None:
    """Remove what slurmctld and the slurmds saved of an earlier lab (StateSaveLocation, the
    spools): each lab starts with no job and every node idle. Without it a new lab recovered the
    last one's jobs (an allocation left behind kept nodes 'allocated') and drained nodes, and its
    `up` failed waiting for idle nodes."""
    for sub in ("slurmctld", "slurmd"):
        shutil.rmtree(cfg.state_dir / sub, ignore_errors=True)


def remove_runtime(cfg: LabConfig) -> None:
    """Delete the runtime files (sockets, pid files, mount points, the state record)."""
    shutil.rmtree(cfg.run_dir, ignore_errors=True)
    cfg.state_file.unlink(missing_ok=True)
