"""Run data on the nodes: where each node writes its files, and how orch brings them home.

A real cluster may share no filesystem between the controller (where orch runs and keeps the run
directory) and its nodes. So each run's data has one of three homes (``run_data_layout``):

- ``here``: every node of the inventory is this machine (``ansible_connection=local``): nodes
  write into the run directory itself.
- ``shared``: the run directory lies under a folder the inventory declares shared
  (``orch_shared_dirs``, e.g. an NFS /shared): nodes write there directly, at the same path.
- ``collect``: anything else. Each node keeps the run's files under
  ``<orch_node_dir>/<run-id>/`` (default /var/tmp/orch), in the same layout as the run directory
  (``steps/<step-id>/``, ``probe/``, ``alloc/``). orch creates those folders over its kept-open
  SSH shells before it submits (Slurm needs an --output folder to exist), brings each node's
  files into the run directory (``tar | base64`` through the shell, unpacked here with tarfile's
  ``data`` filter, no links), then removes the node's folder.

Nothing a node sends is trusted: tar members that are links, devices, absolute or that would leave
the destination are skipped and named; names of followed files must match the caller's pattern.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import shlex
import shutil
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import Field

from orchestrator.errors import ConfigError, InfraError, RemoteError
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.paths import under
from orchestrator.remote.base import NodeShell
from orchestrator.safefs import make_dir, open_write

DEFAULT_NODE_DIR = Path("/var/tmp/orch")
# One transfer of a node's folder; rank logs and heartbeats are small, a stuck node is not.
COLLECT_TIMEOUT_S = 120.0
_PLAIN_PART = re.compile(r"^[A-Za-z0-9_.+-]+$")
# What a node that cannot be reached (or sends nonsense) raises: kept as that node's error.
_NODE_ERRORS = (InfraError, ConfigError)

Mode = Literal["here", "shared", "collect"]


class RunDataLayout(StrictModel):
    """Where one run's data lives on the nodes and here (module docstring)."""

    mode: Mode
    run_dir: Path = Field(description="the run directory on this machine (absolute)")
    node_root: Path = Field(description="the run's folder on the nodes (absolute)")

    def node_path(self, *parts: str) -> Path:
        """node_root/parts… (each part one plain name); raises ConfigError otherwise."""
        for part in parts:
            if part in (".", "..") or not _PLAIN_PART.match(part):
                raise ConfigError(f"node folder part {part!r} is not a plain name")
        return self.node_root.joinpath(*parts)

    def local_path(self, *parts: str) -> Path:
        """run_dir/parts…, inside the run directory (paths.under); raises ConfigError otherwise."""
        return under(self.run_dir, *parts, what="run data folder")

    @property
    def remote(self) -> bool:
        """True when nodes keep their files apart and orch collects them."""
        return self.mode == "collect"


def run_data_layout(cluster: Cluster, run_dir: Path) -> RunDataLayout:
    """The home of ``run_dir``'s data on ``cluster``'s nodes (module docstring). Pure but for
    resolving ``run_dir`` and the shared folders (symlinks followed, as the nodes would)."""
    local = run_dir.absolute()
    if all(n.is_local for n in cluster.nodes):
        return RunDataLayout(mode="here", run_dir=local, node_root=local)
    real = local.resolve()
    for shared in cluster.vars.orch_shared_dirs:
        if real == shared.resolve() or real.is_relative_to(shared.resolve()):
            return RunDataLayout(mode="shared", run_dir=local, node_root=local)
    node_dir = cluster.vars.orch_node_dir or DEFAULT_NODE_DIR
    return RunDataLayout(mode="collect", run_dir=local, node_root=node_dir / local.name)


class Collected(StrictModel):
    """What one node's folder gave: files and bytes unpacked, members refused, time taken."""

    node: str
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    skipped: list[str] = Field(default_factory=list, description="tar members refused, with why")
    error: str | None = None


def _refused(member: tarfile.TarInfo) -> str | None:
    """Why a member of what a node sent is not unpacked, or None."""
    if not (member.isfile() or member.isdir()):
        return "not a regular file or folder"
    if member.name.startswith("/"):
        return "an absolute name"
    if ".." in PurePosixPath(member.name).parts:
        return "a '..' in its name"
    return None


