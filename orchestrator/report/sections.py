"""Format-neutral report sections and their tables in each text format.

A report that is built as a list of Sections says the same in Markdown and in HTML: the isolation
section (report/isolation.py) and the migrate report (report/migrate.py) are. Every cell is data
from files a user can edit: the tables here escape each one (escape.md, escape.html_text).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.report.escape import html_text, md


@dataclass
class Section:
    """A titled part: lines of text, then a table (head, rows, each row's class), then lines after."""

    title: str
    ident: str = ""
    lines: list[str] = field(default_factory=list)
    head: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    row_class: str = ""
    after: list[str] = field(default_factory=list)


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
