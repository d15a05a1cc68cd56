"""Isolation on an 8-node lab (issue 14's lab must-shows), in one module that needs 8 nodes.

The module takes the session's 3-node lab down, brings an 8-node lab up in the same state dir
(node1..node3 keep their provisioned /opt), gives node4..node8 node1's cpu-gloo venv (_seed_opt),
and brings the 3-node lab back at the end (as test_lab.py's `restore`). On it:

- clean: a clean scale-test of the short plan gives every node a certificate, and `orch check
  --quick` passes on every node, then fails on the one node whose /opt lost a package (torch's
  metadata moved away) and still passes on the others;
- a 40 mbit tbf throttle on node6's fab0 (the fault engine, reverted in finally and by its timer):
  the short plan's 8-node step fails, `scale-test --isolate --drain-bad` names node6 and no other
  node and clears each of the seven others (isolate on the clean lab, a test of its own until
  December 2026, showed no more: 83 s of CI for what this test shows of seven nodes), in at most
  ceil(log2 8) + 3 = 6 rounds (the search, round 2 for nodes that failed alone and are tested
  alone again, the confirmation round), the evidence is in the isolate run's report, node6 is
  drained with the run id in the reason, and `orch cert resume node6` brings it back once the
  throttle is gone;
- a rule in node2's namespace that drops what node2 sends to node5's fabric address: the link
  node2+node5 is named, not one node.

The lab's nodes share 2 CPUs: the short plan loosens isolate's group rule (groups at 2 % of the
median single: on 2 cores a group's busbw falls with its ranks, a clean 6-node set gave 0.074 GB/s
against singles of 0.55-2.1, median 1.0); a 40 mbit link (0.0048 GB/s; tbf holds it to the rate,
a 20 mbit link gave 0.0024 with a log sigma of 0.001) is four times below it, and twice below it
on a lab loaded to a median single of 0.51 (seen). 40 mbit, not 20: each test through the link
moves its 10 all_reduces (warm-up, 3 timed and the check, out of place and in place) in half the
time (1.54 s each at 20 mbit: 15 s of each of the 5 such tests). Singles go by isolate's one
rule (docs/isolation.md, "The pass rule"): a single under 80 % of the median is tested alone
again, and named only when the repeat fails too, beyond its kind's noise band; one that passes
its repeat is "unconfirmed", not named.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from labfaults import throttled

from orchestrator.lab import disk, down, slurm_env, up
from orchestrator.lab.config import LabConfig

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator"]
NODES = 8
# the search's 1 + ceil(log2 8), round 2 (nodes that failed alone, tested alone again) and the
# confirmation round (orchestrator/isolation/search.py, round_bound(8) + 1)
ROUND_BAR = math.ceil(math.log2(NODES)) + 3
LOOSE = ["--size", "2M", "--iters", "3", "--timeout", "30", "--min-efficiency", "0.02"]
# node6's fab0 in the throttled-node test (the module's docstring says why 40 mbit, not 20)
THROTTLE_RATE = "40mbit"
TORCH_META = "/opt/orch/venv/lib/python3.11/site-packages/torch-2.13.0+cpu.dist-info"
# The short scale-test plan: a 2-node step (node1, node2) and the 8-node step; busbw at least
# 0.02 GB/s (the lab's 4- and 5-node all_reduce at 4M gave 0.15-0.2 GB/s; a 40 mbit link 0.0048). 2M, not
# 4M: a test through the throttled link moves half as much (they took 20-40 s each at 4M).
PLAN = """\
name: iso8
ladder: {nodes: [2, 8], ranks_per_node: [1]}
collectives: [all_reduce]
sizes: {min: 2M, max: 2M}
warmup_iters: 1
iters: 3
step_timeout_s: 60
thresholds:
  busbw: [{collective: all_reduce, min_gbs: 0.02}]
