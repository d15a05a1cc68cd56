"""Verdicts: each step against the plan's thresholds (each serving level against its workload's),
each node from the steps it took part in.

Only the run decides what is fatal: a step's failure is data (verdict + reasons), never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from orchestrator.metrics import decision, noise
from orchestrator.metrics.busbw import scaling_efficiency
from orchestrator.models.base import StrictModel
from orchestrator.models.plan import BaselineThreshold, BusbwThreshold, Plan, Step
from orchestrator.models.results import Collective, CollRow, CollSummary, Scaling, Verdict, run_size
from orchestrator.models.serving import ServingWorkload
from orchestrator.models.serving_results import LevelSummary
from orchestrator.text import figure

__all__ = ["CollSummary", "Scaling", "Verdict"]

# Worst first: a node or run takes the worst verdict of its parts.
_SEVERITY: dict[str, int] = {"infra": 3, "fail": 2, "skipped": 1, "pass": 0}
# Scaling efficiency is judged only beyond its noise band: max(ln(1 + EFF_FLOOR), EFF_K x se)
# (the decision module's floor and k; its threshold rules judge, metrics/decision.py).
EFF_FLOOR = decision.FLOOR
EFF_K = decision.K


def worst(verdicts: list[Verdict]) -> Verdict:
    """The most severe verdict of the list (pass for an empty list)."""
    return max(verdicts, key=lambda v: _SEVERITY[v], default="pass")


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
                latency_us=row.out_of_place.latency_us,
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
        elif decision.below(m.busbw_gbs, th.min_gbs):
            reasons.append(f"{m.where}: busbw {m.busbw_gbs:.3f} GB/s < threshold {th.min_gbs:g} GB/s")
    return reasons


def reference_step(step: Step, ladder: Sequence[Step]) -> tuple[Scaling, Step] | None:
    """The step `step` is held against, and which scaling that measures; None when none applies.

    Like is compared with like: a one-node step (intra-node: NVLink/xGMI or shared memory) with
    the one-node step of the fewest ranks above 1; a multi-node step (inter-node: the fabric)
    with the 2-node step of the same ranks per node. A 1-rank step is never a reference nor
    judged: there every collective is a local copy (sendrecv, broadcast) or moves nothing (the
    busbw factor of the reductions is 0 at n = 1).
    """
    if step.world_size < 2 or step.diagnostic is not None:
        return None
    ladder = [s for s in ladder if s.diagnostic is None]  # a diagnostic step measures no collective
    if step.nnodes == 1:
        one_node = [s for s in ladder if s.nnodes == 1 and s.world_size >= 2]
        ref = min(one_node, key=lambda s: (s.world_size, s.index), default=None)
        return ("intra-node", ref) if ref is not None else None
    two_node = [s for s in ladder if s.nnodes == 2 and s.ranks_per_node == step.ranks_per_node]
    return ("inter-node", two_node[0]) if two_node else None


def apply_efficiency(
    steps: Sequence[tuple[Step, dict[Collective, CollSummary]]], floor: float = EFF_FLOOR, k: float = EFF_K
) -> None:
    """Fill efficiency, scaling, reference and noise in place for each (step, summary) pair.

    Per collective at the largest size: busbw of the step / busbw of its reference step
    (reference_step). The noise band is noise.band over the two steps' per-iteration times
    (collbench) at that size: se = hypot of each step's 1.4826 x MAD of ln time / sqrt(n); without
    per-iteration times only the floor applies.
    """
    ladder = [st for st, _ in steps]
    by_id = {st.id: summ for st, summ in steps}
    for st, summ in steps:
        found = reference_step(st, ladder)
        for coll, s in summ.items():
            s.efficiency = s.scaling = s.reference = s.reference_busbw_gbs = s.noise = None
            if found is None:
                continue
            kind, ref_step = found
            ref = by_id.get(ref_step.id, {}).get(coll)
            if ref is None or ref.busbw_gbs <= 0 or not _same_size(ref.size_bytes, s.size_bytes):
                continue
            s.scaling, s.reference, s.reference_busbw_gbs = kind, ref_step.id, ref.busbw_gbs
            s.efficiency = scaling_efficiency(s.busbw_gbs, ref.busbw_gbs)
            se = 0.0 if ref_step.id == st.id else math.hypot(_time_se(s), _time_se(ref))
            s.noise = math.expm1(noise.band(se, floor, k))


def apply_line_rate(steps: Sequence[tuple[Step, dict[Collective, CollSummary]]], gbps: float | None) -> None:
    """Fill line_fraction = busbw / line rate (GB/s = Gbit/s / 8) for steps over the fabric (2+
    nodes); one-node steps run over the node's own links, which the line rate does not describe."""
    for st, summ in steps:
        for s in summ.values():
            s.line_fraction = s.busbw_gbs * 8.0 / gbps if gbps and st.nnodes >= 2 else None


