"""bench/overhead.py — orch's wall time over the time Slurm spent running the ladder's steps.

Method: on the running virtual lab (`orch lab up`), the smoke ladder over 1, 2, 3 nodes (one rank
per node, steps one at a time) runs three ways in each round, in an order that rotates from round
to round, each after the lab is idle:

  * orch, allocation mode (`--slurm-mode allocation`, the default), timed two ways: warm, through
    the pipeline API inside this process (no CLI start-up: Python, typer, the imports), and from
    spawn to exit of `orch scale-test` as a child process, as ReFrame is timed (everything a user
    waits for). The target is held against the figure from spawn. One allocation of node1-3
    (`salloc --no-shell`, asked for before the stack's fingerprint), one srun job step per ladder
    step, each started by orch when the previous one exits. Denominator: the sum of the job
    steps' own ElapsedRaw (`sacct -j ALLOC -o JobID,State,ElapsedRaw` without -X, the ALLOC.K
    lines), not the allocation's, which would hold the gaps between steps and make the ratio 1.0
    by construction.
  * orch, allocation-batch mode (`--slurm-mode allocation-batch`; --no-batch leaves it out): the
    same allocation as an sbatch'd driver that runs the same sruns. Denominator as allocation.
  * orch, per-step mode (`--slurm-mode per-step`): one job per step, chained with afterany.
    Denominator: the sum of the jobs' ElapsedRaw (`sacct -X`).
  * ReFrame 4.10 (`pip install -e '.[bench]'`), serial policy, the same argv per step, one job per
    step (bench/reframe_compare.py generates its config and test). Denominator as per-step.

orch's warm figures are timed through the pipeline API (inventory load, plan, fingerprint,
submission, polling, collection, verdict, store); orch's allocation mode "from spawn" and ReFrame
are timed from spawn to exit of their CLI; each with a monotonic clock. Rounding: ElapsedRaw is End
- Start of two whole-second timestamps, so each step's figure is off by less than 1 s either way (on
average 0); a ladder of 3 steps of 2-8 s can move the sum by up to 3 s, so each ratio is printed
with the range it has if every step was 1 s longer or shorter than recorded. The target is
allocation mode from spawn <= 1.10 (the warm figure is printed beside it). Never part of the
pass/fail run.

Where Slurm's logs can be read (the lab's, named in its slurm.conf), two more figures: each tool's
wall over the time its sruns ran (each step's first task launched -> its last task done, in ms),
the same measure in every mode, since a per-step job's elapsed also holds Slurm's batch launch and
its batch script; and for allocation mode, where the wall went (alloc_breakdown).

`--startup-only` needs no lab: it times `orch --version` and `orch scale-test --help` from spawn
to exit (the CLI start-up that the warm figure leaves out) and stops.

Usage: .venv/bin/python bench/overhead.py [--inventory inventories/lab.ini] [--rounds 1]
       [--no-reframe] [--no-batch] [--startup-only]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import cast

from _lab import elapsed_raw, load_note, slurm_env, step_elapsed_raw, wait_idle
from reframe_compare import VENV_BIN, RoundFailed, Timing, ladder_jobs, run_reframe
from reframe_compare import run_orch as run_orch_spawned

from orchestrator.inventory import load_inventory
from orchestrator.models.plan import PlanOverrides, SlurmMode
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.runs.scale_test import scale_test

TARGET = 1.10
# The tool name of allocation mode timed from spawn to exit of `orch scale-test` (the target's figure).
SPAWNED = "orch allocation, from spawn"


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
    t0, t0_wall = time.monotonic(), time.time()
    result = scale_test(req)
    wall = time.monotonic() - t0
    t1_wall = time.time()
    if result.status != "accepted":
        raise RoundFailed(f"orch {mode} ended {result.status}")
    print(f"  orch {mode}: where the wall went: {breakdown(result.run_dir / 'journal.jsonl', t0)}")
    if mode.startswith("allocation") and (logs := slurm_logs(inventory)) is not None:
        alloc = next(s.job_id for s in result.steps if s.job_id).partition(".")[0]
        try:
            parts = alloc_breakdown(result.run_dir / "journal.jsonl", alloc, logs, t0_wall, t1_wall)
        except (StopIteration, KeyError, IndexError) as e:  # a line missing from Slurm's logs
            print(f"  orch {mode}: no breakdown ({type(e).__name__} {e})")
        else:
            PARTS.setdefault(mode, []).append(parts)
            print(f"  orch {mode}, from the journal and Slurm's logs (ms): "
                  + "; ".join(f"{k} {v:.3f}" for k, v in parts.items()))  # fmt: skip
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


# The allocation modes' breakdown per round (alloc_breakdown), for the summary.
PARTS: dict[str, list[dict[str, float]]] = {}
_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$")


def slurm_logs(inventory: Path) -> list[Path] | None:
    """slurmctld's and every slurmd's log file, named in the cluster's slurm.conf (the lab's are
    under its state dir); None when they cannot be read (then only the journal's view is shown)."""
    conf = load_inventory(inventory).vars.orch_slurm_conf
    if conf is None or not conf.exists():
        return None
    keys = dict(
        line.split("=", 1)
        for line in conf.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    ctl, slurmd = keys.get("SlurmctldLogFile"), keys.get("SlurmdLogFile")
    if not ctl or not slurmd:
        return None
    files = [Path(ctl), *sorted(Path(slurmd).parent.glob(Path(slurmd).name.replace("%n", "*")))]
    return files if all(f.exists() for f in files) else None


LOG_SLACK_S = 5.0
"""Lines this long before a run's start still count (the clocks of orch and Slurm's log agree)."""


def _log_events(files: list[Path], alloc: str, since: float) -> list[tuple[float, str]]:
    """(epoch seconds, message) of the log lines about this allocation written since the run
    started (less LOG_SLACK_S), in time order (Slurm's logs carry milliseconds in the machine's
    local time). A lab's logs outlive it and a new lab numbers its jobs from 1 again: without the
    start, job 3 of an earlier lab was read as this one (steps of 26,233 s, seen)."""
    marks = (f"JobId={alloc} ", f"batch job {alloc} ", f"StepId={alloc}.", f"[{alloc}.")
    out = []
    for f in files:
        for line in f.read_text(errors="replace").splitlines():
            m = _LOG_TIME.match(line)
            if m and any(k in m.group(2) for k in marks):
                ts = datetime.fromisoformat(m.group(1)).timestamp()
                if ts >= since - LOG_SLACK_S:
                    out.append((ts, m.group(2)))
    return sorted(out)


def srun_seconds(files: list[Path], job_ids: list[str], since: float) -> float | None:
    """The time the jobs' srun steps ran, summed, from Slurm's logs (ms): for each numbered step,
    its first task launched -> its last task done. The same measure in every mode (a ladder step's
    srun, whether it is a job's step 0 or one of the allocation's steps), without the whole-second
    rounding of ElapsedRaw and without what a per-step job's elapsed holds besides its srun (Slurm's
    batch launch, the batch script). None when a step's launch or end is not in the logs."""
    total = 0.0
    for job in dict.fromkeys(j.partition(".")[0] for j in job_ids):
        launches: dict[int, float] = {}
        ends: dict[int, float] = {}
        for ts, msg in _log_events(files, job, since):
            if m := re.search(rf"StepId={job}\.(\d+) ", msg):
                launches.setdefault(int(m.group(1)), ts)
            elif m := re.match(rf"\[{job}\.(\d+)\] done with job", msg):
                ends[int(m.group(1))] = ts
        if not launches or set(launches) != set(ends):
            return None
        total += sum(ends[k] - launches[k] for k in launches)
    return total


# wall / srun_seconds per tool, over the rounds (when Slurm's logs can be read).
ON_SRUN: dict[str, list[float]] = {}


def alloc_breakdown(journal: Path, alloc: str, logs: list[Path], t0: float, t1: float) -> dict[str, float]:
    """Where an allocation-mode run's wall went, in seconds, from orch's journal (wall clock, µs)
    and Slurm's own logs (ms): orch before it asks Slurm (inventory, plan, checks; in
    allocation-batch mode also the stack's fingerprint over SSH), Slurm's scheduling (the salloc's
    or sbatch's RPC -> the allocation), the allocation -> the first step launched (allocation mode:
    whatever is left of the fingerprint, then orch's first srun; allocation-batch: Slurm's batch
    launch, then the driver's first srun), the steps (first launch to the last task's end), the
    gaps between steps (one step's last task done -> the next step's first launch, summed), orch
    noticing the end (the last step's end -> its COMPLETED in the journal: allocation mode wakes
    on the srun's exit, then sacct; allocation-batch polls every 0.5 s), and orch's finish
    (judging, result, store, releasing the allocation). The fingerprint's own time (journal) is
    given beside: in allocation mode it runs while Slurm schedules."""
    evs = [json.loads(line) for line in journal.read_text().splitlines()]
    t = {e["event"]: datetime.fromisoformat(e["t"]).timestamp() for e in reversed(evs)}  # first of each
    last_state = max(datetime.fromisoformat(e["t"]).timestamp() for e in evs if e["event"] == "step_state")
    log = _log_events(logs, alloc, t0)
    first = lambda *words: next(ts for ts, msg in log if any(w in msg for w in words))  # noqa: E731
    submit = first("_slurm_rpc_submit_batch_job", "_slurm_rpc_allocate_resources")
    # A job allocated by the RPC itself says so there (NodeList=...); a queued one at sched: Allocate.
    rpc = "_slurm_rpc_allocate_resources"
    allocate = next(
        ts for ts, msg in log if "sched: Allocate" in msg or (rpc in msg and "NodeList=(null)" not in msg)
    )
    launches: dict[int, float] = {}
    ends: dict[int, float] = {}
    for ts, msg in log:
        if m := re.search(rf"StepId={alloc}\.(\d+) ", msg):
            launches.setdefault(int(m.group(1)), ts)
        elif m := re.match(rf"\[{alloc}\.(\d+)\] done with job", msg):
            ends[int(m.group(1))] = ts  # the step's last task on its last node
    steps = sorted(launches)
    gaps = sum(launches[b] - ends[a] for a, b in itertools.pairwise(steps))
    return {
        "orch before Slurm": submit - t0,
        "fingerprint (journal)": t["fingerprint"] - t["run_started"] if "fingerprint" in t else 0.0,
        "Slurm scheduling": allocate - submit,
        "allocated to 1st launch": launches[steps[0]] - allocate,
        "steps": ends[steps[-1]] - launches[steps[0]] - gaps,
        "gaps between steps": gaps,
        "orch notices the end": last_state - ends[steps[-1]],
        "orch finish": t1 - last_state,
        "wall": t1 - t0,
    }


def cli_startup(rounds: int = 5) -> dict[str, list[float]]:
    """Seconds from spawn to exit of the orch CLI doing no work (needs no lab): the start-up that a
    run timed in this process leaves out and a run timed from spawn holds."""
    out: dict[str, list[float]] = {}
    for argv in (["--version"], ["scale-test", "--help"]):
        for _ in range(rounds):
            t0 = time.monotonic()
            subprocess.run([str(VENV_BIN / "orch"), *argv], capture_output=True, check=True, timeout=120)
            out.setdefault(" ".join(["orch", *argv]), []).append(time.monotonic() - t0)
    return out


def describe(t: Timing) -> str:
    n = len(t.job_ids)
    lo = t.wall_s / (t.jobs_s + n) if t.jobs_s else float("inf")
    hi = t.wall_s / (t.jobs_s - n) if t.jobs_s > n else float("inf")
    steps = "+".join(str(t.elapsed.get(j, "?")) for j in t.job_ids)
    return (f"{t.tool:20s} wall {t.wall_s:6.2f} s  steps {steps} = {t.jobs_s} s  "
            f"wall/sum {t.overhead:.3f} (±1 s per step: {lo:.3f}-{hi:.3f})")  # fmt: skip


WARM = "orch allocation"  # allocation mode through the pipeline API in this process (no CLI start-up)


def summary_lines(got: dict[str, list[Timing]]) -> list[str]:
    """The summary over the rounds: per way, the median of wall / Σ steps' elapsed and the pooled
    ratio (Σ walls / Σ sums); the target judged on allocation mode from spawn only; then allocation
    mode both ways on one line (each '-' when that way did not run)."""
    lines = ["overhead wall / sum of Slurm elapsed (median over rounds; pooled: sum of walls / sum of sums):"]
    med: dict[str, float] = {}
    for tool, timings in got.items():
        if not timings:
            continue
        med[tool] = statistics.median(t.overhead for t in timings)
        pooled = sum(t.wall_s for t in timings) / max(1, sum(t.jobs_s for t in timings))
        met = "met" if med[tool] <= TARGET else "NOT met"
        note = f"  target <= {TARGET}: {met}" if tool == SPAWNED else ""
        lines.append(f"  {tool:26s} {med[tool]:.3f} (pooled {pooled:.3f}){note}")
    warm, spawned = (f"{med[k]:.3f}" if k in med else "-" for k in (WARM, SPAWNED))
    lines.append(f"allocation mode both ways: warm (in this process, no CLI start-up) {warm}; "
                 f"from spawn (the target's figure) {spawned}")  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--inventory", type=Path, default=Path("inventories/lab.ini"))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--nodes", default="1..3", help="the ladder (make bench provisions node1-node3)")
    ap.add_argument("--gpus-per-node", default="1", help="ranks per node, e.g. 1,2 (ReFrame: 1 only)")
    ap.add_argument("--no-reframe", action="store_true", help="orch's modes only")
    ap.add_argument("--no-batch", action="store_true", help="without orch's allocation-batch mode")
    ap.add_argument("--startup-only", action="store_true", help="time the CLI's start-up only (no lab)")
    args = ap.parse_args()
    startup = cli_startup()
    print("orch CLI start-up, spawn to exit (s, median and min-max of 5; no lab):")
    for argv, v in startup.items():
        print(f"  {argv:24s} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})")
    if args.startup_only:
        return
    with_reframe = not args.no_reframe and args.gpus_per_node == "1" and (VENV_BIN / "reframe").exists()
    if not args.no_reframe and not with_reframe:
        print("reframe is not installed in this venv (pip install -e '.[bench]'): orch's modes only")
    cluster = load_inventory(args.inventory)
    env = slurm_env(cluster)
    logs = slurm_logs(args.inventory)
    tools = [
        WARM,
        SPAWNED,
        *([] if args.no_batch else ["orch allocation-batch"]),
        "orch per-step",
        *(["reframe"] if with_reframe else []),
    ]
    got: dict[str, list[Timing]] = {t: [] for t in tools}
    for r in range(args.rounds):
        order = tools[r % len(tools) :] + tools[: r % len(tools)]
        with tempfile.TemporaryDirectory(prefix="orch-overhead-") as tmp:
            work = Path(tmp)
            for tool in order:
                wait_idle([n.name for n in cluster.nodes], env)
                started = time.time()
                try:
                    if tool == "reframe":
                        t = run_reframe(ladder_jobs(args.inventory, args.nodes), env, work)
                    elif tool == SPAWNED:
                        t = run_orch_spawned(args.inventory, args.nodes, env, work, "allocation",
                                             args.gpus_per_node, SPAWNED)  # fmt: skip
                    else:
                        mode = cast(SlurmMode, tool.removeprefix("orch "))
                        t = run_orch(args.inventory, args.nodes, mode, work, args.gpus_per_node)
                except RoundFailed as e:
                    sys.exit(f"round {r + 1}, {tool}: {e}")
                time.sleep(1.0)  # let slurmdbd record the last step's end
                steps = tool.startswith("orch allocation")
                t.elapsed = step_elapsed_raw(t.job_ids, env) if steps else elapsed_raw(t.job_ids, env)
                got[tool].append(t)
                print(f"round {r + 1}: {describe(t)}", flush=True)
                if logs is not None and (srun := srun_seconds(logs, t.job_ids, started)):
                    ON_SRUN.setdefault(tool, []).append(t.wall_s / srun)
                    print(f"round {r + 1}: {tool:20s} srun steps {srun:.3f} s (Slurm's logs), "
                          f"wall / srun steps {t.wall_s / srun:.3f}", flush=True)  # fmt: skip
        print(f"round {r + 1}: order {', '.join(order)}; {load_note()}")
    if ON_SRUN:
        print("wall / time the srun steps ran (Slurm's logs, ms; the same measure in every mode):")
        for tool, v in ON_SRUN.items():
            print(f"  {tool:26s} {statistics.median(v):.3f} (min-max {min(v):.3f}-{max(v):.3f}, n={len(v)})")
    print("\n".join(summary_lines(got)))
    for kind, parts in PARTS.items():
        print(f"orch {kind}, where the wall went (seconds, median and min-max over {len(parts)} rounds):")
        for key in parts[0]:
            v = [p[key] for p in parts]
            print(f"  {key:24s} {statistics.median(v):7.3f} ({min(v):.3f}-{max(v):.3f})")
    print("all_reduce busbw at the largest size, GB/s (median, min-max over rounds):")
    for step in BUSBW.get("per-step", {}):
        cells = []
        for mode in ("allocation", "allocation-batch", "per-step"):
            v = BUSBW.get(mode, {}).get(step, [])
            cells.append(
                f"{mode} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" if v else f"{mode} -"
            )
        print(f"  {step}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
