"""Diagnostics as plan steps: the plan's `diagnostics:` validated, expanded into steps (one per tool
on every node, one per perftest pair of the straggler rounds), rendered as a Slurm job whose values
the `sh` filter quotes, and run through the step executor with a scheduler that replays the
published outputs (tests/fixtures/diag/) per node: per-node figures, thresholds, and a node without
the tool as "not run", never a pass."""

from __future__ import annotations

import json
import os
import shlex
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import InstantScheduler

from orchestrator.certs.service import issue, verify
from orchestrator.diagnostics.plan_steps import expand_diag_steps, judge_diag_step, with_diag_steps
from orchestrator.errors import ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.metrics.stragglers import round_robin
from orchestrator.models.cert import Certificate
from orchestrator.models.cluster import Cluster
from orchestrator.models.plan import Plan, PlanOverrides
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.plan import expand_steps, load_plan
from orchestrator.report.diagnostics import diag_text
from orchestrator.report.formats import render
from orchestrator.runs.executor import StepExecutor, job_spec
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.runs.scale_test import _execute, scale_test
from orchestrator.scheduler.base import JobOutput, JobSpec, RankOutput
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.store.load import ladder_steps, load_run
from orchestrator.store.rundir import new_run_id

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diag"
NODES = ("node1", "node2", "node3")


def _fixture(name: str) -> str:
    """A published output as the tool printed it (the fixture's source line cut)."""
    return (FIX / name).read_text().split("\n", 1)[1]


def _cluster(tmp_path: Path, vendor: str = "nvidia") -> Cluster:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "inv.yml"
    hosts = {n: {"ansible_host": f"198.18.0.{i}", "gpu_vendor": vendor, "gpus_per_node": 1}
             for i, n in enumerate(NODES, 1)}  # fmt: skip
    # The run folder is on a share the nodes see (no node folders to make or collect over SSH).
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": {"orch_shared_dirs": str(tmp_path)}}}))
    return load_inventory(inv)


def _plan(diagnostics: list[dict[str, Any]], **extra: Any) -> Plan:
    data = {"name": "diag", "collectives": [], "backend": "slurm", "diagnostics": diagnostics, **extra}
    return Plan.model_validate(data)


# --- the plan ---------------------------------------------------------------------------------------


def test_a_plan_of_diagnostics_only_loads_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "diag.yaml"
    path.write_text(
        "collectives: []\n"
        "diagnostics:\n"
        "  - {tool: dcgmi-diag, level: 2}\n"
        "  - {tool: gpu-burn, duration_s: 30, thresholds: [{figure: gflops, min: 16000}]}\n"
        "  - {tool: transferbench, preset: a2a}\n"
        "  - {tool: ib_write_bw, pairs: ring}\n"
    )
    plan = load_plan(path)
    assert [d.tool for d in plan.diagnostics] == ["dcgmi-diag", "gpu-burn", "transferbench", "ib_write_bw"]
    assert plan.diagnostics[1].thresholds[0].min == 16000
    assert [d.over_pairs for d in plan.diagnostics] == [False, False, False, True]


@pytest.mark.parametrize(
    ("diag", "message"),
    [
        ({"tool": "gpu-burn", "seconds": 60}, "seconds: Extra inputs are not permitted"),
        ({"tool": "transferbench", "preset": "p2p; rm -rf /"}, "diagnostics.0.preset"),
        ({"tool": "dcgmi-diag", "level": 5}, "diagnostics.0.level"),
        ({"tool": "a b"}, "diagnostics.0.tool"),
    ],
)
def test_a_plan_diagnostic_is_validated(tmp_path: Path, diag: dict[str, Any], message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"collectives": [], "diagnostics": [diag]}))
    with pytest.raises(ConfigError, match=r"plan .*bad\.yaml") as e:
        load_plan(path)
    assert message in e.value.message


def test_one_step_per_tool_so_a_tool_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"diagnostic tool\(s\) given twice: gpu-burn"):
        _plan([{"tool": "gpu-burn"}, {"tool": "gpu-burn", "duration_s": 5}])


