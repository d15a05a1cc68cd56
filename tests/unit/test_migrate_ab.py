"""The A/B decision of a migration (orchestrator/migrate/ab.py): schedule, band, rules."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import ConfigError
from orchestrator.metrics.decision import judge
from orchestrator.migrate.ab import (
    collective_decision,
    interleaved_schedule,
    sample_change,
    serving_decision,
)
from orchestrator.models.migrate import SizeSamples, Slot

SIZES = [1 << p for p in range(10, 18)]  # 1 KiB .. 128 KiB, 8 sizes
TRUE = {s: 1.0 + 0.5 * i for i, s in enumerate(SIZES)}  # the same busbw on A and B: no real change


def _figures(slots: list[Slot], drift: float, noise: list[float]) -> dict[int, dict[str, list[float]]]:
    """Every size's figures per arm when each run is `drift` (log) slower than the one before it,
    A and B alike, plus a small run-to-run noise."""
    out: dict[int, dict[str, list[float]]] = {s: {"A": [], "B": [], "A-control": []} for s in SIZES}
    for slot in slots:
        factor = math.exp(-drift * slot.order + noise[slot.order % len(noise)])
        for s in SIZES:
            out[s][slot.arm].append(TRUE[s] * factor)
    return out


def _decide(figs: dict[int, dict[str, list[float]]]) -> str:
    sizes = [SizeSamples(size_bytes=s, a=f["A"], b=f["B"], control=f["A-control"]) for s, f in figs.items()]
    return collective_decision("all_reduce", sizes).direction


@settings(max_examples=40, deadline=None)
@given(
    half_rounds=st.integers(min_value=2, max_value=5),
    drift=st.floats(min_value=0.015, max_value=0.03),
    noise=st.lists(st.floats(min_value=-0.002, max_value=0.002), min_size=1, max_size=7),
)
def test_a_drift_that_hits_a_and_b_alike_is_flagged_only_when_run_a_then_b(
    half_rounds: int, drift: float, noise: list[float]
) -> None:
    rounds = 2 * half_rounds
    capable = {"n1": {"A"}, "n2": {"B"}}
    interleaved = interleaved_schedule("A", "B", capable, rounds=rounds)
    assert _decide(_figures(interleaved, drift, noise)) == "same"
    # the same runs, all A first, then all B (no control: nothing in between to compare with)
    n = 2 * rounds
    blocked = [
        Slot(order=i, round=0, arm="A" if i < n else "B", stack="A", nodes=["n1"]) for i in range(2 * n)
    ]
    assert _decide(_figures(blocked, drift, noise)) == "worse"


def _samples(change_at: set[int], factor: float, noise: list[float]) -> list[SizeSamples]:
    out = []
    for i, s in enumerate(SIZES):
        a = [TRUE[s] * math.exp(e) for e in noise]
        b = [TRUE[s] * (factor if i in change_at else 1.0) * math.exp(-e) for e in noise]
        out.append(SizeSamples(size_bytes=s, a=a, b=b, control=list(a)))
    return out


_NOISE = st.lists(st.floats(min_value=-0.005, max_value=0.005), min_size=3, max_size=6)


@settings(max_examples=40, deadline=None)
@given(at=st.integers(min_value=0, max_value=len(SIZES) - 1), noise=_NOISE)
def test_a_change_at_one_size_only_is_not_flagged(at: int, noise: list[float]) -> None:
    d = collective_decision("all_reduce", _samples({at}, 0.7, noise))
    assert d.direction == "same"
    assert d.flagged_sizes == [] and d.lone_sizes == [SIZES[at]]


@settings(max_examples=40, deadline=None)
@given(at=st.integers(min_value=0, max_value=len(SIZES) - 2), noise=_NOISE, worse=st.booleans())
def test_a_change_at_two_adjacent_sizes_is_flagged(at: int, noise: list[float], worse: bool) -> None:
    d = collective_decision("all_reduce", _samples({at, at + 1}, 0.7 if worse else 1.4, noise))
    assert d.direction == ("worse" if worse else "better")
    assert d.flagged_sizes == [SIZES[at], SIZES[at + 1]]


def test_two_changed_sizes_that_are_not_adjacent_are_not_flagged() -> None:
    d = collective_decision("all_reduce", _samples({1, 3}, 0.7, [0.001, -0.002, 0.0]))
    assert d.direction == "same" and d.lone_sizes == [SIZES[1], SIZES[3]]


def test_latency_figures_are_worse_when_they_grow() -> None:
    d = collective_decision("all_reduce", _samples({2, 3}, 1.4, [0.0, 0.001, -0.001]), higher_is_better=False)
    assert d.direction == "worse"


def test_the_control_arm_widens_the_band_to_the_gap_a_against_a_shows() -> None:
    a = [10.0, 10.1, 9.9, 10.0]
    control = [9.2, 9.3, 9.1, 9.2]  # A against A differs by about 8 %
    b = [9.3, 9.4, 9.2, 9.3]  # 7 % below A: beyond the 5 % floor, within what A against A shows
    with_control, gap = sample_change(a, b, control)
    without, none = sample_change(a, b)
    assert none is None and gap is not None and gap == pytest.approx(math.log(9.2 / 10.0))
    assert with_control.log_band is not None and with_control.log_band >= abs(gap) - 1e-12
    assert with_control.change == "same"
    assert without.change == "worse"


def test_sample_change_refuses_a_side_without_a_positive_figure() -> None:
    with pytest.raises(ValueError, match="positive"):
        sample_change([0.0, -1.0], [1.0])


def test_the_schedule_alternates_and_balances_the_arms_in_time() -> None:
    slots = interleaved_schedule(
        "cpu-gloo", "cpu-gloo-next", {"n1": {"cpu-gloo"}, "n2": {"cpu-gloo-next"}}, rounds=4
    )
    assert [s.arm for s in slots[:6]] == ["A", "B", "A-control", "A-control", "B", "A"]
    assert [s.order for s in slots] == list(range(12))
    mean = {arm: statistics.mean(s.order for s in slots if s.arm == arm) for arm in ("A", "B", "A-control")}
    assert len(set(mean.values())) == 1, mean
    assert {s.stack for s in slots if s.arm == "B"} == {"cpu-gloo-next"}
    assert all(s.nodes == (["n2"] if s.arm == "B" else ["n1"]) for s in slots)


def test_the_schedule_prefers_nodes_that_run_both_stacks_and_refuses_too_few() -> None:
    capable = {"n3": {"A"}, "n1": {"A", "B"}, "n2": {"A", "B"}, "n0": {"B"}}
    slots = interleaved_schedule("A", "B", capable, rounds=2, nodes_per_run=2, control=False)
    assert all(s.nodes == ["n1", "n2"] for s in slots)
    assert [s.arm for s in slots] == ["A", "B", "B", "A"]
    with pytest.raises(ConfigError, match="can run stack 'B'"):
        interleaved_schedule("A", "B", {"n1": {"A"}}, rounds=2)


@pytest.mark.parametrize(
    ("tput_b", "p99_b", "interactive", "expected"),
    [
        (1200.0, 130.0, True, "worse for interactive"),  # better throughput, worse p99
        (1000.0, 130.0, True, "worse"),  # throughput the same, worse p99
        (1200.0, 130.0, False, "better"),  # batch goes by throughput
        (1000.0, 130.0, False, "worse"),  # throughput the same: p99 decides
        (1200.0, 100.0, True, "better"),
        (800.0, 80.0, True, "worse"),  # worse throughput
        (1010.0, 101.0, True, "same"),
    ],
)
def test_serving_rule(tput_b: float, p99_b: float, interactive: bool, expected: str) -> None:
    t = judge(1000.0, tput_b, math.log1p(0.05))
    p = judge(100.0, p99_b, math.log1p(0.05), higher_is_better=False)
    d = serving_decision(t, p, interactive=interactive)
    assert d.direction == expected, d.reason


def test_judge_refuses_a_figure_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        judge(0.0, 1.0, 0.05)
