"""The report formats, as a registry: HTML, Markdown (tickets), JSON, JUnit XML (CI), OpenMetrics
(Prometheus), and the renderers of the text ones.

Each format is one ReportFormat in REPORT_FORMATS (name, file extension, renderer); `orch report
--format`, its help and its default file name come from there, and report_format refuses an
unknown name with the known ones. A new format is its renderer (a module of report/) and one
entry in the table at the end of this module.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import registered
from orchestrator.models.plan import format_size
from orchestrator.models.results import Verdict
from orchestrator.models.run import RunRecord
from orchestrator.report.common import (
    Case,
    efficiency_cell,
    latency_cell,
    reference_cell,
    rel_link,
    scaling_points,
    step_logs,
    step_notes,
    threshold_cases,
)
from orchestrator.report.diagnostics import diag_cases, diag_markdown
from orchestrator.report.escape import md, xml_text
from orchestrator.report.isolation import isolate_folder, isolation_markdown
from orchestrator.report.serving import serving_cases, serving_families, serving_markdown
from orchestrator.report.stragglers import stragglers_markdown

Format = str
"""A report format's name: a key of REPORT_FORMATS."""
Renderer = Callable[[RunRecord, Path | None], str]
"""(run record, the folder the file will live in, for relative log links) -> the report's text."""


@dataclass(frozen=True)
class ReportFormat:
    """One report format: its name (--format), the extension of its file, its renderer."""

    name: str
    extension: str
    render: Renderer


def report_format(name: str) -> ReportFormat:
    """The registered format ``name``; raises ConfigError naming the known formats."""
    return registered(REPORT_FORMATS, name, "report format")


def render(rec: RunRecord, fmt: Format, report_dir: Path | None = None) -> str:
    """The report of rec in fmt; report_dir is where the file will live (for relative log links).
    Raises ConfigError for an unknown format."""
    return report_format(fmt).render(rec, report_dir)


def _progress_line(rec: RunRecord) -> str:
    """How far the run got: steps of a scale-test, repeats of a recovery-test."""
    if rec.request is not None:
        return f"- repeats: {len(rec.recovery)} of {rec.request.repeat} done"
    return f"- steps: {len([s for s in rec.steps if s.verdict != 'skipped'])} of {len(rec.step_ids)} finished"


def _kind(rec: RunRecord) -> str:
    return "isolate" if rec.kind == "isolate" else "recovery-test" if rec.request else "scale-test"


def _isolation_md(rec: RunRecord) -> list[str]:
    """The Isolation section (an isolate run's, or the copy a scale-test --isolate keeps), if any."""
    if rec.isolation is None:
        return []
    folder = isolate_folder(rec.run_dir, rec.run_id, rec.isolation)
    linked = rec.isolation.run_id != rec.run_id
    return ["", isolation_markdown(rec.isolation, folder, linked=linked).rstrip()]


def _warnings_md(rec: RunRecord) -> list[str]:
    return ["", "## Files not read", ""] + [f"- {md(w)}" for w in rec.warnings] if rec.warnings else []


