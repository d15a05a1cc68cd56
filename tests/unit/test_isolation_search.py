"""The isolation search against simulated clusters: who is named, and in how many rounds."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.isolation.search import isolate, round_bound
from orchestrator.models.isolation import Group, Isolation, Outcome, Round


@dataclass
class Cluster:
    """A stand-in cluster: what fails where, and a log of what was tested."""

    size: int
    broken: set[str] = field(default_factory=set)  # fail even alone (a GPU)
    bad_nic: set[str] = field(default_factory=set)  # fail with any other node (a throttled NIC)
    bad_links: set[frozenset[str]] = field(default_factory=set)  # fail when both ends take part
    calls: list[Group] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.size + 1)]

    def test(self, group: Group) -> Outcome:
        self.calls.append(group)
        members = set(group)
        bad = (
            bool(members & self.broken)
            or (len(group) > 1 and bool(members & self.bad_nic))
            or any(link <= members for link in self.bad_links)
        )
        return Outcome(passed=not bad, figure=1.0 if bad else 10.0)


def _named(res: Isolation) -> list[tuple[str, list[str]]]:
    return sorted((c.kind, c.nodes) for c in res.culprits)


def _disjoint(rounds: list[Round]) -> bool:
    for r in rounds:
        seen: set[str] = set()
        for t in r.trials:
            if seen & set(t.group):
                return False
            seen |= set(t.group)
    return True


@dataclass(frozen=True)
class Rounds:
    """One row of docs/isolation.md's table of rounds on simulated clusters."""

    one_bad: int  # rounds, one bad node, the worst of every position
    tests: int  # tests, at most, one bad node
    two_bad: tuple[int, int]  # rounds, two bad nodes, min-max over the pairs of positions
    link: tuple[int, int]  # rounds, one bad link, min-max over the pairs of positions
    clean: int  # rounds, all good


# docs/isolation.md's table, row by row: the tests below compute each figure and compare it with
# this table, and test_the_docs_table_is_rounds reads the doc's table back and compares it too.
ROUNDS: dict[int, Rounds] = {
    4: Rounds(4, 9, (4, 5), (4, 7), 3),
    8: Rounds(5, 15, (5, 5), (5, 9), 3),
    16: Rounds(6, 25, (6, 6), (6, 11), 3),
    32: Rounds(7, 43, (7, 7), (7, 13), 3),
    64: Rounds(8, 77, (8, 8), (8, 15), 3),
}
# Every pair of positions for N <= 16; every 4th (124 pairs) and every 17th (119 pairs) of the
# pairs in order for 32 and 64 (the ranges are those of every pair: 6-12 and 7-14, checked once).
PAIR_STRIDE = {4: 1, 8: 1, 16: 1, 32: 4, 64: 17}
DOC = Path(__file__).resolve().parents[2] / "docs" / "isolation.md"


def _tests(res: Isolation) -> int:
    return sum(len(r.trials) for r in res.rounds)


def _pairs(n: int) -> list[tuple[str, str]]:
    return list(itertools.combinations([f"node{i}" for i in range(1, n + 1)], 2))[:: PAIR_STRIDE[n]]


@pytest.mark.parametrize("n", sorted(ROUNDS))
def test_one_bad_node_is_found_in_log_rounds(n: int) -> None:
    worst = most = 0
    for i in range(1, n + 1):
        c = Cluster(n, bad_nic={f"node{i}"})
        res = isolate(c.nodes, c.test)
        assert _named(res) == [("node", [f"node{i}"])]
        assert f"node{i}" not in res.good and res.undecided == []
        assert _disjoint(res.rounds)
        worst, most = max(worst, len(res.rounds)), max(most, _tests(res))
    assert (worst, most) == (ROUNDS[n].one_bad, ROUNDS[n].tests)
    assert worst <= round_bound(n)  # 2 + ceil(log2 n): singles, one halving per round, the repeat


@pytest.mark.parametrize("n", sorted(ROUNDS))
def test_two_bad_nodes_a_bad_link_and_a_clean_set_take_the_rounds_the_docs_state(n: int) -> None:
    two, link = [], []
    for a, b in _pairs(n):
        c = Cluster(n, bad_nic={a, b})
        res = isolate(c.nodes, c.test)
        assert _named(res) == sorted([("node", [a]), ("node", [b])])
        two.append(len(res.rounds))
        c = Cluster(n, bad_links={frozenset({a, b})})
        res = isolate(c.nodes, c.test)
        assert _named(res) == [("link", sorted([a, b]))]
        link.append(len(res.rounds))
    c = Cluster(n)
    clean = isolate(c.nodes, c.test)
    assert clean.culprits == []
    row = ROUNDS[n]
    assert ((min(two), max(two)), (min(link), max(link)), len(clean.rounds)) == (
        row.two_bad,
        row.link,
        row.clean,
    )


