"""Service figures from per-request records: latency percentiles, throughput, SLO attainment,
goodput, cost, and
the interactive rule of compare (docs/serving.md, "Metrics").

Definitions (those of vLLM's serving benchmark, so that figures compare with pilots' outputs):
  TTFT  first token - send, per successful request;
  ITL   the gap between two consecutive token arrivals (streamed chunks with text), every gap of
        every successful request pooled;
  TPOT  (end - first token) / (output tokens - 1), per successful request of 2 or more tokens;
  E2E   end - send, per successful request.
Each is summarised as p50/p95/p99 with its n (metrics/percentiles: p99 is hidden below n = 100).
Only counted requests enter (warm-up requests are written but never counted). Throughput divides
by the level's span, first send to last end. Error and abort rates are shares of all counted
requests, and so are the timeout rate (a part of the abort rate) and the truncated-stream rate (a
part of the error rate), counted by each record's reason (models/serving_results.FailureReason);
SLO attainment is the share of all counted requests that succeeded and met every SLO (a
failed request counts against it), goodput those requests per second of the span (vLLM's
`--goodput`); capacity, the highest rate whose attainment stays at a target, is a search over
levels, not a level's figure. Cost: metrics/cost.py.

Compare judges through metrics/decision.py (the interactive rule: a run with more throughput but a
p99 latency worse beyond the noise band is "worse for interactive", whatever its throughput gain).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence

from orchestrator.metrics import decision
from orchestrator.metrics.cost import cost_label as cost_label  # the cost's home is metrics/cost.py
from orchestrator.metrics.cost import level_cost as level_cost
from orchestrator.metrics.decision import FLOOR, K
from orchestrator.metrics.percentiles import label, percentile, summarize
from orchestrator.models.results import Percentiles
from orchestrator.models.serving import ServingSlos
from orchestrator.models.serving_results import (
    LevelSummary,
    PrefixCache,
    RequestRecord,
    ServingComparison,
    SloCheck,
    TurnFigures,
)
from orchestrator.text import figure

LATENCY_FIGURES = ("ttft", "itl", "tpot", "e2e")


def parse_records(lines: Iterable[str], *, source: str = "records") -> list[RequestRecord]:
    """RequestRecords from JSON lines (blank lines skipped); raises ValueError naming the line."""
    out: list[RequestRecord] = []
    for no, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append(RequestRecord.model_validate_json(line))
            except ValueError as e:
                raise ValueError(f"{source} line {no}: not a request record: {e}") from e
    return out


def ttft_ms(r: RequestRecord) -> float | None:
    return None if r.first_token is None else (r.first_token - r.send) * 1e3


def tpot_ms(r: RequestRecord) -> float | None:
    if r.first_token is None or r.output_tokens < 2:
        return None
    return (r.end - r.first_token) / (r.output_tokens - 1) * 1e3


def e2e_ms(r: RequestRecord) -> float:
    return (r.end - r.send) * 1e3


def itl_ms(r: RequestRecord) -> list[float]:
    return [(b - a) * 1e3 for a, b in itertools.pairwise(r.token_times)]


def p99_log_se(values: Sequence[float], q: float = 0.99) -> float | None:
    """Standard error of ln(percentile q) from the order statistics around it: the ranks
    n*q -+ sqrt(n*q*(1-q)) bound a one-sigma, distribution-free interval of the quantile (the
    count of samples below it is binomial); half its width on the log scale is the se. None when
    the percentile is not shown (metrics/percentiles) or a bound is not positive."""
    if percentile(values, q) is None:
        return None
    xs = sorted(values)
    n = len(xs)
    half = math.sqrt(n * q * (1 - q))
    lo = xs[max(0, math.floor(n * q - half) - 1)]
    hi = xs[min(n - 1, math.ceil(n * q + half) - 1)]
    if lo <= 0 or hi <= 0:
        return None
    return (math.log(hi) - math.log(lo)) / 2


DRIFT_BLOCKS = 5
DRIFT_MIN_PER_BLOCK = 10
TAIL_Q = 0.95


def _block_tail(vals: Sequence[float]) -> float:
    """A block's tail: its p95 (nearest rank; about its 2nd largest of 40). A p99 moves with the tail,
    which wanders far more than the median: at 8 requests in flight one stall of the machine delays
    them all, so a run's p99 is not the independent order statistic p99_log_se assumes."""
    xs = sorted(vals)
    return xs[min(len(xs) - 1, math.ceil(TAIL_Q * len(xs)) - 1)]


