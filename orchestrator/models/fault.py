"""Faults: what to break (FaultSpec), what was done (FaultRecord), what it cost (RecoveryResult).

Records are written as JSON to ``runs/<id>/faults/``:

- ``<fault-id>.json`` — one FaultRecord per injection (inject/revert instants on orch's monotonic
  clock, outcome, timer, commands' results);
- ``recovery-<kind>.json`` — a RecoverySummary (median, p95, spread over the repeats; the repeats
  themselves are ``runs/<id>/recovery/<fault-id>.json``, RecoveryRecord, the one per-repeat file).

Targets are checked here as well as in orchestrator.faults.safety: a value that could mean
something to a shell never gets past model validation.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import checked, host_name_problem, interface_name_problem, shell_word_problem
from orchestrator.models.decision import RecoveryStatus

FaultKind = Literal[
    "kill-worker",
    "pause-worker",
    "restart-container",
    "link-down",
    "link-flap",
    "roce-drop",
    "packet-loss",
    "throttle",
    "delay",
    "node-loss",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
"""The names, for validation here (models/ imports no faults/); everything else a kind is (what it
does, what it reaches, how it is undone) is its registered FaultInfo in orchestrator.faults.kinds,
which orchestrator.faults.catalog collects and checks against these names."""

TargetForm = Literal["node", "iface", "worker", "container"]
"""What follows NODE: in a kind's target: nothing, an interface, a rank or `engine` (a worker), a
rank or a container name."""
TARGET_FORMS: dict[FaultKind, TargetForm] = {
    "kill-worker": "worker",
    "pause-worker": "worker",
    "restart-container": "container",
    "link-down": "iface",
    "link-flap": "iface",
    "roce-drop": "iface",
    "packet-loss": "iface",
    "throttle": "iface",
    "delay": "iface",
    "node-loss": "node",
}
TARGET_SYNTAX: dict[TargetForm, str] = {
    "node": "NODE",
    "iface": "NODE:IFACE",
    "worker": "NODE[:RANK|:engine]",
    "container": "NODE:RANK|NODE:CONTAINER",
}

# What a fault can reach: RDMA on a hardware RoCE NIC (bypasses the kernel: host iptables and tc
# never see it), RDMA through the kernel (soft-RoCE rxe/siw), and socket transports (gloo,
# NCCL_NET=Socket).
Transport = Literal["rdma-hw", "rdma-soft", "socket"]
TRANSPORTS: tuple[Transport, ...] = ("rdma-hw", "rdma-soft", "socket")

Outcome = Literal["active", "reverted", "unsupported", "refused", "failed"]

# Stricter than what Linux accepts: anything a shell could read as syntax is refused.
_PLAIN = re.compile(r"[A-Za-z0-9_.@+-]+")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


def plain_word_problem(value: str) -> str | None:
    """Say why ``value`` cannot be a word on orch's command lines, or None; raises nothing."""
    return shell_word_problem(value, _PLAIN)


def parse_duration(text: str | float | int) -> float:
    """Seconds from ``5``, ``5s``, ``250ms``, ``2m``; raises ValueError on anything else."""
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"duration must not be negative: {text}")
        return float(text)
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (expected e.g. 5, 5s, 250ms, 2m)")
    value = float(m.group(1))
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


class FaultTarget(StrictModel):
    """``NODE``, ``NODE:IFACE``, ``NODE:RANK``, ``NODE:engine`` or ``NODE:CONTAINER``, checked word
    by word. ``NODE:engine`` (kill-worker, pause-worker) means the processes of a serving engine
    orch started there: found by ORCH_ENGINE in their environment, not by a rank."""

    node: str
    iface: str | None = None
    rank: int | None = Field(default=None, ge=0)
    container: str | None = None
    process: Literal["engine"] | None = Field(
        default=None, description="engine: the serving engine's processes (ORCH_ENGINE in their environment)"
    )

    @field_validator("node")
    @classmethod
    def _node(cls, v: str) -> str:
        return checked(v, host_name_problem, "target node")

    @field_validator("iface")
    @classmethod
    def _iface(cls, v: str | None) -> str | None:
        if v is None:
            return v
        why = interface_name_problem(v) or plain_word_problem(v)
        if why is not None:
            raise ValueError(f"target interface {v!r} {why}")
        return v

    @field_validator("container")
    @classmethod
    def _container(cls, v: str | None) -> str | None:
        return None if v is None else checked(v, plain_word_problem, "target container")

    @classmethod
    def parse(cls, text: str, kind: FaultKind) -> FaultTarget:
        """Read ``NODE[:IFACE|:RANK]``; the part after ':' means what ``kind`` needs.

        Raises ValueError (wrapped by pydantic as ValidationError) on unsafe or malformed text.
        """
        node, sep, rest = text.partition(":")
        if not sep:
            return cls(node=node)
        if kind in IFACE_KINDS:
            return cls(node=node, iface=rest)
        if rest.isdigit():
            return cls(node=node, rank=int(rest))
        if TARGET_FORMS.get(kind) == "container":
            return cls(node=node, container=rest)
        if rest == ENGINE_TARGET and kind in WORKER_KINDS:
            return cls(node=node, process="engine")
        raise ValueError(f"target {text!r}: {kind} takes NODE, NODE:RANK or NODE:{ENGINE_TARGET}")

    def __str__(self) -> str:
        extra = (
            self.iface
            or (str(self.rank) if self.rank is not None else None)
            or self.container
            or self.process
        )
        return f"{self.node}:{extra}" if extra else self.node


