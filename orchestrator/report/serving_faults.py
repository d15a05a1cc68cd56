"""Faults during serving in every report format (docs/serving.md, "Faults during serving"): per
injection its recovery figures, and in HTML a timeline of the level's requests around it (TTFT at
each request's send time, failed and aborted ones marked, the fault, the outage shaded, steady
state); the spread of each plan fault over its repeats; one JUnit case per injection; OpenMetrics
gauges of the figures.

The recovery figures are those the run stored (ServingFaultResult.recovery); the timeline reads
the level's records from the run folder (ServingLevelResult.records, only a regular file inside the
run folder), and a file that cannot be read gives a note, never a failed report. Every text from
the run folder is escaped by the format's own helper (jinja2's autoescape and svg's escape in
HTML, escape.md in Markdown, the XML writer in JUnit, the label quoting of OpenMetrics).
"""

# ruff: noqa: E501

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import jinja2
from markupsafe import Markup

from orchestrator.metrics import serving as M
from orchestrator.metrics.serving_recovery import recovery_spread
from orchestrator.models.results import Percentiles
from orchestrator.models.run import RunRecord
from orchestrator.models.serving_recovery import ServingFaultResult, ServingRecovery, SpreadStat
from orchestrator.models.serving_results import RequestRecord, ServingStepResult
from orchestrator.report import svg
from orchestrator.report.common import Case
from orchestrator.report.escape import visible
from orchestrator.safefs import inside
from orchestrator.text import figure
from orchestrator.text import seconds as _secs
from orchestrator.workloads.loadgen import CONNECT_ERROR_PAUSE_S

WINDOW_S = 30.0
"""The timeline shows the requests sent from this long before the fault to this long after steady
state (to the level's last request when the service did not get back to steady)."""
MAX_OK_POINTS = 2000
"""At most this many successful requests are drawn per timeline (every k-th); failed and aborted
ones are always all drawn."""


@dataclass(frozen=True)
class Injection:
    step: ServingStepResult
    fault: ServingFaultResult


def injections(rec: RunRecord) -> list[Injection]:
    """Every fault injected into a serving step, in run order."""
    return [Injection(s, f) for s in rec.serving for f in s.faults]


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _ttft(p: Percentiles | None) -> str:
    """'p50 12.3, p99 - (n=37)' (ms): p99 is shown from n = 100 on."""
    if p is None:
        return "-"
    return f"p50 {figure(p.p50)}, p99 {figure(p.p99)} (n={p.n})"


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _back_healthy(f: ServingFaultResult) -> str:
    """'1 (healthy after 12.3 s)': the engine restarts and the first /health 200 after the fault."""
    if not f.restarts:
        return "0"
    healthy = [r.healthy_at - f.injected_at for r in f.restarts if r.healthy_at is not None]
    return f"{len(f.restarts)}" + (
        f" (healthy after {min(healthy):.2f} s)" if healthy else " (not healthy again)"
    )


# -- tables ------------------------------------------------------------------------------------

FAULT_HEAD = ["step", "level", "fault", "target", "repeat", "status", "to first failure s",
              "to first success s", "outage s", "to steady s", "failed (client-side count)", "aborted",
              "TTFT ms during", "TTFT ms after", "engine restarts"]  # fmt: skip


def fault_rows(rec: RunRecord) -> list[list[str]]:
    """One row per injection: its figures (seconds after the fault), or the fault's outcome when
    nothing was measured."""
    rows = []
    for i in injections(rec):
        f, r = i.fault, i.fault.recovery
        head = [i.step.step.id, f.level, f.kind, f.target, str(f.repeat)]
        if r is None:
            rows.append([*head, f"not measured (fault {f.outcome})", *["-"] * 8, _back_healthy(f)])
            continue
        rows.append([*head, r.status, _s(r.to_first_failure_s), _s(r.to_first_success_s), _s(r.outage_s),
                     _s(r.to_steady_s), str(r.failed), str(r.aborted), _ttft(r.ttft_during_ms),
                     _ttft(r.ttft_after_ms), _back_healthy(f)])  # fmt: skip
    return rows


def _spread(st: SpreadStat, fmt: str = ".2f") -> str:
    if st.n == 0 or st.median is None or st.min is None or st.max is None:
        return "- (n=0)"
    return f"{st.median:{fmt}} ({st.min:{fmt}} to {st.max:{fmt}}, n={st.n})"


SPREAD_HEAD = ["step", "fault", "target", "repeats", "statuses", "to first failure s", "to first success s",
               "outage s", "to steady s", "failed (client-side count)", "aborted"]  # fmt: skip


