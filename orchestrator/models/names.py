"""Names that become identifiers: in job scripts, Slurm job names, folder names and the store.

A plan's name, a step id, a job name and a run id end up in places that no quoting protects:
`#SBATCH --job-name=` (read by sbatch, not by a shell), a run folder under `--out`, the folder of
a step under its run. So they are checked once, here, at the model boundary (a plan file, the CLI,
a run folder read back by `orch runs resume` or a report) against one strict pattern:

    ^[A-Za-z0-9][A-Za-z0-9_.-]*$      at most 64 characters (names), 160 (ids built from names)

letters, digits, '_', '.' and '-', starting with a letter or digit: no space, newline, quote,
shell or glob character, no '/', so never '..' as a path part, and never a leading '-' that a
program would read as an option. Run ids and job names are built from a plan name and a step id
with fixed text around them, hence their larger limit.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

NAME_MAX = 64
ID_MAX = 160
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_name(value: str, *, what: str = "name", max_len: int = NAME_MAX) -> str:
    """value when it matches the identifier pattern (see the module doc); raises ValueError naming
    what it is and the value otherwise."""
    if not _NAME_RE.fullmatch(value) or len(value) > max_len:
        raise ValueError(
            f"{what} {value!r} is not a valid name: letters, digits, '_', '.', '-' only, starting "
            f"with a letter or digit, at most {max_len} characters"
        )
    return value


def is_name(value: str, max_len: int = NAME_MAX) -> bool:
    """Whether value matches the identifier pattern."""
    return bool(_NAME_RE.fullmatch(value)) and len(value) <= max_len


def _name(v: str) -> str:
    return check_name(v)


def _long_id(v: str) -> str:
    return check_name(v, what="id", max_len=ID_MAX)


Name = Annotated[str, AfterValidator(_name)]
"""A plan name, a step id, a cron entry's name: the identifier pattern, at most 64 characters."""

LongId = Annotated[str, AfterValidator(_long_id)]
"""A run id or a job name (built from names): the identifier pattern, at most 160 characters."""
