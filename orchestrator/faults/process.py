"""kill-worker and pause-worker: signals to ranks found on the node by PID."""

from __future__ import annotations

from orchestrator.faults.base import Action, quiet, sh
from orchestrator.models.fault import FaultSpec


def kill_worker(spec: FaultSpec, pids: list[int]) -> Action:
    """Signal the ranks; nothing to revert (restarting them is the job's work)."""
    return Action(inject=sh("kill", "-s", spec.params.signal, *map(str, pids)), timer=False)


def pause_worker(spec: FaultSpec, pids: list[int]) -> Action:
    """SIGSTOP now, SIGCONT on revert (and by the node-side timer)."""
    ids = list(map(str, pids))
    return Action(inject=sh("kill", "-s", "STOP", *ids), revert=quiet(sh("kill", "-s", "CONT", *ids)))
