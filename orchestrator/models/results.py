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


class PlaceResult(StrictModel):
    """Timing of one placement (out-of-place or in-place) of one row."""

    time_us: float = Field(ge=0)
    algbw_gbs: float = Field(ge=0)
    busbw_gbs: float = Field(ge=0)
    wrong: int | None = Field(default=None, ge=0, description="#wrong; None where the tool printed N/A")


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
