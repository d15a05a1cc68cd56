"""bench/isolate.py — the wall time of isolation against the time of testing every pair.

Simulated part (`simulate`, no lab, a few seconds): orch's own isolation code runs on a simulated
cluster of N nodes, the code `orch isolate` runs (orchestrator/runs/isolate.py): the search of
orchestrator/isolation/search.py decides each round, each group becomes a step by `test_step`,
the nodes are split by kind (`partition_nodes`: one kind here) and searched by
`isolate_partitioned`, and each round's results are judged by `judge_by_kind`, under the pass rule
of the request. Only the executor is a stand-in (`StandIn`): where `orch isolate`
submits a round's steps to Slurm and collects them, the stand-in answers each step with a
StepResult made from figures recorded on the lab (bench/isolate_lab_figures.json says which runs):

- a node alone: its own single-node busbw, one of the 7 recorded singles drawn once per node;
  the test's wall time one of the recorded singles' walls;
- a group of 2 or more healthy nodes: each pair of nodes gets a link figure, one of the 4
  recorded healthy pairs drawn once per pair; the group's busbw is the least link figure around
  its ring (inventory order, closed), as a ring all_reduce runs at its slowest link; its wall one
  of the recorded healthy pairs' walls (no set larger than a pair was recorded: sets take a
  pair's wall);
- a group holding the bad node (a 20 mbit tbf on its fabric NIC, as recorded): busbw and wall one
  of the 2 recorded throttled pairs (0.0024 GB/s, 31-33 s); the bad node alone is healthy (the
  throttle is on the fabric, a single node's ranks talk over loopback);
- a group holding both ends of the bad link (traffic between them dropped): nothing was recorded;
  the step ends at the step timeout (30 s in the recorded runs) with TIMEOUT, verdict infra, and
  its wall is one of the recorded throttled pairs' walls (their jobs ran 30 s: the same length).

Every figure and wall is multiplied by seeded noise, uniform within +-5 % per test. The pass rule
is the one the figures were recorded under (the lab's: singles within 70 % of the round's best,
groups at 5 % of the best single; all_reduce 4 MiB, 3 iterations, 30 s timeout).

Times: a round's tests run concurrently on disjoint nodes, so a round takes its longest test;
isolation's wall is the sum over rounds (serial: the sum over tests). Testing every pair is
N(N-1)/2 pair tests with the same wall model, packed into N-1 rounds of N/2 disjoint pairs (the
circle method; N rounds of (N-1)/2 for odd N), each round its longest pair; serial: their sum.
Slurm's own start-up of many jobs at once is not modelled (a round's jobs start together).

Printed per cluster size (8, 64, 1,024 nodes) and scenario (one bad node, one bad link): the
rounds against ceil(log2 N) + 2, the tests, the culprits named and whether they are the planted
ones, and the walls.

Usage: .venv/bin/python bench/isolate.py [--nodes 8,64,1024] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from orchestrator.isolation.search import isolate_partitioned
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.isolation import Group, Isolation, Outcome
from orchestrator.models.requests import IsolateRequest
from orchestrator.models.results import CollSummary
from orchestrator.models.run import StepResult
from orchestrator.runs.isolate import (
    Partition,
    isolation_plan,
    judge_by_kind,
    partition_nodes,
    test_step,
)

FIGURES = Path(__file__).resolve().with_name("isolate_lab_figures.json")
NOISE = 0.05
SIZE = 4 * 2**20


@dataclass(frozen=True)
class Recorded:
    """The lab's figures, by kind of test (bench/isolate_lab_figures.json)."""

    single_busbw: tuple[float, ...]
    single_wall: tuple[float, ...]
    pair_busbw: tuple[float, ...]
    pair_wall: tuple[float, ...]
    throttled_busbw: tuple[float, ...]
    throttled_wall: tuple[float, ...]

    @classmethod
    def load(cls, path: Path = FIGURES) -> Recorded:
        tests = json.loads(path.read_text())["tests"]
        singles = [t for t in tests if len(t["nodes"]) == 1]
        pairs = [t for t in tests if len(t["nodes"]) > 1 and not t["throttled"]]
        slow = [t for t in tests if t["throttled"]]
        return cls(
            single_busbw=tuple(t["busbw_gbs"] for t in singles),
            single_wall=tuple(t["wall_s"] for t in singles),
            pair_busbw=tuple(t["busbw_gbs"] for t in pairs),
            pair_wall=tuple(t["wall_s"] for t in pairs),
            throttled_busbw=tuple(t["busbw_gbs"] for t in slow),
            throttled_wall=tuple(t["wall_s"] for t in slow),
        )


