"""`orch migrate run` on the lab, for real (issue 15): cpu-gloo (A) to cpu-gloo-slow (B: numpy
2.2.6 pinned and TORCH_DISTRIBUTED_DEBUG=DETAIL, slower on purpose).

One migration on two of the lab's nodes, killed (SIGKILL) while the canary's provisioning installs
B, then `orch runs resume`: the canary is provisioned again, B scales to the other node, the
plan's fault runs on B, the compare gate fails naming what got worse, and the run rolls back and
certifies. Afterwards every node holds A again (B's numpy gone), each node's package and env hashes
equal the frozen reference; the re-run of the plan on A is judged against the baseline's band (on
the lab's shared cores it may fail there, on its figures only and confirmed: see the test).

Two nodes, not three, to keep CI short (a provisioning from scratch is a minute or more per node on
the lab's 2 cores); docs/migration.md gives the 3-node figures. The nodes end on cpu-gloo, as the
lab's session fixture left them: the tests after this one find the stack they expect.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
from test_chaos_stages_lab import alive, env_of, journal, orch, spawn, started_tasks, wait_for

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
INSTALL_TASK = "Install torch and orch's workload into the venv, from the wheelhouse only"
VENV_PY = "/opt/orch/venv/bin/python"
# all_reduce on 1 and 2 nodes x 2 ranks; DETAIL's cost is at the small and medium sizes.
PLAN = (
    "name: migrate-lab\n"
    "ladder: {nodes: '1..N', ranks_per_node: [2]}\n"
    "collectives: [all_reduce]\n"
    "sizes: {min: 16K, max: 1M, factor: 4}\n"
    # 30 iterations: with 10, certify's re-run of A once came out -20% at two small sizes (band +-16-19%)
    "warmup_iters: 3\niters: 30\nstep_timeout_s: 120\nrun_timeout_s: 1200\n"
    "faults:\n"
    "  - {kind: delay, step: n2xg2, at_s: 0.3, target: 'node2:fab0', duration: 1s, params: {delay_ms: 1}}\n"
)


def two_nodes(lab: Lab, tmp_path: Path) -> Path:
    """The lab's inventory without node3 (same variables, same hosts)."""
    keep = [ln for ln in lab.inventory.read_text().splitlines() if not ln.startswith("node3 ")]
    inv = tmp_path / "two.ini"
    inv.write_text("\n".join(keep) + "\n")
    return inv


def test_a_worse_stack_killed_in_its_canary_resumes_fails_the_compare_and_rolls_back(
    lab: Lab, tmp_path: Path
) -> None:
    env = env_of(lab, tmp_path)
    inv = two_nodes(lab, tmp_path)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    root = tmp_path / "runs"
    nodes = [lab.node("node1"), lab.node("node2")]
    proc = spawn(env, "migrate", "run", "-i", str(inv), "--from", "cpu-gloo", "--to", "cpu-gloo-slow",
                 "--plan", str(plan), "--out", str(root))  # fmt: skip
    try:
        # the canary (node1) is installing B: its venv (A's) was removed first, so node1 is
        # neither A nor B now (the node's pip goes on after orch dies: resume must stop it)
        wait_for(lambda: any((INSTALL_TASK, "node1") in started_tasks(p) for p in root.glob("*/provision")),
                 "the canary's install of cpu-gloo-slow", 600)  # fmt: skip
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any("ansible-playbook" in " ".join(c.cmdline()) for c in alive(children))
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    (run_dir,) = [p for p in root.iterdir() if "-migrate-" in p.name]

    res = orch(env, "runs", "resume", str(run_dir), timeout=1800)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert "phase canary: started (attempt 2)" in res.stderr  # progress, phase by phase
    state = json.loads((run_dir / "migrate.json").read_text())
    last = {p["phase"]: p for p in state["phases"]}
    assert {k: v["state"] for k, v in last.items() if k != "certify"} == {
        "freeze": "passed", "canary": "passed", "scale": "passed", "faults": "passed",
        "compare": "failed", "rollback": "passed",
    }  # fmt: skip
    # certify: the fingerprints must be exact (below); A's re-run may be worse than the baseline on
    # the lab's two shared cores, and then only on its figures, confirmed by a second re-run. CI saw
    # both re-runs of n1xg2 at -66 % and -75 % against the baseline: busbw comes from the mean time
    # of 30 iterations, and a few 4 ms stalls (p95 4.1-5.6 ms against the baseline's 1.6-2.4 ms,
    # the p50 alike: 355 and 390 us against 330) set it
    cert = last["certify"]
    print(f"certify: {cert['state']}: {cert['reason']}")
    assert cert["state"] in ("passed", "failed") and state["certification"] is not None, cert
    if cert["state"] == "failed":
        labels = [r["label"] for r in state["plan_runs"]]
        assert labels[-2:] == ["certify", "certify-confirm"], labels
        first, second = cert["reason"].split(" | ")
        assert first.startswith("the re-run on A is worse than the baseline: all_reduce@n"), cert
        assert second.startswith("the second re-run on A is worse than the baseline: all_reduce@n"), cert
    assert last["canary"]["attempts"] == 2
    # what resume found: the canary half-way (neither A nor B), the other node still on A
    (found,) = state["resumes"]
    assert {n["node"]: n["holds"] for n in found} == {"node1": "mixed", "node2": "A"}
    resumed = [e for e in journal(run_dir) if e["event"] == "run_resumed"]
    assert resumed and resumed[0]["phase"] == "canary"
    left = [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]
    assert not alive(left), [" ".join(p.info["cmdline"]) for p in left]
    # the compare names what got worse: all_reduce, at two or more adjacent sizes
    assert state["failed_phase"] == "compare" and state["rolled_back"]
    assert "all_reduce@n" in state["failure"] and "worse at sizes" in state["failure"]
    worse = [d for d in state["comparison"]["collectives"] if d["direction"] == "worse"]
    assert worse and all(len(d["flagged_sizes"]) >= 2 for d in worse)
    # the rollback proof: every node equals the frozen reference, package and env hashes included
    ref = json.loads((run_dir / "reference.json").read_text())
    cert = state["certification"]
    assert cert["against"] == "reference" and sorted(n["node"] for n in cert["nodes"]) == ["node1", "node2"]
    for node in cert["nodes"]:
        assert node["ok"] and node["packages_hash"] == ref["nodes"][node["node"]]["packages_hash"]
        assert node["env_hash"] == ref["nodes"][node["node"]]["env_hash"]
    for n in nodes:  # B is gone, not kept beside A
        assert lab.ssh(n, VENV_PY, "-c", "'import numpy'", check=False).returncode != 0, n.name
        record = json.loads(lab.ssh(n, "cat", "/opt/orch/venv/orch-stack.json").stdout)
        assert record["stack"] == "cpu-gloo" and "TORCH_DISTRIBUTED_DEBUG" not in record["env"]
    report = (run_dir / "report.md").read_text()
    assert "## A/B compare" in report and "## Rollback proof" in report
    assert orch(env, "fault", "sweep", "-i", str(inv), timeout=120).returncode == 0