# --- the steps --------------------------------------------------------------------------------------


def test_a_tool_runs_once_on_every_node_and_perftest_over_the_straggler_pairs(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    plan = _plan([{"tool": "dcgmi-diag", "level": 3}, {"tool": "ib_write_bw"}])
    steps = expand_diag_steps(plan, cluster)
    pairs = [p for rnd in round_robin(list(NODES)) for p in rnd]
    assert [s.id for s in steps] == ["diag-dcgmi-diag", *(f"diag-ib_write_bw-{a}-{b}" for a, b in pairs)]
    assert steps[0].nodes == list(NODES) and steps[0].collectives == [] and steps[0].world_size == 3
    assert [tuple(s.nodes) for s in steps[1:]] == pairs
    ring = expand_diag_steps(_plan([{"tool": "ib_read_bw", "pairs": "ring"}]), cluster)
    assert [s.nodes for s in ring] == [["node1", "node2"], ["node2", "node3"], ["node3", "node1"]]


def test_diag_steps_come_before_the_ladder_which_keeps_its_numbers_faults_and_references(
    tmp_path: Path,
) -> None:
    """The ladder's steps keep their indexes (a plan fault's `step: 0` is still the first ladder
    step); a fault never hits a diagnostic step, and a 2-node perftest step is no efficiency
    reference for the ladder's 2-node steps."""
    from orchestrator.metrics.verdict import reference_step
    from orchestrator.models.fault import PlanFault
    from orchestrator.runs.step_faults import fault_matches

    cluster = _cluster(tmp_path)
    diags = _plan([{"tool": "nvbandwidth"}, {"tool": "ib_write_bw"}]).diagnostics
    plan = load_plan("smoke").model_copy(update={"diagnostics": diags})
    ladder = expand_steps(plan, cluster)
    steps = with_diag_steps(plan, cluster, ladder)
    n_diag = 1 + 3  # nvbandwidth, then the 3 pairs of 3 nodes
    assert [s.id for s in steps[:2]] == ["diag-nvbandwidth", "diag-ib_write_bw-node2-node3"]
    assert steps[n_diag:] == ladder and [s.index for s in steps[:n_diag]] == list(range(n_diag))
    every = PlanFault.model_validate(
        {"kind": "throttle", "target": "node1:fab0", "params": {"rate": "1mbit"}}
    )
    first = every.model_copy(update={"step": 0})
    assert [s.id for s in steps if fault_matches(first, s)] == [ladder[0].id]
    assert [s for s in steps if fault_matches(every, s)] == ladder
    two_node = next(s for s in ladder if s.nnodes == 3 and s.ranks_per_node == 1)
    found = reference_step(two_node, steps)
    assert found is not None and found[1].diagnostic is None and found[1].nnodes == 2


@pytest.mark.parametrize(
    ("diag", "message"),
    [
        ({"tool": "agfhc"}, "diagnostic agfhc: unknown tool"),
        ({"tool": "dcgmi-diag", "device": "mlx5_0"}, "device and pairs are options of the perftest tests"),
        ({"tool": "gpu-burn", "duration_s": 600}, "600 s does not fit in step_timeout_s 600"),
    ],
)
def test_a_step_that_cannot_run_is_refused_before_the_run(
    tmp_path: Path, diag: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        expand_diag_steps(_plan([diag]), _cluster(tmp_path))
    if diag["tool"] == "agfhc":
        assert e.value.hint is not None and "ib_write_bw" in e.value.hint and "dcgmi-diag" in e.value.hint


def test_a_pair_test_on_one_node_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="runs over node pairs, and the run has 1 node"):
        expand_diag_steps(_plan([{"tool": "ib_write_bw"}]), _cluster(tmp_path), group="node1")


def test_the_job_script_quotes_the_plan_values(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    plan = _plan([{"tool": "transferbench", "preset": "a2a"}, {"tool": "ib_send_bw", "device": "mlx5_0"}],
                 partition="gpu")  # fmt: skip
    steps = expand_diag_steps(plan, cluster)
    sched = SlurmScheduler()
    for step in steps[:2]:
        spec = job_spec(step, plan, cluster, "slurm", tmp_path / step.id, "/x/python", 20000, run_id="r1")
        assert spec.partition == "gpu" and spec.time_limit_s == plan.step_timeout_s
        assert not spec.kill_on_bad_exit and spec.nodes == step.nodes
        script = sched.render(spec)
        assert shlex.join(spec.argv) in script  # every value through the `sh` filter
    tb = job_spec(steps[0], plan, cluster, "slurm", tmp_path, "/x/python", 20000, run_id="r1")
    assert tb.argv[-2:] == ["TransferBench", "a2a"] and tb.gpus_per_node == 1
    ib = job_spec(steps[1], plan, cluster, "slurm", tmp_path, "/x/python", 20000, run_id="r1")
    assert ib.argv[4:] == [steps[1].nodes[0], "ib_send_bw", "--report_gbits", "-s", "1048576", "-D", "5",
                           "-d", "mlx5_0"]  # fmt: skip


# --- the judgement ----------------------------------------------------------------------------------


def test_a_pair_is_one_result_and_blames_both_nodes(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    plan = _plan([{"tool": "ib_write_bw", "thresholds": [{"figure": "bw_average", "min": 100}]}])
    step = expand_diag_steps(plan, cluster)[0]
    a, b = step.nodes
    out = _fixture("ib_write_bw-roce-postlist.txt")
    judged = judge_diag_step(
        step, {"rank-0.log": f"orch-diag: node {a}\n", "rank-1.log": f"orch-diag: node {b}\n{out}"}
    )
    assert judged.verdict == "fail" and judged.blamed == [a, b]
    assert [n.node for n in judged.nodes] == [f"{a}-{b}"]
    assert judged.reasons[0].startswith(f"{a}-{b}: fail: bw_average")


# --- through the step executor ----------------------------------------------------------------------


class NodeLogs(InstantScheduler):
    """Every task of a job leaves its own log: what `outputs[node]` says that node printed (None:
    the wrapper's words for a node without the tool)."""

    def __init__(self, outputs: dict[str, str | None], binary: str) -> None:
        super().__init__()
        self.outputs, self.binary = outputs, binary

    def log_for(self, spec: JobSpec) -> Path | None:
        return None

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        job = super().submit(spec, after=after)
        for rank, node in enumerate(spec.nodes):
            said = self.outputs[node]
            tail = f"orch-diag: no {self.binary} on {node}\n" if said is None else said
            (spec.workdir / f"rank-{rank}.log").write_text(f"orch-diag: node {node}\n{tail}")
        return job

    def fails(self, spec: JobSpec) -> bool:
        return any(self.outputs[n] is None for n in spec.nodes)

    def collect(self, job_id: str, spec: JobSpec) -> JobOutput:
        ranks = [
            RankOutput(rank=i, log=spec.workdir / f"rank-{i}.log")
            for i in range(len(self.specs[job_id].nodes))
        ]
        return JobOutput(job_id=job_id, ranks=ranks)


def _run(tmp_path: Path, plan: Plan, sched: NodeLogs) -> dict[str, Any]:
    cluster = _cluster(tmp_path)
    steps = with_diag_steps(plan, cluster, expand_steps(plan, cluster))
    life = RunLifecycle.create(tmp_path / "runs", new_run_id(plan.name))
    life.write_inputs(plan=plan, inventory=cluster)
    runner = StepExecutor(plan, cluster, steps, sched, "slurm", life, "/x/python")
    with runner.life:
        _execute(runner)
    saved = json.loads((runner.rundir.step_dir(steps[0].id) / "result.json").read_text())
    result = json.loads((runner.rundir.root / "result.json").read_text())
    return {"result": result, "step": saved, "dir": runner.rundir.root}


def test_a_node_without_the_tool_is_not_run_not_a_crash_and_not_a_pass(tmp_path: Path) -> None:
    dcgmi = _fixture("dcgmi-diag-r3-1gpu.json")
    plan = _plan([{"tool": "dcgmi-diag", "level": 3}], telemetry_interval_s=0)
    got = _run(tmp_path, plan, NodeLogs({"node1": dcgmi, "node2": None, "node3": dcgmi}, "dcgmi"))
    step = got["step"]
    assert step["verdict"] == "infra"
    assert step["reasons"] == ["not run: no dcgmi on node2"]
    assert step["blamed_nodes"] == ["node2"]
    assert [(n["node"], n["status"]) for n in step["diagnostics"]] == [
        ("node1", "pass"), ("node2", "missing"), ("node3", "pass"),
    ]  # fmt: skip
    # the per-node figures are the printed ones (PCIe GPU to Host bandwidth 13.15 GB/s in the fixture)
    figures = step["diagnostics"][0]["report"]["figures"]
    assert {
        "name": "PCIe",
        "value": 13.15,
        "unit": "GB/s",
        "gpu": 0,
        "where": "GPU to Host bandwidth",
    } in figures
    assert got["result"]["status"] == "infra" and got["result"]["exit_code"] == 3


def test_a_node_below_a_plan_threshold_fails_the_step(tmp_path: Path) -> None:
    burn = _fixture("gpu-burn-a100x8.txt")
    plan = _plan(
        [{"tool": "gpu-burn", "duration_s": 30, "thresholds": [{"figure": "gflops", "min": 17000}]}],
        telemetry_interval_s=0,
    )
    got = _run(tmp_path, plan, NodeLogs(dict.fromkeys(NODES, burn), "gpu_burn"))
    step = got["step"]
    assert step["verdict"] == "fail" and step["blamed_nodes"] == list(NODES)
    assert step["reasons"][0].startswith("node1: fail: gflops GPU 0: 16942 Gflop/s below 17000")
    assert got["result"]["status"] == "failed"
    passing = _plan([{"tool": "gpu-burn", "duration_s": 30}], telemetry_interval_s=0)
    ok = _run(tmp_path / "ok", passing, NodeLogs(dict.fromkeys(NODES, burn), "gpu_burn"))
    assert ok["step"]["verdict"] == "pass" and ok["result"]["status"] == "accepted"


# --- the report -------------------------------------------------------------------------------------


def test_the_report_shows_each_nodes_figures_in_every_format(tmp_path: Path) -> None:
    burn = _fixture("gpu-burn-a100x8.txt")
    plan = _plan([{"tool": "gpu-burn", "duration_s": 30, "thresholds": [{"figure": "gflops", "min": 16000}]}],
                 telemetry_interval_s=0)  # fmt: skip
    got = _run(tmp_path, plan, NodeLogs({"node1": burn, "node2": None, "node3": burn}, "gpu_burn"))
    rec = load_run(got["dir"])
    gflops = [f.value for f in rec.steps[0].diagnostics[0].report.figures if f.name == "gflops"]  # type: ignore[union-attr]
    summary = f"gflops {min(gflops):g}..{max(gflops):g} Gflop/s (n=8)"

    markdown = render(rec, "md")
    assert "## Diagnostics" in markdown and "### Diagnostic diag-gpu-burn" in markdown
    assert "- thresholds: gflops min 16000" in markdown
    assert f"| node1 | pass | {summary}" in markdown
    assert "| node2 | not run | - | not run: no gpu_burn on node2 |" in markdown

    html = render(rec, "html")
    assert '<section id="diagnostics">' in html and f"<td>{summary}" in html
    assert "<td>not run: no gpu_burn on node2</td>" in html

    junit = ET.fromstring(render(rec, "junit"))
    cases = {
        c.get("name", ""): c
        for c in junit.iter("testcase")
        if c.get("classname", "").endswith("diag-gpu-burn")
    }
    assert sorted(cases) == ["node node1", "node node2", "node node3", "step"]
    assert cases["node node1"].find("error") is None and cases["node node1"].find("failure") is None
    error = cases["node node2"].find("error")
    assert error is not None and error.get("message") == "no gpu_burn on node2"
    assert cases["step"].find("error") is not None  # infra: a node was not run

    lines = diag_text(rec)
    assert lines[0].startswith(f"diag-gpu-burn node1: pass: {summary}; errors 0 count (n=8)")
    assert lines[1] == "diag-gpu-burn node2: not run: - — no gpu_burn on node2"


def test_report_cells_from_the_run_folder_are_escaped(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>|x"
    plan = _plan(
        [{"tool": "nvbandwidth", "thresholds": [{"figure": hostile, "min": 1}]}], telemetry_interval_s=0
    )
    nvbw = _fixture("nvbandwidth-gh200-v0.6.txt")
    got = _run(tmp_path, plan, NodeLogs(dict.fromkeys(NODES, nvbw), "nvbandwidth"))
    rec = load_run(got["dir"])
    assert rec.steps[0].verdict == "fail"
    html = render(rec, "html")
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert "<script>alert(1)</script>|x" not in render(rec, "md")


# --- the certificates -------------------------------------------------------------------------------


def test_certificates_carry_each_nodes_figures_and_refuse_a_node_not_run(tmp_path: Path) -> None:
    dcgmi = _fixture("dcgmi-diag-r3-1gpu.json")
    plan = _plan([{"tool": "dcgmi-diag", "level": 3, "thresholds": [{"figure": "PCIe", "max": 1e6}]}],
                 telemetry_interval_s=0)  # fmt: skip
    got = _run(tmp_path, plan, NodeLogs({"node1": dcgmi, "node2": None, "node3": dcgmi}, "dcgmi"))
    done = issue(got["dir"], valid_days=7, now=datetime(2026, 12, 1, tzinfo=UTC))
    assert sorted(done.issued) == ["node1", "node3"]
    assert [(r.node, r.reasons) for r in done.refused] == [
        ("node2", ["step diag-dcgmi-diag: not run: no dcgmi on node2"])
    ]
    path = Path(done.issued["node1"])
    assert verify(path).ok
    cert = Certificate.model_validate_json(path.read_text())
    assert cert.tests == [] and len(cert.diagnostics) == 1
    d = cert.diagnostics[0]
    assert (d.step, d.tool, d.on) == ("diag-dcgmi-diag", "dcgmi-diag", "node1")
    assert d.thresholds[0].figure == "PCIe" and d.checks_passed > 0
    # `orch cert show` names the diagnostic and its figures
    from typer.testing import CliRunner

    from orchestrator.cli import app

    shown = CliRunner().invoke(app, ["cert", "show", "node1", "--dir", str(tmp_path / "runs")])
    assert shown.exit_code == 0, shown.output
    assert "diagnostic diag-dcgmi-diag (dcgmi-diag on node1):" in shown.output
    assert "PCIe" in shown.output and "GB/s" in shown.output
    # the figures are the printed ones, and an edit of one is found
    assert any(f.value == 13.15 and f.where == "GPU to Host bandwidth" for f in d.figures)
    data = json.loads(path.read_text())
    data["diagnostics"][0]["figures"][0]["value"] += 1
    path.write_text(json.dumps(data))
    check = verify(path)
    assert not check.ok and any("diagnostics[0]" in p for p in check.problems)
    # the raw logs the figures came from are hashed into it
    assert {r.path for r in cert.raw_logs} >= {"steps/diag-dcgmi-diag/rank-0.log"}


def test_plan_show_lists_the_diag_steps_and_refuses_an_unknown_tool(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    _cluster(tmp_path)
    plan = tmp_path / "d.yaml"
    plan.write_text("collectives: []\ndiagnostics: [{tool: dcgmi-diag}, {tool: ib_write_bw, pairs: ring}]\n")
    args = ["plan", "show", "-p", str(plan), "-i", str(tmp_path / "inv.yml")]
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert "diag-dcgmi-diag" in shown.output and "diag-ib_write_bw-node3-node1" in shown.output
    plan.write_text("collectives: []\ndiagnostics: [{tool: agfhc}]\n")
    refused = CliRunner().invoke(app, args)
    assert isinstance(refused.exception, ConfigError) and refused.exception.exit_code == 2
    assert "diagnostic agfhc: unknown tool" in str(refused.exception)


# --- for real, on the local backend -----------------------------------------------------------------


@pytest.mark.parametrize("with_tool", [False, True])
def test_scale_test_runs_the_wrapper_for_real_on_the_local_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_tool: bool
) -> None:
    """The whole path: scale-test, the local scheduler, the wrapper under /bin/sh on this machine
    (the node is 'localhost', the inventory's name), with or without a stand-in dcgmi on PATH that
    prints the published output."""
    if with_tool:
        bindir = tmp_path / "bin"
        bindir.mkdir()
        (bindir / "dcgmi").write_text(f"#!/bin/sh\n/usr/bin/tail -n +2 '{FIX / 'dcgmi-diag-r3-1gpu.json'}'\n")
        (bindir / "dcgmi").chmod(0o755)
        monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    plan = tmp_path / "p.yaml"
    plan.write_text("collectives: []\ntelemetry_interval_s: 0\ndiagnostics: [{tool: dcgmi-diag, level: 3}]\n")
    inv = Path(__file__).resolve().parents[2] / "inventories" / "local.ini"
    req = ScaleTestRequest(inventory=inv, plan=str(plan), out_dir=tmp_path / "runs",
                           overrides=PlanOverrides(stack="none"))  # fmt: skip
    result = scale_test(req)
    (step,) = result.steps
    (node,) = step.diagnostics
    if with_tool:
        assert (result.status, step.verdict, node.node, node.status) == (
            "accepted",
            "pass",
            "localhost",
            "pass",
        )
        assert node.report is not None and node.report.tool == "dcgmi diag"
    else:
        assert (result.status, result.exit_code, step.verdict) == ("infra", 3, "infra")
        assert step.reasons == ["not run: no dcgmi on localhost"] and node.status == "missing"
    # what `orch runs resume` reads back: the step with its diagnostic, the result with its nodes
    assert ladder_steps(result.run_dir) == [step.step]
    assert load_run(result.run_dir).steps[0].diagnostics == [node]


def test_a_failed_diagnostic_step_is_no_suspect_for_isolation(tmp_path: Path) -> None:
    """scale-test --isolate isolates failed collective steps; a diagnostic step judged its nodes."""
    from orchestrator.models.run import RunResult, StepResult
    from orchestrator.runs.isolate import failed_multinode_nodes

    steps = expand_diag_steps(_plan([{"tool": "gpu-burn"}]), _cluster(tmp_path))
    failed = StepResult(step=steps[0], verdict="fail", blamed_nodes=["node2"])
    result = RunResult(run_id="r1", run_dir=tmp_path, plan="diag", backend="slurm", status="failed",
                       exit_code=1, steps=[failed], nodes={}, wall_s=1.0)  # fmt: skip
    assert failed_multinode_nodes(result) == ([], [])


def test_a_perftest_pair_runs_as_a_step_and_both_nodes_certificates_carry_it(tmp_path: Path) -> None:
    ib = _fixture("ib_write_bw-roce-postlist.txt")
    plan = _plan([{"tool": "ib_write_bw", "thresholds": [{"figure": "bw_average", "min": 0.1}]}],
                 telemetry_interval_s=0)  # fmt: skip
    got = _run(tmp_path, plan, NodeLogs(dict.fromkeys(NODES, ib), "ib_write_bw"))
    rec = load_run(got["dir"])
    assert [(s.step.id, s.verdict, [n.node for n in s.diagnostics]) for s in rec.steps] == [
        (f"diag-ib_write_bw-{a}-{b}", "pass", [f"{a}-{b}"])
        for rnd in round_robin(list(NODES))
        for a, b in rnd
    ]
    done = issue(got["dir"], valid_days=7, now=datetime(2026, 12, 1, tzinfo=UTC))
    assert sorted(done.issued) == list(NODES) and not done.refused
    cert = Certificate.model_validate_json(Path(done.issued["node1"]).read_text())
    assert sorted(d.on for d in cert.diagnostics) == ["node1-node2", "node1-node3"]
    assert all(
        d.tool == "ib_write_bw" and any(f.name == "bw_average" for f in d.figures) for d in cert.diagnostics
    )
