"""The diagnostic steps of a run's report (docs/diagnostics.md): one format-neutral section per step
(report/sections.py) with a row per node or pair — its status, its figures, why it is not a pass —
rendered in Markdown and HTML by the shared renderers (which escape every cell), as plain lines for
the terminal (`orch runs show`), and as one JUnit case per node.

A node's figures are summed up per figure name and unit: the range over its GPUs, cells or sizes and
how many values it holds (`gflops 16942..17324 Gflop/s (n=8)`); every value is in the step's
result.json, and the raw logs are linked from the report.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.models.diagnostics import DiagFigure, NodeDiag
from orchestrator.models.run import RunRecord, StepResult
from orchestrator.report.common import Case
from orchestrator.report.sections import Section, sections_html, sections_markdown

HEAD = ["node", "status", "figures", "why"]


def figure_summary(figures: Sequence[DiagFigure]) -> str:
    """Each figure name and unit: its range and count; '-' without figures."""
    if not figures:
        return "-"
    groups: dict[tuple[str, str], list[float]] = {}
    for f in figures:
        groups.setdefault((f.name, f.unit), []).append(f.value)
    parts = []
    for (name, unit), values in groups.items():
        lo, hi = min(values), max(values)
        span = f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}"
        parts.append(f"{name} {span} {unit}" + (f" (n={len(values)})" if len(values) > 1 else ""))
    return "; ".join(parts)


def _figures(n: NodeDiag) -> str:
    return figure_summary(n.report.figures if n.report else [])


def _row(n: NodeDiag) -> list[str]:
    why = n.note if n.status != "pass" else ""
    return [n.node, "not run" if n.status == "missing" else n.status, _figures(n), why]


def diag_steps(rec: RunRecord) -> list[StepResult]:
    """The run's finished diagnostic steps, in run order."""
    return [s for s in rec.steps if s.step.diagnostic is not None]


def diag_sections(rec: RunRecord) -> list[Section]:
    """A summary (each step's verdict), then a section per diagnostic step; none without one."""
    steps = diag_steps(rec)
    if not steps:
        return []
    out = [Section("Diagnostics", "diagnostics-summary", [f"**{s.step.id}**: {s.verdict}" for s in steps])]
    for s in steps:
        d = s.step.diagnostic
        assert d is not None
        limits = [
            f"{t.figure}{f' ({t.where})' if t.where else ''}"
            + (f" min {t.min:g}" if t.min is not None else "")
            + (f" max {t.max:g}" if t.max is not None else "")
            for t in d.thresholds
        ]
        limits_line = "thresholds: " + (", ".join(limits) or "none (only the checks of the tool)")
        lines = [f"verdict: {s.verdict}", limits_line]
        rows = [_row(n) for n in s.diagnostics]
        out.append(Section(f"Diagnostic {s.step.id}", f"diag-{s.step.id}", lines, HEAD, rows,
                           after=[] if rows else ["no node was judged"]))  # fmt: skip
    return out


def diag_markdown(rec: RunRecord) -> list[str]:
    """The sections in Markdown (lines to append to the report), [] without diagnostic steps."""
    sections = diag_sections(rec)
    return ["", *sections_markdown(sections, level=2)] if sections else []


def diag_html(rec: RunRecord) -> str:
    """The sections in HTML, '' without diagnostic steps."""
    sections = diag_sections(rec)
    return sections_html(sections, ident="diagnostics") if sections else ""


def diag_text(rec: RunRecord) -> list[str]:
    """Plain lines for the terminal: a line per node of each diagnostic step."""
    return [
        f"{s.step.id} {n.node}: {'not run' if n.status == 'missing' else n.status}: "
        f"{_figures(n)}" + (f" — {'; '.join(n.reasons)}" if n.reasons else "")
        for s in diag_steps(rec)
        for n in s.diagnostics
    ]


def diag_cases(rec: RunRecord) -> list[Case]:
    """JUnit: each diagnostic step, then one case per node or pair (a node without the tool is an
    error, not a pass). The unfinished ones are threshold_cases' "step not run"."""
    cases = []
    for res in diag_steps(rec):
        cls = f"orch.{rec.plan_name}.{res.step.id}"
        cases.append(Case(cls, "step", res.verdict, "; ".join(res.reasons)))
        cases += [Case(cls, f"node {n.node}", n.verdict, "; ".join(n.reasons)) for n in res.diagnostics]
    return cases