ENGINE_TARGET = "engine"
"""The word after NODE: that names a serving engine's processes (kill-worker, pause-worker)."""
ENGINE_ENV = "ORCH_ENGINE"
"""The variable in a serving engine's environment: <run id>.<step id> (runs/serving.py)."""
ENGINE_NODE_ENV = "ORCH_ENGINE_NODE"
"""And the node it serves on: on one machine (the local backend, several hosts) the netns does not
tell two engines of one step apart."""

IFACE_KINDS: frozenset[str] = frozenset(k for k, f in TARGET_FORMS.items() if f == "iface")
WORKER_KINDS: frozenset[str] = frozenset(k for k, f in TARGET_FORMS.items() if f == "worker")
PROCESS_KINDS: frozenset[str] = frozenset(k for k, f in TARGET_FORMS.items() if f in ("worker", "container"))


class FaultParams(StrictModel):
    """Knobs of the fault families; each kind reads the ones it needs."""

    signal: Literal["KILL", "TERM", "INT", "SEGV", "ABRT"] = "KILL"
    probability: float = Field(default=0.05, gt=0, le=1, description="packet-loss drop probability")
    rate: str = Field(default="50mbit", pattern=r"^\d+(\.\d+)?[kmg]?(bit|bps)$", description="throttle")
    burst: str = Field(default="64kb", pattern=r"^\d+[kmg]?b?$")
    latency_ms: int = Field(default=100, ge=1, le=60_000, description="tbf queue latency")
    delay_ms: float = Field(default=50.0, gt=0, le=60_000)
    jitter_ms: float = Field(default=0.0, ge=0, le=60_000)
    flaps: int = Field(default=3, ge=1, le=100)
    restart_timeout_s: int = Field(default=1, ge=0, le=600, description="podman/docker restart -t")
    node_loss_mode: Literal["stop-slurmd", "scontrol-down"] = "stop-slurmd"
    podman_root: str | None = Field(default=None, pattern=r"^/[A-Za-z0-9_./+-]*$", description="--root")
    podman_runroot: str | None = Field(default=None, pattern=r"^/[A-Za-z0-9_./+-]*$", description="--runroot")
    match_env: str = Field(
        default="", description="extra NAME=VALUE a worker's environment must hold (e.g. a run id)"
    )

    @field_validator("match_env")
    @classmethod
    def _match(cls, v: str) -> str:
        if v and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.:@+-]*", v):
            raise ValueError(f"match_env {v!r} must be NAME=VALUE of plain characters")
        return v


class FaultSpec(StrictModel):
    """One fault to inject: kind, target, how long, and the safety margin of the node-side timer."""

    kind: FaultKind
    target: FaultTarget
    duration_s: float = Field(default=5.0, ge=0, le=86_400)
    margin_s: float = Field(default=2.0, ge=0.5, le=3_600, description="timer = duration + margin")
    params: FaultParams = Field(default_factory=FaultParams)
    force: bool = False

    @model_validator(mode="after")
    def _target_fits(self) -> FaultSpec:
        if self.kind in IFACE_KINDS and self.target.iface is None:
            raise ValueError(f"{self.kind} needs a target NODE:IFACE, not {str(self.target)!r}")
        if self.kind in WORKER_KINDS and self.target.iface is not None:
            raise ValueError(
                f"{self.kind} takes NODE, NODE:RANK or NODE:engine, not an interface ({str(self.target)!r})"
            )
        if self.target.process is not None and self.kind not in WORKER_KINDS:
            raise ValueError(f"{self.kind} does not take NODE:{self.target.process} ({str(self.target)!r})")
        return self


class RecoveryThresholds(StrictModel):
    """Maximum times a plan accepts; None means not judged."""

    max_detect_s: float | None = Field(default=None, gt=0)
    max_recover_s: float | None = Field(default=None, gt=0)
    max_restore_s: float | None = Field(default=None, gt=0)


