"""The migration matrix (`orch migrate plan`) as Markdown, for a ticket or docs/.

Every value comes from a manifest or a saved fingerprint, files a user can edit: each cell goes
through escape.md().
"""

from __future__ import annotations

import shlex

from orchestrator.models.decision import FigureChange
from orchestrator.models.migrate import MatrixRow, MigrateRun, MigrationMatrix, NodeValue
from orchestrator.report.escape import html_text, md
from orchestrator.report.sections import Section, html_table, md_table


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
    rows = [
        [
            r.component,
            r.item,
            r.from_value or "-",
            r.to_value or "-",
            r.verdict,
            r.note,
            *_nodes_of(r, m.nodes),
        ]
        for r in m.rows
    ]
    lines += ["", *md_table(head, rows)]
    lines += ["", "## Questions for the team", ""]
    lines += [f"- **{md(q.topic)}**: {md(q.question)}" for q in m.questions]
    return "\n".join(lines) + "\n"


# --- the report of a migrate (or rollback) run ------------------------------------------------------


def _size(n: int) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def run_sections(r: MigrateRun) -> list[Section]:
    """The report's sections (a table, then lines after it): one source for the Markdown and the
    HTML, so that both say the same."""
    title_to = f" → {r.to_ref}" if r.to_ref else ""
    summary = [
        f"{r.kind} {r.from_ref}{title_to} on {', '.join(r.nodes)}: {r.status} (exit {r.exit_code}), "
        f"{r.wall_s:.0f} s",
    ]
    if r.failed_phase:
        summary.append(f"the {r.failed_phase} gate failed: {r.failure}")
    summary.append("rolled back to " + r.from_ref if r.rolled_back else "not rolled back")
    if r.canary:
        summary.append(f"canary: {', '.join(r.canary)}")
    for i, found in enumerate(r.resumes, 1):
        summary.append(f"resume {i}: " + ", ".join(f"{s.node} {s.holds}" for s in found))
    if r.stopped_playbooks:
        summary.append(f"ansible-playbook left behind and stopped on resume: PIDs {r.stopped_playbooks}")
    sections = [Section("Summary", after=summary), *arm_sections(r)]
    sections.append(
        Section(
            "Phases",
            head=["phase", "state", "gate", "reason", "time", "attempts"],
            rows=[
                [p.phase, p.state, p.gate, p.reason, f"{p.wall_s:.1f} s", str(p.attempts)] for p in r.phases
            ],
        )
    )
    c = r.comparison
    if c is not None:
        rows = []
        for d in c.collectives:
            for s in d.sizes:
                mark = (
                    "flagged"
                    if s.size_bytes in d.flagged_sizes
                    else "alone"
                    if s.size_bytes in d.lone_sizes
                    else ""
                )
                rows.append(
                    [
                        d.collective,
                        _size(s.size_bytes),
                        _opt(s.change.a, "{:.4g}"),
                        _opt(s.change.b, "{:.4g}"),
                        _opt(None if s.change.ratio is None else (s.change.ratio - 1) * 100, "{:+.1f}%"),
                        _opt(s.change.log_band, "±{:.3f}"),
                        _opt(s.control_log_ratio, "{:+.3f}"),
                        f"{s.n_a}/{s.n_b}/{s.n_control}",
                        s.change.change,
                        mark,
                    ]
                )
        after = [f"mode: {c.mode} ({c.why_mode})", f"run order: {' '.join(c.order)}"]
        after += [f"{d.collective}: {d.direction}" for d in c.collectives]
        if c.serving is not None:
            after.append(f"serving: {c.serving.direction}: {c.serving.reason}")
        head = [
            "series",
            "size",
            "A busbw",
            "B busbw",
            "B/A",
            "band (ln)",
            "A' - A (ln)",
            "n A/B/A'",
            "change",
            "",
        ]
        sections.append(Section("A/B compare", head=head, rows=rows, after=after))
    cert = r.certification
    if cert is not None:
        rows = [
            [
                n.node,
                "ok" if n.ok else "DIFFERS",
                n.stack_record or "-",
                n.packages_hash or "-",
                n.expected_packages_hash or "-",
                n.env_hash or "-",
                n.expected_env_hash or "-",
                "; ".join(n.differences + [f"(not counted) {x}" for x in n.notes]),
            ]
            for n in cert.nodes
        ]
        against = (
            f"the frozen reference of run {cert.reference_from}"
            if cert.against == "reference"
            else (f"the {cert.stack} manifest")
        )
        sections.append(
            Section(
                "Rollback proof",
                head=[
                    "node",
                    "proof",
                    "stack record",
                    "packages",
                    "expected",
                    "env",
                    "expected",
                    "differences",
                ],
                rows=rows,
                after=[f"every node held to {against}: {'proved' if cert.ok else 'NOT proved'}"],
            )
        )
    sections += serving_sections(r)
    sections += fault_sections(r)
    if r.plan_runs:
        sections.append(
            Section(
                "Plan runs",
                head=["label", "stack", "nodes", "verdict", "time", "reasons"],
                rows=[
                    [
                        p.label,
                        p.stack,
                        ",".join(p.nodes),
                        p.verdict,
                        f"{p.wall_s:.1f} s",
                        "; ".join(p.reasons),
                    ]
                    for p in r.plan_runs
                ],
            )
        )
    return sections


