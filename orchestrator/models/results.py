"""One row of a collective benchmark, as nccl-tests prints it and as collbench emits it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel

Collective = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv"
]
PlanCollective = Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"]
"""What a plan may run (collbench runs these; a parsed nccl-tests log may also hold `reduce`)."""
COLLECTIVES: tuple[PlanCollective, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "sendrecv",
)


@dataclass(frozen=True)
class Layout:
    """Buffer sizes of one row, in elements, as nccl-tests computes them."""

    count: int  # the count column
    send: int
    recv: int
    size_bytes: int  # the size column


def layout(collective: Collective, size_bytes: int, elt: int, nranks: int) -> Layout:
    """nccl-tests' buffer arithmetic for one requested size (bytes)."""
    count = size_bytes // elt
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        base = (count // nranks) & ~(16 // elt - 1)
        if collective == "all_gather":
            send, recv = base, base * nranks
        elif collective == "reduce_scatter":
            send, recv = base * nranks, base
        else:
            send = recv = base * nranks
        return Layout(count=base, send=send, recv=recv, size_bytes=max(send, recv) * elt)
    return Layout(count=count, send=count, recv=count, size_bytes=count * elt)


def run_size(collective: Collective, size_bytes: int, nranks: int, elt: int = 4) -> int:
    """The size (bytes) a row for a requested size really has at nranks: what the size column says.

    all_gather, reduce_scatter and alltoall round down to whole 16-byte blocks per rank (1024 B
    at 3 ranks runs as 1008 B); the others round down to whole elements. Pure: the verdict and
    plan validation use it to match a threshold's size to the row it means.
    """
    return layout(collective, size_bytes, elt, nranks).size_bytes
class Percentiles(StrictModel):
    """A distribution summary that carries its n (orchestrator.metrics.percentiles makes it).

    A percentile is None where n is too small to show it: p95 under 20 samples, p99 under 100.
    """

    n: int = Field(ge=0)
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    log_sigma: float | None = Field(
        default=None, description="1.4826 x MAD of ln(value): the robust relative spread of the samples"
    )


class PlaceResult(StrictModel):
    """Timing of one placement (out-of-place or in-place) of one row."""

    time_us: float = Field(ge=0)
    algbw_gbs: float = Field(ge=0)
    busbw_gbs: float = Field(ge=0)
    wrong: int | None = Field(default=None, ge=0, description="#wrong; None where the tool printed N/A")
    latency_us: Percentiles | None = Field(
        default=None,
        description="per-iteration time (µs, slowest rank of each iteration) over the timed iterations; "
        "collbench only (nccl-tests prints the average alone)",
    )


class CollRow(StrictModel):
    """One message size of one collective: the unit every parser and workload produces.

    size_bytes is the size column of nccl-tests (bytes per rank as nccl-tests counts them).
    """

    collective: Collective
    size_bytes: int = Field(ge=0)
    count: int = Field(ge=0)
    dtype: str
    redop: str | None = None
    root: int | None = None
    nranks: int = Field(ge=1)
    out_of_place: PlaceResult
    in_place: PlaceResult | None = None


Verdict = Literal["pass", "fail", "infra", "skipped"]


Scaling = Literal["intra-node", "inter-node"]


class CollSummary(StrictModel):
    """One collective of one step, at the largest size measured."""

    collective: Collective
    size_bytes: int
    busbw_gbs: float
    algbw_gbs: float
    wrong: int = 0
    efficiency: float | None = Field(default=None, description="busbw / busbw of the reference step")
    scaling: Scaling | None = Field(
        default=None, description="which scaling the efficiency measures (see apply_efficiency)"
    )
    reference: str | None = Field(default=None, description="id of the step the efficiency is against")
    reference_busbw_gbs: float | None = None
    noise: float | None = Field(
        default=None, description="relative noise band of the efficiency (e.g. 0.05 = +-5%)"
    )
    latency_us: Percentiles | None = Field(
        default=None, description="per-iteration time at this size, out-of-place (collbench only)"
    )
    line_fraction: float | None = Field(
        default=None, description="busbw / the fabric's line rate (orch_fabric_gbps), multi-node steps only"
    )

    def reference_label(self) -> str:
        """'inter-node vs n2xg1', 'intra-node (reference)' or '-' (for tables and reports)."""
        if self.scaling is None or self.reference is None:
            return "-"
        return f"{self.scaling} vs {self.reference}"