def _span(lo_hi: tuple[int, int]) -> str:
    lo, hi = lo_hi
    return str(lo) if lo == hi else f"{lo}\u2013{hi}"  # an en dash, as the doc writes ranges


def test_the_docs_table_is_rounds() -> None:
    """docs/isolation.md's table says what ROUNDS says, row by row (bound column included)."""
    lines = DOC.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| N | rounds, one bad node"))
    assert [c.strip() for c in lines[head].strip("|").split("|")] == [
        "N", "rounds, one bad node (every position)", "bound 2 + ⌈log₂ N⌉", "tests, at most",
        "rounds, two bad nodes", "rounds, one bad link", "rounds, all good",
    ]  # fmt: skip
    rows = []
    for line in lines[head + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    expected = [
        [
            str(n),
            str(r.one_bad),
            str(round_bound(n)),
            str(r.tests),
            _span(r.two_bad),
            _span(r.link),
            str(r.clean),
        ]
        for n, r in sorted(ROUNDS.items())
    ]
    assert rows == expected


def test_the_8_node_labs_cases_take_the_rounds_measured_on_the_lab() -> None:
    """docs/isolation.md: on the 8-node lab node6 (throttled) was named alone in 4 rounds and 14
    tests, and the link node2+node5 in 7 rounds and 15 tests, before the confirmation round; the
    search, fed the same outcomes, takes those plus its confirmation (one round, one test each:
    tests/integration/test_isolate8_lab.py asserts them on the lab)."""
    c = Cluster(8, bad_nic={"node6"})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("node", ["node6"])]
    assert (len(res.rounds), _tests(res)) == (5, 15)
    c = Cluster(8, bad_links={frozenset({"node2", "node5"})})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("link", ["node2", "node5"])]
    assert (len(res.rounds), _tests(res)) == (8, 16)


def test_the_round_bound_is_log2() -> None:
    assert [round_bound(n) for n in (4, 8, 16, 32, 64)] == [4, 5, 6, 7, 8]
    assert [round_bound(n, confirm=False) for n in (4, 8, 16, 32, 64)] == [3, 4, 5, 6, 7]
    # the bar for the 8-node lab: ceil(log2 8) + 2 rounds, the confirmation round included
    assert round_bound(8) <= 3 + 2


def test_a_node_that_fails_alone_is_named_in_the_first_round() -> None:
    c = Cluster(8, broken={"node3"})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("node", ["node3"])]
    assert res.culprits[0].evidence[0].round == 1 and res.culprits[0].evidence[0].kind == "single"
    # round 2 repeats it alone, beside the bisection of the others: it fails again, so node3 is named
    assert [(t.purpose, t.group, t.outcome.passed) for t in res.rounds[1].trials if "node3" in t.group] == [
        ("confirm", ["node3"], False)
    ]
    assert "node3" not in {n for r in res.rounds[2:] for t in r.trials for n in t.group}
    assert res.culprits[0].evidence[-1].purpose == "confirm" and res.unconfirmed == []


@pytest.mark.parametrize(("a", "b"), [("node2", "node5"), ("node1", "node2"), ("node7", "node8")])
def test_a_bad_link_names_the_pair_not_a_node(a: str, b: str) -> None:
    c = Cluster(8, bad_links={frozenset({a, b})})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("link", sorted([a, b]))]
    assert {a, b} <= set(res.good)  # each passed with other partners
    assert _disjoint(res.rounds)
    fails = [t for t in res.culprits[0].evidence if not t.outcome.passed]
    assert fails and all({a, b} <= set(t.group) for t in fails)


def test_two_bad_nodes_are_both_named() -> None:
    for pair in (("node2", "node7"), ("node1", "node2"), ("node3", "node4")):
        c = Cluster(16, bad_nic=set(pair))
        res = isolate(c.nodes, c.test)
        assert _named(res) == sorted(("node", [p]) for p in pair)
        assert len(res.rounds) <= round_bound(16) + 2


def test_all_good_needs_three_rounds_and_names_no_one() -> None:
    c = Cluster(8)
    res = isolate(c.nodes, c.test)
    assert res.culprits == [] and res.good == c.nodes
    assert [r.trials[0].purpose for r in res.rounds] == ["single", "half", "whole"]


def test_known_good_partners_are_used_and_not_searched() -> None:
    c = Cluster(5, bad_nic={"node5"})
    res = isolate(c.nodes, c.test, known_good=["node1", "node2", "node3", "node4"])
    assert _named(res) == [("node", ["node5"])]
    assert all(g != ("node1",) for g in c.calls)  # known-good nodes take no single test
    assert len(res.rounds) <= 3 + 1  # and the confirmation round