def serving_sections(r: MigrateRun) -> list[Section]:
    """The serving compare (per step, level and figure: A, B, B/A, the band, detect, the verdict),
    the output-quality judgements (with their figures) and every plan run's serving figures."""
    from orchestrator.metrics.quality import quality_figures

    out = []
    c = r.comparison
    if c is not None and c.serving_levels:
        rows = [
            [
                f"{lv.step} {lv.level}",
                f.figure,
                _opt(f.change.a, "{:.4g}"),
                _opt(f.change.b, "{:.4g}"),
                _opt(None if f.change.ratio is None else (f.change.ratio - 1) * 100, "{:+.1f}%"),
                _opt(None if f.change.band is None else f.change.band * 100, "±{:.1f}%"),
                _opt(None if f.detect is None else f.detect * 100, "{:.0f}%"),
                "/".join("?" if x is None else str(x) for x in (f.change.n_a, f.change.n_b)),
                f.verdict,
            ]
            for lv in c.serving_levels
            for f in lv.figures
        ]
        after = [f"interleaved rounds: {c.rounds}"] if c.rounds is not None else []
        after += [f"{lv.step} {lv.level}: {lv.direction}: {lv.reason}" for lv in c.serving_levels]
        after += [f"{lv.step} {lv.level} blind: {b}" for lv in c.serving_levels for b in lv.blind]
        after += [
            f"{lv.step} {lv.level} {k} (A's runs, then B's): "
            + ", ".join("-" if v is None else f"{v:.1%}" for v in vs)
            for lv in c.serving_levels
            for k, vs in lv.rates.items()
        ]
        head = ["step level", "figure", "A", "B", "B/A", "band", "detect", "n A/B", "verdict"]
        out.append(Section("Serving compare", head=head, rows=rows, after=after))
    judged = [(p.label, step, j) for p in r.plan_runs for step, j in p.quality.items()]
    judged += [("compare", step, j) for step, j in (c.quality.items() if c is not None else [])]
    if judged:
        rows = [
            [label, step, "passed" if j.passed else "FAILED", quality_figures(j), "; ".join(j.reasons)]
            for label, step, j in judged
        ]
        out.append(Section("Output quality, B against A", head=["where", "step", "gate", "figures", "why"],
                           rows=rows))  # fmt: skip
    figs = [(p.label, f) for p in r.plan_runs for f in p.serving]
    if figs:

        def pct(v: float | None) -> str:
            return _opt(None if v is None else v * 100, "{:.1f}%")

        rows = [
            [label, f"{f.step} {f.level}", str(f.n)]
            + [_opt(v, "{:.4g}") for v in (f.ttft_p99_ms, f.itl_p99_ms, f.tpot_p99_ms, f.output_tokens_per_s)]
            + [pct(f.slo_attainment), pct(f.error_rate), pct(f.abort_rate), pct(f.timeout_rate)]
            + [pct(f.truncated_rate)]
            for label, f in figs
        ]
        head = ["run", "step level", "n", "TTFT p99 ms", "ITL p99 ms", "TPOT p99 ms", "output tok/s", "SLO",
                "errors", "aborted", "timed out", "truncated"]  # fmt: skip
        out.append(Section("Serving figures per plan run", head=head, rows=rows))
    return out


