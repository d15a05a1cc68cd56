"""The run directory: resolved inputs, an append-only journal, raw logs, reports.

Every event is one JSON line, flushed and fsync'd before the call returns, so a run killed at any
point leaves a readable journal. Whole files are written to a fresh temporary name and renamed
(orchestrator.safefs.atomic_write); the folder is 0700 and its files 0600 unless
ORCH_GROUP_READABLE=1 (0750 / 0640).
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import shlex
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.errors import ConfigError, InfraError
from orchestrator.models.names import ID_MAX, check_name
from orchestrator.paths import under
from orchestrator.safefs import atomic_write, make_dir, open_write, read_inside

__all__ = ["RunDir", "atomic_write", "check_run_id", "json_data", "new_run_id", "who"]


def json_data(text: str | bytes) -> Any:
    """json.loads, with lone surrogates (a "\\ud800" escape) made U+FFFD: they cannot be written
    back as UTF-8 (a report of them would crash). Raises json.JSONDecodeError / UnicodeDecodeError."""
    return _fix_surrogates(json.loads(text))


def _fix_surrogates(obj: Any) -> Any:
    if isinstance(obj, str):
        return obj.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(obj, list):
        return [_fix_surrogates(v) for v in obj]
    if isinstance(obj, dict):
        return {_fix_surrogates(k): _fix_surrogates(v) for k, v in obj.items()}
    return obj


def new_run_id(plan_name: str) -> str:
    """A sortable, unique id: UTC time, plan name, a short random suffix."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return check_run_id(f"{stamp}-{plan_name}-{secrets.token_hex(2)}")


def check_run_id(run_id: str) -> str:
    """run_id when it is a valid run id (models/names.py); raises ConfigError naming it."""
    try:
        return check_name(run_id, what="run id", max_len=ID_MAX)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def who() -> dict[str, Any]:
    """Who/what/where for run_started: the report's header and the running-or-interrupted test."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"pid": os.getpid(), "host": os.uname().nodename, "user": user, "command": shlex.join(sys.argv)}


class RunDir:
    """runs/<id>/ with journal.jsonl and per-step folders."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.journal_path = root / "journal.jsonl"

    @classmethod
    def create(cls, base: Path, run_id: str) -> RunDir:
        """Make a new run directory under base.

        Raises:
            ConfigError: base (or a folder above it) is a file (see check_base), or run_id is not
                a valid run id (or would leave base).
            InfraError: the folder cannot be made.
        """
        cls.check_base(base)
        root = under(base, check_run_id(run_id), what="run directory")
        try:
            make_dir(root, exist_ok=False)
        except OSError as e:
            raise InfraError(f"cannot create run directory {root}: {e.strerror}") from e
        return cls(root)

    @staticmethod
    def check_base(base: Path) -> None:
        """Refuse a root of run directories that is a file, or lies below one (a usage error).

        Raises:
            ConfigError: names the file in the way.
        """
        for folder in (base, *base.parents):
            if folder.exists():
                if not folder.is_dir():
                    raise ConfigError(
                        f"run directories cannot go under {base}: {folder} is a file",
                        hint="--out names a folder for the run directories (default: runs)",
                    )
                return

    @property
    def run_id(self) -> str:
        return self.root.name

    def step_dir(self, step_id: str) -> Path:
        """steps/<step_id>/ of the run, made if missing; raises ConfigError when step_id would leave it."""
        path = under(self.root, "steps", step_id, what="step folder")
        make_dir(path)  # steps/ and steps/<id>: 0700 (0750 shared), never the umask's
        return path

    def write_model(self, name: str, model: BaseModel) -> Path:
        """Save a model as JSON (e.g. plan.json, inventory.json)."""
        path = self.root / name
        atomic_write(path, model.model_dump_json(indent=2) + "\n")
        return path

    def event(self, kind: str, /, **fields: Any) -> None:
        """Append one event to the journal, durable when this returns."""
        record = {"t": datetime.now(UTC).isoformat(), "mono": time.monotonic(), "event": kind, **fields}
        line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
        try:
            with os.fdopen(open_write(self.journal_path, append=True), "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as e:
            raise InfraError(f"cannot append to {self.journal_path}: {e.strerror or e}") from e

    def events(self) -> Iterator[dict[str, Any]]:
        """The journal's events in order; a torn last line (a crash mid-write) is skipped.

        Raises ConfigError when the journal is a symlink or leads out of the run folder.
        """
        if not os.path.lexists(self.journal_path):
            return
        try:
            text = read_inside(self.root, self.journal_path).decode("utf-8", errors="replace")
        except OSError as e:
            raise InfraError(f"cannot read {self.journal_path}: {e.strerror or e}") from e
        for line in text.split("\n"):
            try:
                yield json_data(line)
            except json.JSONDecodeError:
                continue
