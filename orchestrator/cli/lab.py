"""CLI commands: lab (up, status, down) — the virtual multi-node lab on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.table import Table

from orchestrator.cli.common import err, out, styled
from orchestrator.lab import LabConfig, LabStatus, down, make_config, status, up
from orchestrator.lab.config import DEFAULT_INVENTORY, DEFAULT_STATE_DIR
from orchestrator.lab.disk import size_text

lab_app = typer.Typer(name="lab", help="The virtual lab: N nodes in network namespaces with SSH and Slurm.")

INVENTORY_OPT = typer.Option(
    DEFAULT_INVENTORY,
    "--inventory-out",
    help="Where to write the inventory (also written as <state-dir>/lab.ini).",
)
NO_ACCT_OPT = typer.Option(False, "--no-accounting", help="No slurmdbd/MariaDB (sacct then fails).")
KEEP_OPT = typer.Option(False, "--keep-on-failure", help="Leave a failed lab as it is, for debugging.")
SHARED_OPT = typer.Option(
    [],
    "--shared",
    help="A folder every node sees at the same path, as a cluster's NFS (repeatable); "
    "run directories under it are written by the nodes directly.",
)
STATE_DIR_OPT = typer.Option(DEFAULT_STATE_DIR, "--state-dir", help="Folder for the lab's state, keys, logs.")


def _progress(line: str) -> None:
    err.print(styled("lab:", "dim"), line)


def _config(
    state_dir: Path,
    *,
    nodes: int = 3,
    inventory_out: Path = DEFAULT_INVENTORY,
    accounting: bool = True,
    shared: list[Path] | None = None,
    masks: bool = False,
) -> LabConfig:
    return make_config(
        nodes=nodes,
        state_dir=state_dir.absolute(),
        inventory_out=inventory_out.absolute(),
        accounting=accounting,
        hostname=os.uname().nodename.split(".")[0],
        cpus=max(os.cpu_count() or 1, 2),
        shared=shared,
        masks=masks,
    )


def _show(st: LabStatus) -> None:
    if st.running is False and not st.daemons:
        out.print(f"no lab recorded in {st.state_dir}")
        if st.elsewhere:
            out.print(
                f"a lab runs from state dir {st.elsewhere} (`orch lab status --state-dir {st.elsewhere}`)"
            )
        if st.leftovers:
            out.print(f"leftovers of a dead lab: {' '.join(st.leftovers)} (`orch lab down` clears them)")
        if left := {n: b for n, b in st.opt_left.items() if b}:
            sizes = ", ".join(f"{n} {size_text(b)}" for n, b in left.items())
            out.print(f"node /opt left here: {sizes} (`orch lab down --purge` removes them)", markup=False)
        return
    verdict = styled("healthy", "green") if st.healthy else styled("not healthy", "red")
    out.print(f"lab in {st.state_dir}: ", verdict, f"; accounting {'on' if st.accounting else 'off'}", sep="")
    out.print(f"SLURM_CONF={st.slurm_conf}  inventory: {st.inventory}")
    if st.masks is not None:
        m = st.masks
        hidden = [str(p) for p in m.hidden] + ([f"{m.home} (each node its own)"] if m.home else [])
        out.print("nodes do not see: " + (", ".join(hidden) or "nothing"), markup=False)
        if m.shared:
            out.print("nodes share: " + ", ".join(str(p) for p in m.shared), markup=False)
        for note in m.notes:
            out.print(f"note: {note}", markup=False)
    nodes = Table("node", "namespace", "mgmt", "fabric", "netns", "slurm", "/opt")
    for n in st.nodes:
        nodes.add_row(
            n.name,
            n.netns,
            n.mgmt_address,
            n.fabric_address,
            "yes" if n.netns_present else styled("gone", "red"),
            n.slurm_state or "-",
            "-" if n.opt_bytes is None else size_text(n.opt_bytes),
        )
    out.print(nodes)
    held = sum(n.opt_bytes or 0 for n in st.nodes)
    out.print(
        f"the nodes' /opt hold {size_text(held)} under {st.state_dir} (`orch lab down --purge` removes them)"
    )
    procs = Table("daemon", "pid", "alive")
    for d in st.daemons:
        procs.add_row(d.name, str(d.pid), "yes" if d.alive else styled("dead", "red"))
    out.print(procs)


@lab_app.command("up")
def up_cmd(
    nodes: int = typer.Option(3, "--nodes", "-n", min=1, max=200, help="Number of nodes."),
    state_dir: Path = STATE_DIR_OPT,
    inventory_out: Path = INVENTORY_OPT,
    no_accounting: bool = NO_ACCT_OPT,
    keep_on_failure: bool = KEEP_OPT,
    shared: list[Path] = SHARED_OPT,
) -> None:
    """Bring the lab up (or report the one running) and wait until every node is idle in Slurm.

    Each node sees neither the folder orch runs from (checkout, venv, current folder) nor the
    user's home (it has its own), unless --shared names a folder to share, as a cluster's NFS."""
    cfg = _config(
        state_dir,
        nodes=nodes,
        inventory_out=inventory_out,
        accounting=not no_accounting,
        shared=shared,
        masks=True,
    )
    result = up(cfg, _progress, keep_on_failure=keep_on_failure)
    if result.already_running:
        out.print(
            f"lab already running ({len(result.status.nodes)} nodes) in {cfg.state_dir}; nothing changed"
        )
    else:
        out.print(
            f"lab up: {nodes} nodes in {result.seconds:.1f} s (SSH, munge and Slurm proven on each); "
            f"inventory {cfg.state_inventory}"
            + (f" and {cfg.inventory_out}" if cfg.inventory_out != cfg.state_inventory else "")
        )
        out.print(f"export SLURM_CONF={cfg.slurm_conf}")


@lab_app.command("status")
def status_cmd(
    state_dir: Path = STATE_DIR_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON."),
) -> None:
    """Show the lab's nodes, its daemons (alive or dead) and Slurm's view of each node."""
    st = status(_config(state_dir))
    if as_json:
        out.print_json(st.model_dump_json())
    else:
        _show(st)
    if not st.healthy:
        raise typer.Exit(3)


@lab_app.command("down")
def down_cmd(
    state_dir: Path = STATE_DIR_OPT,
    purge: bool = typer.Option(False, "--purge", help="Also remove each node's /opt (its installed stack)."),
) -> None:
    """Stop every lab process and remove its namespaces, links and runtime files (safe to repeat)."""
    result = down(_config(state_dir), _progress, purge=purge)
    purged = f"; /opt of {len(result.purged)} node(s) removed ({size_text(sum(result.purged.values()))})"
    out.print(
        f"lab down in {result.seconds:.1f} s: {len(result.stopped_pids)} processes stopped, "
        f"{len(result.namespaces)} namespaces and {len(result.links)} links removed",
        purged if purge else "",
        sep="",
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(lab_app, name="lab")
