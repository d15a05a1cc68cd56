"""The one decision module (orchestrator/metrics/decision.py) and its words (models/decision.py)."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.metrics import decision
from orchestrator.metrics.decision import FLOOR, figure_change, judge, serving_verdict
from orchestrator.migrate.ab import collective_decision
from orchestrator.models.decision import FigureChange
from orchestrator.models.fault import RecoveryResult
from orchestrator.models.migrate import Comparison, SizeSamples
from orchestrator.models.recovery import RecoveryRecord
from orchestrator.models.serving_recovery import RecoverySpread, ServingRecovery

FLOOR_LOG = math.log1p(FLOOR)


def test_direction_is_same_inside_the_band_inclusive() -> None:
    assert [decision.direction(d, 0.1) for d in (0.2, 0.1, -0.1, -0.2)] == ["better", "same", "same", "worse"]


@pytest.mark.parametrize(
    ("b", "higher_is_better", "expected"),
    [
        (12.0, True, "better"),
        (8.0, True, "worse"),
        (10.2, True, "same"),
        (12.0, False, "worse"),  # a latency that grew
        (8.0, False, "better"),
        (9.8, False, "same"),
    ],
)
def test_each_direction_for_higher_and_lower_is_better(
    b: float, higher_is_better: bool, expected: str
) -> None:
    c = figure_change("x", [10.0], [b], higher_is_better=higher_is_better)
    assert c.change == expected
    assert c.ratio == pytest.approx(b / 10.0) and c.band == pytest.approx(FLOOR)


def test_a_change_exactly_at_the_floor_is_same_and_just_beyond_it_is_not() -> None:
    at = judge(100.0, 100.0 * math.exp(FLOOR_LOG), FLOOR_LOG)
    beyond = judge(100.0, 100.0 * math.exp(FLOOR_LOG + 1e-9), FLOOR_LOG)
    below = judge(100.0, 100.0 * math.exp(-FLOOR_LOG - 1e-9), FLOOR_LOG)
    assert (at.change, beyond.change, below.change) == ("same", "better", "worse")


def test_the_band_grows_with_the_spread_of_the_repeats() -> None:
    # 8% apart: beyond the 5% floor when the repeats agree, within the band when they scatter
    tight = figure_change("busbw", [10.0, 10.01, 9.99], [9.2, 9.21, 9.19])
    loose = figure_change("busbw", [10.0, 11.0, 9.0], [9.2, 10.2, 8.2])
    assert tight.change == "worse" and tight.band == pytest.approx(FLOOR)
    assert loose.change == "same" and loose.band is not None and loose.band > 0.08


def test_one_runs_own_uncertainty_widens_the_band() -> None:
    without = figure_change("TTFT p99", [100.0], [110.0], higher_is_better=False)
    with_se = figure_change("TTFT p99", [100.0], [110.0], higher_is_better=False, run_se=[0.05, 0.05])
    assert without.change == "worse" and with_se.change == "same"
    assert with_se.band == pytest.approx(math.expm1(3 * 0.05 * math.sqrt(2)))


def test_a_stated_figure_from_elsewhere_has_no_spread_of_its_own() -> None:
    # the orch side (A) has repeats; the file's side is one stated figure and adds nothing to the spread
    orch = [10.0, 10.5, 9.5]
    mine_only = figure_change("tput", orch, [9.0], spread_of=(True, False))
    both = figure_change("tput", orch, [9.0])
    assert mine_only.b == 9.0  # the stated figure stays as stated
    assert mine_only.band is not None and both.band is not None and mine_only.band > both.band


def test_the_control_arm_widens_the_band_to_the_gap_a_against_a_shows() -> None:
    a, control, b = [10.0, 10.1, 9.9], [9.2, 9.3, 9.1], [9.3, 9.4, 9.2]
    c = figure_change("busbw", a, b, control=control)
    gap = decision.control_gap(a, control)
    assert gap == pytest.approx(math.log(9.2 / 10.0))
    assert c.log_band is not None and c.log_band >= abs(gap) - 1e-12 and c.change == "same"
    assert figure_change("busbw", a, b).change == "worse"
    assert decision.control_gap(a, []) is None


def test_a_side_without_a_figure_or_with_a_note_is_not_judged() -> None:
    empty = figure_change("ITL p99", [12.0], [], n_a=100, n_b=0)
    noted = figure_change("ITL p99", [12.0], [13.0], note="the file states no ITL p99")
    zero = figure_change("tput", [0.0], [5.0])
    assert (empty.change, empty.a, empty.b, empty.ratio, empty.note) == ("n/a", 12.0, None, None, None)
    assert noted.change == "n/a" and noted.note == "the file states no ITL p99" and noted.band is None
    assert zero.change == "n/a" and zero.a is None


def test_judge_refuses_figures_that_are_not_positive_and_a_negative_band() -> None:
    with pytest.raises(ValueError, match="positive"):
        judge(0.0, 1.0, 0.05)
    with pytest.raises(ValueError, match="band"):
        judge(1.0, 1.0, -0.1)


@pytest.mark.parametrize(
    ("changes", "stands"),
    [
        (["same", "worse", "same", "worse"], [False, False, False, False]),  # lone sizes
        (["same", "worse", "worse", "same"], [False, True, True, False]),
        (["better", "worse", "same"], [False, False, False]),  # opposite directions do not add up
        (["worse", "missing", "worse"], [False, False, False]),  # a gap breaks the run
        (["better", "better", "better"], [True, True, True]),
    ],
)
def test_a_change_stands_only_at_two_adjacent_sizes(changes: list[str], stands: list[bool]) -> None:
    assert decision.adjacent(changes) == stands


def test_adjacent_takes_its_minimum() -> None:
    assert decision.adjacent(["worse", "worse"], 3) == [False, False]
    assert decision.adjacent(["worse"], 1) == [True]


def test_worse_wins_over_better_in_a_series() -> None:
    assert decision.overall(["better", "worse"]) == "worse"
    assert decision.overall(["better", "same"]) == "better"
    assert decision.overall([]) == "same"


def test_recovery_times_lower_is_better_with_a_floor_of_as_median() -> None:
    band, d = decision.time_change([2.0, 2.0, 2.0], [3.0, 3.0, 3.0])
    assert band == pytest.approx(0.1) and d == "worse"  # floor x 2 s, the repeats agree exactly
    assert decision.time_change([2.0], [2.09])[1] == "same"
    assert decision.time_change([2.0], [1.5])[1] == "better"
    with pytest.raises(ValueError):
        decision.time_change([], [1.0])


def _fc(figure: str, change: str, ratio: float = 1.0) -> FigureChange:
    return FigureChange.model_validate(
        dict(figure=figure, a=1.0, b=ratio, ratio=ratio, band=0.05, change=change, n_a=100, n_b=100)
    )


@pytest.mark.parametrize(
    ("tput", "p99s", "interactive", "expected"),
    [
        ("better", ["worse", "same"], True, "worse for interactive"),
        ("same", ["worse", "same"], True, "worse"),
        ("worse", ["better", "better"], True, "worse"),
        ("worse", ["worse", "same"], True, "worse"),
        ("better", ["same", "n/a"], True, "better"),
        ("same", ["same", "better"], True, "better"),
        ("same", ["same", "same"], True, "same"),
        ("n/a", ["worse"], True, "n/a"),
        ("better", ["n/a", "n/a"], True, "n/a"),
        ("better", ["worse"], False, "better"),  # batch service goes by throughput
        ("same", ["worse"], False, "worse"),  # ... and by the p99 when throughput is the same
        ("same", ["same"], False, "same"),
    ],
)
def test_the_interactive_rule(tput: str, p99s: list[str], interactive: bool, expected: str) -> None:
    verdict, reason = serving_verdict(
        _fc("output tokens/s", tput, 1.2),
        [_fc(f"L{i} p99", c, 1.3) for i, c in enumerate(p99s)],
        interactive=interactive,
    )
    assert verdict == expected, reason
    assert decision.is_worse(verdict) == (expected in ("worse", "worse for interactive"))


def test_the_reasons_name_the_figures_and_what_is_not_stated() -> None:
    wfi = serving_verdict(_fc("output tokens/s", "better", 1.2), [_fc("TTFT p99", "worse", 1.3)])[1]
    assert wfi == (
        "output tokens/s +20.0% (band -4.8%..+5.0%, n=100/100) but "
        "TTFT p99 +30.0% (band -4.8%..+5.0%, n=100/100): "
        "more throughput does not buy back a worse p99"
    )
    na = figure_change("TTFT p99", [1.0], [], note="the file states no TTFT p99")
    assert serving_verdict(_fc("output tokens/s", "same"), [na])[1] == (
        "throughput or every p99 missing on a side (the file states no TTFT p99)"
    )
    unstated = FigureChange(figure="ITL p99", a=1.0, b=2.0, ratio=2.0, band=0.05, change="worse", n_a=3)
    assert decision.describe(unstated) == "ITL p99 +100.0% (band -4.8%..+5.0%, n=3/?)"
    # the band is symmetric on the log scale: its low edge is 1/(1 + band) - 1, not -band; a
    # change of -22 % is beyond a band of +25 % (B/A 0.78 < 1/1.25), and the text says so
    assert decision.band_text(0.25) == "-20.0%..+25.0%"
    lower = decision.judge(1.0, 0.78, math.log(1.25))
    assert lower.change == "worse" and "(band -20.0%..+25.0%" in decision.change_text(lower)


# A migration's compare as orch 12fd743 wrote it into migrate.json (migrate.ab at that commit, inputs
# as in test_an_old_migrate_comparison_still_loads_and_reads_the_same): FigureChange with log_ratio,
# a log-scale band and direction; serving "worse" where the interactive rule now says "worse for
# interactive".
OLD_MIGRATE_COMPARISON = json.loads(
    '{"mode":"interleaved","why_mode":"x","order":["a1","b1"],"collectives":[{"collective":"all_reduce/busbw",'
    '"direction":"worse","flagged_sizes":[1024,2048],"lone_sizes":[],"min_adjacent":2,"sizes":[{"size_bytes":'
    '1024,"n_a":2,"n_b":2,"n_control":2,"control_log_ratio":-0.0100003333533345,"change":{"a":10.049875621120892,'
    '"b":7.049822692805827,"log_ratio":-0.35455779186933833,"band":0.04879016416943201,"direction":"worse"}},'
    '{"size_bytes":2048,"n_a":2,"n_b":2,"n_control":2,"control_log_ratio":-0.004987665582836254,"change":{"a":'
    '20.099751242241776,"b":14.04991103174678,"log_ratio":-0.35809137548088454,"band":0.04879016416943201,'
    '"direction":"worse"}}]}],"serving":{"interactive":true,"throughput":{"a":100.0,"b":130.0,"log_ratio":'
    '0.2623642644674904,"band":0.04879016416943201,"direction":"better"},"p99":{"a":1.0,"b":1.6,"log_ratio":'
    '0.47000362924573563,"band":0.04879016416943201,"direction":"worse"},"direction":"worse","reason":'
    '"p99 latency is worse: worse for interactive service (even with better throughput)"}}'
)


def test_an_old_migrate_comparison_still_loads_and_reads_the_same() -> None:
    old = Comparison.model_validate(OLD_MIGRATE_COMPARISON)
    size = old.collectives[0].sizes[0].change
    assert size.change == "worse" and size.log_ratio == pytest.approx(-0.35455779186933833)
    assert size.log_band == pytest.approx(0.04879016416943201) and size.band == pytest.approx(FLOOR)
    assert old.worse == [  # the lines 12fd743 printed for it
        "all_reduce/busbw worse at sizes 1024, 2048 (busbw B/A -30% at 2048 B; 2 runs of B against 2 runs "
        "of A; the noise band from A against A is -5%..+5%)",
        "serving worse: p99 latency is worse: worse for interactive service (even with better throughput)",
    ]
    # the new code decides the same inputs the same way, and writes one FigureChange
    sizes = [
        SizeSamples(size_bytes=1024, a=[10.0, 10.1], b=[7.0, 7.1], control=[10.0, 9.9]),
        SizeSamples(size_bytes=2048, a=[20.0, 20.2], b=[14.0, 14.1], control=[20.1, 19.9]),
    ]
    new = collective_decision("all_reduce/busbw", sizes)
    assert new.direction == "worse" and new.flagged_sizes == [1024, 2048]
    for n, o in zip(new.sizes, old.collectives[0].sizes, strict=True):
        assert n.change.a == pytest.approx(o.change.a) and n.change.b == pytest.approx(o.change.b)
        assert n.change.band == pytest.approx(o.change.band) and n.change.change == o.change.change
    written = json.loads(new.sizes[0].change.model_dump_json())
    assert "direction" not in written and "log_ratio" not in written and written["change"] == "worse"


NOW = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("no_interruption", "no-interruption"),
        ("not_recovered", "not-recovered"),
        ("not_detected", "not-detected"),
    ],
)
def test_a_recovery_record_with_an_old_outcome_spelling_loads_and_writes_the_one_spelling(
    old: str, new: str
) -> None:
    raw = {
        "fault_id": "f0",
        "fault": "kill_worker",
        "target": "node1",
        "injected_at": NOW.isoformat(),
        "outcome": old,
    }
    rec = RecoveryRecord.model_validate_json(json.dumps(raw))
    assert rec.outcome == new
    assert json.loads(rec.model_dump_json())["outcome"] == new


def test_every_old_spelling_of_no_interruption_reads_as_the_one() -> None:
    rec = RecoveryRecord.model_validate(
        dict(fault_id="f", fault="kill_worker", target="n", injected_at=NOW, verdict="no_interruption")
    )
    res = RecoveryResult.model_validate(dict(fault_id="f", kind="kill-worker", verdict="no_interruption"))
    rule = {"window": 20, "tolerance": 0.5}
    serving = ServingRecovery.model_validate(
        dict(level="c8", rule=rule, pre_fault_n=20, pre_fault_ttft_band_ms=30.0, to_first_failure_s=None,
             to_first_success_s=None, to_steady_s=0.0, outage_s=None, failed=0, aborted=0,
             ttft_during_ms=None, ttft_after_ms=None, status="no-impact")
    )  # fmt: skip
    assert rec.verdict == res.verdict == serving.status == "no-interruption"
    with pytest.raises(ValueError):
        RecoveryRecord.model_validate(
            dict(fault_id="f", fault="k", target="n", injected_at=NOW, outcome="fine")
        )


def test_a_spread_stored_with_old_status_words_counts_them_under_the_one_spelling() -> None:
    stat = {"n": 0}
    spread = RecoverySpread.model_validate(
        dict(repeats=4, statuses={"no-impact": 1, "recovered": 2, "no-interruption": 1},
             to_first_failure_s=stat, to_first_success_s=stat, to_steady_s=stat, outage_s=stat,
             failed=stat, aborted=stat)
    )  # fmt: skip
    assert spread.statuses == {"no-interruption": 2, "recovered": 2}


def test_series_changes_judge_each_point_with_the_pooled_spread_of_the_repeats() -> None:
    a = {("s", "ar", 1): [10.0, 10.1, 9.9], ("s", "ar", 2): [20.0, 20.2, 19.8], ("s", "ar", 4): [0.0]}
    b = {("s", "ar", 1): [8.0, 8.1, 7.9], ("s", "ar", 2): [20.0, 20.1, 19.9], ("s", "ar", 4): [1.0]}
    changes, pooled = decision.series_changes(a, b, repeated=True)
    assert [changes[("s", "ar", s)].change for s in (1, 2, 4)] == ["worse", "same", "n/a"]
    assert changes[("s", "ar", 1)].a == 10.0 and changes[("s", "ar", 1)].ratio == pytest.approx(0.8)
    assert changes[("s", "ar", 4)].b == 1.0 and changes[("s", "ar", 4)].n_a == 0  # busbw 0 has no ratio
    assert pooled > 0


def test_series_changes_without_repeats_take_the_spread_from_size_to_size() -> None:
    smooth = {("s", "ar", 1 << i): [10.0 * (i + 1)] for i in range(6)}
    slower = {key: [v[0] * 0.9] for key, v in smooth.items()}  # B 10% below A at every size, no scatter
    scatter = {key: [v[0] * (0.9 if i % 2 else 1.25)] for i, (key, v) in enumerate(smooth.items())}
    steady, pooled = decision.series_changes(smooth, slower, repeated=False)
    assert pooled == pytest.approx(0.0, abs=1e-12)
    assert {c.change for c in steady.values()} == {"worse"} and {
        round(c.band or 0, 6) for c in steady.values()
    } == {FLOOR}
    noisy, _ = decision.series_changes(smooth, scatter, repeated=False)
    assert {c.change for c in noisy.values()} == {"same"}  # the size-to-size scatter is the noise


ORCH = Path(__file__).resolve().parents[2] / "orchestrator"
WORDS = re.compile(r"""Literal\[[^\]]*["'](?:better|worse)["']""")
OLD_WORDS = re.compile(r"""["'](?:no_interruption|no-impact|not_recovered|not_detected)["']""")


def test_one_direction_literal_and_the_old_recovery_spellings_only_in_models_decision() -> None:
    home = ORCH / "models" / "decision.py"
    assert len(WORDS.findall(home.read_text())) == 1  # Direction; the other words are built on it
    spelled = [
        f"{p.relative_to(ORCH)}:{no}"
        for p in sorted(ORCH.rglob("*.py"))
        if p != home
        for no, line in enumerate(p.read_text().splitlines(), 1)
        if WORDS.search(line) or OLD_WORDS.search(line)
    ]
    assert spelled == [], (
        "better/same/worse is models/decision.py's Direction; old recovery words are read there"
    )


def test_threshold_rules_fail_strictly_beyond_their_limit() -> None:
    assert decision.below(0.99, 1.0) and not decision.below(1.0, 1.0)
    assert decision.above(5.01, 5.0) and not decision.above(5.0, 5.0)  # a ceiling (latency, errors)
    assert decision.below_share(0.49, 1.0, 0.5) and not decision.below_share(0.5, 1.0, 0.5)
    # efficiency 0.80 against a limit of 0.9 with a band of +-10%: 0.9 / 1.1 = 0.818 -> beyond it
    assert decision.beyond_band_below(0.80, 0.9, 0.10)
    assert not decision.beyond_band_below(0.85, 0.9, 0.10)  # under the limit, within the band


def test_a_single_must_reach_the_tolerance_or_its_kinds_noise_band() -> None:
    # quiet: fewer than 2 figures or no spread -> 1 - tolerance
    assert decision.single_ratio([1.0], 0.2) == pytest.approx(0.8)
    assert decision.single_ratio([1.0, 1.0, 1.0], 0.2) == pytest.approx(0.8)
    # noisy: log figures -0.2..0.2 in steps of 0.1 have MAD 0.1 -> exp(-3 x 1.4826 x 0.1) = 0.64
    figures = [math.exp(x) for x in (-0.2, -0.1, 0.0, 0.1, 0.2)]
    assert decision.single_ratio(figures, 0.2) == pytest.approx(math.exp(-3 * 1.4826 * 0.1))
    assert decision.single_ratio(figures, 0.5) == pytest.approx(0.5)  # the tolerance is the least band
