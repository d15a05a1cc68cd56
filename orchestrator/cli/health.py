"""CLI command: health (passive health: each node's kernel log, sysfs counters, GPU and RDMA tools).

`orch health --local` runs as Slurm's HealthCheckProgram on every node at once, so it starts as
fast as `check --quick`: typer and orch's own light modules only (no rich, no paramiko, no Ansible,
no plan models, no inventory), and it prints through cli/plain.py. `orch health -i INV` reads the
inventory and samples each node over SSH.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.plain import say, short_hostname
from orchestrator.errors import EXIT_INFRA, EXIT_OK, EXIT_THRESHOLDS, EXIT_USAGE

if TYPE_CHECKING:
    from orchestrator.models.health import HealthReport

_COLUMNS = ("node", "severity", "kind", "source", "device", "count", "evidence")


def table_lines(report: HealthReport) -> list[str]:
    """The report as a plain table: a row per finding, then a line per node's errors and action."""
    rows = [
        [f.node, f.severity, f.kind, f.source, f.device or "-", str(f.count), f.evidence]
        for n in report.nodes
        for f in n.findings
    ]
    lines: list[str] = []
    if rows:
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLUMNS[:-1])]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
        lines += [fmt.format(*_COLUMNS), *(fmt.format(*r) for r in rows)]
    for n in report.nodes:
        if not n.findings and not n.errors:
            lines.append(f"{n.node}: no findings")
        lines += [f"{n.node}: could not read {e}" for e in n.errors]
        if n.action:
            lines.append(f"{n.node}: {n.action}")
    return lines


def exit_code(report: HealthReport) -> int:
    """1 when a node has a fatal finding, 3 when a node could not be sampled at all, else 0."""
    if report.fatal_nodes:
        return EXIT_THRESHOLDS
    if any(not n.findings and any(e.startswith("not sampled") for e in n.errors) for n in report.nodes):
        return EXIT_INFRA
    return EXIT_OK


def health_cmd(
    inventory: Annotated[
        Path | None, typer.Option("--inventory", "-i", help="Ansible inventory: sample each node over SSH.")
    ] = None,
    local: Annotated[
        bool, typer.Option("--local", help="Sample this machine (a Slurm HealthCheckProgram); no inventory.")
    ] = False,
    node: Annotated[
        str | None, typer.Option("--node", help="--local: this node's Slurm name (default: short host name).")
    ] = None,
    kernel_log: Annotated[
        str | None, typer.Option("--kernel-log", help="--local: the kernel log file (default: dmesg).")
    ] = None,
    sysfs: Annotated[str, typer.Option("--sysfs", help="--local: the sysfs root.")] = "/sys",
    tools_dir: Annotated[
        str | None,
        typer.Option("--tools-dir", help="--local: saved tool outputs (default: run the tools)."),
    ] = None,
    iface: Annotated[
        list[str] | None, typer.Option("--iface", help="--local: a fabric NIC (down is fatal); repeatable.")
    ] = None,
    drain: Annotated[
        bool, typer.Option("--drain", help="Drain nodes with a fatal finding in Slurm, under the cap.")
    ] = False,
    max_unavailable: Annotated[
        int | None,
        typer.Option(
            "--max-unavailable",
            min=0,
            help="At most this many nodes out of service after draining "
            "(default: the inventory's orch_max_unavailable; 1 with --local).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> int:
    """Sample each node once: XID and amdgpu RAS lines of the kernel log, ECC and retired rows, PCIe
    AER counters, NIC state and flaps, RDMA ports, throttling. Exit 1 when a node has a fatal
    finding (drained with --drain, under the cap), 3 when a node could not be reached, else 0."""
    if local == (inventory is not None):
        say("give either --inventory/-i (over SSH) or --local (this machine)", stream=sys.stderr)
        return EXIT_USAGE
    if local:
        from orchestrator.models.health import HealthSources
        from orchestrator.runs.health import check_here

        src = HealthSources(kernel_log=kernel_log, sysfs=sysfs, tools_dir=tools_dir, ifaces=list(iface or []))
        name = node or short_hostname()
        budget = 1 if max_unavailable is None else max_unavailable
        report = check_here(name, src, drain=drain, max_unavailable=budget)
    else:
        from orchestrator.inventory import load_inventory
        from orchestrator.runs.health import check_cluster

        assert inventory is not None
        cluster = load_inventory(inventory)
        if max_unavailable is not None:
            cluster.vars.orch_max_unavailable = max_unavailable
        report = check_cluster(cluster, drain=drain)
    if as_json:
        say(report.model_dump_json(indent=2))
    else:
        for line in table_lines(report):
            say(line)
    return exit_code(report)


def register(app: typer.Typer) -> None:
    """Add this module's command to the root app."""
    app.command("health")(health_cmd)
