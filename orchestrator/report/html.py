"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network)."""

# The template and stylesheet below are data; their lines follow the markup, not the code width.
# ruff: noqa: E501

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from orchestrator import __version__
from orchestrator.models.plan import format_size
from orchestrator.models.results import COLLECTIVES
from orchestrator.models.run import RunRecord
from orchestrator.plan import plan_to_yaml
from orchestrator.report import svg
from orchestrator.report.common import (
    ScalingPoint,
    efficiency_cell,
    latency_cell,
    rel_link,
    scaling_points,
    step_logs,
    step_notes,
    step_wrong,
    threshold_rows,
)
from orchestrator.report.diagnostics import diag_html
from orchestrator.report.isolation import isolate_folder, isolation_html
from orchestrator.report.serving import serving_html
from orchestrator.report.stragglers import stragglers_html
from orchestrator.text import plural

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;
color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top} th{background:#f5f5f5} td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:600}
.v-accepted,.v-pass{background:#2a8a2a}.v-failed,.v-fail{background:#c62828}
.v-infra,.v-interrupted,.v-running{background:#8e24aa}.v-skipped{background:#888}
.plots{display:flex;flex-wrap:wrap;gap:12px} pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:360px}
svg.plot{background:#fff;border:1px solid #eee;font-size:11px} svg .frame{fill:none;stroke:#999}
svg .grid{stroke:#eee} svg .line{fill:none;stroke-width:1.6} svg .title{font-weight:600;font-size:13px}
svg .label{font-size:12px} .warn{color:#b26a00} .muted{color:#777}
.refused{color:#c62828;font-weight:600} td.bad{color:#c62828;font-weight:600}
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>orch {{ r.plan_name }} {{ r.run_id }} — {{ r.status }}</title>
<style>{{ css }}</style></head>
<body>
<h1>orch {{ "recovery-test" if r.request else r.kind }} {{ r.run_id }} <span class="badge v-{{ r.status }}" id="verdict">{{ r.status }}</span></h1>
<p class="muted">plan <b>{{ r.plan_name }}</b> · backend {{ r.backend }} · exit {{ r.exit_code
 if r.exit_code is not none else "-" }} · report made {{ now }} by orch {{ version }} from {{ r.run_dir }}</p>
{% for w in r.warnings %}<p class="warn">warning: {{ w }}</p>{% endfor %}
{% if r.error %}<p class="refused" id="why">{{ "refused" if not done else "stopped" }}: {{ r.error }}</p>{% endif %}
<h2 id="who">Who, what, when</h2>
<table>
<tr><th>started</th><td>{{ r.started_at or "-" }}</td><th>finished</th><td>{{ r.finished_at or "not finished" }}</td></tr>
<tr><th>user</th><td>{{ r.user or "-" }}</td><th>host</th><td>{{ r.host or "-" }}</td></tr>
<tr><th>wall time</th><td>{{ "%.1f s"|format(r.wall_s) if r.wall_s is not none else "-" }}</td>
{% if r.request %}<th>repeats</th><td>{{ r.recovery|length }} of {{ r.request.repeat }} done</td></tr>
{% else %}<th>steps</th><td>{{ done }} of {{ r.step_ids|length }} finished{% if r.resumes %}, resumed {{ plural(r.resumes, "time") }}{% endif %}</td></tr>{% endif %}
<tr><th>command</th><td colspan="3"><code>{{ r.command or "-" }}</code></td></tr>
</table>

{% if isolation and r.kind == "isolate" %}{{ isolation }}{% endif %}
{% if (r.step_ids or not r.request) and r.kind != "isolate" %}<h2 id="steps">Steps</h2>
<table><tr><th>step</th><th>nodes</th><th>ranks</th><th>job</th><th>state</th><th>#wrong</th><th>verdict</th><th>reasons</th><th>raw logs</th></tr>
{% for s in steps %}<tr><td>{{ s.id }}</td><td>{{ s.nodes }}</td><td class="num">{{ s.ranks }}</td><td>{{ s.job }}</td>
<td>{{ s.state }}</td><td class="num{{ ' bad' if s.wrong else '' }}">{{ s.wrong }}</td><td><span class="badge v-{{ s.verdict }}">{{ s.verdict }}</span></td>
<td>{% for x in s.reasons %}{{ x }}<br>{% endfor %}</td>
<td>{% for name, href in s.logs %}<a href="{{ href }}">{{ name }}</a> {% endfor %}</td></tr>
{% endfor %}</table>

<h2 id="thresholds">Thresholds</h2>
{% if thresholds %}<table><tr><th>step</th><th>threshold</th><th>required</th><th>measured</th><th>verdict</th></tr>
{% for t in thresholds %}<tr><td>{{ t.step }}</td><td>{{ t.threshold }}</td><td class="num">{{ t.required }}</td>
<td class="num">{{ t.measured }}</td><td><span class="badge v-{{ t.outcome }}">{{ t.outcome }}</span></td></tr>
{% endfor %}</table>{% elif r.plan %}<p class="muted">No performance thresholds in this plan: steps are judged on
completion and correctness (#wrong) only.</p>{% else %}<p class="muted">No plan in this run directory.</p>{% endif %}

<h2 id="nodes">Per-node verdicts</h2>
<table><tr><th>node</th><th>verdict</th></tr>
{% for n, v in r.nodes.items() %}<tr><td>{{ n }}</td><td><span class="badge v-{{ v }}">{{ v }}</span></td></tr>
{% endfor %}</table>

<h2 id="busbw">Bus bandwidth against message size</h2>
<div class="plots">{% for p in coll_plots %}{{ p }}{% endfor %}</div>
<details><summary>Numbers (out-of-place busbw, GB/s)</summary>
{% for c, table in coll_tables %}<h3>{{ c }}</h3><table><tr><th>size</th>{% for sid in table.steps %}<th>{{ sid }}</th>
{% endfor %}</tr>{% for size, vals in table.rows %}<tr><td class="num">{{ size }}</td>{% for v in vals %}
<td class="num">{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>{% endfor %}</details>

<h2 id="scaling">Scaling</h2>
<div class="plots">{{ scaling_plot }}{% for p in eff_plots %}{{ p }}{% endfor %}</div>
<p class="muted">Efficiency compares like with like: intra-node (one node) against the smallest multi-rank step on one
node, inter-node against the 2-node step with the same ranks per node; a 1-rank step is never a reference. A step fails
the minimum only below it by more than the noise band.</p>
<table id="efficiency"><tr><th>step</th><th>collective</th><th>size</th><th>busbw GB/s</th><th>scaling</th><th>against</th>
<th>reference busbw GB/s</th><th>efficiency</th><th>noise band</th><th>busbw / line rate</th><th>latency µs (per iteration, slowest rank)</th></tr>
{% for e in eff_rows %}<tr><td>{{ e.step }}</td><td>{{ e.coll }}</td><td class="num">{{ e.size }}</td><td class="num">{{ e.busbw }}</td>
<td>{{ e.scaling }}</td><td>{{ e.reference }}</td><td class="num">{{ e.ref_busbw }}</td><td class="num">{{ e.eff }}</td>
<td class="num">{{ e.band }}</td><td class="num">{{ e.line }}</td><td>{{ e.latency }}</td></tr>
{% endfor %}</table>

{% if stragglers %}{% for s in stragglers %}{{ s }}
{% endfor %}{% endif %}
{% endif %}
{% if isolation and r.kind != "isolate" %}{{ isolation }}{% endif %}
{{ diagnostics }}
{{ serving }}
<h2 id="recovery">Recovery</h2>
{% if recovery_plots %}<div class="plots">{% for p in recovery_plots %}{{ p }}{% endfor %}</div>
<table><tr><th>fault</th><th>kind</th><th>target</th><th>step</th><th>repeat</th><th>detect s</th><th>recover s</th>
<th>restore s</th><th>steps lost</th><th>outcome</th><th>notes (why a figure is absent)</th></tr>
{% for f in r.recovery %}<tr><td>{{ f.fault_id }}</td><td>{{ f.fault }}</td><td>{{ f.target }}</td><td>{{ f.step or "-" }}</td>
<td class="num">{{ f.repeat }}</td>{% for v in [f.timings.detect_s, f.timings.recover_s, f.timings.restore_s] %}
<td class="num">{{ "%.3f"|format(v) if v is not none else "—" }}</td>{% endfor %}
<td class="num">{{ f.timings.steps_lost if f.timings.steps_lost is not none else "—" }}</td><td>{{ f.verdict or f.outcome }}</td>
<td>{{ f.notes|join("; ") }}</td></tr>
{% endfor %}</table>{% else %}<p class="muted">No faults were injected in this run.</p>{% endif %}

<h2 id="fingerprint">Fingerprint and drift</h2>
{% if r.drift %}<h3>Drift against the stack manifest</h3><pre>{{ drift }}</pre>{% endif %}
{% if r.fingerprint %}<details><summary>Node fingerprints</summary><pre>{{ fingerprint }}</pre></details>
{% endif %}{% if not r.drift and not r.fingerprint %}<p class="muted">No fingerprint was taken in this run.</p>{% endif %}

<h2 id="inputs">Resolved plan, inventory and stack</h2>
<details open><summary>Inventory ({{ plural(inv|length, "node") }})</summary>
<table><tr><th>node</th><th>address</th><th>fabric</th><th>vendor</th><th>GPUs</th><th>RDMA</th><th>runtime</th></tr>
{% for n in inv %}<tr>{% for v in n %}<td>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table></details>
<details><summary>Plan</summary><pre>{{ plan_yaml }}</pre></details>
<details><summary>Stack</summary><pre>{{ stack }}</pre></details>
<p class="muted">Raw files: <a href="{{ links.journal }}">journal.jsonl</a> · <a href="{{ links.plan }}">{{
 "recovery-test.json" if r.request else "plan.json" }}</a> ·
<a href="{{ links.inventory }}">inventory.json</a></p>
</body></html>
"""

_env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
_env.globals["plural"] = plural
_tmpl = _env.from_string(_TEMPLATE)


def _svg(text: str) -> Markup:
    """Trust SVG made by orchestrator.report.svg, which escapes every text it embeds."""
    return Markup(text)  # noqa: S704


def _size_fmt(v: float) -> str:
    return format_size(int(v)) if v >= 1 and float(v).is_integer() else f"{v:g}"


def _bw_fmt(v: float) -> str:
    return f"{v:.3g}"


def _coll_plots(rec: RunRecord) -> tuple[list[Markup], list[tuple[str, dict[str, Any]]]]:
    plots: list[Markup] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    seen = {r.collective for s in rec.steps for r in s.rows}
    for coll in [c for c in COLLECTIVES if c in seen] + sorted(seen - set(COLLECTIVES)):
        series = []
        grid: dict[int, dict[str, float]] = {}
        for s in rec.steps:
            pts = sorted((r.size_bytes, r.out_of_place.busbw_gbs) for r in s.rows if r.collective == coll)
            if pts:
                series.append(
                    svg.Series(
                        f"{s.step.id} ({plural(s.step.world_size, 'rank')})", [(float(x), y) for x, y in pts]
                    )
                )
            for x, y in pts:
                grid.setdefault(x, {})[s.step.id] = y
        plots.append(_svg(svg.line_chart(
            series, title=f"{coll}: busbw vs message size", x_label="message size (bytes)",
            y_label="busbw (GB/s)", x_log=True, y_log=True, x_base=2, x_fmt=_size_fmt, y_fmt=_bw_fmt,
            kind="busbw",
        )))  # fmt: skip
        step_ids = [s.step.id for s in rec.steps]
        rows = [
            (format_size(size), [f"{vals[sid]:.4g}" if sid in vals else "-" for sid in step_ids])
            for size, vals in sorted(grid.items())
        ]
        tables.append((coll, {"steps": step_ids, "rows": rows}))
    return plots, tables


def _scaling(rec: RunRecord) -> tuple[Markup, list[Markup]]:
    """busbw at the largest size per step, and one efficiency plot per scaling (intra, inter)."""
    x_label, pts = scaling_points(rec)
    names = list(dict.fromkeys(p.series for p in pts))
    bw = [svg.Series(n, sorted((float(p.x), p.busbw_gbs) for p in pts if p.series == n)) for n in names]
    a = svg.line_chart(bw, title="busbw at the largest size", x_label=x_label, y_label="busbw (GB/s)",
                       x_log=True, x_base=2, x_fmt=lambda v: f"{v:g}", y_fmt=_bw_fmt, kind="scaling")  # fmt: skip
    lim = rec.plan.thresholds.min_scaling_efficiency if rec.plan else None
    by_step = {s.step.id: s.step for s in rec.steps}
    plots: list[Markup] = []
    for kind, axis in (("intra-node", "ranks on one node"), ("inter-node", "nodes")):
        mine = [p for p in pts if p.scaling == kind and p.efficiency is not None and p.step in by_step]
        if not mine:
            continue

        def x_of(p: ScalingPoint) -> float:
            st = by_step[p.step]
            return float(st.world_size if st.nnodes == 1 else st.nnodes)

        groups: dict[str, list[ScalingPoint]] = {}
        for p in mine:
            rpn = by_step[p.step].ranks_per_node
            label = p.series.split(" ", 1)[0] + (f" x{rpn}/node" if kind == "inter-node" else "")
            groups.setdefault(f"{label} vs {p.reference}", []).append(p)
        eff = [svg.Series(n, sorted((x_of(p), p.efficiency or 0.0) for p in g)) for n, g in groups.items()]
        if lim is not None:
            xs = sorted({x_of(p) for p in mine})
            eff.append(svg.Series(f"threshold {lim:g}", [(xs[0], lim), (xs[-1], lim)], dashed=True))
        plots.append(_svg(svg.line_chart(
            eff, title=f"{kind} scaling efficiency", x_label=axis, y_label="busbw / reference step",
            x_log=True, x_base=2, x_fmt=lambda v: f"{v:g}", kind="efficiency",
        )))  # fmt: skip
    return _svg(a), plots


def _eff_rows(rec: RunRecord) -> list[dict[str, str]]:
    rows = []
    for s in rec.steps:
        for c in s.summary.values():
            rows.append({
                "step": s.step.id, "coll": c.collective, "size": format_size(c.size_bytes),
                "busbw": f"{c.busbw_gbs:.4g}", "scaling": c.scaling or "-", "reference": c.reference or "-",
                "ref_busbw": f"{c.reference_busbw_gbs:.4g}" if c.reference_busbw_gbs is not None else "-",
                "eff": efficiency_cell(c), "band": f"±{c.noise:.0%}" if c.noise is not None else "-",
                "latency": latency_cell(c),
                "line": f"{c.line_fraction:.0%}" if c.line_fraction is not None else "-",
            })  # fmt: skip
    return rows


def _recovery(rec: RunRecord) -> list[Markup]:
    if not rec.recovery:
        return []
    plots: list[Markup] = []
    for f in rec.recovery[:6]:
        by_rank: dict[int, list[tuple[float, float]]] = {}
        for hb in f.heartbeats:
            by_rank.setdefault(hb.rank, []).append((hb.t_s, float(hb.step)))
        series = [svg.Series(f"rank {r}", sorted(p), lines=False) for r, p in sorted(by_rank.items())]
        marks = [svg.Marker(0.0, "fault", "#c62828")]
        if f.stall_at_s is not None:  # a stall nothing detected is marked as what it is
            marks.append(svg.Marker(f.stall_at_s, "stall", "#777777"))
        t = f.timings
        for label, v, colour in (("detect", t.detect_s, "#ff7f0e"), ("recover", t.recover_s, "#1f77b4"),
                                 ("restore", t.restore_s, "#2a8a2a")):  # fmt: skip
            if v is not None:
                marks.append(svg.Marker(v, label, colour))
        plots.append(_svg(svg.line_chart(
            series, title=f"{f.fault} on {f.target} (repeat {f.repeat}): heartbeats",
            x_label="seconds from injection", y_label="probe step", markers=marks, kind="timeline",
        )))  # fmt: skip
    groups: dict[str, list[float]] = {}
    for f in rec.recovery:
        for label, v in (("detect", f.timings.detect_s), ("recover", f.timings.recover_s),
                         ("restore", f.timings.restore_s)):  # fmt: skip
            if v is not None:
                groups.setdefault(f"{f.fault} {label}", []).append(v)
    if groups:
        plots.append(_svg(svg.strip_chart(groups, title="recovery timings over repeats",
                                            x_label="seconds from injection", kind="distribution")))  # fmt: skip
    return plots


def _stragglers(rec: RunRecord) -> list[Markup]:
    """The straggler sections (report/stragglers.py escapes every value it embeds)."""
    return [Markup(s) for s in stragglers_html(rec)]  # noqa: S704


def _isolation(rec: RunRecord) -> Markup | None:
    """The Isolation section (report/isolation.py escapes every value it embeds)."""
    if rec.isolation is None:
        return None
    folder = isolate_folder(rec.run_dir, rec.run_id, rec.isolation)
    return Markup(isolation_html(rec.isolation, folder, linked=rec.isolation.run_id != rec.run_id))  # noqa: S704


def render_html(rec: RunRecord, report_dir: Path | None = None) -> str:
    """The report of one run as one HTML document; links to raw logs are relative to report_dir."""
    steps = []
    finished = {s.step.id: s for s in rec.steps}
    for sid in rec.step_ids:
        s = finished.get(sid)
        logs = [(p.relative_to(rec.run_dir).as_posix(), rel_link(p, report_dir)) for p in step_logs(rec, sid)]
        steps.append({
            "id": sid, "nodes": ", ".join(s.step.nodes) if s else "-",
            "ranks": s.step.world_size if s else "-", "job": (s.job_id if s else None) or "-",
            "state": s.job.raw_state if s and s.job else "-", "verdict": s.verdict if s else "skipped",
            "wrong": step_wrong(s) if s and s.rows else "-",
            "reasons": step_notes(s) if s else ["not run"], "logs": logs,
        })  # fmt: skip
    coll_plots, coll_tables = _coll_plots(rec)
    scaling_plot, eff_plots = _scaling(rec)
    inv = [
        [n.name, n.address, n.fabric_address or "-", n.gpu_vendor, n.gpus_per_node, ",".join(n.rdma_ifaces) or "-",
         n.container_runtime]
        for n in (rec.cluster.nodes if rec.cluster else [])
    ]  # fmt: skip
    links = {k: rel_link(rec.run_dir / f, report_dir) for k, f in
             (("journal", "journal.jsonl"), ("plan", "recovery-test.json" if rec.request else "plan.json"),
              ("inventory", "inventory.json"))}  # fmt: skip
    return _tmpl.render(
        r=rec, css=_CSS, version=__version__, now=datetime.now(UTC).isoformat(timespec="seconds"),
        done=len([s for s in rec.steps if s.verdict != "skipped"]), steps=steps,
        coll_plots=coll_plots, coll_tables=coll_tables, scaling_plot=scaling_plot, eff_plots=eff_plots,
        eff_rows=_eff_rows(rec),
        recovery_plots=_recovery(rec), stragglers=_stragglers(rec), isolation=_isolation(rec), serving=serving_html(rec, report_dir), inv=inv, links=links, thresholds=threshold_rows(rec),
        diagnostics=Markup(diag_html(rec)),  # noqa: S704 - report/diagnostics.py escapes every value
        plan_yaml=plan_to_yaml(rec.plan) if rec.plan else
        (rec.request.model_dump_json(indent=2) if rec.request else "(plan.json missing)"),
        stack=rec.stack.model_dump_json(indent=2) if rec.stack else "(no stack.json in this run)",
        drift=rec.drift.model_dump_json(indent=2) if rec.drift else "",
        fingerprint=rec.fingerprint.model_dump_json(indent=2) if rec.fingerprint else "",
    )  # fmt: skip