def extract_tar(data: bytes, dest: Path) -> tuple[int, int, list[str]]:
    """Unpack a tar archive a node sent into ``dest``: (files, bytes, refused members).

    Only regular files and folders with relative names are unpacked, each written by orch itself
    (mode 0600/0700, never through a link: nothing outside ``dest``, not through a link planted in
    ``dest``, no special bits). Links, devices, absolute names and '..' are refused (skipped and
    named). It does not rely on tarfile's extraction filters, which the Python 3.11 of Debian 12
    (3.11.2) lacks. Raises InfraError when ``data`` is not a tar archive or cannot be written.
    """
    skipped: list[str] = []
    files = size = 0
    try:
        base = make_dir(dest).resolve()
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                why = _refused(member)
                target = dest.joinpath(*(part for part in PurePosixPath(member.name).parts if part != "."))
                if why is None and os.path.islink(target):
                    why = "a link stands in its place"
                if why is None and not (target.resolve() == base or target.resolve().is_relative_to(base)):
                    why = f"it would leave {dest}"
                if why is not None:
                    skipped.append(f"{member.name}: {why}")
                    continue
                if member.isdir():
                    make_dir(target)
                    continue
                make_dir(target.parent)
                src = tar.extractfile(member)
                assert src is not None  # a regular file has its data
                with os.fdopen(open_write(target), "wb") as out:
                    shutil.copyfileobj(src, out)
                files += 1
                size += member.size
    except (tarfile.TarError, OSError) as e:
        raise InfraError(f"cannot unpack the files sent for {dest}: {e}") from e
    return files, size, skipped


def _q(path: Path) -> str:
    return shlex.quote(str(path))


class NodeFiles:
    """The run's folders on the nodes (RunDataLayout) and the transfers between them and here.

    In ``here`` and ``shared`` modes every call acts on the run directory directly and no node
    is asked anything; ``shells`` is used in ``collect`` mode only.
    """

    def __init__(self, layout: RunDataLayout, shells: Mapping[str, NodeShell]) -> None:
        self.layout, self.shells = layout, shells
        self.used: set[str] = set()  # nodes that hold a folder of this run

    def shell(self, node: str) -> NodeShell:
        """The kept-open shell to node; raises ConfigError for a node without one."""
        try:
            return self.shells[node]
        except KeyError:
            raise ConfigError(f"{node}: no shell to reach it (not in the inventory?)") from None

    def prepare(self, folders: Mapping[str, Sequence[tuple[str, ...]]]) -> None:
        """Create each node's folders (node -> relative parts); locally in the run directory too.

        Raises InfraError naming the node and folder that could not be made.
        """
        for parts_list in folders.values():
            for parts in parts_list:
                make_dir(self.layout.local_path(*parts))
        if not self.layout.remote:
            return
        for node, parts_list in folders.items():
            paths = [self.layout.node_path(*p) for p in parts_list]
            if not paths:
                continue
            line = "umask 022 && mkdir -p -- " + " ".join(_q(p) for p in paths)
            res = self.shell(node).run_script(line, timeout=30)
            self.used.add(node)
            if not res.ok:
                raise InfraError(
                    f"{node}: cannot create the run's folder {paths[0]}: {res.brief()}",
                    hint="set orch_node_dir to a folder the SSH user may write on every node",
                )

    def touch(self, nodes: Sequence[str], *parts: str) -> list[str]:
        """Create the (empty) file parts on every node (a stop file); returns per-node errors."""
        if not self.layout.remote:
            with contextlib.suppress(OSError):
                os.close(open_write(self.layout.local_path(*parts), append=True))
            return []
        return self.on_each(nodes, f": >> {_q(self.layout.node_path(*parts))}", timeout=15)

    def on_each(self, nodes: Sequence[str], line: str, *, timeout: float) -> list[str]:
        """Run line on each node; returns one error per node where it failed, never raises."""
        errors: list[str] = []
        for node in nodes:
            try:
                res = self.shell(node).run_script(line, timeout=timeout)
                if not res.ok:
                    errors.append(f"{node}: {res.brief()}")
            except RemoteError as e:
                errors.append(str(e))
        return errors

    def collect(self, nodes: Sequence[str], *parts: str, remove: bool = True) -> list[Collected]:
        """Bring each node's folder parts into the run directory's parts, then (remove) delete it
        on the node. A node that fails is reported in its Collected.error, never raised: the
        step's verdict says what is missing."""
        if not self.layout.remote:
            return []
        dest = self.layout.local_path(*parts)
        src = self.layout.node_path(*parts)
        out: list[Collected] = []
        for node in nodes:
            t0 = time.monotonic()
            got = Collected(node=node)
            try:
                shell = self.shell(node)
                pack = f"if [ -d {_q(src)} ]; then tar -C {_q(src)} -cf - . | base64; fi"
                res = shell.run_script(pack, timeout=COLLECT_TIMEOUT_S)
                if not res.ok:
                    raise RemoteError(f"{node}: cannot pack {src}: {res.brief()}")
                if res.stdout.strip():
                    data = base64.b64decode(res.stdout)
                    got.files, got.bytes, got.skipped = extract_tar(data, dest)
                if remove:
                    shell.run_script(f"rm -rf -- {_q(src)}", timeout=30)
            except _NODE_ERRORS as e:
                got.error = str(e)
            except ValueError as e:  # base64
                got.error = f"{node}: what came back is not base64: {e}"
            got.seconds = time.monotonic() - t0
            out.append(got)
        return out

    def follow(
        self, nodes: Sequence[str], parts: tuple[str, ...], glob: str, name: re.Pattern[str]
    ) -> Follower:
        """A Follower that appends what the nodes add to files ``glob`` in parts (names matching
        ``name``) to the same files here."""
        return Follower(self, nodes, parts, glob, name)

    def remove_all(self) -> list[str]:
        """Delete the run's folder on every node that got one; returns per-node errors."""
        if not self.layout.remote:
            return []
        return self.on_each(sorted(self.used), f"rm -rf -- {_q(self.layout.node_root)}", timeout=60)


