"""`orch compare`: two runs of the same plan side by side, with a verdict per row.

Noise rule (docs/results.md): per row, d = ln(busbw_B / busbw_A). Per-iteration spread is not
recorded, so the noise of d is estimated from what repeats there are:
  1. repeated runs, when given (`--repeat-a/--repeat-b`): per row, the variance of ln busbw over
     each side's runs, var_A + var_B (a side without repeats counts as noisy as the other), at
     least the mean of that over the row's step and collective. Given repeats, this is the noise;
  2. without repeats, within the pair: for each step and collective, the spread of d from one
     message size to the next, sigma = 1.4826 * median|d_i - d_(i-1)| / sqrt(2). A uniform change
     moves every d alike and leaves this small; row-to-row jitter makes it large — and so does a
     real change that hits only some sizes (a throttle above its burst), which is why (1) wins;
  3. the median of (2) over all groups, so that a group of few sizes is not judged on its own.
The band is max(ln(1 + floor), k * sigma) with floor 5% and k = 3. d beyond +band is
"better", beyond -band "worse", else "same". Recovery times (lower is better) compare medians over
the repeats, with the band the larger spread (max - min) of the two sides, at least the floor.
"""

from __future__ import annotations

import itertools
import math
import statistics
from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.store.load import RunRecord

RowVerdict = Literal["better", "same", "worse", "missing", "n/a"]
FLOOR = 0.05
K = 3.0
_MAD = 1.4826


class CompareRow(StrictModel):
    step: str
    collective: str
    size_bytes: int
    a_gbs: float | None
    b_gbs: float | None
    ratio: float | None = Field(description="B / A")
    band: float | None = Field(description="relative half-width of 'same', e.g. 0.12 = +-12%")
    verdict: RowVerdict


class RecoveryRow(StrictModel):
    fault: str
    phase: str
    a_median_s: float | None
    b_median_s: float | None
    ratio: float | None
    band_s: float | None
    verdict: RowVerdict


class Comparison(StrictModel):
    a: str
    b: str
    a_plan: str
    b_plan: str
    rows: list[CompareRow]
    recovery: list[RecoveryRow] = Field(default_factory=list)
    floor: float
    k: float
    warnings: list[str] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in [r.verdict for r in self.rows] + [r.verdict for r in self.recovery]:
            out[v] = out.get(v, 0) + 1
        return out

    @property
    def worse(self) -> bool:
        return "worse" in self.counts()


Key = tuple[str, str, int]


def _busbw(rec: RunRecord) -> dict[Key, float]:
    return {
        (s.step.id, r.collective, r.size_bytes): r.out_of_place.busbw_gbs for s in rec.steps for r in s.rows
    }


def _neighbour_sigma(ds: list[float]) -> float | None:
    if len(ds) < 3:
        return None
    return _MAD * statistics.median(abs(b - a) for a, b in itertools.pairwise(ds)) / math.sqrt(2)


