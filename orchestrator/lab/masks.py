"""What the lab's nodes must not see of the controller: the folders orch runs from, and the home.

On a real cluster a node has its own disks: no copy of the controller's checkout, its venv, the
folder it was started from, or its user's home. The lab's nodes share this machine's filesystem, so
each node's mount namespace (daemons.in_node) hides them:

- the checkout orch runs from (the folder above the ``orchestrator`` package, when it holds a
  pyproject.toml), the venv (``sys.prefix``) and the current folder at ``lab up``: an empty
  read-only tmpfs over each;
- the user's home ($HOME; /root for root): each node's own private, writable folder
  ``<state>/nodes/<node>/home`` over it (Ansible and ssh need a home to write in), as a node's own
  home disk.

``orch lab up --shared PATH`` names a folder that nodes see all the same, as a cluster's NFS: it is
bound back over the mask that would hide it.

Which paths are masked is decided here, purely. A candidate that is a system folder or a parent of
one (/, /usr, /var, /tmp …), or inside /opt (each node has its own) is skipped with a note: orch
installed system-wide has sys.prefix /usr, and `lab up` run from / must not blind the nodes. A
candidate that holds the lab's state dir is refused (ConfigError, exit 2): the nodes need their
sshd config, keys and slurm.conf from there.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field

from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel

# Folders every node needs from the shared system, and their parents, are never masked.
SYSTEM_PATHS = tuple(
    Path(p)
    for p in (
        "/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc",
        "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local",
        "/usr/local/bin", "/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/log", "/var/run",
        "/var/spool", "/var/tmp",
    )
)  # fmt: skip
# Each node has its own /opt (the stack): the controller's /opt is not visible there anyway.
NODE_OWN = (Path("/opt"),)
# Where each node keeps its own run data (remote/nodefiles.py DEFAULT_NODE_DIR): the node's scratch.
NODE_SCRATCH = Path("/var/tmp/orch")


class MaskPlan(StrictModel):
    """The masks of every node's mount namespace, decided at `lab up` and kept in the lab state."""

    hidden: list[Path] = Field(default_factory=list, description="an empty read-only tmpfs over each")
    home: Path | None = Field(default=None, description="each node's own folder over it")
    shared: list[Path] = Field(default_factory=list, description="seen by every node as here (--shared)")
    notes: list[str] = Field(default_factory=list, description="candidates left visible, and why")

    @property
    def masks(self) -> list[Path]:
        """Every masked folder, home included, parents before children."""
        return sorted([*self.hidden, *([self.home] if self.home else [])], key=lambda p: len(p.parts))

    def shared_under_masks(self) -> list[Path]:
        """The shared folders that lie under a mask (they are bound back over it)."""
        return [s for s in self.shared if any(_within(s, m) for m in self.masks)]


def _within(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def controller_paths() -> dict[str, Path]:
    """The folders orch runs from, by name (checkout, venv, cwd), resolved; the checkout only
    when the folder above the package holds a pyproject.toml (not an installed wheel)."""
    found: dict[str, Path] = {}
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "orchestrator").is_dir():
        found["checkout"] = checkout
    found["venv"] = Path(sys.prefix).resolve()
    found["cwd"] = Path.cwd().resolve()
    return found


def home_path() -> Path | None:
    """The user's home ($HOME; /root when that is unset and orch runs as root), resolved."""
    home = os.environ.get("HOME") or ("/root" if os.geteuid() == 0 else "")
    return Path(home).resolve() if home else None


def plan_masks(
    candidates: Mapping[str, Path], home: Path | None, shared: list[Path], state_dir: Path
) -> MaskPlan:
    """Decide the masks (module docstring). All paths absolute and resolved.

    Raises:
        ConfigError: a mask would hold the state dir, or a shared path is not an absolute folder
            path (given relative).
    """
    notes: list[str] = []
    for s in shared:
        if not s.is_absolute():
            raise ConfigError(f"--shared {s}: give an absolute path")

    def usable(what: str, path: Path) -> bool:
        if any(_within(sp, path) for sp in SYSTEM_PATHS):
            notes.append(f"{what} {path} not masked: it is a system folder or holds one")
            return False
        if any(_within(path, own) for own in NODE_OWN):
            notes.append(f"{what} {path} not masked: nodes have their own {NODE_OWN[0]}")
            return False
        if _within(state_dir, path):
            raise ConfigError(
                f"{what} {path} holds the lab's state dir {state_dir}: the nodes need it, and must not "
                f"see {path}",
                hint="give --state-dir outside it (the default is /var/lib/orch-lab)",
            )
        if _within(path, state_dir):
            notes.append(f"{what} {path} not masked: it is inside the lab's state dir")
            return False
        return True

    chosen: dict[Path, str] = {}
    for what, path in candidates.items():
        if usable(what, path):
            chosen.setdefault(path, what)
    keep_home = home if home is not None and usable("home", home) else None
    masks = [*chosen, *([keep_home] if keep_home else [])]
    hidden: list[Path] = []
    for path, what in chosen.items():
        outer = [m for m in masks if m != path and _within(path, m)]
        if outer:
            notes.append(f"{what} {path} is inside masked {outer[0]}")
        else:
            hidden.append(path)
    if keep_home is not None and any(m != keep_home and _within(keep_home, m) for m in hidden):
        notes.append(f"home {keep_home} is inside a masked folder: hidden with it")
        keep_home = None
    return MaskPlan(hidden=sorted(hidden), home=keep_home, shared=sorted(set(shared)), notes=notes)


def mount_lines(plan: MaskPlan, node_home: Path, scratch: Path, stash: Path) -> list[str]:
    """Shell lines (quoted) that apply the plan in a fresh private mount namespace: the node's
    scratch on NODE_SCRATCH, shared folders under a mask set aside under ``stash``, the masks,
    then the shared folders bound back, then the tmpfs masks made read-only."""
    q = shlex.quote
    lines = [f"mount --bind {q(str(scratch))} {q(str(NODE_SCRATCH))}"]
    back = plan.shared_under_masks()
    for i, s in enumerate(back):
        lines += [f"mkdir -p {q(str(stash / str(i)))}", f"mount --rbind {q(str(s))} {q(str(stash / str(i)))}"]
    for m in plan.masks:
        if m == plan.home:
            lines.append(f"mount --bind {q(str(node_home))} {q(str(m))}")
        else:
            lines.append(f"mount -t tmpfs -o mode=0755,size=1m orch-hidden {q(str(m))}")
    for i, s in enumerate(back):
        lines += [f"mkdir -p {q(str(s))}", f"mount --rbind {q(str(stash / str(i)))} {q(str(s))}"]
    lines += [f"mount -o remount,ro {q(str(m))}" for m in plan.hidden]
    return lines