def drift_log_se(ok: Sequence[RequestRecord]) -> dict[str, float | None]:
    """Batch means of one run: the successful requests in send order, cut into DRIFT_BLOCKS blocks
    of consecutive requests; per block the output tokens/s (tokens over the block's own span) and
    the tail (_block_tail) of TTFT, ITL, TPOT and E2E; per figure the standard deviation of
    ln(block value) over sqrt(blocks). On a shared machine a run's figures wander with the load
    around it (docs/serving.md, "The interactive rule"); this se carries that into compare's band. Empty under
    DRIFT_BLOCKS x DRIFT_MIN_PER_BLOCK requests."""
    if len(ok) < DRIFT_BLOCKS * DRIFT_MIN_PER_BLOCK:
        return {}
    recs = sorted(ok, key=lambda r: r.send)
    size = len(recs) // DRIFT_BLOCKS
    blocks = [recs[i * size : (i + 1) * size] for i in range(DRIFT_BLOCKS)]
    per: dict[str, list[float]] = {k: [] for k in ("tput", *LATENCY_FIGURES)}
    for b in blocks:
        span = max(r.end for r in b) - min(r.send for r in b)
        toks = sum(r.output_tokens for r in b)
        if span > 0 and toks > 0:
            per["tput"].append(toks / span)
        for name, vals in (
            ("ttft", [v for r in b if (v := ttft_ms(r)) is not None]),
            ("itl", [g for r in b for g in itl_ms(r)]),
            ("tpot", [v for r in b if (v := tpot_ms(r)) is not None]),
            ("e2e", [e2e_ms(r) for r in b]),
        ):
            if vals and (m := _block_tail(vals)) > 0:
                per[name].append(m)
    return {
        k: statistics.stdev(math.log(x) for x in v) / math.sqrt(len(v)) if len(v) == DRIFT_BLOCKS else None
        for k, v in per.items()
    }


def met_every_slo(r: RequestRecord, slos: ServingSlos) -> bool:
    """Whether a request succeeded and met every SLO. A request of one output token has no TPOT:
    only its TTFT and E2E are judged."""
    if r.status != "ok" or r.first_token is None:
        return False
    ttft, tpot = ttft_ms(r), tpot_ms(r)
    if slos.ttft_p99_ms is not None and ttft is not None and ttft > slos.ttft_p99_ms:
        return False
    if slos.tpot_p99_ms is not None and tpot is not None and tpot > slos.tpot_p99_ms:
        return False
    return not (slos.e2e_p99_ms is not None and e2e_ms(r) > slos.e2e_p99_ms)


def summarize_level(records: Iterable[RequestRecord], slos: ServingSlos | None = None) -> LevelSummary:
    """The figures of one level from its records (warm-up ones are dropped here). Raises
    ValueError when the records are of several levels or none is counted."""
    recs = [r for r in records if not r.warmup]
    levels = sorted({r.level for r in recs})
    if len(levels) != 1:
        raise ValueError(f"one level expected, got {levels or 'no counted request'}")
    slos = slos or ServingSlos()
    ok = [r for r in recs if r.status == "ok"]
    n = len(recs)
    span = max(r.end for r in recs) - min(r.send for r in recs)
    series: dict[str, list[float]] = {
        "ttft": [v for r in ok if (v := ttft_ms(r)) is not None],
        "itl": [g for r in ok for g in itl_ms(r)],
        "tpot": [v for r in ok if (v := tpot_ms(r)) is not None],
        "e2e": [e2e_ms(r) for r in ok],
    }
    summaries = {k: summarize(v) for k, v in series.items()}
    out_tokens = sum(r.output_tokens for r in ok)

    def per_s(x: float) -> float | None:
        return x / span if span > 0 else None

    good = sum(met_every_slo(r, slos) for r in recs) if slos.given() else None
    reasons = Counter(r.reason for r in recs if r.status != "ok" and r.reason is not None)
    checks = [
        _slo_check(metric, limit, summaries[metric])
        for metric, limit in (
            ("ttft", slos.ttft_p99_ms),
            ("tpot", slos.tpot_p99_ms),
            ("e2e", slos.e2e_p99_ms),
        )
        if limit is not None
    ]
    return LevelSummary(
        level=levels[0],
        n=n,
        ok=len(ok),
        errors=sum(r.status == "error" for r in recs),
        aborted=sum(r.status == "aborted" for r in recs),
        duration_s=span,
        ttft_ms=summaries["ttft"],
        itl_ms=summaries["itl"],
        tpot_ms=summaries["tpot"],
        e2e_ms=summaries["e2e"],
        input_tokens_per_s=per_s(sum(r.input_tokens for r in ok)),
        output_tokens_per_s=per_s(out_tokens),
        requests_per_s=per_s(len(ok)),
        error_rate=sum(r.status == "error" for r in recs) / n,
        abort_rate=sum(r.status == "aborted" for r in recs) / n,
        timeout_rate=reasons["timeout"] / n,
        truncated_rate=reasons["truncated"] / n,
        reasons=dict(sorted(reasons.items())),
        slo_attainment=good / n if good is not None else None,
        request_goodput=per_s(good) if good is not None else None,
        slos=checks,
        output_tokens=out_tokens,
        servers=dict(sorted(Counter(r.server for r in recs).items())),
        p99_log_se={k: p99_log_se(v) for k, v in series.items()},
        drift_log_se=drift_log_se(ok),
        per_turn=per_turn(recs),
    )


