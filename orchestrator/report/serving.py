"""The serving part of every report format (docs/serving.md, "Reports"): per serving step and load
level the latency percentiles with their n, throughput, SLOs, SLO attainment and goodput, cost with its inputs,
and the engines' load times; the HTML report adds TTFT/ITL against concurrency (p50 line, p50-p99
band) and latency CDFs read back from the level's records; faults during serving (timelines, figures,
spread over repeats) are in report/serving_faults.py.

Every text from the run folder is escaped by the format's own helper: jinja2's autoescape and
svg's escape in HTML, escape.md in Markdown, the XML writer in JUnit, the label quoting of
OpenMetrics.
"""

# ruff: noqa: E501

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup

from orchestrator.metrics import serving as M
from orchestrator.metrics import verdict as V
from orchestrator.metrics.capacity import CAPACITY_HEAD, capacity_rows
from orchestrator.metrics.cost import total_label
from orchestrator.models.results import Percentiles
from orchestrator.models.run import RunRecord
from orchestrator.models.serving import ServingThresholds, ServingWorkload
from orchestrator.models.serving_results import (
    LevelSummary,
    RequestRecord,
    ServingLevelResult,
    ServingStepResult,
)
from orchestrator.report import svg
from orchestrator.report.common import Case
from orchestrator.report.escape import md
from orchestrator.report.quality import serving_quality_lines, serving_quality_sections
from orchestrator.report.sections import sections_html, sections_markdown
from orchestrator.report.serving_faults import (
    FAULT_HEAD,
    SPREAD_HEAD,
    fault_cases,
    fault_families,
    fault_rows,
    faults_html,
    spread_rows,
)
from orchestrator.safefs import inside
from orchestrator.text import figure