class Follower:
    """Copies, file by file, the bytes the nodes appended since the last look (heartbeats).

    ``poll()`` asks each node once: one shell line that prints, for every file whose size grew,
    its name, old and new size, and the new bytes in base64. ``start()`` polls on a thread until
    ``stop()``; a node that does not answer is retried at the next poll (errors are kept).
    """

    def __init__(
        self, files: NodeFiles, nodes: Sequence[str], parts: tuple[str, ...], glob: str, name: re.Pattern[str]
    ) -> None:
        self.files, self.nodes, self.parts, self.glob, self.name = files, list(nodes), parts, glob, name
        self.offsets: dict[tuple[str, str], int] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def script(self, node: str) -> str:
        """The shell line that reports the appended bytes of one node's files."""
        src = self.files.layout.node_path(*self.parts)
        known = sorted((n, off) for (nd, n), off in self.offsets.items() if nd == node)
        cases = " ".join(f"{shlex.quote(n)}) off={off};;" for n, off in known)
        return (
            f'cd {_q(src)} 2>/dev/null || exit 0; for f in {self.glob}; do [ -f "$f" ] || continue; '
            f'case "$f" in {cases} *) off=0;; esac; size=$(wc -c <"$f"); '
            '[ "$size" -gt "$off" ] || continue; printf \'== %s %s %s\\n\' "$f" "$off" "$size"; '
            "tail -c +$((off + 1)) -- \"$f\" | head -c $((size - off)) | base64 | tr -d '\\n'; echo; done"
        )

    def poll(self) -> int:
        """One look at every node; returns the bytes appended here."""
        if not self.files.layout.remote:
            return 0
        added = 0
        with self._lock:
            for node in self.nodes:
                try:
                    res = self.files.shell(node).run_script(self.script(node), timeout=30)
                except _NODE_ERRORS as e:
                    self.errors.append(str(e))
                    continue
                if not res.ok:
                    self.errors.append(f"{node}: {res.brief()}")
                    continue
                added += self._apply(node, res.stdout)
        return added

    def _apply(self, node: str, text: str) -> int:
        added = 0
        lines = text.splitlines()
        for head, body in zip(lines[0::2], lines[1::2], strict=False):
            fields = head.split()
            if len(fields) != 4 or fields[0] != "==" or not self.name.fullmatch(fields[1]):
                self.errors.append(f"{node}: unexpected line {head[:80]!r}")
                continue
            fname, off, size = fields[1], int(fields[2]), int(fields[3])
            if off != self.offsets.get((node, fname), 0):
                continue
            data = base64.b64decode(body)
            dest = self.files.layout.local_path(*self.parts, fname)
            with os.fdopen(open_write(dest, append=True), "ab") as fh:
                fh.write(data)
            self.offsets[(node, fname)] = off + len(data)
            added += len(data)
            if off + len(data) != size:
                self.errors.append(f"{node}: {fname}: {len(data)} bytes came, {size - off} announced")
        return added

    def start(self, interval_s: float = 0.25) -> None:
        """Poll every ``interval_s`` on a thread until stop()."""
        if not self.files.layout.remote or self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval_s):
                self.poll()

        self._thread = threading.Thread(target=loop, name="orch-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (after its current poll), then poll once more."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        self.poll()


@contextlib.contextmanager
def node_files(
    cluster: Cluster,
    layout: RunDataLayout,
    shells: Mapping[str, NodeShell] | None = None,
    *,
    need_shells: bool = False,
) -> Iterator[NodeFiles]:
    """NodeFiles for ``layout`` with kept-open shells to the nodes: ``shells``, the run's, which
    stay open; else opened here (in collect mode, or when ``need_shells`` asks for them for
    ``on_each``; each on first use) and closed on exit."""
    if shells is not None:
        yield NodeFiles(layout, dict(shells))
        return
    if not layout.remote and not need_shells:
        yield NodeFiles(layout, {})
        return
    from orchestrator.remote.shells import node_shells

    with node_shells(cluster) as opened:
        yield NodeFiles(layout, opened)
