"""Serving steps of a plan: an inference engine under load, with SLOs and thresholds.

A plan holds collective steps (its ladder) and serving steps (its `serving` list) side by side;
either may be empty, not both (docs/serving.md, "The plan model"). Each entry of `serving` is a
ServingWorkload: one engine serving one model, run once per replica count, driven at every load
level (concurrency or Poisson rate) of its `load`.

Model paths, engine arguments and URLs are text that will reach commands on nodes, so they are
checked here, strictly, before anything runs: paths absolute and normalised from a small
alphabet, arguments without shell metacharacters or spaces, URLs http(s) to an explicit
host:port. A refusal names the field and the value.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.cost import CostModel
from orchestrator.models.names import Name
from orchestrator.models.serving_recovery import SteadyRule

Engine = Literal["vllm", "sglang", "transformers", "external"]
"""The engines' names, for plan and stack validation; each engine is one EngineSpec in
orchestrator.workloads.engines (argv, health path, package, managed arguments), which checks its
names against these. The traits below are here because models/ validates plans and stacks
without importing workloads/; the EngineSpecs take them from here."""
GPU_ENGINES: frozenset[str] = frozenset({"vllm", "sglang"})
"""Engines that need GPUs: refused in a cpu stack and on nodes of gpu_vendor none."""
VENV_ENGINES: frozenset[str] = frozenset({"transformers"})
"""Engines that run from the stack's venv (python.packages pins them at the engine's version)."""
PACKAGE_ENGINES: frozenset[str] = frozenset({"vllm", "sglang"})
"""Engines whose Python package (of the engine's name) the fingerprint compares with the stack's
pin where a node has it (provision/ reads this, not workloads/)."""
ServingDtype = Literal["auto", "float32", "float16", "bfloat16"]
Api = Literal["completions", "chat"]

P99_MIN_SAMPLES = 100
"""A p99 threshold or SLO needs at least this many counted requests per load level: the rule of
orchestrator.metrics.percentiles.min_samples(0.99) (models/ imports no metrics; a test ties them)."""

_PATH_RE = re.compile(r"/[A-Za-z0-9_.@+/-]*")
_ARG_RE = re.compile(r"[A-Za-z0-9_.,:=/+@%-]+")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_URL_RE = re.compile(
    rf"(?P<scheme>https?)://(?P<host>{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{{1,5}})"
    r"(?P<path>(?:/[A-Za-z0-9_.~-]+)*/?)"
)
# Each engine's own spellings of the settings orch sets from the plan's fields (engines.py
# engine_argv), from its documentation: a plan's engine_args may give none of them again, in any
# spelling the engine accepts. Data, to move into the engine registry's EngineSpec.
# - vLLM (`vllm serve --help`, docs.vllm.ai "Engine Arguments"): long options take '_' for '-'
#   (FlexibleArgumentParser), and -tp / -pp are its short forms.
# - SGLang (`python -m sglang.launch_server --help`, docs "Server Arguments"): --tp-size has the
#   aliases --tp and --tensor-parallel-size, --pp-size --pp and --pipeline-parallel-size, and
#   --model-path --model; argparse there also takes any unique prefix of a long option.
# - transformers serve: --host, --port, --dtype, --device.
ENGINE_MANAGED_SPELLINGS: dict[str, frozenset[str]] = {
    "vllm": frozenset(
        {"--host", "--port", "--model", "--served-model-name", "--revision", "--dtype",
         "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp"}
    ),
    "sglang": frozenset(
        {"--model-path", "--model", "--host", "--port", "--dtype", "--revision", "--served-model-name",
         "--tp-size", "--tp", "--tensor-parallel-size", "--pp-size", "--pp", "--pipeline-parallel-size"}
    ),
    "transformers": frozenset({"--host", "--port", "--dtype", "--device"}),
}  # fmt: skip
ORCH_SET_ARGS = frozenset().union(*ENGINE_MANAGED_SPELLINGS.values())
"""Engine arguments orch sets itself from the plan's fields, in every engine's spellings; a plan
may not give them again (managed_engine_flag also catches '_' for '-' and abbreviations)."""


def managed_engine_flag(arg: str) -> str | None:
    """The managed setting (ORCH_SET_ARGS) that arg would set in some engine, or None.

    A long option counts with '_' read as '-' (vLLM) and when it is a prefix of a managed one
    (argparse's abbreviations: --tensor-par, --ho); a short one (-tp, -pp) also when a value is
    glued to it (-tp2, -tp=2) or when abbreviated (-t). Raises nothing."""
    flag = arg.split("=", 1)[0]
    if flag.startswith("--") and len(flag) > 2:
        norm = "--" + flag[2:].replace("_", "-")
        hits = sorted(m for m in ORCH_SET_ARGS if m.startswith("--") and m.startswith(norm))
        return hits[0] if hits else None
    if flag.startswith("-") and not flag.startswith("--") and len(flag) > 1:
        shorts = sorted(m for m in ORCH_SET_ARGS if not m.startswith("--"))
        return next((m for m in shorts if flag.startswith(m) or m.startswith(flag)), None)
    return None


def check_abs_path(value: str, *, what: str = "path") -> str:
    """value when it is an absolute, normalised path of letters, digits and `_ . @ + - /`;
    raises ValueError naming what and the value otherwise (no `..`, `//`, trailing `/`, spaces)."""
    parts = value.split("/")[1:]
    normal = value == "/" or all(p not in ("", ".", "..") for p in parts)
    if not _PATH_RE.fullmatch(value) or not normal or len(value) > 4096:
        raise ValueError(
            f"{what} {value!r} is not an absolute, normalised path of letters, digits and _ . @ + - / "
            "(no '..', no '//', no trailing '/', no spaces or shell characters)"
        )
    return value


def check_engine_arg(value: str) -> str:
    """value when it is one engine argument without spaces or shell metacharacters; raises ValueError."""
    if not _ARG_RE.fullmatch(value) or len(value) > 1024:
        raise ValueError(
            f"engine argument {value!r} may hold letters, digits and _ . , : = / + @ % - only "
            "(no spaces, quotes or shell characters; give '--flag' and its value as two items)"
        )
    if (managed := managed_engine_flag(value)) is not None:
        flag = value.split("=", 1)[0]
        raise ValueError(
            f"engine argument {value!r}: {flag} sets {managed}, which is set by orch from the plan's fields"
        )
    return value


def check_http_url(value: str) -> str:
    """value when it is `http(s)://HOST:PORT[/path]`: no user, query or fragment, an explicit port;
    raises ValueError naming the value otherwise."""
    m = _URL_RE.fullmatch(value) if len(value) <= 2048 else None
    port = int(m.group("port")) if m else 0
    host = m.group("host") if m else ""
    ok = m is not None and 1 <= port <= 65535
    if ok and host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            ok = False
    elif ok and re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            ok = False
    if not ok:
        raise ValueError(
            f"url {value!r} is not http(s)://HOST:PORT[/path] (an explicit port 1-65535; no user, "
            "query, fragment, spaces or shell characters)"
        )
    return value


AbsPath = Annotated[str, AfterValidator(check_abs_path)]
EngineArg = Annotated[str, AfterValidator(check_engine_arg)]
HttpUrl = Annotated[str, AfterValidator(check_http_url)]


class ServedModel(StrictModel):
    """The model an engine loads (path, revision) and the name requests ask for."""

    path: AbsPath | None = Field(
        default=None, description="absolute path of the model on the nodes (required unless engine: external)"
    )
    revision: Name | None = Field(default=None, description="a git revision, tag or branch of the model")
    name: Name | None = Field(
        default=None,
        description="the model name sent in requests (vLLM, SGLang: --served-model-name; default: the path)",
    )
    max_model_len: int | None = Field(
        default=None,
        ge=1,
        le=100_000_000,
        description="the model's context length in tokens: load lengths that cannot fit are refused with "
        "the plan, and a request (of a dataset's lengths) whose input + output exceed it is not sent",
    )

    @model_validator(mode="after")
    def _named(self) -> ServedModel:
        if self.path is None and self.name is None:
            raise ValueError("give the model's path, or its name for an external engine")
        return self

    @property
    def served_name(self) -> str:
        """The name requests carry in their `model` field: `name`, else the path (as vLLM, SGLang
        and `transformers serve` name a model they were started with by its path)."""
        if self.name is not None:
            return self.name
        assert self.path is not None  # checked by _named
        return self.path


class FixedLengths(StrictModel):
    """Every request has the same number of tokens."""

    kind: Literal["fixed"]
    tokens: int = Field(ge=1, le=1_000_000)


class UniformLengths(StrictModel):
    """Token counts drawn uniformly from min..max (both included), from the load's seed."""

    kind: Literal["uniform"]
    min: int = Field(ge=1, le=1_000_000)
    max: int = Field(ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLengths:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is larger than max {self.max}")
        return self


class DatasetLengths(StrictModel):
    """Token counts taken in turn from a JSONL file of lengths: one object per line, `field` an int."""

    kind: Literal["dataset"]
    path: AbsPath = Field(description="absolute path of the JSONL file on the controller")
    field: Name = Field(description="the key of each line that holds the count, e.g. input_tokens")


TokenLengths = Annotated[FixedLengths | UniformLengths | DatasetLengths, Field(discriminator="kind")]


class ArrivalTrace(StrictModel):
    """Arrival times replayed from a JSONL file (one object per line, `field` a number): the gaps
    between them, in the file's order, scaled so that their mean rate is each level's rate."""

    path: AbsPath = Field(description="absolute path of the JSONL file on the controller")
    field: Name = Field(default="timestamp", description="the key of each line that holds the arrival time")
    unit: Literal["s", "ms"] = Field(default="s", description="the unit of the times (Mooncake's traces: ms)")


class DatasetPrompts(StrictModel):
    """Prompts replayed in turn from a JSONL file: one object per line, `field` a non-empty string;
    request i sends the (i mod count)-th. Their lengths are the load's input_tokens (a dataset spec
    on the same file keeps each prompt with its own count)."""

    path: AbsPath = Field(description="absolute path of the JSONL file on the controller")
    field: Name = Field(default="prompt", description="the key of each line that holds the prompt text")


def _longest(spec: TokenLengths) -> int | None:
    """The largest token count a length spec gives; None for a dataset's (known once read)."""
    if isinstance(spec, FixedLengths):
        return spec.tokens
    return spec.max if isinstance(spec, UniformLengths) else None


class CapacitySearch(StrictModel):
    """Find the highest Poisson rate whose SLO attainment stays at or above a target: bracket with
    min_rate and max_rate, then bisect until the bracket is at most `precision` wide
    (orchestrator.metrics.capacity; docs/serving.md, "Capacity search"). At most
    2 + ceil(log2((max_rate - min_rate) / precision)) probes per repeat."""

    target_attainment: float = Field(
        gt=0, le=1, description="the share of counted requests that must succeed and meet every SLO"
    )
    min_rate: float = Field(gt=0, le=100_000, description="requests/s of the lowest probe")
    max_rate: float = Field(gt=0, le=100_000, description="requests/s of the highest probe")
    precision: float = Field(gt=0, le=100_000, description="requests/s: the bracket's width at the end")
    repeats: int = Field(default=2, ge=2, le=10, description="whole searches, each on its own seed")

    @model_validator(mode="after")
    def _ordered(self) -> CapacitySearch:
        if self.min_rate >= self.max_rate:
            raise ValueError(f"capacity: min_rate {self.min_rate:g} must be below max_rate {self.max_rate:g}")
        return self


class AgenticSessions(StrictModel):
    """Multi-turn sessions, as an agent calls a model again and again: `sessions` sessions of `turns`
    turns each; every turn resends the whole history (the shared system prompt, the earlier user
    messages and the model's answers) and adds one user message of the load's input_tokens,
    answered with up to output_tokens. `concurrency` sessions run at once; a turn waits
    think_time_s after the answer before it (docs/serving.md, "Agentic sessions")."""

    sessions: int = Field(ge=1, le=100_000, description="sessions counted at this level")
    turns: int = Field(ge=1, le=1000, description="turns of each session")
    concurrency: int | None = Field(
        default=None, ge=1, le=100_000, description="sessions at once (default: all of them)"
    )
    system_prompt_tokens: int = Field(
        default=0, ge=0, le=1_000_000, description="the shared system prompt in front of every history"
    )
    think_time_s: float = Field(
        default=0, ge=0, le=3600, description="wait after an answer, before the next turn"
    )
    warmup_sessions: int = Field(default=0, ge=0, le=10_000, description="sessions sent first, not counted")

    @property
    def level(self) -> str:
        """The level's name: s8x4 (8 sessions of 4 turns)."""
        return f"s{self.sessions}x{self.turns}"


class ServingLoad(StrictModel):
    """How requests are sent: the levels, the lengths, and how many requests each level counts."""

    concurrency: list[Annotated[int, Field(ge=1, le=100_000)]] = Field(
        default_factory=list, description="closed loop: this many requests in flight, one level each"
    )
    rates: list[Annotated[float, Field(gt=0, le=100_000)]] = Field(
        default_factory=list,
        description="open loop: Poisson arrivals at this many requests/s, one level each",
    )
    input_tokens: TokenLengths = Field(description="prompt lengths")
    output_tokens: TokenLengths = Field(description="completion lengths (max_tokens of each request)")
    requests: int | None = Field(
        default=None, ge=1, le=10_000_000, description="counted requests per level (after warm-up)"
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="time limit of each level; with requests, whichever ends first",
    )
    warmup_requests: int = Field(
        default=0, ge=0, le=100_000, description="sent first at each level, not counted"
    )
    api: Api = Field(default="completions", description="/v1/completions or /v1/chat/completions")
    request_timeout_s: float = Field(
        default=120, gt=0, le=3600, description="a request still open then is aborted"
    )
    max_in_flight: int = Field(
        default=1024,
        ge=1,
        le=100_000,
        description="open loop: requests beyond this in flight are counted as errors",
    )
    seed: int = Field(default=0, ge=0, description="seed of arrivals and uniform lengths")
    trace: ArrivalTrace | None = Field(
        default=None,
        description="open loop: the arrivals' pattern from a file, time-scaled to each rate (instead of "
        "Poisson or burstiness)",
    )
    burstiness: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="open loop: 1 is Poisson; otherwise gamma-distributed gaps of this shape with the "
        "same mean (vLLM's --burstiness): below 1 burstier, above 1 more even",
    )
    capacity: CapacitySearch | None = Field(
        default=None,
        description="search the highest Poisson rate that meets the SLOs (docs/serving.md, "
        "'Capacity search')",
    )
    prompts: DatasetPrompts | None = Field(default=None, description="prompt texts of a JSONL file, in turn")
    sessions: AgenticSessions | None = Field(
        default=None, description="one level of agentic sessions (docs/serving.md, 'Agentic sessions')"
    )
    procs: Annotated[int, Field(ge=1, le=1024)] | Literal["auto"] = Field(
        default=1,
        description="generator processes of each fixed level, rate and capacity probe; auto: one per "
        "core of the controller (docs/serving.md, 'Several generator processes'); a session level "
        "runs in one",
    )

    @field_validator("concurrency", "rates")
    @classmethod
    def _distinct(cls, v: list[float]) -> list[float]:
        if len(set(v)) != len(v):
            raise ValueError(f"levels repeat: {v}")
        return sorted(v)

    @model_validator(mode="after")
    def _complete(self) -> ServingLoad:
        levels = (self.concurrency, self.rates, self.capacity, self.sessions)
        if not any(x for x in levels):
            raise ValueError("give concurrency levels, request rates, a capacity search, sessions, or more")
        fixed = self.concurrency or self.rates or self.capacity is not None  # a session level counts sessions
        if fixed and self.requests is None and self.duration_s is None:
            raise ValueError("give requests (per level), duration_s, or both")
        if self.burstiness != 1.0 and not self.rates:
            raise ValueError(f"burstiness {self.burstiness:g} shapes open-loop arrivals: give rates too")
        if self.trace is not None and not self.rates:
            raise ValueError(f"trace {self.trace.path} is replayed at each rate: give rates too")
        if self.trace is not None and self.burstiness != 1.0:
            raise ValueError("give trace or burstiness, not both: the trace's gaps are the arrivals' shape")
        return self


class ServingSlos(StrictModel):
    """Per-request limits for SLO attainment and goodput; a level meets an SLO when its p99 is within
    the limit."""

    ttft_p99_ms: float | None = Field(default=None, gt=0, description="time to first token")
    tpot_p99_ms: float | None = Field(default=None, gt=0, description="time per output token after the first")
    e2e_p99_ms: float | None = Field(default=None, gt=0, description="end-to-end latency of a request")

    def given(self) -> bool:
        return any(v is not None for v in (self.ttft_p99_ms, self.tpot_p99_ms, self.e2e_p99_ms))


class ServingBaseline(StrictModel):
    """Figures relative to a stored baseline's same step and level."""

    name: Name = Field(description="the baseline's name in the results store")
    max_p99_ratio: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="TTFT/ITL/TPOT/E2E p99 at most this times the baseline's, e.g. 1.2",
    )
    min_throughput_fraction: float | None = Field(
        default=None, gt=0, le=10, description="output tokens/s at least this fraction of the baseline's"
    )

    @model_validator(mode="after")
    def _something(self) -> ServingBaseline:
        if self.max_p99_ratio is None and self.min_throughput_fraction is None:
            raise ValueError("give max_p99_ratio, min_throughput_fraction, or both")
        return self


class ServingThresholds(StrictModel):
    """What each load level must reach to pass (absolute), or against a baseline."""

    max_ttft_p99_ms: float | None = Field(default=None, gt=0)
    max_itl_p99_ms: float | None = Field(default=None, gt=0)
    max_tpot_p99_ms: float | None = Field(default=None, gt=0)
    max_e2e_p99_ms: float | None = Field(default=None, gt=0)
    min_slo_attainment: float | None = Field(
        default=None, gt=0, le=1, description="SLO attainment: share of counted requests meeting every SLO"
    )
    max_error_rate: float | None = Field(default=None, ge=0, le=1, description="failed + aborted / counted")
    min_output_tokens_per_s: float | None = Field(default=None, gt=0)
    baseline: ServingBaseline | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_min_goodput(cls, data: object) -> object:
        """min_goodput, the old name of min_slo_attainment (it meant the share, which the field
        calls SLO attainment; goodput is a rate), is read as it (plan.load_plan warns)."""
        if not isinstance(data, dict) or "min_goodput" not in data:
            return data
        if "min_slo_attainment" in data:
            raise ValueError("give min_slo_attainment only (min_goodput is its old name)")
        return {("min_slo_attainment" if k == "min_goodput" else k): v for k, v in data.items()}

    def p99_fields(self) -> list[str]:
        """The names of the p99 thresholds that are set."""
        names = ("max_ttft_p99_ms", "max_itl_p99_ms", "max_tpot_p99_ms", "max_e2e_p99_ms")
        out = [n for n in names if getattr(self, n) is not None]
        if self.baseline is not None and self.baseline.max_p99_ratio is not None:
            out.append("baseline.max_p99_ratio")
        return out


class RestartPolicy(StrictModel):
    """What orch does when an engine ends during a load level (as torchrun's --max-restarts): start
    it again on the same node and port, at most max_restarts times per engine in a step."""

    max_restarts: int = Field(default=0, ge=0, le=100, description="restarts per engine and step; 0: none")
    delay_s: float = Field(default=0, ge=0, le=3600, description="wait this long before each restart")


class ServingWorkload(StrictModel):
    """One engine serving one model, run at each replica count and driven at each load level."""

    name: Name = Field(description="part of each serving step's id: NAME-rREPLICAS")
    engine: Engine
    model: ServedModel
    url: HttpUrl | None = Field(
        default=None, description="engine: external only: the OpenAI-compatible base URL"
    )
    dtype: ServingDtype = "auto"
    tensor_parallel: int = Field(default=1, ge=1, le=1024, description="GPUs of one replica on one node")
    pipeline_parallel: int = Field(default=1, ge=1, le=1024, description="nodes of one replica")
    replicas: str | list[int] = Field(
        default=[1],
        description="replica counts, one step each: a list or a spec such as '1,N' (N = replicas that fit); "
        "checked by Plan",
    )
    engine_args: list[EngineArg] = Field(
        default_factory=list, description="further engine arguments, one per item"
    )
    variant: Name | None = Field(
        default=None,
        description="a variant of the engine that the run's stack names (serving.engines[].variants): its "
        "environment and engine arguments are added after the plan's; checked against the stack with the "
        "inventory (docs/serving.md, 'Comparing variants')",
    )
    load: ServingLoad
    slos: ServingSlos = Field(default_factory=ServingSlos)
    thresholds: ServingThresholds = Field(default_factory=ServingThresholds)
    price_per_node_hour: float | None = Field(
        default=None, gt=0, description="for cost per request and per 1M tokens"
    )
    cost: CostModel | None = Field(
        default=None,
        description="the whole cost by part (docs/serving.md, 'Cost at a rate, by part'); without it, a "
        "node-hour price (price_per_node_hour or the inventory's) is the cost model",
    )
    health_timeout_s: int = Field(
        default=900,
        ge=1,
        le=86_400,
        description="bound on the wait for the engine's health (also after a restart)",
    )
    restart: RestartPolicy = Field(
        default_factory=RestartPolicy, description="restart policy of the engines during a step"
    )
    steady: SteadyRule = Field(
        default_factory=SteadyRule,
        description="when the service counts as steady again after a fault (docs/serving.md)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ServingWorkload:
        if self.engine == "external":
            if self.url is None:
                raise ValueError(f"serving {self.name}: engine external needs url")
            orchs = ("engine_args", "tensor_parallel", "pipeline_parallel", "replicas", "restart", "variant")
            started = [f for f in orchs if f in self.model_fields_set]
            if started:
                raise ValueError(
                    f"serving {self.name}: {', '.join(started)} do not apply to engine external "
                    "(orch does not start it)"
                )
        else:
            if self.url is not None:
                raise ValueError(f"serving {self.name}: url {self.url!r} is for engine external only")
            if self.model.path is None:
                raise ValueError(f"serving {self.name}: engine {self.engine} needs model.path")
            if self.engine == "transformers" and self.model.name is not None:
                raise ValueError(
                    f"serving {self.name}: model.name {self.model.name!r}: transformers serve answers only "
                    "to the model's path; leave model.name out"
                )
        n_in, n_out = _longest(self.load.input_tokens), _longest(self.load.output_tokens)
        limit = self.model.max_model_len
        sessions = self.load.sessions
        if sessions is not None and limit is not None and n_in is not None and n_out is not None:
            first = sessions.system_prompt_tokens + n_in + n_out
            if first > limit:
                raise ValueError(
                    f"serving {self.name}: a session's first turn (system prompt "
                    f"{sessions.system_prompt_tokens} + input up to {n_in} + output up to {n_out} tokens) "
                    f"exceeds model.max_model_len {limit}"
                )
        if limit is not None and n_in is not None and n_out is not None and n_in + n_out > limit:
            raise ValueError(
                f"serving {self.name}: input up to {n_in} + output up to {n_out} tokens exceed "
                f"model.max_model_len {limit}: lower the lengths (a long-context level stays within it)"
            )
        if self.load.capacity is not None:
            self._capacity_checks()
        p99 = self.thresholds.p99_fields() + [
            f"slos.{n}"
            for n in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")
            if getattr(self.slos, n) is not None
        ]
        n, ss = self.load.requests, self.load.sessions
        if p99 and ss is not None and ss.sessions * ss.turns < P99_MIN_SAMPLES:
            raise ValueError(
                f"serving {self.name}: {', '.join(p99)} judge a p99, which needs sessions x turns >= "
                f"{P99_MIN_SAMPLES} in the session level (got {ss.sessions * ss.turns})"
            )
        fixed = self.load.concurrency or self.load.rates or self.load.capacity is not None
        if p99 and fixed and (n is None or n < P99_MIN_SAMPLES):
            raise ValueError(
                f"serving {self.name}: {', '.join(p99)} judge a p99, which needs load.requests >= "
                f"{P99_MIN_SAMPLES} per level (got {n if n is not None else 'none, only duration_s'})"
            )
        if self.thresholds.min_slo_attainment is not None and not self.slos.given():
            raise ValueError(
                f"serving {self.name}: thresholds.min_slo_attainment needs slos to count attainment against"
            )
        return self

    def _capacity_checks(self) -> None:
        """A capacity search judges attainment against SLOs and reports a p99 at each probe."""
        load, why = self.load, []
        if not self.slos.given():
            why.append("slos to judge attainment against")
        if load.requests is None or load.requests < P99_MIN_SAMPLES:
            why.append(f"load.requests >= {P99_MIN_SAMPLES} counted requests per probe (for its p99)")
        if load.duration_s is not None:
            why.append("no load.duration_s (a probe ends on its count, or early once it clearly fails)")
        if load.warmup_requests < 1:
            why.append("load.warmup_requests >= 1 per probe")
        if why:
            raise ValueError(f"serving {self.name}: load.capacity needs " + "; ".join(why))


class ServingStep(StrictModel):
    """One serving workload at one replica count, on the nodes it runs on."""

    id: Name = Field(description="NAME-rREPLICAS, e.g. chat-r2")
    index: int = Field(ge=0, description="position among the plan's serving steps, from 0")
    workload: Name
    engine: Engine
    replicas: int = Field(ge=1)
    nodes_per_replica: int = Field(ge=1)
    gpus_per_replica_node: int = Field(ge=1)
    nodes: list[str] = Field(description="inventory node names (none for engine: external)")
    levels: list[str] = Field(description="load levels in order: c1, c2 (concurrency), r0.5 (requests/s)")
    variant: Name | None = Field(
        default=None, description="the stack's engine variant the step runs (the workload's variant)"
    )
