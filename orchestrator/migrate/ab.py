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
    ServingDecision,
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
