"""Slow nodes from a node-pair matrix (sendrecv latency, or any figure where larger is worse).

Each node's score is the median of its pair figures: one slow partner (a bad link, or a slow node
on the other end) moves the median of a node with three or more partners by at most one order
statistic, so only a node that is slow with most partners stands out. A node is a straggler when
its score exceeds

    bound = centre + max(k x sigma, floor x centre)

where centre is the median of the scores and sigma = 1.4826 x MAD of the scores (metrics.noise,
the estimator compare and history use). The floor keeps a near-perfectly uniform cluster (MAD
close to 0) from convicting a node over noise; k = 3 and floor = 5 % by default. This is the
rule of Google's cluster-health-scanner (a latency bound) made robust: no fixed number, the
cluster's own spread. Sampled matrices (a bounded set of pairs on a large cluster) work the same
way as long as each node has three or more partners.

The pair-rounds the matrix is measured in (round_robin: every pair once, in rounds of disjoint
pairs) are here too, for `orch stragglers` and for perftest diagnostics over node pairs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from pydantic import Field

from orchestrator.metrics.noise import mad_sigma
from orchestrator.models.base import StrictModel
from orchestrator.models.requests import MIN_PARTNERS
from orchestrator.models.run import StepResult

Pair = tuple[str, str]
DEFAULT_K = 3.0
DEFAULT_FLOOR = 0.05


class Straggler(StrictModel):
    """A node named slow, with the numbers that convicted it."""

    node: str
    score: float = Field(description="the median of its pair figures")
    excess: float | None = Field(description="score / centre (None when the centre is 0)")
    pairs: dict[str, float] = Field(description="partner -> pair figure (median of both directions)")


class StragglerReport(StrictModel):
    """The rule's numbers and its verdict over one matrix."""

    metric: str
    k: float
    floor: float
    centre: float = Field(description="median of the node scores")
    sigma: float = Field(description="1.4826 x MAD of the node scores")
    bound: float = Field(description="centre + max(k x sigma, floor x centre)")
    scores: dict[str, float] = Field(description="node -> median of its pair figures")
    partners: dict[str, int] = Field(description="node -> number of partners measured")
    stragglers: list[Straggler]
    too_few: list[str] = Field(
        default_factory=list, description=f"nodes with under {MIN_PARTNERS} partners: not judged"
    )


def pair_figures(matrix: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """One figure per unordered pair (sorted names): the median of the directions measured.

    Raises ValueError on a pair of a node with itself or a negative figure.
    """
    both: dict[tuple[str, str], list[float]] = {}
    for (a, b), v in matrix.items():
        if a == b:
            raise ValueError(f"pair {a}-{b}: a node with itself")
        if v < 0:
            raise ValueError(f"pair {a}-{b}: negative figure {v}")
        key = (a, b) if a < b else (b, a)
        both.setdefault(key, []).append(v)
    return {k: statistics.median(vs) for k, vs in both.items()}


def stragglers(
    matrix: Mapping[tuple[str, str], float],
    *,
    metric: str = "latency_us",
    k: float = DEFAULT_K,
    floor: float = DEFAULT_FLOOR,
) -> StragglerReport:
    """Judge every node of a pair matrix by the robust rule of the module doc.

    Raises ValueError on a bad pair (see pair_figures) or when fewer than three nodes can be judged.
    """
    pairs = pair_figures(matrix)
    by_node: dict[str, dict[str, float]] = {}
    for (a, b), v in pairs.items():
        by_node.setdefault(a, {})[b] = v
        by_node.setdefault(b, {})[a] = v
    judged = {n: p for n, p in by_node.items() if len(p) >= MIN_PARTNERS}
    if len(judged) < 3:
        raise ValueError(
            f"{len(judged)} nodes have {MIN_PARTNERS}+ partners: too few to tell slow from usual"
        )
    scores = {n: statistics.median(p.values()) for n, p in sorted(judged.items())}
    centre = statistics.median(scores.values())
    sigma = mad_sigma(scores.values()) or 0.0
    bound = centre + max(k * sigma, floor * centre)
    slow = [
        Straggler(node=n, score=s, excess=s / centre if centre > 0 else None, pairs=dict(judged[n]))
        for n, s in scores.items()
        if s > bound
    ]
    slow.sort(key=lambda x: -x.score)
    return StragglerReport(
        metric=metric, k=k, floor=floor, centre=centre, sigma=sigma, bound=bound, scores=scores,
        partners={n: len(p) for n, p in sorted(by_node.items())}, stragglers=slow,
        too_few=sorted(set(by_node) - set(judged)),
    )  # fmt: skip


def pair_matrix(steps: Sequence[StepResult]) -> tuple[str, dict[tuple[str, str], float]]:
    """The node-pair matrix of a run's 2-node steps: (metric, (a, b) -> figure, larger is worse).

    The collective is sendrecv when a 2-node step measured it, else the first collective of the
    first 2-node step. The figure is the per-iteration time at the largest size, out-of-place: the
    median of the slowest rank's iterations where collbench gave them, else size / algbw. Steps
    without a figure (failed, not run) are left out: their pair reads "not measured". ("", {}) when
    the run has no 2-node step with a figure.
    """
    pairs = [s for s in steps if s.step.nnodes == 2 and len(set(s.step.nodes)) == 2 and s.summary]
    if not pairs:
        return "", {}
    colls = {c for s in pairs for c in s.summary}
    coll = "sendrecv" if "sendrecv" in colls else next(iter(pairs[0].summary))
    matrix: dict[tuple[str, str], float] = {}
    for s in pairs:
        c = s.summary.get(coll)
        if c is None:
            continue
        lat = c.latency_us.p50 if c.latency_us is not None else None
        if lat is None and c.algbw_gbs > 0:
            lat = c.size_bytes / (c.algbw_gbs * 1e3)
        if lat is not None:
            a, b = s.step.nodes
            matrix[(a, b)] = lat
    return f"{coll} latency_us", matrix


def split_by_kind(
    matrix: Mapping[tuple[str, str], float], kind_of: Mapping[str, str]
) -> tuple[dict[str, dict[tuple[str, str], float]], list[tuple[str, str]]]:
    """The matrix per kind of node (a node missing from kind_of is of kind ''), and the pairs
    across kinds, left out: a node is compared with nodes of its own kind only (a slower GPU
    model is not a straggler among faster ones)."""
    per: dict[str, dict[tuple[str, str], float]] = {}
    across: list[tuple[str, str]] = []
    for (a, b), v in matrix.items():
        ka, kb = kind_of.get(a, ""), kind_of.get(b, "")
        if ka != kb:
            across.append((a, b))
        else:
            per.setdefault(ka, {})[(a, b)] = v
    return per, sorted(across)


def round_robin(nodes: Sequence[str]) -> list[list[Pair]]:
    """Every pair of nodes exactly once, in rounds of disjoint pairs (the circle method): N-1
    rounds of N/2 pairs for an even N, N rounds of (N-1)/2 pairs for an odd N. Pairs keep the
    order of `nodes` (the earlier node first)."""
    if len(set(nodes)) != len(nodes):
        raise ValueError("a node is listed twice")
    pos = {n: i for i, n in enumerate(nodes)}
    ring: list[str | None] = [*nodes, None] if len(nodes) % 2 else list(nodes)
    n = len(ring)
    rounds: list[list[Pair]] = []
    for _ in range(n - 1):
        pairs: list[Pair] = []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if pos[a] < pos[b] else (b, a))
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [r for r in rounds if r]
