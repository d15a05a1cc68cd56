"""The test plan: what to run (ladder x collectives x sizes, serving workloads), how long, and what
counts as a pass.

A Plan is what a YAML file (built-in or the user's) says, after CLI overrides; a Step is one point
of the ladder once the plan meets a cluster (see orchestrator.plan.expand_steps), a ServingStep one
serving workload at one replica count (orchestrator.plan.expand_serving_steps). A plan holds
collective steps, serving steps, or both (docs/serving.md, "The plan model").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic.config import JsonDict

from orchestrator.models.base import StrictModel
from orchestrator.models.diagnostics import PlanDiagnostic
from orchestrator.models.fault import PlanFault
from orchestrator.models.names import Name
from orchestrator.models.quality_gate import QualityGate
from orchestrator.models.results import COLLECTIVES, PlanCollective
from orchestrator.models.serving import ServingWorkload

Backend = Literal["slurm", "local", "auto"]
SlurmMode = Literal["allocation", "allocation-batch", "per-step"]

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
SLURM_WORD = r"^[A-Za-z0-9_.\-]+$"
"""What a Slurm name from a plan or the command line may hold (partition): no shell, no spaces."""
_COUNTS_RANGE_RE = re.compile(r"^(\d+|[ng])\.\.(\d+|[ng])(?::x(\d+))?$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from `1024`, `8`, `1K`, `128M`, `1G` (binary suffixes; a trailing B/iB is allowed).

    Raises ValueError on anything else.
    """
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative: {text}")
        return text
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (expected e.g. 8, 1K, 128M, 1G)")
    return int(m.group(1)) * _SUFFIX[m.group(2).lower()]


# What the loader takes for a size, as the published JSON Schema says it (`orch schema plan`):
# bytes as an integer, or a string parse_size reads (8, 1K, 128M, 1G, 2MiB; binary suffixes).
_SIZE_TEXT = r"^\s*[0-9]+\s*[kmgtKMGT]?([iI]?[bB])?\s*$"
_SIZE_TEXT_NONZERO = r"^\s*0*[1-9][0-9]*\s*[kmgtKMGT]?([iI]?[bB])?\s*$"


def _size_schema(minimum: int, pattern: str) -> WithJsonSchema:
    forms = [{"type": "integer", "minimum": minimum}, {"type": "string", "pattern": pattern}]
    return WithJsonSchema({"anyOf": forms})


SizeBytes = Annotated[int, _size_schema(1, _SIZE_TEXT_NONZERO)]
ThresholdSize = Annotated[int, _size_schema(0, _SIZE_TEXT)]


def _size_text(v: object) -> object:
    """A size written as text (8, 1K, 128M) in bytes; any other value as it is, for the type to check."""
    if isinstance(v, str):
        return parse_size(v)
    return v


