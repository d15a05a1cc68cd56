"""CLI commands: hooks install, hooks remove (Slurm's prolog, epilog and health check calling orch)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli.common import out
from orchestrator.cli.provision import _hosts_table, _progress
from orchestrator.errors import EXIT_INFRA, EXIT_OK
from orchestrator.provision.hooks import HooksRequest, apply

hooks_app = typer.Typer(
    name="hooks",
    help="Slurm's prolog, epilog and HealthCheckProgram calling orch on the nodes: install, remove.",
    no_args_is_help=True,
)

_Inventory = Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory.")]
_Check = Annotated[
    bool, typer.Option("--check", help="Show the slurm.conf change and the scripts; change nothing.")
]
_Reconfigure = Annotated[
    bool,
    typer.Option("--reconfigure/--no-reconfigure", help="`scontrol reconfigure` after slurm.conf changed."),
]
_Limit = Annotated[str | None, typer.Option("--limit", help="Hosts or groups, comma-separated.")]
_Out = Annotated[Path, typer.Option("--out", help="Where run directories go.")]
_Become = Annotated[bool, typer.Option("--become", help="Escalate privileges on the hosts.")]


def _common(reconfigure: bool, limit: str | None, out_dir: Path, become: bool) -> dict[str, Any]:
    return {"reconfigure": reconfigure, "limit": limit, "out_dir": out_dir, "become": become}


def _apply(req: HooksRequest) -> None:
    rep = apply(req, listener=_progress)
    title = f"hooks {'remove' if req.remove else 'install'}{' (check)' if req.check else ''}"
    for diff in rep.diffs:
        out.print(diff, markup=False, highlight=False, end="" if diff.endswith("\n") else "\n")
    res = rep.result
    out.print(_hosts_table(res, f"{title} — {res.elapsed_s:.1f} s"))
    out.print(f"artifacts: {res.artifacts_dir}", markup=False)
    raise typer.Exit(EXIT_INFRA if res.failed_hosts else EXIT_OK)


@hooks_app.command("install")
def install_cmd(
    inventory: _Inventory,
    check: _Check = False,
    cert_dir: Annotated[
        Path,
        typer.Option(
            "--cert-dir", help="The folder of run folders holding the certificates, as the nodes see it."
        ),
    ] = Path("runs"),
    reconfigure: _Reconfigure = True,
    limit: _Limit = None,
    out_dir: _Out = Path("runs"),
    become: _Become = False,
) -> None:
    """Write the prolog (`orch check --quick`), epilog and HealthCheckProgram (`orch health --local
    --drain`) on each node and orch's block in slurm.conf. Exit 3 when a host failed (a Prolog=,
    Epilog= or HealthCheckProgram= that orch did not write is refused, named)."""
    _apply(
        HooksRequest(
            inventory=inventory,
            check=check,
            cert_dir=cert_dir,
            **_common(reconfigure, limit, out_dir, become),
        )
    )


@hooks_app.command("remove")
def remove_cmd(
    inventory: _Inventory,
    check: _Check = False,
    reconfigure: _Reconfigure = True,
    limit: _Limit = None,
    out_dir: _Out = Path("runs"),
    become: _Become = False,
) -> None:
    """Take orch's block out of slurm.conf (the rest of the file stays as it was) and remove the
    scripts. Exit 3 when a host failed."""
    _apply(
        HooksRequest(
            inventory=inventory, remove=True, check=check, **_common(reconfigure, limit, out_dir, become)
        )
    )


def register(app: typer.Typer) -> None:
    """Add `hooks` to the root app."""
    app.add_typer(hooks_app)
