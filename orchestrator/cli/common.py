"""What every CLI module shares: the consoles and the global flags."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import IO

from rich.console import Console


@dataclass
class CliState:
    verbose: bool = False


state = CliState()


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


class _UntilClosed:
    """sys.stdout for the results console: once the reader closes the pipe, output stops quietly
    and the command still ends with its own exit code (a run's verdict is not lost to `| head`)."""

    def __init__(self) -> None:
        self.closed_by_reader = False

    def _stream(self) -> IO[str]:
        return sys.stdout

    def write(self, text: str) -> int:
        if self.closed_by_reader:
            return len(text)
        try:
            n = self._stream().write(text)
            self._stream().flush()
            return n
        except BrokenPipeError:
            self.closed_by_reader = True
            silence_stdout()
            return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream().flush()
            except BrokenPipeError:
                self.closed_by_reader = True
                silence_stdout()

    def isatty(self) -> bool:
        return self._stream().isatty()

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream(), "encoding", "utf-8") or "utf-8"


# Results go to stdout (so they can be piped); progress and errors go to stderr.
out = Console(file=_UntilClosed(), highlight=False, soft_wrap=True)  # type: ignore[arg-type]
err = Console(stderr=True, highlight=False, soft_wrap=True)
if not out.is_terminal:
    # Piped or in a cron log: rich would fall back to 80 columns and cut table cells.
    out.width = 160


def write_out(text: str) -> None:
    """Write raw text (JSON, a schema, a Markdown report) to stdout through the results console's
    stream, so that a closed pipe ends output quietly like every other result."""
    out.file.write(text)
