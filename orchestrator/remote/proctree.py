"""Stop local process trees by PID: SIGTERM, a short grace, then SIGKILL.

Used wherever orch must leave nothing running behind it: the lab's daemons, and the
ansible-playbook tree of an interrupted provision (whose workers each run in their own session,
so killing the playbook's process group alone leaves them, and their ssh, running).
"""

from __future__ import annotations

import contextlib
import os

import psutil


def self_and_ancestors() -> set[int]:
    """This process and its ancestors: never targets of a stop."""
    pids = {os.getpid()}
    try:
        for parent in psutil.Process().parents():
            pids.add(parent.pid)
    except psutil.Error:
        pass
    return pids


def descendants(roots: list[psutil.Process]) -> list[psutil.Process]:
    """`roots` and every process below them, as they are now (vanished ones skipped)."""
    found: dict[int, psutil.Process] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            found.setdefault(root.pid, root)
            for child in root.children(recursive=True):
                found.setdefault(child.pid, child)
    return list(found.values())


def signal_all(procs: list[psutil.Process]) -> None:
    """SIGTERM each of `procs` (vanished ones skipped); returns at once."""
    me = self_and_ancestors()
    for p in procs:
        if p.pid not in me:
            with contextlib.suppress(psutil.Error):
                p.terminate()


def stop_processes(procs: list[psutil.Process], *, grace: float = 8.0) -> list[int]:
    """SIGTERM ``procs``, wait up to ``grace`` seconds, SIGKILL what is left; return PIDs killed."""
    me = self_and_ancestors()
    procs = [p for p in procs if p.pid not in me]
    signal_all(procs)
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    return [p.pid for p in procs]
