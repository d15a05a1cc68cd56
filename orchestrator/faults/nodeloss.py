"""node-loss: take a node away from Slurm.

Two honest forms. ``stop-slurmd`` SIGSTOPs the node's slurmd: the controller stops hearing from
it, marks it DOWN after SlurmdTimeout and its jobs end NODE_FAIL, as when a node dies; SIGCONT
brings it back (ReturnToService=2) without restarting a daemon that someone else started.
``scontrol-down`` is what a real cluster's admin would do: an administrative DOWN, run on the
controller side; it ends jobs the same way but says nothing about how a dead node is noticed.
"""

from __future__ import annotations

from orchestrator.faults.base import Action, quiet, sh


def stop_slurmd(pids: list[int]) -> Action:
    """SIGSTOP the node's slurmd; SIGCONT on revert."""
    ids = list(map(str, pids))
    return Action(inject=sh("kill", "-s", "STOP", *ids), revert=quiet(sh("kill", "-s", "CONT", *ids)))


def scontrol_down(node: str, fid: str) -> Action:
    """Administrative DOWN (run where scontrol reaches the controller); resume on revert."""
    down = sh("scontrol", "update", f"nodename={node}", "state=down", f"reason=orch-fault:{fid}")
    up = quiet(sh("scontrol", "update", f"nodename={node}", "state=resume"))
    return Action(inject=down, revert=up)
