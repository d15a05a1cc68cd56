"""What a serving step measures: one record per request (the raw log), and the figures of a load
level derived from those records (orchestrator.metrics.serving).

A RequestRecord is written by the load generator (orchestrator.workloads.loadgen) as one JSON line
when its request ends, in the run directory; every summary is rebuilt from those lines. Times are
wall-clock seconds since the epoch, all taken from one anchor plus the generator's monotonic clock,
so differences between them are monotonic durations.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.cost import CostAtRate
from orchestrator.models.decision import FigureChange, InteractiveVerdict, QualityJudgement
from orchestrator.models.names import Name
from orchestrator.models.quality import OutputFigures
from orchestrator.models.results import Percentiles, Verdict
from orchestrator.models.serving import CapacitySearch, ServingStep
from orchestrator.models.serving_recovery import EngineRestart, ServingFaultResult
from orchestrator.models.telemetry import LevelPower

RequestStatus = Literal["ok", "error", "aborted"]
"""ok: the stream ended normally; error: HTTP or connection error, bad stream, or a request the
client could not send (its in-flight bound); aborted: timed out, or cancelled when the level stopped."""

FailureReason = Literal["timeout", "cancelled", "truncated", "http", "refused", "connection", "protocol"]
"""Why a request did not succeed (a record's `reason`; its status says error or aborted):
- timeout (aborted): connect, a read, or the whole request past the request timeout;
- cancelled (aborted): the level stopped (LoadGenerator.stop) while it was in flight;
- truncated (error): the answer stream ended before the engine said it was complete: no
  finish_reason (with or without `data: [DONE]`), a finish_reason other than stop/length/tool_calls
  with fewer tokens than requested, an error event inside the stream, or the connection lost after
  HTTP 200;
- http (error): the engine answered with an HTTP status other than 200;
- refused (error): orch did not send it (it cannot fit max_model_len; the client's in-flight bound);
- connection (error): no HTTP answer (connection refused or reset: an engine down or restarting);
- protocol (error): a stream event that is not a JSON object."""

IN_FLIGHT_BOUND_ERROR = "client in-flight bound reached"
"""The error of an open-loop request not sent because max_in_flight requests were in flight: the
client, not the engine, refused it (orchestrator.metrics.capacity reads it as the generator's limit)."""


class RequestRecord(StrictModel):
    """One request, as the load generator saw it."""

    id: int = Field(ge=0, description="request number within the level, warm-up first")
    level: str = Field(description="the load level: c4 (4 in flight) or r0.5 (Poisson, 0.5 requests/s)")
    warmup: bool = Field(default=False, description="a warm-up request: written, never counted")
    server: str = Field(description="the node (or name) of the engine that served it")
    send: float = Field(description="when the request was sent")
    scheduled: float | None = Field(
        default=None,
        description="open loop: when the arrival schedule meant it to be sent (send - scheduled is the "
        "load generator's own lateness); None in closed loop and in records of older runs",
    )
    first_token: float | None = Field(default=None, description="arrival of the first streamed token")
    token_times: list[float] = Field(
        default_factory=list, description="arrival of every streamed chunk with text, the first included"
    )
    end: float = Field(description="when the response ended (or the request failed or was aborted)")
    status: RequestStatus
    http_status: int | None = None
    error: str | None = Field(default=None, description="what went wrong, one line (at most 300 characters)")
    reason: FailureReason | None = Field(
        default=None,
        description="why it did not succeed (FailureReason); None when ok. A record written before "
        "the field existed is given one from its error text when it can be told (old_reason)",
    )
    input_tokens: int = Field(
        ge=0, description="prompt tokens: the server's usage figure, else the requested count"
    )
    output_tokens: int = Field(
        ge=0, description="completion tokens: the server's usage figure, else the chunk count"
    )
    requested_output_tokens: int = Field(ge=0, description="max_tokens of the request")
    usage_reported: bool = Field(default=False, description="the token counts came from the server's usage")
    session: int | None = Field(
        default=None, ge=0, description="agentic sessions: the session it belongs to (None otherwise)"
    )
    turn: int | None = Field(
        default=None, ge=0, description="agentic sessions: its turn in the session, from 0 (None otherwise)"
    )
    proc: int | None = Field(
        default=None, ge=0, description="the generator process that sent it, 0..P-1 over all hosts "
        "(workloads/loadgen_multi.py); None for the single-process generator"
    )  # fmt: skip
    client: str | None = Field(
        default=None,
        description="the host its generator process ran on, where records of several hosts were merged "
        "(their times then moved onto one clock by measured offsets); None on one host",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_reason(cls, data: object) -> object:
        """A failed record of a run written before `reason` existed gets the one its error says."""
        if not isinstance(data, dict) or "reason" in data or data.get("status") in (None, "ok"):
            return data
        reason = old_reason(str(data.get("status")), data.get("error"))
        return data if reason is None else {**data, "reason": reason}


_OLD_ERRORS: tuple[tuple[str, FailureReason], ...] = (
    ("request timeout ", "timeout"),
    ("cancelled: ", "cancelled"),
    ("stream ended without ", "truncated"),
    ("HTTP ", "http"),
    ("refused before sending", "refused"),
    (IN_FLIGHT_BOUND_ERROR, "refused"),
    ("ConnectionRefusedError", "connection"),
    ("ConnectionResetError", "connection"),
    ("RemoteDisconnected", "connection"),
)
"""The starts of the error texts the load generator wrote before records had a reason."""


def old_reason(status: str, error: object) -> FailureReason | None:
    """The reason of a failed record written before `reason` existed, from its error text (the
    texts loadgen wrote then); None when the text does not tell it."""
    if status == "ok" or not isinstance(error, str):
        return None
    return next((r for start, r in _OLD_ERRORS if error.startswith(start)), None)


class SloCheck(StrictModel):
    """One SLO at one level: its limit, the level's p99 and n, and whether p99 is within it."""

    metric: Literal["ttft", "tpot", "e2e"]
    limit_ms: float
    p99_ms: float | None = Field(description="None when n < 100 (p99 not defined)")
    n: int
    met: bool | None = Field(description="None when the p99 is not defined")


class TurnFigures(StrictModel):
    """Agentic sessions: the TTFT of one turn index over all sessions (its history grows with it)."""

    turn: int = Field(ge=0, description="the turn, from 0")
    n: int = Field(ge=0, description="counted requests of this turn")
    ok: int = Field(ge=0)
    input_tokens_mean: float | None = Field(
        default=None, description="mean prompt tokens of its successful requests"
    )
    ttft_ms: Percentiles


class PrefixCache(StrictModel):
    """The engines' prefix-cache hit rate over a level (their counters read before and after it), or
    why there is none: hit_rate None with `note` (never 0 for a figure the engine does not expose)."""

    hits: float | None = None
    queries: float | None = None
    hit_rate: float | None = Field(default=None, description="hits / queries over the level (tokens)")
    note: str | None = Field(default=None, description="why there is no hit rate: not exposed by <engine>, …")


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
    error_rate: float | None = Field(default=None, description="errors / n (truncated streams included)")
    abort_rate: float | None = Field(default=None, description="aborted / n (timed out or cancelled)")
    # None in the summaries of older runs
    timeout_rate: float | None = Field(default=None, description="timed out / n, a part of abort_rate")
    truncated_rate: float | None = Field(default=None, description="streams cut short / n, in error_rate")
    reasons: dict[str, int] = Field(
        default_factory=dict, description="counted requests that did not succeed, per FailureReason"
    )
    slo_attainment: float | None = Field(
        default=None,
        description="SLO attainment: the share of the n counted requests that succeeded and met every SLO "
        "(None without SLOs; called goodput before, a name the field uses for a rate)",
    )
    request_goodput: float | None = Field(
        default=None,
        description="goodput: successful requests per second that met every SLO, over the level's span "
        "(vLLM's `vllm bench serve --goodput`; None without SLOs)",
    )
    slos: list[SloCheck] = Field(default_factory=list)
    output_tokens: int = Field(default=0, ge=0, description="output tokens of successful requests")
    servers: dict[str, int] = Field(default_factory=dict, description="counted requests per server")
    p99_log_se: dict[str, float | None] = Field(
        default_factory=dict,
        description="per metric (ttft, itl, tpot, e2e): standard error of ln p99 from the order statistics "
        "around it (None below n = 100); the noise of one run's p99 in compare",
    )
    drift_log_se: dict[str, float | None] = Field(
        default_factory=dict,
        description="per figure (tput, ttft, itl, tpot, e2e): the batch-means standard error of the "
        "figure on the log scale, from 5 blocks of consecutive successful requests (output tokens/s of "
        "each block; the p95 latency of each block): how much the figure moved within the run, "
        "which one run's p99 order statistics do not see (None under 50 successful requests)",
    )
    per_turn: list[TurnFigures] = Field(
        default_factory=list, description="agentic sessions: TTFT per turn index (empty for other levels)"
    )

    @model_validator(mode="before")
    @classmethod
    def _old_goodput(cls, data: object) -> object:
        """A summary written before the words were fixed has `goodput`, the share now named
        slo_attainment: it is read as that, and its request goodput derived from it (the share x n
        over the span is the good requests per second)."""
        if not isinstance(data, dict) or "goodput" not in data or "slo_attainment" in data:
            return data
        out = {k: v for k, v in data.items() if k != "goodput"}
        share = data["goodput"]
        out["slo_attainment"] = share
        n, span = data.get("n"), data.get("duration_s")
        if isinstance(share, int | float) and isinstance(n, int) and isinstance(span, int | float) and span:
            out.setdefault("request_goodput", round(share * n) / span)
        return out


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


class ServingComparison(StrictModel):
    """B against A at one load level, with the interactive rule applied (metrics.serving)."""

    level: str
    verdict: InteractiveVerdict
    throughput: FigureChange
    latency: list[FigureChange]
    reason: str
    step: Name | None = None


# --- results from elsewhere: what a serving benchmark tool states (orch parse) ----------------------

ForeignServingTool = Literal[
    "vllm bench serve", "sglang bench_serving", "guidellm", "mlperf loadgen", "genai-perf", "aiperf"
]
"""The tools whose outputs `orch parse` reads into a ServingSummary (docs/serving.md, "Results from
elsewhere"). vLLM's `vllm bench serve` and its older benchmarks/benchmark_serving.py print and save
the same figures, so both are "vllm bench serve"; "mlperf loadgen" is MLPerf Inference's
mlperf_log_summary.txt; "genai-perf" is NVIDIA GenAI-Perf's console table and JSON export; "aiperf" is
its successor AIPerf's JSON export (profile_export_aiperf.json)."""

_LEVEL = re.compile(r"^(?:c(?P<c>\d+)|r(?P<r>\d+(?:\.\d+)?))$")

PercentileName = Annotated[str, StringConstraints(pattern=r"^p\d{1,2}(?:\.\d{1,4})?$")]
"""p50, p99, p99.9: the percentile as a number of percent (guidellm's p001 is p0.1, p999 is p99.9)."""

FigureValue = float | int | str | bool | None
"""A figure or setting an output states that ServingSummary has no field for, as stated."""


class StatedLatency(StrictModel):
    """One latency (milliseconds) as a benchmark tool states it; None where the output does not say."""

    mean: float | None = None
    median: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    percentiles: dict[PercentileName, float] = Field(
        default_factory=dict, description="by percentile, as stated: p50, p90, p99, p99.9 …"
    )
    n: int | None = Field(
        default=None,
        ge=0,
        description="samples behind it where the tool states them (guidellm); vLLM and SGLang do not",
    )

    def p(self, name: str) -> float | None:
        """A percentile by name (p50 falls back on the median, which is the same figure)."""
        if name in self.percentiles:
            return self.percentiles[name]
        return self.median if name == "p50" else None


class ServingSummary(StrictModel):
    """The figures of one load level (one rate or concurrency) as a serving benchmark states them.

    Read by `orch parse` from vLLM's, SGLang's and guidellm's outputs; every field is None where
    the output does not state it (never a default that looks like a measurement: an old vLLM
    summary without a "Failed requests" line has failed=None, not 0). Latencies are in
    milliseconds; guidellm's request latency, stated in seconds, is converted. Figures the output
    states that have no field here are kept in `other` under the tool's own name, so nothing
    stated is dropped silently.

    The latencies have orch's definitions (metrics/serving.py, those of vLLM's benchmark): TTFT;
    TPOT per request, (end - first token) / (output tokens - 1); ITL every gap between streamed
    chunks, pooled; E2E. Each tool's figure goes where its definition fits, not where its name
    does: guidellm's "inter-token latency" is per request and excludes the first token, so it is
    `tpot` here, and guidellm's "time per output token" (first token included) is
    `tpot_with_first`. An orch run's level becomes one with `from_level`, so that compare can set
    results from elsewhere beside orch's own.
    """

    tool: ForeignServingTool | Literal["orch"]
    tool_version: str | None = Field(default=None, max_length=100)
    source_format: Literal["console", "json", "yaml", "records"]
    index: int = Field(ge=0, description="position in the file: summary block, JSON value or benchmark")
    label: str | None = Field(
        default=None, max_length=300, description="the tool's name for this run or level"
    )
    date: str | None = Field(
        default=None, max_length=100, description="as stated (vLLM), or guidellm's start, UTC"
    )
    backend: str | None = Field(default=None, max_length=300)
    model: str | None = Field(default=None, max_length=1000)
    tokenizer: str | None = Field(default=None, max_length=1000)
    dataset: str | None = Field(default=None, max_length=1000)
    num_prompts: int | None = Field(default=None, ge=0)
    request_rate: float | Literal["inf"] | None = Field(
        default=None, description="requests per second the load aimed at; inf: all at once"
    )
    burstiness: float | None = None
    max_concurrency: int | None = Field(default=None, ge=0, description="the cap on requests in flight")
    mean_concurrency: float | None = Field(
        default=None, description="requests in flight on average, measured"
    )
    completed: int | None = Field(default=None, ge=0, description="successful requests")
    failed: int | None = Field(default=None, ge=0)
    incomplete: int | None = Field(default=None, ge=0, description="cut off when the run ended (guidellm)")
    duration_s: float | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    total_output_tokens_retokenized: int | None = None
    request_throughput: float | None = Field(default=None, description="successful requests per second")
    request_goodput: float | None = Field(
        default=None, description="requests per second within the tool's SLOs"
    )
    input_throughput: float | None = Field(default=None, description="input tokens per second")
    output_throughput: float | None = Field(default=None, description="output tokens per second")
    total_token_throughput: float | None = None
    peak_output_throughput: float | None = None
    peak_concurrent_requests: float | None = None
    ttft: StatedLatency | None = None
    tpot: StatedLatency | None = None
    itl: StatedLatency | None = None
    e2e: StatedLatency | None = None
    tpot_with_first: StatedLatency | None = Field(
        default=None, description="per request, E2E / output tokens, the first token included (guidellm)"
    )
    other: dict[str, FigureValue] = Field(
        default_factory=dict,
        description="stated figures and settings without a field here, by the tool's name",
    )
    sections_aside: dict[str, str] | None = Field(
        default=None,
        description="sections of a console summary orch does not know (vLLM's Speculative Decoding …), "
        "by their heading, as printed (at most 1000 characters each); their `label: number` lines are "
        "also in `other` as 'SECTION: label'",
    )

    @classmethod
    def from_level(
        cls, level: LevelSummary, *, index: int = 0, model: str | None = None, backend: str | None = None
    ) -> ServingSummary:
        """One level of an orch run, in the same terms as the results read from elsewhere.

        Aborted requests (timed out or cancelled) are `incomplete`, errors `failed`; the level's
        name gives the concurrency cap (c4) or the Poisson rate (r0.5). Its goodput (a rate) is the
        tools' request_goodput; its SLO attainment (a share) and its error and abort rates go to `other`.
        """
        m = _LEVEL.match(level.level)

        def lat(p: Percentiles) -> StatedLatency:
            pct = {k: v for k, v in (("p50", p.p50), ("p95", p.p95), ("p99", p.p99)) if v is not None}
            return StatedLatency(mean=p.mean, median=p.p50, percentiles=pct, n=p.n)

        return cls(
            tool="orch", source_format="records", index=index, label=level.level,
            model=model, backend=backend,
            max_concurrency=int(m.group("c")) if m and m.group("c") else None,
            request_rate=float(m.group("r")) if m and m.group("r") else None,
            completed=level.ok, failed=level.errors, incomplete=level.aborted, duration_s=level.duration_s,
            total_output_tokens=level.output_tokens, request_throughput=level.requests_per_s,
            input_throughput=level.input_tokens_per_s, output_throughput=level.output_tokens_per_s,
            ttft=lat(level.ttft_ms), tpot=lat(level.tpot_ms), itl=lat(level.itl_ms), e2e=lat(level.e2e_ms),
            request_goodput=level.request_goodput,
            other={"slo_attainment": level.slo_attainment, "error_rate": level.error_rate,
                   "abort_rate": level.abort_rate, "timeout_rate": level.timeout_rate,
                   "truncated_rate": level.truncated_rate},
        )  # fmt: skip


EngineHealth = Literal["healthy", "timeout", "exited", "not started", "external"]
"""healthy: the health endpoint answered 200 within the bound; timeout: it did not; exited: the
engine's job ended before it answered; not started: the job could not be submitted; external:
orch does not start the engine (its URL answered)."""


class EngineRun(StrictModel):
    """One engine of a serving step (one replica, on its first node) as orch started and stopped it."""

    node: str = Field(description="the inventory node (for engine: external, 'external')")
    url: str = Field(description="the base URL the load generator sent requests to")
    argv: list[str] = Field(default_factory=list, description="the engine's command (none for external)")
    job_id: str | None = Field(
        default=None, description="its job now: the last restart's, if it was restarted"
    )
    first_job_id: str | None = Field(
        default=None, description="the job of its first start (the restarts' jobs are in the step's restarts)"
    )
    log: str | None = Field(default=None, description="its log, relative to the run directory")
    health: EngineHealth = "not started"
    load_to_health_s: float | None = Field(
        default=None, description="model load time: submitted to the health endpoint's first 200"
    )
    load_to_first_answer_s: float | None = Field(
        default=None, description="model load time: submitted to the end of its first successful request"
    )
    job_state: str | None = Field(default=None, description="the job's state once orch stopped it")


class BaselineRatios(StrictModel):
    """A level's figures over the same level of a stored baseline (thresholds.baseline): each p99
    as this run's / the baseline's, throughput as this run's / the baseline's; None where a side
    lacks the figure (a p99 below n = 100). The reports show them beside the thresholds."""

    name: str
    run_id: str
    p99: dict[str, float | None] = Field(description="ttft, itl, tpot, e2e: this run's p99 / the baseline's")
    throughput: float | None = Field(description="output tokens/s: this run's / the baseline's")
    max_p99_ratio: float | None = None
    min_throughput_fraction: float | None = None


class ServingLevelResult(StrictModel):
    """One load level of a serving step: the step's figures, each node's, and the cost."""

    level: str
    records: str = Field(description="the level's records file, relative to the run directory")
    summary: LevelSummary | None = Field(description="None when no counted request was recorded")
    per_node: dict[str, LevelSummary] = Field(
        default_factory=dict, description="the figures of the requests each replica served"
    )
    cost: ServingCost | None = None
    cost_at: CostAtRate | None = Field(default=None, description="by part at the level's rate (metrics/cost)")
    power: LevelPower | None = Field(
        default=None,
        description="GPU power per node during the level (telemetry/power.py), or why not; None in "
        "results written before serving steps sampled power",
    )
    baseline: BaselineRatios | None = Field(
        default=None,
        description="its ratios to the plan's baseline, when it names one and the baseline has the level",
    )
    prefix_cache: PrefixCache | None = Field(
        default=None, description="agentic sessions: the engines' prefix-cache hit rate over the level"
    )


# -- capacity search (orchestrator.metrics.capacity decides, runs/capacity.py drives) ------------
# The highest Poisson rate at which SLO attainment stays at or above the target, ± the search's
# precision, repeated on several seeds with the spread shown, or why no capacity is reported. A
# probe is one open-loop level at one rate, its records in the step's folder like any level's.

SearchStatus = Literal["found", "below_min", "at_least_max", "generator_limited", "incomplete"]
"""found: capacity lies in [capacity, upper) with upper - capacity <= precision; below_min: even
min_rate missed the target; at_least_max: max_rate met it (the capacity is at least max_rate);
generator_limited: the load generator fell behind its schedule, so the search refused to go on;
incomplete: the search was stopped before it ended (the step's time limit, an interruption)."""


class CapacityProbe(StrictModel):
    """One probe: an open-loop level at `rate`, judged against the target attainment."""

    rate: float = Field(gt=0, description="requests/s of the Poisson schedule")
    seed: int = Field(ge=0, description="the schedule's seed")
    records: str | None = Field(default=None, description="its records file, relative to the run directory")
    planned: int = Field(ge=1, description="counted requests the probe was to send")
    n: int = Field(ge=0, description="counted requests that ended (fewer when it stopped early)")
    good: int = Field(ge=0, description="counted requests that succeeded and met every SLO")
    attainment: float | None = Field(description="good / n; None when no counted request ended")
    met: bool = Field(description="attainment >= target over the whole planned count")
    summary: LevelSummary | None = Field(default=None, description="its figures (p50/p95/p99, attainment)")
    stopped_early: bool = Field(
        default=False, description="stopped once attainment could no longer reach the target"
    )
    lateness_p95_ms: float | None = Field(default=None, description="p95 of send - scheduled, in ms")
    generator_limit: str | None = Field(
        default=None, description="why the load generator, not the engine, limited this probe"
    )


class CapacityRepeat(StrictModel):
    """One whole search (bracket, then bisect) on one seed."""

    repeat: int = Field(ge=0)
    status: SearchStatus
    capacity: float | None = Field(description="the highest rate that met the target (None: none did)")
    upper: float | None = Field(description="the lowest rate that missed it (None: none did)")
    probes: list[CapacityProbe] = Field(default_factory=list)
    reason: str = Field(description="what the search found or why it refused, one line")


class CapacityResult(StrictModel):
    """A serving step's capacity: the median of its repeats' capacities, ± precision, with the spread
    between repeats; or none, with the reason (refused when any repeat was generator-limited)."""

    search: CapacitySearch
    probe_bound: int = Field(ge=2, description="2 + ceil(log2((max_rate - min_rate) / precision)) per repeat")
    repeats: list[CapacityRepeat] = Field(default_factory=list)
    capacity: float | None = Field(default=None, description="requests/s; None when not reported")
    spread: float | None = Field(default=None, description="largest minus smallest repeat capacity")
    refused: str | None = Field(default=None, description="why no capacity is reported")
    cost_at: CostAtRate | None = Field(
        default=None,
        description="the cost by part at the capacity rate, from the probes that met the target there "
        "(metrics/cost; None: no capacity, or no cost model)",
    )


class ServingQuality(StrictModel):
    """The output-quality gate of a serving step in scale-test (docs/quality.md, "In scale-test"):
    this run's A passes on the step's engine, their A-against-A floor, and, when the workload's
    thresholds name a baseline whose run kept its outputs, this run (B) judged against it (A)."""

    outputs: str = Field(description="the folder of this step's outputs, relative to the run")
    engine: str = Field(description="the node (or 'external') whose engine answered the prompts")
    prompts_sha256: str | None = None
    floor: list[OutputFigures] = Field(
        default_factory=list, description="this run's A against A: its own noise floor"
    )
    baseline: str | None = Field(default=None, description="the baseline judged against, by name")
    baseline_run: str | None = Field(default=None, description="the baseline's run id")
    judgement: QualityJudgement | None = Field(
        default=None, description="this run (B) against the baseline's outputs (A), the floor the baseline's"
    )
    not_judged: str | None = Field(default=None, description="why no judgement, when a baseline is named")
    error: str | None = Field(default=None, description="why the gate's passes did not run or were not read")


class ServingStepResult(StrictModel):
    """A serving step's result: its engines, its levels, its verdict (steps/<id>/serving.json)."""

    step: ServingStep
    verdict: Verdict = "skipped"
    reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    engines: list[EngineRun] = Field(default_factory=list)
    levels: list[ServingLevelResult] = Field(default_factory=list)
    faults: list[ServingFaultResult] = Field(
        default_factory=list, description="each injection of a plan fault into this step, with its recovery"
    )
    restarts: list[EngineRestart] = Field(
        default_factory=list, description="every restart of an engine by the workload's restart policy"
    )
    capacity: CapacityResult | None = Field(
        default=None, description="the capacity search of a workload with load.capacity"
    )
    quality: ServingQuality | None = Field(
        default=None, description="the plan's output-quality gate on this step (plans with quality:)"
    )
    wall_s: float | None = None
