"""bench/isolate.py's simulation: orch's isolation on 64 simulated nodes names the planted fault."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "isolate.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_isolate", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_isolate"] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


bench = _load()


@pytest.mark.parametrize(("node", "seed"), [("node1", 1), ("node23", 2), ("node64", 3), ("node40", 4)])
def test_the_planted_node_is_named_alone_within_the_round_bound(node: str, seed: int) -> None:
    sim = bench.simulate(64, bad_node=node, seed=seed)
    iso = sim.isolation
    assert [(c.kind, c.nodes) for c in iso.culprits] == [("node", [node])]
    assert iso.undecided == [] and node not in iso.good and len(iso.good) == 63
    assert len(iso.rounds) <= math.ceil(math.log2(64)) + 2
    for rnd in iso.rounds:  # a round's groups are disjoint: they can run at once
        members = [n for t in rnd.trials for n in t.group]
        assert len(members) == len(set(members))
    # the evidence is the recorded throttled figure, judged by orch's own pass rule
    fails = [t for t in iso.culprits[0].evidence if not t.outcome.passed]
    assert fails and all(t.outcome.figure is not None and t.outcome.figure < 0.01 for t in fails)
    assert all("efficiency" in t.outcome.detail for t in fails)
    # concurrent rounds: a round takes its longest test, and isolation beats testing every pair
    assert sim.concurrent_s < sim.serial_s
    assert sim.every_pair.tests == 64 * 63 // 2 and sim.every_pair.rounds == 63
    assert sim.concurrent_s < sim.every_pair.concurrent_s / 4


def test_a_dropped_link_is_named_as_the_pair() -> None:
    sim = bench.simulate(64, bad_link=("node9", "node50"), seed=5)
    assert [(c.kind, c.nodes) for c in sim.isolation.culprits] == [("link", ["node50", "node9"])]
    fails = [t for t in sim.isolation.culprits[0].evidence if not t.outcome.passed]
    assert fails and all("TIMEOUT" in t.outcome.detail for t in fails)


def test_the_simulation_is_deterministic_for_a_seed_and_odd_sizes_pack_byes() -> None:
    a = bench.simulate(9, bad_node="node4", seed=7)
    b = bench.simulate(9, bad_node="node4", seed=7)
    assert a.concurrent_s == b.concurrent_s and a.every_pair.concurrent_s == b.every_pair.concurrent_s
    assert a.every_pair.tests == 36 and a.every_pair.rounds == 9  # 9 rounds of 4 pairs, one bye each
    assert [c.nodes for c in a.isolation.culprits] == [["node4"]]
