"""What every CLI module shares: the consoles and the global flags."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console


@dataclass
class CliState:
    verbose: bool = False


state = CliState()
# Results go to stdout (so they can be piped); progress and errors go to stderr.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
if not out.is_terminal:
    # Piped or in a cron log: rich would fall back to 80 columns and cut table cells.
    out.width = 160
