"""kill-worker and pause-worker: signals to ranks found on the node by PID."""

from __future__ import annotations

from orchestrator.faults.base import ALL_TRANSPORTS, Action, BuildContext, FaultInfo, quiet, sh
from orchestrator.faults.resolve import target_processes
from orchestrator.models.fault import FaultSpec


def kill_worker(spec: FaultSpec, pids: list[int]) -> Action:
    """Signal the ranks; nothing to revert (restarting them is the job's work)."""
    return Action(inject=sh("kill", "-s", spec.params.signal, *map(str, pids)), timer=False)


def pause_worker(spec: FaultSpec, pids: list[int]) -> Action:
    """SIGSTOP now, SIGCONT on revert (and by the node-side timer)."""
    ids = list(map(str, pids))
    return Action(inject=sh("kill", "-s", "STOP", *ids), revert=quiet(sh("kill", "-s", "CONT", *ids)))


def worker_pids(ctx: BuildContext) -> list[int]:
    """PIDs of the target's ranks (or of its serving engine); raises FaultError when none is found."""
    return [pid for pid, _ in target_processes(ctx)]


KINDS = (
    FaultInfo(
        "kill-worker",
        ALL_TRANSPORTS,
        "none (the job must restart it)",
        False,
        "send SIGKILL (or --signal) to one rank, every rank on the node, or a serving engine's processes",
        build=lambda ctx: kill_worker(ctx.spec, worker_pids(ctx)),
        order=10,
        finds_processes=True,
    ),
    FaultInfo(
        "pause-worker",
        ALL_TRANSPORTS,
        "SIGCONT",
        True,
        "SIGSTOP a rank for the duration: a hung or straggling rank",
        build=lambda ctx: pause_worker(ctx.spec, worker_pids(ctx)),
        order=20,
        finds_processes=True,
    ),
)