def _repeat_var(runs: list[RunRecord]) -> dict[Key, float]:
    if len(runs) < 2:
        return {}
    maps = [_busbw(r) for r in runs]
    out: dict[Key, float] = {}
    for key in maps[0]:
        vals = [math.log(m[key]) for m in maps if m.get(key, 0) > 0]
        if len(vals) >= 2:
            out[key] = statistics.variance(vals)
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
    ma, mb = _busbw(a), _busbw(b)
    var_a = _repeat_var([a, *(repeats_a or [])])
    var_b = _repeat_var([b, *(repeats_b or [])])
    keys = sorted(set(ma) | set(mb), key=lambda t: (_step_order(a, b, t[0]), t[1], t[2]))
    d: dict[Key, float] = {
        key: math.log(mb[key] / ma[key]) for key in keys if ma.get(key, 0) > 0 and mb.get(key, 0) > 0
    }
    group_sigma: dict[tuple[str, str], float] = {}
    for step, coll in {(s, c) for s, c, _ in d}:
        ds = [d[key] for key in keys if key in d and key[0] == step and key[1] == coll]
        sig = _neighbour_sigma(ds)
        if sig is not None:
            group_sigma[(step, coll)] = sig
    global_sigma = statistics.median(group_sigma.values()) if group_sigma else 0.0
    rep_var = _pooled_repeat_var(d, var_a, var_b)
    min_band = math.log1p(floor)
    rows: list[CompareRow] = []
    for key in keys:
        va, vb = ma.get(key), mb.get(key)
        if va is None or vb is None or key not in d:
            # a row only one run has, or one without a usable ratio (e.g. busbw 0 on one rank)
            gap: RowVerdict = "missing" if va is None or vb is None else "n/a"
            rows.append(
                CompareRow(
                    step=key[0],
                    collective=key[1],
                    size_bytes=key[2],
                    a_gbs=va,
                    b_gbs=vb,
                    ratio=None,
                    band=None,
                    verdict=gap,
                )
            )
            continue
        if rep_var:
            sigma = math.sqrt(rep_var.get(key, 0.0))
        else:
            sigma = max(group_sigma.get((key[0], key[1]), 0.0), global_sigma)
        band = max(min_band, k * sigma)
        verdict: RowVerdict = "better" if d[key] > band else "worse" if d[key] < -band else "same"
        rows.append(
            CompareRow(
                step=key[0],
                collective=key[1],
                size_bytes=key[2],
                a_gbs=va,
                b_gbs=vb,
                ratio=vb / va,
                band=math.expm1(band),
                verdict=verdict,
            )
        )
    warnings = []
    if a.plan_name != b.plan_name:
        warnings.append(f"different plans: {a.plan_name} vs {b.plan_name}")
    for r in (a, b):
        if r.status != "accepted":
            warnings.append(f"run {r.run_id} is {r.status}")
    return Comparison(
        a=a.run_id,
        b=b.run_id,
        a_plan=a.plan_name,
        b_plan=b.plan_name,
        rows=rows,
        recovery=_compare_recovery(a, b, floor),
        floor=floor,
        k=k,
        warnings=warnings,
    )


def _pooled_repeat_var(
    d: dict[Key, float], var_a: dict[Key, float], var_b: dict[Key, float]
) -> dict[Key, float]:
    """Variance of d per row from the repeats: var_A + var_B (a side without repeats is taken to
    be as noisy as the other), at least the mean over the row's step and collective, so that a
    row whose two or three runs agreed by chance does not get a band of nothing."""
    if not var_a and not var_b:
        return {}
    row: dict[Key, float] = {}
    for key in d:
        va, vb = var_a.get(key), var_b.get(key)
        if va is not None or vb is not None:
            row[key] = (va if va is not None else vb or 0.0) + (vb if vb is not None else va or 0.0)
    groups: dict[tuple[str, str], list[float]] = {}
    for key, v in row.items():
        groups.setdefault((key[0], key[1]), []).append(v)
    pooled = {g: statistics.fmean(vs) for g, vs in groups.items()}
    return {key: max(row.get(key, 0.0), pooled.get((key[0], key[1]), 0.0)) for key in d}


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


def _compare_recovery(a: RunRecord, b: RunRecord, floor: float) -> list[RecoveryRow]:
    pa, pb = _phases(a), _phases(b)
    rows: list[RecoveryRow] = []
    for key in sorted(set(pa) | set(pb)):
        va, vb = pa.get(key), pb.get(key)
        if not va or not vb:
            rows.append(
                RecoveryRow(
                    fault=key[0],
                    phase=key[1],
                    a_median_s=statistics.median(va) if va else None,
                    b_median_s=statistics.median(vb) if vb else None,
                    ratio=None,
                    band_s=None,
                    verdict="missing",
                )
            )
            continue
        ma, mb = statistics.median(va), statistics.median(vb)
        band = max(max(va) - min(va), max(vb) - min(vb), floor * ma)
        verdict: RowVerdict = "worse" if mb - ma > band else "better" if ma - mb > band else "same"
        rows.append(
            RecoveryRow(
                fault=key[0],
                phase=key[1],
                a_median_s=ma,
                b_median_s=mb,
                ratio=mb / ma if ma > 0 else None,
                band_s=band,
                verdict=verdict,
            )
        )
    return rows
