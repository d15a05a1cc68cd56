"""The lab's disk: what each node's /opt holds, and whether the free disk can hold the nodes' stacks.

Every lab node keeps its own /opt under the state dir (<state-dir>/nodes/<node>/opt), where
provisioning installs the stack: about 2.1 GB a node for cpu-gloo with its image. Labs brought up
with fresh state dirs add up until a provisioning fails on "no space left on device" in the middle
of an image import. So `orch lab status` shows what each node's /opt holds, `orch lab down --purge`
removes it, and `orch lab up` and `orch provision` on the lab refuse to start when the free disk
cannot hold the stack on every node, naming how much is needed.

The figure per node is the stack's own (`node_disk_gb` in its manifest); a stack without one is
not checked. Stacks share /opt/orch (one venv prefix, one image store), so a node whose /opt holds
some of it already needs only the rest: needed = Σ over the nodes of max(0, per node - held).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import LabError
from orchestrator.lab.config import node_opt, nodes_root
from orchestrator.models.base import StrictModel
from orchestrator.models.stack import Stack

GB = 10**9

SizeOf = Callable[[Path], int]
FreeOf = Callable[[Path], int]


def tree_bytes(root: Path) -> int:
    """Bytes the files under ``root`` take on disk (allocated blocks, as `du` counts them), each
    inode once, symbolic links not followed; 0 when ``root`` does not exist."""
    seen: set[tuple[int, int]] = set()
    total = 0
    todo = [root]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while we walked
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
            if stat.S_ISDIR(st.st_mode):
                todo.append(Path(entry.path))
    return total


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem that holds ``path`` (or its nearest existing parent)."""
    for folder in (path, *path.parents):
        if folder.exists():
            return shutil.disk_usage(folder).free
    return shutil.disk_usage("/").free


def size_text(n: int) -> str:
    """Bytes as GB with one decimal, or MB below 0.1 GB."""
    return f"{n / GB:.1f} GB" if n >= GB // 10 else f"{n / 10**6:.0f} MB"


class DiskNeed(StrictModel):
    """What the nodes' stacks need on the lab's disk, against what is free there."""

    stack: str
    per_node_bytes: int
    held: dict[str, int]  # node -> bytes its /opt holds now
    needed_bytes: int
    free_bytes: int
    where: str  # the folder whose filesystem was asked

    @property
    def short(self) -> bool:
        """True when the free disk cannot hold what is needed."""
        return self.needed_bytes > self.free_bytes


def opt_sizes(state_dir: Path, nodes: list[str], size_of: SizeOf | None = None) -> dict[str, int]:
    """Bytes each node's /opt holds (0 where it has none)."""
    return {n: (size_of or tree_bytes)(node_opt(state_dir, n)) for n in nodes}


def node_names(state_dir: Path) -> list[str]:
    """The nodes that have a folder under the state dir (a lab's record may be gone)."""
    base = nodes_root(state_dir)
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.is_symlink())


def disk_need(
    stack: Stack,
    state_dir: Path,
    nodes: list[str],
    *,
    size_of: SizeOf | None = None,
    free_of: FreeOf | None = None,
) -> DiskNeed | None:
    """What provisioning ``stack`` on ``nodes`` of the lab in ``state_dir`` needs; None when the
    stack's manifest has no per-node figure."""
    if stack.node_disk_gb is None:
        return None
    per = round(stack.node_disk_gb * GB)
    held = opt_sizes(state_dir, nodes, size_of or tree_bytes)
    return DiskNeed(
        stack=stack.name,
        per_node_bytes=per,
        held=held,
        needed_bytes=sum(max(0, per - h) for h in held.values()),
        free_bytes=(free_of or free_bytes)(state_dir),
        where=str(state_dir),
    )


def check_disk(need: DiskNeed | None) -> DiskNeed | None:
    """Refuse to start when the free disk cannot hold what ``need`` (disk_need) says the nodes'
    stack needs; None (a stack without a per-node figure) passes.

    Raises:
        LabError: not enough free disk (how much is needed, how much is free, where, and why).
    """
    if need is not None and need.short:
        raise LabError(
            f"the disk under {need.where} has {size_text(need.free_bytes)} free; stack {need.stack} "
            f"on {len(need.held)} node(s) needs {size_text(need.needed_bytes)} "
            f"({size_text(need.per_node_bytes)} a node, less what each node's /opt holds already)",
            hint="free some space, e.g. remove other labs' node stacks with "
            "`orch lab down --purge --state-dir DIR`",
        )
    return need


# Folders given up by discard(): renamed here (the same filesystem as the nodes' folders, so the
# rename is instant) and removed by a background `rm -rf`; lab down finishes what is left.
DISCARDED = "discarded"
_removals: list[subprocess.Popen[bytes]] = []


def discarded_root(state_dir: Path) -> Path:
    return state_dir / DISCARDED


def discard(state_dir: Path, folders: list[Path]) -> None:
    """Remove ``folders`` (under the state dir) without waiting for it: each is renamed into
    <state-dir>/discarded at once and removed there by a background process. The caller sees them
    gone on return; their disk comes back within a minute or so (a node's /opt with cpu-gloo is
    tens of thousands of files: 10-15 s a node to remove on a loaded 2-core machine). `lab down`
    (finish_discarded) removes whatever is still there, so nothing stays beyond it.

    Raises:
        LabError: a folder not under the state dir.
    """
    root = discarded_root(state_dir)
    base = state_dir.resolve()
    moved: list[str] = []
    for folder in folders:
        if not folder.resolve().is_relative_to(base) or folder.resolve() == base:
            raise LabError(f"{folder} is not under the lab's state dir {state_dir}; not removed")
        if not folder.exists() and not folder.is_symlink():
            continue
        root.mkdir(mode=0o700, exist_ok=True)
        dest = root / f"{folder.name}.{uuid.uuid4().hex[:12]}"
        folder.rename(dest)
        moved.append(str(dest))
    if moved:
        _removals.append(
            subprocess.Popen(
                ["rm", "-rf", "--one-file-system", "--", *moved],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not stopped with the caller's process group
            )
        )


def finish_discarded(state_dir: Path) -> None:
    """Wait for this process's background removals, then remove what discard() left under the
    state dir (a removal of another process, or one cut short, is finished here)."""
    while _removals:
        _removals.pop().wait()
    root = discarded_root(state_dir)
    if root.is_dir() and not root.is_symlink():
        shutil.rmtree(root, onerror=_unless_gone)


def _unless_gone(
    func: Callable[..., object], path: str, exc_info: tuple[type[BaseException], BaseException, object]
) -> None:
    """rmtree's error handler: a file another removal took first is no error; anything else is."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def purge_opt(state_dir: Path, size_of: SizeOf | None = None) -> dict[str, int]:
    """Remove every node's /opt under the state dir; the bytes each held (only nodes that had one)."""
    gone: dict[str, int] = {}
    for n in node_names(state_dir):
        opt = node_opt(state_dir, n)
        if opt.is_dir() and not opt.is_symlink():
            gone[n] = (size_of or tree_bytes)(opt)
            shutil.rmtree(opt)
    return gone