def per_turn(records: Iterable[RequestRecord]) -> list[TurnFigures]:
    """Agentic sessions: TTFT per turn index over the counted records that carry one (each turn's
    percentiles with its n; a turn's n falls where sessions ended early); [] for other levels."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.turn is not None and not r.warmup:
            turns.setdefault(r.turn, []).append(r)
    out = []
    for t, rs in sorted(turns.items()):
        ok = [r for r in rs if r.status == "ok"]
        out.append(
            TurnFigures(
                turn=t, n=len(rs), ok=len(ok),
                input_tokens_mean=statistics.fmean(r.input_tokens for r in ok) if ok else None,
                ttft_ms=summarize(v for r in ok if (v := ttft_ms(r)) is not None),
            )
        )  # fmt: skip
    return out


def _slo_check(metric: str, limit: float, p: Percentiles) -> SloCheck:
    return SloCheck(
        metric=metric,
        limit_ms=limit,
        p99_ms=p.p99,
        n=p.n,
        met=None if p.p99 is None else p.p99 <= limit,
    )


def summarize_levels(records: Iterable[RequestRecord], slos: ServingSlos | None = None) -> list[LevelSummary]:
    """One LevelSummary per level, in the order the levels first appear among the records."""
    by_level: dict[str, list[RequestRecord]] = {}
    for r in records:
        if not r.warmup:
            by_level.setdefault(r.level, []).append(r)
    return [summarize_level(v, slos) for v in by_level.values()]


def by_server(records: Iterable[RequestRecord]) -> dict[str, list[RequestRecord]]:
    """Records grouped by the server (node) that served them: per-replica figures."""
    out: dict[str, list[RequestRecord]] = {}
    for r in records:
        out.setdefault(r.server, []).append(r)
    return dict(sorted(out.items()))


def prefix_cache_label(pc: PrefixCache | None) -> str:
    """A session level's prefix-cache hit rate with its counts, or why there is none."""
    if pc is None:
        return "-"
    if pc.hit_rate is None:
        return pc.note or "-"
    return f"{pc.hit_rate:.1%} ({pc.hits:.0f} of {pc.queries:.0f} tokens)"