def _same_size(a: int, b: int) -> bool:
    """Whether two printed sizes are the same requested size: all_gather, reduce_scatter and
    alltoall round it down to whole 16-byte blocks per rank, so 1 MiB prints as 1048560 B on 3
    ranks and 1048576 B on 2 (seen on the lab). Requested sizes differ by a factor >= 2."""
    return abs(a - b) <= 0.05 * max(a, b)


def _time_se(s: CollSummary) -> float:
    """Standard error of ln(mean time) from the per-iteration spread; 0.0 when it is unknown."""
    lat = s.latency_us
    if lat is None or lat.n < 2 or lat.log_sigma is None:
        return 0.0
    return lat.log_sigma / math.sqrt(lat.n)


def efficiency_failures(plan: Plan, summary: dict[Collective, CollSummary]) -> tuple[list[str], list[str]]:
    """(reasons this step misses the plan's minimum scaling efficiency beyond the noise band,
    notes for efficiencies under the minimum but within the band, which are not judged)."""
    limit = plan.thresholds.min_scaling_efficiency
    if limit is None:
        return [], []
    fails: list[str] = []
    notes: list[str] = []
    for c, s in summary.items():
        if s.efficiency is None or not decision.below(s.efficiency, limit):
            continue
        what = (
            f"{c}: {s.scaling} scaling efficiency {s.efficiency:.2f} against {s.reference} "
            f"(busbw {s.busbw_gbs:.3g} / {s.reference_busbw_gbs or 0:.3g} GB/s)"
        )
        band = s.noise or 0.0
        if decision.beyond_band_below(s.efficiency, limit, band):
            fails.append(f"{what} < {limit:g} beyond the noise band +-{band:.0%}")
        else:
            notes.append(f"{what} is under {limit:g} but within the noise band +-{band:.0%}: not judged")
    return fails, notes


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
        if decision.below_share(got, ref, th.min_fraction):
            reasons.append(
                f"{row.collective} at {row.size_bytes} B: busbw {got:.3f} GB/s < {th.min_fraction:g} x "
                f"baseline {th.name!r} ({ref:.3f} GB/s)"
            )
    return reasons


_SERVING_P99 = (
    ("max_ttft_p99_ms", "ttft_ms", "TTFT"),
    ("max_itl_p99_ms", "itl_ms", "ITL"),
    ("max_tpot_p99_ms", "tpot_ms", "TPOT"),
    ("max_e2e_p99_ms", "e2e_ms", "E2E"),
)


def serving_threshold_failures(step_id: str, w: ServingWorkload, s: LevelSummary) -> list[str]:
    """What a serving level misses of the workload's thresholds, each naming step, level and figure, e.g.
    `step chat-r1, level c8: TTFT p99 812 ms > 500 ms (n=100)`. A p99 threshold on a level whose
    p99 is not defined (fewer than 100 successful requests) is missed: it cannot be shown met."""
    th, at = w.thresholds, f"step {step_id}, level {s.level}"
    out: list[str] = []
    for field, attr, name in _SERVING_P99:
        limit = getattr(th, field)
        if limit is None:
            continue
        p = getattr(s, attr)
        if p.p99 is None:
            out.append(
                f"{at}: {name} p99 not defined (n={p.n} < 100): the limit {limit:g} ms is not shown met"
            )
        elif p.p99 > limit:
            out.append(f"{at}: {name} p99 {p.p99:.4g} ms > {limit:g} ms (n={p.n})")
    floor = th.min_slo_attainment
    if floor is not None and (s.slo_attainment is None or s.slo_attainment < floor):
        got = "-" if s.slo_attainment is None else f"{s.slo_attainment:.1%}"
        out.append(f"{at}: SLO attainment {got} < {floor:.1%} (n={s.n})")
    if th.max_error_rate is not None:
        rate = (s.errors + s.aborted) / s.n if s.n else 1.0
        if rate > th.max_error_rate:
            out.append(
                f"{at}: error rate {rate:.1%} > {th.max_error_rate:.1%} "
                f"({s.errors} errors + {s.aborted} aborted of n={s.n})"
            )
    if th.min_output_tokens_per_s is not None:
        tps = s.output_tokens_per_s
        if tps is None or tps < th.min_output_tokens_per_s:
            got = figure(tps)
            out.append(f"{at}: output tokens/s {got} < {th.min_output_tokens_per_s:g} (n={s.ok})")
    return out
