"""GPU telemetry sampled on the nodes while a ladder step runs (orchestrator/telemetry/), and what
each step's report says of it: GB/s per watt, throttling, new ECC and link errors."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel

TelemetryTool = Literal["nvidia-smi", "amd-smi", "rocm-smi"]


class GpuSample(StrictModel):
    """One GPU at one moment, as its tool printed it; None where the tool printed N/A or nothing."""

    index: int = Field(ge=0)
    bus_id: str | None = None
    power_w: float | None = None
    temperatures_c: dict[str, float] = Field(
        default_factory=dict, description="sensor -> degrees C (gpu, memory, edge, junction ...)"
    )
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    utilization_pct: float | None = None
    throttle: list[str] = Field(
        default_factory=list,
        description="active clock-limiting reasons (idle and application-clock settings left out)",
    )
    ecc_corrected: int | None = Field(default=None, description="volatile corrected ECC errors")
    ecc_uncorrected: int | None = Field(
        default=None, description="volatile uncorrected ECC errors (amd-smi: uncorrectable plus deferred)"
    )
    retired_pages: int | None = Field(
        default=None, description="retired pages plus uncorrectable remapped rows"
    )
    pcie_replays: int | None = None
    nvlink_errors: int | None = Field(
        default=None,
        description="NVLink replay + recovery + CRC errors summed over the GPU's links (nvlink -e)",
    )
    xgmi_errors: int | None = Field(
        default=None,
        description="amd-smi metric: the XGMI_WAFL RAS block's correctable + uncorrectable + deferred "
        "counts plus the xgmi_err status (NO_ERRORS 0, ERROR 1, MULTIPLE_ERRORS 2), where printed",
    )


class NodeSample(StrictModel):
    """One sampling round on one node: every GPU its tool listed."""

    t_s: float = Field(description="seconds since the run's sampler started (monotonic clock)")
    tool: TelemetryTool
    gpus: list[GpuSample]


class NodeTelemetry(StrictModel):
    """One node's samples during one step (steps/<id>/telemetry.json)."""

    node: str
    tool: TelemetryTool
    samples: list[NodeSample] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list, description="samples that failed, first few only")


class StepTelemetryRecord(StrictModel):
    """Every sample of one step, as written to its folder."""

    step: str
    interval_s: float
    nodes: list[NodeTelemetry]


class NodeTelemetrySummary(StrictModel):
    """What one node's samples of a step come to."""

    node: str
    tool: TelemetryTool
    samples: int = Field(ge=0)
    gpus: list[int] = Field(description="the GPU indices counted as the step's (the first ranks_per_node)")
    mean_power_w: float | None = Field(default=None, description="mean over samples and those GPUs, per GPU")
    max_temperature_c: float | None = None
    min_sm_clock_mhz: float | None = None
    throttled: dict[int, list[str]] = Field(default_factory=dict, description="GPU -> reasons seen")
    new_ecc: dict[int, str] = Field(
        default_factory=dict,
        description="GPU -> the error counters (ECC, retired pages, PCIe, NVLink, xGMI) that rose",
    )


class StepTelemetry(StrictModel):
    """The step's telemetry summary, kept in its result (the full samples are in its folder)."""

    interval_s: float
    nodes: list[NodeTelemetrySummary] = Field(default_factory=list)
    mean_power_w: float | None = Field(default=None, description="mean power per GPU over the step's GPUs")
    gbs_per_w: dict[str, float] = Field(
        default_factory=dict, description="collective -> busbw (largest size) / mean power per GPU"
    )
    notes: list[str] = Field(default_factory=list, description="the lines the report and verdict print")


class NodePower(StrictModel):
    """One node's measured GPU power during a serving level, or why there is none."""

    node: str
    mean_w: float | None = Field(
        default=None, ge=0, description="mean over samples of the node's GPUs' power summed (W)"
    )
    samples: int = Field(default=0, ge=0, description="samples with a power reading on every GPU listed")
    gpus: int = Field(default=0, ge=0, description="GPUs the tool listed on the node")
    why_not: str | None = Field(default=None, description="why mean_w is None")


class LevelPower(StrictModel):
    """A serving level's GPU power per node (telemetry/power.py): the energy part of its cost."""

    nodes: list[NodePower]

    @property
    def watts(self) -> float | None:
        """The nodes' mean power together; None when a node has none."""
        if not self.nodes or any(n.mean_w is None for n in self.nodes):
            return None
        return sum(n.mean_w or 0.0 for n in self.nodes)

    @property
    def why_not(self) -> str | None:
        """Why watts is None: each node's reason."""
        if self.watts is not None:
            return None
        if not self.nodes:
            return "no inventory node serves (engine: external): no power sampled"
        return "; ".join(n.why_not or f"{n.node}: no power" for n in self.nodes if n.mean_w is None)