def spread_rows(rec: RunRecord) -> list[list[str]]:
    """Per serving step and plan fault (kind, target): median (min to max, n) of each figure over
    the repeats that measured it."""
    groups: dict[tuple[str, str, str], list[ServingRecovery]] = defaultdict(list)
    for i in injections(rec):
        if i.fault.recovery is not None:
            groups[(i.step.step.id, i.fault.kind, i.fault.target)].append(i.fault.recovery)
    rows = []
    for (step, kind, target), rs in groups.items():
        sp = recovery_spread(rs)
        rows.append([step, kind, target, str(sp.repeats), ", ".join(f"{k} {v}" for k, v in sp.statuses.items()),
                     _spread(sp.to_first_failure_s), _spread(sp.to_first_success_s), _spread(sp.outage_s),
                     _spread(sp.to_steady_s), _spread(sp.failed, "g"), _spread(sp.aborted, "g")])  # fmt: skip
    return rows


# -- the timeline ------------------------------------------------------------------------------


def level_records(
    run_dir: Path, step: ServingStepResult, level: str
) -> tuple[list[RequestRecord] | None, str]:
    """The level's counted records read from the run folder, or None and why not."""
    lv = next((x for x in step.levels if x.level == level), None)
    if lv is None:
        return None, f"step {step.step.id} has no result for level {level}"
    path = run_dir / lv.records
    why = inside(run_dir, path)
    if why is not None:
        return None, f"records {lv.records} {why}"
    try:
        recs = M.parse_records(path.read_text(encoding="utf-8").splitlines(), source=lv.records)
    except (OSError, ValueError) as e:
        return None, f"records {lv.records} cannot be read: {str(e)[:200]}"
    return [r for r in recs if not r.warmup and r.level == level], ""