def test_a_round_runner_gets_each_rounds_groups_at_once() -> None:
    c = Cluster(16, bad_nic={"node11"})
    seen: list[int] = []

    def run_round(groups: list[Group]) -> list[Outcome]:
        seen.append(len(groups))
        return [c.test(g) for g in groups]

    printed: list[int] = []
    res = isolate(c.nodes, run_round=run_round, on_round=lambda r: printed.append(r.index))
    assert seen[0] == 16 and printed == list(range(1, len(res.rounds) + 1))
    assert _named(res) == [("node", ["node11"])]


def test_a_fault_that_only_shows_in_large_groups_is_found_by_ring_growth() -> None:
    # fails once node6 is in a group of 5 or more (no pair, no half shows it)
    nodes = [f"node{i}" for i in range(1, 9)]

    def test(group: Group) -> Outcome:
        return Outcome(passed=not ("node6" in group and len(group) >= 5))

    res = isolate(nodes, test)
    assert [c.nodes for c in res.culprits] == [["node6"]]
    assert any(t.purpose == "grow" for r in res.rounds for t in r.trials)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="repeat"):
        isolate(["a", "a"], lambda g: Outcome(passed=True))
    with pytest.raises(ValueError, match="test or a round runner"):
        isolate(["a"])


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(min_value=4, max_value=40),
    data=st.data(),
)
def test_one_fault_anywhere_is_named_exactly(n: int, data: st.DataObject) -> None:
    c = Cluster(n)
    nodes = c.nodes
    kind = data.draw(st.sampled_from(["broken", "nic", "link", "none"]))
    if kind == "broken":
        c.broken = {data.draw(st.sampled_from(nodes))}
        want = [("node", sorted(c.broken))]
    elif kind == "nic":
        c.bad_nic = {data.draw(st.sampled_from(nodes))}
        want = [("node", sorted(c.bad_nic))]
    elif kind == "link":
        pair = data.draw(st.lists(st.sampled_from(nodes), min_size=2, max_size=2, unique=True))
        c.bad_links = {frozenset(pair)}
        want = [("link", sorted(pair))]
    else:
        want = []
    res = isolate(nodes, c.test)
    assert _named(res) == want
    assert _disjoint(res.rounds)
    if kind in ("broken", "nic"):
        assert len(res.rounds) <= round_bound(n)


def test_with_two_nodes_and_no_partner_the_pair_is_named_with_the_doubt() -> None:
    c = Cluster(2, bad_nic={"node2"})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("link", ["node1", "node2"])]
    assert "either node may be bad" in res.culprits[0].why


def test_the_evidence_holds_the_failing_tests_and_those_that_cleared_the_partners() -> None:
    c = Cluster(8, bad_nic={"node6"})
    lines: list[str] = []
    res = isolate(c.nodes, c.test, on_round=lambda r: lines.extend(t.line() for t in r.trials))
    (culprit,) = res.culprits
    fails = [t for t in culprit.evidence if not t.outcome.passed]
    assert fails and all("node6" in t.group for t in fails)
    partners = {n for t in fails for n in t.group} - {"node6"}
    cleared = {n for t in culprit.evidence if t.outcome.passed for n in t.group}
    assert partners <= cleared  # every partner it failed with passed with others
    assert "round 1: single node1 pass (10)" in lines
    assert any(line.endswith("FAIL (1)") and "node6" in line for line in lines)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=4, max_value=40), data=st.data())
def test_two_bad_nodes_anywhere_are_both_named(n: int, data: st.DataObject) -> None:
    c = Cluster(n)
    bad = data.draw(st.lists(st.sampled_from(c.nodes), min_size=2, max_size=2, unique=True))
    c.bad_nic = set(bad)
    res = isolate(c.nodes, c.test)
    assert _named(res) == sorted(("node", [b]) for b in bad)
    assert _disjoint(res.rounds)
    # both halves may fail: then pairs across them (a 'mix' round) find the first good partners
    assert len(res.rounds) <= round_bound(n) + 2


@pytest.mark.parametrize("bad", ["node1", "node2", "node3"])
def test_three_nodes_one_throttled_nic_is_named_as_a_node_not_a_link(bad: str) -> None:
    # The lab's case: no partner is known after the singles, and the set has a half of one node.
    c = Cluster(3, bad_nic={bad})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("node", [bad])]
    assert sorted(res.good) == sorted(set(c.nodes) - {bad})
    assert len(res.rounds) <= 5 + 1  # and the confirmation round


