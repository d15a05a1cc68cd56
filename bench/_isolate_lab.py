"""The 8-node lab figures of bench/isolate.py: isolation's wall time against testing every pair.

Not a bench of its own (`make bench` skips files starting with _): bench/isolate.py calls
`lab_figures()`. It needs a running lab of at least 8 nodes (the first 8 are used; they get the
cpu-gloo stack first: seconds when they have it) and takes about 10 minutes on 2 cores:

- clean: `orch isolate` (run_isolation, the real thing) on node1..node8, `clean_runs` times; each run
  should name no culprit;
- throttled: a 20 mbit tbf throttle on node6's fab0 (`orch fault inject`, reverted at the end and by
  its node-side timer), then one isolation (culprits, rounds, tests, wall time) and the baseline:
  every one of the 28 pairs tested, one after another, through the same executor and pass rule
  (runs/isolate.py's round runner) -- which pairs fail and how long that takes.

The rounds run sequentially (the lab's nodes share 2 cores), so wall time here is the sum of the
tests' times, Slurm's start of each job included; on a real cluster a round's tests run at once.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.inventory import load_inventory
from orchestrator.lab.config import DEFAULT_STATE_DIR
from orchestrator.models.events import RunStarted
from orchestrator.models.requests import IsolateRequest
from orchestrator.runs.isolate import _Rounds, isolation_plan, partition_nodes, run_isolation
from orchestrator.runs.lifecycle import Ending, RunLifecycle
from orchestrator.stacks import stack_name, stack_python
from orchestrator.store.rundir import new_run_id

ORCH = [sys.executable, "-m", "orchestrator"]
# The lab's pass rule (its nodes share 2 cores: about 30 % noise run to run), as the lab tests use.
RULE: dict[str, Any] = {
    "size": 2 * 2**20,
    "iters": 3,
    "timeout_s": 30,
    "tolerance": 0.7,
    "min_efficiency": 0.02,
}
# The rule of tests/integration/test_isolate8_lab.py (LOOSE): the CLI's tolerance (0.2) and noise band.
LAB_TEST_RULE: dict[str, Any] = {"size": 2 * 2**20, "iters": 3, "timeout_s": 30, "min_efficiency": 0.02}


def _env(inventory: Path) -> dict[str, str]:
    conf = load_inventory(inventory).vars.orch_slurm_conf
    return {**os.environ, **({"SLURM_CONF": str(conf)} if conf else {})}


def _tc(node: str) -> str:
    argv = ["ip", "netns", "exec", f"orch-{node}", "tc", "qdisc", "show", "dev", "fab0"]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30).stdout


def all_pairs(req: IsolateRequest, singles: list[float]) -> dict[str, Any]:
    """Every pair of req.nodes tested once, one after another, as isolate tests them (same plan,
    executor and pass rule), in a run folder of its own; the failing pairs and the wall time.
    singles: the single-node busbw figures a group is judged against (isolation measures them
    first; here they come from the clean isolation runs)."""
    t0 = time.monotonic()
    cluster = load_inventory(req.inventory)
    plan = isolation_plan(req)
    nodes = req.nodes or [n.name for n in cluster.nodes]
    pairs = list(itertools.combinations(nodes, 2))
    python, env = stack_python(stack_name(None, plan, cluster))
    with RunLifecycle.create(req.out_dir, new_run_id("allpairs"), [], t0=t0) as life:
        life.write_inputs(plan=plan, inventory=cluster, request=req)
        life.started(
            RunStarted(run_id=life.run_id, run_dir=life.root, plan=plan.name, backend="slurm", steps=[]),
            kind="isolate",
            nodes=nodes,
            mode="sequential",
        )
        parts = partition_nodes(cluster, nodes, [])
        runner = _Rounds(req, plan, cluster, life, python or sys.executable, env, lambda _r: None, parts)
        runner.singles = {p.label: list(singles) for p in parts}
        outcomes = runner(pairs)
        wall = life.wall_s
        life.finish(Ending("accepted", 0), wall_s=wall)
    failed = [list(p) for p, o in zip(pairs, outcomes, strict=True) if not o.passed]
    return {"tests": len(pairs), "failed_pairs": failed, "wall_s": round(wall, 1), "run_dir": str(life.root)}


def _isolation(req: IsolateRequest) -> dict[str, Any]:
    r = run_isolation(req)
    iso = r.isolation
    return {
        "culprits": [{"kind": c.kind, "nodes": c.nodes} for c in iso.culprits],
        "undecided": iso.undecided,
        "rounds": len(iso.rounds),
        "tests": sum(len(x.trials) for x in iso.rounds),
        "wall_s": round(r.wall_s, 1),
        "reference_gbs": r.reference_gbs,
        "run_dir": str(r.run_dir),
    }


def _lab_nodes(inventory: Path, n: int, out_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The lab's first n nodes, given the cpu-gloo stack (seconds when they have it), and the
    environment that reaches its Slurm. Raises RuntimeError when the lab has fewer or provisioning
    fails."""
    cluster = load_inventory(inventory)
    if len(cluster.nodes) < n:
        raise RuntimeError(f"the lab has {len(cluster.nodes)} nodes; these figures need {n}")
    nodes = [x.name for x in cluster.nodes[:n]]
    env = _env(inventory)
    prov = subprocess.run(
        [*ORCH, "provision", "-i", str(inventory), "--stack", "cpu-gloo", "--limit", ",".join(nodes),
         "--out", str(out_dir)],
        capture_output=True, text=True, env=env, timeout=1200, check=False,
    )  # fmt: skip
    if prov.returncode != 0:
        raise RuntimeError(f"provisioning failed: {prov.stdout[-2000:]}{prov.stderr[-2000:]}")
    return nodes, env


