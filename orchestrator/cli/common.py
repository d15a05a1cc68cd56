"""What every CLI module shares: the consoles and the global flags.

Everything orch prints is data (plan names, step ids, hosts, reasons, log lines, error messages
that quote a file): both consoles parse no Rich markup and no emoji codes, and every string they
print, table cells and titles included, goes through text() first, so control characters (ESC
sequences, bidi overrides) are shown as escapes and `[link=…]` or `[/]` stay literal. Colour is
given with style= or styled(), never with markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console, HighlighterType, JustifyMethod, OverflowMethod
from rich.style import Style
from rich.text import Text

from orchestrator.report.escape import visible


@dataclass
class CliState:
    verbose: bool = False


state = CliState()


def safe_text(value: object) -> str:
    """value as terminal-safe text: control characters shown as escapes (newlines and tabs kept)."""
    return visible(value, keep="\n\t")


def styled(value: object, style: str) -> Text:
    """value, terminal-safe, in a style (e.g. a verdict in its colour)."""
    return Text(safe_text(value), style=style)


class DataConsole(Console):
    """A rich Console for data: no markup, no emoji, no highlighting; control characters escaped."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **kw)

    def render_str(
        self,
        text: str,
        *,
        style: str | Style = "",
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        emoji: bool | None = None,
        markup: bool | None = None,
        highlight: bool | None = None,
        highlighter: HighlighterType | None = None,
    ) -> Text:
        """Every str rich prints (arguments, table cells, titles) passes here: escaped, no markup."""
        return super().render_str(
            safe_text(text), style=style, justify=justify, overflow=overflow, emoji=False,
            markup=False, highlight=False, highlighter=highlighter,
        )  # fmt: skip


# Results go to stdout (so they can be piped); progress and errors go to stderr.
out = DataConsole(soft_wrap=True)
err = DataConsole(stderr=True, soft_wrap=True)
if not out.is_terminal:
    # Piped or in a cron log: rich would fall back to 80 columns and cut table cells.
    out.width = 160
