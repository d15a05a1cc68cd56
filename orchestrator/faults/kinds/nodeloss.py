"""node-loss: take a node away from Slurm.

Two honest forms. ``stop-slurmd`` SIGSTOPs the node's slurmd: the controller stops hearing from
it, marks it DOWN after SlurmdTimeout and its jobs end NODE_FAIL, as when a node dies. The revert
SIGCONTs it (without restarting a daemon someone else started) and, if the controller still has
the node DOWN, resumes it (`scontrol update state=resume`). ReturnToService=2 would bring it back
by itself once slurmd answers; the resume makes that explicit and covers ReturnToService=0/1.
A node that someone drained is never resumed: only plain DOWN states are.
``scontrol-down`` is what a real cluster's admin would do: an administrative DOWN, run on the
controller side; it ends jobs the same way but says nothing about how a dead node is noticed.

The revert lines run on the node (the node-side timer runs them too if orch dies), so scontrol
and sinfo there get the inventory's ``orch_slurm_conf`` as SLURM_CONF when it has one.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.faults.base import ALL_TRANSPORTS, Action, BuildContext, FaultInfo, quiet, sh
from orchestrator.faults.resolve import find_processes


def _slurm(slurm_conf: Path | None, *argv: str) -> str:
    return sh("env", f"SLURM_CONF={slurm_conf}", *argv) if slurm_conf else sh(*argv)


def resume_if_down(node: str, slurm_conf: Path | None) -> str:
    """Resume ``node`` only when the controller has it DOWN (down, down*), never when drained."""
    state = _slurm(slurm_conf, "sinfo", "-h", "-n", node, "-o", "%T")
    resume = _slurm(slurm_conf, "scontrol", "update", f"nodename={node}", "state=resume")
    return quiet(f"if {state} | grep -qx 'down[*]\\{{0,1\\}}'; then {resume}; fi")


def stop_slurmd(pids: list[int], node: str = "", slurm_conf: Path | None = None) -> Action:
    """SIGSTOP the node's slurmd; on revert SIGCONT, then resume the node if Slurm has it DOWN."""
    ids = list(map(str, pids))
    revert = quiet(sh("kill", "-s", "CONT", *ids))
    if node:
        revert = f"{revert}; {resume_if_down(node, slurm_conf)}"
    return Action(inject=sh("kill", "-s", "STOP", *ids), revert=revert)


def scontrol_down(node: str, fid: str, slurm_conf: Path | None = None) -> Action:
    """Administrative DOWN (run where scontrol reaches the controller); resume on revert."""
    reason = f"reason=orch-fault:{fid}"
    down = _slurm(slurm_conf, "scontrol", "update", f"nodename={node}", "state=down", reason)
    up = quiet(_slurm(slurm_conf, "scontrol", "update", f"nodename={node}", "state=resume"))
    return Action(inject=down, revert=up, on_controller=True)


def _build(ctx: BuildContext) -> Action:
    if ctx.spec.params.node_loss_mode == "scontrol-down":
        return scontrol_down(ctx.node.name, ctx.fid, ctx.slurm_conf)
    found = find_processes(ctx.shell, ctx.node.name, rank=None, comm="slurmd")
    ctx.resolved.extend(str(pid) for pid, _ in found)
    return stop_slurmd([pid for pid, _ in found], ctx.node.name, ctx.slurm_conf)


KINDS = (
    FaultInfo(
        "node-loss",
        ALL_TRANSPORTS,
        "SIGCONT slurmd / scontrol update state=resume",
        True,
        "take the node away from Slurm (stop its slurmd, or scontrol state=down) -> NODE_FAIL",
        build=_build,
        order=100,
        finds_processes=True,
    ),
)
