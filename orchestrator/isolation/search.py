"""Find the bad node or link among nodes that fail together: pure logic, no I/O, no clock.

The caller supplies the test (`test(group) -> Outcome`: run one collective on these nodes and judge
it), or a round runner that tests disjoint groups at once; `isolate` decides what to test next and
returns the rounds, the culprits and the evidence. `orch isolate` (runs/isolate.py) runs each
round as Slurm jobs; bench/isolate.py and the unit tests run it against simulated clusters.
`isolate_partitioned` searches several parts of a cluster (kinds of node) each on its own, in the
same rounds: each part's search is a generator that yields a round's groups and is sent their
outcomes.

The search, round by round (a round is the set of tests whose results the next decision waits for;
its groups are disjoint, so on a real cluster they run at the same time):

1. singles: every candidate alone (a node that fails alone is bad: its GPUs, its own links);
2. bisection: a failing set is split in halves, each tested alone; a half of one node is tested
   with a known-good partner (a pair); while none is known, the other half is tested alone first
   and the lone node waits for the partners it gives. Halves that pass are known-good and become partners;
   halves that fail are split again. One bad node among N is found in 1 + ceil(log2 N) rounds;
   two bad nodes in different halves are searched side by side, in the same rounds;
3. when both halves pass but the whole fails, the fault lies between them: one side is halved per
   round against the other held whole (the half that fails holds the link's end; when it passes,
   the other half is taken without a test), then the other side against the node found; the
   pair at the end is tested (a bad link);
4. ring growth where that cannot tell (the pair passes, or every part passes and the whole
   fails): the largest passing group grows by one suspect per round; the suspect whose addition
   fails is named;
5. when every failing set lacks a known-good partner (a bad node in each half of a small
   cluster), nodes of two failing sets are paired across them ('mix' rounds, each pairing turned
   by one) until a pair passes and gives two partners; nodes cleared this way are taken out of
   the failing sets (what is left holds the fault, or a link to the nodes taken out).

Who is to blame is the fewest faults that explain every outcome: a node that failed in two tests
whose other members are disjoint is bad (one link cannot be in both); a pair that failed while
each of its nodes passed with other partners is a bad link. The search takes outcomes as
repeatable; one noisy low figure is not, so:

6. confirmation: no node or link is named on one failing test. A node that fails alone is tested
   alone again in round 2 (one round, one test per such node), before the others are split: failing
   again, it is bad; passing, it is "unconfirmed" (both tests kept) and searched with the others.
   After the search, each other suspect's failing test (a node's last failing group, one without
   another suspect first; a link's pair) runs once more, in one more round (more only when two
   repeat groups share a node; a round's groups stay disjoint). Failing again, it is a culprit;
   passing, it is unconfirmed and not named. One bad node thus costs one round more than the
   search: 2 + ceil(log2 N) (round_bound); nodes that fail alone add round 2 to the search.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.models.isolation import (
    Culprit,
    Group,
    Isolation,
    Kind,
    Outcome,
    Purpose,
    Round,
    Trial,
    Unconfirmed,
)

RoundRunner = Callable[[Sequence[Group]], Sequence[Outcome]]
# A search runs as a generator: it yields a round's groups and is sent their outcomes, so that the
# searches of several partitions of a cluster run in the same rounds (isolate_partitioned).
_Rounds = Generator[list[Group], Sequence[Outcome], None]


def sequential(test: Callable[[Group], Outcome]) -> RoundRunner:
    """A round runner that tests the groups one after another (the lab's mode)."""
    return lambda groups: [test(g) for g in groups]


CONFIRM_ROUNDS = 1
"""Rounds the confirmation adds when suspects were found (their repeat groups are disjoint)."""


def round_bound(n: int, *, confirm: bool = True) -> int:
    """The most rounds one bad node among n takes: singles, then one halving per round, then its
    repeat test (confirm)."""
    search = 1 + math.ceil(math.log2(n)) if n > 1 else 1
    return search + (CONFIRM_ROUNDS if confirm else 0)


def _repeats(c: Culprit, suspects: set[str]) -> list[tuple[Group, Trial]]:
    """The groups a suspect may be tested again with, best first, each with the failing test it
    repeats: a link's pair; a node's failing tests, those without another suspect first, the
    latest first."""
    failing = [t for t in c.evidence if not t.outcome.passed and set(c.nodes) <= set(t.group)]
    if not failing:  # every verdict rests on a failing test that holds the culprit
        return []
    if c.kind == "link":
        exact = [t for t in failing if sorted(t.group) == sorted(c.nodes)]
        return [(tuple(c.nodes), (exact or failing)[-1])]
    others = suspects - set(c.nodes)
    ranked = sorted(reversed(failing), key=lambda t: bool(others & set(t.group)))
    return [(tuple(t.group), t) for t in ranked]


def _confirm(
    culprits: list[Culprit], run_round: RoundRunner, start: int
) -> tuple[list[Culprit], list[Unconfirmed], list[Round]]:
    """Each suspect's failing test once more (module doc, 6.): (confirmed culprits, with the repeat
    in their evidence; unconfirmed; the rounds it took, numbered from start + 1). A suspect takes
    the best of its failing groups that is disjoint from the round's others; one whose groups all
    overlap them waits for the next round."""
    suspects = {n for c in culprits for n in c.nodes}
    todo = [(i, c, _repeats(c, suspects)) for i, c in enumerate(culprits)]
    confirmed: dict[int, Culprit] = {}
    unconfirmed: list[Unconfirmed] = []
    rounds: list[Round] = []
    while todo:
        batch: list[tuple[int, Culprit, Group, Trial]] = []
        busy: set[str] = set()
        for i, c, options in todo:
            pick = next(((g, t) for g, t in options if busy.isdisjoint(g)), None)
            if pick is not None:
                batch.append((i, c, *pick))
                busy.update(pick[0])
        if not batch:  # no failing test to repeat (not expected): kept as the search named them
            confirmed.update({i: c for i, c, _ in todo})
            break
        taken = {item[0] for item in batch}
        todo = [item for item in todo if item[0] not in taken]
        outcomes = list(run_round([g for _, _, g, _ in batch]))
        if len(outcomes) != len(batch):
            raise ValueError(f"the round runner gave {len(outcomes)} outcomes for {len(batch)} groups")
        index = start + len(rounds) + 1
        trials = [
            Trial(round=index, group=list(g), kind=_kind(g), purpose="confirm", outcome=o)
            for (_, _, g, _), o in zip(batch, outcomes, strict=True)
        ]
        rounds.append(Round(index=index, trials=trials))
        for (i, c, _, first), t in zip(batch, trials, strict=True):
            if t.outcome.passed:
                unconfirmed.append(Unconfirmed(kind=c.kind, nodes=c.nodes, why=c.why, first=first, repeat=t))
            else:
                confirmed[i] = c.model_copy(update={"evidence": [*c.evidence, t]})
    return [confirmed[i] for i in sorted(confirmed)], unconfirmed, rounds


@dataclass
class _Task:
    """A suspect set and what is known of it (see the module doc)."""

    kind: Literal["split", "part", "whole", "cross", "grow", "pair", "confirm", "mix", "recheck"]
    a: Group
    b: Group = ()
    known_fail: bool = False
    sides: tuple[Group, Group] = ((), ())  # cross/pair: the two passing sets the search began from
    added: int = 0
    origin: Group = ()  # split: the failing set before its cleared nodes were taken out


@dataclass
class _Request:
    group: Group
    purpose: Purpose
    task: _Task


@dataclass
class _State:
    good: set[str]
    trials: list[Trial] = field(default_factory=list)
    culprits: list[Culprit] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    unconfirmed: list[Unconfirmed] = field(default_factory=list)


def _kind(group: Group) -> Kind:
    return "single" if len(group) == 1 else "pair" if len(group) == 2 else "set"


def _halves(nodes: Group) -> tuple[Group, Group]:
    mid = (len(nodes) + 1) // 2
    return nodes[:mid], nodes[mid:]


def _cross(a: Group, b: Group, sides: tuple[Group, Group] | None = None) -> _Task:
    """The fault lies between a and b (each passes, together they fail)."""
    kind: Literal["pair", "cross"] = "pair" if len(a) == 1 and len(b) == 1 else "cross"
    return _Task(kind, a, b, sides=sides or (a, b))


class _Search:
    def __init__(self, candidates: Group, known_good: Iterable[str], confirm: bool = True) -> None:
        self.candidates = candidates
        self.confirm = confirm
        self.s = _State(good=set(known_good))
        self.rounds: list[Round] = []
        self._mixed_at = -1  # how many nodes were known good at the last mix round
        self._mix_tries = 0  # mix rounds since then (each pairs the sets another way)

    # --- rounds -----------------------------------------------------------------------------------

    def _run(self, requests: list[_Request]) -> Generator[list[Group], Sequence[Outcome], list[Trial]]:
        if not requests:
            return []
        outcomes = list((yield [r.group for r in requests]))
        if len(outcomes) != len(requests):
            raise ValueError(f"the round runner gave {len(outcomes)} outcomes for {len(requests)} groups")
        index = len(self.rounds) + 1
        trials = [
            Trial(round=index, group=list(r.group), kind=_kind(r.group), purpose=r.purpose, outcome=o)
            for r, o in zip(requests, outcomes, strict=True)
        ]
        rnd = Round(index=index, trials=trials)
        self.rounds.append(rnd)
        self.s.trials += trials
        return trials

    def _clear(self, group: Group) -> None:
        if len(group) >= 2:
            self.s.good.update(group)

    def search(self) -> _Rounds:
        alone = [_Request((n,), "single", _Task("split", (n,))) for n in self.candidates]
        singles = yield from self._run(alone)
        ok = [t.group[0] for t in singles if t.outcome.passed]
        failed = [t for t in singles if not t.outcome.passed]
        if failed and self.confirm:  # each alone again, before the others are split
            again = yield from self._run(
                [_Request(tuple(t.group), "confirm", _Task("recheck", tuple(t.group))) for t in failed]
            )
            for first, t in zip(failed, again, strict=True):
                node = first.group[0]
                if t.outcome.passed:  # the first figure was noise: searched with the others
                    self.s.unconfirmed.append(
                        Unconfirmed(kind="node", nodes=[node], why="fails alone", first=first, repeat=t)
                    )
                    ok.append(node)
                else:
                    self._convict_node(node, "fails alone, and again when tested alone again", [first, t])
            ok = [n for n in self.candidates if n in ok]
        else:
            for t in failed:
                self._convict_node(t.group[0], "fails alone", [t])
        tasks = [_Task("split", tuple(ok))] if len(ok) >= 2 or (ok and self.s.good - set(ok)) else []
        while tasks:
            tasks = yield from self._step(tasks)

    def _anchor(self, busy: set[str]) -> str | None:
        free = sorted(self.s.good - busy - {n for c in self.s.culprits for n in c.nodes})
        return free[0] if free else None

    def _prune(self, tasks: list[_Task]) -> list[_Task]:
        """Take nodes cleared since out of failing sets: what is left holds the fault, or the fault
        is a link between the two parts (origin keeps the whole set for that)."""
        out: list[_Task] = []
        for task in tasks:
            if task.kind == "split" and not task.known_fail and set(task.a) <= self.s.good:
                continue  # a suspect that passed with others since (a mix round) needs no test
            if task.kind == "split" and task.known_fail and self._convict_on_record(task.a):
                task = _Task("split", tuple(n for n in task.a if not self._convicted(n)), known_fail=True)
                if not task.a or set(task.a) <= self.s.good:
                    continue  # the fault of this set is found
            left = tuple(n for n in task.a if n not in self.s.good)
            if task.kind != "split" or not task.known_fail or left == task.a:
                out.append(task)
            elif left:
                out.append(_Task("split", left, known_fail=True, origin=task.origin or task.a))
            elif len(task.a) == 2:
                self._judge_pair(*task.a)
            else:
                out.append(_cross(*_halves(task.a)))
        return out

    def _convicted(self, node: str) -> bool:
        return any(c.kind == "node" and node in c.nodes for c in self.s.culprits)

    def _convict_on_record(self, nodes: Group) -> bool:
        """Convict each of nodes that already failed with two disjoint partners that pass with
        others (mix rounds can show it); True when one was."""
        found = False
        for node in nodes:
            if node in self.s.good or self._convicted(node):
                continue
            partners = [set(t.group) - {node} for t in self._failures(node)]
            cleared = [p for p in partners if p <= self.s.good]
            if any(p.isdisjoint(q) for i, p in enumerate(cleared) for q in cleared[i + 1 :]):
                self._convict_node(node, "fails with partners that pass with others", self._failures(node))
                found = True
        return found

    def _mix(self, stuck: list[_Task], shift: int) -> list[_Request]:
        """Pairs across stuck failing sets (no partner is known good yet), the second set turned by
        shift: a pair that passes gives two partners."""
        sets = [list(t.a) for t in stuck if t.kind == "split"]
        pairs: list[_Request] = []
        probe = _Task("mix", ())
        for i in range(0, len(sets) - 1, 2):
            first, second = sets[i], sets[i + 1]
            turned = second[shift % len(second) :] + second[: shift % len(second)]
            pairs += [_Request((a, b), "mix", probe) for a, b in zip(first, turned, strict=False)]
        return pairs

    def _step(self, tasks: list[_Task]) -> Generator[list[Group], Sequence[Outcome], list[_Task]]:
        tasks = self._prune(tasks)
        requests: list[_Request] = []
        busy = {n for t in tasks for n in (*t.a, *t.b)}
        deferred: list[_Task] = []
        for task in tasks:
            wanted = self._wants(task)
            used: list[str] = []
            ready: list[_Request] = []
            for group, purpose in wanted:
                if len(group) == 1:
                    g = self._anchor(busy | set(used))
                    if g is None:
                        ready = []
                        break
                    used.append(g)
                    group = (*group, g)
                ready.append(_Request(group, purpose, task))
            if wanted and not ready:
                parts = [g for g, _ in wanted if len(g) >= 2]
                if task.kind == "split" and not task.known_fail and parts and len(parts) < len(wanted):
                    # a half of one node has no partner yet: test the other half alone now, and the
                    # lone node once that half gives partners (3 nodes: the pair, then the third)
                    ready = [_Request(g, "half", _Task("part", g)) for g in parts]
                    deferred += [_Task("split", g) for g, _ in wanted if len(g) < 2]
                elif task.kind == "split" and not task.known_fail and len(task.a) >= 2:
                    ready = [_Request(task.a, "whole", _Task("whole", task.a))]  # no partner yet
                else:
                    deferred.append(task)
                    continue
            busy.update(used)
            requests += ready
        if not requests:
            if self._mixed_at != len(self.s.good):  # progress since the last mix: start over
                self._mixed_at, self._mix_tries = len(self.s.good), 0
            longest = max((len(t.a) for t in deferred), default=0)
            if self._mix_tries < longest:
                requests = self._mix(deferred, self._mix_tries)
                self._mix_tries += 1
        if not requests:
            for task in deferred:  # no partner will ever come: say what is left
                self.s.undecided += [n for n in (*task.a, *task.b) if n not in self.s.undecided]
            return []
        trials = yield from self._run(requests)
        nxt = list(deferred)
        by_task: dict[int, list[tuple[_Request, Trial]]] = {}
        for req, trial in zip(requests, trials, strict=True):
            by_task.setdefault(id(req.task), []).append((req, trial))
        for pairs in by_task.values():
            nxt += self._resolve(pairs[0][0].task, pairs)
        if self.s.undecided:
            self.s.undecided = list(dict.fromkeys(self.s.undecided))
        return nxt

    # --- what each task tests, and what its results mean -----------------------------------------

    def _wants(self, task: _Task) -> list[tuple[Group, Purpose]]:
        if task.kind == "split":
            if len(task.a) == 1:
                return [(task.a, "half")]
            h1, h2 = _halves(task.a)
            return [(h1, "half"), (h2, "half")]
        if task.kind == "whole":
            return [(task.a, "whole")]
        if task.kind == "pair":
            return [(task.a + task.b, "link")]
        if task.kind == "confirm":  # the suspect with another partner (busy keeps the first away)
            return [(task.a, "link")]
        if task.kind == "cross":
            side = task.a if len(task.a) > 1 else task.b
            other = task.b if side is task.a else task.a
            h1, h2 = _halves(side)
            return [(h1 + other, "cross")]
        # grow: the passing core and the next suspect
        return [((*task.a, task.b[task.added]), "grow")]

    def _resolve(self, task: _Task, results: list[tuple[_Request, Trial]]) -> list[_Task]:
        for req, trial in results:
            if trial.outcome.passed:
                self._clear(req.group)
        if task.kind == "split":
            return self._after_split(task, results)
        if task.kind == "mix":
            return []
        if task.kind == "part":  # passed: its nodes are cleared; failed: it holds a fault
            return [] if results[0][1].outcome.passed else [_Task("split", task.a, known_fail=True)]
        trial = results[0][1]
        if task.kind == "whole":
            if trial.outcome.passed:
                return []
            return [_cross(*_halves(task.a))]
        if task.kind == "pair":
            if trial.outcome.passed:  # the halving went wrong: not one link after all
                return [self._grow(*task.sides)]
            self._judge_pair(task.a[0], task.b[0])
            return []
        if task.kind == "confirm":
            if trial.outcome.passed:
                self._judge_pair(task.a[0], task.b[0])
            else:
                self._convict_node(task.a[0], "fails with two partners that pass with others",
                                   self._failures(task.a[0]))  # fmt: skip
            return []
        if task.kind == "cross":
            return self._after_cross(task, trial)
        return self._after_grow(task, trial)

    def _after_split(self, task: _Task, results: list[tuple[_Request, Trial]]) -> list[_Task]:
        failed = [(req, t) for req, t in results if not t.outcome.passed]
        out: list[_Task] = []
        for req, t in failed:
            members = tuple(n for n in req.group if n in task.a)
            if len(members) == 1:
                out += self._judge_single(members[0], t)
            else:
                out.append(_Task("split", members, known_fail=True))
        if failed or len(task.a) == 1:
            return out
        if not task.known_fail:
            return [_Task("whole", task.a)]
        if task.origin:  # what was left of a failing set passes: the fault is between the parts
            rest = tuple(n for n in task.origin if n not in task.a)
            if len(rest) == 1 and len(task.a) == 1:
                self._judge_pair(rest[0], task.a[0])
                return []
            return [_cross(rest, task.a)]
        if len(task.a) == 2:  # the pair failed, each of its nodes passed with a partner
            self._judge_pair(*task.a)
            return []
        return [_cross(*_halves(task.a))]

    def _after_cross(self, task: _Task, trial: Trial) -> list[_Task]:
        a_side = len(task.a) > 1
        side, other = (task.a, task.b) if a_side else (task.b, task.a)
        h1, h2 = _halves(side)
        # the first half with the other side fails: the link ends in it; passes: in the second half
        # (not tested: one link is assumed; the pair at the end is tested, and ring growth takes
        # over when it passes)
        part = h1 if not trial.outcome.passed else h2
        new_a, new_b = (part, other) if a_side else (other, part)
        if len(trial.group) == 2 and not trial.outcome.passed:  # the pair itself just failed
            self._judge_pair(new_a[0], new_b[0])
            return []
        return [_cross(new_a, new_b, task.sides)]

    def _grow(self, a: Group, b: Group) -> _Task:
        """Ring growth: the largest group that passed without b's nodes, grown by one of them a round."""
        passed: list[Group] = [
            tuple(t.group) for t in self.s.trials if t.outcome.passed and not set(t.group) & set(b)
        ]
        core = max(passed, key=len) if passed else a
        return _Task("grow", core, b)

    def _after_grow(self, task: _Task, trial: Trial) -> list[_Task]:
        if trial.outcome.passed:
            if task.added + 1 >= len(task.b):
                self.s.undecided += list(task.b)
                return []
            return [_Task("grow", task.a, task.b, added=task.added + 1)]
        node = task.b[task.added]
        why = f"a passing group of {len(task.a)} fails once it grows by this node"
        self._convict_node(node, why, [trial])
        return []

    # --- verdicts --------------------------------------------------------------------------------

    def _failures(self, node: str) -> list[Trial]:
        return [t for t in self.s.trials if node in t.group and not t.outcome.passed and len(t.group) > 1]

    def _judge_single(self, node: str, failed_with_partner: Trial) -> list[_Task]:
        """node failed with a known-good partner: bad if it also failed with disjoint others, else
        tested with another partner (the node, or its link to the first partner?)."""
        fails = self._failures(node)
        partners = [set(t.group) - {node} for t in fails]
        if any(p.isdisjoint(q) for i, p in enumerate(partners) for q in partners[i + 1 :]):
            self._convict_node(node, "fails with partners that pass with others", fails)
            return []
        partner = next(n for n in failed_with_partner.group if n != node)
        return [_Task("confirm", (node,), (partner,))]

    def _judge_pair(self, a: str, b: str) -> None:
        trials = [t for t in self.s.trials if a in t.group or b in t.group]
        if {a, b} <= self.s.good:
            why = f"{a} and {b} fail together while each passes with other nodes"
        else:
            why = f"{a} and {b} fail together; no other node passed with them, so either node may be bad"
        self.s.culprits.append(Culprit(kind="link", nodes=sorted([a, b]), why=why, evidence=trials))

    def _convict_node(self, node: str, why: str, evidence: list[Trial]) -> None:
        self.s.good.discard(node)
        clearing = [t for t in self.s.trials if t.outcome.passed and len(t.group) > 1 and node not in t.group]
        partners = {n for t in evidence for n in t.group} - {node}
        proof = evidence + [t for t in clearing if partners & set(t.group)]
        self.s.culprits.append(Culprit(kind="node", nodes=[node], why=why, evidence=proof))


def isolate(
    nodes: Sequence[str],
    test: Callable[[Group], Outcome] | None = None,
    *,
    known_good: Iterable[str] = (),
    run_round: RoundRunner | None = None,
    on_round: Callable[[Round], None] | None = None,
    confirm: bool = True,
) -> Isolation:
    """Search nodes for bad nodes or links (see the module doc; confirm: test each suspect again,
    step 6).

    test is called once per group (groups of a round one after another), unless run_round is given:
    then it gets each round's disjoint groups at once and returns their outcomes in order. Known-good
    nodes are not searched; they serve as partners for single suspects. on_round sees each round as
    it ends (to print progress). Raises ValueError when neither test nor run_round is given, when
    the node names repeat, or when the runner gives a wrong number of outcomes.
    """
    if run_round is None:
        if test is None:
            raise ValueError("isolate needs a test or a round runner")
        run_round = sequential(test)
    return isolate_partitioned([(nodes, known_good)], run_round=run_round, on_round=on_round, confirm=confirm)


def isolate_partitioned(
    parts: Sequence[tuple[Sequence[str], Iterable[str]]],
    *,
    run_round: RoundRunner,
    on_round: Callable[[Round], None] | None = None,
    confirm: bool = True,
) -> Isolation:
    """Search each part (its suspects, its known-good partners) on its own, in the same rounds;
    then (confirm) every part's suspects are tested again in the same round(s) (module doc, 6.).

    A part's nodes are only ever tested with nodes of the same part (a cluster of two GPU models:
    one part each), so no node is judged against, or cleared by, a node of another kind. Round k
    holds the k-th round of every part still searching; their groups are disjoint. The result
    holds every part's culprits, good and undecided nodes, and the rounds. Raises ValueError when
    a node is named twice (in one part or across parts) or the runner gives a wrong number of
    outcomes.
    """
    parts = [(list(nodes), set(good)) for nodes, good in parts]
    if any(len(set(nodes)) != len(nodes) for nodes, _ in parts):
        raise ValueError("node names repeat")
    seen = [n for nodes, good in parts for n in set(nodes) | set(good)]
    if len(set(seen)) != len(seen):
        raise ValueError("node names repeat across parts")
    searches: list[_Search] = []
    for nodes, good in parts:
        searches.append(_Search(tuple(n for n in nodes if n not in good), good, confirm))
    pending: list[tuple[_Search, _Rounds, list[Group]]] = []
    for search in searches:
        gen = search.search()
        with contextlib.suppress(StopIteration):  # no suspect: nothing to test
            pending.append((search, gen, next(gen)))
    rounds: list[Round] = []
    while pending:
        groups = [g for _, _, gs in pending for g in gs]
        outcomes = list(run_round(groups))
        if len(outcomes) != len(groups):
            raise ValueError(f"the round runner gave {len(outcomes)} outcomes for {len(groups)} groups")
        nxt: list[tuple[_Search, _Rounds, list[Group]]] = []
        trials: list[Trial] = []
        at = 0
        for search, gen, gs in pending:
            mine, at = outcomes[at : at + len(gs)], at + len(gs)
            with contextlib.suppress(StopIteration):  # this part's search ended with this round
                nxt.append((search, gen, gen.send(mine)))
            trials += search.rounds[-1].trials
        rnd = Round(index=len(rounds) + 1, trials=trials)
        rounds.append(rnd)
        if on_round is not None:
            on_round(rnd)
        pending = nxt
    culprits = [c for search in searches for c in search.s.culprits]
    unconfirmed = [u for search in searches for u in search.s.unconfirmed]
    # a node that failed alone twice (round 2) is confirmed already
    done = [
        c
        for c in culprits
        if any(
            t.purpose == "confirm" and not t.outcome.passed and set(c.nodes) <= set(t.group)
            for t in c.evidence
        )
    ]
    todo = [c for c in culprits if c not in done]
    if confirm and todo:
        confirmed, more, extra = _confirm(todo, run_round, len(rounds))
        culprits = [*done, *confirmed]
        unconfirmed += more
        for rnd in extra:
            rounds.append(rnd)
            if on_round is not None:
                on_round(rnd)
    culprit_nodes = {n for c in culprits for n in c.nodes if c.kind == "node"}
    good = {n for search in searches for n in search.s.good}
    undecided = [n for search in searches for n in search.s.undecided]
    return Isolation(
        rounds=rounds,
        culprits=culprits,
        unconfirmed=unconfirmed,
        good=sorted(good - culprit_nodes),
        undecided=[n for n in undecided if n not in culprit_nodes],
    )
