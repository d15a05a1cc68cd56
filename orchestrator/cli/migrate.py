"""CLI commands: `orch migrate plan` (the matrix), `orch migrate run` (the procedure) and
`orch rollback` (back to a stack, or to a migrate run's frozen reference, with the certify step)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from orchestrator.cli.common import (
    VERDICT_STYLE,
    Cell,
    Col,
    InventoryOpt,
    OutOpt,
    fitted_table,
    out,
    styled,
    write_out,
)
from orchestrator.cli.run import ProgressPrinter
from orchestrator.errors import ConfigError
from orchestrator.inventory import DEFAULT_INVENTORY
from orchestrator.migrate.matrix import migration_plan
from orchestrator.models.migrate import MigrateRun, MigrationMatrix
from orchestrator.report.migrate import matrix_markdown, node_cell

if TYPE_CHECKING:
    from orchestrator.models.requests import MigrateRequest

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
        Col("component"),
        Col("item"),
        Col(f"A: {m.from_stack}"),
        Col(f"B: {m.to_stack}"),
        Col("verdict", whole=True),
        Col("note", optional=True),
        *(Col(n, optional=True) for n in m.nodes),
    ]
    rows: list[list[Cell]] = []
    for r in m.rows:
        by = {v.node: v for v in r.nodes}
        cells: list[Cell] = [
            r.component,
            r.item,
            _short(r.from_value),
            _short(r.to_value),
            styled(r.verdict, VERDICT_STYLE[r.verdict]),
            r.note,
        ]
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


_STATE_STYLE = {"passed": "green", "failed": "red", "skipped": "dim"}


def render_run(r: MigrateRun) -> None:
    """A migrate or rollback run: each phase with its gate outcome, then where the report is."""
    rows: list[list[Cell]] = [
        [p.phase, styled(p.state, _STATE_STYLE[p.state]), f"{p.wall_s:.1f}", p.reason] for p in r.phases
    ]
    to = f" -> {r.to_ref}" if r.to_ref else ""
    title = f"{r.kind} {r.from_ref}{to}: {r.status}"
    out.print(
        fitted_table(title, [Col("phase"), Col("gate", whole=True), Col("s"), Col("why")], rows, out.width)
    )
    if r.failed_phase:
        out.print(f"the {r.failed_phase} gate failed: {r.failure}", markup=False)
    if r.certification is not None:
        proof = "proved" if r.certification.ok else f"NOT proved on {', '.join(r.certification.failed)}"
        out.print(f"rollback proof ({r.certification.against}): {proof}", markup=False)
    out.print(f"report: {r.run_dir / 'report.md'} (and report.html)", markup=False)


def _run_and_render(req: MigrateRequest) -> int:
    """Run a migration or rollback with progress on the terminal, show its phases; its exit code."""
    from orchestrator.runs.migrate import run_migration

    r = run_migration(req, [ProgressPrinter()])
    render_run(r)
    return r.exit_code


def _reference_dir(ref: str, out_dir: Path) -> Path:
    from orchestrator.store.rundir import check_run_id

    p = Path(ref)
    if p.is_dir():
        return p
    return out_dir / check_run_id(ref)


def rollback_cmd(
    to: Annotated[str | None, typer.Option("--to", help="The stack to go back to (A).")] = None,
    to_run: Annotated[
        str | None,
        typer.Option("--to-run", help="A migrate run (id or folder): back to its frozen reference."),
    ] = None,
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    out_dir: OutOpt = None,
) -> int:
    """Provision A again on every node (B removed with its venv, not kept beside A), then certify:
    every node's fingerprint, package and env hashes included, equals the frozen reference of
    --to-run, or A's manifest. Exit 0 proved, 1 not proved, 2 usage, 3 infra, 130 interrupted."""
    from orchestrator.models.requests import MigrateRequest

    root = out_dir or Path("runs")
    ref = _reference_dir(to_run, root) if to_run else None
    stack, variant = to, None
    if ref is not None:
        from orchestrator.store.load import require_model

        frozen = require_model(MigrateRun, ref, ref / "migrate.json")
        from_run, variant = frozen.from_stack, frozen.from_variant  # A's arm: its stack and variant
        if stack is not None and stack != from_run:
            raise ConfigError(f"--to {stack}: run {ref.name} froze stack {from_run}", hint="leave out --to")
        stack = from_run
    if stack is None:
        raise ConfigError("orch rollback needs --to STACK or --to-run RUN_ID")
    req = MigrateRequest(
        inventory=inventory, from_stack=stack, from_variant=variant, reference_run=ref, out_dir=root
    )
    return _run_and_render(req)


