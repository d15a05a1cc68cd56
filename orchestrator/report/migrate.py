"""The migration matrix (`orch migrate plan`) as Markdown, for a ticket or docs/.

Every value comes from a manifest or a saved fingerprint, files a user can edit: each cell goes
through escape.md().
"""

from __future__ import annotations

from orchestrator.models.migrate import MatrixRow, MigrationMatrix, NodeValue
from orchestrator.report.escape import md


def node_cell(v: NodeValue) -> str:
    """A node's value, with how it stands against A's pin when it is not on it (plain text)."""
    text = v.found or "-"
    if v.vs_from is not None and v.vs_from != "unchanged":
        text += f" (vs A: {v.vs_from})"
    return text


def _nodes_of(row: MatrixRow, nodes: list[str]) -> list[str]:
    by = {v.node: v for v in row.nodes}
    return [node_cell(by[n]) if n in by else "" for n in nodes]


def matrix_markdown(m: MigrationMatrix) -> str:
    """The matrix, the counts per verdict, the nodes without a fingerprint and the questions."""
    counts = ", ".join(f"{n} {v}" for v, n in m.counts().items())
    lines = [
        f"# Migration {md(m.from_stack)} → {md(m.to_stack)}: **{md(m.verdict)}**",
        "",
        f"- rows: {counts}",
    ]
    if m.fingerprints_from:
        lines.append(f"- node values from {md(m.fingerprints_from)}")
    if m.missing:
        lines.append(f"- no fingerprint: {', '.join(md(n) for n in m.missing)}")
    head = ["component", "item", f"A: {m.from_stack}", f"B: {m.to_stack}", "verdict", "note", *m.nodes]
    lines += ["", "| " + " | ".join(md(h) for h in head) + " |", "|" + "---|" * len(head)]
    for r in m.rows:
        cells = [r.component, r.item, r.from_value or "-", r.to_value or "-", r.verdict, r.note]
        cells += _nodes_of(r, m.nodes)
        lines.append("| " + " | ".join(md(c) for c in cells) + " |")
    lines += ["", "## Questions for the team", ""]
    lines += [f"- **{md(q.topic)}**: {md(q.question)}" for q in m.questions]
    return "\n".join(lines) + "\n"
