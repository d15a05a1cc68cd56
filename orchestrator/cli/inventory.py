"""CLI commands: inventory (`orch inventory show`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import err, out
from orchestrator.inventory import DEFAULT_INVENTORY, load_inventory
from orchestrator.models.cluster import Cluster
from orchestrator.text import plural

inventory_app = typer.Typer(
    name="inventory", help="Read the Ansible inventory as orch sees it.", no_args_is_help=True
)


@inventory_app.command("show")
def show(
    inventory: Annotated[
        Path,
        typer.Option(
            "--inventory",
            "-i",
            help="Ansible inventory (INI or YAML, or a directory Ansible accepts).",
            show_default="inventories/local.ini",
        ),
    ] = DEFAULT_INVENTORY,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Cluster model as JSON.")] = False,
) -> None:
    """Show the nodes, their GPUs, NICs and groups, after orch's checks."""
    cluster = load_inventory(inventory)
    for w in cluster.warnings:
        err.print(f"warning: {w}", markup=False, highlight=False, style="yellow")
    if as_json:
        out.out(cluster.model_dump_json(indent=2), highlight=False)
    else:
        out.print(cluster_table(cluster))


def cluster_table(cluster: Cluster) -> Table:
    """A rich table of the cluster: one row per node. Raises nothing."""
    table = Table(title=f"{cluster.source} — {plural(len(cluster.nodes), 'node')}")
    for column in ("node", "address", "vendor", "GPUs", "RDMA NICs", "management NIC", "groups"):
        table.add_column(column, justify="right" if column == "GPUs" else "left")
    for n in cluster.nodes:
        address = n.address if n.port == 22 else f"{n.address}:{n.port}"
        if n.is_local:
            address += " (local)"
        table.add_row(
            n.name,
            address,
            n.gpu_vendor,
            str(n.gpus_per_node),
            ",".join(n.rdma_ifaces) or "-",
            n.mgmt_iface or "-",
            ", ".join(n.groups) or "-",
        )
    return table


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(inventory_app, name="inventory")