_LEVEL = re.compile(r"^(c|r)(\d+(?:\.\d+)?)$")
CDF_POINTS = 200
"""A CDF is drawn through at most this many evenly spaced ranks."""
QUANTILES = (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99"))


@dataclass(frozen=True)
class Level:
    step: ServingStepResult
    result: ServingLevelResult
    summary: LevelSummary


def levels(rec: RunRecord) -> list[Level]:
    """Every measured level of every serving step, in run order."""
    return [Level(s, lv, lv.summary) for s in rec.serving for lv in s.levels if lv.summary is not None]


def level_rows(rec: RunRecord, cells: Callable[[Level], list[str]]) -> list[list[str]]:
    """A table row per measured level (levels()): its step, its level, then cells(level)."""
    return [[lv.step.step.id, lv.summary.level, *cells(lv)] for lv in levels(rec)]


def workload(rec: RunRecord, s: ServingStepResult) -> ServingWorkload | None:
    if rec.plan is None:
        return None
    return next((w for w in rec.plan.serving if w.name == s.step.workload), None)


def model_label(rec: RunRecord, s: ServingStepResult) -> str:
    w = workload(rec, s)
    if w is None:
        return "-"
    m = w.model
    name = m.name or (str(m.path) if m.path is not None else "-")
    return name + (f"@{m.revision}" if m.revision else "")


def _pct(p: Percentiles) -> list[str]:
    return [figure(p.p50), figure(p.p95), figure(p.p99), str(p.n)]


def _share(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _x(level: str) -> tuple[str, float] | None:
    m = _LEVEL.match(level)
    return (m.group(1), float(m.group(2))) if m else None


def figure_rows(rec: RunRecord) -> list[list[str]]:
    """step, level, n, ok, errors, aborted, req/s, out tok/s, then p50/p95/p99/n of TTFT, ITL, TPOT, E2E."""

    def cells(lv: Level) -> list[str]:
        s = lv.summary
        return [str(s.n), str(s.ok), str(s.errors), str(s.aborted), figure(s.requests_per_s), figure(s.output_tokens_per_s),
                *_pct(s.ttft_ms), *_pct(s.itl_ms), *_pct(s.tpot_ms), *_pct(s.e2e_ms)]  # fmt: skip

    return level_rows(rec, cells)


FIGURE_HEAD = ["step", "level", "n", "ok", "errors", "aborted", "requests/s", "output tokens/s",
               *(f"{m} {q}" for m in ("TTFT ms", "ITL ms", "TPOT ms", "E2E ms") for q in ("p50", "p95", "p99", "n"))]  # fmt: skip


def turn_rows(rec: RunRecord) -> list[list[str]]:
    """Agentic sessions: step, level, turn, n, ok, mean input tokens, TTFT p50/p95/p99/n, and the
    level's prefix-cache hit rate (on its first turn's row)."""

    def rows(lv: Level) -> list[list[str]]:
        return [
            [lv.step.step.id, lv.summary.level, str(t.turn), str(t.n), str(t.ok), figure(t.input_tokens_mean),
             *_pct(t.ttft_ms), M.prefix_cache_label(lv.result.prefix_cache) if k == 0 else ""]
            for k, t in enumerate(lv.summary.per_turn)
        ]  # fmt: skip

    return [row for lv in levels(rec) for row in rows(lv)]


TURN_HEAD = ["step", "level", "turn", "n", "ok", "input tokens (mean)", "TTFT ms p50", "TTFT ms p95",
             "TTFT ms p99", "TTFT n", "prefix-cache hit rate"]  # fmt: skip


def cost_part_rows(rec: RunRecord) -> list[list[str]]:
    """Per level with a cost by part, then each capacity's (level "capacity"): one row per part (its cost per hour, or why it is missing),
    then the total with the figures per request and per 1M output tokens, partial or complete."""
    found = [(lv.step.step.id, lv.summary.level, lv.result.cost_at) for lv in levels(rec)]
    found += [(s.step.id, "capacity", s.capacity.cost_at) for s in rec.serving if s.capacity is not None]
    rows = []
    for step, level, c in found:
        if c is None:
            continue
        for p in c.parts:
            rows.append([step, level, p.name, p.status, figure(p.per_hour), p.basis, "", ""])
        rows.append([step, level, "total", total_label(c), figure(c.per_hour), f"{c.nodes} node(s) at {c.rate}",
                     figure(c.per_request), figure(c.per_million_output_tokens)])  # fmt: skip
    return rows


COST_PART_HEAD = ["step", "level", "part", "status", "per hour", "how", "per successful request",
                  "per 1M output tokens"]  # fmt: skip


def slo_rows(rec: RunRecord) -> list[list[str]]:
    """step, level, SLO attainment (of n), goodput, then each SLO: p99 <= limit (n) met/MISSED/not judged."""

    def cells(lv: Level) -> list[str]:
        s = lv.summary
        slos = "; ".join(
            f"{c.metric.upper()} p99 {figure(c.p99_ms)} <= {c.limit_ms:g} ms (n={c.n}): "
            f"{'met' if c.met else 'not judged (n<100)' if c.met is None else 'MISSED'}"
            for c in s.slos
        )
        return [_share(s.slo_attainment), str(s.n), figure(s.request_goodput), _share(s.error_rate),
                _share(s.abort_rate), _share(s.timeout_rate), _share(s.truncated_rate),
                slos or "no SLO in the plan"]  # fmt: skip

    return level_rows(rec, cells)


SLO_HEAD = ["step", "level", "SLO attainment", "of n", "goodput (req/s)", "error rate", "abort rate",
            "timeout rate", "truncated rate", "SLOs (p99 against limit)"]  # fmt: skip


def cost_rows(rec: RunRecord) -> list[list[str]]:
    """step, level, per request, per 1M output tokens, and the inputs of the calculation."""

    def cells(lv: Level) -> list[str]:
        c = lv.result.cost
        if c is None:
            return ["-", "-", "no price given (plan or inventory)"]
        inputs = (f"{c.price_per_node_hour:g}/node-hour x {c.nodes} node(s) x {c.duration_s:.1f} s = {c.total:.4g}; "
                  f"over {c.ok} successful requests, {c.output_tokens} output tokens; price from {c.source or '-'}")  # fmt: skip
        return [figure(c.per_request), figure(c.per_million_output_tokens), inputs]

    return level_rows(rec, cells)


COST_HEAD = ["step", "level", "per request", "per 1M output tokens", "inputs"]


def load_rows(rec: RunRecord) -> list[list[str]]:
    """step, node, start, health, load to health s, load to first answer s, job, job state: one row
    per start of each engine, its first and every restart (each with its own job)."""
    rows = []
    for s in rec.serving:
        for e in s.engines:
            restarts = sorted((r for r in s.restarts if r.node == e.node), key=lambda r: r.attempt)
            first_job = e.first_job_id or (e.job_id if not restarts else None)  # older results: no first job
            rows.append([s.step.id, e.node, "first", e.health, figure(e.load_to_health_s),
                         figure(e.load_to_first_answer_s), first_job or "-", "-" if restarts else e.job_state or "-"])  # fmt: skip
            for r in restarts:
                up = None if r.healthy_at is None else r.healthy_at - r.started_at
                last = r is restarts[-1] and r.job_id == e.job_id
                rows.append([s.step.id, e.node, f"restart {r.attempt}",
                             ("healthy" if r.healthy_at is not None else "not healthy"), figure(up), "-",
                             r.job_id or "-", (e.job_state or "-") if last else "-"])  # fmt: skip
    return rows


def _times(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}x"


def baseline_rows(rec: RunRecord) -> list[list[str]]:
    """step, level, baseline (its run), each p99 and output tokens/s as a ratio to the baseline's
    (this run / baseline; '-' where a side lacks the figure), and the plan's limits."""
    rows = []
    for s in rec.serving:
        for lv in s.levels:
            if (b := lv.baseline) is None:
                continue
            limits = [f"p99 <= {b.max_p99_ratio:g}x"] if b.max_p99_ratio is not None else []
            if b.min_throughput_fraction is not None:
                limits.append(f"tokens/s >= {b.min_throughput_fraction:g}x")
            rows.append([s.step.id, lv.level, f"{b.name} (run {b.run_id})",
                         *[_times(b.p99.get(k)) for k in ("ttft", "itl", "tpot", "e2e")], _times(b.throughput),
                         ", ".join(limits) or "-"])  # fmt: skip
    return rows


BASELINE_HEAD = ["step", "level", "baseline", "TTFT p99", "ITL p99", "TPOT p99", "E2E p99", "output tokens/s",
                 "limits"]  # fmt: skip


LOAD_HEAD = [
    "step",
    "node",
    "start",
    "health",
    "load to health s",
    "load to first answer s",
    "job",
    "job state",
]


# -- Markdown ----------------------------------------------------------------------------------


def search_rows(rec: RunRecord) -> list[list[str]]:
    """step, then metrics/capacity.py's capacity rows: each repeat and the capacity (or why none)."""
    return [
        [s.step.id, *row] for s in rec.serving if s.capacity is not None for row in capacity_rows(s.capacity)
    ]


SEARCH_HEAD = ["step", *CAPACITY_HEAD]


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(md(h) for h in head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(md(v) for v in r) + " |" for r in rows
    ]


def serving_markdown(rec: RunRecord) -> list[str]:
    """The serving section of the Markdown report (no lines when the run has no serving step)."""
    if not rec.serving:
        return []
    lines = ["", "## Serving", ""]
    for s in rec.serving:
        lines.append(f"- step {md(s.step.id)}: engine {md(s.step.engine)}, model {md(model_label(rec, s))}, "
                     f"{s.step.replicas} replica(s), verdict **{md(s.verdict)}**"
                     + (f": {md('; '.join(s.reasons))}" if s.reasons else ""))  # fmt: skip
    for title, head, rows in (
        ("Latency and throughput (ms; every percentile with its n)", FIGURE_HEAD, figure_rows(rec)),
        ("SLOs, attainment and goodput", SLO_HEAD, slo_rows(rec)),
        ("Cost", COST_HEAD, cost_rows(rec)),
        ("Cost by part (a missing part is named, not counted)", COST_PART_HEAD, cost_part_rows(rec)),
        ("Capacity at SLO (capacity search)", SEARCH_HEAD, search_rows(rec)),
        ("Agentic sessions: TTFT per turn (the history grows with the turn)", TURN_HEAD, turn_rows(rec)),
        ("Against the baseline (this run / the baseline's)", BASELINE_HEAD, baseline_rows(rec)),
        ("Model load times", LOAD_HEAD, load_rows(rec)),
        ("Faults during serving (seconds after the fault)", FAULT_HEAD, fault_rows(rec)),
        ("Recovery over repeats (median, min to max, n)", SPREAD_HEAD, spread_rows(rec)),
    ):
        if rows:
            lines += ["", f"### {title}", "", *_md_table(head, rows)]
    for sec in serving_quality_sections(rec.serving):
        lines += ["", *sections_markdown([sec], level=3)]
    return lines


# -- HTML --------------------------------------------------------------------------------------

_TEMPLATE = """<h2 id="serving">Serving</h2>
{% for s in steps %}<p>step <b>{{ s.id }}</b>: engine {{ s.engine }}, model <code>{{ s.model }}</code>, {{ s.replicas }} replica(s),
<span class="badge v-{{ s.verdict }}">{{ s.verdict }}</span>{% for x in s.reasons %}<br><span class="muted">{{ x }}</span>{% endfor %}</p>
{% endfor %}
<div class="plots">{% for p in plots %}{{ p }}{% endfor %}</div>
{% for title, head, rows, tid in tables %}{% if rows %}<h3>{{ title }}</h3>
<table id="{{ tid }}"><tr>{% for h in head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in rows %}<tr>{% for v in r %}<td>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}{% endfor %}
<p class="muted">Percentiles are hidden below the n that defines them (p99 needs n &ge; 100). SLO attainment is the share of
counted requests that succeeded and met every SLO (failed requests count against it and against cost); goodput is
those requests per second. The CDFs are
drawn from the records of each level (steps/&lt;step&gt;/records-&lt;level&gt;.jsonl).</p>
"""

_env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
_tmpl = _env.from_string(_TEMPLATE)


def _trusted(text: str) -> Markup:
    """SVG made by orchestrator.report.svg, which escapes every text it embeds."""
    return Markup(text)  # noqa: S704


def _level_plots(s: ServingStepResult) -> list[Markup]:
    """TTFT and ITL against concurrency (and against request rate): p50 line, p99 line, band between."""
    out: list[Markup] = []
    by_kind: dict[str, list[tuple[float, LevelSummary]]] = {}
    for lv in s.levels:
        x = _x(lv.level)
        if lv.summary is not None and x is not None:
            by_kind.setdefault(x[0], []).append((x[1], lv.summary))
    for kind, pts in by_kind.items():
        x_label = "concurrency (requests in flight)" if kind == "c" else "request rate (Poisson, requests/s)"
        for metric, attr in (("TTFT", "ttft_ms"), ("ITL", "itl_ms")):
            ps = [(x, getattr(sm, attr)) for x, sm in sorted(pts)]
            p50 = [(x, p.p50) for x, p in ps if p.p50 is not None]
            p99 = [(x, p.p99) for x, p in ps if p.p99 is not None]
            band = [(x, p.p50, p.p99) for x, p in ps if p.p50 is not None and p.p99 is not None]
            if not p50:
                continue
            out.append(_trusted(svg.line_chart(
                [svg.Series(f"{metric} p50", p50), svg.Series(f"{metric} p99", p99, dashed=True)],
                bands=[svg.Band(f"{metric} p50 to p99", band)],
                title=f"{s.step.id}: {metric} against {'concurrency' if kind == 'c' else 'rate'}",
                x_label=x_label, y_label=f"{metric} (ms)", x_log=len(p50) > 2, x_base=2,
                kind=f"serving-{metric.lower()}",
            )))  # fmt: skip
    return out


def _cdf(values: list[float]) -> list[tuple[float, float]]:
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return []
    idx = sorted({round(i * (n - 1) / max(1, CDF_POINTS - 1)) for i in range(min(n, CDF_POINTS))})
    return [(xs[i], (i + 1) / n) for i in idx]


def _records(rec: RunRecord, lv: ServingLevelResult) -> list[RequestRecord] | None:
    """The level's counted records, when its file is a regular file inside the run folder."""
    path = rec.run_dir / lv.records
    if inside(rec.run_dir, path) is not None:
        return None
    try:
        recs = M.parse_records(path.read_text(encoding="utf-8").splitlines(), source=lv.records)
    except (OSError, ValueError):
        return None
    return [r for r in recs if not r.warmup]


def _cdf_plots(rec: RunRecord, s: ServingStepResult) -> list[Markup]:
    out: list[Markup] = []
    series: dict[str, list[svg.Series]] = {"TTFT": [], "ITL": [], "E2E": []}
    for lv in s.levels:
        recs = _records(rec, lv)
        if not recs:
            continue
        ok = [r for r in recs if r.status == "ok"]
        values = {
            "TTFT": [v for r in ok if (v := M.ttft_ms(r)) is not None],
            "ITL": [g for r in ok for g in M.itl_ms(r)],
            "E2E": [M.e2e_ms(r) for r in ok],
        }
        for metric, vs in values.items():
            if vs:
                series[metric].append(svg.Series(f"{lv.level} (n={len(vs)})", _cdf(vs)))
    for metric, ss in series.items():
        if ss:
            out.append(_trusted(svg.line_chart(
                ss, title=f"{s.step.id}: {metric} CDF", x_label=f"{metric} (ms)", y_label="share of requests",
                kind=f"serving-cdf-{metric.lower()}",
            )))  # fmt: skip
    return out


def serving_html(rec: RunRecord, report_dir: Path | None = None) -> Markup:
    """The serving section of the HTML report (empty when the run has no serving step)."""
    if not rec.serving:
        return Markup("")
    steps = [
        {"id": s.step.id, "engine": s.step.engine, "model": model_label(rec, s), "replicas": s.step.replicas,
         "verdict": s.verdict, "reasons": s.reasons}
        for s in rec.serving
    ]  # fmt: skip
    plots = [p for s in rec.serving for p in (*_level_plots(s), *_cdf_plots(rec, s))]
    tables = [
        (
            "Latency and throughput (ms; every percentile with its n)",
            FIGURE_HEAD,
            figure_rows(rec),
            "serving-figures",
        ),
        ("SLOs, attainment and goodput", SLO_HEAD, slo_rows(rec), "serving-slos"),
        ("Cost", COST_HEAD, cost_rows(rec), "serving-cost"),
        ("Capacity at SLO (capacity search)", SEARCH_HEAD, search_rows(rec), "serving-capacity"),
        (
            "Agentic sessions: TTFT per turn (the history grows with the turn)",
            TURN_HEAD,
            turn_rows(rec),
            "serving-turns",
        ),
        (
            "Cost by part (a missing part is named, not counted)",
            COST_PART_HEAD,
            cost_part_rows(rec),
            "serving-cost-parts",
        ),
        (
            "Against the baseline (this run / the baseline's)",
            BASELINE_HEAD,
            baseline_rows(rec),
            "serving-baseline",
        ),
        ("Model load times", LOAD_HEAD, load_rows(rec), "serving-load"),
    ]
    del report_dir  # the engines' logs are linked from the steps' raw logs
    quality = "".join(sections_html([q], ident=q.ident) for q in serving_quality_sections(rec.serving))
    body = Markup(_tmpl.render(steps=steps, plots=plots, tables=tables))  # noqa: S704
    return body + Markup(quality) + faults_html(rec)  # noqa: S704 (sections_html escapes every value)


# -- JUnit -------------------------------------------------------------------------------------

_THRESHOLD_NAMES = {
    "max_ttft_p99_ms": "TTFT p99 <= {:g} ms",
    "max_itl_p99_ms": "ITL p99 <= {:g} ms",
    "max_tpot_p99_ms": "TPOT p99 <= {:g} ms",
    "max_e2e_p99_ms": "E2E p99 <= {:g} ms",
    "min_slo_attainment": "SLO attainment >= {:.1%}",
    "max_error_rate": "error rate <= {:.1%}",
    "min_output_tokens_per_s": "output tokens/s >= {:g}",
}


def serving_cases(rec: RunRecord) -> list[Case]:
    """One JUnit case per SLO and per threshold of each serving step and level (classname
    orch.<plan>.<step>.<level>); a p99 not defined (n < 100) skips an SLO and fails a threshold,
    as the run judged it."""
    cases: list[Case] = []
    for s in rec.serving:
        w = workload(rec, s)
        for lv in s.levels:
            cls = f"orch.{rec.plan_name}.{s.step.id}.{lv.level}"
            sm = lv.summary
            if sm is None:
                cases.append(Case(cls, "level", "skipped" if s.verdict == "skipped" else "infra",
                                  "no counted request was recorded"))  # fmt: skip
                continue
            for c in sm.slos:
                outcome: V.Verdict = "skipped" if c.met is None else "pass" if c.met else "fail"
                msg = f"{c.metric.upper()} p99 {figure(c.p99_ms)} ms, limit {c.limit_ms:g} ms (n={c.n})"
                cases.append(Case(cls, f"SLO {c.metric.upper()} p99 <= {c.limit_ms:g} ms", outcome, msg))
            if w is None:
                continue
            for field, fmt in _THRESHOLD_NAMES.items():
                limit = getattr(w.thresholds, field)
                if limit is None:
                    continue
                one = w.model_copy(update={"thresholds": ServingThresholds(**{field: limit})})
                missed = V.serving_threshold_failures(s.step.id, one, sm)  # the run's own judgement
                cases.append(Case(cls, f"threshold {fmt.format(limit)}", "fail" if missed else "pass",
                                  "; ".join(missed)))  # fmt: skip
            if (bl := w.thresholds.baseline) is not None:  # judged by the run against the store
                at = f"step {s.step.id}, level {lv.level}: "
                missed = [r for r in s.reasons if r.startswith(at) and f"baseline {bl.name}" in r]
                cases.append(Case(cls, f"threshold baseline {bl.name}", "fail" if missed else "pass",
                                  "; ".join(missed)))  # fmt: skip
        cases += _quality_cases(rec, s)
    return cases + fault_cases(rec)


def _quality_cases(rec: RunRecord, s: ServingStepResult) -> list[Case]:
    """The output-quality gate of a step (classname orch.<plan>.<step>): one case, failed with the
    run's own reasons, passed, or skipped when nothing was judged (floor only, or not judged)."""
    q = s.quality
    if q is None:
        return []
    cls, at = f"orch.{rec.plan_name}.{s.step.id}", f"step {s.step.id}: output quality"
    name = f"quality {s.step.id}" + (f" against baseline {q.baseline}" if q.baseline else "")
    missed = [r for r in s.reasons if r.startswith(at)]
    if missed:
        return [Case(cls, name, "fail", "; ".join(missed))]
    if q.judgement is not None:
        return [Case(cls, name, "pass", "; ".join(serving_quality_lines(s.step.id, q)))]
    return [Case(cls, name, "skipped", q.not_judged or "no baseline named: this run's floor only")]


# -- OpenMetrics -------------------------------------------------------------------------------

Sample = tuple[dict[str, str], float]


def serving_families(rec: RunRecord, base: dict[str, str]) -> dict[str, tuple[str, str, list[Sample]]]:
    """OpenMetrics families of the serving steps: latency quantiles (seconds; labels step, level,
    metric, quantile), their sample counts, throughput, SLO attainment, goodput and cost per 1M output tokens."""
    fams: dict[str, tuple[str, str, list[Sample]]] = {
        "orch_serving_latency_seconds": (
            "gauge",
            "latency percentile per serving step, level, metric (ttft, itl, tpot, e2e) and quantile",
            [],
        ),
        "orch_serving_latency_samples": ("gauge", "samples behind each latency's percentiles (n)", []),
        "orch_serving_output_tokens_per_second": (
            "gauge",
            "output tokens per second of successful requests",
            [],
        ),
        "orch_serving_requests_per_second": ("gauge", "successful requests per second", []),
        "orch_serving_slo_attainment_ratio": (
            "gauge",
            "SLO attainment: share of counted requests that succeeded and met every SLO",
            [],
        ),
        "orch_serving_goodput_requests_per_second": (
            "gauge",
            "goodput: successful requests per second that met every SLO",
            [],
        ),
        "orch_serving_error_ratio": ("gauge", "share of counted requests that failed or were aborted", []),
        "orch_serving_timeout_ratio": ("gauge", "share of counted requests that timed out", []),
        "orch_serving_truncated_ratio": (
            "gauge",
            "share of counted requests whose answer stream ended before the engine said it was complete",
            [],
        ),
        "orch_serving_cost_per_million_output_tokens": (
            "gauge",
            "cost per 1M output tokens of successful requests",
            [],
        ),
        "orch_serving_load_seconds": (
            "gauge",
            "engine model load time: submitted to its health endpoint's first 200",
            [],
        ),
    }
    for lv in levels(rec):
        sm = lv.summary
        ll = {**base, "step": lv.step.step.id, "level": sm.level}
        for metric in M.LATENCY_FIGURES:
            p: Percentiles = getattr(sm, f"{metric}_ms")
            fams["orch_serving_latency_samples"][2].append(({**ll, "metric": metric}, float(p.n)))
            for q, attr in QUANTILES:
                v = getattr(p, attr)
                if v is not None:
                    fams["orch_serving_latency_seconds"][2].append(
                        ({**ll, "metric": metric, "quantile": q}, v / 1e3)
                    )
        for name, v in (("orch_serving_output_tokens_per_second", sm.output_tokens_per_s),
                        ("orch_serving_requests_per_second", sm.requests_per_s),
                        ("orch_serving_slo_attainment_ratio", sm.slo_attainment),
                        ("orch_serving_goodput_requests_per_second", sm.request_goodput),
                        ("orch_serving_error_ratio", (sm.errors + sm.aborted) / sm.n if sm.n else None),
                        ("orch_serving_timeout_ratio", sm.timeout_rate),
                        ("orch_serving_truncated_ratio", sm.truncated_rate),
                        ("orch_serving_cost_per_million_output_tokens",
                         lv.result.cost.per_million_output_tokens if lv.result.cost else None)):  # fmt: skip
            if v is not None:
                fams[name][2].append((ll, float(v)))
    for s in rec.serving:
        for e in s.engines:
            if e.load_to_health_s is not None:
                fams["orch_serving_load_seconds"][2].append(
                    ({**base, "step": s.step.id, "node": e.node}, e.load_to_health_s)
                )
    fams.update(fault_families(rec, base))
    return fams
