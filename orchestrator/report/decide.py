"""`orch decide A B`: the decision between two setups on one page (terminal, HTML, Markdown, JSON).

A and B are runs (each with its repeats) from one cluster, or from two clusters with different
inventories: AMD against NVIDIA, one stack against the next. The page has one row per line of the
matrix a buyer decides by (models/decide.RowName), each built by one function of ROWS from the
runs and their comparison (report/compare.compare_runs: every figure judged by the decision
module, against a noise band, with its n). A row that the runs cannot answer is `missing` and says
why; the overall call is then "undecided" and names the missing rows, never "same".

The overall rule (decide_overall): undecided when any row is missing; else worse when any row is
worse; better when a row is better and none worse; same otherwise.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.metrics import decision
from orchestrator.metrics.cost import total_label
from orchestrator.metrics.percentiles import median_of
from orchestrator.models.decide import DecidePage, DecideRow, Overall, RowName
from orchestrator.models.decision import FigureChange
from orchestrator.models.plan import format_size
from orchestrator.models.run import RunRecord
from orchestrator.models.serving_results import CapacityResult, LevelSummary, ServingQuality
from orchestrator.report.compare import Comparison, compare_runs, level_summaries
from orchestrator.report.escape import html_text
from orchestrator.report.sections import Section, sections_html, sections_markdown
from orchestrator.text import figure


@dataclass(frozen=True)
class Sides:
    """What a row is built from: each side's runs and their comparison."""

    runs_a: Sequence[RunRecord]
    runs_b: Sequence[RunRecord]
    comparison: Comparison


def _missing(row: RowName, why: str, a: str | None = None, b: str | None = None) -> DecideRow:
    return DecideRow(row=row, a=a, b=b, verdict="missing", why=why)


# --- the rows ------------------------------------------------------------------------------------


def row_compatibility(s: Sides) -> DecideRow:
    """The migrate plan's verdicts: a compatibility matrix comes from `orch migrate plan`/`run`."""
    return _missing(
        "model compatibility",
        "no migrate matrix: A and B are runs, not a migration (orch migrate plan --from A --to B gives one)",
    )


def _judged(holders: Sequence[RunRecord], refs: Sequence[RunRecord]) -> list[tuple[str, ServingQuality]]:
    """The serving steps of `holders` whose output-quality gate was judged against a run of `refs`
    (scale-test with thresholds.baseline naming it), with their step ids."""
    ids = {r.run_id for r in refs}
    return [
        (f"{rec.run_id} {sv.step.id}", sv.quality)
        for rec in holders
        for sv in rec.serving
        if sv.quality is not None and sv.quality.judgement is not None and sv.quality.baseline_run in ids
    ]


def row_quality(s: Sides) -> DecideRow:
    """The output-quality gate where one side's run was judged against the other's (a scale-test of
    B against A's run set as baseline, or of A against B's): exact match against the baseline's
    run-twice floor; the gate's pass is "same", its failure "worse" (answers that changed). Each
    figure stands in its own side's column: the floor in the baseline's, the exact match in the
    judged run's, whichever side holds the judgement."""
    judged = [("B", "A", *j) for j in _judged(s.runs_b, s.runs_a)]
    judged += [("A", "B", *j) for j in _judged(s.runs_a, s.runs_b)]
    if not judged:
        gated = any(sv.quality is not None for rec in [*s.runs_a, *s.runs_b] for sv in rec.serving)
        return _missing(
            "output quality",
            "no run of one side was judged against a run of the other (scale-test with the plan's "
            "quality: and thresholds.baseline naming the other side's run)"
            if gated
            else "no output-quality gate ran in these runs",
        )
    shown: dict[str, list[str]] = {"A": [], "B": []}
    details: list[str] = []
    verdicts: list[str] = []
    for holder, base, where, q in judged:
        j = q.judgement
        assert j is not None  # _judged keeps judged steps only
        floors = [f.exact_match for f in j.floor if f.exact_match is not None]
        floor = f"{min(floors):.1%}" if floors else "none"
        em = "-" if j.b_vs_a.exact_match is None else f"{j.b_vs_a.exact_match:.1%}"
        shown[base].append(f"{where}: {base}-against-{base} floor {floor} (baseline run {q.baseline_run})")
        shown[holder].append(f"{where}: exact match {em} (n={j.b_vs_a.n})")
        verdicts.append("same" if j.passed else "worse")
        details.append(f"{where}: " + ("passed" if j.passed else "failed: " + "; ".join(j.reasons)))
    return DecideRow(
        row="output quality", a="; ".join(shown["A"]), b="; ".join(shown["B"]),
        verdict=decision.overall(verdicts),
        why=f"{len(judged)} gate(s) judged by the run against the other side's stored outputs "
        "(passed: same; failed: worse)",
        details=details,
    )  # fmt: skip


