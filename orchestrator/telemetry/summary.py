"""What a step's telemetry samples come to: mean power per GPU, GB/s per watt, throttling, new ECC,
PCIe, NVLink and xGMI errors, and the lines the report and the verdict text print."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean

from orchestrator.models.plan import Step
from orchestrator.models.results import Collective, CollSummary
from orchestrator.models.telemetry import GpuSample, NodeTelemetry, NodeTelemetrySummary, StepTelemetry

# counters that only grow; one that is higher at the step's end than at its start rose during it
COUNTERS = (
    "ecc_uncorrected",
    "ecc_corrected",
    "retired_pages",
    "pcie_replays",
    "nvlink_errors",
    "xgmi_errors",
)
NO_TOOL = "no GPU telemetry tool (nvidia-smi, amd-smi, rocm-smi) on"
NEW_ERRORS = "telemetry: NEW ECC/PCIe/NVLink/xGMI errors during the step: "


def no_tool_line(nodes: Sequence[str]) -> str:
    """The one line a run prints for the nodes that have none of the tools (the lab's)."""
    return f"telemetry: {NO_TOOL} {', '.join(nodes)}; their steps carry no power, clock or ECC figures"


def _step_gpus(rec: NodeTelemetry, ranks_per_node: int) -> list[int]:
    """The GPUs counted as the step's: the first ranks_per_node indices the tool listed (local
    rank i on GPU i, the binding collbench and Slurm's gres use by default)."""
    seen = sorted({g.index for s in rec.samples for g in s.gpus})
    return seen[:ranks_per_node]


def _rises(first: GpuSample, last: GpuSample) -> list[str]:
    out = []
    for name in COUNTERS:
        a, b = getattr(first, name), getattr(last, name)
        if a is not None and b is not None and b > a:
            out.append(f"{name} {a}→{b}")
    return out


def summarize_node(rec: NodeTelemetry, ranks_per_node: int) -> NodeTelemetrySummary:
    """One node's samples of one step, over the GPUs counted as the step's."""
    gpus = _step_gpus(rec, ranks_per_node)
    per_gpu: dict[int, list[GpuSample]] = {i: [] for i in gpus}
    for s in rec.samples:
        for g in s.gpus:
            if g.index in per_gpu:
                per_gpu[g.index].append(g)
    samples = [g for gs in per_gpu.values() for g in gs]
    powers = [g.power_w for g in samples if g.power_w is not None]
    temps = [t for g in samples for t in g.temperatures_c.values()]
    clocks = [g.sm_clock_mhz for g in samples if g.sm_clock_mhz is not None]
    throttled: dict[int, list[str]] = {}
    new_ecc: dict[int, str] = {}
    for i, gs in per_gpu.items():
        reasons = sorted({r for g in gs for r in g.throttle})
        if reasons:
            throttled[i] = reasons
        if len(gs) >= 2 and (rose := _rises(gs[0], gs[-1])):
            new_ecc[i] = ", ".join(rose)
    return NodeTelemetrySummary(
        node=rec.node,
        tool=rec.tool,
        samples=len(rec.samples),
        gpus=gpus,
        mean_power_w=fmean(powers) if powers else None,
        max_temperature_c=max(temps) if temps else None,
        min_sm_clock_mhz=min(clocks) if clocks else None,
        throttled=throttled,
        new_ecc=new_ecc,
    )


def _power_readings(rec: NodeTelemetry, gpus: list[int]) -> int:
    return sum(1 for s in rec.samples for g in s.gpus if g.index in gpus and g.power_w is not None)


def summarize_step(
    step: Step,
    records: Sequence[NodeTelemetry],
    summary: Mapping[Collective, CollSummary],
    interval_s: float,
) -> StepTelemetry:
    """The step's telemetry: per node, then mean power per GPU over all of the step's GPUs and
    busbw / that power per collective, with a line for each finding."""
    nodes = [summarize_node(r, step.ranks_per_node) for r in records]
    weighted = [
        (n.mean_power_w, _power_readings(r, n.gpus))
        for n, r in zip(nodes, records, strict=True)
        if n.mean_power_w is not None
    ]
    total = sum(k for _, k in weighted)
    mean_power = sum(p * k for p, k in weighted) / total if total else None
    per_w = {c: s.busbw_gbs / mean_power for c, s in summary.items()} if mean_power and mean_power > 0 else {}
    notes: list[str] = []
    if mean_power is not None:
        ngpus = sum(len(n.gpus) for n in nodes if n.mean_power_w is not None)
        line = f"telemetry: mean power {mean_power:.1f} W per GPU over {ngpus} GPU(s)"
        if per_w:
            line += "; " + ", ".join(f"{c} {v:.3f} GB/s per W" for c, v in per_w.items())
        notes.append(line)
    throttled = [f"{n.node} GPU {i} ({', '.join(r)})" for n in nodes for i, r in n.throttled.items()]
    if throttled:
        notes.append("telemetry: THROTTLED during the step: " + "; ".join(throttled))
    ecc = [f"{n.node} GPU {i} ({what})" for n in nodes for i, what in n.new_ecc.items()]
    if ecc:
        notes.append(NEW_ERRORS + "; ".join(ecc))
    silent = [r.node for r in records if not r.samples]
    if silent:
        why = "; ".join(f"{r.node}: {r.errors[0]}" for r in records if not r.samples and r.errors)
        notes.append(f"telemetry: no samples from {', '.join(silent)}" + (f" ({why})" if why else ""))
    return StepTelemetry(
        interval_s=interval_s, nodes=nodes, mean_power_w=mean_power, gbs_per_w=per_w, notes=notes
    )
