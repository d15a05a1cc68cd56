"""Diagnostic steps: the srun each node runs, the wrapper run for real on this machine (a node with
the tool replaying a published output, a node without it), and the per-node judgement."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.diagnostics.steps import (
    PAIR_WRAPPER,
    WRAPPER,
    DiagOptions,
    DiagThreshold,
    PerftestOptions,
    diag_job_spec,
    perftest_pair_spec,
    read_node_output,
    read_pair,
    read_step,
    task_argv,
    tool,
)
from orchestrator.errors import ConfigError
from orchestrator.scheduler.allocation import srun_argv
from orchestrator.scheduler.slurm import check_spec

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diag"


def _spec(tmp_path: Path, name: str = "dcgmi-diag", **opts: int):  # type: ignore[no-untyped-def]
    return diag_job_spec(
        tool(name), DiagOptions(**opts), name="orch-r1-diag", step_id="diag", nodes=["node1", "node2"],
        workdir=tmp_path,
    )  # fmt: skip


def test_rendered_srun_runs_the_tool_once_per_node(tmp_path: Path) -> None:
    spec = _spec(tmp_path, level=3)
    check_spec(spec)
    argv = srun_argv(spec)
    assert argv[0] == "srun"
    for flag in (
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--nodelist=node1,node2",
        "--kill-on-bad-exit=0",
    ):
        assert flag in argv
    # the node name comes from Slurm into each task, then the wrapper, then dcgmi's own argv
    assert argv[argv.index("bash") + 2] == 'export ORCH_NODE="$SLURMD_NODENAME"; exec "$@"'
    assert argv[-9:] == ["sh", "-c", WRAPPER, "orch-diag", "dcgmi", "diag", "-r", "3", "-j"]


def test_each_tool_renders_its_options(tmp_path: Path) -> None:
    assert task_argv(tool("gpu-burn"), DiagOptions(duration_s=300))[4:] == ["gpu_burn", "300"]
    assert task_argv(tool("transferbench"), DiagOptions(preset="a2a"))[4:] == ["TransferBench", "a2a"]
    assert task_argv(tool("nvbandwidth"), DiagOptions())[4:] == ["nvbandwidth"]
    assert task_argv(tool("rvs"), DiagOptions(preset="gst_single"))[4:] == [
        "rvs",
        "-c",
        "/opt/rocm/share/rocm-validation-suite/conf/gst_single.conf",
    ]
    with pytest.raises(ConfigError, match="unknown diagnostic 'agfhc'") as e:
        tool("agfhc")
    assert e.value.hint == "one of dcgmi-diag, gpu-burn, nvbandwidth, transferbench, rvs"
    with pytest.raises(ValueError):
        DiagOptions(preset="a2a; rm -rf /")


def _run_task(argv: list[str], node: str, path: Path) -> subprocess.CompletedProcess[str]:
    """One task as srun would start it, here: the wrapper under /bin/sh, PATH holding only `path`."""
    env = {"ORCH_NODE": node, "PATH": str(path), "HOME": os.environ.get("HOME", "/")}
    return subprocess.run(["/bin/sh", *argv[1:]], env=env, capture_output=True, text=True, check=False)


def test_a_node_without_the_tool_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done = _run_task(task_argv(tool("dcgmi-diag"), DiagOptions()), "node1", empty)
    assert done.returncode == 127
    assert done.stdout.splitlines() == ["orch-diag: node node1", "orch-diag: no dcgmi on node1"]
    result = read_node_output(tool("dcgmi-diag"), done.stdout)
    assert (result.node, result.status, result.reasons) == ("node1", "missing", ["no dcgmi on node1"])


def test_a_node_with_the_tool_is_judged_on_its_figures(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "dcgmi"  # a stand-in binary that prints the published output (its source line cut)
    fixture = FIX / "dcgmi-diag-r3-1gpu.json"
    fake.write_text(f"#!/bin/sh\n/usr/bin/tail -n +2 '{fixture}'\n")
    fake.chmod(0o755)
    done = _run_task(task_argv(tool("dcgmi-diag"), DiagOptions(level=3)), "node2", bindir)
    assert done.returncode == 0, done.stderr
    passed = read_node_output(tool("dcgmi-diag"), done.stdout)
    assert (passed.node, passed.status, passed.reasons) == ("node2", "pass", [])
    assert passed.report is not None and passed.report.node == "node2"

    limits = [
        DiagThreshold(figure="PCIe", where="GPU to Host bandwidth", min=20.0),
        DiagThreshold(figure="PCIe", where="bidirectional latency", max=5.0),
        DiagThreshold(figure="Targeted Power", max=60.0),
    ]
    failed = read_node_output(tool("dcgmi-diag"), done.stdout, limits)
    assert failed.status == "fail"
    assert failed.reasons == ["PCIe GPU 0: 13.15 GB/s below 20", "Targeted Power GPU 0: 70 W above 60"]


def test_a_step_reads_every_node_and_names_unreadable_output() -> None:
    text = (FIX / "gpu-burn-a100x8.txt").read_text()
    cut = text[: text.index("Tested 8 GPUs")]
    logs = {
        "rank-0.log": "orch-diag: node node3\n" + text,
        "rank-1.log": "orch-diag: node node1\norch-diag: no gpu_burn on node1\n",
        "rank-2.log": "orch-diag: node node2\n" + cut,
    }
    results = read_step(tool("gpu-burn"), logs, [DiagThreshold(figure="gflops", min=16000.0)])
    assert [(r.node, r.status) for r in results] == [
        ("node1", "missing"),
        ("node2", "unreadable"),
        ("node3", "pass"),
    ]
    assert "no 'Tested N GPUs' verdict" in results[1].reasons[0]
    slow = read_step(
        tool("gpu-burn"), {"rank-0.log": logs["rank-0.log"]}, [DiagThreshold(figure="gflops", min=17000.0)]
    )
    assert slow[0].status == "fail"
    assert slow[0].reasons[0] == "gflops GPU 0: 16942 Gflop/s below 17000"


# --- perftest over node pairs -----------------------------------------------------------------------


def test_perftest_pairs_follow_the_straggler_rounds(tmp_path: Path) -> None:
    from orchestrator.runs.stragglers import round_robin

    opts = PerftestOptions(device="mlx5_0", size=65536)
    rounds = round_robin(["node1", "node2", "node3", "node4"])
    specs = [
        perftest_pair_spec(pair, opts, name=f"orch-r1-ib-{k}", step_id=f"ib-{k}", workdir=tmp_path)
        for k, pair in enumerate(p for r in rounds for p in r)
    ]
    assert len(specs) == 6  # every pair of 4 nodes once, in 3 rounds of 2 disjoint pairs
    first = srun_argv(specs[0])
    check_spec(specs[0])
    assert "--nodelist=node1,node4" in first and "--ntasks-per-node=1" in first
    assert first[-13:] == [
        "sh", "-c", PAIR_WRAPPER, "orch-diag", "node1",
        "ib_write_bw", "--report_gbits", "-s", "65536", "-D", "5", "-d", "mlx5_0",
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="cannot pair with itself"):
        perftest_pair_spec(("node1", "node1"), opts, name="x", step_id="x", workdir=tmp_path)


def test_perftest_pair_run_and_read(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    fixture = FIX / "ib_write_bw-roce-postlist.txt"
    fake = bindir / "ib_write_bw"  # a stand-in that notes its argv and prints the published report
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> '{calls}'\n/usr/bin/tail -n +2 '{fixture}'\n")
    fake.chmod(0o755)
    spec = perftest_pair_spec(("node1", "node2"), PerftestOptions(duration_s=1), name="x", step_id="x",
                              workdir=tmp_path)  # fmt: skip
    logs = {}
    for rank, node in enumerate(("node1", "node2")):
        env = {"ORCH_NODE": node, "SLURM_PROCID": str(rank), "PATH": f"{bindir}:/usr/bin:/bin"}
        done = subprocess.run(
            ["/bin/sh", *spec.argv[1:]], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        logs[f"rank-{rank}.log"] = done.stdout
    # the server runs the test as given; the client appends the server's node
    assert calls.read_text().splitlines() == [
        "--report_gbits -s 1048576 -D 1",
        "--report_gbits -s 1048576 -D 1 node1",
    ]
    ok = read_pair(("node1", "node2"), logs)
    assert (ok.node, ok.status) == ("node1-node2", "pass")
    slow = read_pair(("node1", "node2"), logs, [DiagThreshold(figure="bw_average", min=100.0)])
    assert slow.reasons == ["bw_average: 0.48 Gb/s below 100"]
    logs["rank-1.log"] = "orch-diag: node node2\norch-diag: no ib_write_bw on node2\n"
    gone = read_pair(("node1", "node2"), logs)
    assert (gone.status, gone.reasons) == ("missing", ["no ib_write_bw on node2"])
