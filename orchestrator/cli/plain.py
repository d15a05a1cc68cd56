"""What the CLI needs before it knows its command: the global flags, and plain output.

Nothing here imports rich, typer or a model: `orch check --quick` (a Slurm prolog, run before
every job) prints through say() and starts in a fraction of the time the full CLI takes. say()
escapes what it prints as the consoles of cli/common.py do (control characters as escapes).
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from typing import TextIO

from orchestrator.report.escape import visible


@dataclass
class CliState:
    verbose: bool = False


state = CliState()


def short_hostname() -> str:
    """This machine's host name up to its first dot: the node's Slurm name (the default NODE of
    `orch check --quick` and `orch health --local`)."""
    return socket.gethostname().split(".")[0]


def silence_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone (`orch … | head -1`).

    Python's documented recipe for a closed pipe (see the signal module's note on SIGPIPE): later
    writes, and the flush at exit, then go nowhere instead of raising BrokenPipeError again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def say(line: object, *, stream: TextIO | None = None) -> None:
    """Print one line of data, terminal-safe, to stream (default: stdout); a reader that has gone
    (`| head`) ends output quietly."""
    to = stream if stream is not None else sys.stdout
    try:
        to.write(visible(line, keep="\n\t") + "\n")
        to.flush()
    except BrokenPipeError:
        if to is sys.stdout:
            silence_stdout()
