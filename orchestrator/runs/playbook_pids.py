"""The ansible-playbook processes a run started, recorded in its folder, and stopped on resume.

A provisioning that orch runs has ansible-playbook (and its workers, and their ssh) below orch.
When orch is killed (SIGKILL: no handler runs), they go on, re-parented, still changing nodes.
`orch runs resume` of a migrate run must stop them first, and only them: while the playbook runs,
a watcher thread records every ansible-playbook process below orch (PID, start time, command line)
in the run folder; resume stops a recorded PID only when a process with that PID still exists,
started at the recorded time (a PID reused by another program is left alone), and runs
ansible-playbook. Its descendants are stopped with it (remote/proctree.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil

from orchestrator.models.base import StrictModel
from orchestrator.remote.proctree import descendants, stop_processes
from orchestrator.safefs import atomic_write

POLL_S = 0.2
NAME = "ansible-playbook"


class PlaybookProcess(StrictModel):
    pid: int
    create_time: float
    cmdline: list[str]


def is_playbook(cmdline: list[str]) -> bool:
    """ansible-playbook itself (`ansible-playbook …` or `python …/ansible-playbook …`)."""
    return any(os.path.basename(a) == NAME for a in cmdline[:2])


def read_records(path: Path) -> list[PlaybookProcess]:
    """The recorded processes; [] when there is no file or it is damaged (nothing is stopped then)."""
    try:
        doc = json.loads(path.read_text())
        return [PlaybookProcess.model_validate(d) for d in doc] if isinstance(doc, list) else []
    except (OSError, ValueError):
        return []


def _scan(known: dict[int, PlaybookProcess]) -> bool:
    changed = False
    try:
        procs = psutil.Process().children(recursive=True)
    except psutil.Error:
        return False
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.pid not in known and is_playbook(p.cmdline()):
                known[p.pid] = PlaybookProcess(pid=p.pid, create_time=p.create_time(), cmdline=p.cmdline())
                changed = True
    return changed


@contextlib.contextmanager
def recording(path: Path, poll_s: float = POLL_S) -> Iterator[None]:
    """Record, while the block runs, every ansible-playbook below this process into `path`
    (JSON, rewritten atomically each time one appears; earlier records kept)."""
    known = {r.pid: r for r in read_records(path)}
    stop = threading.Event()

    def loop() -> None:
        while True:
            if _scan(known):
                atomic_write(path, json.dumps([r.model_dump() for r in known.values()]) + "\n")
            if stop.wait(poll_s):
                return

    t = threading.Thread(target=loop, name="playbook-pids", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=5)


def left_behind(path: Path) -> list[psutil.Process]:
    """The recorded ansible-playbook processes still running: same PID, same start, same program."""
    out: list[psutil.Process] = []
    for r in read_records(path):
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(r.pid)
            if abs(p.create_time() - r.create_time) < 0.05 and is_playbook(p.cmdline()):
                out.append(p)
    return out


def stop_left_behind(path: Path, grace: float = 5.0) -> list[int]:
    """Stop the recorded playbooks still running, and everything below them; their PIDs."""
    procs = left_behind(path)
    if not procs:
        return []
    stop_processes(descendants(procs), grace=grace)
    return [p.pid for p in procs]
