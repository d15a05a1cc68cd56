"""GPU telemetry: the sampling commands' parsers on verbatim outputs (tests/fixtures/smi/, each with
its source), the per-step summary (GB/s per W, throttling, new ECC errors), the sampler over
kept-open shells and its one 'no tool' line per run, and the step's figures in the store."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fakes import wait_for
from test_store_build import make_run

from orchestrator.errors import ParseError, RemoteError
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.plan import PlanOverrides, Step
from orchestrator.models.results import Collective, CollSummary
from orchestrator.models.run import RunResult, StepResult
from orchestrator.models.telemetry import GpuSample, NodeSample, NodeTelemetry
from orchestrator.plan import resolve_plan
from orchestrator.remote.base import CmdResult, NodeShell
from orchestrator.report.common import step_notes
from orchestrator.runs.scale_test import _telemetry
from orchestrator.store.db import ResultsStore
from orchestrator.store.rundir import atomic_write
from orchestrator.telemetry import smi
from orchestrator.telemetry.sampler import PROBE_SCRIPT, TelemetrySampler, parse_probe
from orchestrator.telemetry.summary import NEW_ERRORS, NO_TOOL, summarize_step

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "smi"
H200 = FIX / "nvidia-smi-query-gpu-h200-load.csv"
H100 = FIX / "nvidia-smi-query-gpu-h100-load.csv"
AMD_METRIC = FIX / "amd-smi-metric-rx6600.json"
NVLINK = FIX / "nvidia-smi-nvlink-e-h100.txt"
# the line the page's author put for the links he left out (2 to 16): his, not the tool's
ELIDED = "         [...]"


def _nvlink_as_printed() -> str:
    """The NVLink fixture without the author's elision line: the lines the tool printed."""
    return "\n".join(ln for ln in NVLINK.read_text().splitlines() if ln != ELIDED) + "\n"


