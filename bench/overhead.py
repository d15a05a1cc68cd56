"""bench/overhead.py — orch's wall time over the time Slurm spent running the ladder's steps.

Method: on the running virtual lab (`orch lab up`), the smoke ladder over 1, 2, 3 nodes (one rank
per node, steps one at a time) runs three ways in each round, in an order that rotates from round
to round, each after the lab is idle:

  * orch, allocation mode (`--slurm-mode allocation`, the default): one allocation of node1-3,
    one srun job step per ladder step. Denominator: the sum of the job steps' own ElapsedRaw
    (`sacct -j ALLOC -o JobID,State,ElapsedRaw` without -X, the ALLOC.K lines), not the
    allocation's, which would hold the gaps between steps and make the ratio 1.0 by construction.
  * orch, per-step mode (`--slurm-mode per-step`): one job per step, chained with afterany.
    Denominator: the sum of the jobs' ElapsedRaw (`sacct -X`).
  * ReFrame 4.10 (`pip install -e '.[bench]'`), serial policy, the same argv per step, one job per
    step (bench/reframe_compare.py generates its config and test). Denominator as per-step.

orch is timed through the pipeline API (inventory load, plan, fingerprint, submission, polling,
collection, verdict, store), ReFrame from spawn to exit (it has no API), each with a monotonic
clock. Rounding: ElapsedRaw is End - Start of two whole-second timestamps, so each step's figure
is off by less than 1 s either way (on average 0); a ladder of 3 steps of 2-8 s can move the sum
by up to 3 s, so each ratio is printed with the range it has if every step was 1 s longer or
shorter than recorded. The target is allocation mode <= 1.10. Never part of the pass/fail run.

Usage: .venv/bin/python bench/overhead.py [--inventory inventories/lab.ini] [--rounds 1]
       [--no-reframe]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _lab import elapsed_raw, load_note, slurm_env, step_elapsed_raw, wait_idle
from reframe_compare import VENV_BIN, RoundFailed, Timing, ladder_jobs, run_reframe

from orchestrator.inventory import load_inventory
from orchestrator.models.plan import PlanOverrides, SlurmMode
from orchestrator.pipeline import ScaleTestRequest, scale_test

TARGET = 1.10


# all_reduce busbw (GB/s) at the largest size, per orch mode and step, over the rounds: the two
# modes must give the same per-step figures within the spread of the rounds.
BUSBW: dict[str, dict[str, list[float]]] = {}


def run_orch(inventory: Path, nodes: str, mode: SlurmMode, work: Path, gpus: str = "1") -> Timing:
    """The smoke ladder through the pipeline API in `mode`, timed around the whole call."""
    req = ScaleTestRequest(
        inventory=inventory,
        plan="smoke",
        overrides=PlanOverrides(nodes=nodes, gpus_per_node=gpus, backend="slurm", slurm_mode=mode),
        out_dir=work / f"orch-{mode}",
    )
    t0 = time.monotonic()
    result = scale_test(req)
    wall = time.monotonic() - t0
    if result.status != "accepted":
        raise RoundFailed(f"orch {mode} ended {result.status}")
    print(f"  orch {mode}: where the wall went: {breakdown(result.run_dir / 'journal.jsonl', t0)}")
    for st in result.steps:
        if "all_reduce" in st.summary:
            BUSBW.setdefault(mode, {}).setdefault(st.step.id, []).append(st.summary["all_reduce"].busbw_gbs)
    return Timing(f"orch {mode}", wall, [s.job_id for s in result.steps if s.job_id], {})


def breakdown(journal: Path, t0: float) -> str:
    """Seconds from the call to the first submission, to the first step RUNNING, between each
    step's end and the next one's start (orch's own view, 0.5 s polls), and after the last."""
    evs = [json.loads(line) for line in journal.read_text().splitlines()]
    first = lambda kind, **kw: next(  # noqa: E731
        (e["mono"] for e in evs if e["event"] == kind and all(e.get(k) == v for k, v in kw.items())),
        float("nan"),  # a step shorter than one poll may never be seen RUNNING
    )
    steps = [e["step"] for e in evs if e["event"] == "step_submitted"]
    parts = [f"before submit {first('step_submitted') - t0:.2f}"]
    started = first("step_state", step=steps[0], state="RUNNING")
    parts.append(f"to first RUNNING {started - first('step_submitted'):.2f}")
    gaps = [
        first("step_state", step=b, state="RUNNING") - first("step_done", step=a)
        for a, b in itertools.pairwise(steps)
    ]
    parts.append("between steps " + "+".join(f"{g:.2f}" for g in gaps))
    parts.append(f"after the last {first('run_finished') - first('step_done', step=steps[-1]):.2f}")
    return "; ".join(parts)


def describe(t: Timing) -> str:
    n = len(t.job_ids)
    lo = t.wall_s / (t.jobs_s + n) if t.jobs_s else float("inf")
    hi = t.wall_s / (t.jobs_s - n) if t.jobs_s > n else float("inf")
    steps = "+".join(str(t.elapsed.get(j, "?")) for j in t.job_ids)
    return (f"{t.tool:20s} wall {t.wall_s:6.2f} s  steps {steps} = {t.jobs_s} s  "
            f"wall/sum {t.overhead:.3f} (±1 s per step: {lo:.3f}-{hi:.3f})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--inventory", type=Path, default=Path("inventories/lab.ini"))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--nodes", default="1..3", help="the ladder (make bench provisions node1-node3)")
    ap.add_argument("--gpus-per-node", default="1", help="ranks per node, e.g. 1,2 (ReFrame: 1 only)")
    ap.add_argument("--no-reframe", action="store_true", help="orch's two modes only")
    args = ap.parse_args()
    with_reframe = not args.no_reframe and args.gpus_per_node == "1" and (VENV_BIN / "reframe").exists()
    if not args.no_reframe and not with_reframe:
        print("reframe is not installed in this venv (pip install -e '.[bench]'): orch's modes only")
    cluster = load_inventory(args.inventory)
    env = slurm_env(cluster)
    tools = ["orch allocation", "orch per-step", *(["reframe"] if with_reframe else [])]
    got: dict[str, list[Timing]] = {t: [] for t in tools}
    for r in range(args.rounds):
        order = tools[r % len(tools) :] + tools[: r % len(tools)]
        with tempfile.TemporaryDirectory(prefix="orch-overhead-") as tmp:
            work = Path(tmp)
            for tool in order:
                wait_idle([n.name for n in cluster.nodes], env)
                try:
                    if tool == "reframe":
                        t = run_reframe(ladder_jobs(args.inventory, args.nodes), env, work)
                    else:
                        mode: SlurmMode = "allocation" if "alloc" in tool else "per-step"
                        t = run_orch(args.inventory, args.nodes, mode, work, args.gpus_per_node)
                except RoundFailed as e:
                    sys.exit(f"round {r + 1}, {tool}: {e}")
                time.sleep(1.0)  # let slurmdbd record the last step's end
                steps = tool == "orch allocation"
                t.elapsed = step_elapsed_raw(t.job_ids, env) if steps else elapsed_raw(t.job_ids, env)
                got[tool].append(t)
                print(f"round {r + 1}: {describe(t)}", flush=True)
        print(f"round {r + 1}: order {', '.join(order)}; {load_note()}")
    print("overhead wall / sum of Slurm elapsed (median over rounds; pooled: sum of walls / sum of sums):")
    for tool in tools:
        med = statistics.median(t.overhead for t in got[tool])
        pooled = sum(t.wall_s for t in got[tool]) / max(1, sum(t.jobs_s for t in got[tool]))
        note = (
            f"  target <= {TARGET}: " + ("met" if med <= TARGET else "NOT met")
            if tool == "orch allocation"
            else ""
        )
        print(f"  {tool:16s} {med:.3f} (pooled {pooled:.3f}){note}")
    print("all_reduce busbw at the largest size, GB/s (median, min-max over rounds):")
    for step in BUSBW.get("per-step", {}):
        cells = []
        for mode in ("allocation", "per-step"):
            v = BUSBW.get(mode, {}).get(step, [])
            cells.append(
                f"{mode} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" if v else f"{mode} -"
            )
        print(f"  {step}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