def run_markdown(r: MigrateRun, matrix: MigrationMatrix | None = None) -> str:
    """report.md of a migrate or rollback run (the matrix first, when given)."""
    lines = [f"# orch {md(r.kind)} {md(r.run_id)}", ""]
    for s in run_sections(r):
        lines += [f"## {md(s.title)}", ""]
        if s.head:
            lines += [*md_table(s.head, s.rows), ""]
        lines += [f"- {md(x)}" for x in s.after]
        lines.append("")
    if matrix is not None:
        lines += ["## Compatibility matrix", "", *matrix_markdown(matrix).splitlines()[2:]]
    return "\n".join(lines).rstrip() + "\n"


def run_html(r: MigrateRun, matrix: MigrationMatrix | None = None) -> str:
    """report.html of a migrate or rollback run: the same sections as the Markdown, escaped."""
    h = html_text
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>orch {h(r.kind)} {h(r.run_id)}</title>",
        f"<h1>orch {h(r.kind)} {h(r.run_id)}</h1>",
    ]
    for s in run_sections(r):
        parts.append(f"<h2>{h(s.title)}</h2>")
        if s.head:
            parts += html_table(s.head, s.rows)
        if s.after:
            parts.append("<ul>" + "".join(f"<li>{h(x)}</li>" for x in s.after) + "</ul>")
    if matrix is not None:
        parts.append(
            "<h2>Compatibility matrix</h2><table><tr>"
            + "".join(f"<th>{h(x)}</th>" for x in ("component", "item", "A", "B", "verdict", "note"))
            + "</tr>"
        )
        for row in matrix.rows:
            cells = [
                row.component,
                row.item,
                row.from_value or "-",
                row.to_value or "-",
                row.verdict,
                row.note,
            ]
            parts.append("<tr>" + "".join(f"<td>{h(x)}</td>" for x in cells) + "</tr>")
        parts.append("</table><h3>Questions for the team</h3><ul>")
        parts += [f"<li>{h(q.topic)}: {h(q.question)}</li>" for q in matrix.questions]
        parts.append("</ul>")
    return "\n".join(parts) + "\n"


def _opt(v: float | None, fmt: str) -> str:
    """v formatted, or - where there is none."""
    return "-" if v is None else fmt.format(v)


def arm_sections(r: MigrateRun) -> list[Section]:
    """The arms (STACK[:VARIANT]) with each engine as rendered and the variant read back from it,
    and the arm the rollback and the certification found (none for a run before arms)."""
    if not r.arms:
        return []
    rows = [
        [a.side, a.stack, a.variant or "-", e.workload, e.engine, e.variant or "none shows",
         shlex.join(e.argv), " ".join(f"{k}={v}" for k, v in sorted(e.env.items()))]
        for a in r.arms
        for e in a.engines or []
    ]  # fmt: skip
    rows += [[a.side, a.stack, a.variant or "-", "-", "-", "-", "-", "-"] for a in r.arms if not a.engines]
    after = []
    for what, arm in (("rollback", r.rolled_back_to), ("certify", r.certification and r.certification.arm)):
        if arm:
            seen = ", ".join(f"{e.workload} {e.variant or 'none shows'}" for e in arm.engines) or "no engine"
            after.append(f"{what}: {arm.ref} (variant read from the rendered engine: {seen})")
    head = ["arm", "stack", "variant asked", "workload", "engine", "variant read", "argv", "environment"]
    return [Section("Arms", head=head, rows=rows, after=after)]


def fault_sections(r: MigrateRun) -> list[Section]:
    """The faults phase's serving faults: B's outage and time to steady beside A's (faults-A), with
    the band and the verdict (migrate/fault_compare.py)."""
    if not r.fault_compare:
        return []

    def secs(v: float | None) -> str:
        return _opt(v, "{:.1f}")

    def band(c: FigureChange) -> str:
        return _opt(None if c.band is None else c.band * 100, "±{:.0f}%")

    rows = [
        [d.step, d.fault, secs(d.outage.a), secs(d.outage.b), band(d.outage), secs(d.to_steady.a),
         secs(d.to_steady.b), band(d.to_steady), "/".join(str(x) for x in (d.outage.n_a, d.outage.n_b)),
         d.verdict]
        for d in r.fault_compare
    ]  # fmt: skip
    head = ["step", "fault", "outage A s", "outage B s", "band", "steady A s", "steady B s", "band",
            "repeats A/B", "verdict"]  # fmt: skip
    return [Section("Serving faults, B against A", head=head, rows=rows,
                    after=[d.reason for d in r.fault_compare])]  # fmt: skip