def register(app: typer.Typer) -> None:
    """Add `migrate` and `rollback` to the root app."""
    migrate_app = typer.Typer(
        help="Move from one stack to another (docs/migration.md).", no_args_is_help=True
    )

    @migrate_app.command("plan")
    def plan_cmd(
        from_stack: Annotated[str, typer.Option("--from", help="A: STACK or STACK:VARIANT.")],
        to_stack: Annotated[str, typer.Option("--to", help="B: STACK or STACK:VARIANT.")],
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
        from orchestrator.migrate.arms import parse_arm, with_variants
        from orchestrator.stacks import load_stack

        arm_a, arm_b = parse_arm(from_stack), parse_arm(to_stack)  # STACK[:VARIANT]
        m = migration_plan(arm_a.stack, arm_b.stack, inventory=inventory, fingerprints=fingerprints)
        if arm_a.variant or arm_b.variant:
            m = with_variants(m, load_stack(arm_a.stack), arm_a, load_stack(arm_b.stack), arm_b)
        if fmt == "json":
            write_out(m.model_dump_json(indent=2) + "\n")
        elif fmt == "md":
            write_out(matrix_markdown(m))
        else:
            _print_table(m)
        raise typer.Exit(0 if m.verdict == "unchanged" else 1)

    @migrate_app.command("run")
    def run_cmd(
        from_stack: Annotated[
            str, typer.Option("--from", help="A: STACK or STACK:VARIANT (an engine variant of it).")
        ],
        to_stack: Annotated[str, typer.Option("--to", help="B: STACK or STACK:VARIANT (rocm-6.4:aiter).")],
        plan: Annotated[str, typer.Option("--plan", "-p", help="Built-in plan or YAML file run on A and B.")],
        inventory: InventoryOpt = DEFAULT_INVENTORY,
        canary: Annotated[int, typer.Option("--canary", min=1, help="Nodes that get B first.")] = 1,
        rounds: Annotated[
            int, typer.Option("--rounds", min=1, help="Interleaved rounds of A, B and A' (compare).")
        ] = 2,
        no_rollback: Annotated[
            bool,
            typer.Option("--no-rollback", help="On a failed gate, stop and leave the nodes as they are."),
        ] = False,
        out_dir: OutOpt = None,
    ) -> int:
        """The migration as a resumable run: freeze, canary, scale, faults, compare, rollback,
        certify, each with a gate; a failed gate stops it and rolls back (unless --no-rollback).
        Exit 0 every gate passed, 1 a gate failed, 2 usage, 3 infra, 130 interrupted (orch runs
        resume continues it)."""
        from orchestrator.migrate.arms import parse_arm
        from orchestrator.models.requests import MigrateRequest

        a, b = parse_arm(from_stack), parse_arm(to_stack)
        req = MigrateRequest(
            inventory=inventory,
            from_stack=a.stack,
            to_stack=b.stack,
            from_variant=a.variant,
            to_variant=b.variant,
            plan=plan,
            canary=canary,
            rounds=rounds,
            no_rollback=no_rollback,
            out_dir=out_dir or Path("runs"),
        )
        raise typer.Exit(_run_and_render(req))

    app.add_typer(migrate_app, name="migrate")
    app.command("rollback")(rollback_cmd)
