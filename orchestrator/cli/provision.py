"""CLI commands: provision, fingerprint, fingerprint diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import VERDICT_STYLE, err, out, styled, write_out
from orchestrator.errors import EXIT_INFRA, EXIT_OK
from orchestrator.models.requests import ProvisionRequest
from orchestrator.provision import fingerprint as fpmod
from orchestrator.provision.runner import HostEvent, PlaybookResult
from orchestrator.provision.service import fingerprint, provision

_STYLE = {"ok": "green", "changed": "yellow", "failed": "red", "unreachable": "red", "skipped": "dim"}


def _progress(ev: HostEvent) -> None:
    if ev.status == "skipped":
        return
    line = f"{ev.host:<12} {ev.task}"
    if ev.message and not ev.ignored:
        line += f" — {ev.message}"
    err.print(styled(f"{ev.status:<11}", _STYLE[ev.status]), line)


def _hosts_table(result: PlaybookResult, title: str) -> Table:
    table = Table(title=title)
    for col in ("host", "result", "ok", "changed", "failed", "unreachable", "message"):
        table.add_column(col)
    for h, o in result.hosts.items():
        table.add_row(
            h,
            styled(o.status, _STYLE[o.status]),
            str(o.ok),
            str(o.changed),
            str(o.failed),
            str(o.unreachable),
            o.message or "",
        )
    return table


def register(app: typer.Typer) -> None:
    """Add `provision` and `fingerprint` to the root app."""

    @app.command("provision")
    def provision_cmd(
        inventory: Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory.")],
        stack: Annotated[str, typer.Option("--stack", help="Stack name (see `orch stack list`).")],
        check: Annotated[bool, typer.Option("--check", help="Dry run (ansible --check).")] = False,
        limit: Annotated[
            str | None, typer.Option("--limit", help="Hosts or groups, comma-separated.")
        ] = None,
        out_dir: Annotated[Path, typer.Option("--out", help="Where run directories go.")] = Path("runs"),
        become: Annotated[bool, typer.Option("--become", help="Escalate privileges on the hosts.")] = False,
        vault_password_file: Annotated[
            Path | None, typer.Option("--vault-password-file", help="Ansible Vault password file.")
        ] = None,
        become_password_file: Annotated[
            Path | None,
            typer.Option(
                "--become-password-file",
                help="File whose first line is the become password (implies --become); never on argv.",
            ),
        ] = None,
        orch_wheel: Annotated[
            Path | None,
            typer.Option(
                "--orch-wheel",
                envvar="ORCH_WHEEL",
                help="orch's wheel for a cpu stack's nodes (default: this source tree, or the wheel "
                "orch was installed from).",
            ),
        ] = None,
    ) -> None:
        """Install a stack on the inventory's hosts. Exit 3 when any host failed or was unreachable."""
        become_password = None
        if become_password_file is not None:
            try:
                become_password = become_password_file.read_text().splitlines()[0]
            except (OSError, IndexError) as e:
                raise typer.BadParameter(f"cannot read a password from {become_password_file}") from e
        rep = provision(
            ProvisionRequest(
                inventory=inventory,
                stack=stack,
                check=check,
                limit=limit,
                out_dir=out_dir,
                become=become or become_password is not None,
                vault_password_file=vault_password_file,
                become_password=become_password,
                orch_wheel=orch_wheel,
            ),
            listener=_progress,
        )
        res = rep.result
        out.print(
            _hosts_table(res, f"provision {rep.stack}{' (check)' if check else ''} — {res.elapsed_s:.1f} s")
        )
        out.print(f"artifacts: {res.artifacts_dir}", markup=False)
        raise typer.Exit(EXIT_INFRA if res.failed_hosts else EXIT_OK)

    fp_app = typer.Typer(help="What each node really has, against its stack.", invoke_without_command=True)

    @fp_app.callback()
    def fingerprint_cmd(
        ctx: typer.Context,
        inventory: Annotated[
            Path | None, typer.Option("--inventory", "-i", help="Ansible inventory.")
        ] = None,
        stack: Annotated[str | None, typer.Option("--stack", help="Stack to compare with.")] = None,
        limit: Annotated[
            str | None, typer.Option("--limit", help="Hosts or groups, comma-separated.")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        save: Annotated[Path | None, typer.Option("--save", help="Also write the fingerprints here.")] = None,
        out_dir: Annotated[Path, typer.Option("--out", help="Where run directories go.")] = Path("runs"),
    ) -> None:
        """Fingerprint the nodes: per-node table, compatibility matrix. Exit 1 when any node drifted."""
        if ctx.invoked_subcommand is not None:
            return
        if inventory is None or stack is None:
            raise typer.BadParameter("--inventory and --stack are required")
        rep = fingerprint(
            inventory, stack, out_dir=out_dir, limit=limit, listener=None if as_json else _progress
        )
        if save is not None:
            fpmod.save(rep.fingerprints, save)
        comp = rep.compatibility
        if as_json:
            doc = {
                "stack": comp.stack,
                "compatible": comp.compatible,
                "matrix": comp.matrix(),
                "nodes": [n.model_dump(mode="json") for n in comp.nodes],
                "fingerprints": rep.fingerprints.model_dump(mode="json"),
                "hosts": {h: o.status for h, o in rep.result.hosts.items()},
            }
            write_out(json.dumps(doc, indent=2) + "\n")
        else:
            for n in comp.nodes:
                t = Table(title=f"{n.node} — {n.verdict}")
                for col in ("field", "expected", "found", "verdict"):
                    t.add_column(col)
                for c in n.checks:
                    t.add_row(
                        c.field, c.expected, c.found or "-", styled(c.verdict, VERDICT_STYLE[c.verdict])
                    )
                out.print(t)
            m = Table(title=f"compatibility with {comp.stack}")
            m.add_column("field")
            for n in comp.nodes:
                m.add_column(n.node)
            for field, row in comp.matrix().items():
                m.add_row(
                    field,
                    *[
                        styled(row[n.node], VERDICT_STYLE[row[n.node]]) if n.node in row else "-"
                        for n in comp.nodes
                    ],
                )
            out.print(m)
            out.print(f"run: {rep.run_dir}", markup=False)
        if rep.result.failed_hosts:
            raise typer.Exit(EXIT_INFRA)
        raise typer.Exit(EXIT_OK if comp.compatible else 1)

    @fp_app.command("diff")
    def diff_cmd(
        a: Annotated[Path, typer.Argument(help="Older saved fingerprint (JSON).")],
        b: Annotated[Path, typer.Argument(help="Newer saved fingerprint (JSON).")],
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Fields that differ between two saved fingerprints. Exit 1 when any differ."""
        changes = fpmod.diff(fpmod.load(a), fpmod.load(b))
        if as_json:
            write_out(json.dumps([c.model_dump(mode="json") for c in changes], indent=2) + "\n")
        else:
            t = Table(title=f"{a} -> {b}: {len(changes)} change(s)")
            for col in ("node", "field", "before", "after"):
                t.add_column(col)
            for c in changes:
                t.add_row(c.node, c.field, c.before or "-", c.after or "-")
            out.print(t)
        raise typer.Exit(1 if changes else 0)

    app.add_typer(fp_app, name="fingerprint")
