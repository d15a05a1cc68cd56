"""Helpers shared by the bench scripts (not a bench: `make bench` skips files starting with _).

The lab is shared with other engineers' tests: a bench waits, bounded, until the nodes it needs
are idle in Slurm and no job is queued, so that its figures are not other people's load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from orchestrator.models.cluster import Cluster


def slurm_env(cluster: Cluster) -> dict[str, str]:
    """This process's environment with the cluster's SLURM_CONF."""
    conf = cluster.vars.orch_slurm_conf
    return {**os.environ, **({"SLURM_CONF": str(conf)} if conf else {})}


def elapsed_raw(job_ids: list[str], env: dict[str, str]) -> dict[str, int]:
    """Slurm's own ElapsedRaw of each finished job (whole seconds), retried until all are recorded."""
    out: dict[str, int] = {}
    for _ in range(20):
        text = subprocess.run(
            ["sacct", "-X", "--parsable2", "--noheader", "-o", "JobID,State,ElapsedRaw",
             "-j", ",".join(job_ids)],
            capture_output=True, text=True, check=True, env=env, timeout=30,
        ).stdout  # fmt: skip
        rows = [line.split("|") for line in text.splitlines() if line.count("|") == 2]
        out = {jid: int(raw) for jid, state, raw in rows if state not in ("RUNNING", "PENDING")}
        if all(j in out for j in job_ids):
            break
        time.sleep(0.5)
    return out


def step_elapsed_raw(step_ids: list[str], env: dict[str, str]) -> dict[str, int]:
    """ElapsedRaw of each finished job step (ALLOC.K, allocation mode), from sacct's step lines
    (no -X); whole seconds as Slurm records them. Retried until all are recorded."""
    allocs = sorted({s.partition(".")[0] for s in step_ids})
    out: dict[str, int] = {}
    for _ in range(20):
        text = subprocess.run(
            ["sacct", "--parsable2", "--noheader", "-o", "JobID,State,ElapsedRaw", "-j", ",".join(allocs)],
            capture_output=True, text=True, check=True, env=env, timeout=30,
        ).stdout  # fmt: skip
        rows = [line.split("|") for line in text.splitlines() if line.count("|") == 2]
        out = {
            jid: int(raw)
            for jid, state, raw in rows
            if jid in step_ids and state not in ("RUNNING", "PENDING")
        }
        if all(s in out for s in step_ids):
            break
        time.sleep(0.5)
    return out


def wait_idle(nodes: list[str], env: dict[str, str], timeout_s: float = 600.0) -> None:
    """Wait until every node is idle in Slurm and the queue is empty; exit with a message if the
    lab stays busy (another engineer's test holds it) longer than timeout_s."""
    deadline = time.monotonic() + timeout_s
    said = False
    while True:
        sinfo = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T", "-n", ",".join(nodes)],
            capture_output=True, text=True, env=env, timeout=30,
        ).stdout  # fmt: skip
        states = dict(line.split() for line in sinfo.splitlines() if len(line.split()) == 2)
        queue = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=env,
                               timeout=30).stdout.split()  # fmt: skip
        if all(states.get(n) == "idle" for n in nodes) and not queue:
            return
        if time.monotonic() > deadline:
            sys.exit(f"lab busy for {timeout_s:.0f} s: nodes {states}, queued jobs {queue}")
        if not said:
            print(f"waiting for an idle lab: nodes {states}, queued jobs {queue}", flush=True)
            said = True
        time.sleep(2.0)



def load_note() -> str:
    """The machine's load average, printed with every figure: the lab's cores are shared."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"