def render_markdown(rec: RunRecord, report_dir: Path | None = None) -> str:
    """Markdown for a ticket; every value from the run folder goes through escape.md()."""
    lines = [
        f"# orch {_kind(rec)} {md(rec.run_id)}: **{md(rec.status)}**",
        "",
        f"- plan {md(rec.plan_name)}, backend {md(rec.backend)}, "
        f"exit {rec.exit_code if rec.exit_code is not None else '-'}",
        f"- started {md(rec.started_at or '-')} by {md(rec.user or '-')} on {md(rec.host or '-')}; "
        f"finished {md(rec.finished_at or 'not finished')}",
        _progress_line(rec),
        "- nodes: " + (", ".join(f"{md(n)}={md(v)}" for n, v in rec.nodes.items()) or "-"),
    ]
    if rec.kind == "isolate" and rec.isolation is not None:  # its tests are in the Isolation section
        return "\n".join([*lines[:4], *_isolation_md(rec), *_warnings_md(rec)]) + "\n"
    lines += [
        "",
        "| step | ranks | collective | size | busbw GB/s | eff. | against | latency µs | #wrong | verdict |",
        "|---|--:|---|--:|--:|--:|---|---|--:|---|",
    ]
    finished = {s.step.id: s for s in rec.steps}
    for sid in rec.step_ids:
        s = finished.get(sid)
        if s is None or not s.summary:
            lines.append(f"| {md(sid)} | {s.step.world_size if s else '-'} | - | - | - | - | - | - | - | "
                         f"{md(s.verdict) if s else 'not run'} |")  # fmt: skip
            continue
        for i, c in enumerate(s.summary.values()):
            lines.append(
                f"| {md(sid) if i == 0 else ''} | {s.step.world_size if i == 0 else ''} | "
                f"{md(c.collective)} | "
                f"{format_size(c.size_bytes)} | {c.busbw_gbs:.3f} | {md(efficiency_cell(c))} | "
                f"{md(reference_cell(c))} | {md(latency_cell(c))} | {c.wrong} | "
                f"{md(s.verdict) if i == 0 else ''} |"
            )
    lines += [
        "",
        "eff.: busbw at the largest size over busbw of the step named under 'against' (intra-node: "
        "one node, against its smallest multi-rank step; inter-node: against the 2-node step of the "
        "same ranks per node). Latency: per iteration, slowest rank, with its n.",
    ]
    reasons = [(s.step.id, r) for s in rec.steps for r in step_notes(s)]
    if reasons:
        lines += ["", "## Reasons and warnings", ""] + [f"- {md(sid)}: {md(r)}" for sid, r in reasons]
    lines += stragglers_markdown(rec)
    lines += diag_markdown(rec)
    if rec.recovery:
        lines += ["", "## Recovery", ""]
        lines += ["| fault | target | repeat | detect s | recover s | restore s | outcome | notes |"]
        lines += ["|---|---|--:|--:|--:|--:|---|---|"]
        for f in rec.recovery:
            t = f.timings
            vals = [f"{v:.3f}" if v is not None else "—" for v in (t.detect_s, t.recover_s, t.restore_s)]
            notes = "; ".join(f.notes)
            head = f"| {md(f.fault)} | {md(f.target)} | {f.repeat} | {' | '.join(vals)} |"
            lines.append(f"{head} {md(f.verdict or f.outcome)} | {md(notes)} |")
    lines += serving_markdown(rec)
    lines += _isolation_md(rec) + _warnings_md(rec)
    logs = [(sid, p) for sid in rec.step_ids for p in step_logs(rec, sid)]
    if logs:
        lines += ["", "## Raw logs", ""]
        for _, p in logs:
            lines.append(f"- [{md(p.relative_to(rec.run_dir).as_posix())}]({rel_link(p, report_dir)})")
    return "\n".join(lines) + "\n"


_RUN_OUTCOME: dict[str, Verdict] = {
    "accepted": "pass",
    "failed": "fail",
    "infra": "infra",
    "interrupted": "infra",
    "running": "skipped",
}


def _run_case(rec: RunRecord) -> Case:
    """The run itself as one case, for a run with no step or threshold cases (recovery-test,
    isolate, a run refused before its steps): a CI that reads the file then fails a failed run
    (it read tests="0" failures="0" before)."""
    return Case(
        classname=f"orch.{rec.plan_name}",
        name=f"{rec.kind} {rec.run_id}",
        outcome=_RUN_OUTCOME[rec.status],
        message=f"run {rec.status}, exit {rec.exit_code}" + (f": {rec.error}" if rec.error else ""),
        time_s=rec.wall_s,
    )


def render_junit(rec: RunRecord) -> str:
    """JUnit XML: one testsuite per run, one testcase per step and per threshold of each step."""
    cases: list[Case] = threshold_cases(rec) + diag_cases(rec) + serving_cases(rec) or [_run_case(rec)]
    failures = sum(c.outcome == "fail" for c in cases)
    errors = sum(c.outcome == "infra" for c in cases)
    skipped = sum(c.outcome == "skipped" for c in cases)
    root = ET.Element("testsuites", name=f"orch {rec.plan_name}", tests=str(len(cases)),
                      failures=str(failures), errors=str(errors), time=f"{rec.wall_s or 0:.3f}")  # fmt: skip
    suite = ET.SubElement(root, "testsuite", name=f"orch.{rec.plan_name}.{rec.run_id}", tests=str(len(cases)),
                          failures=str(failures), errors=str(errors), skipped=str(skipped),
                          time=f"{rec.wall_s or 0:.3f}",
                          timestamp=rec.started_at.strftime("%Y-%m-%dT%H:%M:%S") if rec.started_at else "",
                          hostname=rec.host or "")  # fmt: skip
    props = ET.SubElement(suite, "properties")
    for k, v in (("run_id", rec.run_id), ("run_dir", str(rec.run_dir)), ("status", rec.status),
                 ("backend", rec.backend), ("user", rec.user or "")):  # fmt: skip
        ET.SubElement(props, "property", name=k, value=v)
    for c in cases:
        attrs = {"classname": c.classname, "name": c.name}
        if c.time_s is not None:
            attrs["time"] = f"{c.time_s:.3f}"
        tc = ET.SubElement(suite, "testcase", attrs)
        msg = c.message
        if c.outcome == "fail":
            ET.SubElement(tc, "failure", message=msg[:500], type="threshold").text = msg
        elif c.outcome == "infra":
            ET.SubElement(tc, "error", message=msg[:500], type="infra").text = msg
        elif c.outcome == "skipped":
            ET.SubElement(tc, "skipped", message=msg[:500])
    for el in root.iter():  # XML 1.0 cannot hold NUL, most C0 controls, U+FFFF, lone surrogates
        el.attrib = {k: xml_text(v) for k, v in el.attrib.items()}
        if el.text:
            el.text = xml_text(el.text)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    return repr(float(v))


