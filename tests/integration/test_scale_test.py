"""orch scale-test through real Slurm on the 3-node lab."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from labfaults import fab0_qdisc

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.lab

ORCH = [sys.executable, "-m", "orchestrator"]


def orch(lab: Lab, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCH, *args], capture_output=True, text=True, env=lab.env, timeout=timeout, check=False
    )


def result_of(out_dir: Path) -> dict:  # type: ignore[type-arg]
    (run_dir,) = [p for p in out_dir.iterdir() if p.is_dir()]
    return json.loads((run_dir / "result.json").read_text())


def sacct_states(lab: Lab, job_ids: list[str]) -> dict[str, str]:
    time.sleep(1)
    out = lab.slurm("sacct", "-X", "--parsable2", "--noheader", "-o", "JobID,State", "-j", ",".join(job_ids))
    return dict(line.split("|", 1) for line in out.stdout.splitlines())


def test_smoke_ladder_through_slurm(lab: Lab, tmp_path: Path) -> None:
    # one job per step (allocation mode, the default, has tests/integration/test_allocation_lab.py)
    out = tmp_path / "my runs"  # a space: paths never go on #SBATCH lines, so this works
    proc = orch(lab, "scale-test", "-i", str(lab.inventory), "--gpus-per-node", "2",
                "--slurm-mode", "per-step", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = result_of(out)
    assert [s["step"]["id"] for s in result["steps"]] == ["n1xg2", "n2xg2", "n3xg2"]
    jobs = [s["job_id"] for s in result["steps"]]
    assert set(sacct_states(lab, jobs).values()) == {"COMPLETED"}
    for step in result["steps"]:
        rows = step["rows"]
        assert len(rows) == 6 * 6, step["step"]["id"]  # six collectives x six sizes
        for row in rows:
            assert row["nranks"] == step["step"]["world_size"]
            assert row["out_of_place"]["busbw_gbs"] > 0, (
                step["step"]["id"],
                row["collective"],
                row["size_bytes"],
            )
            assert row["out_of_place"]["wrong"] == 0
    # each step ran on the nodes the plan gave it, one namespace each
    assert [s["job"]["nodelist"] for s in result["steps"]] == ["node1", "node[1-2]", "node[1-3]"]
    assert "verdict: accepted" in proc.stdout
    # the lab's nodes have no GPU telemetry tool: one line for the run names them all, and the
    # run goes on (docs/telemetry.md); its steps carry no telemetry
    printed = " ".join(proc.stderr.split())  # rich wraps long lines on stderr
    assert printed.count("no GPU telemetry tool") == 1, proc.stderr
    no_tool = "no GPU telemetry tool (nvidia-smi, amd-smi, rocm-smi) on node1, node2, node3;"
    assert no_tool in printed, proc.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    events = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert len([e for e in events if "no GPU telemetry tool" in e.get("message", "")]) == 1
    assert all(s["telemetry"] is None for s in result["steps"])


def test_unreachable_threshold_exits_1_naming_steps(lab: Lab, tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "name: tb\nladder: {nodes: [2, 3], ranks_per_node: [1]}\ncollectives: [all_reduce]\n"
        "sizes: {min: 64K, max: 256K, factor: 4}\nwarmup_iters: 1\niters: 3\n"
        "thresholds: {busbw: [{collective: all_reduce, min_gbs: 1000}]}\n"
    )
    proc = orch(
        lab, "scale-test", "-i", str(lab.inventory), "--plan", str(plan), "--out", str(tmp_path / "r")
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "n2xg1: all_reduce at the largest size: busbw" in proc.stdout
    assert "n3xg1: all_reduce at the largest size: busbw" in proc.stdout
    assert "verdict: failed" in proc.stdout


def test_drained_node_is_infrastructure_failure(lab: Lab, tmp_path: Path) -> None:
    lab.slurm("scontrol", "update", "nodename=node3", "state=drain", "reason=orch-test")
    try:
        t0 = time.monotonic()
        proc = orch(
            lab, "scale-test", "-i", str(lab.inventory), "--collectives", "all_reduce", "--sizes", "64K",
            "--gpus-per-node", "1", "--timeout", "60", "--out", str(tmp_path),
        )  # fmt: skip
        took = time.monotonic() - t0
    finally:
        lab.slurm("scontrol", "update", "nodename=node3", "state=resume")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    result = result_of(tmp_path)
    verdicts = {s["step"]["id"]: s["verdict"] for s in result["steps"]}
    assert verdicts == {"n1xg1": "pass", "n2xg1": "pass", "n3xg1": "infra"}
    n3 = result["steps"][2]
    assert any("node3 is drained" in r for r in n3["reasons"]), n3["reasons"]
    assert took < 60 * 3, "must end within the plan's bounds, not hang"
    assert result["nodes"] == {"node1": "pass", "node2": "pass", "node3": "infra"}
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    name = f"orch-{run_dir.name}-n3xg1"  # job names carry the run's id
    queued = lab.slurm("squeue", "--noheader", "-o", "%i", "-n", name).stdout.split()
    assert queued == [], "the step that could not get node3 was left in the queue"


def test_sigint_cancels_every_job(lab: Lab, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*ORCH, "scale-test", "-i", str(lab.inventory), "--gpus-per-node", "2", "--sizes", "1M:16M:x4",
         "--out", str(tmp_path)],
        env={**lab.env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        running = False
        while time.monotonic() < deadline and not running:
            out = lab.slurm("squeue", "--noheader", "-o", "%T|%j").stdout
            # Job names are orch-<run id>-<step>, and the run id holds the plan: ...-smoke-...
            running = any(line.startswith("RUNNING|orch-") and "-smoke-" in line for line in out.splitlines())
            time.sleep(0.3)
        assert running, "no step started running"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    # scancel is asynchronous: a cancelled job may show as COMPLETING for a moment.
    deadline = time.monotonic() + 20
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    ours = f"orch-{run_dir.name}-"
    left = ours
    while ours in left and time.monotonic() < deadline:
        left = lab.slurm("squeue", "--noheader", "-o", "%i %j %T").stdout
        time.sleep(0.5)
    assert ours not in left, left
    events = [
        json.loads(x)
        for x in next(p for p in tmp_path.iterdir() if p.is_dir())
        .joinpath("journal.jsonl")
        .read_text()
        .splitlines()
    ]
    assert any(e["event"] == "interrupted" for e in events)


@pytest.fixture(autouse=True)
def _no_orch_jobs_left(lab: Lab) -> None:
    """Each test starts with no orch job in the queue (a leftover would distort the next one)."""
    out = lab.slurm("squeue", "--noheader", "-o", "%i %j").stdout
    ids = [line.split()[0] for line in out.splitlines() if " orch-" in line]
    if ids:
        lab.slurm("scancel", *ids)


def test_plan_fault_injected_during_its_step_and_reverted(lab: Lab, tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "name: faulted\nladder: {nodes: [2], ranks_per_node: [1]}\ncollectives: [all_reduce]\n"
        "sizes: {min: 4M, max: 4M}\nwarmup_iters: 1\niters: 150\nstep_timeout_s: 300\n"
        "faults:\n  - {kind: throttle, step: n2xg1, at_s: 0.5, target: 'node2:fab0', duration: 2s,"
        " params: {rate: 20mbit}}\n"
        "  - {kind: roce-drop, step: 0, at_s: 0.2, target: 'node1:fab0', duration: 1s}\n"
    )
    before = fab0_qdisc(lab, "node2")
    proc = orch(lab, "scale-test", "-i", str(lab.inventory), "--plan", str(plan), "--stack", "none",
                "--out", str(tmp_path / "r"))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # roce-drop only reaches RoCE in software; the lab's gloo runs on TCP: the plan says so
    assert "roce-drop cannot affect transport socket" in proc.stderr
    (run_dir,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    events = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    running = next(i for i, e in enumerate(events) if e["event"] == "step_state" and e["state"] == "RUNNING")
    injected = [e for e in events if e["event"] == "fault_injected"]
    assert {e["fault_kind"] for e in injected} == {"throttle", "roce-drop"}
    assert all(e["outcome"] == "active" for e in injected), injected
    assert all(kinds.index("fault_injected") > running for _ in injected)
    reverted = [e for e in events if e["event"] == "fault_reverted"]
    assert sorted(e["fault"] for e in reverted) == sorted(e["fault"] for e in injected)
    assert all(e["outcome"] == "reverted" for e in reverted)
    records = [json.loads(p.read_text()) for p in (run_dir / "faults").glob("*.json")]
    assert {r["outcome"] for r in records} == {"reverted"} and len(records) == 2
    assert fab0_qdisc(lab, "node2") == before
    result = json.loads((run_dir / "result.json").read_text())
    assert any("roce-drop" in w for w in result["steps"][0]["warnings"])


def test_acceptance_plan_names_every_efficiency_reference(lab: Lab, tmp_path: Path) -> None:
    """The acceptance plan (its ladder, collectives and thresholds; sizes and iterations cut so that
    it takes about a minute): inter-node efficiency against the 2-node step of the same ranks per
    node, for every collective, named in the console and the reports; no 1-rank reference."""
    proc = orch(lab, "scale-test", "-i", str(lab.inventory), "--plan", "acceptance", "--sizes", "256K:1M:x4",
                "--iters", "20", "--warmup", "1", "--out", str(tmp_path))  # fmt: skip
    # 0 or 1: the lab's shared CPUs may miss 0.8 beyond the noise band; the naming is what is tested
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    result = result_of(tmp_path)
    steps = {s["step"]["id"]: s for s in result["steps"]}
    assert list(steps) == ["n1xg1", "n1xg2", "n2xg1", "n2xg2", "n3xg1", "n3xg2"]
    colls = {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"}
    for sid, s in steps.items():
        summ = s["summary"]
        assert set(summ) == colls, sid
        for c, v in summ.items():
            if sid == "n1xg1":
                assert v["efficiency"] is None and v["reference"] is None, (sid, c)
                continue
            nnodes, rpn = s["step"]["nnodes"], s["step"]["ranks_per_node"]
            want = ("intra-node", "n1xg2") if nnodes == 1 else ("inter-node", f"n2xg{rpn}")
            assert (v["scaling"], v["reference"]) == want, (sid, c, v)
            assert v["efficiency"] is not None and v["noise"] is not None, (sid, c)
            assert steps[v["reference"]]["step"]["world_size"] >= 2
            assert v["latency_us"]["n"] == 20 and v["latency_us"]["p95"] is not None
            assert v["latency_us"]["p99"] is None  # 20 iterations: p99 would be the maximum
    for rpn in (1, 2):
        assert f"inter-node vs n2xg{rpn}" in proc.stdout
    assert "(n=20)" in proc.stdout
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    md = orch(lab, "report", str(run_dir), "-f", "md", "-o", "-").stdout
    junit = orch(lab, "report", str(run_dir), "-f", "junit", "-o", "-").stdout
    html = orch(lab, "report", str(run_dir), "-f", "html", "-o", "-").stdout
    for rpn in (1, 2):
        assert f"inter-node vs n2xg{rpn}" in md
        assert f"all_reduce x{rpn}/node vs n2xg{rpn}" in html  # the inter-node efficiency plot's line
    assert "vs n1xg1" not in md + html + junit
    names = {tc.get("name") for tc in ET.fromstring(junit).iter("testcase")}
    want = {"inter-node vs n2xg1", "inter-node vs n2xg2", "intra-node vs n1xg2"}
    assert {f"scaling efficiency >= 0.8 ({w})" for w in want} <= names


@pytest.mark.parametrize("mode", ["per-step", "allocation", "allocation-batch"])
def test_job_gets_the_allowed_environment_only(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """sbatch --export=<allow-list>: a secret in orch's environment stays out of the job, while
    srun --export=ALL still hands every task PATH, the script's exports and Slurm's variables;
    in allocation-batch mode through the driver's srun of the step, in allocation mode through
    the srun orch starts itself (its environment built from the same allow-list)."""
    from orchestrator.scheduler.allocation import AllocationScheduler
    from orchestrator.scheduler.base import JobSpec
    from orchestrator.scheduler.salloc import SallocScheduler
    from orchestrator.scheduler.slurm import SlurmScheduler

    monkeypatch.setenv("ORCH_TEST_SECRET", "canary-b1d3f0")
    kinds = {
        "per-step": SlurmScheduler,
        "allocation": SallocScheduler,
        "allocation-batch": AllocationScheduler,
    }
    sched = kinds[mode](slurm_conf=Path(lab.env["SLURM_CONF"]))
    spec = JobSpec(name="orch-envcheck-n2", step_id="n2", nodes=["node1", "node2"], nnodes=2,
                   ranks_per_node=1, argv=["/usr/bin/env"], env={"ORCH_WANTED": "yes it is"},
                   master_addr="198.18.0.11", master_port=29999, time_limit_s=60,
                   workdir=tmp_path / "a dir; $(x)")  # fmt: skip
    job = sched.submit(spec)
    deadline = time.monotonic() + 60
    while not (state := sched.poll([job])[job]).status.terminal and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state.raw_state == "COMPLETED", state
    for rank in (0, 1):
        env = dict(ln.split("=", 1) for ln in (spec.workdir / f"rank-{rank}.log").read_text().splitlines()
                   if "=" in ln)  # fmt: skip
        assert "ORCH_TEST_SECRET" not in env and "canary-b1d3f0" not in "".join(env.values())
        assert env["ORCH_WANTED"] == "yes it is" and env["MASTER_ADDR"] == "198.18.0.11"
        assert env["PATH"] and env["SLURM_PROCID"] == str(rank)
    alloc = job.partition(".")[0]
    out = {
        "per-step": f"slurm-{job}.out",
        "allocation": "commands.sh",
        "allocation-batch": f"alloc-{alloc}.out",
    }
    assert (spec.workdir / out[mode]).exists()
    if isinstance(sched, SallocScheduler):
        sched.release()


@pytest.mark.parametrize("failing", [["sacct"], ["sacct", "squeue", "scontrol"]], ids=["sacct", "all-three"])
def test_sacct_failing_mid_ladder_ends_the_run_with_exit_3_and_no_job_left(
    lab: Lab, tmp_path: Path, failing: list[str]
) -> None:
    """sacct (then also squeue and scontrol) starts failing, through wrappers first in PATH, once
    the first step runs: orch retries, then gives up with exit 3 in bounded time, having cancelled
    the steps still queued or running, and the journal ends with run_finished."""
    import shutil

    flag = tmp_path / "fail-now"
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    for cmd in failing:
        real = shutil.which(cmd, path=lab.env.get("PATH"))
        assert real
        (wrappers / cmd).write_text(
            f"#!/bin/sh\nif [ -e '{flag}' ]; then echo '{cmd}: error: test wrapper' >&2; exit 1; fi\n"
            f'exec {real} "$@"\n'
        )
        (wrappers / cmd).chmod(0o755)
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [*ORCH, "scale-test", "-i", str(lab.inventory), "--nodes", "1,2,3", "--gpus-per-node", "1",
         "--collectives", "all_reduce", "--sizes", "1M:16M:x4", "--iters", "40", "--out", str(out)],
        env={**lab.env, "PATH": f"{wrappers}:{lab.env['PATH']}", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        journal: Path | None = None
        while time.monotonic() < deadline:
            journal = next(iter(out.glob("*/journal.jsonl")), None)
            if journal and '"state":"RUNNING"' in journal.read_text():  # sacct has answered
                break
            time.sleep(0.2)
        assert journal is not None, "no step started"
        flag.touch()
        t_fail = time.monotonic()
        stdout, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - t_fail
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, stdout + stderr
    assert re.search(r"(sacct|squeue|scontrol) failed \d+ times in a row", stderr), stderr
    events = [json.loads(x) for x in journal.read_text().splitlines()]
    assert events[-1]["event"] == "run_finished" and events[-1]["exit_code"] == 3
    (error,) = [e for e in events if e["event"] == "run_error"]
    assert error["cancelled"], "no job was live when orch gave up"
    # allocation mode (the default): step ALLOC.K is queued as ALLOC
    jobs = sorted({e["job_id"].partition(".")[0] for e in events if e["event"] == "step_submitted"})
    deadline = time.monotonic() + 20  # scancel is asynchronous (COMPLETING for a moment)
    left = "?"
    while left and time.monotonic() < deadline:
        queued = lab.slurm("squeue", "--noheader", "-o", "%i %T", "-j", ",".join(jobs), check=False)
        left = queued.stdout.strip()
        time.sleep(0.5)
    assert not left, left
    print(f"\n{'+'.join(failing)} failing: orch exited 3 after {took:.1f} s, cancelled {error['cancelled']}")


def test_ranks_run_in_the_stacks_image_with_container_on(lab: Lab, tmp_path: Path) -> None:
    """--container on: every rank of the step runs collbench in cpu-gloo's image (built on each node
    by `orch provision`), and no container of the run is left on a node afterwards."""
    out = tmp_path / "runs"
    proc = orch(lab, "scale-test", "-i", str(lab.inventory), "--container", "on", "--nodes", "2",
                "--gpus-per-node", "2", "--sizes", "1K:4K", "--collectives", "all_reduce",
                "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    image = json.loads((run / "container.json").read_text())["image"]
    assert image == "localhost/orch-stack/cpu-gloo:provisioned"
    log = (run / "steps" / "n2xg2" / "rank-0.log").read_text()
    assert "# Container: podman (4 of 4 ranks)" in log, log
    assert [r["verdict"] for r in json.loads((run / "result.json").read_text())["steps"]] == ["pass"]
    events = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    assert [e["errors"] for e in events if e["event"] == "containers_removed"] == [[]]
    ps = "podman --runtime runc --root /opt/orch/containers/root --runroot /opt/orch/containers/run ps -aq"
    for node in lab.nodes[:2]:
        left = lab.ssh(node, f"{ps} --filter label=orch.run={run.name}").stdout.strip()
        assert left == "", (node.name, left)
