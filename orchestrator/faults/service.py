"""Service functions behind `orch fault …` and `orch recovery-test` (the CLI stays thin)."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.errors import FaultError, RemoteError
from orchestrator.faults.engine import FaultEngine
from orchestrator.faults.sweep import SweepResult
from orchestrator.models.cluster import Cluster
from orchestrator.models.fault import FaultRecord, FaultSpec
from orchestrator.remote.shells import node_shells


def sweep(cluster: Cluster) -> list[SweepResult]:
    """Sweep every node; a node that cannot be swept is a result with `error`, the others go on."""
    results: list[SweepResult] = []
    with node_shells(cluster) as shells:
        engine = FaultEngine(cluster, shells)
        for name in shells:
            try:
                results += engine.sweep([name])
            except (RemoteError, FaultError) as e:
                results.append(SweepResult(node=name, found=[], error=e.message))
    return results


def inject_for(cluster: Cluster, spec: FaultSpec, record_dir: Path | None) -> FaultRecord:
    """Start-up sweep of the target node, inject, hold for the duration, revert (in finally).

    Raises SafetyError before anything runs when a guard refuses; FaultError/RemoteError when the
    node cannot be reached (its timer reverts the fault anyway).
    """
    with node_shells(cluster) as shells:
        engine = FaultEngine(cluster, shells, record_dir=record_dir)
        active = engine.prepare(spec)
        engine.sweep([spec.target.node])
        try:
            engine.inject(active)
            if active.record.outcome == "active" and active.action.revert:
                until = (active.record.t_active_mono or time.monotonic()) + spec.duration_s
                time.sleep(max(until - time.monotonic(), 0.0))
        finally:
            engine.revert(active)
        return active.record
