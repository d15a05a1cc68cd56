"""CLI commands: stack list, stack show, schema stack|plan."""

from __future__ import annotations

from typing import Annotated

import typer
import yaml
from rich.table import Table

from orchestrator.cli.common import out, write_out
from orchestrator.stacks import list_stacks, load_stack, schema_text


def register(app: typer.Typer) -> None:
    """Add `stack` and `schema` to the root app."""
    stack_app = typer.Typer(
        help="Pinned software stacks (orchestrator/playbooks/stacks/*.yaml).", no_args_is_help=True
    )

    @stack_app.command("list")
    def list_cmd() -> None:
        """List the stack manifests with their kind and description."""
        table = Table(title="stacks")
        for col in ("name", "kind", "description"):
            table.add_column(col)
        for name in list_stacks():
            s = load_stack(name)
            table.add_row(s.name, s.kind, s.description)
        out.print(table)

    @stack_app.command("show")
    def show_cmd(name: Annotated[str, typer.Argument(help="Stack name or YAML file.")]) -> None:
        """Print one validated stack as YAML."""
        s = load_stack(name)
        out.print(yaml.safe_dump(s.model_dump(mode="json", exclude_none=True), sort_keys=False), markup=False)

    app.add_typer(stack_app, name="stack")

    @app.command("schema")
    def schema_cmd(kind: Annotated[str, typer.Argument(help="stack or plan")]) -> None:
        """Print the JSON Schema of stack or plan files (for editors)."""
        write_out(schema_text(kind))
