"""Report sections for certificates: Markdown and HTML fragments.

The certificate sections are functions only, not called by the report generators yet (the
straggler sections are in report/stragglers.py). Every value is data and goes through
report/escape.py (md) or html.escape.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.models.cert import Certificate, Refusal
from orchestrator.report.escape import html_text, md


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
