"""CLI commands: cron (`orch cron install/list/remove`): nightly runs scheduled by Slurm."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import InventoryOpt, OutDirOpt, out
from orchestrator.inventory import DEFAULT_INVENTORY, load_inventory
from orchestrator.plan import expand_serving_steps, expand_steps, load_plan
from orchestrator.remote.local import LocalRunner
from orchestrator.runs.health import SAMPLE_TIMEOUT_S
from orchestrator.runs.nightly import CRON_KINDS, CronEntry, CronManager, CronMode, time_limit_min
from orchestrator.stacks import node_python
from orchestrator.store.db import default_store_path
from orchestrator.store.location import store_ref

_HELP = (
    "Nightly runs through Slurm: scrontab, or a self-resubmitting `sbatch --begin` job where the "
    "scrontab binary is missing (Debian's Slurm 22.05)."
)
cron_app = typer.Typer(name="cron", help=_HELP, no_args_is_help=True)
ModeOpt = Annotated[
    str | None, typer.Option("--mode", help="scrontab or sbatch-begin (default: scrontab when installed).")
]


def _manager(inventory: Path, mode: str | None) -> CronManager:
    conf = load_inventory(inventory).vars.orch_slurm_conf
    m: CronMode | None = next((x for x in ("scrontab", "sbatch-begin") if x == mode), None)
    if mode and m is None:
        raise typer.BadParameter("--mode must be scrontab or sbatch-begin")
    return CronManager(LocalRunner(), Path(conf) if conf else None, m)


@cron_app.command("install")
def install_cmd(
    at: Annotated[str, typer.Option("--at", help="HH:MM every day (the controller's local time).")],
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    plan: Annotated[str, typer.Option("--plan", "-p", help="Plan to run.")] = "nightly",
    name: Annotated[str | None, typer.Option("--name", help="Entry name (default: the plan).")] = None,
    out_dir: OutDirOpt = Path("runs"),
    mode: ModeOpt = None,
    job_arg: Annotated[
        list[str] | None,
        typer.Option("--job-arg", help="sbatch option of the entry's own job, e.g. --partition=service."),
    ] = None,
    orch_path: Annotated[
        str | None,
        typer.Option(
            "--orch",
            help="The orch executable as the node that runs the entry's job sees it (default: the "
            "stack's, <python prefix>/bin/orch, on a cluster; this one on the local inventory).",
        ),
    ] = None,
    kind: Annotated[
        str,
        typer.Option(
            "--kind",
            help="scale-test (the plan) or health (`orch health` on every node; add -- --drain to drain "
            "fatal nodes under orch_max_unavailable).",
        ),
    ] = "scale-test",
    extra: Annotated[
        list[str] | None, typer.Argument(help="More flags of the command (scale-test or health), after --.")
    ] = None,
) -> int:
    """Install a daily Slurm entry that runs the plan and records it in the results store.

    The entry's job runs on a node: there it runs the orch the node has (the stack's, installed
    by `orch provision`), never this machine's checkout or venv, in the --out folder, which (with
    the inventory) must be on a filesystem that node shares."""
    cluster = load_inventory(inventory)
    local = all(n.is_local for n in cluster.nodes)
    if orch_path is not None:
        orch = orch_path
    elif local:
        orch = str(Path(shutil.which("orch") or Path(sys.executable).with_name("orch")).resolve())
    else:
        orch = str(Path(node_python(cluster)).with_name("orch"))
    cron_kind = next((k for k in CRON_KINDS if k == kind), None)
    if cron_kind is None:
        raise typer.BadParameter(f"--kind must be one of {', '.join(CRON_KINDS)}")
    if cron_kind == "health":
        # one sample per node, 16 at a time, each bounded by its timeout
        limit = time_limit_min(None, int(SAMPLE_TIMEOUT_S), -(-len(cluster.nodes) // 16))
    else:
        resolved = load_plan(plan)
        from orchestrator.diagnostics.plan_steps import with_diag_steps

        # The same expansion as scale-test: a plan it would refuse is refused here; serving and
        # diagnostic steps count.
        ladder = with_diag_steps(resolved, cluster, expand_steps(resolved, cluster))
        n_steps = len(ladder) + len(expand_serving_steps(resolved, cluster))
        limit = time_limit_min(resolved.run_timeout_s, resolved.step_timeout_s, n_steps)
    entry = CronEntry(
        name=name or ("health" if cron_kind == "health" else plan),
        kind=cron_kind,
        at=at,
        inventory=inventory.resolve(),
        plan=plan,
        out_dir=out_dir.resolve(),
        store=store_ref(default_store_path(out_dir.resolve())),
        orch=orch,
        workdir=Path.cwd() if local else out_dir.resolve(),
        slurm_conf=None,
        extra_args=list(extra or []),
        time_limit_min=limit,
        job_args=list(job_arg or []),
        # The job gets only an allow-list of this environment (sbatch --export): on this machine
        # it runs the same orch as this command only if it gets the same PYTHONPATH.
        pythonpath=(os.environ.get("PYTHONPATH") or None) if local and orch_path is None else None,
    )
    mgr = _manager(inventory, mode)
    if mgr.env.get("SLURM_CONF"):
        entry.slurm_conf = Path(mgr.env["SLURM_CONF"])
    out.print(
        mgr.install(entry) + f" ({mgr.mode}, time limit {limit} min); log {entry.log_path()}", markup=False
    )
    return 0


@cron_app.command("list")
def list_cmd(
    inventory: InventoryOpt = DEFAULT_INVENTORY, out_dir: OutDirOpt = Path("runs"), mode: ModeOpt = None
) -> int:
    """orch's entries and their Slurm state."""
    mgr = _manager(inventory, mode)
    entries = mgr.list(out_dir.resolve())
    if not entries:
        out.print(f"no orch cron entries ({mgr.mode})", markup=False)
    for e, state in entries:
        how = "scrontab" if mgr.mode == "scrontab" else "sbatch --begin (resubmits itself)"
        limit = f"{e.time_limit_min} min" if e.time_limit_min else "no limit"
        what = "health" if e.kind == "health" else e.plan
        out.print(f"{e.name}\t{e.at}\t{what}\t{e.inventory}\t{how}\t{limit}\t{state}", markup=False)
    return 0


@cron_app.command("remove")
def remove_cmd(
    name: Annotated[str, typer.Argument(help="Entry name.")],
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    out_dir: OutDirOpt = Path("runs"),
    mode: ModeOpt = None,
) -> int:
    """Remove an entry (and cancel its waiting job)."""
    _manager(inventory, mode).remove(name, out_dir.resolve())
    out.print(f"removed {name}", markup=False)
    return 0


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(cron_app)