def _pcts(sums: list[LevelSummary]) -> str:
    """TTFT p50/p95/p99 (ms) of a level: the median over the runs, with the requests behind them."""
    p = [median_of(getattr(x.ttft_ms, q) for x in sums) for q in ("p50", "p95", "p99")]
    n = sum(x.ttft_ms.n for x in sums)
    return f"TTFT p50/p95/p99 {'/'.join(figure(v) for v in p)} ms (n={n})"


def row_latency(s: Sides) -> DecideRow:
    """Latency at the load levels both sides ran: each level by the interactive rule (a worse p99 is
    not bought back by throughput); the row is the levels' overall direction."""
    judged = [r for r in s.comparison.serving if r.comparison is not None and r.verdict != "n/a"]
    if not judged:
        shared = [r for r in s.comparison.serving if r.verdict != "missing"]
        why = (
            "no serving level that both sides ran"
            if not shared
            else "no shared level could be judged (a p99 needs n >= 100 requests on each side)"
        )
        return _missing("latency", why)
    sa, sb = level_summaries(s.runs_a), level_summaries(s.runs_b)
    top = judged[-1]
    key = (top.step, top.level)
    words = ["worse" if decision.is_worse(r.verdict) else r.verdict for r in judged]
    verdict = decision.overall(words)
    details = [
        f"{r.step} {r.level}: {r.verdict}: {r.comparison.reason if r.comparison else ''}" for r in judged
    ]
    worst = [f"{r.step} {r.level}" for r in judged if decision.is_worse(r.verdict)]
    why = (
        f"{len(judged)} shared level(s) by the interactive rule; worse at {', '.join(worst)}"
        if worst
        else f"{len(judged)} shared level(s) by the interactive rule, each within or beyond its band as shown"
    )
    return DecideRow(
        row="latency",
        a=f"{top.level}: {_pcts(sa.get(key, []))}",
        b=f"{top.level}: {_pcts(sb.get(key, []))}",
        verdict=verdict,
        why=why,
        details=details,
    )


def _capacities(runs: Sequence[RunRecord]) -> dict[str, list[CapacityResult]]:
    """serving step -> its capacity searches over the runs."""
    out: dict[str, list[CapacityResult]] = {}
    for rec in runs:
        for sv in rec.serving:
            if sv.capacity is not None:
                out.setdefault(sv.step.id, []).append(sv.capacity)
    return out


def _width(caps: list[CapacityResult]) -> tuple[float, float, int]:
    """(the median capacity, its uncertainty in req/s: precision + the spread over every repeat of
    every run, the repeats behind it)."""
    found = [c.capacity for c in caps if c.capacity is not None]
    every = [r.capacity for c in caps for r in c.repeats if r.capacity is not None]
    spread = max(every) - min(every) if every else 0.0
    return statistics.median(found), max(c.search.precision for c in caps) + spread, len(every)


def _refusals(caps: list[CapacityResult]) -> str:
    return "; ".join(c.refused or "no capacity" for c in caps if c.capacity is None)