class _Throttle:
    """`orch fault inject --kind throttle` on NODE's fab0 for the block, reverted at its end (SIGTERM
    to the CLI, which reverts; its node-side timer reverts anyway)."""

    def __init__(
        self, inventory: Path, node: str, rate: str, runs: Path, env: dict[str, str], duration: str = "1800s"
    ) -> None:
        self.argv = [*ORCH, "fault", "inject", "-i", str(inventory), "--kind", "throttle", "--target",
                     f"{node}:fab0", "--rate", rate, "--duration", duration, "--runs", str(runs)]  # fmt: skip
        self.node, self.env = node, env
        self.before = ""
        self.reverted = False

    def __enter__(self) -> _Throttle:
        self.before = _tc(self.node)
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)  # fmt: skip
        deadline = time.monotonic() + 60
        while "tbf" not in _tc(self.node) and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.5)
        if "tbf" not in _tc(self.node):
            self.__exit__()
            raise RuntimeError(f"the throttle on {self.node} did not land")
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.communicate(timeout=60)
        self.reverted = _tc(self.node) == self.before


def _round_walls(run_dir: Path) -> dict[int, float]:
    """Each round's wall, started to judged, from the run's journal."""
    started: dict[int, float] = {}
    walls: dict[int, float] = {}
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev.get("event") == "isolation_round_started":
            started[ev["round"]] = ev["mono"]
        elif ev.get("event") == "isolation_round" and ev["round"] in started:
            walls[ev["round"]] = ev["mono"] - started[ev["round"]]
    return walls


def loaded_runs(
    inventory: Path = DEFAULT_STATE_DIR / "lab.ini",
    out_dir: Path = Path("/tmp/orch-bench-runs"),
    *,
    runs: int = 5,
    n: int = 8,
    bad: str = "node6",
    rate: str = "40mbit",
) -> dict[str, Any]:
    """Issue 26's must-show: `orch isolate` (run_isolation, the CLI's one rule, the 8-node lab test's
    settings) on node1..nodeN with BAD's fabric throttled, `runs` times, while one busy process per
    core (started here, ended by PID) loads the machine. Per run: culprits, unconfirmed suspects
    with both figures, rounds and tests, and what the confirmation added (its rounds: those whose
    every test is a repeat, and their wall)."""
    nodes, env = _lab_nodes(inventory, n, out_dir)
    rule = {**LAB_TEST_RULE}
    req = IsolateRequest(inventory=inventory, nodes=nodes, out_dir=out_dir, **rule)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    out: list[dict[str, Any]] = []
    try:
        with _Throttle(inventory, bad, rate, out_dir / "faults", env) as throttle:
            for _ in range(runs):
                r = run_isolation(req)
                iso = r.isolation
                walls = _round_walls(r.run_dir)
                confirm = [x.index for x in iso.rounds if all(t.purpose == "confirm" for t in x.trials)]
                named = [(c.kind, c.nodes) for c in iso.culprits]
                out.append({
                    "right": named == [("node", [bad])] and not iso.undecided,
                    "culprits": [{"kind": k, "nodes": v} for k, v in named],
                    "unconfirmed": [
                        {"nodes": u.nodes, "first": u.first.outcome.figure, "repeat": u.repeat.outcome.figure}
                        for u in iso.unconfirmed
                    ],
                    "rounds": len(iso.rounds),
                    "tests": sum(len(x.trials) for x in iso.rounds),
                    "confirm_rounds": confirm,
                    "confirm_wall_s": round(sum(walls.get(i, 0.0) for i in confirm), 1),
                    "wall_s": round(r.wall_s, 1),
                    "reference_gbs": r.reference_gbs,
                    "run_dir": str(r.run_dir),
                })  # fmt: skip
                print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait(timeout=10)
    return {
        "nodes": n, "bad": bad, "rate": rate, "busy_processes": len(busy), "rule": rule, "runs": out,
        "right": sum(1 for r in out if r["right"]), "throttle_reverted": throttle.reverted,
    }  # fmt: skip


def lab_figures(
    inventory: Path = DEFAULT_STATE_DIR / "lab.ini",
    out_dir: Path = Path("/tmp/orch-bench-runs"),
    *,
    n: int = 8,
    bad: str = "node6",
    rate: str = "20mbit",
    clean_runs: int = 5,
    pairs: bool = True,
) -> dict[str, Any]:
    """The lab figures (see the module doc) as a JSON-ready dict. Raises RuntimeError when the
    lab has fewer than n nodes, provisioning fails or the throttle does not land."""
    nodes, env = _lab_nodes(inventory, n, out_dir)
    req = IsolateRequest(inventory=inventory, nodes=nodes, out_dir=out_dir, **RULE)
    clean = [_isolation(req) for _ in range(clean_runs)]
    figures: dict[str, Any] = {
        "nodes": n,
        "mode": "sequential",
        "rule": RULE,
        "clean": {
            "runs": clean_runs,
            "no_culprit": sum(1 for c in clean if not c["culprits"] and not c["undecided"]),
            "rounds": [c["rounds"] for c in clean],
            "tests": [c["tests"] for c in clean],
            "wall_s": [c["wall_s"] for c in clean],
        },
    }
    with _Throttle(inventory, bad, rate, out_dir / "faults", env, duration="900s") as throttle:
        figures["throttled"] = {"node": bad, "rate": rate, **_isolation(req)}
        if pairs:
            figures["all_pairs"] = all_pairs(req, [c["reference_gbs"] for c in clean if c["reference_gbs"]])
    figures["throttle_reverted"] = throttle.reverted
    return figures


if __name__ == "__main__":
    print(json.dumps(lab_figures(), indent=2))
