"""The same hostile strings (hostile_text.MARKUP) through every output: HTML, Markdown, terminal, JUnit.

A run folder is made whose journal (plan name, user, host, command), step reason and
warning, and one log file name carry the string. Each output must show it as text and nothing else:
- HTML and Markdown (rendered by markdown-it, CommonMark + tables + strike-through): no tag or
  attribute that a report of a harmless string lacks, every link a relative path (no scheme, no
  host), and the string's text present;
- terminal (`orch runs show` and the `orch runs list` table, in process): exit 0 (a planted `[/]`
  used to raise MarkupError), no ESC or other control character but newlines, and the string
  present in its visible form;
- JUnit: well-formed, valid against the JUnit schema, the string present in its XML-safe form.
"""

from __future__ import annotations

import contextlib
import json
import unicodedata
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hostile_text import MARKUP, as_json_text
from markdown_it import MarkdownIt
from test_injection import orch
from test_store_build import make_run

from orchestrator.cli.common import safe_text
from orchestrator.report.escape import visible, xml_text
from orchestrator.report.formats import render
from orchestrator.store.load import load_run

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "junit" / "junit-10.xsd"
IDS = [ascii(v)[:40] for v in MARKUP]


def hostile_run(root: Path, value: str) -> Path:
    """A finished run whose free-text fields and one log file name are `value`."""
    run = make_run(root, "r1")
    events = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    # The run id is not free text: load_run refuses one outside the name rule (test_injection_names).
    events[0].update(plan=value, user=value, host=value, command=value)
    (run / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    result = json.loads((run / "result.json").read_text())
    step = result["steps"][0]
    step.update(verdict="infra", reasons=[f"reason {value}"], warnings=[value])
    (run / "result.json").write_text(json.dumps(result))
    name = value.replace("/", "_").replace("\x00", "_")
    with contextlib.suppress(UnicodeEncodeError, OSError):  # a name no file can have (lone surrogate)
        (run / "steps" / "n1xg1" / f"{name}.log").write_text("log\n")
    return run


class _Doc(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[tuple[str, tuple[str, ...]]] = set()
        self.hrefs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add((tag, tuple(sorted(a for a, _ in attrs))))
        self.hrefs += [v or "" for a, v in attrs if a in ("href", "src", "xlink:href")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _doc(html: str) -> _Doc:
    d = _Doc()
    d.feed(html)
    d.close()
    return d


def _markdown_html(md: str) -> str:
    """HTML as a lax renderer makes it: raw HTML passes, and every link scheme is kept (markdown-it
    drops javascript: itself; renderers of tickets and chat tools may not)."""
    parser = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    parser.validateLink = lambda url: True  # type: ignore[method-assign]
    return parser.render(md)


def _only_text(doc: _Doc, baseline: _Doc) -> None:
    assert doc.tags <= baseline.tags, f"new tags or attributes: {doc.tags - baseline.tags}"
    for link in doc.hrefs:
        if link.startswith("data:,"):
            continue  # the page's empty favicon
        parts = urlsplit(link)
        assert parts.scheme == "" and parts.netloc == "", f"link {link!r} is not a relative path"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, _Doc]:
    run = hostile_run(tmp_path_factory.mktemp("clean"), "plain words")
    rec = load_run(run)
    return {"html": _doc(render(rec, "html", run)), "md": _doc(_markdown_html(render(rec, "md", run)))}


@pytest.mark.parametrize("value", MARKUP, ids=IDS)
def test_html_shows_hostile_text_as_text(tmp_path: Path, value: str, baseline: dict[str, _Doc]) -> None:
    run = hostile_run(tmp_path, value)
    doc = _doc(render(load_run(run), "html", run))
    _only_text(doc, baseline["html"])
    assert f"reason {as_json_text(value)}" in "".join(doc.text)


@pytest.mark.parametrize("value", MARKUP, ids=IDS)
def test_markdown_shows_hostile_text_as_text(tmp_path: Path, value: str, baseline: dict[str, _Doc]) -> None:
    run = hostile_run(tmp_path, value)
    md = render(load_run(run), "md", run)
    doc = _doc(_markdown_html(md))
    _only_text(doc, baseline["md"])
    shown = visible(as_json_text(value)).replace("\n", " ")
    assert f"reason {shown}" in "".join(doc.text)


@pytest.mark.parametrize("value", MARKUP, ids=IDS)
def test_terminal_shows_hostile_text_as_text(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = hostile_run(tmp_path, value)
    store = str(tmp_path / "store.db")
    rc, out, err = orch(["runs", "show", str(run), "--store", store], capsys)
    assert rc == 0, err  # a planted `[/]` used to end this in a MarkupError
    assert f"reason {safe_text(as_json_text(value))}" in out
    rc, listed, lerr = orch(["runs", "list", "--scan", str(tmp_path), "--store", store], capsys)
    assert rc == 0, lerr  # a table: the run id, plan, user and host in its cells
    everything = out + err + listed + lerr
    bad = [c for c in everything if c != "\n" and unicodedata.category(c) in ("Cc", "Cs")]
    assert bad == [], f"control characters reached the terminal: {bad!r}"
    assert "\u202e" not in everything


@pytest.mark.parametrize("value", MARKUP, ids=IDS)
def test_junit_stays_valid_xml(tmp_path: Path, value: str) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    run = hostile_run(tmp_path, value)
    text = render(load_run(run), "junit", run)
    root = ET.fromstring(text.encode("utf-8"))
    xmlschema.XMLSchema(str(XSD)).validate(text)
    messages = [e.get("message") or "" for e in root.iter("error")]
    assert any(f"reason {xml_text(as_json_text(value))}" in m for m in messages), messages


def test_the_hostile_run_is_hostile(tmp_path: Path) -> None:
    """The checks can fail: the raw strings are in the run folder, and unescaped they would break out."""
    run = hostile_run(tmp_path, "<script>x</script>")
    assert "<script>x</script>" in (run / "result.json").read_text()
    assert ("script", ()) in _doc("<script>x</script>").tags
    assert _doc(_markdown_html("[a](javascript:alert(1))")).hrefs == ["javascript:alert(1)"]
    assert ("img", ("onerror", "src")) in _doc(_markdown_html("a <img src=x onerror=y>")).tags