def _shared_capacity(s: Sides) -> tuple[list[tuple[str, list[CapacityResult], list[CapacityResult]]], str]:
    """The serving steps whose capacity both sides found, and why the others are not compared."""
    ca, cb = _capacities(s.runs_a), _capacities(s.runs_b)
    shared, why = [], []
    for step in [*ca, *(x for x in cb if x not in ca)]:
        a, b = ca.get(step, []), cb.get(step, [])
        if not a or not b:
            why.append(f"{step}: a capacity search on {'A' if a else 'B'} only")
        elif _refusals(a) or _refusals(b):
            why.append(f"{step}: " + "; ".join(f"{n} reported none ({r})" for n, r in
                                               (("A", _refusals(a)), ("B", _refusals(b))) if r))  # fmt: skip
        else:
            shared.append((step, a, b))
    return shared, "; ".join(why)


def row_capacity(s: Sides) -> DecideRow:
    """The highest request rate that meets the SLOs (a capacity search in a serving step), B against
    A within both searches' precision and repeat spread (decision.capacity_change)."""
    shared, why = _shared_capacity(s)
    if not shared:
        return _missing("capacity at SLO", why or "no capacity search in these runs (load.capacity)")
    changes: list[tuple[str, FigureChange]] = []
    shown_a: list[str] = []
    shown_b: list[str] = []
    for step, a, b in shared:
        (ma, wa, na), (mb, wb, nb) = _width(a), _width(b)
        changes.append((step, decision.capacity_change(ma, mb, wa, wb, n_a=na, n_b=nb)))
        shown_a.append(f"{step} {ma:.4g} ± {wa:.3g} req/s (n={na} repeats)")
        shown_b.append(f"{step} {mb:.4g} ± {wb:.3g} req/s (n={nb} repeats)")
    return DecideRow(
        row="capacity at SLO", a="; ".join(shown_a), b="; ".join(shown_b),
        verdict=decision.overall(c.change for _, c in changes),
        why=f"{len(shared)} step(s), each within its searches' precision and repeat spread"
        + (f"; not compared: {why}" if why else ""),
        details=[f"{st}: {decision.describe(c)} -> {c.change}" for st, c in changes],
    )  # fmt: skip


def row_cost(s: Sides) -> DecideRow:
    """Cost per 1M output tokens at the capacity rate, by part (decision.cost_change). A side whose
    cost names a part missing (no power telemetry, no fault measured) leaves the row missing: a
    partial cost is shown, never compared as if whole."""
    name: RowName = "cost per 1M tokens at capacity"
    shared, why = _shared_capacity(s)
    if not shared:
        at_levels = [
            r for r in s.comparison.serving if (r.a_cost_per_million, r.b_cost_per_million) != (None, None)
        ]
        seen = ""
        if at_levels:
            r = at_levels[-1]
            seen = (
                f"; at the fixed level {r.step} {r.level}: A {figure(r.a_cost_per_million)}, "
                f"B {figure(r.b_cost_per_million)} per 1M output tokens, shown, not compared (it does not "
                "grow with the replicas)"
            )
        return _missing(name, "no capacity to price" + (f": {why}" if why else "") + seen)
    shown_a: list[str] = []
    shown_b: list[str] = []
    gaps: list[str] = []
    changes: list[tuple[str, FigureChange]] = []
    for step, a, b in shared:
        priced: list[float | None] = []
        for side, caps, shown in (("A", a, shown_a), ("B", b, shown_b)):
            c = next((x.cost_at for x in caps if x.cost_at is not None), None)
            if c is None or c.per_million_output_tokens is None:
                gaps.append(f"{step} {side}: no cost model at the capacity rate")
                priced.append(None)
                continue
            shown.append(f"{step} {c.per_million_output_tokens:.4g} per 1M output tokens ({total_label(c)})")
            if c.missing:
                gaps.append(f"{step} {side}: missing {', '.join(c.missing)}")
            priced.append(c.per_million_output_tokens)
        ca, cb = priced
        if ca is not None and cb is not None and not gaps:
            (ma, wa, _), (mb, wb, _) = _width(a), _width(b)
            ch = decision.cost_change(ca, cb, wa / ma, wb / mb)
            changes.append((step, ch))
    if gaps:
        return DecideRow(row=name, a="; ".join(shown_a) or None, b="; ".join(shown_b) or None,
                         verdict="missing", why="not every part is known: " + "; ".join(gaps))  # fmt: skip
    return DecideRow(
        row=name, a="; ".join(shown_a), b="; ".join(shown_b),
        verdict=decision.overall(c.change for _, c in changes),
        why=f"{len(changes)} step(s), every part known, band from the searches' widths",
        details=[f"{st}: {decision.describe(c)} -> {c.change}" for st, c in changes],
    )  # fmt: skip