isolation: {size: 2M, iters: 3, timeout_s: 30, min_efficiency: 0.02}
"""


def orch(lab: Lab, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCH, *args], capture_output=True, text=True, env=lab.env, timeout=timeout, check=False, cwd=REPO
    )


def _seed_opt(cfg: LabConfig) -> None:
    """Give each new node the stack node1 has: its venv and wheelhouse, as hard links (seconds;
    nothing writes them in place: pip and Python replace files by rename, and a test that moves
    a file away moves one node's link only). node1 was provisioned by the session fixture, with
    this checkout's orch; the scale-tests here fingerprint all 8 nodes against the stack and would
    refuse a node that differs. The container storage is not copied: no test here runs one."""
    src = cfg.node_dir(cfg.node_specs[0]) / "opt" / "orch"
    for node in cfg.node_specs[1:]:
        dst = cfg.node_dir(node) / "opt" / "orch"
        for part in ("venv", "wheelhouse"):
            if (src / part).exists() and not (dst / part).exists():
                dst.mkdir(parents=True, exist_ok=True)
                subprocess.run(["cp", "-al", str(src / part), str(dst / part)], check=True, timeout=300)


@pytest.fixture(scope="module")
def lab8(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    from conftest import Lab as Facts
    from conftest import record_setup

    t0 = time.monotonic()
    cfg = lab.config.model_copy(
        update={"nodes": NODES, "inventory_out": tmp_path_factory.mktemp("lab8") / "lab8.ini"}
    )
    # slurmctld saves node states across down and up: a node an earlier test left drained would
    # come back drained, and up would wait in vain for every node idle (seen: "node3: drained")
    rows = lab.slurm("sinfo", "--noheader", "--Node", "--format=%N %T", check=False).stdout.split("\n")
    for node, state in (r.split() for r in rows if len(r.split()) == 2):
        if state.startswith("drain"):
            lab.slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    down(lab.config)
    try:
        up(cfg)
        _seed_opt(cfg)
        record_setup("8-node lab up with the stack (test_isolate8_lab)", t0)
        yield Facts(config=cfg, nodes=cfg.node_specs, env=slurm_env(cfg))
    finally:
        t1 = time.monotonic()
        down(cfg)
        # renamed away at once and removed in the background (up to 80 s in a CI run for 5 nodes'
        # /opt when removed here); the session's lab down finishes the removal
        disk.discard(cfg.state_dir, [cfg.node_dir(node) for node in cfg.node_specs[lab.config.nodes :]])
        up(lab.config)
        record_setup("8-node lab down and the 3-node lab back (test_isolate8_lab)", t1)


def _node_line(lab: Lab, node: str) -> str:
    return lab.slurm("scontrol", "show", "node", "-o", node).stdout


def _one(out: Path, pattern: str) -> Path:
    (path,) = list(out.glob(pattern))
    return path


def _plan(tmp_path: Path) -> Path:
    path = tmp_path / "iso8.yaml"
    path.write_text(PLAN)
    return path


def test_throttled_node6_is_found_drained_and_resumed(lab8: Lab, tmp_path: Path) -> None:
    with throttled(lab8, "node6", tmp_path / "faults", rate=THROTTLE_RATE):
        proc = orch(
            lab8, "scale-test", "-i", str(lab8.inventory), "--plan", str(_plan(tmp_path)),
            "--isolate", "--drain-bad", "--out", str(tmp_path / "r"), timeout=420,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the short plan fails its multi-node step with node6, not the 2-node step without it
    scale_dir = _one(tmp_path / "r", "*iso8*")
    steps = json.loads((scale_dir / "result.json").read_text())["steps"]
    verdicts = {s["step"]["nnodes"]: s["verdict"] for s in steps}
    assert verdicts == {2: "pass", 8: "fail"}, verdicts
    # isolate names node6 alone, within the bar, as a run linked to the scale-test
    found = json.loads(_one(tmp_path / "r", "*isolate*/isolation.json").read_text())
    assert json.loads((scale_dir / "isolation.json").read_text())["run_id"] == found["run_id"]
    assert found["parent_run"] == scale_dir.name
    culprits = found["isolation"]["culprits"]
    assert [(c["kind"], c["nodes"]) for c in culprits] == [("node", ["node6"])], proc.stdout
    assert found["isolation"]["undecided"] == []
    # every healthy node cleared, none named: what isolate on the clean lab shows, for seven nodes
    healthy = sorted(n.name for n in lab8.nodes if n.name != "node6")
    assert sorted(found["isolation"]["good"]) == healthy, found["isolation"]
    rounds = len(found["isolation"]["rounds"])
    assert rounds <= ROUND_BAR, found["isolation"]["rounds"]
    # docs/isolation.md: 5 rounds and 15 tests (the confirmation included), as the search gives on
    # the simulated 8 nodes (tests/unit/test_isolation_search.py::
    # test_the_8_node_labs_cases_take_the_rounds_measured_on_the_lab); a healthy node that failed
    # alone by noise adds round 2 and its repeat (reported unconfirmed, never named)
    tests = sum(len(r["trials"]) for r in found["isolation"]["rounds"])
    noisy = len(found["isolation"].get("unconfirmed", []))
    if noisy == 0:
        assert (rounds, tests) == (5, 15), found["isolation"]["rounds"]
    else:
        assert rounds == 6 and tests >= 15 + noisy, found["isolation"]["rounds"]
    assert "round 1: single node1" in proc.stderr  # the rounds were printed as they went
    # the evidence: a failing test with node6 whose other members pass elsewhere, in the report
    evidence = culprits[0]["evidence"]
    assert any(not t["outcome"]["passed"] and "node6" in t["group"] for t in evidence)
    assert any(t["outcome"]["passed"] and "node6" not in t["group"] for t in evidence)
    report = (Path(found["run_dir"]) / "report.md").read_text()
    assert "**node node6**" in report and "efficiency" in report, report
    print(f"isolate after scale-test (node6 throttled): {rounds} rounds, {found['wall_s']:.1f} s")
    try:
        line = _node_line(lab8, "node6")
        assert "DRAIN" in line and f"orch {found['run_id']}:" in line, line
        assert found["drained"] == ["node6"]
        back = orch(lab8, "cert", "resume", "node6", "-i", str(lab8.inventory), "--size", "2M",
                    "--min-efficiency", "0.02", "--out", str(tmp_path / "r2"))  # fmt: skip
        assert back.returncode == 0, back.stdout + back.stderr
        assert "DRAIN" not in _node_line(lab8, "node6")
    finally:
        lab8.slurm("scontrol", "update", "nodename=node6", "state=resume", check=False)


def test_a_dropped_link_names_the_pair(lab8: Lab, tmp_path: Path) -> None:
    to = lab8.node("node5").fabric_address
    rule = ["OUTPUT", "-o", "fab0", "-d", to, "-j", "DROP"]
    ipt = ["ip", "netns", "exec", "orch-node2", "iptables", "-w", "5"]
    lab8.slurm(*ipt, "-I", *rule)
    try:
        # a test that holds the link hangs until gloo's timeout (the test's, less 5 s, at least 10
        # s: runs/executor.py's job_spec): 10 s here, the shortest orch gives. A round's deadline
        # (the test's timeout times its tests plus one: 30 s for one test, 45 s for two) is still
        # about twice what healthy sets took on the loaded lab (13-16 s alone, 25-28 s for two);
        # one that holds the link fails either way. With --timeout 20 (gloo 15 s) the 5 tests
        # that held the link took 21-28 s each, with 15 16-25 s.
        args = [*LOOSE, "--timeout", "15", "--out", str(tmp_path)]
        proc = orch(lab8, "isolate", "-i", str(lab8.inventory), *args, timeout=600)
    finally:
        lab8.slurm(*ipt, "-D", *rule, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = json.loads(_one(tmp_path, "*isolate*/isolation.json").read_text())
    culprits = found["isolation"]["culprits"]
    assert [(c["kind"], c["nodes"]) for c in culprits] == [("link", ["node2", "node5"])], proc.stdout
    assert found["isolation"]["undecided"] == []
    rounds = len(found["isolation"]["rounds"])
    tests = sum(len(r["trials"]) for r in found["isolation"]["rounds"])
    noisy = len(found["isolation"].get("unconfirmed", []))
    if noisy == 0:  # docs/isolation.md, as simulated (the confirmation included)
        assert (rounds, tests) == (8, 16), found["isolation"]["rounds"]
    else:  # a node failing alone by noise adds round 2 and its repeat
        assert rounds == 9 and tests >= 16 + noisy, found["isolation"]["rounds"]
    print(f"isolate (link node2->node5 dropped): {rounds} rounds, {found['wall_s']:.1f} s")


def test_check_quick_fails_only_on_the_drifted_node(lab8: Lab, tmp_path: Path) -> None:
    run = orch(lab8, "scale-test", "-i", str(lab8.inventory), "--plan", str(_plan(tmp_path)),
               "--out", str(tmp_path / "r"))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    issued = orch(lab8, "cert", "issue", str(_one(tmp_path / "r", "*iso8*")))
    assert issued.returncode == 0, issued.stdout + issued.stderr

    def checks(*nodes: str) -> dict[str, subprocess.CompletedProcess[str]]:
        """`orch check --quick` on each node, all at once (as a prolog runs on every node of a job
        at the same time; one after another they took 61 s of a CI run, at once 28 s)."""
        argv = [*ORCH, "check", "--quick", "-i", str(lab8.inventory), "--dir", str(tmp_path / "r")]
        procs = {
            node: subprocess.Popen(
                [*argv, node],
                env=lab8.env,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for node in nodes
        }
        done = {}
        for node, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            done[node] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        return done

    victim = lab8.node("node3")
    hidden = "/opt/orch/torch-dist-info.orch-test"
    assert checks(victim.name)[victim.name].returncode == 0
    lab8.ssh(victim, "mv", TORCH_META, hidden)
    try:
        found = checks(*(node.name for node in lab8.nodes))
        drifted = found.pop(victim.name)
        assert drifted.returncode == 1, drifted.stdout + drifted.stderr
        assert "torch" in drifted.stderr, drifted.stderr
        for node, ok in found.items():
            assert ok.returncode == 0, f"{node}: {ok.stdout}{ok.stderr}"
    finally:
        lab8.ssh(victim, "mv", hidden, TORCH_META, check=False)
    assert checks(victim.name)[victim.name].returncode == 0
