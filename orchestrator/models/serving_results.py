"""What a serving step measures: one record per request (the raw log), and the figures of a load
level derived from those records (orchestrator.metrics.serving).

A RequestRecord is written by the load generator (orchestrator.workloads.loadgen) as one JSON line
when its request ends, in the run directory; every summary is rebuilt from those lines. Times are
wall-clock seconds since the epoch, all taken from one anchor plus the generator's monotonic clock,
so differences between them are monotonic durations.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.names import Name
from orchestrator.models.results import Percentiles, Verdict
from orchestrator.models.serving import ServingStep

RequestStatus = Literal["ok", "error", "aborted"]
"""ok: the stream ended normally; error: HTTP or connection error, bad stream, or a request the
client could not send (its in-flight bound); aborted: timed out, or cancelled when the level stopped."""


class RequestRecord(StrictModel):
    """One request, as the load generator saw it."""

    id: int = Field(ge=0, description="request number within the level, warm-up first")
    level: str = Field(description="the load level: c4 (4 in flight) or r0.5 (Poisson, 0.5 requests/s)")
    warmup: bool = Field(default=False, description="a warm-up request: written, never counted")
    server: str = Field(description="the node (or name) of the engine that served it")
    send: float = Field(description="when the request was sent")
    first_token: float | None = Field(default=None, description="arrival of the first streamed token")
    token_times: list[float] = Field(
        default_factory=list, description="arrival of every streamed chunk with text, the first included"
    )
    end: float = Field(description="when the response ended (or the request failed or was aborted)")
    status: RequestStatus
    http_status: int | None = None
    error: str | None = Field(default=None, description="what went wrong, one line (at most 300 characters)")
    input_tokens: int = Field(
        ge=0, description="prompt tokens: the server's usage figure, else the requested count"
    )
    output_tokens: int = Field(
        ge=0, description="completion tokens: the server's usage figure, else the chunk count"
    )
    requested_output_tokens: int = Field(ge=0, description="max_tokens of the request")
    usage_reported: bool = Field(default=False, description="the token counts came from the server's usage")


class SloCheck(StrictModel):
    """One SLO at one level: its limit, the level's p99 and n, and whether p99 is within it."""

    metric: Literal["ttft", "tpot", "e2e"]
    limit_ms: float
    p99_ms: float | None = Field(description="None when n < 100 (p99 not defined)")
    n: int
    met: bool | None = Field(description="None when the p99 is not defined")


class LevelSummary(StrictModel):
    """The figures of one load level of one serving step, from its counted records."""

    level: str
    n: int = Field(ge=0, description="counted requests (warm-up excluded)")
    ok: int = Field(ge=0)
    errors: int = Field(ge=0)
    aborted: int = Field(ge=0)
    duration_s: float = Field(ge=0, description="first counted send to last counted end")
    ttft_ms: Percentiles = Field(description="time to first token, successful requests")
    itl_ms: Percentiles = Field(
        description="gaps between consecutive token arrivals, all successful requests"
    )
    tpot_ms: Percentiles = Field(description="(end - first token) / (output tokens - 1), per request")
    e2e_ms: Percentiles = Field(description="end - send, successful requests")
    input_tokens_per_s: float | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = Field(default=None, description="successful requests per second")
    error_rate: float | None = Field(default=None, description="errors / n")
    abort_rate: float | None = Field(default=None, description="aborted / n")
    goodput: float | None = Field(
        default=None, description="share of the n counted requests that succeeded and met every SLO"
    )
    slos: list[SloCheck] = Field(default_factory=list)
    output_tokens: int = Field(default=0, ge=0, description="output tokens of successful requests")
    servers: dict[str, int] = Field(default_factory=dict, description="counted requests per server")
    p99_log_se: dict[str, float | None] = Field(
        default_factory=dict,
        description="per metric (ttft, itl, tpot, e2e): standard error of ln p99 from the order statistics "
        "around it (None below n = 100); the noise of one run's p99 in compare",
    )


class ServingCost(StrictModel):
    """Cost of a level from a price per node-hour; failed requests cost time and earn nothing."""

    price_per_node_hour: float = Field(gt=0)
    nodes: int = Field(ge=1)
    duration_s: float = Field(ge=0)
    total: float = Field(ge=0, description="price x nodes x duration")
    ok: int = Field(ge=0, description="successful requests (the divisor per request)")
    output_tokens: int = Field(ge=0, description="output tokens of successful requests (the divisor per 1M)")
    per_request: float | None = Field(description="None when no request succeeded")
    per_million_output_tokens: float | None = Field(description="None when no token was produced")
    source: str | None = Field(
        default=None,
        description="where the price came from: the plan's price_per_node_hour, or the inventory's "
        "orch_gpu_hour_cost x GPUs per node",
    )


InteractiveVerdict = Literal["better", "same", "worse", "worse for interactive", "n/a"]


class FigureChange(StrictModel):
    """One figure of B against A at one level: the ratio, the noise band and the call."""

    figure: str = Field(description="e.g. output tokens/s, TTFT p99")
    a: float | None
    b: float | None
    ratio: float | None = Field(description="B / A")
    band: float | None = Field(description="relative half-width of 'same', e.g. 0.12 = +-12%")
    change: Literal["better", "same", "worse", "n/a"]
    n_a: int = Field(description="samples behind A's figure (requests, or runs for throughput)")
    n_b: int


class ServingComparison(StrictModel):
    """B against A at one load level, with the interactive rule applied (metrics.serving)."""

    level: str
    verdict: InteractiveVerdict
    throughput: FigureChange
    latency: list[FigureChange]
    reason: str
    step: Name | None = None


EngineHealth = Literal["healthy", "timeout", "exited", "not started", "external"]
"""healthy: the health endpoint answered 200 within the bound; timeout: it did not; exited: the
engine's job ended before it answered; not started: the job could not be submitted; external:
orch does not start the engine (its URL answered)."""


class EngineRun(StrictModel):
    """One engine of a serving step (one replica, on its first node) as orch started and stopped it."""

    node: str = Field(description="the inventory node (for engine: external, 'external')")
    url: str = Field(description="the base URL the load generator sent requests to")
    argv: list[str] = Field(default_factory=list, description="the engine's command (none for external)")
    job_id: str | None = None
    log: str | None = Field(default=None, description="its log, relative to the run directory")
    health: EngineHealth = "not started"
    load_to_health_s: float | None = Field(
        default=None, description="model load time: submitted to the health endpoint's first 200"
    )
    load_to_first_answer_s: float | None = Field(
        default=None, description="model load time: submitted to the end of its first successful request"
    )
    job_state: str | None = Field(default=None, description="the job's state once orch stopped it")


class ServingLevelResult(StrictModel):
    """One load level of a serving step: the step's figures, each node's, and the cost."""

    level: str
    records: str = Field(description="the level's records file, relative to the run directory")
    summary: LevelSummary | None = Field(description="None when no counted request was recorded")
    per_node: dict[str, LevelSummary] = Field(
        default_factory=dict, description="the figures of the requests each replica served"
    )
    cost: ServingCost | None = None


class ServingStepResult(StrictModel):
    """A serving step's result: its engines, its levels, its verdict (steps/<id>/serving.json)."""

    step: ServingStep
    verdict: Verdict = "skipped"
    reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    engines: list[EngineRun] = Field(default_factory=list)
    levels: list[ServingLevelResult] = Field(default_factory=list)
    wall_s: float | None = None