def _outages(runs: Sequence[RunRecord]) -> dict[tuple[str, str], list[float]]:
    """(serving fault kind, figure) -> the seconds over every injection of every run."""
    out: dict[tuple[str, str], list[float]] = {}
    for rec in runs:
        for sv in rec.serving:
            for f in sv.faults:
                rc = f.recovery
                if rc is None:
                    continue
                for name, v in (("outage", rc.outage_s), ("to steady", rc.to_steady_s)):
                    if v is not None:
                        out.setdefault((f.kind, name), []).append(v)
    return out


def row_faults(s: Sides) -> DecideRow:
    """Outage and time to steady of the serving faults, and the collective recovery phases, B
    against A (decision.time_change: a band in seconds from the repeats' spread)."""
    oa, ob = _outages(s.runs_a), _outages(s.runs_b)
    details: list[str] = []
    words: list[str] = []
    shown_a: list[str] = []
    shown_b: list[str] = []
    for key in sorted(set(oa) & set(ob)):
        va, vb = oa[key], ob[key]
        band, word = decision.time_change(va, vb, floor=s.comparison.floor, k=s.comparison.k)
        ma, mb = statistics.median(va), statistics.median(vb)
        words.append(word)
        shown_a.append(f"{key[0]} {key[1]} {ma:.3g} s (n={len(va)})")
        shown_b.append(f"{key[0]} {key[1]} {mb:.3g} s (n={len(vb)})")
        details.append(f"{key[0]} {key[1]}: A {ma:.3g} s, B {mb:.3g} s, band ±{band:.3g} s -> {word}")
    for r in s.comparison.recovery:
        if r.verdict == "missing" or r.a_median_s is None or r.b_median_s is None:
            continue
        words.append(r.verdict)
        shown_a.append(f"{r.fault} {r.phase} {r.a_median_s:.3g} s (n={r.n_a})")
        shown_b.append(f"{r.fault} {r.phase} {r.b_median_s:.3g} s (n={r.n_b})")
        details.append(
            f"{r.fault} {r.phase}: A {r.a_median_s:.3g} s, B {r.b_median_s:.3g} s, "
            f"band ±{figure(r.band_s)} s -> {r.verdict}"
        )
    if not words:
        only = sorted({k[0] for k in set(oa) ^ set(ob)})
        why = "no fault that both sides injected"
        return _missing("fault behaviour", why + (f" (one side only: {', '.join(only)})" if only else ""))
    return DecideRow(
        row="fault behaviour", a="; ".join(shown_a), b="; ".join(shown_b), verdict=decision.overall(words),
        why=f"{len(words)} fault figure(s), each against a band in seconds from its repeats", details=details,
    )  # fmt: skip


def row_network(s: Sides) -> DecideRow:
    """busbw of the collective steps both sides ran, each size against the noise band; a row stands
    only where the compare flagged it (adjacent sizes agree)."""
    rows = [r for r in s.comparison.rows if r.verdict in ("better", "same", "worse")]
    if not rows:
        shared = [r for r in s.comparison.rows if r.verdict != "missing"]
        why = (
            f"no collective row could be judged ({len(shared)} shared, each n/a: no busbw to compare)"
            if shared
            else "no collective step that both sides ran"
        )
        return _missing("network", why)
    steps = {r.step for r in rows}
    last = rows[-1]
    largest = [r for r in rows if r.step == last.step and r.collective == last.collective]
    top = max(largest, key=lambda r: r.size_bytes)
    worse = sum(r.verdict == "worse" for r in rows)
    better = sum(r.verdict == "better" for r in rows)
    return DecideRow(
        row="network",
        a=f"{top.collective} busbw {figure(top.a_gbs)} GB/s at {format_size(top.size_bytes)}, {top.step} "
        f"(n={top.n_a})",
        b=f"{top.collective} busbw {figure(top.b_gbs)} GB/s (n={top.n_b})",
        verdict=decision.overall(r.verdict for r in rows),
        why=f"{len(rows)} size(s) over {len(steps)} step(s): {worse} worse, {better} better beyond the band",
        details=[f"{r.step} {r.collective} {format_size(r.size_bytes)}: B/A {figure(r.ratio)} -> {r.verdict}"
                 for r in rows if r.verdict != "same"],
    )  # fmt: skip