def lab_request() -> IsolateRequest:
    """The request the recorded figures were measured under (the lab's loose rule)."""
    return IsolateRequest(
        inventory=Path("simulated"), size=SIZE, iters=3, timeout_s=30, tolerance=0.7, min_efficiency=0.05
    )


def sim_cluster(n: int) -> Cluster:
    """n CPU nodes node1..nodeN with 2 ranks each (as the lab's)."""
    nodes = [
        Node(name=f"node{i}", address=f"10.0.{i // 256}.{i % 256}", gpus_per_node=2) for i in range(1, n + 1)
    ]
    return Cluster(source=Path("simulated"), nodes=nodes, groups={"all": [x.name for x in nodes]})


class StandIn:
    """The executor of a simulated cluster: the round runner `isolate` calls, as `orch isolate`'s
    _Rounds is, with Slurm replaced by answers from the recorded figures (module doc)."""

    def __init__(
        self,
        cluster: Cluster,
        req: IsolateRequest,
        rec: Recorded,
        rng: random.Random,
        *,
        bad_node: str | None = None,
        bad_link: tuple[str, str] | None = None,
    ) -> None:
        self.cluster, self.req, self.rec, self.rng = cluster, req, rec, rng
        self.plan = isolation_plan(req)
        self.bad_node, self.bad_link = bad_node, frozenset(bad_link) if bad_link else None
        self.order = {n.name: i for i, n in enumerate(cluster.nodes)}
        self.parts: list[Partition] = partition_nodes(cluster, cluster.names, [])
        self.kind_of = {n: p.label for p in self.parts for n in p.nodes}
        self.singles: dict[str, list[float]] = {}
        self.measured: dict[str, list[float]] = {}  # every single figure: the noise (as _Rounds)
        self.single: dict[str, float] = {}
        self.link: dict[frozenset[str], float] = {}
        self.round_walls: list[list[float]] = []

    def _noise(self) -> float:
        return self.rng.uniform(1 - NOISE, 1 + NOISE)

    def _link(self, a: str, b: str) -> float:
        key = frozenset((a, b))
        if key not in self.link:
            self.link[key] = self.rng.choice(self.rec.pair_busbw) * self._noise()
        return self.link[key]

    def _answer(self, group: Group, step_id: str) -> tuple[float | None, float]:
        """(busbw, or None for a step that timed out; the test's wall time)."""
        rec, rng = self.rec, self.rng
        if len(group) == 1:
            node = group[0]
            if node not in self.single:
                self.single[node] = rng.choice(rec.single_busbw)
            return self.single[node] * self._noise(), rng.choice(rec.single_wall) * self._noise()
        if self.bad_link is not None and self.bad_link <= set(group):
            return None, rng.choice(rec.throttled_wall) * self._noise()
        if self.bad_node in group:
            slow = rng.choice(rec.throttled_busbw) * self._noise()
            return slow, rng.choice(rec.throttled_wall) * self._noise()
        ring = sorted(group, key=self.order.__getitem__)
        busbw = min(self._link(a, b) for a, b in zip(ring, ring[1:] + ring[:1], strict=True))
        return busbw * self._noise(), rng.choice(rec.pair_wall) * self._noise()

    def __call__(self, groups: Sequence[Group]) -> list[Outcome]:
        index = len(self.round_walls) + 1
        steps = [test_step(g, self.cluster, self.plan, index, i) for i, g in enumerate(groups)]
        results: list[StepResult] = []
        walls: list[float] = []
        for g, st in zip(groups, steps, strict=True):
            busbw, wall = self._answer(g, st.id)
            walls.append(wall)
            if busbw is None:
                timeout = f"job sim-{st.id} ended TIMEOUT"
                results.append(StepResult(step=st, verdict="infra", reasons=[timeout]))
                continue
            algbw = busbw * st.world_size / (2 * (st.world_size - 1))
            summary = CollSummary(collective="all_reduce", size_bytes=SIZE, busbw_gbs=busbw, algbw_gbs=algbw)
            results.append(StepResult(step=st, summary={"all_reduce": summary}, verdict="pass"))
        outcomes = judge_by_kind(results, self.req, self.singles, self.kind_of, self.measured)
        self.round_walls.append(walls)
        return outcomes


