"""The `orch` command line: parse arguments, call one service function, map the outcome to an exit code.

Each command group lives in its own module, which registers itself on the app. The entry point
imports only the module of the command it runs: COMMANDS names each command's module and its
one-line help, so `orch --help` lists every command without importing any of them, and
`orch check --quick` (a Slurm prolog) loads neither rich, paramiko, Ansible nor the plan models.
Library code never prints to the user or exits.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from orchestrator import __version__
from orchestrator.cli.plain import silence_stdout, state
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_USAGE, OrchError

if TYPE_CHECKING:
    import typer

HELP = "GPU lab acceptance: pinned stacks, collective benchmarks on a 1->N ladder, faults, verdicts."


@dataclass(frozen=True)
class Command:
    """Where a command lives (a module of orchestrator.cli with a register(app)) and its line in
    `orch --help`; the command's own --help comes from its module."""

    module: str
    help: str


# In the order `orch --help` lists them. tests/unit/test_cli_startup.py keeps this table equal to
# what the modules register.
COMMANDS: dict[str, Command] = {
    "recovery-test": Command(
        "fault", "Run the recovery probe, inject FAULT K times, print detect/recover/restore."
    ),
    "isolate": Command(
        "isolate", "Find the bad node or link: singles, pairs with known-good partners, bisection."
    ),
    "stragglers": Command("isolate", "Name the slow nodes from a node-pair matrix."),
    "check": Command(
        "check", "Exit 1 when NODE's certificate is missing, edited, expired or its fingerprint drifted."
    ),
    "health": Command(
        "health", "Sample each node's kernel log, ECC, PCIe AER, NICs, throttling; drain fatal ones."
    ),
    "hooks": Command(
        "hooks", "Install or remove Slurm's prolog, epilog and health check calling orch on the nodes."
    ),
    "rollback": Command(
        "migrate", "Provision A again on every node, then certify it equals the frozen reference."
    ),
    "parse": Command(
        "parse", "Read benchmark logs, serving results, Slurm job states, GPU and RDMA tool outputs."
    ),
    "scale-test": Command(
        "run", "Run the plan's steps (the collective ladder, serving steps) and give a verdict."
    ),
    "report": Command("report", "Write the report of one run (any state: finished, interrupted, running)."),
    "compare": Command(
        "compare", "Compare run B against run A, or a run against a vLLM/SGLang/guidellm result."
    ),
    "decide": Command(
        "decide", "The decision between run A and run B on one page: a buyer's rows, better/same/worse."
    ),
    "history": Command(
        "history", "Key figures over the runs of a plan; exit 1 when the latest run regressed."
    ),
    "provision": Command("provision", "Install a stack on the inventory's hosts."),
    "schema": Command("stack", "Print the JSON Schema of stack or plan files (for editors)."),
    "cert": Command(
        "cert", "Per-node certificates: issue from a run, show, verify, list; resume a drained node."
    ),
    "fleet": Command(
        "fleet", "Each kind of node against its own certified nodes: build the baseline, list outliers."
    ),
    "fault": Command("fault", "Inject, list and sweep faults."),
    "inventory": Command("inventory", "Read the Ansible inventory as orch sees it."),
    "lab": Command("lab", "The virtual lab: N nodes in network namespaces with SSH and Slurm."),
    "migrate": Command("migrate", "Move from one stack to another (docs/migration.md)."),
    "plan": Command("plan", "Test plans: what a scale test runs."),
    "runs": Command("runs", "Recorded runs: list, show, resume."),
    "baseline": Command("runs", "Named reference runs for thresholds and compare."),
    "cron": Command("cron", "Nightly runs through Slurm: scrontab, or a self-resubmitting sbatch job."),
    "fingerprint": Command("provision", "What each node really has, against its stack."),
    "stack": Command("stack", "Pinned software stacks (orchestrator/playbooks/stacks/*.yaml)."),
}

_ROOT_FLAGS = {"-v", "--verbose", "--version", "--help"}


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def command_of(argv: list[str]) -> str | None:
    """The command word of argv (the root's flags take no value), or None when there is none."""
    for arg in argv:
        if arg not in _ROOT_FLAGS:
            return None if arg.startswith("-") else arg
    return None


