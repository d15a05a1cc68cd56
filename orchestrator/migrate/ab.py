"""The A/B decision of a migration: an interleaved schedule and the rules that flag a change.

Schedule. A and B (and an A-against-A control arm, a second series of A runs) take turns in
rounds, the order reversed every other round: A B A' | A' B A | A B A' … (a serpentine, the ABBA
design of A/B measurements). Over an even number of rounds every arm has the same mean position
in time, so a drift of the room, the fabric or the neighbours that grows steadily over the runs
weighs on every arm alike and cancels out of B - A. Run all A then all B, and the same drift is
all in B - A.

Band. Each arm's figures are compared on the log scale through metrics/noise.py (the one noise
estimator): sigma = 1.4826 x MAD of the residuals of all arms around their own medians, se of
median(B) - median(A), band = max(ln(1 + floor), k x se). The control arm widens the band to at
least the gap it shows, |median(A') - median(A)|: a change smaller than what A against A shows is
not a change.

Rules. A figure is better or worse only beyond its band. For collectives a change counts only
where it holds, in the same direction, at `min_adjacent` (2) or more adjacent message sizes; a lone
size beyond the band is reported, not flagged. For serving, "better throughput but worse p99 is
worse for interactive": interactive service is worse when its p99 latency is, whatever the
throughput; batch service goes by throughput, and by p99 only when throughput is the same.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence

from orchestrator.errors import ConfigError
from orchestrator.metrics import noise
from orchestrator.models.migrate import (
    Arm,
    CollectiveDecision,
    Direction,
    FigureChange,
    ServingDecision,
    SizeChange,
    SizeSamples,
    Slot,
)
from orchestrator.report.compare import FLOOR, MIN_ADJACENT, K


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


def judge(a: float, b: float, band: float, *, higher_is_better: bool = True) -> FigureChange:
    """One figure of A against B, given the band (half-width on the log scale, >= 0).

    Raises ValueError when a figure is not positive (a ratio needs both).
    """
    if a <= 0 or b <= 0:
        raise ValueError(f"figures must be positive to compare (A={a}, B={b})")
    d = noise.log_values([b])[0] - noise.log_values([a])[0]
    sign = 1.0 if higher_is_better else -1.0
    return FigureChange(a=a, b=b, log_ratio=d, band=band, direction=noise.direction(sign * d, band))


def sample_change(
    a: Sequence[float],
    b: Sequence[float],
    control: Sequence[float] = (),
    *,
    higher_is_better: bool = True,
    floor: float = FLOOR,
    k: float = K,
) -> tuple[FigureChange, float | None]:
    """Repeats of A, B and the control arm: the change of B's median against A's, and the control's
    log gap ln(median(A') / median(A)) (None without a control).

    Raises ValueError when A or B has no positive figure.
    """
    la, lb, lc = noise.log_values(a), noise.log_values(b), noise.log_values(control)
    if not la or not lb:
        raise ValueError("A and B need at least one positive figure each")
    sigma = noise.mad_sigma(noise.residuals([la, lb, lc])) or 0.0
    half = noise.band(noise.difference_se(sigma, len(la), len(lb)), floor, k)
    gap = statistics.median(lc) - statistics.median(la) if lc else None
    half = max(half, abs(gap) if gap is not None else 0.0)
    ma, mb = math.exp(statistics.median(la)), math.exp(statistics.median(lb))
    change = judge(ma, mb, half, higher_is_better=higher_is_better)
    return change, gap


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
    better when both are flagged. Raises ValueError as sample_change does."""
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
    dirs = [c.change.direction for c in changes]
    flagged: list[SizeChange] = []
    lone: list[SizeChange] = []
    for c, length in zip(changes, noise.run_lengths(dirs), strict=True):
        if c.change.direction != "same":
            (flagged if length >= min_adjacent else lone).append(c)
    found = {c.change.direction for c in flagged}
    direction: Direction = "worse" if "worse" in found else "better" if "better" in found else "same"
    return CollectiveDecision(
        collective=collective,
        direction=direction,
        flagged_sizes=[c.size_bytes for c in flagged],
        lone_sizes=[c.size_bytes for c in lone],
        min_adjacent=min_adjacent,
        sizes=changes,
    )


def serving_decision(throughput: FigureChange, p99: FigureChange, *, interactive: bool) -> ServingDecision:
    """A serving plan's verdict from its throughput change (higher is better) and its p99 latency
    change (lower is better), each already judged against its band (see judge)."""
    t, p = throughput.direction, p99.direction
    if interactive:
        if p == "worse":
            out: Direction = "worse"
            why = "p99 latency is worse: worse for interactive service" + (
                " (even with better throughput)" if t == "better" else ""
            )
        elif t == "worse":
            out, why = "worse", "throughput is worse"
        elif "better" in (t, p):
            out, why = (
                "better",
                "better "
                + " and ".join(n for n, d in (("throughput", t), ("p99 latency", p)) if d == "better"),
            )
        else:
            out, why = "same", "throughput and p99 latency within their bands"
    elif t != "same":
        out, why = t, f"throughput is {t} (batch service goes by throughput)"
    else:
        out = p
        why = "throughput within its band; p99 latency " + ("within its band" if p == "same" else f"is {p}")
    return ServingDecision(interactive=interactive, throughput=throughput, p99=p99, direction=out, reason=why)
