"""The record of a running lab: what `up` made, so that `down` can undo it by PID and by name.

Saved as JSON in the state dir, written atomically (temp file + rename) after every daemon start,
so that a crashed `up` still leaves a usable record.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import psutil
from pydantic import ValidationError

from orchestrator.errors import LabError
from orchestrator.lab.config import LabConfig
from orchestrator.models.base import StrictModel
from orchestrator.safefs import atomic_write


class DaemonRecord(StrictModel):
    """One daemon started by `up`: its PID and start time (to tell it from a reused PID)."""

    name: str
    pid: int
    create_time: float
    node: str | None = None
    argv: list[str]
    log: str | None = None

    def process(self) -> psutil.Process | None:
        """The live process, or None when it is gone (or its PID now belongs to another)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > 1.0:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None

    def alive(self) -> bool:
        """True while the recorded process runs."""
        return self.process() is not None


class LabState(StrictModel):
    """What `up` created; `down` reads it and removes each piece."""

    config: LabConfig
    started_at: datetime
    daemons: list[DaemonRecord] = []
    complete: bool = False

    def daemon(self, name: str) -> DaemonRecord | None:
        """The record named ``name`` (e.g. ``slurmctld``, ``sshd@node1``), if any."""
        for d in self.daemons:
            if d.name == name:
                return d
        return None


def save_state(state: LabState, path: Path) -> None:
    """Write ``state`` to ``path`` atomically (fresh temp file in the same folder, fsync, rename)."""
    atomic_write(path, state.model_dump_json(indent=2), 0o600)


def load_state(path: Path) -> LabState | None:
    """Read the lab record; None when there is none.

    Raises:
        LabError: the file exists but cannot be read or is not a lab record.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LabError(f"cannot read lab state {path}: {e}") from e
    try:
        return LabState.model_validate_json(text)
    except ValidationError as e:
        raise LabError(
            f"lab state {path} is not readable as a lab record",
            hint="run `orch lab down` to clear what is left, then `orch lab up`",
        ) from e