def test_three_clean_nodes_clear_the_lone_node_with_a_partner() -> None:
    c = Cluster(3)
    res = isolate(c.nodes, c.test)
    assert res.culprits == [] and res.undecided == []
    assert sorted(res.good) == c.nodes
    assert ("node1", "node2") in c.calls and any("node3" in g and len(g) == 2 for g in c.calls)


@dataclass
class Noisy(Cluster):
    """As Cluster, and healthy nodes whose first test alone gives one low figure (noise, as node1
    and node2 on the loaded 8-node lab: 0.35 against a median single of 0.55), then pass."""

    once: set[str] = field(default_factory=set)

    def test(self, group: Group) -> Outcome:
        if len(group) == 1 and group[0] in self.once:
            self.once.discard(group[0])
            self.calls.append(group)
            return Outcome(passed=False, figure=0.35)
        return super().test(group)


def test_one_low_sample_of_a_healthy_node_is_unconfirmed_not_named() -> None:
    c = Noisy(8, once={"node1"})
    res = isolate(c.nodes, c.test)
    assert res.culprits == [] and res.undecided == []
    (u,) = res.unconfirmed
    assert (u.kind, u.nodes) == ("node", ["node1"])
    # both figures: the failing single of round 1 and its repeat, which passed
    assert (u.first.round, u.first.kind, u.first.outcome.passed, u.first.outcome.figure) == (
        1,
        "single",
        False,
        0.35,
    )
    assert (u.repeat.purpose, u.repeat.group, u.repeat.outcome.passed, u.repeat.outcome.figure) == (
        "confirm", ["node1"], True, 10.0
    )  # fmt: skip
    assert u.repeat.round == 2 and "node1" in u.line() and "0.35" in u.line()
    assert "node1" in res.good  # searched with partners after its repeat, as the others were
    assert len(res.rounds) <= round_bound(8)
    # without the repeat, the one low sample names a healthy node (the lab's false culprit)
    old = Noisy(8, once={"node1"})
    assert _named(isolate(old.nodes, old.test, confirm=False)) == [("node", ["node1"])]


@pytest.mark.parametrize("bad", ["node1", "node4", "node6", "node8"])
@pytest.mark.parametrize("noisy", ["node2", "node5", "node7"])
def test_a_bad_node_is_named_after_its_repeat_and_a_noisy_one_is_not(bad: str, noisy: str) -> None:
    c = Noisy(8, bad_nic={bad}, once={noisy})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("node", [bad])]
    assert [u.nodes for u in res.unconfirmed] == [[noisy]]
    repeat = res.culprits[0].evidence[-1]  # the repeat failed again: it is in the evidence
    assert repeat.purpose == "confirm" and bad in repeat.group and not repeat.outcome.passed
    assert _disjoint(res.rounds)
    assert len(res.rounds) <= round_bound(8) + 1  # the noisy node's repeat adds round 2
    # the noisy node is tested alone again in round 2, then searched with partners and cleared
    assert res.unconfirmed[0].repeat.round == 2 and noisy in res.good


def test_a_noisy_end_of_a_bad_link_is_still_searched_and_the_link_named() -> None:
    c = Noisy(8, bad_links={frozenset({"node2", "node5"})}, once={"node5"})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("link", ["node2", "node5"])]
    assert [u.nodes for u in res.unconfirmed] == [["node5"]]
    # node5's passing repeat (round 2) does not confirm the link: the pair itself is repeated
    last = res.culprits[0].evidence[-1]
    assert (last.purpose, last.group, last.outcome.passed, last.round) == (
        "confirm", ["node2", "node5"], False, len(res.rounds)
    )  # fmt: skip


def test_a_link_is_named_only_when_its_pair_fails_again() -> None:
    c = Cluster(8, bad_links={frozenset({"node2", "node5"})})
    res = isolate(c.nodes, c.test)
    assert _named(res) == [("link", ["node2", "node5"])]
    assert res.culprits[0].evidence[-1].group == ["node2", "node5"]
    assert res.culprits[0].evidence[-1].purpose == "confirm"
    # a link whose pair passes when tested again is unconfirmed
    flaky = {"left": 1}

    def test(group: Group) -> Outcome:
        if set(group) >= {"node2", "node5"} and len(group) == 2 and flaky["left"] == 0:
            return Outcome(passed=True, figure=10.0)
        out = c.test(group)
        if set(group) >= {"node2", "node5"} and len(group) == 2:
            flaky["left"] -= 1
        return out

    c = Cluster(8, bad_links={frozenset({"node2", "node5"})})
    res = isolate(c.nodes, test)
    assert res.culprits == [] and [(u.kind, u.nodes) for u in res.unconfirmed] == [
        ("link", ["node2", "node5"])
    ]
