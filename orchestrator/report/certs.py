"""Report sections for certificates and stragglers: Markdown and HTML fragments.

The HTML report calls stragglers_html (report/html.py, for a run with 2-node steps); the
certificate sections are functions only, not called by the report generators yet. Every value
is data and goes through report/escape.py (md) or html.escape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.metrics.stragglers import StragglerReport
from orchestrator.models.cert import Certificate, Refusal
from orchestrator.report.escape import html_text, md
from orchestrator.report.heatmap import heatmap


def _counts(cert: Certificate) -> str:
    passed = sum(t.passed for t in cert.tests)
    return f"{passed}/{len(cert.tests)}"


def certificates_md(certs: Sequence[Certificate], refused: Sequence[Refusal]) -> str:
    """'## Certificates': one row per certified node, then the refused nodes with their reasons."""
    lines = ["## Certificates", "", "| node | run | tests passed | faults survived | valid until | hash |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for c in certs:
        lines.append(
            f"| {md(c.node)} | {md(c.run_id)} | {_counts(c)} | {len(c.faults)} | "
            f"{c.valid_until:%Y-%m-%d} | {md(c.content_hash[:19])}… |"
        )
    if refused:
        lines += ["", "Refused:", ""]
        lines += [f"- {md(r.node)}: {md('; '.join(r.reasons))}" for r in refused]
    return "\n".join(lines) + "\n"


def certificates_html(certs: Sequence[Certificate], refused: Sequence[Refusal]) -> str:
    """The same section as an HTML fragment (a table and a list)."""
    rows = "".join(
        f"<tr><td>{html_text(c.node)}</td><td>{html_text(c.run_id)}</td><td>{_counts(c)}</td><td>{len(c.faults)}</td>"
        f"<td>{c.valid_until:%Y-%m-%d}</td><td><code>{html_text(c.content_hash)}</code></td></tr>"
        for c in certs
    )
    out = [
        '<section id="certificates"><h2>Certificates</h2>',
        "<table><tr><th>node</th><th>run</th><th>tests passed</th><th>faults survived</th>"
        f"<th>valid until</th><th>content hash</th></tr>{rows}</table>",
    ]
    if refused:
        items = "".join(f"<li>{html_text(r.node)}: {html_text('; '.join(r.reasons))}</li>" for r in refused)
        out.append(f'<h3>Refused</h3><ul class="refused">{items}</ul>')
    out.append("</section>")
    return "\n".join(out)


def stragglers_html(
    rep: StragglerReport,
    nodes: Sequence[str],
    matrix: Mapping[tuple[str, str], float],
    *,
    kind: str | None = None,
    section_id: str = "stragglers",
) -> str:
    """The straggler section: the heatmap, the rule's numbers, and each straggler's evidence
    (kind: the kind of node the matrix holds, in the heading, when a cluster has several)."""
    slow = [s.node for s in rep.stragglers]
    title = f"pair {rep.metric}" + (f", {kind}" if kind else "")
    svg = heatmap(nodes, matrix, title=title, unit=rep.metric, flagged=slow)
    rule = (
        f"straggler: median of its pairs &gt; {rep.bound:.4g} = median {rep.centre:.4g} + "
        f"max({rep.k:g} &times; {rep.sigma:.4g}, {rep.floor:.0%} &times; median)"
    )
    items = "".join(
        f"<li>{html_text(s.node)}: median {s.score:.4g} "
        f"({'-' if s.excess is None else f'{s.excess:.2f}'}&times;), "
        f"pairs {html_text(', '.join(f'{p} {v:.4g}' for p, v in sorted(s.pairs.items())))}</li>"
        for s in rep.stragglers
    )
    verdict = f'<ul class="stragglers">{items}</ul>' if items else "<p>no straggler</p>"
    head = "Stragglers" + (f" ({html_text(kind)})" if kind else "")
    return (
        f'<section id="{html_text(section_id)}" class="stragglers-section"><h2>{head}</h2>\n{svg}\n'
        f"<p>{rule}</p>\n{verdict}</section>"
    )
