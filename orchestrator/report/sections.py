"""Format-neutral report sections, and their renderers in each text format.

A report that is built as a list of Sections says the same in Markdown and in HTML: the isolation
section (report/isolation.py), the straggler sections (report/stragglers.py) and the migrate report
(report/migrate.py) are. sections_markdown and sections_html render a list of them; a figure (a
node-pair matrix) is drawn as a heatmap in HTML and written as the table of its pairs in Markdown.
Every cell is data from files a user can edit: the renderers escape each one (escape.md,
escape.html_text; report/heatmap.py for the SVG).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.report.escape import html_text, md
from orchestrator.report.heatmap import heatmap


@dataclass
class PairFigure:
    """A figure per pair of nodes (larger is worse): a heatmap in HTML, a table in Markdown."""

    nodes: list[str]
    values: Mapping[tuple[str, str], float]
    title: str
    unit: str
    flagged: list[str] = field(default_factory=list)


@dataclass
class Section:
    """A titled part: lines of text (a list, of class list_class in HTML; a line "**NAME**: text"
    names an item: NAME bold, the item of class named_class in HTML), a figure, a table (head, rows,
    each row's class), then lines after."""

    title: str
    ident: str = ""
    lines: list[str] = field(default_factory=list)
    head: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    row_class: str = ""
    after: list[str] = field(default_factory=list)
    figure: PairFigure | None = None
    list_class: str = ""
    named_class: str = ""


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table, one line a row, every cell through escape.md()."""
    out = ["| " + " | ".join(md(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(md(c) for c in r) + " |" for r in rows]
    return out


def html_table(head: list[str], rows: list[list[str]], *, ident: str = "", row_class: str = "") -> list[str]:
    """An HTML table (id ``IDENT-table`` when given), one item a row, every cell through
    escape.html_text()."""
    h = html_text
    tid = f' id="{h(ident)}-table"' if ident else ""
    cls = f' class="{h(row_class)}"' if row_class else ""
    out = [f"<table{tid}><tr>" + "".join(f"<th>{h(x)}</th>" for x in head) + "</tr>"]
    out += ["<tr" + cls + ">" + "".join(f"<td>{h(c)}</td>" for c in r) + "</tr>" for r in rows]
    return [*out, "</table>"]


def _named(line: str) -> tuple[str, str] | None:
    """A line written "**NAME**: text" (a named item: a culprit, say): (NAME, text), else None."""
    if line.startswith("**") and "**:" in line:
        name, rest = line[2:].split("**:", 1)
        return name, rest.strip()
    return None


def _pairs(fig: PairFigure) -> list[list[str]]:
    """The figure's pairs as table rows, one per unordered pair, in the order of fig.nodes."""
    pos = {n: i for i, n in enumerate(fig.nodes)}
    seen: dict[tuple[str, str], float] = {}
    for (a, b), v in fig.values.items():
        if a in pos and b in pos:
            seen.setdefault((a, b) if pos[a] <= pos[b] else (b, a), v)
    rows = sorted(seen.items(), key=lambda kv: (pos[kv[0][0]], pos[kv[0][1]]))
    flag = set(fig.flagged)
    return [[a, b, f"{v:.4g}", ", ".join(n for n in (a, b) if n in flag)] for (a, b), v in rows]


def sections_markdown(sections: list[Section], *, level: int = 2) -> list[str]:
    """Sections as Markdown lines: the first title at `level`, the others one deeper; the lines as a
    list, then the figure as the table of its pairs (after the lines: a verdict before a long
    table), the table, the lines after. Every value goes through escape.md()."""
    out: list[str] = []
    for i, s in enumerate(sections):
        out += [f"{'#' * (level if i == 0 else level + 1)} {md(s.title)}", ""]
        for x in s.lines:
            named = _named(x)
            out.append(f"- **{md(named[0])}**: {md(named[1])}" if named else f"- {md(x)}")
        if s.lines:
            out.append("")
        if s.figure is not None:
            head = ["node", "partner", s.figure.unit, "flagged"]
            out += [*md_table(head, _pairs(s.figure)), ""]
        if s.head:
            out += [*md_table(s.head, s.rows), ""]
        if s.after:
            out += [*(f"- {md(x)}" for x in s.after), ""]
    return out


def sections_html(sections: list[Section], *, ident: str, cls: str = "") -> str:
    """Sections as one `<section id="IDENT" class="CLS">`: the first title an h2, the others h3
    (each with its Section's ident as id, when given and not IDENT); the figure drawn as a heatmap
    (report/heatmap.py) under its title, as the report's charts are; then the lines as a list, the
    table, the lines after. Every value goes through escape.html_text()."""
    h = html_text
    klass = f' class="{h(cls)}"' if cls else ""
    parts = [f'<section id="{h(ident)}"{klass}>']
    for i, s in enumerate(sections):
        tag = "h2" if i == 0 else "h3"
        tid = f' id="{h(s.ident)}"' if s.ident and s.ident != ident else ""
        parts.append(f"<{tag}{tid}>{h(s.title)}</{tag}>")
        if s.figure is not None:
            f = s.figure
            parts.append(heatmap(f.nodes, f.values, title=f.title, unit=f.unit, flagged=f.flagged))
        if s.lines:
            items = []
            for x in s.lines:
                named = _named(x)
                if named:
                    nc = f' class="{h(s.named_class)}"' if s.named_class else ""
                    items.append(f"<li{nc}><b>{h(named[0])}</b>: {h(named[1])}</li>")
                else:
                    items.append(f"<li>{h(x)}</li>")
            lc = f' class="{h(s.list_class)}"' if s.list_class else ""
            parts.append(f"<ul{lc}>" + "".join(items) + "</ul>")
        if s.head:
            parts += html_table(s.head, s.rows, ident=s.ident, row_class=s.row_class)
        if s.after:
            parts.append('<ul class="after">' + "".join(f"<li>{h(x)}</li>" for x in s.after) + "</ul>")
    parts.append("</section>")
    return "\n".join(parts)