class PlanFault(StrictModel):
    """A fault inside a scale-test plan: which step, when after its start, which target, thresholds.

    ``step`` is a step id (as `orch plan show` lists them) or a 0-based step index; None means
    every collective step. A serving step is named by its id (docs/serving.md, "Faults during
    serving"), with an optional ``level``. ``target`` uses the CLI syntax; ``rank``-style targets
    are resolved on the node.
    """

    kind: FaultKind
    step: str | int | None = None
    level: str | None = Field(
        default=None,
        pattern=r"^[cr][0-9][0-9.e+-]*$",
        description="serving steps only: the load level (c4, r0.5) the fault hits; default the step's first",
    )
    at_s: float = Field(
        default=10.0,
        ge=0,
        description="seconds after the step's workload started (a serving step: after the level's "
        "warm-up, when its counted load starts)",
    )
    target: str
    duration: Annotated[
        float,
        WithJsonSchema(
            {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": _DURATION.pattern}]}
        ),
    ] = Field(default=5.0, ge=0, description="seconds, or 5s, 250ms, 2m")
    margin_s: float = Field(default=2.0, ge=0.5)
    params: FaultParams = Field(default_factory=FaultParams)
    repeat: int = Field(default=1, ge=1, le=100)
    thresholds: RecoveryThresholds = Field(default_factory=RecoveryThresholds)

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: object) -> object:
        return parse_duration(v) if isinstance(v, str) else v

    def spec(self, force: bool = False) -> FaultSpec:
        """The FaultSpec this plan entry stands for; raises ValidationError on a bad target."""
        return FaultSpec(
            kind=self.kind,
            target=FaultTarget.parse(self.target, self.kind),
            duration_s=self.duration,
            margin_s=self.margin_s,
            params=self.params,
            force=force,
        )


class CommandTrace(StrictModel):
    """A node-side command orch ran for a fault, and how it ended."""

    what: str
    script: str
    rc: int
    stderr: str = ""
    elapsed_s: float


class FaultRecord(StrictModel):
    """What happened to one fault, from preparation to revert; written even when interrupted."""

    id: str
    kind: FaultKind
    node: str
    target: str
    spec: FaultSpec
    transports: list[Transport]
    outcome: Outcome
    message: str = ""
    t_call_mono: float | None = Field(default=None, description="inject() called, orch monotonic")
    t_active_mono: float | None = Field(default=None, description="node confirmed the fault active")
    t_revert_mono: float | None = None
    injected_at_mono: float | None = Field(
        default=None, description="the injection instant used for recovery timings"
    )
    inject_latency_s: float | None = None
    timer_pid: int | None = None
    timer_fires_after_s: float | None = None
    resolved: list[str] = Field(default_factory=list, description="PIDs / container ids acted on")
    commands: list[CommandTrace] = Field(default_factory=list)


class RecoveryResult(StrictModel):
    """Recovery of the probe after one injection; times in seconds after the injection instant."""

    fault_id: str
    kind: FaultKind
    repeat: int = 0
    injected_at_mono: float | None = Field(default=None, description="the injection instant, orch monotonic")
    verdict: RecoveryStatus
    detect_s: float | None = None
    recover_s: float | None = None
    restore_s: float | None = None
    steps_lost: int = 0
    restarts: int = 0
    step_median_s: float | None = None
    busbw_pre_gbs: float | None = None
    busbw_min_ratio: float | None = Field(default=None, description="worst rolling busbw / pre-fault")
    clock_offsets_s: dict[str, float] = Field(default_factory=dict, description="node wall - orch mono")
    held_s: float | None = Field(default=None, description="measured hold: revert - injection instant")
    stall_s: float | None = Field(default=None, description="longest gap between completed steps (> gap_s)")
    stall_at_s: float | None = Field(default=None, description="when that gap began, from the injection")
    steady: bool | None = Field(default=None, description="False: injected before steady state came")
    notes: list[str] = Field(default_factory=list)


class Stat(StrictModel):
    """median / p95 / spread (max - min) of one timing over the repeats that had it."""

    n: int
    median: float | None = None
    p95: float | None = None
    spread: float | None = None


class RecoverySummary(StrictModel):
    """All repeats of one fault kind and the statistics over them."""

    kind: FaultKind
    repeats: int
    verdicts: dict[str, int]
    detect: Stat
    recover: Stat
    restore: Stat
    results: list[RecoveryResult] = Field(
        default_factory=list,
        description="in memory only; on disk each repeat is its RecoveryRecord, recovery/<fault_id>.json",
    )
    fault_ids: list[str] = Field(default_factory=list, description="the repeats' recovery/<id>.json")
    probe_settings: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    notes: list[str] = Field(
        default_factory=list, description="repeats left out of a median, and medians out of order, with why"
    )
