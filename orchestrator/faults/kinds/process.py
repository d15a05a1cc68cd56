"""kill-worker and pause-worker: signals to ranks found on the node by PID."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.faults.base import ALL_TRANSPORTS, Action, BuildContext, FaultInfo, quiet, sh
from orchestrator.faults.resolve import target_processes
from orchestrator.models.fault import FaultKind, FaultSpec


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


_Signal = Callable[[FaultSpec, list[int]], Action]
# kind, revert, held for the duration (node-side timer), what it does, the signal's Action, order
_ROWS: tuple[tuple[FaultKind, str, bool, str, _Signal, int], ...] = (
    ("kill-worker", "none (the job must restart it)", False,
     "send SIGKILL (or --signal) to one rank, every rank on the node, or a serving engine's processes",
     kill_worker, 10),
    ("pause-worker", "SIGCONT", True, "SIGSTOP a rank for the duration: a hung or straggling rank",
     pause_worker, 20),
)  # fmt: skip


def _builder(act: _Signal) -> Callable[[BuildContext], Action]:
    return lambda ctx: act(ctx.spec, worker_pids(ctx))


KINDS = tuple(
    FaultInfo(kind, ALL_TRANSPORTS, revert, held, summary, _builder(act), order, finds_processes=True)
    for kind, revert, held, summary, act, order in _ROWS
)
