"""The A/B decision of a migration: an interleaved schedule and the rules that flag a change.

Schedule. A and B (and an A-against-A control arm, a second series of A runs) take turns in
rounds, the order reversed every other round: A B A' | A' B A | A B A' … (a serpentine, the ABBA
design of A/B measurements). Over an even number of rounds every arm has the same mean position
in time, so a drift of the room, the fabric or the neighbours that grows steadily over the runs
weighs on every arm alike and cancels out of B - A. Run all A then all B, and the same drift is
all in B - A.

Band and rules: metrics/decision.py, the one decision module (the band, the adjacent-sizes rule,
the interactive rule), with its constants FLOOR, K and MIN_ADJACENT. Each arm's figures are
compared on the log scale: sigma = 1.4826 x MAD of the residuals of all arms around their own medians, se of
median(B) - median(A), band = max(ln(1 + floor), k x se). The control arm widens the band to at
least the gap it shows, |median(A') - median(A)|: a change smaller than what A against A shows is
not a change.

A figure is better or worse only beyond its band. For collectives a change counts only where it
holds, in the same direction, at `min_adjacent` (2) or more adjacent message sizes; a lone size
beyond the band is reported, not flagged. For serving, the interactive rule: better throughput
with a worse p99 is "worse for interactive", a worse p99 or throughput otherwise "worse"; batch
service goes by throughput, and by p99 only when throughput is the same.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from orchestrator.errors import ConfigError
from orchestrator.metrics import decision
from orchestrator.metrics.decision import FLOOR, MIN_ADJACENT, K
from orchestrator.models.decision import FigureChange
from orchestrator.models.migrate import (
    Arm,
    CollectiveDecision,
    PlanRun,
    ServingDecision,
    ServingFigureDecision,
    ServingFigures,
    ServingLevelDecision,
    SizeChange,
    SizeSamples,
    Slot,
)


def _pick(stack: str, capable: Mapping[str, Collection[str]], both: set[str], n: int) -> list[str]:
    """n nodes that can run `stack`: those that can run both stacks first (B then runs on A's
    hardware), then by name."""
    able = [node for node, stacks in capable.items() if stack in stacks]
    able.sort(key=lambda x: (x not in both, x))
    if len(able) < n:
        raise ConfigError(
            f"{len(able)} node(s) can run stack {stack!r} ({', '.join(able) or 'none'}); a run needs {n}",
            hint="provision the stack on more nodes, or run fewer nodes per run",
        )
    return able[:n]


def interleaved_schedule(
    a: str,
    b: str,
    capable: Mapping[str, Collection[str]],
    *,
    rounds: int,
    nodes_per_run: int = 1,
    control: bool = True,
) -> list[Slot]:
    """The runs of an A/B comparison in time order: `rounds` rounds of A, B (and the control A'),
    the order reversed every other round.

    capable: node -> the stacks it can run now (those provisioned on it). Raises ConfigError when
    rounds or nodes_per_run is below 1 or too few nodes can run a stack.
    """
    if rounds < 1 or nodes_per_run < 1:
        raise ConfigError(f"rounds ({rounds}) and nodes per run ({nodes_per_run}) must be at least 1")
    both = {node for node, stacks in capable.items() if a in stacks and b in stacks}
    nodes = {a: _pick(a, capable, both, nodes_per_run), b: _pick(b, capable, both, nodes_per_run)}
    arms: list[Arm] = ["A", "B", "A-control"] if control else ["A", "B"]
    slots: list[Slot] = []
    for r in range(rounds):
        for arm in arms if r % 2 == 0 else arms[::-1]:
            stack = b if arm == "B" else a
            slots.append(Slot(order=len(slots), round=r, arm=arm, stack=stack, nodes=nodes[stack]))
    return slots


def sample_change(
    a: Sequence[float],
    b: Sequence[float],
    control: Sequence[float] = (),
    *,
    higher_is_better: bool = True,
    floor: float = FLOOR,
    k: float = K,
) -> tuple[FigureChange, float | None]:
    """Repeats of A, B and the control arm: the change of B's median against A's (judged by
    decision.figure_change, the control widening the band), and the control's log gap
    ln(median(A') / median(A)) (None without a control).

    Raises ValueError when A or B has no positive figure.
    """
    change = decision.figure_change(
        None, a, b, higher_is_better=higher_is_better, control=control, floor=floor, k=k
    )
    if change.change == "n/a":
        raise ValueError("A and B need at least one positive figure each")
    return change, decision.control_gap(a, control)


def collective_decision(
    collective: str,
    sizes: Sequence[SizeSamples],
    *,
    higher_is_better: bool = True,
    floor: float = FLOOR,
    k: float = K,
    min_adjacent: int = MIN_ADJACENT,
) -> CollectiveDecision:
    """A collective's verdict over its message sizes: a change is flagged only where it holds
    beyond the band at min_adjacent or more adjacent sizes, in the same direction; worse wins over
    better when both are flagged (decision.adjacent, decision.overall). Raises ValueError as
    sample_change does."""
    ordered = sorted(sizes, key=lambda s: s.size_bytes)
    changes: list[SizeChange] = []
    for s in ordered:
        ch, gap = sample_change(s.a, s.b, s.control, higher_is_better=higher_is_better, floor=floor, k=k)
        changes.append(
            SizeChange(
                size_bytes=s.size_bytes, n_a=len(s.a), n_b=len(s.b), n_control=len(s.control),
                control_log_ratio=gap, change=ch,
            )
        )  # fmt: skip
    stands = decision.adjacent([c.change.change for c in changes], min_adjacent)
    flagged = [c for c, ok in zip(changes, stands, strict=True) if ok]
    lone = [c for c, ok in zip(changes, stands, strict=True) if not ok and c.change.change != "same"]
    return CollectiveDecision(
        collective=collective,
        direction=decision.overall(c.change.change for c in flagged),
        flagged_sizes=[c.size_bytes for c in flagged],
        lone_sizes=[c.size_bytes for c in lone],
        min_adjacent=min_adjacent,
        sizes=changes,
    )


def serving_decision(throughput: FigureChange, p99: FigureChange, *, interactive: bool) -> ServingDecision:
    """A serving plan's verdict from its throughput change (higher is better) and its p99 latency
    change (lower is better), each already judged against its band (decision.judge): the
    interactive rule, or the batch rule (decision.serving_verdict)."""
    direction, reason = decision.serving_verdict(throughput, [p99], interactive=interactive)
    return ServingDecision(
        interactive=interactive, throughput=throughput, p99=p99, direction=direction, reason=reason
    )


SERVING_FIGURES: tuple[tuple[str, str, str | None, str | None, bool], ...] = (
    ("output_tokens_per_s", "output_tokens_per_s", None, "tput", True),
    ("ttft_p99", "ttft_p99_ms", "ttft_n", "ttft", False),
    ("itl_p99", "itl_p99_ms", "itl_n", "itl", False),
    ("tpot_p99", "tpot_p99_ms", "tpot_n", "tpot", False),
    ("slo_attainment", "slo_attainment", None, None, True),
)
"""(figure, ServingFigures field, its n's field (None: n is the runs), its key in the run's own se
(ServingFigures.log_se; None: the spread of the runs only), higher is better)."""
RATES = ("error_rate", "abort_rate", "timeout_rate", "truncated_rate")
"""The failure rates set beside each level's decision, not judged (timeouts are a part of the
aborts, truncated streams a part of the errors: models/serving_results.FailureReason)."""


def _level(runs: Sequence[PlanRun], key: tuple[str, str]) -> list[ServingFigures]:
    return [f for r in runs for f in r.serving if (f.step, f.level) == key]


def serving_levels(
    a: Sequence[PlanRun],
    b: Sequence[PlanRun],
    control: Sequence[PlanRun],
    *,
    detect: Mapping[str, float],
    interactive: bool = True,
) -> list[ServingLevelDecision]:
    """Every serving step and level that A and B both measured: each figure of B against A with the
    A-against-A band (decision.figure_change, the control widening the band, and at least each
    run's own se of the figure, as compare's metrics/serving.compare_level: a p99 on n=120 rests on
    its top few samples, and A against A on the lab moved TPOT p99 by 9 % where two runs a side had
    set the band at +-6 %), blind where the band
    is wider than the plan's `detect` for it (decision.blind), and the level's verdict by the
    interactive rule (decision.serving_verdict over throughput and the p99s)."""
    keys = list(dict.fromkeys((f.step, f.level) for r in a for f in r.serving))
    out = []
    for key in keys:
        fa, fb, fc = _level(a, key), _level(b, key), _level(control, key)
        if not fb:
            continue
        figures: list[ServingFigureDecision] = []
        for name, attr, n_attr, se_attr, higher in SERVING_FIGURES:

            def vals(fs: list[ServingFigures], attr: str = attr) -> list[float]:
                return [v for f in fs if isinstance(v := getattr(f, attr), float | int)]

            def n(fs: list[ServingFigures], n_attr: str | None = n_attr) -> int:
                return sum(getattr(f, n_attr) for f in fs) if n_attr else len(vals(fs))

            run_se = [v for f in (*fa, *fb, *fc) if se_attr and (v := f.log_se.get(se_attr)) is not None]
            ch = decision.figure_change(name, vals(fa), vals(fb), higher_is_better=higher, control=vals(fc),
                                        run_se=run_se, n_a=n(fa), n_b=n(fb))  # fmt: skip
            limit = detect.get(name)
            verdict = "blind" if decision.blind(ch, limit) else ch.change
            figures.append(ServingFigureDecision(figure=name, change=ch, detect=limit, verdict=verdict))
        by = {f.figure: f.change for f in figures}
        p99s = [by["ttft_p99"], by["itl_p99"], by["tpot_p99"]]
        direction, reason = decision.serving_verdict(by["output_tokens_per_s"], p99s, interactive=interactive)
        blind = [
            f"{f.figure}: the A-against-A band "
            + (decision.band_text(f.change.band) if f.change.band is not None else "n/a")
            + f" is wider than detect {f.detect:.0%}"
            for f in figures
            if f.verdict == "blind" and f.detect is not None
        ]
        rates = {r: [getattr(f, r) for f in (*fa, *fb)] for r in RATES}
        out.append(ServingLevelDecision(step=key[0], level=key[1], figures=figures, direction=direction,
                                        reason=reason, blind=blind, rates=rates))  # fmt: skip
    return out
