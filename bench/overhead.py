"""bench/overhead.py — orch's wall time over the sum of the Slurm jobs' elapsed times.

Method: on the running virtual lab (`orch lab up`), run the smoke ladder over 1, 2, 3 nodes (one
rank per node, steps one at a time, as `orch scale-test` does by default) through the pipeline
API, timing the whole call (inventory load, plan, submission, polling, collection, verdict) with
a monotonic clock. Then ask sacct for each job's ElapsedRaw (whole seconds, Slurm's own measure)
and print wall / sum(elapsed). The target is <= 1.10; ReFrame 4.10 measured 1.36 on such a lab.
orch submits the whole ladder up front, chained with afterany dependencies, so no polling gap
falls between steps. Never part of the pass/fail test run.

Usage: .venv/bin/python bench/overhead.py [--inventory inventories/lab.ini] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.inventory import load_inventory
from orchestrator.models.plan import PlanOverrides
from orchestrator.pipeline import ScaleTestRequest, scale_test


def elapsed_raw(job_ids: list[str], slurm_conf: Path | None) -> dict[str, int]:
    env = {**os.environ, **({"SLURM_CONF": str(slurm_conf)} if slurm_conf else {})}
    out = subprocess.run(
        ["sacct", "-X", "--parsable2", "--noheader", "-o", "JobID,ElapsedRaw", "-j", ",".join(job_ids)],
        capture_output=True, text=True, check=True, env=env, timeout=30,
    ).stdout  # fmt: skip
    return {jid: int(raw) for jid, raw in (line.split("|") for line in out.splitlines() if "|" in line)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--inventory", type=Path, default=Path("inventories/lab.ini"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--nodes", default="1..3", help="the ladder (make bench provisions node1-node3)")
    args = ap.parse_args()
    cluster = load_inventory(args.inventory)
    ratios = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            req = ScaleTestRequest(
                inventory=args.inventory,
                plan="smoke",
                overrides=PlanOverrides(nodes=args.nodes, gpus_per_node="1", backend="slurm"),
                out_dir=Path(tmp),
            )
            t0 = time.monotonic()
            result = scale_test(req)
            wall = time.monotonic() - t0
        ids = [s.job_id for s in result.steps if s.job_id]
        time.sleep(1.0)  # let slurmdbd record the last job's end
        elapsed = elapsed_raw(ids, cluster.vars.orch_slurm_conf)
        total = sum(elapsed.get(j, 0) for j in ids)
        ratio = wall / total if total else float("inf")
        ratios.append(ratio)
        jobs = ", ".join(f"{s.step.id}={elapsed.get(s.job_id or '', '?')}s" for s in result.steps)
        print(f"run {i + 1}: status {result.status}; wall {wall:.2f} s; jobs {jobs}; sum {total} s; "
              f"wall/sum {ratio:.3f}")  # fmt: skip
    ratios.sort()
    print(f"overhead ratio (orch wall / sum of Slurm elapsed): median {ratios[len(ratios) // 2]:.3f} "
          f"over {len(ratios)} run(s); target <= 1.10; ReFrame 4.10 measured 1.36")  # fmt: skip


if __name__ == "__main__":
    main()