def format_size(n: int) -> str:
    """Bytes in the same binary units parse_size takes: 1048576 -> '1M', 1536 -> '1536'."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def check_counts_spec(spec: str) -> None:
    """Validate the syntax of a count list: `1,2,4`, `1..N`, `2..8`, `1..G:x2`; raises ValueError."""
    parts = [p.strip() for p in spec.split(",")]
    if not spec.strip() or any(not p for p in parts):
        raise ValueError(f"empty element in {spec!r}")
    for p in parts:
        if p.isdigit():
            if int(p) < 1:
                raise ValueError(f"counts must be >= 1, got {p!r}")
            continue
        if p.lower() in ("n", "g"):
            continue
        m = _COUNTS_RANGE_RE.match(p)
        if not m:
            raise ValueError(f"not a count or range: {p!r} (expected e.g. 1,2,4 or 1..N or 1..N:x2)")
        lo, hi, factor = m.group(1), m.group(2), m.group(3)
        if lo.isdigit() and int(lo) < 1:
            raise ValueError(f"counts must be >= 1, got {p!r}")
        if lo.isdigit() and hi.isdigit() and int(lo) > int(hi):
            raise ValueError(f"empty range {p!r}")
        if factor is not None and int(factor) < 2:
            raise ValueError(f"range factor must be >= 2 in {p!r}")


def check_counts(v: str | list[int]) -> None:
    """Validate a count list as a plan gives it: a spec (check_counts_spec) or a non-empty list of
    integers >= 1; raises ValueError."""
    if isinstance(v, str):
        check_counts_spec(v)
    elif not v or any(x < 1 for x in v):
        raise ValueError("counts must be a non-empty list of integers >= 1")


def resolve_counts(spec: str | list[int], n: int | None = None, g: int | None = None) -> list[int]:
    """Expand a count list into sorted distinct integers.

    Forms: `1,2,4`; `N` or `G` alone; `a..b` (every integer); `a..b:xF` (a, a*F, a*F^2 ... and b
    itself); a list.
    `N` stands for n (nodes in the inventory), `G` for g (GPUs per node). Raises ValueError on bad
    syntax, or when a letter is used whose value is not known here.
    """
    if isinstance(spec, list):
        values = set(spec)
    else:
        check_counts_spec(spec)
        symbols = {"n": n, "g": g}
        values = set()
        for p in (x.strip() for x in spec.split(",")):
            m = _COUNTS_RANGE_RE.match(p)
            toks = (m.group(1), m.group(2)) if m else (p, p)
            ends: list[int] = []
            for tok in (t.lower() for t in toks):
                if tok.isdigit():
                    ends.append(int(tok))
                    continue
                val = symbols[tok]
                if val is None:
                    raise ValueError(f"{spec!r} uses {tok.upper()} but its value is not known here")
                ends.append(val)
            lo, hi = ends
            if m and m.group(3):
                v, f = lo, int(m.group(3))
                while v < hi:
                    values.add(v)
                    v *= f
                if lo <= hi:
                    values.add(hi)
            else:
                values.update(range(lo, hi + 1))
    if not values or any(v < 1 for v in values):
        raise ValueError(f"counts must be >= 1 and not empty: {spec!r}")
    return sorted(values)


class Ladder(StrictModel):
    """The points to run: every node count x every ranks-per-node value."""

    nodes: str | list[int] = Field(
        default="1..N", description="node counts: a list, or a spec such as '1,2,4' or '1..N' (N = inventory)"
    )
    ranks_per_node: str | list[int] = Field(
        default=[1],
        description="ranks (GPUs) per node: a list, or a spec such as '1..G:x2' (G = gpus_per_node)",
    )

    @field_validator("nodes", "ranks_per_node")
    @classmethod
    def _check_counts(cls, v: str | list[int]) -> str | list[int]:
        check_counts(v)
        return v


class SizeRange(StrictModel):
    """Message sizes as nccl-tests takes them: min, max and a multiplication factor (-b/-e/-f)."""

    min: SizeBytes = Field(ge=1, description="smallest size in bytes (YAML may say 8, 1K, 1M)")
    max: SizeBytes = Field(ge=1, description="largest size in bytes")
    factor: int = Field(default=2, ge=2, description="each size is the previous one times this")

    @field_validator("min", "max", mode="before")
    @classmethod
    def _parse(cls, v: object) -> object:
        if isinstance(v, str | int) and not isinstance(v, bool):
            return parse_size(v)
        return v

    @model_validator(mode="after")
    def _ordered(self) -> SizeRange:
        if self.min > self.max:
            raise ValueError(f"min size {self.min} is larger than max size {self.max}")
        return self

    def values(self) -> list[int]:
        """Every size from min to max (max included only when the factor lands on it)."""
        out, s = [], self.min
        while s <= self.max:
            out.append(s)
            s *= self.factor
        return out


class BusbwThreshold(StrictModel):
    """Minimum bus bandwidth of one collective, at one size or (by default) at the largest size."""

    collective: PlanCollective
    min_gbs: float = Field(gt=0, description="minimum busbw in GB/s (1e9 bytes/s, as nccl-tests)")
    size: ThresholdSize | None = Field(
        default=None, ge=0, description="message size in bytes (8, 1K, 1M); None = the largest size"
    )

    _parse = field_validator("size", mode="before")(_size_text)


class BaselineThreshold(StrictModel):
    """busbw must reach a fraction of a named baseline's busbw (same step, collective and size)."""

    name: str = Field(min_length=1, description="the baseline's name in the results store")
    min_fraction: float = Field(gt=0, le=10, description="e.g. 0.9: at least 90% of the baseline")


DetectFigure = Literal["ttft_p99", "itl_p99", "tpot_p99", "output_tokens_per_s", "slo_attainment"]
"""The serving figures a migration's compare judges per step and level (docs/migration.md)."""


def _share_text(v: Any) -> Any:
    """A relative change as a share (0.1) or a percentage ("10%", "10 %")."""
    if isinstance(v, str) and v.strip().endswith("%"):
        try:
            return float(v.strip()[:-1].strip()) / 100
        except ValueError:
            return v
    return v


Share = Annotated[float, BeforeValidator(_share_text), Field(gt=0, le=10)]


