"""Stragglers from a pair matrix by the robust rule, and the heatmap that shows them."""

from __future__ import annotations

import itertools
import re
from html.parser import HTMLParser

import pytest
from hostile_text import MARKUP
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.metrics.noise import mad_sigma
from orchestrator.metrics.stragglers import pair_figures, stragglers
from orchestrator.report.heatmap import heatmap

NODES = [f"node{i}" for i in range(1, 9)]


def _matrix(slow: dict[str, float], base: float = 20.0, jitter: float = 0.3) -> dict[tuple[str, str], float]:
    """Pair latency: a base with a small deterministic spread, times the slowness of either end."""
    out = {}
    for i, (a, b) in enumerate(itertools.combinations(NODES, 2)):
        out[(a, b)] = (base + jitter * (i % 5)) * max(slow.get(a, 1.0), slow.get(b, 1.0))
    return out


def test_a_slow_node_is_named_with_the_numbers_that_convicted_it() -> None:
    rep = stragglers(_matrix({"node6": 3.0}))
    assert [s.node for s in rep.stragglers] == ["node6"]
    s = rep.stragglers[0]
    assert s.score > rep.bound and s.excess is not None and s.excess > 2.5
    assert set(s.pairs) == set(NODES) - {"node6"}
    # the bound is the median of the scores plus k x 1.4826 MAD (or the floor), from these scores
    sigma = mad_sigma(rep.scores.values()) or 0.0
    assert rep.bound == pytest.approx(rep.centre + max(3.0 * sigma, 0.05 * rep.centre))


def test_a_uniform_cluster_and_one_bad_link_name_no_node() -> None:
    assert stragglers(_matrix({})).stragglers == []
    m = _matrix({})
    m[("node2", "node5")] = 500.0  # one wild pair: a link, not a slow node
    assert stragglers(m).stragglers == []


def test_two_directions_are_one_pair_and_bad_input_is_refused() -> None:
    assert pair_figures({("b", "a"): 3.0, ("a", "b"): 5.0}) == {("a", "b"): 4.0}
    with pytest.raises(ValueError, match="itself"):
        stragglers({("a", "a"): 1.0})
    with pytest.raises(ValueError, match="too few"):
        stragglers({("a", "b"): 1.0, ("b", "c"): 1.0})


@settings(max_examples=60, deadline=None)
@given(
    slow=st.sampled_from(NODES),
    factor=st.floats(min_value=2.0, max_value=50.0),
    base=st.floats(min_value=1.0, max_value=1e4),
)
def test_the_rule_does_not_depend_on_the_scale(slow: str, factor: float, base: float) -> None:
    rep = stragglers(_matrix({slow: factor}, base=base, jitter=base * 0.01))
    assert [s.node for s in rep.stragglers] == [slow]


class _Svg(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.cells = 0
        self.titles: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.cells += tag == "rect" and dict(attrs).get("class") == "cell"
        self._in_title = tag == "title"

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.titles.append(data)
            self._in_title = False


def test_the_heatmap_has_a_cell_per_pair_and_flags_the_straggler() -> None:
    m = _matrix({"node6": 3.0})
    svg = heatmap(NODES, m, title="sendrecv latency", unit="us", flagged={"node6"})
    p = _Svg()
    p.feed(svg)
    assert p.cells == len(NODES) * (len(NODES) - 1)
    assert 'data-kind="heatmap"' in svg and 'fill="#b2182b" font-weight="bold">node6<' in svg
    assert any(t.startswith("node6 - node1: ") for t in p.titles)


def test_heatmap_labels_are_text_whatever_the_names() -> None:
    names = MARKUP[:8]
    values = {(a, b): float(i) for i, (a, b) in enumerate(itertools.combinations(names, 2))}
    svg = heatmap(names, values, title=MARKUP[0], unit=MARKUP[1], flagged={names[0]})
    p = _Svg()
    p.feed(svg)
    assert set(p.tags) <= {"svg", "text", "rect", "title"}
    assert "<script" not in svg and "\x1b" not in svg


def test_the_report_section_shows_the_heatmap_and_the_evidence() -> None:
    from orchestrator.report.sections import sections_html
    from orchestrator.report.stragglers import straggler_section

    m = _matrix({"node3": 4.0})
    html = sections_html([straggler_section(stragglers(m), NODES, m)], ident="s")
    assert 'data-kind="heatmap"' in html and "<li>node3: median" in html
    calm = sections_html([straggler_section(stragglers(_matrix({})), NODES, _matrix({}))], ident="s")
    assert "<li>no straggler</li>" in calm and "flagged" not in calm


def test_a_hostile_node_name_is_text_in_both_formats() -> None:
    """The straggler section of names that are markup, Markdown or control characters: HTML holds
    only the section's own tags, Markdown's pair table keeps its columns, the slow node is named
    escaped in both."""
    from orchestrator.report.escape import html_text, md
    from orchestrator.report.sections import sections_html, sections_markdown
    from orchestrator.report.stragglers import straggler_section

    names = MARKUP[:8]
    slow = names[0]  # <script>
    values = {(a, b): 20.0 * (4.0 if slow in (a, b) else 1.0) for a, b in itertools.combinations(names, 2)}
    rep = stragglers(values)
    assert [s.node for s in rep.stragglers] == [slow]
    section = straggler_section(rep, names, values)
    html = sections_html([section], ident="stragglers-1")
    p = _Svg()
    p.feed(html)
    assert p.tags.count("svg") == 1 and "script" not in p.tags and "img" not in p.tags
    assert set(p.tags) <= {"section", "h2", "ul", "li", "svg", "text", "rect", "title"}
    assert f"<li>{html_text(slow)}: median" in html
    text = "\n".join(sections_markdown([section]))
    assert "<script" not in text and "<img" not in text and "\x1b" not in text
    assert f"- {md(slow)}: median" in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 8 * 7 // 2  # the head, then one row a pair
    assert all(len(re.split(r"(?<!\\)\|", r)) == 4 + 2 for r in rows)  # 4 cells: no name added one
    assert sum(r.endswith(f"| {md(slow)} |") for r in rows) == 7  # each of its pairs flags it
