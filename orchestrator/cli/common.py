"""What every CLI module shares: the consoles and the global flags.

Everything orch prints is data (plan names, step ids, hosts, reasons, log lines, error messages
that quote a file): both consoles parse no Rich markup and no emoji codes, and every string they
print, table cells and titles included, goes through safe_text() first, so control characters
(ESC sequences, bidi overrides) are shown as escapes and `[link=…]` or `[/]` stay literal. Colour
is given with style= or styled(), never with markup.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.console import Console, HighlighterType, JustifyMethod, OverflowMethod
from rich.style import Style
from rich.table import Table
from rich.text import Text

from orchestrator.cli.plain import CliState as CliState
from orchestrator.cli.plain import silence_stdout as silence_stdout
from orchestrator.cli.plain import state as state
from orchestrator.report.escape import visible

InventoryOpt = Annotated[
    Path,
    typer.Option("--inventory", "-i", help="Ansible inventory.", show_default="inventories/local.ini"),
]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Root of the run directories.")]
OutDirOpt = Annotated[Path, typer.Option("--out", help="Root of the run directories.")]
"""--out for commands whose default is spelled in their signature (`= Path("runs")`)."""


def name_list(text: str | None) -> list[str] | None:
    """A comma list of names as given to --nodes or --known-good ('a,b,' -> ['a', 'b']); None
    when the option was not given."""
    return [n for n in text.split(",") if n] if text else None


VERDICT_STYLE = {
    "unchanged": "green",
    "needs config change": "yellow",
    "needs porting": "red",
    "unavailable": "red",
}
"""The colour of each compatibility verdict (fingerprint, migrate plan)."""


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
out = DataConsole(file=_UntilClosed(), soft_wrap=True)
err = DataConsole(stderr=True, soft_wrap=True)
if not out.is_terminal:
    # Piped or in a cron log: rich would fall back to 80 columns and cut table cells.
    out.width = 160


@dataclass(frozen=True)
class Col:
    """A column of a table that must read whole on a narrow terminal (see fitted_table)."""

    header: str
    whole: bool = False  # ids, figures: as wide as the longest value, never cut ('…') nor folded
    optional: bool = False  # left out, and named in the caption, when the terminal is too narrow


_NARROWEST = 6  # a foldable column is not squeezed below this
_COMFORT = 12  # optional columns are left out before a foldable one gets narrower than this
_FRAME = 3  # per column: a border and one space of padding on each side (rich's default box)


Cell = str | Text  # a table cell: plain text (data) or styled() text; never markup


def _cell_len(cell: Cell) -> int:
    text = cell.plain if isinstance(cell, Text) else safe_text(cell)
    return max(Text(line).cell_len for line in text.splitlines() or [""])


def _natural(col: Col, cells: Iterable[Cell]) -> int:
    return max([len(col.header), *(_cell_len(c) for c in cells)])


def _col_width(col: Col, cells: Iterable[Cell], narrowest: int = _NARROWEST) -> int:
    """The fewest characters the column may have: whole ones their longest value."""
    cells = list(cells)
    if col.whole:
        return max([min(len(col.header), _NARROWEST), *(_cell_len(c) for c in cells)])
    return min(_natural(col, cells), narrowest)


def table_width(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], narrowest: int = _NARROWEST) -> int:
    """The fewest terminal columns a table of these columns needs with nothing cut (box + padding),
    foldable columns at `narrowest` characters at most."""
    return 1 + sum(_col_width(c, [r[i] for r in rows], narrowest) + _FRAME for i, c in enumerate(cols))


def _widths(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int) -> list[int]:
    """Whole columns get their longest value; the others share what is left, none below its
    minimum, the narrow ones first (so a short column is never squeezed for a long one)."""
    cells = [[r[i] for r in rows] for i in range(len(cols))]
    out = [_col_width(c, cells[i]) for i, c in enumerate(cols)]
    flex = sorted((i for i, c in enumerate(cols) if not c.whole), key=lambda i: _natural(cols[i], cells[i]))
    left = width - 1 - _FRAME * len(cols) - sum(w for i, w in enumerate(out) if cols[i].whole)
    for k, i in enumerate(flex):
        share = max(left // (len(flex) - k), out[i])
        out[i] = min(_natural(cols[i], cells[i]), share)
        left -= out[i]
    return out


def fitted_table(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int) -> Table:
    """A rich table that fits `width` without cutting an id or a figure.

    Whole columns are as wide as their longest value (they neither fold nor end in '…'); the
    other columns share the rest and fold their text onto more lines; headers fold too. Optional
    columns are left out, last first, while the table does not fit, and the caption names them.
    Raises nothing.
    """
    keep = list(range(len(cols)))
    dropped: list[str] = []

    def pick() -> tuple[list[Col], list[list[Cell]]]:
        return [cols[i] for i in keep], [[r[i] for i in keep] for r in rows]

    for i in reversed(range(len(cols))):
        if table_width(*pick(), narrowest=_COMFORT) <= width:
            break
        if cols[i].optional:
            keep.remove(i)
            dropped.insert(0, cols[i].header)
    caption = f"not shown at {width} columns: {', '.join(dropped)}" if dropped else None
    table = Table(title=title, caption=caption)
    kept_cols, kept_rows = pick()
    for c, w in zip(kept_cols, _widths(kept_cols, kept_rows, width), strict=True):
        table.add_column(c.header, width=w, overflow="fold")
    for r in kept_rows:
        table.add_row(*r)
    return table


def write_out(text: str) -> None:
    """Write raw text (JSON, a schema, a Markdown report) to stdout through the results console's
    stream, so that a closed pipe ends output quietly like every other result."""
    out.file.write(text)
