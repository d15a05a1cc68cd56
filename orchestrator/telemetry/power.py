"""A serving level's GPU power from the run's telemetry sampler (sampler.py, the one that samples
ladder steps): per node, the mean over samples of the power of every GPU the tool listed, summed
(the node is paid whole, its idle GPUs too), with the count of samples, or why there is none.
This is GPU board power as the smi tools print it, not the host's CPUs, memory or fans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean

from orchestrator.models.telemetry import LevelPower, NodePower, NodeTelemetry


def node_power(rec: NodeTelemetry) -> NodePower:
    """One node's samples: the mean of each sample's GPUs' power summed, over the samples where
    every GPU listed printed a power."""
    sums = [
        sum(g.power_w or 0.0 for g in s.gpus)
        for s in rec.samples
        if s.gpus and all(g.power_w is not None for g in s.gpus)
    ]
    gpus = max((len(s.gpus) for s in rec.samples), default=0)
    if sums:
        return NodePower(node=rec.node, mean_w=fmean(sums), samples=len(sums), gpus=gpus)
    if not rec.samples:
        why = f"no sample from {rec.node} ({rec.tool})" + (f": {rec.errors[0]}" if rec.errors else "")
    else:
        why = f"{rec.tool} on {rec.node} printed no power for every GPU in {len(rec.samples)} sample(s)"
    return NodePower(node=rec.node, samples=0, gpus=gpus, why_not=why)


def level_power(
    nodes: Sequence[str], records: Sequence[NodeTelemetry] | None, why_not: Mapping[str, str], off: str | None
) -> LevelPower:
    """Each of the level's nodes: its power from `records` (the sampler's window), else why not:
    `off` when the run samples nothing (telemetry off), else the sampler's reason for the node."""
    got = {r.node: r for r in records or []}
    out: list[NodePower] = []
    for n in nodes:
        if n in got:
            out.append(node_power(got[n]))
        else:
            why = off or why_not.get(n) or f"no power telemetry on {n}: not sampled"
            out.append(NodePower(node=n, why_not=why))
    return LevelPower(nodes=out)


def power_line(p: LevelPower) -> str:
    """The level's power as one line: per node W and samples, or why not."""
    parts = [
        f"{n.node} {n.mean_w:.1f} W over {n.gpus} GPU(s), {n.samples} sample(s)"
        if n.mean_w is not None
        else f"{n.node}: {n.why_not}"
        for n in p.nodes
    ]
    return "power: " + "; ".join(parts)
