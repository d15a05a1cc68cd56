"""Where the nodes' orch comes from: the cpu stack's wheelhouse needs an orch wheel.

orch on the controller may run from a source tree (a checkout, an editable install) or from an
installed wheel, where there is no source to build. In order, the first that applies:

1. a wheel file named by the user: ``orch provision --orch-wheel PATH`` (or ``ORCH_WHEEL``);
2. orch's own source tree, when the running package sits in one: ``pip wheel`` builds it;
3. the wheel file orch was installed from, as pip recorded it (``direct_url.json``, PEP 610),
   while that file still exists and still has the hash pip recorded.

Otherwise (installed from an index, or the wheel file is gone) provisioning a cpu stack is refused
with a hint: pip cannot rebuild a wheel from an installed distribution.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

import orchestrator
from orchestrator import __version__
from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel

DIST = "orch"
# pip names the file {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl (PEP 427).
_WHEEL_NAME = re.compile(r"^orch-(?P<version>[^-]+)-(?:\d[^-]*-)?[^-]+-[^-]+-[^-]+\.whl$")
_HINT = (
    "name orch's wheel with --orch-wheel PATH or ORCH_WHEEL=PATH (the file orch was installed "
    f"from, or one built with `pip wheel --no-deps` from orch {__version__}'s source)"
)


class OrchSource(StrictModel):
    """What `pip wheel` is given for orch, and the line that stamps the wheelhouse built from it."""

    kind: Literal["tree", "wheel"]
    path: Path
    stamp: str


def source_tree(package_dir: Path | None = None) -> Path | None:
    """The source tree the running orch package lies in (its pyproject names project orch), or None."""
    pkg = package_dir or Path(orchestrator.__file__).resolve().parent
    root = pkg.parent
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return root if isinstance(project, dict) and project.get("name") == DIST else None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, in hex; raises OSError when it cannot be read."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def tree_digest(root: Path) -> str:
    """A line naming the hash of orch's source tree.

    The orch wheel keeps its version while the code changes; without this the wheelhouse (and so
    the nodes) would keep running the workload as it was when the wheelhouse was first built.
    """
    h = hashlib.sha256()
    for f in [root / "pyproject.toml", *sorted((root / "orchestrator").rglob("*"))]:
        if f.is_file() and f.suffix in {".py", ".toml", ".yaml", ".yml", ".ini", ".j2", ".typed"}:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return f"# orch source {h.hexdigest()}\n"


def wheel_source(path: Path) -> OrchSource:
    """An orch wheel file of this version; raises ConfigError naming the file when it is not one."""
    m = _WHEEL_NAME.match(path.name)
    if m is None:
        raise ConfigError(f"{path}: not an orch wheel (orch-VERSION-…-none-any.whl)", hint=_HINT)
    if m["version"] != __version__:
        raise ConfigError(
            f"{path}: orch {m['version']}, but this is orch {__version__}: the nodes must run the same",
            hint=_HINT,
        )
    try:
        digest = file_sha256(path)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the orch wheel: {e}", hint=_HINT) from e
    return OrchSource(kind="wheel", path=path.absolute(), stamp=f"# orch wheel {digest}\n")


def installed_from(dist: metadata.Distribution) -> Path | None:
    """The local wheel file `dist` was installed from (PEP 610 direct_url.json), or None.

    Raises ConfigError when the file pip recorded has changed since (another hash).
    """
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        return None
    url = urlparse(str(info.get("url", "")))
    archive = info.get("archive_info")
    if url.scheme != "file" or not isinstance(archive, dict) or not url.path.endswith(".whl"):
        return None
    path = Path(unquote(url.path))
    if not path.is_file():
        return None
    hashes = archive.get("hashes") or {}
    legacy = str(archive.get("hash", ""))
    wanted = hashes.get("sha256") or (legacy.split("=", 1)[1] if legacy.startswith("sha256=") else None)
    if wanted and file_sha256(path) != wanted:
        raise ConfigError(
            f"{path}: orch was installed from this wheel, but the file has changed since", hint=_HINT
        )
    return path


def resolve(explicit: Path | None = None) -> OrchSource:
    """Where the nodes' orch wheel comes from (see the module's docstring).

    Raises ConfigError when there is none, or when the wheel named is not this orch's.
    """
    if explicit is not None:
        return wheel_source(explicit)
    root = source_tree()
    if root is not None:
        return OrchSource(kind="tree", path=root, stamp=tree_digest(root))
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        dist = None
    wheel = installed_from(dist) if dist is not None else None
    if wheel is None:
        raise ConfigError(
            "no orch wheel for the nodes: orch runs from no source tree, and the wheel file it was "
            "installed from is not known or no longer exists",
            hint=_HINT,
        )
    return wheel_source(wheel)
