"""Paths built from data stay inside their root.

A run folder is `--out/<run id>`, a step's folder is `<run>/steps/<step id>`, a killed attempt is
kept as `<run>/attempts/<step id>.<n>`, a cron entry's script is `<out>/cron/<name>.sbatch`. The
run id, step id and entry name come from files a user can edit (a plan, steps.json of a run
folder). `under()` is the one way such a path is built: each part must be one plain path
component, and the result, with symlinks resolved, must lie inside the root (also resolved).
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.errors import ConfigError


def under(root: Path, *parts: str, what: str = "path") -> Path:
    """root/part/..., refused when it would leave root.

    Each part is one path component: not empty, not '.' or '..', without '/' or NUL. The joined
    path, resolved (symlinks followed, missing tails allowed), must be root itself or inside the
    resolved root: a symlink planted in the run folder that points elsewhere is refused too.
    Raises ConfigError naming `what`, the part and the root.
    """
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\x00" in part or (os.altsep and os.altsep in part):
            raise ConfigError(
                f"{what} {part!r} is not a plain name: it would leave {root}",
                hint="names in plans and run folders use letters, digits, '_', '.', '-' only",
            )
    path = root.joinpath(*parts)
    try:
        base = root.resolve()
        real = path.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise ConfigError(f"{what} {path} cannot be resolved: {e}") from e
    if real != base and not real.is_relative_to(base):
        raise ConfigError(f"{what} {path} resolves to {real}, outside {root}")
    return path
