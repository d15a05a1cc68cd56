"""Every test module the docs, README, bench and orch's own code name exists, and every test they name
by `module.py::test_name` is defined in it (issue 27, part 3: docs named tests/integration/
test_isolate_lab.py for days after the module was replaced).

A module that no longer exists may still be named where its paragraph says what became of it:
"replaced" or "removed" (a figure measured with it), or "scratch" (a module written on a scratch
branch that was never merged, docs/architecture.md's files-touched table).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = {p.name: p for p in (ROOT / "tests").rglob("test_*.py")}
# tests/unit/test_x.py, tests/integration/test_x.py or a bare test_x.py; optionally ::test_name, which
# a line break (and indentation, or a Markdown backquote) may split from the module
MENTION = re.compile(r"(?:tests/(?:unit|integration)/)?\b(test_\w+\.py)(?:`?::`?\s*(\w+))?")
SAYS_WHAT_BECAME_OF_IT = re.compile(r"replaced|removed|scratch", re.IGNORECASE)


def _texts() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += sorted((ROOT / "bench").glob("*.py")) + sorted((ROOT / "bench").glob("*.json"))
    return files + sorted((ROOT / "orchestrator").rglob("*.py"))


def _paragraph(text: str, at: int) -> str:
    """The paragraph (between blank lines) that holds position ``at``; in a Markdown table, its row."""
    line_start = text.rfind("\n", 0, at) + 1
    if text.startswith("|", line_start):
        line_end = text.find("\n", at)
        return text[line_start : line_end if line_end >= 0 else len(text)]
    start = max(text.rfind("\n\n", 0, at), 0)
    end = text.find("\n\n", at)
    return text[start : end if end >= 0 else len(text)]


def stale_mentions(text: str, modules: dict[str, str]) -> list[str]:
    """Each mention in ``text`` of a test module not in ``modules`` (name -> source) whose paragraph
    does not say what became of it, and each `module.py::test_name` not defined in its module."""
    stale = []
    for m in MENTION.finditer(text):
        name, func = m.group(1), m.group(2)
        if name not in modules:
            if not SAYS_WHAT_BECAME_OF_IT.search(_paragraph(text, m.start())):
                stale.append(f"{name} does not exist")
        elif func and not re.search(rf"^\s*(?:async )?def {func}\(", modules[name], re.MULTILINE):
            stale.append(f"{name} defines no {func}")
    return stale


def test_each_test_module_and_test_named_exists() -> None:
    sources = {name: p.read_text() for name, p in MODULES.items()}
    stale = {str(p.relative_to(ROOT)): s for p in _texts() if (s := stale_mentions(p.read_text(), sources))}
    assert stale == {}


def test_a_gone_module_a_gone_test_and_a_moved_module_are_each_caught() -> None:
    """The check itself: what the issue found is caught; what the docs say of a replaced module is not."""
    sources = {"test_isolate8_lab.py": "def test_throttled_node(lab):\n    pass\n"}
    assert stale_mentions("the module tests/integration/test_isolate_lab.py measured it.", sources) == [
        "test_isolate_lab.py does not exist"
    ]
    assert (
        stale_mentions("(`tests/integration/test_isolate_lab.py`, since replaced by the 8-node one)", sources)
        == []
    )
    # a paragraph further on that says "replaced" does not excuse this one
    assert stale_mentions("test_isolate_lab.py holds it.\n\nA module replaced later.", sources) != []
    # in a table, only the row itself may say so
    table = "| a | test_isolate_lab.py |\n| b | a module on a scratch branch |\n"
    assert stale_mentions(table, sources) == ["test_isolate_lab.py does not exist"]
    assert stale_mentions("`test_isolate8_lab.py::\n  test_throttled_node` holds it", sources) == []
    assert stale_mentions("test_isolate8_lab.py::test_drained_node holds it", sources) == [
        "test_isolate8_lab.py defines no test_drained_node"
    ]