def render_openmetrics(rec: RunRecord) -> str:
    """OpenMetrics text (also valid Prometheus text format; node_exporter textfile, pushgateway)."""
    base = {"run_id": rec.run_id, "plan": rec.plan_name, "backend": rec.backend}
    fams: dict[str, tuple[str, str, list[tuple[dict[str, str], float]]]] = {
        "orch_run_accepted": ("gauge", "1 when the run was accepted, else 0", []),
        "orch_run_exit_code": ("gauge", "exit code of the run (-1 while unfinished)", []),
        "orch_run_duration_seconds": ("gauge", "wall time of the run", []),
        "orch_step_passed": ("gauge", "1 when the step passed, else 0", []),
        "orch_busbw_gigabytes_per_second": (
            "gauge",
            "out-of-place bus bandwidth per step, collective, size",
            [],
        ),
        "orch_algbw_gigabytes_per_second": ("gauge", "out-of-place algorithm bandwidth", []),
        "orch_scaling_efficiency_ratio": ("gauge", "busbw at the largest size over the reference step", []),
        "orch_node_passed": ("gauge", "1 when every step of the node passed", []),
        "orch_recovery_seconds": ("gauge", "seconds from fault injection to each milestone", []),
    }
    fams.update(serving_families(rec, base))
    fams["orch_run_accepted"][2].append((base, 1.0 if rec.status == "accepted" else 0.0))
    fams["orch_run_exit_code"][2].append((base, float(rec.exit_code if rec.exit_code is not None else -1)))
    if rec.wall_s is not None:
        fams["orch_run_duration_seconds"][2].append((base, rec.wall_s))
    for s in rec.steps:
        sl = {**base, "step": s.step.id, "nodes": str(s.step.nnodes), "ranks": str(s.step.world_size)}
        fams["orch_step_passed"][2].append(
            ({**sl, "verdict": s.verdict}, 1.0 if s.verdict == "pass" else 0.0)
        )
        for r in s.rows:
            rl = {**sl, "collective": r.collective, "size_bytes": str(r.size_bytes)}
            fams["orch_busbw_gigabytes_per_second"][2].append((rl, r.out_of_place.busbw_gbs))
            fams["orch_algbw_gigabytes_per_second"][2].append((rl, r.out_of_place.algbw_gbs))
    for p in scaling_points(rec)[1]:
        if p.efficiency is not None:
            fams["orch_scaling_efficiency_ratio"][2].append(
                ({**base, "step": p.step, "series": p.series, "scaling": p.scaling or "",
                  "reference": p.reference or ""}, p.efficiency))  # fmt: skip
    for node, nv in rec.nodes.items():
        fams["orch_node_passed"][2].append(
            ({**base, "node": node, "verdict": nv}, 1.0 if nv == "pass" else 0.0)
        )
    for f in rec.recovery:
        for phase, v in (("detect", f.timings.detect_s), ("recover", f.timings.recover_s),
                         ("restore", f.timings.restore_s)):  # fmt: skip
            if v is not None:
                fams["orch_recovery_seconds"][2].append(
                    ({**base, "fault": f.fault, "fault_id": f.fault_id, "target": f.target,
                      "repeat": str(f.repeat), "phase": phase}, v))  # fmt: skip
    out: list[str] = []
    for name, (kind, help_, samples) in fams.items():
        if not samples:
            continue
        out.append(f"# TYPE {name} {kind}")
        out.append(f"# HELP {name} {help_}")
        unit = {"seconds": "seconds", "ratio": "ratio"}.get(name.rsplit("_", 1)[-1])
        if unit:
            out.append(f"# UNIT {name} {unit}")
        for labels, value in samples:
            lab = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            out.append(f"{name}{{{lab}}} {_num(value)}")
    out.append("# EOF")
    return "\n".join(out) + "\n"


def to_json(obj: object) -> str:
    return json.dumps(obj, indent=2, default=str) + "\n"


def _html(rec: RunRecord, report_dir: Path | None) -> str:
    from orchestrator.report.html import render_html  # jinja2 and the plots: only when asked for

    return render_html(rec, report_dir)


REPORT_FORMATS: dict[str, ReportFormat] = {
    f.name: f
    for f in (
        ReportFormat("html", "html", _html),
        ReportFormat("md", "md", render_markdown),
        ReportFormat("json", "json", lambda rec, _dir: rec.model_dump_json(indent=2) + "\n"),
        ReportFormat("junit", "junit.xml", lambda rec, _dir: render_junit(rec)),
        ReportFormat("openmetrics", "prom", lambda rec, _dir: render_openmetrics(rec)),
    )
}
FORMATS: tuple[Format, ...] = tuple(REPORT_FORMATS)
EXTENSIONS: dict[Format, str] = {f.name: f.extension for f in REPORT_FORMATS.values()}
