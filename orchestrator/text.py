"""Small wording helpers shared by every report and message (bottom layer: imports nothing of orch)."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 rank', '2 ranks', '0 nodes'; `many` for irregular plurals ('1 repeat', 'entries')."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def figure(v: float | None) -> str:
    """A figure as reports and the console show it: 4 significant digits, or '-' when there is none."""
    return "-" if v is None else f"{v:.4g}"


def seconds(v: float | None) -> str:
    """A duration as shown in reports and on the console: '1.25 s', or '-' when there is none."""
    return "-" if v is None else f"{v:.2f} s"
