"""CLI command: check --quick (a prolog-sized check of one node against its certificate).

A Slurm prolog runs it before every job, so it starts fast: it imports typer and the certificate
code only (no rich, no paramiko, no Ansible, no plan models) and prints through cli/plain.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.plain import say, short_hostname
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS, EXIT_USAGE


def check_cmd(
    node: Annotated[str | None, typer.Argument(help="The node (default: this host's short name).")] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Certificate and fingerprint only (seconds).")
    ] = False,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            "-i",
            help="Ansible inventory: read NODE's fingerprint over SSH from here. Without it, the "
            "fingerprint is read on this machine and no inventory is read (a prolog on the node).",
        ),
    ] = None,
    root: Annotated[
        Path, typer.Option("--dir", help="The folder of run folders holding certificates.")
    ] = Path("runs"),
    pubkey: Annotated[
        Path | None,
        typer.Option(
            "--pubkey",
            help="Require a valid signature by the Ed25519 public key in this file "
            "(default: the inventory's orch_cert_pubkey; none: not checked).",
        ),
    ] = None,
) -> int:
    """Exit 1 when NODE's newest certificate is missing, edited, expired or (with a public key)
    not signed by it, or its fingerprint drifted against the stack; 0 otherwise (for a Slurm prolog
    or health-check program)."""
    from orchestrator.certs.quick import quick_check

    if not quick:
        say("only --quick exists today", stream=sys.stderr)
        return EXIT_USAGE
    res = quick_check(node or short_hostname(), inventory, root, pubkey=pubkey)
    for p in res.problems:
        say(f"{res.node}: {p}", stream=sys.stderr)
    if res.ok:
        say(f"{res.node}: ok ({res.certificate})")
    return EXIT_OK if res.ok else EXIT_THRESHOLDS


def register(app: typer.Typer) -> None:
    """Add this module's command to the root app."""
    app.command("check")(check_cmd)