def _csv_cells(path: Path) -> dict[str, str]:
    """The fixture's header -> cell of its one GPU row, read without the parser under test."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("# source:")]
    header = [h.strip().split(" [")[0] for h in lines[0].split(",")]
    return dict(zip(header, (c.strip() for c in lines[1].split(",")), strict=True))


# --- parsers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [H200, H100])
def test_nvidia_query_under_load(path: Path) -> None:
    cells = _csv_cells(path)
    (g,) = smi.parse_nvidia_query(path.read_text())
    assert g.index == int(cells["index"])
    assert g.bus_id == cells["pci.bus_id"]
    assert g.power_w == float(cells["power.draw"].removesuffix(" W"))
    assert g.power_w > 600  # gpu-burn on an H100/H200: near the 700 W cap, not idle
    assert g.temperatures_c == {
        "gpu": float(cells["temperature.gpu"]),
        "memory": float(cells["temperature.memory"]),
    }
    assert g.sm_clock_mhz == float(cells["clocks.current.sm"].removesuffix(" MHz"))
    assert g.max_sm_clock_mhz == float(cells["clocks.max.sm"].removesuffix(" MHz"))
    assert g.utilization_pct == 100.0
    # clocks_event_reasons.active 0x0000000000000000: nothing holds the clocks down
    assert cells["clocks_event_reasons.active"] == "0x0000000000000000" and g.throttle == []
    assert (g.ecc_corrected, g.ecc_uncorrected) == (0, 0)
    # retired_pages.* print [N/A] on Hopper (it remaps rows instead): the count is the remapped rows'
    assert cells["retired_pages.double_bit.count"] == "[N/A]"
    assert g.retired_pages == int(cells["remapped_rows.uncorrectable"])


def test_nvidia_query_sampling_fields_are_in_a_real_header() -> None:
    # every field the sampler asks for is one a real driver printed (the old name of the event
    # reasons mask aside, which the same driver lists as its alias in --help-query-gpu)
    header = set(_csv_cells(H200))
    asked = {f.replace("clocks_throttle_reasons.", "clocks_event_reasons.") for f in smi.NVIDIA_FIELDS}
    assert asked <= header


def test_nvidia_query_with_units_and_no_ecc_fields() -> None:
    # driver 520 on a consumer card, `-l` repeating: units after values, no ECC or clock-max columns
    gpus = smi.parse_nvidia_query((FIX / "nvidia-smi-query-gpu.csv").read_text())
    assert len(gpus) == 13 and {g.index for g in gpus} == {0}
    assert [g.power_w for g in gpus[:3]] == [83.92, 78.22, 84.77]
    assert gpus[0].sm_clock_mhz == 1320.0 and gpus[0].utilization_pct == 26.0
    assert gpus[0].ecc_uncorrected is None and gpus[0].retired_pages is None and gpus[0].throttle == []


def test_nvidia_query_refuses_what_it_cannot_read() -> None:
    text = H200.read_text()
    with pytest.raises(ParseError):
        smi.parse_nvidia_query("")
    with pytest.raises(ParseError, match="fields"):
        smi.parse_nvidia_query(text.rsplit(",", 1)[0])  # the row cut short by one cell
    with pytest.raises(ParseError, match="index"):
        smi.parse_nvidia_query((FIX / "nvidia-smi-topo-m.txt").read_text())
    with pytest.raises(ParseError, match="no GPU"):
        smi.parse_nvidia_query(text.splitlines()[1])  # the header alone


def test_rocm_json_power_and_temperatures() -> None:
    (g,) = smi.parse_rocm_json((FIX / "rocm-smi-ftP.json").read_text())
    assert g.index == 0
    assert g.power_w == 222.0
    assert g.temperatures_c == {"edge": 77.0, "junction": 103.0, "mem": 79.0}
    assert g.sm_clock_mhz is None and g.utilization_pct is None


def test_rocm_json_without_telemetry_keys_and_not_json() -> None:
    # --showproductname --json: cards, but no power or temperature: a sample with no figures
    gpus = smi.parse_rocm_json((FIX / "rocm-smi-productname.json").read_text())
    assert gpus and all(g.power_w is None and not g.temperatures_c for g in gpus)
    with pytest.raises(ParseError, match="not JSON"):
        smi.parse_rocm_json((FIX / "rocm-smi-concise.txt").read_text())


def test_probe_prefers_nvidia_smi_then_amd_smi_and_names_other_tools() -> None:
    assert parse_probe("rocm-smi /opt/rocm/bin/rocm-smi\nnvidia-smi /usr/bin/nvidia-smi\n") == (
        "nvidia-smi",
        "/usr/bin/nvidia-smi",
        [],
    )
    both = "amd-smi /opt/rocm/bin/amd-smi\nrocm-smi /opt/rocm/bin/rocm-smi\ndcgmi found\n"
    assert parse_probe(both) == ("amd-smi", "/opt/rocm/bin/amd-smi", ["dcgmi"])
    assert parse_probe("rocm-smi /opt/rocm/bin/rocm-smi\n") == ("rocm-smi", "/opt/rocm/bin/rocm-smi", [])
    assert parse_probe("amd-smi found\n") == (None, None, [])  # a tool is taken with its path only
    assert parse_probe("") == (None, None, [])
    assert "/opt/rocm/bin/amd-smi" in PROBE_SCRIPT


def test_sample_scripts_are_fixed_lines_with_the_quoted_path() -> None:
    assert smi.sample_script("amd-smi", "/opt/rocm/bin/amd-smi") == "/opt/rocm/bin/amd-smi metric --json"
    assert (
        smi.sample_script("rocm-smi", "/opt/rocm/bin/rocm-smi") == "/opt/rocm/bin/rocm-smi -t -P -u -c --json"
    )
    nv = smi.sample_script("nvidia-smi", "/usr/bin/nvidia-smi")
    query = "/usr/bin/nvidia-smi --query-gpu=" + ",".join(smi.NVIDIA_FIELDS) + " --format=csv"
    assert nv == f"{query} && {{ echo #orch-nvlink-e; /usr/bin/nvidia-smi nvlink -e 2>/dev/null || true; }}"
    # a path the probe found is quoted, never spliced
    odd = smi.sample_script("amd-smi", "/opt/my rocm/amd-smi;reboot")
    assert odd == "'/opt/my rocm/amd-smi;reboot' metric --json"


# --- amd-smi metric --json ------------------------------------------------------------------------


def test_amd_metric_json_values_of_a_real_card() -> None:
    # RX 6600: power, temperatures, gfx clock and use printed; PCIe counters, ECC blocks and
    # xgmi_err printed as N/A (a consumer card has no RAS blocks and no xGMI)
    (g,) = smi.parse_amd_metric_json(AMD_METRIC.read_text())
    assert g.index == 0 and g.bus_id is None
    assert g.power_w == 6.0
    assert g.temperatures_c == {"edge": 36.0, "hotspot": 37.0, "mem": 32.0}
    assert (g.sm_clock_mhz, g.max_sm_clock_mhz) == (800.0, 2750.0)
    assert g.utilization_pct == 1.0
    assert g.throttle == []  # throttle_status UNTHROTTLED
    assert (g.ecc_corrected, g.ecc_uncorrected) == (0, 0)
    assert g.pcie_replays is None and g.xgmi_errors is None and g.nvlink_errors is None
    assert g.retired_pages is None  # bad pages are another amd-smi command


def test_amd_metric_json_under_gpu_data_parses_the_same() -> None:
    # newer amd-smi releases put the same list under "gpu_data" (nathaninline/ajean#39); no whole
    # verbatim output of that form was found, so the real list is put under the key here
    gpus = json.loads(AMD_METRIC.read_text().split("\n", 1)[1])
    wrapped = json.dumps({"gpu_data": gpus}, indent=4)
    assert smi.parse_amd_metric_json(wrapped) == smi.parse_amd_metric_json(AMD_METRIC.read_text())
    assert smi.parse_sample("amd-smi", wrapped)[0].power_w == 6.0


def test_amd_metric_json_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ParseError, match="amd-smi metric --json output is not JSON"):
        smi.parse_amd_metric_json((FIX / "amd-smi-static.txt").read_text())  # the text form
    with pytest.raises(ParseError, match="amd-smi metric --json output is not a list of GPUs"):
        smi.parse_amd_metric_json((FIX / "rocm-smi-ftP.json").read_text())  # rocm-smi's cardN object
    gpus = json.loads(AMD_METRIC.read_text().split("\n", 1)[1])
    with pytest.raises(ParseError, match="amd-smi metric --json: entry 0 has no integer `gpu`"):
        smi.parse_amd_metric_json(json.dumps([{k: v for k, v in gpus[0].items() if k != "gpu"}]))
    with pytest.raises(ParseError, match="amd-smi metric --json gpu 0: power is not an object"):
        smi.parse_amd_metric_json(json.dumps([{**gpus[0], "power": [6]}]))


# --- nvidia-smi nvlink -e --------------------------------------------------------------------------


def test_nvlink_error_counters_of_a_real_h100() -> None:
    assert smi.parse_nvlink_errors(_nvlink_as_printed()) == {0: 0}
    # the elision line is not the tool's: the parser names the tool and the line it refuses
    with pytest.raises(ParseError, match=r"nvidia-smi nvlink -e: line 10 is not"):
        smi.parse_nvlink_errors(NVLINK.read_text())
    with pytest.raises(ParseError, match="nvidia-smi nvlink -e printed no `GPU N:` line"):
        smi.parse_nvlink_errors("")
    with pytest.raises(ParseError, match="CRC Errors is not a count"):
        smi.parse_nvlink_errors(
            _nvlink_as_printed().replace("Link 17: CRC Errors: 0", "Link 17: CRC Errors: x")
        )


def test_nvidia_sample_carries_the_nvlink_counters() -> None:
    # what the sample line prints: the query's CSV, the marker, then `nvlink -e` (both verbatim)
    text = H200.read_text() + smi.NVLINK_MARK + "\n" + _nvlink_as_printed()
    (g,) = smi.parse_sample("nvidia-smi", text)
    assert g.nvlink_errors == 0 and g.power_w == _real_gpu().power_w
    # a driver that printed nothing after the marker (no NVLink): no count, the rest as before
    (bare,) = smi.parse_sample("nvidia-smi", H200.read_text() + smi.NVLINK_MARK + "\n")
    assert bare.nvlink_errors is None and bare == _real_gpu()
    # a GPU listed with no link at all has no count either
    assert smi.parse_nvlink_errors(_nvlink_as_printed().splitlines()[1] + "\n") == {0: None}


# --- per-step summary ------------------------------------------------------------------------


def _step(nodes: list[str], ranks_per_node: int = 1) -> Step:
    return Step(
        id=f"n{len(nodes)}xg{ranks_per_node}", index=0, nnodes=len(nodes), ranks_per_node=ranks_per_node,
        nodes=nodes, world_size=len(nodes) * ranks_per_node, collectives=["all_reduce"], sizes=[1 << 20],
    )  # fmt: skip


def _real_gpu() -> GpuSample:
    (g,) = smi.parse_nvidia_query(H200.read_text())
    return g


def _node(name: str, *samples: list[GpuSample]) -> NodeTelemetry:
    return NodeTelemetry(
        node=name,
        tool="nvidia-smi",
        samples=[NodeSample(t_s=float(i), tool="nvidia-smi", gpus=g) for i, g in enumerate(samples)],
    )


def _summary(busbw: float) -> dict[Collective, CollSummary]:
    return {
        "all_reduce": CollSummary(
            collective="all_reduce", size_bytes=1 << 20, busbw_gbs=busbw, algbw_gbs=busbw
        )
    }


def test_gbs_per_watt_is_busbw_over_mean_power_per_gpu() -> None:
    g = _real_gpu()
    a = _node("node1", [g.model_copy(update={"power_w": 600.0})], [g.model_copy(update={"power_w": 700.0})])
    b = _node("node2", [g.model_copy(update={"power_w": 500.0})])
    t = summarize_step(_step(["node1", "node2"]), [a, b], _summary(300.0), 1.0)
    assert t.mean_power_w == pytest.approx((600 + 700 + 500) / 3)
    assert t.gbs_per_w["all_reduce"] == pytest.approx(300.0 / ((600 + 700 + 500) / 3))
    assert [n.mean_power_w for n in t.nodes] == [650.0, 500.0]
    assert any("GB/s per W" in line for line in t.notes)
    assert not any("THROTTLED" in line or "NEW ECC" in line for line in t.notes)


def test_only_the_steps_gpus_count() -> None:
    g = _real_gpu()
    busy = g.model_copy(update={"index": 0, "power_w": 600.0})
    idle = g.model_copy(update={"index": 1, "power_w": 90.0, "throttle": ["sw_power_cap"]})
    t = summarize_step(_step(["node1"], 1), [_node("node1", [busy, idle])], _summary(400.0), 1.0)
    assert t.nodes[0].gpus == [0]
    assert t.mean_power_w == 600.0
    assert t.nodes[0].throttled == {}  # GPU 1 is not the step's
    both = summarize_step(_step(["node1"], 2), [_node("node1", [busy, idle])], _summary(400.0), 1.0)
    assert both.mean_power_w == pytest.approx(345.0)
    assert both.nodes[0].throttled == {1: ["sw_power_cap"]}


def test_throttling_is_flagged_with_node_gpu_and_reason() -> None:
    g = _real_gpu()
    hot = g.model_copy(update={"throttle": ["hw_thermal_slowdown"]})
    t = summarize_step(
        _step(["node1", "node2"]), [_node("node1", [g], [hot]), _node("node2", [g], [g])], {}, 1.0
    )
    flagged = [line for line in t.notes if "THROTTLED" in line]
    assert flagged == ["telemetry: THROTTLED during the step: node1 GPU 0 (hw_thermal_slowdown)"]
    assert t.gbs_per_w == {}  # no busbw (the step measured nothing): no GB/s per W


@pytest.mark.parametrize(
    ("start", "end", "flagged"),
    [
        ({"ecc_uncorrected": 0}, {"ecc_uncorrected": 2}, "ecc_uncorrected 0→2"),
        ({"retired_pages": 1}, {"retired_pages": 3}, "retired_pages 1→3"),
        ({"ecc_corrected": 5}, {"ecc_corrected": 5}, None),  # old errors only
        ({"ecc_uncorrected": 4}, {"ecc_uncorrected": 0}, None),  # counters reset (driver reload)
        ({"ecc_uncorrected": None}, {"ecc_uncorrected": 3}, None),  # N/A at the start: no base
        ({"nvlink_errors": 0}, {"nvlink_errors": 7}, "nvlink_errors 0→7"),
        ({"xgmi_errors": 0}, {"xgmi_errors": 1}, "xgmi_errors 0→1"),
        ({"pcie_replays": 2}, {"pcie_replays": 5}, "pcie_replays 2→5"),
    ],
)
def test_new_ecc_errors_are_end_above_start(
    start: dict[str, int | None], end: dict[str, int | None], flagged: str | None
) -> None:
    g = _real_gpu()
    t = summarize_step(
        _step(["node1"]),
        [_node("node1", [g.model_copy(update=start)], [g], [g.model_copy(update=end)])],
        {},
        1.0,
    )
    lines = [line for line in t.notes if "NEW ECC" in line]
    if flagged is None:
        assert lines == [] and t.nodes[0].new_ecc == {}
    else:
        assert lines == [f"{NEW_ERRORS}node1 GPU 0 ({flagged})"]
        assert t.nodes[0].new_ecc == {0: flagged}


def test_link_errors_rising_between_two_real_amd_samples_are_flagged() -> None:
    (g,) = smi.parse_amd_metric_json(AMD_METRIC.read_text())
    first = g.model_copy(update={"xgmi_errors": 0, "pcie_replays": 0})
    last = g.model_copy(update={"xgmi_errors": 2, "pcie_replays": 0})
    rec = NodeTelemetry(
        node="node4",
        tool="amd-smi",
        samples=[
            NodeSample(t_s=0.0, tool="amd-smi", gpus=[first]),
            NodeSample(t_s=1.0, tool="amd-smi", gpus=[last]),
        ],
    )
    t = summarize_step(_step(["node4"]), [rec], _summary(50.0), 1.0)
    assert [ln for ln in t.notes if ln.startswith(NEW_ERRORS)] == [
        f"{NEW_ERRORS}node4 GPU 0 (xgmi_errors 0→2)"
    ]
    assert t.mean_power_w == 6.0 and t.nodes[0].tool == "amd-smi"


def test_a_node_without_samples_says_why() -> None:
    rec = NodeTelemetry(node="node3", tool="rocm-smi", errors=["`rocm-smi` exited 2: no GPU"])
    t = summarize_step(_step(["node3"]), [rec], _summary(10.0), 1.0)
    assert t.mean_power_w is None and t.gbs_per_w == {}
    assert t.notes == ["telemetry: no samples from node3 (node3: `rocm-smi` exited 2: no GPU)"]


def test_the_report_and_the_step_record_carry_the_notes() -> None:
    g = _real_gpu()
    t = summarize_step(
        _step(["node1"]), [_node("node1", [g.model_copy(update={"throttle": ["sw_power_cap"]})])], {}, 1.0
    )
    res = StepResult(step=_step(["node1"]), telemetry=t)
    assert set(t.notes) <= set(step_notes(res))
    again = StepResult.model_validate_json(res.model_dump_json())
    assert again.telemetry == t


# --- sampler over fake kept-open shells --------------------------------------------------------


class FakeShell:
    """A node's kept-open shell: answers the probe with the tools it has, a sample with a
    recorded output; counts the calls."""

    def __init__(self, probe: str, sample: str = "", fail: bool = False) -> None:
        self.probe, self.sample, self.fail = probe, sample, fail
        self.scripts: list[str] = []
        self.lock = threading.Lock()

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        with self.lock:
            self.scripts.append(script)
        if self.fail:
            raise RemoteError("cannot connect to 198.18.0.13:22")
        out = self.probe if script == PROBE_SCRIPT else self.sample
        return CmdResult(argv=["sh", "-c", script], rc=0, stdout=out, stderr="", elapsed_s=0.01)


def _cluster(names: list[str]) -> Cluster:
    nodes = [Node(name=n, address=f"198.18.0.{10 + i}", gpu_vendor="none") for i, n in enumerate(names)]
    return Cluster(source=Path("lab.ini"), nodes=nodes, groups={"all": names})


def _opener(shells: dict[str, FakeShell]):  # type: ignore[no-untyped-def]
    opened: list[list[str]] = []

    @contextmanager
    def open_shells(cluster: Cluster) -> Iterator[dict[str, NodeShell]]:
        opened.append([n.name for n in cluster.nodes])
        yield {n.name: shells[n.name] for n in cluster.nodes}

    return open_shells, opened


def test_nodes_without_a_tool_are_named_in_one_line_and_the_run_goes_on() -> None:
    shells = {n: FakeShell("") for n in ("node1", "node2", "node3")}
    open_shells, opened = _opener(shells)
    steps = [_step(["node1"]), _step(["node1", "node2", "node3"])]
    sampler = TelemetrySampler(_cluster(["node1", "node2", "node3"]), steps, 0.05, open_shells)
    lines = sampler.start()
    assert lines == [
        f"telemetry: {NO_TOOL} node1, node2, node3; their steps carry no power, clock or ECC figures"
    ]
    assert opened == [["node1", "node2", "node3"]]  # one set of shells for the run
    for s in steps:
        sampler.step_started(s)
        time.sleep(0.1)  # the behaviour: a step two sampling intervals long, in which nothing is sampled
        assert sampler.step_ended(s, {}, None) is None
    sampler.close()
    assert all(sh.scripts == [PROBE_SCRIPT] for sh in shells.values())  # asked once, never sampled


def test_sampler_samples_during_the_step_only_and_writes_its_samples(tmp_path: Path) -> None:
    nv = FakeShell("nvidia-smi /usr/bin/nvidia-smi\n", H200.read_text())
    open_shells, _ = _opener(
        {"node1": nv, "node2": FakeShell("dcgmi found\n"), "node3": FakeShell("", fail=True)}
    )
    step = _step(["node1", "node2"])
    sampler = TelemetrySampler(
        _cluster(["node1", "node2", "node3"]), [step, _step(["node3"])], 0.02, open_shells
    )
    lines = sampler.start()
    assert lines[0].startswith(f"telemetry: {NO_TOOL} node2;") and "node2 has dcgmi" in lines[0]
    assert lines[1].startswith("telemetry: could not ask node3 (cannot connect")
    time.sleep(0.1)  # the behaviour: five sampling intervals with no step on node1, not sampled
    assert nv.scripts == [PROBE_SCRIPT]  # no step runs there yet: not sampled
    sampler.step_started(step)
    wait_for(lambda: len(nv.scripts) >= 1 + 4, 10, "a fourth sample of node1 asked (three done)")
    t = sampler.step_ended(step, _summary(400.0), tmp_path)
    n_after = len(nv.scripts)
    time.sleep(0.1)  # the behaviour: five sampling intervals after the step's end, not sampled
    sampler.close()
    assert len(nv.scripts) <= n_after + 1  # stops with the step (one may have been under way)
    assert t is not None
    (node,) = t.nodes
    assert node.node == "node1" and node.samples >= 3
    assert nv.scripts[1].startswith("/usr/bin/nvidia-smi --query-gpu=index,pci.bus_id,power.draw,")
    assert t.mean_power_w == _real_gpu().power_w
    assert t.gbs_per_w["all_reduce"] == pytest.approx(400.0 / _real_gpu().power_w)  # type: ignore[operator]
    saved = json.loads((tmp_path / "telemetry.json").read_text())
    assert saved["step"] == step.id and len(saved["nodes"][0]["samples"]) == node.samples


def test_sampler_samples_an_amd_node_with_amd_smi() -> None:
    amd = FakeShell(
        "amd-smi /opt/rocm/bin/amd-smi\nrocm-smi /opt/rocm/bin/rocm-smi\n", AMD_METRIC.read_text()
    )
    open_shells, _ = _opener({"node5": amd})
    step = _step(["node5"])
    sampler = TelemetrySampler(_cluster(["node5"]), [step], 0.02, open_shells)
    assert sampler.start() == []
    sampler.step_started(step)
    wait_for(lambda: len(amd.scripts) >= 1 + 3, 10, "a third sample of node5 asked (two done)")
    t = sampler.step_ended(step, _summary(12.0), None)
    sampler.close()
    assert amd.scripts[1] == "/opt/rocm/bin/amd-smi metric --json"
    assert t is not None and t.nodes[0].tool == "amd-smi" and t.nodes[0].samples >= 2
    assert t.mean_power_w == 6.0 and t.gbs_per_w["all_reduce"] == pytest.approx(2.0)
    assert t.nodes[0].max_temperature_c == 37.0 and t.nodes[0].min_sm_clock_mhz == 800.0


# --- plan setting and store ------------------------------------------------------------------


def test_interval_zero_turns_telemetry_off() -> None:
    plan = resolve_plan("smoke", PlanOverrides(telemetry_interval_s=0))
    assert plan.telemetry_interval_s == 0
    assert _telemetry(plan, _cluster(["node1"]), [_step(["node1"])]) is None
    default = resolve_plan("smoke")
    assert default.telemetry_interval_s == 1.0
    assert _telemetry(default, _cluster(["node1"]), [_step(["node1"])]) is not None


def test_store_keeps_the_steps_telemetry(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    result = RunResult.model_validate_json((run / "result.json").read_text())
    res = result.steps[0]
    g = _real_gpu()
    rising = [_node("localhost", [g], [g.model_copy(update={"ecc_uncorrected": 1})])]
    res.telemetry = summarize_step(res.step, rising, res.summary, 1.0)
    atomic_write(run / "result.json", result.model_dump_json())
    atomic_write(run / "steps" / res.step.id / "result.json", res.model_dump_json())
    with ResultsStore.open(tmp_path / "orch.db") as s:
        s.ingest(run)
        s.ingest(run)  # idempotent
        rows = s.conn.execute("SELECT step_id, node, samples, new_ecc FROM node_telemetry").fetchall()
        step_rows = s.conn.execute("SELECT step_id, mean_power_w, gbs_per_w FROM step_telemetry").fetchall()
    assert [tuple(r) for r in rows] == [
        (res.step.id, "localhost", 2, json.dumps({"0": "ecc_uncorrected 0→1"}))
    ]
    assert [(r[0], r[1]) for r in step_rows] == [(res.step.id, g.power_w)]
    assert res.summary and json.loads(step_rows[0][2]) == res.telemetry.gbs_per_w