def timeline_svg(
    f: ServingFaultResult,
    r: ServingRecovery,
    recs: list[RequestRecord],
    title: str,
    until: float | None = None,
) -> str:
    """Each request sent around the fault at its send time (seconds after the fault) with its TTFT;
    failed and aborted ones as crosses (at their TTFT, or at 0 without a first token); the fault
    and steady state as lines, the outage (first failure to first success) shaded, the pre-fault
    band as a dashed line. ``until``: the next fault's injection into the level, where the
    timeline stops."""
    t0 = f.injected_at
    sends = [x.send - t0 for x in recs if until is None or x.send < until]
    hi = r.to_steady_s + WINDOW_S if r.to_steady_s is not None else max(sends, default=WINDOW_S)
    if until is not None:
        hi = min(hi, until - t0 - 1e-9)
    shown = [x for x in recs if -WINDOW_S <= x.send - t0 <= hi]
    ok = [x for x in shown if x.status == "ok"]
    stride = max(1, -(-len(ok) // MAX_OK_POINTS))
    ok_pts = [(x.send - t0, M.ttft_ms(x) or 0.0) for x in ok[::stride]]
    series = [svg.Series("ok: TTFT" + (f" (every {stride}th)" if stride > 1 else ""), ok_pts, lines=False)]
    for status in ("error", "aborted"):
        pts = [(x.send - t0, M.ttft_ms(x) or 0.0) for x in shown if x.status == status]
        series.append(svg.Series(f"{status} (x)", pts, lines=False, shape="cross"))
    lo_x = min((p[0] for s in series for p in s.points), default=-WINDOW_S)
    hi_x = max((p[0] for s in series for p in s.points), default=hi)
    if r.pre_fault_ttft_band_ms is not None:
        series.append(svg.Series(f"pre-fault band {r.pre_fault_ttft_band_ms:.4g} ms",
                                 [(lo_x, r.pre_fault_ttft_band_ms), (hi_x, r.pre_fault_ttft_band_ms)],
                                 dashed=True))  # fmt: skip
    markers = [svg.Marker(0.0, "fault", "#c62828")]
    if r.to_steady_s is not None:
        markers.append(svg.Marker(r.to_steady_s, f"steady {r.to_steady_s:.2f} s", "#2e7d32"))
    spans = []
    if r.to_first_failure_s is not None:
        end = r.to_first_success_s if r.to_first_success_s is not None else max(hi_x, r.to_first_failure_s)
        label = (f"outage {r.outage_s:.2f} s (first failure to first success)" if r.outage_s is not None
                 else "outage: no successful request again")  # fmt: skip
        spans.append(svg.Span(r.to_first_failure_s, end, label, css="outage"))
    return svg.line_chart(
        series, title=title, x_label="seconds after the fault (request sent)", y_label="TTFT (ms)",
        markers=markers, spans=spans, kind="serving-fault-timeline", width=640,
    )  # fmt: skip


_TEMPLATE = """<h3 id="serving-faults-h">Faults during serving</h3>
<table id="serving-faults"><tr>{% for h in head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in rows %}<tr>{% for v in r %}<td>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>
{% if spread %}<h3>Recovery over repeats (median, min to max, n)</h3>
<table id="serving-fault-spread"><tr>{% for h in spread_head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in spread %}<tr>{% for v in r %}<td>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
{% for t in timelines %}<div class="fault-timeline" style="display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start">
<div>{% if t.svg %}{{ t.svg }}{% endif %}{% for n in t.notes %}<p class="warn">{{ n }}</p>{% endfor %}</div>
<table class="fault-figures"><tr><th colspan="2">{{ t.title }}</th></tr>
{% for k, v in t.figures %}<tr><td>{{ k }}</td><td class="num">{{ v }}</td></tr>{% endfor %}</table></div>
{% endfor %}
<p class="muted">Times are seconds after the fault was injected. Steady: the send time of the first request, at or after
the first success, that starts a window of consecutive requests which all succeeded with a TTFT median within the
pre-fault band (its p95, or largest below 20 requests, times 1 + tolerance). Failed and aborted requests are counted
from the fault to steady state. The shaded stretch is the outage, first failure to first success. Failed and aborted
requests are crosses, at their TTFT or at 0 when no token came.</p>
"""
_env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
_tmpl = _env.from_string(_TEMPLATE)


def client_pace(level: str) -> str:
    """What the failed count of a level follows: the plan's arrival schedule (open loop, level
    rN) or the client's own pace (closed loop, level cN: a worker whose request got no HTTP answer
    sends its next one CONNECT_ERROR_PAUSE_S later, so a dead engine's count is the retries')."""
    if level.startswith("r"):
        return "open loop: the requests the plan's arrival schedule sent"
    return (f"closed loop: each worker retries {CONNECT_ERROR_PAUSE_S * 1000:g} ms after a refused connection, "
            "so the count while the engine is down is the client's retry pace, not a rate of the service")  # fmt: skip


def _figures(f: ServingFaultResult, r: ServingRecovery | None) -> list[tuple[str, str]]:
    out = [("injected", _when(f.injected_at)), ("fault outcome", f.outcome)]
    if f.reverted_at is not None:
        held = f"{f.reverted_at - f.injected_at:.2f} s"
        if f.outcome == "reverted":
            out.append(("reverted after", held))
        else:  # a kill or a restart: its hold ended, nothing was undone (the restart policy brings it back)
            out.append(("fault ended after", f"{held} (nothing to revert)"))
    if r is not None:
        band = "-" if r.pre_fault_ttft_band_ms is None else f"<= {r.pre_fault_ttft_band_ms:.4g} ms"
        out += [
            ("status", r.status),
            ("pre-fault TTFT band", f"{band} (from {r.pre_fault_n} requests)"),
            ("steady rule", f"window {r.rule.window} requests, tolerance {r.rule.tolerance:g}"),
            ("to first failure", _secs(r.to_first_failure_s)),
            ("to first success", _secs(r.to_first_success_s)),
            ("outage", _secs(r.outage_s)),
            ("to steady", _secs(r.to_steady_s)),
            ("failed / aborted (client-side count)", f"{r.failed} / {r.aborted}"),
            ("the count follows", client_pace(f.level)),
            ("TTFT during (ms)", _ttft(r.ttft_during_ms)),
            ("TTFT after (ms)", _ttft(r.ttft_after_ms)),
        ]
    out.append(("engine restarts", _back_healthy(f)))
    return out


def faults_html(rec: RunRecord) -> Markup:
    """The faults part of the HTML serving section (empty when no fault was injected)."""
    inj = injections(rec)
    if not inj:
        return Markup("")
    cache: dict[tuple[str, str], tuple[list[RequestRecord] | None, str]] = {}
    timelines = []
    for i in inj:
        f, r = i.fault, i.fault.recovery
        title = visible(f"{i.step.step.id}, level {f.level}: {f.kind} on {f.target}, repeat {f.repeat}")
        later = [g.injected_at for g in i.step.faults if g.level == f.level and g.injected_at > f.injected_at]
        notes: list[str] = []
        chart: Markup | None = None
        if r is None:
            notes.append(f"no recovery measured (fault {f.outcome})")
        else:
            key = (i.step.step.id, f.level)
            if key not in cache:
                cache[key] = level_records(rec.run_dir, i.step, f.level)
            recs, why = cache[key]
            if recs is None:
                notes.append(f"no timeline: {why}")
            else:
                chart = Markup(timeline_svg(f, r, recs, title, min(later, default=None)))  # noqa: S704 - svg escapes every text
        figures = [(k, visible(v)) for k, v in _figures(f, r)]
        timelines.append(
            {"title": title, "svg": chart, "notes": [visible(n) for n in notes], "figures": figures}
        )
    rows = [[visible(v) for v in row] for row in fault_rows(rec)]
    spread = [[visible(v) for v in row] for row in spread_rows(rec)]
    html = _tmpl.render(head=FAULT_HEAD, rows=rows, spread_head=SPREAD_HEAD, spread=spread,
                        timelines=timelines)  # fmt: skip
    return Markup(html)  # noqa: S704 - rendered with autoescape


# -- JUnit and OpenMetrics ---------------------------------------------------------------------


def fault_cases(rec: RunRecord) -> list[Case]:
    """One case per injection (classname orch.<plan>.<step>.<level>): fails when the service did
    not get back to steady state; skipped when nothing could be measured."""
    cases = []
    for i in injections(rec):
        f, r = i.fault, i.fault.recovery
        cls = f"orch.{rec.plan_name}.{i.step.step.id}.{f.level}"
        name = f"fault {f.kind} {f.target} repeat {f.repeat}"
        if r is None or r.status == "no-data":
            why = f"fault {f.outcome}" if r is None else "no counted request around the fault"
            cases.append(Case(cls, name, "skipped", f"no recovery measured: {why}"))
            continue
        msg = (f"{r.status}: first failure {_secs(r.to_first_failure_s)}, first success "
               f"{_secs(r.to_first_success_s)}, outage {_secs(r.outage_s)}, steady {_secs(r.to_steady_s)} "
               f"after the fault; {r.failed} failed, {r.aborted} aborted (client-side count; "
               f"{client_pace(f.level)}); TTFT during {_ttft(r.ttft_during_ms)}, "
               f"after {_ttft(r.ttft_after_ms)} ms")  # fmt: skip
        cases.append(Case(cls, name, "fail" if r.status == "not-recovered" else "pass", msg))
    return cases


Sample = tuple[dict[str, str], float]


def fault_families(rec: RunRecord, base: dict[str, str]) -> dict[str, tuple[str, str, list[Sample]]]:
    """OpenMetrics gauges per injection (labels step, level, kind, target, repeat): seconds from the
    fault to each milestone, the outage, failed and aborted requests, and whether it recovered."""
    fams: dict[str, tuple[str, str, list[Sample]]] = {
        "orch_serving_fault_to_first_failure_seconds": (
            "gauge", "fault to the end of the first failed or aborted request", []),
        "orch_serving_fault_to_first_success_seconds": (
            "gauge", "fault to the end of the first successful request after the first failure", []),
        "orch_serving_fault_to_steady_seconds": ("gauge", "fault to the start of the first steady window", []),
        "orch_serving_fault_outage_seconds": ("gauge", "first failure to first success", []),
        "orch_serving_fault_failed_requests": ("gauge", "requests failed from the fault to steady state", []),
        "orch_serving_fault_aborted_requests": ("gauge", "requests aborted from the fault to steady state", []),
        "orch_serving_fault_recovered": (
            "gauge", "1 when the service got back to steady state (or the fault had no impact), else 0", []),
    }  # fmt: skip
    for i in injections(rec):
        f, r = i.fault, i.fault.recovery
        if r is None or r.status == "no-data":
            continue
        ll = {**base, "step": i.step.step.id, "level": f.level, "kind": f.kind, "target": f.target,
              "repeat": str(f.repeat)}  # fmt: skip
        for name, v in (("orch_serving_fault_to_first_failure_seconds", r.to_first_failure_s),
                        ("orch_serving_fault_to_first_success_seconds", r.to_first_success_s),
                        ("orch_serving_fault_to_steady_seconds", r.to_steady_s),
                        ("orch_serving_fault_outage_seconds", r.outage_s),
                        ("orch_serving_fault_failed_requests", float(r.failed)),
                        ("orch_serving_fault_aborted_requests", float(r.aborted)),
                        ("orch_serving_fault_recovered", 0.0 if r.status == "not-recovered" else 1.0)):  # fmt: skip
            if v is not None:
                fams[name][2].append((ll, float(v)))
    return fams
