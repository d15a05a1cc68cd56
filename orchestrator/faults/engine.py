"""Prepare, inject and revert faults on nodes through their shells; every step is recorded.

    engine = FaultEngine(cluster, shells, record_dir=run.root / "faults")
    with engine.applied(spec) as active:      # sweep done, guards passed, timer armed
        ...                                    # observe
    # reverted here, even on an exception or Ctrl-C; the node's timer covers a SIGKILL of orch

Per-node failures are data (FaultRecord.outcome), except guards, which raise before anything runs.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import FaultError, OrchError
from orchestrator.faults import timer
from orchestrator.faults.base import Action, BuildContext
from orchestrator.faults.catalog import fault_info
from orchestrator.faults.safety import DEFAULT_MAX_SHARE, check_iface, check_share, check_words
from orchestrator.faults.sweep import SweepResult, sweep_node
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.fault import CommandTrace, FaultRecord, FaultSpec
from orchestrator.remote.base import CmdResult, NodeShell
from orchestrator.remote.local import LocalShell
from orchestrator.store.rundir import atomic_write

INJECT_TIMEOUT_S = 30.0


def new_fault_id(kind: str) -> str:
    """Short, unique, shell-plain: ``<kind>-<hex>``."""
    return f"{kind}-{secrets.token_hex(4)}"


@dataclass
class ActiveFault:
    """A fault that was injected (or tried); revert() is safe to call more than once."""

    record: FaultRecord
    action: Action
    shell: NodeShell
    reverted: bool = False
    extra: dict[str, str] = field(default_factory=dict)


class FaultEngine:
    """Faults on one cluster. ``shells`` maps node name to its NodeShell (kept-open SSH)."""

    def __init__(
        self,
        cluster: Cluster,
        shells: Mapping[str, NodeShell],
        *,
        record_dir: Path | None = None,
        max_share: float = DEFAULT_MAX_SHARE,
        ssh_ifaces: Mapping[str, str | None] | None = None,
        controller: NodeShell | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.shells = shells
        self.record_dir = record_dir
        self.max_share = max_share
        self.ssh_ifaces = dict(ssh_ifaces or {})
        self.controller = controller or LocalShell()
        self.clock = clock

    # --- sweep ------------------------------------------------------------------------------
    def sweep(self, nodes: list[str] | None = None) -> list[SweepResult]:
        """Remove everything tagged as orch's from the nodes; raises FaultError on a failed sweep."""
        names = nodes or list(self.shells)
        return [sweep_node(self.shells[n], n) for n in names]

    # --- prepare ----------------------------------------------------------------------------
    def prepare(self, spec: FaultSpec) -> ActiveFault:
        """Check guards, resolve PIDs/containers, build the action; nothing is changed on the node.

        Raises:
            SafetyError: a guard refused the fault (nothing ran).
            ConfigError: an unknown kind (the message lists the known ones).
            FaultError: the target cannot be resolved.
        """
        info = fault_info(spec.kind)
        check_words(spec)
        node = self.cluster.node(spec.target.node)
        check_share([node.name], len(self.cluster.nodes), force=spec.force, max_share=self.max_share)
        shell = self._shell(node)
        check_iface(spec, node, self._ssh_iface(node, shell))
        ctx = BuildContext(spec, node, shell, new_fault_id(spec.kind), self.cluster.vars.orch_slurm_conf)
        action = info.build(ctx)
        record = FaultRecord(
            id=ctx.fid,
            kind=spec.kind,
            node=node.name,
            target=str(spec.target),
            spec=spec,
            transports=list(info.transports),
            outcome="failed",
            message="prepared, not injected",
            resolved=ctx.resolved,
        )
        return ActiveFault(
            record=record, action=action, shell=self.controller if action.on_controller else shell
        )

    def _shell(self, node: Node) -> NodeShell:
        try:
            return self.shells[node.name]
        except KeyError as e:
            raise FaultError(f"no connection to {node.name}") from e

    def _ssh_iface(self, node: Node, shell: NodeShell) -> str | None:
        if node.name not in self.ssh_ifaces:
            probe = getattr(shell, "ssh_iface", None)
            self.ssh_ifaces[node.name] = probe() if callable(probe) else None
        return self.ssh_ifaces[node.name]

    # --- inject / revert ---------------------------------------------------------------------
    def inject(self, active: ActiveFault) -> ActiveFault:
        """Arm the node-side timer and inject, in one round trip; the record says how it went.

        Never raises for node-side failures (outcome "failed"/"unsupported"); raises FaultError
        only when the node cannot be reached at all.
        """
        rec, act = active.record, active.action
        spec = rec.spec
        fires = spec.duration_s + spec.margin_s
        script = (
            timer.arm_and_inject(rec.node, rec.id, act.revert, fires, act.inject) if act.timer else act.inject
        )
        rec.t_call_mono = self.clock()
        try:
            res = active.shell.run_script(script, timeout=INJECT_TIMEOUT_S)
        except OrchError as e:
            rec.message = f"inject did not complete: {e}"
            self._save(rec)
            raise FaultError(f"{rec.node}: {rec.kind} inject did not complete: {e}") from e
        rec.t_active_mono = self.clock()
        rec.inject_latency_s = rec.t_active_mono - rec.t_call_mono
        rec.injected_at_mono = rec.t_call_mono if act.instant == "call" else rec.t_active_mono
        rec.commands.append(_trace("inject", script, res))
        if act.timer:
            rec.timer_pid = timer.parse_timer_pid(res.stdout)
            rec.timer_fires_after_s = fires
        if res.ok:
            rec.outcome, rec.message = "active", "injected"
        else:
            rec.outcome = "failed"
            rec.message = res.brief()
            for text, outcome in act.unsupported:
                if text in res.stderr:
                    rec.outcome, rec.message = "unsupported", outcome
            # Nothing is active: cancel the timer and remove the record now.
            if act.timer:
                self._run_revert(active, "cancel")
                active.reverted = True
        self._save(rec)
        return active

    def revert(self, active: ActiveFault) -> FaultRecord:
        """Revert (idempotent): cancel the timer, undo, remove the node-side record.

        Raises FaultError when the node cannot be reached (its timer will still revert it).
        """
        rec = active.record
        if active.reverted:
            return rec
        if active.action.revert or active.action.timer:
            self._run_revert(active, "revert")
        rec.t_revert_mono = self.clock()
        active.reverted = True
        if rec.outcome == "active":
            rec.outcome = "reverted" if active.action.revert else "active"
            rec.message = "reverted" if active.action.revert else "done (nothing to revert)"
        self._save(rec)
        return rec

    def _run_revert(self, active: ActiveFault, what: str) -> None:
        rec = active.record
        script = timer.cancel_and_revert(rec.node, rec.id, active.action.revert or ":")
        try:
            res = active.shell.run_script(script, timeout=INJECT_TIMEOUT_S)
        except OrchError as e:
            self._save(rec)
            raise FaultError(
                f"{rec.node}: {rec.kind} {what} failed: {e}",
                hint="the node-side timer reverts it; `orch fault sweep` cleans up",
            ) from e
        rec.commands.append(_trace(what, script, res))

    @contextlib.contextmanager
    def applied(self, spec: FaultSpec) -> Iterator[ActiveFault]:
        """Prepare and inject; revert on exit, whatever happens inside."""
        active = self.prepare(spec)
        try:
            self.inject(active)
            yield active
        finally:
            self.revert(active)

    def _save(self, rec: FaultRecord) -> None:
        if self.record_dir is not None:
            atomic_write(self.record_dir / f"{rec.id}.json", rec.model_dump_json(indent=2) + "\n")


def _trace(what: str, script: str, res: CmdResult) -> CommandTrace:
    return CommandTrace(
        what=what, script=script, rc=res.rc, stderr=res.stderr[-2000:], elapsed_s=res.elapsed_s
    )