@dataclass
class AllPairs:
    """Testing every pair: N(N-1)/2 pair tests in rounds of disjoint pairs."""

    tests: int
    rounds: int
    concurrent_s: float
    serial_s: float


def all_pairs(
    n: int,
    rec: Recorded,
    seed: int,
    *,
    bad_node: int | None = None,
    bad_link: tuple[int, int] | None = None,
) -> AllPairs:
    """Every pair of n nodes (0-based indices) by the circle method, each pair's wall drawn from the
    recorded walls as the stand-in draws them (a pair with the bad node or the bad link: a
    throttled pair's wall)."""
    gen = np.random.default_rng(seed)
    healthy, slow = np.array(rec.pair_wall), np.array(rec.throttled_wall)
    m = n + n % 2  # an odd n gets a bye (index n): its partner sits the round out
    others = np.arange(1, m)
    tests, rounds, conc, serial = 0, 0, 0.0, 0.0
    for r in range(m - 1):
        ring = np.concatenate(([0], np.roll(others, r)))
        a, b = ring[: m // 2], ring[::-1][: m // 2]
        keep = (a < n) & (b < n)
        a, b = a[keep], b[keep]
        walls = healthy[gen.integers(len(healthy), size=len(a))]
        hit = np.zeros(len(a), dtype=bool)
        if bad_node is not None:
            hit |= (a == bad_node) | (b == bad_node)
        if bad_link is not None:
            x, y = bad_link
            hit |= ((a == x) & (b == y)) | ((a == y) & (b == x))
        walls[hit] = slow[gen.integers(len(slow), size=int(hit.sum()))]
        walls = walls * gen.uniform(1 - NOISE, 1 + NOISE, size=len(a))
        tests += len(a)
        rounds += 1
        conc += float(walls.max())
        serial += float(walls.sum())
    return AllPairs(tests=tests, rounds=rounds, concurrent_s=conc, serial_s=serial)


@dataclass
class Simulation:
    """What one simulated isolation gave, and what testing every pair would take."""

    n: int
    planted: tuple[str, list[str]]
    isolation: Isolation
    bound: int = field(init=False)
    tests: int = field(init=False)
    concurrent_s: float
    serial_s: float
    every_pair: AllPairs
    cpu_s: float

    def __post_init__(self) -> None:
        self.bound = math.ceil(math.log2(self.n)) + 2
        self.tests = sum(len(r.trials) for r in self.isolation.rounds)

    @property
    def named(self) -> list[tuple[str, list[str]]]:
        return [(c.kind, c.nodes) for c in self.isolation.culprits]

    @property
    def correct(self) -> bool:
        return self.named == [self.planted] and not self.isolation.undecided


def simulate(
    n_nodes: int,
    *,
    bad_node: str | None = None,
    bad_link: tuple[str, str] | None = None,
    seed: int = 1,
    on_round: object = None,
    rec: Recorded | None = None,
) -> Simulation:
    """Run orch's isolation on a simulated cluster of n_nodes (node1..nodeN) with one planted fault:
    bad_node (its NIC throttled) or bad_link (traffic between the two dropped); neither: the node
    drawn by the seed. Deterministic for a seed."""
    rec = rec or Recorded.load()
    rng = random.Random(seed)
    cluster = sim_cluster(n_nodes)
    if bad_node is None and bad_link is None:
        bad_node = rng.choice(cluster.names)
    t0 = time.process_time()
    stand_in = StandIn(cluster, lab_request(), rec, rng, bad_node=bad_node, bad_link=bad_link)
    found = isolate_partitioned(
        [(p.nodes, p.known_good) for p in stand_in.parts],
        run_round=stand_in,
        on_round=on_round if callable(on_round) else None,
    )
    cpu = time.process_time() - t0
    walls = stand_in.round_walls
    index = {n: i for i, n in enumerate(cluster.names)}
    planted: tuple[str, list[str]] = ("node", [bad_node]) if bad_node else ("link", sorted(bad_link or ()))
    every = all_pairs(
        n_nodes, rec, seed,
        bad_node=index[bad_node] if bad_node else None,
        bad_link=(index[bad_link[0]], index[bad_link[1]]) if bad_link else None,
    )  # fmt: skip
    return Simulation(
        n=n_nodes,
        planted=planted,
        isolation=found,
        concurrent_s=sum(max(w) for w in walls),
        serial_s=sum(sum(w) for w in walls),
        every_pair=every,
        cpu_s=cpu,
    )


def _dur(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 2 * 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def report(sim: Simulation) -> str:
    """One scenario as the lines main() prints."""
    iso = sim.isolation
    left = f", undecided {','.join(iso.undecided)}" if iso.undecided else ""
    named = "; ".join(f"{k} {'+'.join(n)}" for k, n in sim.named) or "none"
    ap = sim.every_pair
    return "\n".join([
        f"N={sim.n} planted {sim.planted[0]} {'+'.join(sim.planted[1])}: named {named} "
        f"({'correct' if sim.correct else 'WRONG'}{left})",
        f"  rounds {len(iso.rounds)} (ceil(log2 N) + 2 = {sim.bound}: "
        f"{'within' if len(iso.rounds) <= sim.bound else 'OVER'}), {sim.tests} tests; planner + stand-in "
        f"{sim.cpu_s:.2f} s CPU",
        f"  isolation: {_dur(sim.concurrent_s)} with each round's tests concurrent, "
        f"{_dur(sim.serial_s)} serial",
        f"  every pair: {ap.tests:,} pair tests, {ap.rounds:,} rounds of disjoint pairs "
        f"{_dur(ap.concurrent_s)}, serial {_dur(ap.serial_s)}; isolation / every pair (concurrent) "
        f"= {sim.concurrent_s / ap.concurrent_s:.3f}",
    ])  # fmt: skip


def scenarios(n: int, seed: int) -> list[Simulation]:
    """One bad node and one bad link, placed by the seed."""
    rng = random.Random(seed * 7919 + n)
    a, b = rng.sample(range(1, n + 1), 2)
    return [
        simulate(n, bad_node=f"node{rng.randint(1, n)}", seed=seed),
        simulate(n, bad_link=(f"node{a}", f"node{b}"), seed=seed),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", default="8,64,1024", help="cluster sizes, comma list")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--lab",
        action="store_true",
        help="also measure on the running lab (8 nodes or more; about 10 minutes): bench/_isolate_lab.py",
    )
    ap.add_argument(
        "--loaded",
        type=int,
        default=0,
        metavar="RUNS",
        help="only this: RUNS isolations on the running 8-node lab, node6 throttled, one busy process "
        "per core (issue 26's must-show; about 3 minutes a run): bench/_isolate_lab.py loaded_runs",
    )
    args = ap.parse_args(argv)
    if args.loaded:
        from _isolate_lab import loaded_runs  # beside this file: bench/ is on sys.path

        found = loaded_runs(runs=args.loaded)
        print(json.dumps(found, indent=2))
        return 0 if found["right"] == args.loaded and found["throttle_reverted"] else 1
    rec = Recorded.load()
    print(f"simulated: orch's isolation against a stand-in executor answering from {FIGURES.name}")
    print(
        f"  recorded: singles {min(rec.single_busbw):.3g}-{max(rec.single_busbw):.3g} GB/s, "
        f"healthy pairs {min(rec.pair_busbw):.3g}-{max(rec.pair_busbw):.3g} GB/s, throttled pairs "
        f"{min(rec.throttled_busbw):.2g} GB/s; walls {min(rec.single_wall):.1f}-{max(rec.single_wall):.1f} s "
        f"(single), {min(rec.pair_wall):.1f}-{max(rec.pair_wall):.1f} s (pair), "
        f"{min(rec.throttled_wall):.1f}-{max(rec.throttled_wall):.1f} s (throttled); noise +-{NOISE:.0%}"
    )
    ok = True
    for n in (int(x) for x in args.nodes.split(",") if x):
        for sim in scenarios(n, args.seed):
            print(report(sim))
            ok &= sim.correct
    if args.lab:
        from _isolate_lab import lab_figures  # beside this file: bench/ is on sys.path

        print("lab (8 nodes, rounds one after another):")
        print(json.dumps(lab_figures(), indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
