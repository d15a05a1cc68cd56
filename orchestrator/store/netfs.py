"""Which filesystem a path lives on, from the kernel's mount table; is it a network filesystem?

SQLite's WAL mode keeps its index in shared memory (the -shm file, mmap'ed), which only works
when every process that opens the database runs on one host; SQLite documents WAL as unsafe on
network filesystems (https://www.sqlite.org/wal.html, "WAL does not work over a network
filesystem"). On a cluster, runs/ and its orch.db often sit on NFS or Lustre: the nightly job
writes from a compute node while people read from a login node. The SQLite store asks
`journal_mode_for(path)` and uses the rollback journal (DELETE, with POSIX locks) there.

The table is /proc/self/mountinfo (what this process sees, its mount namespace included), else
/proc/mounts. The mount of a path is the longest mount point that is a prefix of its resolved
path; the last such line wins (a later mount over the same point hides the earlier one).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from orchestrator.models.base import StrictModel

MOUNTINFO = Path("/proc/self/mountinfo")
PROC_MOUNTS = Path("/proc/mounts")

# Filesystem types (the kernel's names, as the mount table writes them) whose files are shared
# between hosts. fuse.<name> types are matched on <name>.
NETWORK_FS_TYPES = frozenset(
    {
        "nfs", "nfs4", "lustre", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "gpfs", "beegfs",
        "9p", "afs", "ocfs2", "gfs2", "orangefs", "pvfs2", "wekafs", "panfs", "cvfs", "sshfs",
        "cephfs", "lizardfs", "moosefs", "mfs", "juicefs", "s3fs", "gcsfuse", "virtiofs",
    }
)  # fmt: skip

JournalMode = Literal["wal", "delete"]


class Mount(StrictModel):
    """One line of the mount table."""

    point: str
    fstype: str
    source: str

    @property
    def network(self) -> bool:
        return is_network_fs(self.fstype)


def is_network_fs(fstype: str) -> bool:
    """True for a filesystem type shared over a network (fuse.sshfs, nfs4, lustre, ...)."""
    base = fstype.lower()
    if base.startswith("fuse."):
        base = base[len("fuse.") :]
    return base in NETWORK_FS_TYPES


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """The kernel writes space, tab, newline and backslash in mount fields as \\040 etc."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mount_table(text: str) -> list[Mount]:
    """Mounts from /proc/self/mountinfo or /proc/mounts (fstab layout) text; bad lines are skipped."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        fields = line.split()
        if " - " in line and len(fields) >= 7:
            # mountinfo: ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
            try:
                sep = fields.index("-", 6)
            except ValueError:
                continue
            if len(fields) < sep + 3:
                continue
            mounts.append(
                Mount(point=_unescape(fields[4]), fstype=fields[sep + 1], source=_unescape(fields[sep + 2]))
            )
        elif len(fields) >= 4 and fields[1].startswith("/"):
            # /proc/mounts: SOURCE POINT FSTYPE OPTS DUMP PASS
            mounts.append(Mount(point=_unescape(fields[1]), fstype=fields[2], source=_unescape(fields[0])))
    return mounts


def read_mount_table() -> list[Mount]:
    """This process's mount table; empty when neither file can be read (not Linux)."""
    for f in (MOUNTINFO, PROC_MOUNTS):
        try:
            return parse_mount_table(f.read_text(errors="replace"))
        except OSError:
            continue
    return []


def mount_of(path: Path, mounts: list[Mount]) -> Mount | None:
    """The mount holding path: the longest mount point that is a prefix of its resolved path.

    A path that does not exist yet is resolved through its nearest existing parent.
    """
    target = path.resolve()
    best: Mount | None = None
    for m in mounts:
        point = Path(m.point)
        if (target == point or point in target.parents) and (
            best is None or len(point.parts) >= len(Path(best.point).parts)
        ):
            best = m
    return best


def journal_mode_for(path: Path, mounts: list[Mount] | None = None) -> tuple[JournalMode, Mount | None]:
    """WAL on a local filesystem; the rollback journal (DELETE) on a network one, with its mount."""
    m = mount_of(path, read_mount_table() if mounts is None else mounts)
    if m is not None and m.network:
        return "delete", m
    return "wal", m
