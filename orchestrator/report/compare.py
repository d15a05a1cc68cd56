"""`orch compare`: two setups side by side, with a verdict per row (docs/results.md, "Noise").

Each side is one run or several (`--repeat-a/--repeat-b`: further runs of the same setup,
ideally interleaved A, B, A, B so that drift hits both). Per row (step, collective, size):
  centre   the median of ln busbw over each side's runs; d = centre_B - centre_A;
  spread   with repeats: sigma = 1.4826 x MAD of the row's ln busbw around its own side's median
           (both sides pooled, orchestrator.metrics.noise), taken as at least the median of that
           over all rows, so that one wild repeat widens only its own row and a row whose few
           runs agreed by chance does not get a band of nothing;
           without repeats: within the pair, for each step and collective, the spread of d from
           one size to the next, 1.4826 x median|d_i - d_(i-1)| / sqrt(2), at least the median of
           that over all groups;
  band     max(ln(1 + floor), k x se), se = sigma x hypot(c(n_A), c(n_B)) with c(n) the standard
           error of a median of n runs (noise.median_se_factor); floor 5%, k 3.
The rules are metrics/decision.py's: a row beyond +band is "better", beyond -band "worse", else
"same" -- and, as in AMD's RCCL regression detector, a change stands only where it holds at 2 or
more adjacent sizes of the same step and collective; a lone row beyond the band stays "same", with
a note. Recovery times (lower is better) compare the medians over the repeats, with the same
robust spread in seconds.

Serving steps (docs/serving.md, "Compare") compare per step and load level (c4, r0.5) with
metrics.serving.compare_level: output tokens/s and each p99 latency on the log scale, the band
max(ln(1 + floor), k x se) with se from the robust spread of the repeats (the same estimator)
and at least one run's own p99 uncertainty from its order statistics; a p99 worse beyond the band
is "worse for interactive" even where throughput is better (decision.serving_verdict). Cost per 1M
output tokens is shown side by side (not judged: it follows from throughput and the price each run was given).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from orchestrator.metrics import decision
from orchestrator.metrics.decision import FLOOR, MIN_ADJACENT, K
from orchestrator.metrics.percentiles import median_of
from orchestrator.metrics.serving import compare_level
from orchestrator.models.base import StrictModel
from orchestrator.models.decision import Change, InteractiveVerdict
from orchestrator.models.run import RunRecord
from orchestrator.models.serving_results import LevelSummary, ServingComparison

RowVerdict = Literal[Change, "missing"]
"""A row's word: the change, or missing when only one side has the row."""


class CompareRow(StrictModel):
    step: str
    collective: str
    size_bytes: int
    a_gbs: float | None = Field(description="A's centre: the median over its runs")
    b_gbs: float | None = Field(description="B's centre: the median over its runs")
    ratio: float | None = Field(description="B / A")
    band: float | None = Field(description="relative half-width of 'same', e.g. 0.12 = +-12%")
    verdict: RowVerdict
    n_a: int = Field(default=1, description="runs of A that have this row")
    n_b: int = Field(default=1, description="runs of B that have this row")
    note: str | None = None


class RecoveryRow(StrictModel):
    fault: str
    phase: str
    a_median_s: float | None
    b_median_s: float | None
    ratio: float | None
    band_s: float | None
    verdict: RowVerdict
    n_a: int = 0
    n_b: int = 0


class ServingRow(StrictModel):
    """One serving step and load level, B against A (metrics.serving.compare_level)."""

    step: str
    level: str
    comparison: ServingComparison | None = Field(description="None when a side lacks the level")
    verdict: Literal[InteractiveVerdict, "missing"]
    a_cost_per_million: float | None = Field(default=None, description="A's cost per 1M output tokens")
    b_cost_per_million: float | None = None
    n_a: int = Field(default=0, description="runs of A that have this level")
    n_b: int = Field(default=0, description="runs of B that have this level")
    engine_a: str | None = Field(default=None, description="A's engine with its variant: 'vllm (aiter)'")
    engine_b: str | None = Field(default=None, description="B's engine with its variant")

    @property
    def worse(self) -> bool:
        return decision.is_worse(self.verdict)


class Comparison(StrictModel):
    a: str
    b: str
    a_plan: str
    b_plan: str
    rows: list[CompareRow]
    recovery: list[RecoveryRow] = Field(default_factory=list)
    serving: list[ServingRow] = Field(default_factory=list)
    floor: float
    k: float
    runs_a: int = 1
    runs_b: int = 1
    sigma: float | None = Field(default=None, description="pooled spread of ln busbw (median over rows)")
    warnings: list[str] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        verdicts = [r.verdict for r in self.rows] + [r.verdict for r in self.recovery]
        for v in verdicts + [r.verdict for r in self.serving]:
            out[v] = out.get(v, 0) + 1
        return out

    @property
    def worse(self) -> bool:
        return any(decision.is_worse(v) for v in self.counts())