def level_lines(s: LevelSummary) -> list[str]:
    """A level's figures as text, every percentile with its n (no figure without its basis)."""
    rate = figure(s.output_tokens_per_s)
    rps = figure(s.requests_per_s)
    why = f" ({', '.join(f'{k} {v}' for k, v in s.reasons.items())})" if s.reasons else ""
    lines = [
        f"{s.level}: {s.ok}/{s.n} ok, errors {s.errors}, aborted {s.aborted}{why}, {rps} requests/s, "
        f"{rate} output tokens/s over {s.duration_s:.1f} s",
        f"  TTFT {label(s.ttft_ms, 'ms')}",
        f"  ITL  {label(s.itl_ms, 'ms')}",
        f"  TPOT {label(s.tpot_ms, 'ms')}",
        f"  E2E  {label(s.e2e_ms, 'ms')}",
    ]
    for t in s.per_turn:
        tokens = "-" if t.input_tokens_mean is None else f"{t.input_tokens_mean:.0f}"
        ttft = label(t.ttft_ms, "ms")
        lines.append(f"  turn {t.turn}: {t.ok}/{t.n} ok, input {tokens} tokens on average, TTFT {ttft}")
    if s.slo_attainment is not None:
        slo = ", ".join(
            f"{c.metric.upper()} p99 {'-' if c.p99_ms is None else f'{c.p99_ms:.4g}'} <= {c.limit_ms:g} ms "
            f"{'met' if c.met else 'not judged (n<100)' if c.met is None else 'MISSED'} (n={c.n})"
            for c in s.slos
        )
        good = figure(s.request_goodput)
        lines.append(
            f"  SLO attainment {s.slo_attainment:.1%} of {s.n} counted requests, goodput {good} requests/s; "
            f"SLOs: {slo}"
        )
    return lines


# -- compare: the interactive rule (metrics/decision.py) ------------------------------------------


def compare_level(
    a: Sequence[LevelSummary],
    b: Sequence[LevelSummary],
    *,
    floor: float = FLOOR,
    k: float = K,
    step: str | None = None,
) -> ServingComparison:
    """B against A at one level: each side is one run's LevelSummary or several repeats.

    Throughput (output tokens/s, higher is better) and each p99 latency (TTFT, ITL, TPOT, E2E;
    lower is better) are judged by metrics/decision.py (figure_change): the log scale, centre the
    median over the side's runs, band max(ln(1 + floor), k x se) with se from the robust spread of
    the repeats and at least one run's own uncertainty (its p99 order statistics, p99_log_se, and
    its drift, drift_log_se); the verdict is the interactive rule (decision.serving_verdict).
    Raises ValueError for an empty side or mixed levels.
    """
    if not a or not b:
        raise ValueError("each side needs at least one run")
    levels = {s.level for s in (*a, *b)}
    if len(levels) != 1:
        raise ValueError(f"one level expected, got {sorted(levels)}")
    tput = decision.figure_change(
        "output tokens/s",
        [t for s in a if (t := s.output_tokens_per_s)],
        [t for s in b if (t := s.output_tokens_per_s)],
        run_se=[v for s in (*a, *b) if (v := s.drift_log_se.get("tput")) is not None],
        n_a=len(a),
        n_b=len(b),
        floor=floor,
        k=k,
    )
    lat = [
        decision.figure_change(
            f"{m.upper()} p99",
            [p for s in a if (p := latency(s, m).p99) is not None],
            [p for s in b if (p := latency(s, m).p99) is not None],
            higher_is_better=False,
            run_se=run_log_se((*a, *b), m),
            n_a=sum(latency(s, m).n for s in a),
            n_b=sum(latency(s, m).n for s in b),
            floor=floor,
            k=k,
        )
        for m in LATENCY_FIGURES
    ]
    verdict, reason = decision.serving_verdict(tput, lat)
    return ServingComparison(
        level=a[0].level, verdict=verdict, throughput=tput, latency=lat, reason=reason, step=step
    )


def latency(s: LevelSummary, figure: str) -> Percentiles:
    """A level's latency summary by name (ttft, itl, tpot, e2e)."""
    p: Percentiles = getattr(s, f"{figure}_ms")
    return p


def run_figures_log_se(s: LevelSummary) -> dict[str, float]:
    """One run's own se of each judged figure's log: output tokens/s from its drift ("tput"), each
    p99 latency by run_log_se; a figure without one is left out."""
    out = {m: se for m in LATENCY_FIGURES for se in run_log_se([s], m)}
    if (t := s.drift_log_se.get("tput")) is not None:
        out["tput"] = t
    return out


def run_log_se(runs: Iterable[LevelSummary], figure: str) -> list[float]:
    """Each run's own se of ln p99 of a latency: the larger of its order statistics' and its drift's."""
    return [
        max(own)
        for s in runs
        if (own := [x for x in (s.p99_log_se.get(figure), s.drift_log_se.get(figure)) if x is not None])
    ]
