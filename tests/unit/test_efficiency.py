"""Scaling efficiency compares like with like and names its reference (issue #12, Figures 1)."""

from __future__ import annotations

from orchestrator.metrics import verdict as V
from orchestrator.models.plan import Step
from orchestrator.models.results import Collective, Percentiles
from orchestrator.plan import resolve_plan

COLLS: list[Collective] = ["all_reduce", "sendrecv"]


def _ladder(nodes: int, rpns: list[int]) -> list[Step]:
    out = []
    for n in range(1, nodes + 1):
        for g in rpns:
            out.append(Step(id=f"n{n}xg{g}", index=len(out), nnodes=n, ranks_per_node=g,
                            nodes=[f"node{i}" for i in range(1, n + 1)], world_size=n * g,
                            collectives=COLLS, sizes=[1 << 20]))  # fmt: skip
    return out


def _summary(
    busbw: dict[Collective, float], latency: Percentiles | None = None
) -> dict[Collective, V.CollSummary]:
    return {c: V.CollSummary(collective=c, size_bytes=1 << 20, busbw_gbs=v, algbw_gbs=v, latency_us=latency)
            for c, v in busbw.items()}  # fmt: skip


def test_references_are_like_with_like_and_never_one_rank() -> None:
    ladder = _ladder(3, [1, 2, 4])
    refs = {s.id: V.reference_step(s, ladder) for s in ladder}
    assert refs["n1xg1"] is None  # a 1-rank step is neither judged nor a reference
    got = {sid: (r[0], r[1].id) for sid, r in refs.items() if r is not None}
    assert got == {
        "n1xg2": ("intra-node", "n1xg2"), "n1xg4": ("intra-node", "n1xg2"),
        "n2xg1": ("inter-node", "n2xg1"), "n2xg2": ("inter-node", "n2xg2"), "n2xg4": ("inter-node", "n2xg4"),
        "n3xg1": ("inter-node", "n2xg1"), "n3xg2": ("inter-node", "n2xg2"), "n3xg4": ("inter-node", "n2xg4"),
    }  # fmt: skip
    assert all(r[1].world_size >= 2 for r in refs.values() if r is not None)


def test_a_one_rank_copy_is_not_the_reference_of_sendrecv() -> None:
    # The numbers: sendrecv at 1 rank is a local copy (18.4 GB/s); 2 ranks gave 0.52 GB/s.
    ladder = _ladder(2, [1, 2])
    bw: dict[str, dict[Collective, float]] = {
        "n1xg1": {"all_reduce": 0.0, "sendrecv": 18.4}, "n1xg2": {"all_reduce": 0.6, "sendrecv": 0.52},
        "n2xg1": {"all_reduce": 0.5, "sendrecv": 0.40}, "n2xg2": {"all_reduce": 0.45, "sendrecv": 0.38},
    }  # fmt: skip
    pairs = [(s, _summary(bw[s.id])) for s in ladder]
    V.apply_efficiency(pairs)
    by = {s.id: summ for s, summ in pairs}
    assert all(c.efficiency is None and c.reference is None for c in by["n1xg1"].values())
    assert by["n1xg2"]["sendrecv"].efficiency == 1.0 and by["n1xg2"]["sendrecv"].scaling == "intra-node"
    # the 2-node steps are their own inter-node references, not held against one node's figure
    assert by["n2xg1"]["sendrecv"].reference == "n2xg1" and by["n2xg1"]["sendrecv"].efficiency == 1.0
    assert by["n2xg1"]["sendrecv"].reference_label() == "inter-node vs n2xg1"
    assert by["n2xg2"]["all_reduce"].reference == "n2xg2"


def test_threshold_is_judged_beyond_the_noise_band_and_names_the_reference() -> None:
    plan = resolve_plan("acceptance")
    assert plan.thresholds.min_scaling_efficiency == 0.8
    ladder = _ladder(3, [1])
    bw: dict[str, dict[Collective, float]] = {
        "n1xg1": {"all_reduce": 0.0, "sendrecv": 9.0},
        "n2xg1": {"all_reduce": 1.0, "sendrecv": 1.0},
        "n3xg1": {"all_reduce": 0.78, "sendrecv": 0.5},  # 0.78: under 0.8, within the 5% floor
    }
    pairs = [(s, _summary(bw[s.id])) for s in ladder]
    V.apply_efficiency(pairs)
    fails, notes = V.efficiency_failures(plan, pairs[2][1])
    assert len(fails) == 1 and fails[0].startswith(
        "sendrecv: inter-node scaling efficiency 0.50 against n2xg1"
    )
    assert "noise band" in fails[0]
    assert len(notes) == 1 and notes[0].startswith("all_reduce:") and "within the noise band" in notes[0]


def test_per_iteration_spread_widens_the_band() -> None:
    ladder = _ladder(3, [1])
    noisy = Percentiles(n=20, log_sigma=0.5)  # per-iteration times spread by +-50% (ln)
    pairs = [(s, _summary({"all_reduce": v}, noisy)) for s, v in zip(ladder, (0.0, 1.0, 0.7), strict=True)]
    V.apply_efficiency(pairs)
    c = pairs[2][1]["all_reduce"]
    assert c.noise is not None and c.noise > 0.3  # 3 x hypot(0.5, 0.5) / sqrt(20) = 0.47 in ln
    assert V.efficiency_failures(resolve_plan("acceptance"), pairs[2][1])[0] == []


def test_sizes_rounded_per_rank_count_still_compare() -> None:
    # Seen on the lab: all_gather of 1 MiB prints 1048576 B on 2 ranks and 1048560 B on 3 ranks
    # (whole 16-byte blocks per rank); n3xg1 must still be held against n2xg1.
    ladder = _ladder(3, [1])
    pairs = [(s, _summary({"all_reduce": 1.0})) for s in ladder]
    pairs[2][1]["all_reduce"].size_bytes = 1048560
    V.apply_efficiency(pairs)
    assert pairs[2][1]["all_reduce"].reference == "n2xg1"
    pairs[2][1]["all_reduce"].size_bytes = 1 << 19  # a different requested size is not compared
    V.apply_efficiency(pairs)
    assert pairs[2][1]["all_reduce"].reference is None


def test_line_rate_fraction_only_over_the_fabric() -> None:
    ladder = _ladder(2, [1, 2])
    pairs = [(s, _summary({"all_reduce": 25.0})) for s in ladder]
    V.apply_line_rate(pairs, 400.0)  # 400 Gbit/s = 50 GB/s
    got = {s.id: summ["all_reduce"].line_fraction for s, summ in pairs}
    assert got == {"n1xg1": None, "n1xg2": None, "n2xg1": 0.5, "n2xg2": 0.5}
    V.apply_line_rate(pairs, None)
    assert all(summ["all_reduce"].line_fraction is None for _, summ in pairs)