Key = decision.SeriesKey


def _busbw(rec: RunRecord) -> dict[Key, float]:
    return {
        (s.step.id, r.collective, r.size_bytes): r.out_of_place.busbw_gbs for s in rec.steps for r in s.rows
    }


def _sides(maps: list[dict[Key, float]]) -> dict[Key, list[float]]:
    """Each row's figure over the runs that have it."""
    out: dict[Key, list[float]] = {}
    for m in maps:
        for key, v in m.items():
            out.setdefault(key, []).append(v)
    return out


def compare_runs(
    a: RunRecord,
    b: RunRecord,
    *,
    repeats_a: list[RunRecord] | None = None,
    repeats_b: list[RunRecord] | None = None,
    floor: float = FLOOR,
    k: float = K,
) -> Comparison:
    """Compare b against a (ratios are B/A); repeats are further runs of each side's setup."""
    runs_a, runs_b = [a, *(repeats_a or [])], [b, *(repeats_b or [])]
    maps_a, maps_b = [_busbw(r) for r in runs_a], [_busbw(r) for r in runs_b]
    ma, mb = maps_a[0], maps_b[0]
    all_keys = set().union(*maps_a, *maps_b)
    keys = sorted(all_keys, key=lambda t: (_step_order(a, b, t[0]), t[1], t[2]))
    changes, pooled = decision.series_changes(
        _sides(maps_a), _sides(maps_b), repeated=len(runs_a) > 1 or len(runs_b) > 1, floor=floor, k=k
    )
    rows: list[CompareRow] = []
    for key in keys:
        c = changes[key]
        verdict: RowVerdict = c.change
        if not (any(key in m for m in maps_a) and any(key in m for m in maps_b)):
            verdict = "missing"  # a row only one side has; n/a: one without a usable ratio (busbw 0)
        rows.append(CompareRow(
            step=key[0], collective=key[1], size_bytes=key[2],
            a_gbs=c.a if c.a is not None else ma.get(key), b_gbs=c.b if c.b is not None else mb.get(key),
            ratio=c.ratio, band=c.band, verdict=verdict, n_a=c.n_a or 0, n_b=c.n_b or 0,
        ))  # fmt: skip
    _require_adjacent(rows)
    warnings = []
    if a.plan_name != b.plan_name:
        warnings.append(f"different plans: {a.plan_name} vs {b.plan_name}")
    for r in (*runs_a, *runs_b):
        if r.status != "accepted":
            warnings.append(f"run {r.run_id} is {r.status}")
    return Comparison(
        a=a.run_id,
        b=b.run_id,
        a_plan=a.plan_name,
        b_plan=b.plan_name,
        rows=rows,
        recovery=_compare_recovery(runs_a, runs_b, floor, k),
        serving=compare_serving(runs_a, runs_b, floor=floor, k=k),
        floor=floor,
        k=k,
        runs_a=len(runs_a),
        runs_b=len(runs_b),
        sigma=pooled,
        warnings=warnings,
    )


def _require_adjacent(rows: list[CompareRow]) -> None:
    """Keep 'better'/'worse' only where the same verdict holds at MIN_ADJACENT adjacent sizes of
    the same step and collective (in size order); a lone one becomes 'same' with a note."""
    groups: dict[tuple[str, str], list[CompareRow]] = {}
    for r in rows:
        groups.setdefault((r.step, r.collective), []).append(r)
    for group in groups.values():
        group.sort(key=lambda r: r.size_bytes)
        stands = decision.adjacent([r.verdict for r in group], MIN_ADJACENT)
        for r, ok in zip(group, stands, strict=True):
            if r.verdict in ("better", "worse") and not ok:
                r.note = (
                    f"{r.verdict} beyond the band at this size only "
                    f"(a change must hold at {MIN_ADJACENT} adjacent sizes)"
                )
                r.verdict = "same"


def _step_order(a: RunRecord, b: RunRecord, step: str) -> int:
    ids = a.step_ids + [s for s in b.step_ids if s not in a.step_ids]
    return ids.index(step) if step in ids else len(ids)


def _phases(rec: RunRecord) -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = {}
    for f in rec.recovery:
        for phase, v in (
            ("detect", f.timings.detect_s),
            ("recover", f.timings.recover_s),
            ("restore", f.timings.restore_s),
        ):
            if v is not None:
                out.setdefault((f.fault, phase), []).append(v)
    return out


