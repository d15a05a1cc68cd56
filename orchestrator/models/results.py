"""One row of a collective benchmark, as nccl-tests prints it and as collbench emits it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel

Collective = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv"
]
COLLECTIVES: tuple[Collective, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "sendrecv",
)


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