def build_app(command: str | None = None, *, every: bool = False) -> typer.Typer:
    """The root app with the module of `command` registered (every module when `every`); when
    command is not one of COMMANDS, each command is listed by its line in COMMANDS only (for
    --help, and for click's "No such command")."""
    import typer

    app = typer.Typer(
        name="orch", help=HELP, no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False
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

    if every:
        for module in dict.fromkeys(c.module for c in COMMANDS.values()):
            _module(module).register(app)
    elif command in COMMANDS:
        _module(COMMANDS[command].module).register(app)
    else:
        for name, c in COMMANDS.items():
            app.command(name, help=c.help)(_listed)
    return app


def _listed() -> None:
    """A command as `orch --help` lists it (never run: a known command loads its module)."""


def __getattr__(name: str) -> Any:
    # `from orchestrator.cli import app`: the app with every command (tests, typer.main.get_command).
    if name == "app":
        return build_app(every=True)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


class _Never(Exception):
    """Stands in for an exception class of a library no one imported (so none can be raised)."""


def _clicks(attr: str) -> tuple[type[BaseException], ...]:
    """Exception class `attr` of each copy of click loaded, and typer's own: typer >= 0.24 bundles
    a copy of click and raises that copy's exceptions; older typer raises click's (and imports it)."""
    found: list[type[BaseException]] = []
    for name in ("typer.exceptions", "typer._click.exceptions", "click.exceptions"):
        mod = sys.modules.get(name)
        if mod is not None and (cls := getattr(mod, attr, None)) is not None:
            found.append(cls)
    return tuple(found) or (_Never,)


def _exits() -> tuple[type[BaseException], ...]:
    return _clicks("Exit")


def _usages() -> tuple[type[BaseException], ...]:
    return _clicks("ClickException")


def _aborts() -> tuple[type[BaseException], ...]:
    return (*_clicks("Abort"), KeyboardInterrupt)


def _validation_error() -> type[BaseException]:
    mod = sys.modules.get("pydantic")
    return cast(type[BaseException], mod.ValidationError) if mod is not None else _Never


def _reader_gone(stdout_was_null: bool) -> bool:
    # On a closed stdout (EPIPE) click swaps sys.stdout for its PacifyFlushWrapper and exits 1;
    # rich (typer's help) points stdout at /dev/null and exits 1. Either way the reader had gone.
    pacified = tuple(
        sys.modules[m].PacifyFlushWrapper for m in ("typer._click.utils", "click.utils") if m in sys.modules
    )
    return (bool(pacified) and isinstance(sys.stdout, pacified)) or (not stdout_was_null and _is_devnull())


def _error(line: str) -> None:
    from orchestrator.cli.common import err

    if state.verbose:
        err.print(traceback.format_exc(), markup=False)
    err.print(line, markup=False, style="red")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; never returns."""
    signal.signal(signal.SIGTERM, _terminate)
    stdout_was_null = _is_devnull()
    args = sys.argv[1:] if argv is None else argv
    try:
        rv = build_app(command_of(args))(args=args, standalone_mode=False)
        sys.stdout.flush()
    except (BrokenPipeError, SystemExit) as e:
        # The reader of stdout has gone (`orch … | head -1`) while click or rich wrote (help,
        # usage) or at the final flush; the results console handles it itself and keeps the
        # command's exit code. Stop quietly, as `head` intended; any other exit goes on as it was.
        if isinstance(e, SystemExit) and not _reader_gone(stdout_was_null):
            raise
        silence_stdout()
        sys.exit(0)
    except _exits() as e:
        sys.exit(cast(Any, e).exit_code)
    except _usages() as e:
        cast(Any, e).show()
        sys.exit(cast(Any, e).exit_code)
    except _aborts():
        from orchestrator.cli.common import err

        err.print("interrupted", style="yellow")
        sys.exit(EXIT_INTERRUPTED)
    except _validation_error() as e:
        first = cast(Any, e).errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or cast(Any, e).title
        _error(f"error: {where}: {first['msg']}")
        sys.exit(EXIT_USAGE)
    except OrchError as e:
        line = f"error: {e.message}"
        if e.hint:
            line += f" — {e.hint}"
        _error(line)
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
