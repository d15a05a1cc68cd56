"""A store on a network filesystem is found from the mount table, and SQLite's WAL is not used there.

The mount tables are recorded ones (tests/fixtures/mounts/, each with its source line): an NFSv4.1
volume in a Kubernetes pod's /proc/self/mountinfo, a Lustre client's /proc/mounts, and an HPC
login node's NFSv3 mounts nested in each other.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from orchestrator.store import netfs
from orchestrator.store.db import ResultsStore
from orchestrator.store.netfs import Mount, is_network_fs, journal_mode_for, mount_of, parse_mount_table

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mounts"


def _table(name: str) -> list[Mount]:
    text = (FIXTURES / name).read_text()
    assert text.startswith("# source: ")
    return parse_mount_table("\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))


def test_nfs4_mountinfo_store_uses_the_rollback_journal() -> None:
    mounts = _table("nfs4-mountinfo.txt")
    assert len(mounts) == 9
    mode, m = journal_mode_for(Path("/kaiwudb/certs/runs/orch.db"), mounts)
    assert mode == "delete"
    assert m is not None and m.fstype == "nfs4" and m.point == "/kaiwudb/certs"
    assert m.source == "20.20.20.43:/data/k8s/nfs_share/pvc-2108ee90-b185-43f7-a95c-21d9a4d84a67"
    # beside it, on the pod's overlay root and its ext4 /opt: WAL
    assert journal_mode_for(Path("/kaiwudb/runs/orch.db"), mounts)[0] == "wal"
    mode, m = journal_mode_for(Path("/opt/runs/orch.db"), mounts)
    assert mode == "wal" and m is not None and m.fstype == "ext4"


def test_lustre_proc_mounts_store_uses_the_rollback_journal() -> None:
    mounts = _table("lustre-proc-mounts.txt")
    mode, m = journal_mode_for(Path("/mnt/lustre/team/runs/orch.db"), mounts)
    assert mode == "delete" and m is not None and m.fstype == "lustre" and m.source == "10.0.2.15@tcp:/lustre"
    mode, m = journal_mode_for(Path("/var/lib/lhsmd/roots/lhsm-plugin-s3/orch.db"), mounts)
    assert mode == "delete" and m is not None and m.point == "/var/lib/lhsmd/roots/lhsm-plugin-s3"
    # a prefix of the text but not of the path: /mnt/lustre2 is on the root ext4
    mode, m = journal_mode_for(Path("/mnt/lustre2/orch.db"), mounts)
    assert mode == "wal" and m is not None and (m.point, m.fstype) == ("/", "ext4")
    assert journal_mode_for(Path("/boot/orch.db"), mounts)[1] == Mount(
        point="/boot", fstype="ext4", source="/dev/sda2"
    )


def test_nested_nfs_mounts_pick_the_longest_mount_point() -> None:
    mounts = _table("nfs3-login-node-mountinfo.txt")
    m = mount_of(Path("/mnt/netapp2/Home_FT2/someone/runs/orch.db"), mounts)
    assert m is not None and m.source == "10.117.49.202:/Home_FT2" and m.network
    m = mount_of(Path("/mnt/netapp2/Store_x/orch.db"), mounts)
    assert m is not None and m.source == "10.117.49.202:/"
    assert mount_of(Path("/home/u/orch.db"), mounts) is None  # no "/" line in this selection


@pytest.mark.parametrize(
    ("fstype", "network"),
    [("nfs", True), ("nfs4", True), ("lustre", True), ("cifs", True), ("smb3", True), ("ceph", True),
     ("glusterfs", True), ("fuse.glusterfs", True), ("gpfs", True), ("beegfs", True), ("9p", True),
     ("fuse.sshfs", True), ("ext4", False), ("xfs", False), ("tmpfs", False), ("overlay", False),
     ("fuse.overlayfs", False), ("btrfs", False)],
)  # fmt: skip
def test_network_filesystem_types(fstype: str, network: bool) -> None:
    assert is_network_fs(fstype) is network


def test_escaped_mount_points_are_decoded() -> None:
    (m,) = parse_mount_table("40 22 0:50 / /mnt/team\\040share rw - nfs4 srv:/x rw\n")
    assert m.point == "/mnt/team share" and m.network


def test_store_on_network_filesystem_is_not_wal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded nfs4 mount, moved onto tmp_path: the store opens in DELETE mode, no -wal file."""
    (nfs,) = [m for m in _table("nfs4-mountinfo.txt") if m.fstype == "nfs4"]
    root = Mount(point="/", fstype="ext4", source="/dev/sda1")
    monkeypatch.setattr(
        netfs, "read_mount_table", lambda: [root, nfs.model_copy(update={"point": str(tmp_path)})]
    )
    path = tmp_path / "runs" / "orch.db"
    with ResultsStore.open(path) as s:
        assert s.journal_mode == "delete" and s.netfs_mount is not None and s.netfs_mount.fstype == "nfs4"
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not path.with_name("orch.db-wal").exists()
    with sqlite3.connect(path) as c:  # the mode is the file's own, for any other reader too
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_wal_store_moved_to_network_filesystem_leaves_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "orch.db"
    monkeypatch.setattr(
        netfs, "read_mount_table", lambda: [Mount(point="/", fstype="ext4", source="/dev/sda1")]
    )
    with ResultsStore.open(path) as s:
        assert s.journal_mode == "wal" and s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    (lustre,) = [m for m in _table("lustre-proc-mounts.txt") if m.point == "/mnt/lustre"]
    monkeypatch.setattr(
        netfs, "read_mount_table", lambda: [lustre.model_copy(update={"point": str(tmp_path)})]
    )
    with ResultsStore.open(path) as s:
        assert s.journal_mode == "delete" and s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_this_machines_mount_table_is_read() -> None:
    mounts = netfs.read_mount_table()
    assert mounts, "no /proc/self/mountinfo nor /proc/mounts"
    m = mount_of(Path.cwd(), mounts)
    assert m is not None and Path.cwd().resolve().is_relative_to(m.point)