def row_effort(s: Sides) -> DecideRow:
    """Provisioning time and the number of 'needs porting' items of a migration."""
    return _missing(
        "operational effort",
        "no provisioning time or needs-porting count in these runs (orch provision and orch migrate "
        "plan record them)",
    )


ROWS: dict[RowName, Callable[[Sides], DecideRow]] = {
    "model compatibility": row_compatibility,
    "output quality": row_quality,
    "latency": row_latency,
    "capacity at SLO": row_capacity,
    "cost per 1M tokens at capacity": row_cost,
    "fault behaviour": row_faults,
    "network": row_network,
    "operational effort": row_effort,
}
"""Every row of the page, in its order: a new row is one function here and its name in RowName."""


def decide_overall(rows: Sequence[DecideRow]) -> tuple[Overall, str]:
    """The overall call and its reason (module doc)."""
    missing = [r.row for r in rows if r.verdict == "missing"]
    if missing:
        return "undecided", "undecided: no figure for " + ", ".join(missing)
    word = decision.overall(r.verdict for r in rows)
    named = [r.row for r in rows if r.verdict == word]
    return word, f"{word}: " + (", ".join(named) if word != "same" else "every row within its band")


def decide(
    runs_a: Sequence[RunRecord], runs_b: Sequence[RunRecord], *, floor: float = decision.FLOOR,
    k: float = decision.K,
) -> DecidePage:  # fmt: skip
    """The page for B against A (each side: its first run, then its repeats)."""
    if not runs_a or not runs_b:
        raise ValueError("each side needs at least one run")
    c = compare_runs(runs_a[0], runs_b[0], repeats_a=list(runs_a[1:]), repeats_b=list(runs_b[1:]),
                     floor=floor, k=k)  # fmt: skip
    sides = Sides(runs_a, runs_b, c)
    rows = [build(sides) for build in ROWS.values()]
    overall, why = decide_overall(rows)
    return DecidePage(
        a=runs_a[0].run_id, b=runs_b[0].run_id, runs_a=[r.run_id for r in runs_a],
        runs_b=[r.run_id for r in runs_b], plan_a=runs_a[0].plan_name, plan_b=runs_b[0].plan_name,
        rows=rows, overall=overall, why=why,
    )  # fmt: skip


# --- the formats ---------------------------------------------------------------------------------


def page_sections(p: DecidePage) -> list[Section]:
    """The page as format-neutral sections: the call, the rows' table, each row's figures."""
    head = ["row", f"A {p.a}", f"B {p.b}", "verdict", "why"]
    rows = [[r.row, r.a or "-", r.b or "-", r.verdict, r.why] for r in p.rows]
    out = [
        Section(
            title=f"Decision: B {p.b} against A {p.a}",
            ident="decision",
            lines=[
                f"**overall**: {p.overall}",
                f"**why**: {p.why}",
                f"**runs**: A {', '.join(p.runs_a)} ({p.plan_a}); B {', '.join(p.runs_b)} ({p.plan_b})",
            ],
            head=head,
            rows=rows,
            row_class="row",
        )
    ]
    for r in p.rows:
        if r.details:
            out.append(Section(title=r.row, lines=list(r.details)))
    return out


def page_markdown(p: DecidePage) -> str:
    return "\n".join(sections_markdown(page_sections(p), level=1)).rstrip() + "\n"


def page_html(p: DecidePage) -> str:
    h = html_text
    return (
        f"<!doctype html><meta charset='utf-8'><title>orch decide {h(p.b)} vs {h(p.a)}</title>\n"
        + sections_html(page_sections(p), ident="decide", cls=f"overall-{p.overall}")
        + "\n"
    )