class Thresholds(StrictModel):
    """What a step must reach to pass; empty means no performance verdict, only correctness."""

    busbw: list[BusbwThreshold] = Field(default_factory=list)
    baseline: BaselineThreshold | None = None
    min_scaling_efficiency: float | None = Field(
        default=None,
        gt=0,
        le=10,
        description="busbw(step) / busbw(reference step) at the largest size: one-node steps against the "
        "one-node step of the fewest ranks above 1, multi-node steps against the 2-node step of the same "
        "ranks per node; judged beyond the noise band only",
    )
    detect: dict[DetectFigure, Share] = Field(
        default_factory=dict,
        description="a migration's compare: the smallest change it must detect, per serving figure "
        "(e.g. {ttft_p99: 10%, output_tokens_per_s: 10%}); a figure whose A-against-A band is wider "
        "is blind, and B is not accepted on it",
    )


class IsolationRule(StrictModel):
    """How `scale-test --isolate` tests the nodes of a failing step: isolate's own short plan (one
    collective, one size, a minute at most per test) and its pass rule (docs/isolation.md)."""

    size: ThresholdSize | None = Field(
        default=None, ge=1, description="message size; None = the plan's largest size up to 64M"
    )
    iters: int = Field(default=5, ge=1)
    timeout_s: int | None = Field(
        default=None, ge=5, le=60, description="time limit of one test; None = step_timeout_s up to 60"
    )
    tolerance: float = Field(default=0.2, ge=0, lt=1, description="a single node: within this of the median")
    min_efficiency: float = Field(
        default=0.5, gt=0, le=1, description="a group: at least this share of the median single-node busbw"
    )
    min_gbs: float | None = Field(default=None, gt=0, description="absolute busbw floor, GB/s")

    _parse = field_validator("size", mode="before")(_size_text)


# What the loader refuses across fields, said in the published JSON Schema too (`orch schema plan`):
# sizes are required unless collectives is empty, and collectives may be empty only beside serving.
_PLAN_SCHEMA_RULES: JsonDict = {
    "allOf": [
        {
            "anyOf": [
                {"required": ["sizes"]},
                {"required": ["collectives"], "properties": {"collectives": {"maxItems": 0}}},
            ]
        },
        {
            "anyOf": [
                {"not": {"required": ["collectives"]}},
                {"properties": {"collectives": {"minItems": 1}}},
                {"required": ["serving"], "properties": {"serving": {"minItems": 1}}},
            ]
        },
    ]
}
_NO_SIZES = SizeRange(min=1 << 10, max=1 << 20, factor=4)
"""Stands for `sizes` in a plan without collectives, where no size is ever used."""


def _refuse_twice(names: list[str], what: str, why: str = "") -> None:
    """Raise ValueError naming the names given more than once."""
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{what} given twice: {', '.join(twice)}{why}")


