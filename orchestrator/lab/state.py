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

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks since boot (field 22 of /proc/PID/stat), or None.

    Unlike a start time in seconds since the epoch (psutil's ``create_time``, which adds the boot
    time as the wall clock sees it now), it does not move when the clock is stepped: by NTP, or
    when a virtual machine is paused and its clock put right on resume. A lab whose clock moved by
    more than a second once looked dead to `status` while every daemon still ran.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    _, sep, rest = raw.rpartition(")")  # the command name may hold spaces and parentheses
    fields = rest.split()
    if not sep or len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])


def boot_id() -> str | None:
    """The kernel's boot id (new at every boot), or None where it cannot be read."""
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


class DaemonRecord(StrictModel):
    """One daemon started by `up`: its PID and start (to tell it from a reused PID).

    ``start_ticks`` and ``boot_id`` identify the process whatever the wall clock does;
    ``create_time`` is kept for records written before them and for people reading the file.
    """

    name: str
    pid: int
    create_time: float
    start_ticks: int | None = None
    boot_id: str | None = None
    node: str | None = None
    argv: list[str]
    log: str | None = None

    def process(self) -> psutil.Process | None:
        """The live process, or None when it is gone (or its PID now belongs to another)."""
        try:
            proc = psutil.Process(self.pid)
            if self.start_ticks is not None:
                if start_ticks(self.pid) != self.start_ticks or (
                    self.boot_id is not None and boot_id() != self.boot_id
                ):
                    return None
            elif abs(proc.create_time() - self.create_time) > 1.0:
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
