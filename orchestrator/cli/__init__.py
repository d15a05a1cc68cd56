"""The `orch` command line: parse arguments, call one service function, map the outcome to an exit code.

Each command group lives in its own module and registers itself on the app; library code never
prints to the user or exits.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback
from importlib.util import find_spec
from typing import cast

import click
import typer
from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.cli.common import err, silence_stdout, state
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_USAGE, OrchError

# typer >= 0.24 bundles its own copy of click and raises that copy's exceptions; older typer
# raises click's. Both are caught.
_typer_click = (
    importlib.import_module("typer._click.exceptions") if find_spec("typer._click") else click.exceptions
)
_typer_utils = importlib.import_module("typer._click.utils") if find_spec("typer._click") else click.utils
# On a closed stdout (EPIPE) click swaps sys.stdout for this wrapper and exits 1; rich (typer's
# help) points stdout at /dev/null and exits 1. Either way the reader had gone: see _reader_gone.
_PACIFIED = cast(type, _typer_utils.PacifyFlushWrapper)
_EXIT = (click.exceptions.Exit, typer.Exit)
_USAGE = (click.ClickException, _typer_click.ClickException)
_ABORT = (click.exceptions.Abort, typer.Abort, KeyboardInterrupt)

app = typer.Typer(
    name="orch",
    help="GPU lab acceptance: pinned stacks, collective benchmarks on a 1->N ladder, faults, verdicts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"orch {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Show tracebacks and debug detail."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    state.verbose = verbose


def _register() -> None:
    from orchestrator.cli import (
        cert,
        compare,
        cron,
        fault,
        history,
        inventory,
        isolate,
        lab,
        migrate,
        parse,
        plan,
        provision,
        report,
        run,
        runs,
        stack,
    )

    for module in (
        cert,
        fault,
        inventory,
        isolate,
        lab,
        migrate,
        parse,
        plan,
        run,
        runs,
        report,
        compare,
        cron,
        history,
        provision,
        stack,
    ):
        module.register(app)


_register()


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (scancel of a cron job, a supervisor stopping orch) takes the Ctrl-C path:
    # jobs are cancelled, faults reverted, the journal says interrupted.
    raise KeyboardInterrupt


def _is_devnull() -> bool:
    try:
        st, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino, st.st_rdev) == (null.st_dev, null.st_ino, null.st_rdev)


def _reader_gone(stdout_was_null: bool) -> bool:
    return isinstance(sys.stdout, _PACIFIED) or (not stdout_was_null and _is_devnull())


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; never returns."""
    signal.signal(signal.SIGTERM, _terminate)
    stdout_was_null = _is_devnull()
    try:
        rv = app(args=argv, standalone_mode=False)
        sys.stdout.flush()
    except (BrokenPipeError, SystemExit) as e:
        # The reader of stdout has gone (`orch … | head -1`) while click or rich wrote (help,
        # usage) or at the final flush; the results console handles it itself and keeps the
        # command's exit code. Stop quietly, as `head` intended; any other exit goes on as it was.
        if isinstance(e, SystemExit) and not _reader_gone(stdout_was_null):
            raise
        silence_stdout()
        sys.exit(0)
    except _EXIT as e:
        sys.exit(e.exit_code)
    except _USAGE as e:
        e.show()
        sys.exit(e.exit_code)
    except _ABORT:
        err.print("interrupted", style="yellow")
        sys.exit(EXIT_INTERRUPTED)
    except ValidationError as e:
        if state.verbose:
            err.print(traceback.format_exc(), markup=False)
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or e.title
        err.print(f"error: {where}: {first['msg']}", markup=False, style="red")
        sys.exit(EXIT_USAGE)
    except OrchError as e:
        if state.verbose:
            err.print(traceback.format_exc(), markup=False)
        line = f"error: {e.message}"
        if e.hint:
            line += f" — {e.hint}"
        err.print(line, markup=False, style="red")
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
