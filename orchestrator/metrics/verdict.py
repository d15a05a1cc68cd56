"""Verdicts: each step against the plan's thresholds, each node from the steps it took part in.

Only the run decides what is fatal: a step's failure is data (verdict + reasons), never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from orchestrator.metrics.busbw import scaling_efficiency
from orchestrator.models.base import StrictModel
from orchestrator.models.plan import BaselineThreshold, BusbwThreshold, Plan
from orchestrator.models.results import Collective, CollRow, run_size

Verdict = Literal["pass", "fail", "infra", "skipped"]
# Worst first: a node or run takes the worst verdict of its parts.
_SEVERITY: dict[str, int] = {"infra": 3, "fail": 2, "skipped": 1, "pass": 0}


def worst(verdicts: list[Verdict]) -> Verdict:
    """The most severe verdict of the list (pass for an empty list)."""
    return max(verdicts, key=lambda v: _SEVERITY[v], default="pass")


class CollSummary(StrictModel):
    """One collective of one step, at the largest size measured."""

    collective: Collective
    size_bytes: int
    busbw_gbs: float
    algbw_gbs: float
    wrong: int = 0
    efficiency: float | None = Field(default=None, description="busbw / busbw of the reference step")


def summarize(rows: list[CollRow]) -> dict[Collective, CollSummary]:
    """Per collective: the row of the largest size (out-of-place), and #wrong over all its rows."""
    out: dict[Collective, CollSummary] = {}
    for row in rows:
        wrong = (row.out_of_place.wrong or 0) + ((row.in_place.wrong or 0) if row.in_place else 0)
        prev = out.get(row.collective)
        if prev is None or row.size_bytes >= prev.size_bytes:
            out[row.collective] = CollSummary(
                collective=row.collective,
                size_bytes=row.size_bytes,
                busbw_gbs=row.out_of_place.busbw_gbs,
                algbw_gbs=row.out_of_place.algbw_gbs,
                wrong=wrong + (prev.wrong if prev else 0),
            )
        else:
            prev.wrong += wrong
    return out


def missing_rows(
    rows: list[CollRow], collectives: Sequence[Collective], sizes: list[int], nranks: int, elt: int = 4
) -> list[str]:
    """'collective@size' for every expected row that the output lacks.

    Sizes are compared as nccl-tests prints them: all_gather, reduce_scatter and alltoall round
    the requested size down to whole 16-byte blocks per rank.
    """
    have = {(r.collective, r.size_bytes) for r in rows}
    return [f"{c}@{s}" for c in collectives for s in sizes if (c, run_size(c, s, nranks, elt)) not in have]


class Measured(StrictModel):
    """What one busbw threshold is held against on one step."""

    where: str = Field(description="e.g. 'all_gather at 1024 B (runs as 1008 B)'")
    size_bytes: int | None = Field(default=None, description="the size of the row judged")
    busbw_gbs: float | None = Field(default=None, description="None: the step has no such row")


def busbw_measured(
    th: BusbwThreshold, rows: list[CollRow], summary: dict[Collective, CollSummary]
) -> Measured:
    """The busbw (out-of-place) a threshold is held against on one step.

    A threshold at a size is held against the row of the size the step really ran for it
    (run_size: 1024 B of all_gather at 3 ranks runs as 1008 B), as nccl-tests prints it; without
    a size, against the largest size.
    """
    if th.size is None:
        got = summary.get(th.collective)
        return Measured(
            where=f"{th.collective} at the largest size",
            size_bytes=got.size_bytes if got else None,
            busbw_gbs=got.busbw_gbs if got else None,
        )
    match = [
        r
        for r in rows
        if r.collective == th.collective and r.size_bytes == run_size(th.collective, th.size, r.nranks)
    ]
    ran = {r.size_bytes for r in match} - {th.size}
    return Measured(
        where=f"{th.collective} at {th.size} B" + (f" (runs as {min(ran)} B)" if ran else ""),
        size_bytes=match[0].size_bytes if match else None,
        busbw_gbs=match[0].out_of_place.busbw_gbs if match else None,
    )


def threshold_failures(plan: Plan, rows: list[CollRow], summary: dict[Collective, CollSummary]) -> list[str]:
    """Reasons this step misses the plan's absolute busbw thresholds (empty when it meets them)."""
    reasons: list[str] = []
    for th in plan.thresholds.busbw:
        m = busbw_measured(th, rows, summary)
        if m.busbw_gbs is None:
            reasons.append(f"{m.where}: no measurement for the busbw threshold {th.min_gbs:g} GB/s")
        elif m.busbw_gbs < th.min_gbs:
            reasons.append(f"{m.where}: busbw {m.busbw_gbs:.3f} GB/s < threshold {th.min_gbs:g} GB/s")
    return reasons


def apply_efficiency(steps: list[dict[Collective, CollSummary]]) -> None:
    """Fill efficiency in place: per collective, against the first step with busbw > 0."""
    reference: dict[Collective, float] = {}
    for summary in steps:
        for coll, s in summary.items():
            if coll not in reference and s.busbw_gbs > 0:
                reference[coll] = s.busbw_gbs
            if coll in reference:
                s.efficiency = scaling_efficiency(s.busbw_gbs, reference[coll])


def efficiency_failures(plan: Plan, summary: dict[Collective, CollSummary]) -> list[str]:
    """Reasons this step misses the plan's minimum scaling efficiency."""
    limit = plan.thresholds.min_scaling_efficiency
    if limit is None:
        return []
    return [
        f"{c}: scaling efficiency {s.efficiency:.2f} < {limit:g}"
        for c, s in summary.items()
        if s.efficiency is not None and s.efficiency < limit
    ]


BaselineBusbw = dict[tuple[str, str, int], float]
"""busbw (out-of-place, GB/s) of a baseline run by (step id, collective, size in bytes)."""


def baseline_failures(
    th: BaselineThreshold, step_id: str, rows: list[CollRow], baseline: BaselineBusbw
) -> list[str]:
    """Reasons this step's rows fall below th.min_fraction of the same rows of the baseline.

    Rows the baseline lacks are not judged; a step the baseline does not have at all is one reason.
    """
    if not any(k[0] == step_id for k in baseline):
        return [f"baseline {th.name!r} has no step {step_id}"]
    reasons: list[str] = []
    for row in rows:
        ref = baseline.get((step_id, row.collective, row.size_bytes))
        if ref is None or ref <= 0:
            continue
        got = row.out_of_place.busbw_gbs
        if got < th.min_fraction * ref:
            reasons.append(
                f"{row.collective} at {row.size_bytes} B: busbw {got:.3f} GB/s < {th.min_fraction:g} x "
                f"baseline {th.name!r} ({ref:.3f} GB/s)"
            )
    return reasons
