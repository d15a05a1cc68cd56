"""One list of hostile strings for every output orch writes text into: HTML, Markdown, terminal, JUnit.

Each tries to become something other than text in one of them: a tag or event handler (HTML), a
link, image, code span or table column (Markdown), a javascript: link (both), Rich markup, an emoji
code or an escape sequence (terminal), a character XML 1.0 cannot hold (JUnit), a template
expression. A lone surrogate (it can only arrive as a JSON "\\ud800" escape) is in the list too.
"""

from __future__ import annotations

MARKUP: list[str] = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '"><svg onload=alert(1)>',
    "'><iframe src=javascript:alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[click](javascript:alert(1))",
    "![x](http://evil.example/x.png)",
    "<javascript:alert(1)>",
    "javascript:alert(1)",
    "| injected | column |",
    "**bold** _em_ `code` ~~strike~~ #hash",
    "[link=file:///etc/passwd]click[/link]",
    "[/]",
    "[bold red]red[/bold red]",
    ":thumbs_up:",
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "\x1b[2J\x1b[H",
    "carriage\rreturn",
    "bell\x07",
    "nul\x00byte",
    "c1\x9b31m",
    "rtl\u202eexe.log",
    "non-char\uffff",
    "lone\ud800surrogate",
    "]]><!-- &amp; &lt;",
    "{{ 7*7 }}",
    "line\nbreak",
]
assert len(set(MARKUP)) == len(MARKUP)


def as_json_text(value: str) -> str:
    """What the string reads as after a trip through a JSON file (a lone surrogate becomes U+FFFD)."""
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