class Plan(StrictModel):
    """A resolved test plan (a YAML file plus CLI overrides)."""

    model_config = ConfigDict(json_schema_extra=_PLAN_SCHEMA_RULES)

    name: Name = Field(description="becomes part of run ids and job names (see models/names.py)")
    description: str = ""
    ladder: Ladder = Field(default_factory=Ladder)
    collectives: list[PlanCollective] = Field(
        default_factory=lambda: list(COLLECTIVES),
        description="collectives of the ladder's steps; [] for a plan of serving steps only",
    )
    sizes: SizeRange = Field(
        default_factory=lambda: _NO_SIZES.model_copy(), description="required when the plan has collectives"
    )
    dtype: Literal["float"] = "float"
    warmup_iters: int = Field(default=5, ge=0)
    iters: int = Field(default=20, ge=1)
    check: bool = Field(default=True, description="verify results and count #wrong")
    step_timeout_s: int = Field(default=600, ge=1, description="time limit of one step (one job)")
    run_timeout_s: int | None = Field(default=None, ge=1, description="time limit of the whole run")
    thresholds: Thresholds = Field(default_factory=Thresholds)
    concurrent_steps: bool = Field(default=False, description="let steps on disjoint nodes run together")
    max_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="the largest share of the cluster's nodes that faults may hit, or that --drain-bad "
        "may drain, without --force",
    )
    telemetry_interval_s: float = Field(
        default=1.0,
        ge=0,
        le=3600,
        description="seconds between GPU telemetry samples on each node while a step runs; 0 = off"
        " (docs/telemetry.md)",
    )
    isolation: IsolationRule = Field(
        default_factory=IsolationRule, description="scale-test --isolate: its tests and pass rule"
    )
    backend: Backend = "auto"
    slurm_mode: SlurmMode = Field(
        default="allocation",
        description="Slurm: the ladder as job steps of one allocation (sruns started by orch, or by "
        "an sbatch'd driver: allocation-batch), or a job per step (scale-test.md)",
    )
    partition: str | None = Field(
        default=None, pattern=SLURM_WORD, description="Slurm partition (letters, digits, _ . - only)"
    )
    mixed_vendors: bool = Field(
        default=False,
        description="let one step mix nodes of different gpu_vendor (amd, nvidia, none); refused by default",
    )
    stack: str | None = Field(
        default=None, description="stack the nodes are checked against (default: the inventory's orch_stack)"
    )
    faults: list[PlanFault] = Field(
        default_factory=list, description="faults injected while steps run (see docs/faults.md)"
    )
    serving: list[ServingWorkload] = Field(
        default_factory=list, description="serving workloads, one step per replica count (docs/serving.md)"
    )
    quality: QualityGate | None = Field(
        default=None, description="the output-quality gate of B's answers against A's (docs/quality.md)"
    )
    diagnostics: list[PlanDiagnostic] = Field(
        default_factory=list,
        description="GPU and NIC diagnostics, run before the ladder (docs/diagnostics.md)",
    )

    @field_validator("diagnostics")
    @classmethod
    def _diagnostic_tools(cls, v: list[PlanDiagnostic]) -> list[PlanDiagnostic]:
        _refuse_twice([d.tool for d in v], "diagnostic tool(s)", " (one step per tool)")
        return v

    @field_validator("serving")
    @classmethod
    def _serving_names(cls, v: list[ServingWorkload]) -> list[ServingWorkload]:
        _refuse_twice([w.name for w in v], "serving workload name(s)")
        for w in v:
            try:
                check_counts(w.replicas)
            except ValueError as e:
                raise ValueError(f"serving {w.name}: replicas {w.replicas!r}: {e}") from e
        return v

    @model_validator(mode="after")
    def _something_to_run(self) -> Plan:
        if not self.collectives and not self.serving and not self.diagnostics:
            raise ValueError(
                "collectives is empty and there is no serving workload or diagnostic: the plan runs nothing"
            )
        if self.collectives and "sizes" not in self.model_fields_set:
            raise ValueError(
                "sizes: required when the plan has collectives (e.g. {min: 1K, max: 1M, factor: 4})"
            )
        return self

    @field_validator("collectives")
    @classmethod
    def _known(cls, v: list[PlanCollective]) -> list[PlanCollective]:
        unsupported = [c for c in v if c not in COLLECTIVES]
        if unsupported:
            raise ValueError(f"unsupported collective(s) {unsupported}; choose from {list(COLLECTIVES)}")
        # keep the canonical order, drop duplicates
        return [c for c in COLLECTIVES if c in v]


class PlanOverrides(StrictModel):
    """What the CLI flags say, as given (strings are parsed by orchestrator.plan.apply_overrides)."""

    nodes: str | None = Field(default=None, description="--nodes: '1,2,4', '1..N'")
    gpus_per_node: str | None = Field(default=None, description="--gpus-per-node: '1,2,8', '1..4'")
    collectives: str | None = Field(default=None, description="--collectives: comma list")
    sizes: str | None = Field(default=None, description="--sizes: '8:128M:x2' or one size '1M'")
    iters: int | None = Field(default=None, ge=1)
    warmup_iters: int | None = Field(default=None, ge=0)
    check: bool | None = None
    backend: Backend | None = None
    slurm_mode: SlurmMode | None = Field(default=None, description="--slurm-mode")
    partition: str | None = None
    timeout_s: int | None = Field(default=None, ge=1, description="--timeout: per-step time limit")
    concurrent_steps: bool | None = Field(default=None, description="--concurrent-steps")
    stack: str | None = Field(default=None, description="--stack: NAME, or 'none' to skip the fingerprint")
    telemetry_interval_s: float | None = Field(
        default=None, ge=0, le=3600, description="--telemetry-interval: seconds, 0 = off"
    )
    out_dir: Path | None = Field(default=None, description="--out: run directory root (not part of Plan)")


class Step(StrictModel):
    """One point of the ladder on a given cluster: one job of nnodes x ranks_per_node ranks."""

    id: Name = Field(description="e.g. n2xg1: 2 nodes x 1 rank per node")
    index: int = Field(ge=0, description="position in the ladder, from 0 (a diagnostic step: among them)")
    nnodes: int = Field(ge=1)
    ranks_per_node: int = Field(ge=1)
    nodes: list[str] = Field(description="inventory node names the step runs on")
    world_size: int = Field(ge=1)
    collectives: list[PlanCollective]
    sizes: list[int]
    diagnostic: PlanDiagnostic | None = Field(
        default=None, description="a diagnostic step (no collectives): the tool it runs (docs/diagnostics.md)"
    )
