"""Text from a run folder is data in every output: terminal, Markdown, HTML links, XML.

Plan names, step ids, log file names, a rank's warning lines and error messages come from files a
user (or a node) wrote. Each output gets them through one function here:

- visible(): control characters (ESC sequences, NUL, C1 codes, bidi overrides, lone surrogates)
  become visible escapes such as ``\\x1b``, so nothing reaches a terminal as a command;
- md(): visible(), one line, the Markdown characters that act inside a line backslash-escaped,
  then HTML-escaped, so a cell is text (no link, image, tag or table column is made from data);
- href(): a relative path, percent-encoded: never a scheme (``javascript:``), never a host (``//``);
- html_text(): visible(), then HTML-escaped (quotes too): text or an attribute value in a hand-built
  HTML or SVG fragment;
- xml_text(): characters XML 1.0 cannot hold (NUL, U+FFFE/U+FFFF, lone surrogates) become visible
  escapes, so the document stays well-formed.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import quote

# Bidi embedding/override/isolate marks reorder what a reader sees (U+202E spoofs file names).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# What makes emphasis, code, links, images, table columns, strike-through or an e-mail autolink
# inside a line; '_' between letters or digits does nothing (all_reduce stays readable).
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~@]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _escape_char(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def _unsafe(ch: str, keep: str) -> bool:
    if ch in keep:
        return False
    return ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs")


def visible(text: object, keep: str = "") -> str:
    """str(text) with control characters (but those in keep, e.g. "\\n") shown as escapes."""
    s = str(text)
    return "".join(_escape_char(ch) if _unsafe(ch, keep) else ch for ch in s)


def md(text: object) -> str:
    """One Markdown cell or phrase: visible, one line, HTML-escaped, Markdown metacharacters escaped."""
    s = visible(text).replace("\n", " ")
    return _html_escape(_MD_SPECIAL.sub(r"\\\1", s))


def href(path: str) -> str:
    """A link target for a file of the run: a percent-encoded relative (or rooted) path.

    Every ':' is encoded, so no scheme can appear; leading '//' collapses to '/' (no host).
    """
    p = re.sub(r"^/{2,}", "/", path)
    return quote(visible(p), safe="/")


def html_text(text: object) -> str:
    """str(text) as HTML/SVG text or attribute value: control characters shown, markup escaped."""
    return _html_escape(visible(text))


def _html_escape(s: str) -> str:
    import html  # not at the top: html.entities is large, and `orch check --quick` needs none of it

    return html.escape(s, quote=True)


def xml_text(text: object) -> str:
    """str(text) with what XML 1.0 cannot hold shown as escapes (the rest is escaped by the writer)."""
    return _XML_BAD.sub(lambda m: _escape_char(m.group()), str(text))
