"""GPU power on serving levels and the energy part of their cost: samples parsed from the verbatim
nvidia-smi and rocm-smi outputs of tests/fixtures/smi/ (each names its source) give each node's
mean watts and the energy computed here by hand; a level without telemetry names energy missing,
with why, never 0."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fakes import wait_for
from test_telemetry import FakeShell, _cluster, _opener

from orchestrator.metrics.cost import cost_at, cost_at_lines
from orchestrator.models.cost import CostModel
from orchestrator.models.serving import ServingStep
from orchestrator.models.serving_results import ServingLevelResult, ServingStepResult
from orchestrator.models.telemetry import NodeSample, NodeTelemetry
from orchestrator.runs.serving import NO_PROBE_POWER, capacity_watts_why
from orchestrator.telemetry.power import level_power, power_line
from orchestrator.telemetry.sampler import TelemetrySampler
from orchestrator.telemetry.smi import parse_sample

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "smi"
NV_LOOP = FIX / "nvidia-smi-query-gpu.csv"  # `nvidia-smi --query-gpu=... --format=csv -l`: GPU 0 looped
ROCM = FIX / "rocm-smi-ftP.json"  # rocm-smi -f -t -P --json: card0, "Average Graphics Package Power (W)"
H200 = FIX / "nvidia-smi-query-gpu-h200-load.csv"
MODEL = CostModel(energy_per_kwh=0.30, pue=1.4, staff_per_month=730.0)


def _nv_loop_samples() -> list[NodeSample]:
    """The looped query's first three rows, each with the header: one sample per row, as orch's
    sampler takes one query per interval (a level three samples long)."""
    lines = [ln for ln in NV_LOOP.read_text().splitlines() if ln and not ln.startswith("# source:")]
    return [
        NodeSample(t_s=float(i), tool="nvidia-smi", gpus=parse_sample("nvidia-smi", f"{lines[0]}\n{row}\n"))
        for i, row in enumerate(lines[1:4])
    ]


def _rocm_samples(n: int) -> list[NodeSample]:
    return [NodeSample(t_s=float(i), tool="rocm-smi", gpus=parse_sample("rocm-smi", ROCM.read_text()))
            for i in range(n)]  # fmt: skip


def test_a_level_with_nvidia_and_rocm_power_gives_the_energy_by_hand() -> None:
    text = NV_LOOP.read_text()
    assert all(w in text for w in ("83.92 W", "78.22 W", "84.77 W"))  # the rows' power.draw
    assert '"Average Graphics Package Power (W)": "222.0"' in ROCM.read_text()
    records = [
        NodeTelemetry(node="node1", tool="nvidia-smi", samples=_nv_loop_samples()),
        NodeTelemetry(node="node2", tool="rocm-smi", samples=_rocm_samples(2)),
    ]
    p = level_power(["node1", "node2"], records, {}, None)
    n1, n2 = p.nodes
    assert (n1.node, n1.samples, n1.gpus) == ("node1", 3, 1)
    assert n1.mean_w == pytest.approx((83.92 + 78.22 + 84.77) / 3)
    assert (n2.node, n2.samples) == ("node2", 2) and n2.mean_w == pytest.approx(222.0)
    watts = (83.92 + 78.22 + 84.77) / 3 + 222.0  # 304.3033 W for the two nodes
    assert p.watts == pytest.approx(watts) and p.why_not is None
    assert "node1 82.3 W over 1 GPU(s), 3 sample(s)" in power_line(p)

    c = cost_at(requests_per_s=2.0, output_tokens_per_s=500.0, model=MODEL, nodes=2, watts=p.watts,
                outage_s=None, rate="c8's measured rate", watts_why=p.why_not)  # fmt: skip
    energy = next(x for x in c.parts if x.name == "energy")
    per_hour = watts / 1000 * 1.0 * 0.30 * 1.4  # W / 1000 x 1 h x price per kWh x PUE
    assert energy.status == "measured" and energy.per_hour == pytest.approx(per_hour)
    assert energy.per_hour == pytest.approx(0.127807, rel=1e-4)
    staff = 730.0 / 730 * 2  # the other known part, per hour of the two nodes
    assert c.per_hour == pytest.approx(per_hour + staff)
    assert c.per_request == pytest.approx((per_hour + staff) / (3600 * 2.0))
    assert c.per_million_output_tokens == pytest.approx((per_hour + staff) / (3600 * 500.0) * 1e6)
    # its share of each: energy alone per successful request and per 1M output tokens
    assert per_hour / (3600 * 2.0) == pytest.approx(1.77510e-5, rel=1e-4)
    assert per_hour / (3600 * 500.0) * 1e6 == pytest.approx(0.0710041, rel=1e-4)
    assert "energy" not in c.missing
    assert any("304.3 W measured" in line for line in cost_at_lines(c))


def test_a_node_without_telemetry_names_energy_missing_with_why_never_zero() -> None:
    why = {"node1": "no power telemetry on node1: no nvidia-smi/amd-smi/rocm-smi"}
    p = level_power(["node1"], None, why, None)
    (n,) = p.nodes
    assert n.mean_w is None and n.samples == 0 and n.why_not == why["node1"]
    assert p.watts is None and p.why_not == why["node1"]
    c = cost_at(requests_per_s=2.0, output_tokens_per_s=500.0, model=MODEL, nodes=1, watts=p.watts,
                outage_s=None, rate="c8's measured rate", watts_why=p.why_not)  # fmt: skip
    energy = next(x for x in c.parts if x.name == "energy")
    assert energy.status == "missing" and energy.per_hour is None
    assert energy.basis == f"missing: {why['node1']}"
    assert "energy" in c.missing and c.per_hour == pytest.approx(1.0)  # staff alone: partial, not 0 W


def test_one_node_with_power_and_one_without_leaves_energy_missing_naming_that_node() -> None:
    records = [NodeTelemetry(node="node1", tool="rocm-smi", samples=_rocm_samples(1))]
    p = level_power(["node1", "node2"], records, {"node2": "could not ask node2: timeout"}, None)
    assert p.nodes[0].mean_w == pytest.approx(222.0)
    assert p.watts is None and p.why_not == "could not ask node2: timeout"
    off = level_power(["node1"], None, {}, "telemetry off (telemetry_interval_s 0)")
    assert off.why_not == "telemetry off (telemetry_interval_s 0)"


def test_a_node_whose_tool_printed_no_power_says_so() -> None:
    gpus = [g.model_copy(update={"power_w": None}) for g in parse_sample("rocm-smi", ROCM.read_text())]
    rec = NodeTelemetry(
        node="node1", tool="rocm-smi", samples=[NodeSample(t_s=0.0, tool="rocm-smi", gpus=gpus)]
    )
    (n,) = level_power(["node1"], [rec], {}, None).nodes
    assert n.mean_w is None and n.why_not == "rocm-smi on node1 printed no power for every GPU in 1 sample(s)"


def _serving_step(nodes: list[str]) -> ServingStep:
    return ServingStep(id="chat-r1", index=0, workload="chat", engine="vllm", replicas=1, levels=["c8"],
                       nodes_per_replica=1,
                       gpus_per_replica_node=1, nodes=nodes)  # fmt: skip


def test_the_run_sampler_samples_a_serving_level_window_and_names_nodes_without_a_tool() -> None:
    nv = FakeShell("nvidia-smi /usr/bin/nvidia-smi\n", H200.read_text())
    open_shells, _ = _opener({"node1": nv, "node2": FakeShell("")})
    step = _serving_step(["node1", "node2"])
    sampler = TelemetrySampler(_cluster(["node1", "node2"]), [step], 0.02, open_shells)
    sampler.start()
    assert sampler.why_not == {"node2": "no power telemetry on node2: no nvidia-smi/amd-smi/rocm-smi"}
    sampler.window_started("chat-r1/c8", step.nodes)
    wait_for(lambda: len(nv.scripts) >= 1 + 3, 10, "a third sample of node1 asked (two done)")
    got = sampler.window_ended("chat-r1/c8", step.nodes)
    n_after = len(nv.scripts)
    time.sleep(0.1)  # the behaviour: five sampling intervals after the level's end, not sampled
    sampler.close()
    assert len(nv.scripts) <= n_after + 1
    assert got is not None and [r.node for r in got] == ["node1"]
    p = level_power(step.nodes, got, sampler.why_not, None)
    n1, n2 = p.nodes
    cells = H200.read_text().splitlines()
    header = [h.strip() for h in cells[1].split(",")]
    drawn = float(cells[2].split(",")[header.index("power.draw [W]")].strip().removesuffix(" W"))
    assert n1.mean_w == pytest.approx(drawn) and n1.samples == len(got[0].samples) >= 2
    assert n2.mean_w is None and p.why_not == "no power telemetry on node2: no nvidia-smi/amd-smi/rocm-smi"


def test_energy_at_the_capacity_names_the_levels_reason_or_that_probes_are_not_sampled() -> None:
    step = _serving_step(["node1"])
    lab = ServingLevelResult(level="c8", records="steps/chat-r1/records-c8.jsonl", summary=None)
    lab.power = level_power(["node1"], None, {"node1": "no power telemetry on node1: no nvidia-smi"}, None)
    res = ServingStepResult(step=step, levels=[lab])
    assert capacity_watts_why(res) == "no power telemetry on node1: no nvidia-smi"
    records = [NodeTelemetry(node="node1", tool="rocm-smi", samples=_rocm_samples(1))]
    lab.power = level_power(["node1"], records, {}, None)
    assert capacity_watts_why(res) == NO_PROBE_POWER