def _compare_recovery(
    runs_a: list[RunRecord], runs_b: list[RunRecord], floor: float, k: float
) -> list[RecoveryRow]:
    """Per fault and phase: the medians over every repeat of each side, judged by
    decision.time_change (band k x se from the pooled robust spread, at least floor x A's median)."""
    pa: dict[tuple[str, str], list[float]] = {}
    pb: dict[tuple[str, str], list[float]] = {}
    for runs, into in ((runs_a, pa), (runs_b, pb)):
        for rec in runs:
            for key, vals in _phases(rec).items():
                into.setdefault(key, []).extend(vals)
    rows: list[RecoveryRow] = []
    for key in sorted(set(pa) | set(pb)):
        va, vb = pa.get(key, []), pb.get(key, [])
        if not va or not vb:
            rows.append(
                RecoveryRow(
                    fault=key[0], phase=key[1],
                    a_median_s=median_of(va), b_median_s=median_of(vb),
                    ratio=None, band_s=None, verdict="missing", n_a=len(va), n_b=len(vb),
                )
            )  # fmt: skip
            continue
        ma, mb = statistics.median(va), statistics.median(vb)
        band, verdict = decision.time_change(va, vb, floor=floor, k=k)
        rows.append(
            RecoveryRow(
                fault=key[0], phase=key[1], a_median_s=ma, b_median_s=mb,
                ratio=mb / ma if ma > 0 else None, band_s=band, verdict=verdict, n_a=len(va), n_b=len(vb),
            )
        )  # fmt: skip
    return rows


SLevel = tuple[str, str]


def _serving_levels(rec: RunRecord) -> dict[SLevel, tuple[LevelSummary, float | None]]:
    """(step, level) -> the level's figures and its cost per 1M output tokens."""
    out: dict[SLevel, tuple[LevelSummary, float | None]] = {}
    for s in rec.serving:
        for lv in s.levels:
            if lv.summary is not None:
                cost = lv.cost.per_million_output_tokens if lv.cost is not None else None
                out[(s.step.id, lv.level)] = (lv.summary, cost)
    return out


def level_summaries(runs: Sequence[RunRecord]) -> dict[SLevel, list[LevelSummary]]:
    """(serving step, level) -> the level's figures over the runs, in the order the runs first have
    them (a level without figures left out)."""
    out: dict[SLevel, list[LevelSummary]] = {}
    for rec in runs:
        for sv in rec.serving:
            for lv in sv.levels:
                if lv.summary is not None:
                    out.setdefault((sv.step.id, lv.level), []).append(lv.summary)
    return out


def engine_label(engine: str, variant: str | None) -> str:
    """An engine with the stack's variant it ran, as the store and compare show it."""
    return f"{engine} ({variant})" if variant else engine


def _engines(runs: list[RunRecord]) -> dict[str, str]:
    """step -> its engine label over the runs (several, comma-separated, when the runs differ)."""
    seen: dict[str, list[str]] = {}
    for rec in runs:
        for s in rec.serving:
            label = engine_label(s.step.engine, s.step.variant)
            if label not in seen.setdefault(s.step.id, []):
                seen[s.step.id].append(label)
    return {step: ", ".join(labels) for step, labels in seen.items()}


def compare_serving(
    runs_a: list[RunRecord], runs_b: list[RunRecord], *, floor: float = FLOOR, k: float = K
) -> list[ServingRow]:
    """Per serving step and level, in the order A (then B) ran them: the interactive verdict with
    the noise band over each side's runs, and each side's median cost per 1M output tokens."""
    la, lb = [_serving_levels(r) for r in runs_a], [_serving_levels(r) for r in runs_b]
    ea, eb = _engines(runs_a), _engines(runs_b)
    keys: list[SLevel] = []
    for m in (*la, *lb):
        keys += [key for key in m if key not in keys]
    rows: list[ServingRow] = []
    for key in keys:
        sa, sb = [m[key] for m in la if key in m], [m[key] for m in lb if key in m]
        ca, cb = median_of(c for _, c in sa), median_of(c for _, c in sb)
        if not sa or not sb:
            rows.append(ServingRow(step=key[0], level=key[1], comparison=None, verdict="missing",
                                   a_cost_per_million=ca, b_cost_per_million=cb,
                                   n_a=len(sa), n_b=len(sb), engine_a=ea.get(key[0]),
                                   engine_b=eb.get(key[0])))  # fmt: skip
            continue
        c = compare_level([s for s, _ in sa], [s for s, _ in sb], floor=floor, k=k, step=key[0])
        rows.append(ServingRow(step=key[0], level=key[1], comparison=c, verdict=c.verdict,
                               a_cost_per_million=ca, b_cost_per_million=cb,
                               n_a=len(sa), n_b=len(sb), engine_a=ea.get(key[0]),
                               engine_b=eb.get(key[0])))  # fmt: skip
    return rows
