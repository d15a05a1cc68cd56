"""Files in folders that others can reach: written without following links, read only from inside.

Run folders, report paths and the lab's state folder may be shared (a team's /scratch, /tmp) or
handed over (a colleague's run folder to report on). So:

- whole files are written to a fresh temporary name made with O_CREAT|O_EXCL (``mkstemp``) in the
  target's folder, fsync'd, given their mode, then renamed over the target: a symlink planted at a
  predictable temporary name, or at the target itself, is never followed (the rename replaces the
  link, not what it points to), and a secret is 0600 from its first byte;
- files of a run folder are read only when they are regular files (not symlinks) whose resolved
  path is inside the run folder: a ``fingerprint.json`` that links to a credential file is refused
  by name, never copied into a report;
- modes are chosen, not left to the umask: folders 0700 and files 0600, or 0750 / 0640 for a team
  that shares run folders through a group (``ORCH_GROUP_READABLE=1``);
- a private runtime folder (SSH control sockets) is created 0700 and refused when another user owns
  it or its mode lets others in.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, InfraError

GROUP_READABLE_ENV = "ORCH_GROUP_READABLE"


def group_readable() -> bool:
    """Whether run folders, reports and the store are shared with the group (ORCH_GROUP_READABLE=1)."""
    return os.environ.get(GROUP_READABLE_ENV, "").strip() == "1"


def file_mode() -> int:
    """The mode of a file orch writes for the user: 0600, or 0640 with ORCH_GROUP_READABLE=1."""
    return 0o640 if group_readable() else 0o600


def dir_mode() -> int:
    """The mode of a folder orch creates for the user: 0700, or 0750 with ORCH_GROUP_READABLE=1."""
    return 0o750 if group_readable() else 0o700


def make_dir(path: Path, mode: int | None = None, *, exist_ok: bool = True) -> Path:
    """Create path and any missing parents with mode (default dir_mode()), whatever the umask.

    Folders that exist already keep their mode (the user chose it). Raises OSError (FileExistsError
    when exist_ok is false and path exists).
    """
    want = dir_mode() if mode is None else mode
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    if not missing and not exist_ok:
        raise FileExistsError(f"{path} exists")
    for d in reversed(missing):
        try:
            os.mkdir(d, want)
        except FileExistsError:
            if d == path and not exist_ok:
                raise
            continue
        os.chmod(d, want)  # mkdir's mode is cut by the umask
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a folder")
    return path


def atomic_write(path: Path, data: str | bytes, mode: int | None = None) -> None:
    """Write data to path via a fresh temporary file in its folder, fsync, chmod, rename.

    mode defaults to file_mode(); the temporary file is 0600 until the data is in. Missing parent
    folders are made with dir_mode(). Raises InfraError naming the path.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        make_dir(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise InfraError(f"cannot write {path}: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fchmod(fh.fileno(), file_mode() if mode is None else mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InfraError(f"cannot write {path}: {e.strerror or e}") from e
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def open_write(path: Path, mode: int | None = None, *, append: bool = False) -> int:
    """A file descriptor writing path from its start, or appending (created with mode, default
    file_mode()); never through a symlink. For files written as they grow (journal, rank logs).

    Raises OSError (ELOOP when path is a symlink).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    want = file_mode() if mode is None else mode
    fd = os.open(path, flags | os.O_NONBLOCK, want)  # a planted FIFO must not block the open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        if st.st_size == 0 and stat.S_IMODE(st.st_mode) != want:
            os.fchmod(fd, want)  # just created: the umask cut the mode
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_private(path: Path, mode: int | None = None) -> None:
    """Create path empty with mode (default file_mode()) unless it exists; never through a symlink.

    For files another program fills (SQLite creates its -wal/-shm with the database file's mode).
    A symlink to a file that exists is left to its owner's choice; one that leads nowhere is
    refused, since the program would create its target with a mode of its own choosing.
    Raises OSError (ELOOP for a dangling symlink).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if os.path.islink(path) and not os.path.exists(path):
            raise OSError(errno.ELOOP, "a symbolic link to a file that does not exist", str(path)) from None
        return
    try:
        os.fchmod(fd, file_mode() if mode is None else mode)
    finally:
        os.close(fd)


class NotInside(ConfigError):
    """A run-folder file that is a link, not a regular file, or outside the folder: not read."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: not read: {why}", hint="a run folder's files must be its own")
        self.path, self.why = path, why


def inside(root: Path, path: Path) -> str | None:
    """Why path may not be read as a file of root, or None when it may.

    It may when it is a regular file, not a symlink, and its resolved path is inside root's.
    """
    if os.path.islink(path):
        return "is a symbolic link"
    try:
        real = path.resolve(strict=True)
        base = root.resolve(strict=True)
    except (OSError, RuntimeError):
        return "cannot be resolved"
    if not real.is_relative_to(base):
        return f"resolves outside {root}"
    if not real.is_file():
        return "is not a regular file"
    if (links := real.stat().st_nlink) > 1:
        return f"has {links} hard links (another name may be a file that is not the run's)"
    return None


def read_inside(root: Path, path: Path) -> bytes:
    """The bytes of path, a regular file inside root (see inside()).

    Raises NotInside (a ConfigError) naming the file when it is a link, not a regular file, or
    outside root; FileNotFoundError when it does not exist; OSError when it cannot be read.
    """
    if not os.path.lexists(path):
        raise FileNotFoundError(str(path))
    why = inside(root, path)
    if why is not None:
        raise NotInside(path, why)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise NotInside(path, "is not a regular file")
        if st.st_nlink > 1:
            raise NotInside(path, f"has {st.st_nlink} hard links")
        return fh.read()


def read_regular(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of path when it is a regular file. Opened with O_NONBLOCK and checked before any
    read, so a FIFO or a device named on the command line is refused at once instead of hanging.
    With max_bytes, a file larger than that (also one that grows past it while read) is refused.

    Raises OSError (EINVAL "not a regular file", EFBIG "larger than N bytes", or why it cannot be
    opened).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        too_big = OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
        if max_bytes is not None and st.st_size > max_bytes:
            raise too_big
        os.set_blocking(fd, True)
        data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
        if max_bytes is not None and len(data) > max_bytes:
            raise too_big
        return data


def untrusted_folder(path: Path) -> str | None:
    """Why the folder path may not be trusted as the user's own, or None when it may.

    A folder is trusted when it is a real folder (not a symlink), owned by the current user or by
    root, and neither group- nor world-writable: otherwise someone else could have planted or
    changed what it holds (a run folder in a shared runs root, a cron folder). Raises nothing.
    """
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid not in (os.getuid(), 0):
        return f"is owned by uid {st.st_uid}, not by you (uid {os.getuid()}) or root"
    if (mode := stat.S_IMODE(st.st_mode)) & 0o022:
        return f"has mode {mode:04o}: group or others may write into it"
    return None


def private_dir(path: Path) -> Path:
    """Create path 0700 if missing, then check that this user owns it and no one else may enter.

    Raises ConfigError naming the folder, its owner and its mode when it is not private (another
    user made it first in a shared /tmp, or it is group/world accessible), or is a symlink.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise ConfigError(f"cannot create private folder {path}: {e.strerror or e}") from e
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{path} must be a folder of its own, not a link or a file", hint=f"remove {path}")
    if st.st_uid != os.getuid():
        raise ConfigError(
            f"{path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()})",
            hint="another user made it first; remove it or set XDG_RUNTIME_DIR to a private folder",
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise ConfigError(
            f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: others may enter it",
            hint=f"chmod 700 {path}",
        )
    return path


def runtime_path(name: str) -> Path:
    """Where runtime_dir(name) is: $XDG_RUNTIME_DIR/orch/name when that folder exists, else
    <tmp>/orch-<uid>/name. Creates nothing."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and Path(xdg).is_absolute() and Path(xdg).is_dir():
        return Path(xdg) / "orch" / name
    return Path(tempfile.gettempdir()) / f"orch-{os.getuid()}" / name


def runtime_dir(name: str) -> Path:
    """The user's private runtime folder runtime_path(name), created 0700 and checked.

    Raises ConfigError when it, or the orch folder above it, is not private (see private_dir()).
    """
    path = runtime_path(name)
    private_dir(path.parent)
    return private_dir(path)


def json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order; a line that is not a JSON object (a torn
    last line, a stray print) is skipped. A missing file yields nothing."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    yield rec
    except FileNotFoundError:
        return
