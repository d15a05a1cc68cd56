"""CLI command: migrate plan (`orch migrate plan --from A --to B [-i INV --fingerprints RUN]`)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Annotated, Literal

import typer

from orchestrator.cli.common import VERDICT_STYLE, Cell, Col, fitted_table, out, styled, write_out
from orchestrator.migrate.matrix import migration_plan
from orchestrator.models.migrate import MigrationMatrix
from orchestrator.report.migrate import matrix_markdown, node_cell

Format = Literal["table", "md", "json"]


def _short(value: str | None) -> str:
    """A 40-hex commit or a sha256 digest cut to 12 hex digits for the terminal (JSON and
    Markdown keep them whole)."""
    if value is None:
        return "-"
    head, sep, tail = value.rpartition("sha256:")
    if sep and len(tail) == 64:
        return f"{head}{sep}{tail[:12]}…"
    if len(value) == 40 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "…"
    return value


def _print_table(m: MigrationMatrix) -> None:
    cols = [
        Col("component"), Col("item"), Col(f"A: {m.from_stack}"), Col(f"B: {m.to_stack}"),
        Col("verdict", whole=True), Col("note", optional=True),
        *(Col(n, optional=True) for n in m.nodes),
    ]  # fmt: skip
    rows: list[list[Cell]] = []
    for r in m.rows:
        by = {v.node: v for v in r.nodes}
        cells: list[Cell] = [
            r.component, r.item, _short(r.from_value), _short(r.to_value),
            styled(r.verdict, VERDICT_STYLE[r.verdict]), r.note,
        ]  # fmt: skip
        for n in m.nodes:
            v = by.get(n)
            cells.append(
                styled(_short(node_cell(v)), VERDICT_STYLE[v.vs_from or "unchanged"]) if v is not None else ""
            )
        rows.append(cells)
    title = f"migrate {m.from_stack} -> {m.to_stack}: {m.verdict}"
    out.print(fitted_table(title, cols, rows, out.width))
    out.print(", ".join(f"{n} {v}" for v, n in m.counts().items()))
    if m.missing:
        out.print(f"no fingerprint: {', '.join(m.missing)}")
    out.print("questions for the team:")
    for q in m.questions:
        out.print(
            textwrap.fill(
                f"{q.topic}: {q.question}", out.width, initial_indent="  ", subsequent_indent="    "
            )
        )


def register(app: typer.Typer) -> None:
    """Add `migrate` to the root app."""
    migrate_app = typer.Typer(
        help="Move from one stack to another (docs/migration.md).", no_args_is_help=True
    )

    @migrate_app.command("plan")
    def plan_cmd(
        from_stack: Annotated[str, typer.Option("--from", help="The stack the nodes run now (A).")],
        to_stack: Annotated[str, typer.Option("--to", help="The stack to move to (B).")],
        inventory: Annotated[
            Path | None, typer.Option("--inventory", "-i", help="Ansible inventory: its nodes get a column.")
        ] = None,
        fingerprints: Annotated[
            Path | None,
            typer.Option(
                "--fingerprints",
                help="Run folder of `orch fingerprint` (or its --save file): the nodes' versions.",
            ),
        ] = None,
        fmt: Annotated[Format, typer.Option("--format", help="table, md or json.")] = "table",
    ) -> None:
        """The compatibility matrix from A to B per component, with the four verdicts, and the
        questions orch cannot answer. Exit 0 when every row is unchanged, 1 otherwise."""
        m = migration_plan(from_stack, to_stack, inventory=inventory, fingerprints=fingerprints)
        if fmt == "json":
            write_out(m.model_dump_json(indent=2) + "\n")
        elif fmt == "md":
            write_out(matrix_markdown(m))
        else:
            _print_table(m)
        raise typer.Exit(0 if m.verdict == "unchanged" else 1)

    app.add_typer(migrate_app, name="migrate")
