"""bench/reframe_compare.py — orch scale-test against ReFrame 4.10 on the same ladder, same jobs.

Method: on the running virtual lab, the smoke plan's ladder over 1, 2, 3 nodes with one rank per
node (all six collectives, 1 KiB..1 MiB x4, 2 warm-up + 5 timed iterations, --check) runs twice:

  * orch: `orch scale-test -i INVENTORY --nodes 1..N --gpus-per-node 1 --backend slurm
    --slurm-mode per-step` (one job per step, as ReFrame runs them), a child
    process timed from spawn to exit with a monotonic clock (CLI start-up, inventory, plan,
    submission, polling, collection, verdict, store: everything a user waits for).
  * ReFrame 4.10 (`pip install -e '.[bench]'`): `reframe --exec-policy=serial -r` on a site
    config and a test generated into a temporary directory (nothing of ReFrame's is copied into
    this repository). The config declares one system, partition `lab` with the `slurm` scheduler
    backend (the lab keeps accounting, so ReFrame's sacct polling works), launcher `srun`, and an
    environment whose executable is this venv's Python; ReFrame's own defaults for everything
    else (poll rates included). The test is a RunOnlyRegressionTest parameterised over node
    counts; each instance runs exactly the argv that orch renders for that step
    (orchestrator.runs.scale_test.job_spec: `python -m orchestrator.workloads.collbench ...`), one task
    per node, --exclusive, --nodelist of the same nodes, with MASTER_ADDR (first node's fabric
    address), MASTER_PORT and GLOO_SOCKET_IFNAME exported as orch's sbatch template does. Its
    sanity check asks for every #orch-json row and #wrong 0. Timed the same way, spawn to exit.

Both run one job at a time (orch chains its steps with afterany; ReFrame's serial policy submits
the next job after the previous one finished). For each tool the Slurm job ids are taken from
its own record (orch's result.json, ReFrame's JSON report) and `sacct -X -o ElapsedRaw` gives
each job's elapsed seconds; overhead = wall / sum(elapsed). Rounds alternate which tool goes
first; the figures printed are per round and the medians. Target: orch wall <= 0.85 x ReFrame's.
Never part of the pass/fail test run.

Usage: .venv/bin/python bench/reframe_compare.py [--inventory inventories/lab.ini] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _lab import elapsed_raw, load_note, slurm_env, wait_idle

from orchestrator.inventory import load_inventory
from orchestrator.models.plan import PlanOverrides
from orchestrator.plan import expand_steps, resolve_plan
from orchestrator.runs.executor import job_spec
from orchestrator.stacks import node_python, stack_name, stack_python

VENV_BIN = Path(sys.executable).parent
TARGET = 0.85
MAX_FAILURES = 4


class RoundFailed(Exception):
    """A tool's run did not finish cleanly (on a shared lab: often someone else's scancel)."""


@dataclass
class Timing:
    tool: str
    wall_s: float
    job_ids: list[str]
    elapsed: dict[str, int]

    @property
    def jobs_s(self) -> int:
        return sum(self.elapsed.get(j, 0) for j in self.job_ids)

    @property
    def overhead(self) -> float:
        return self.wall_s / self.jobs_s if self.jobs_s else float("inf")


# -- the same jobs, as orch renders them ---------------------------------------------------------
def ladder_jobs(inventory: Path, nodes: str) -> list[dict[str, object]]:
    """argv, nodes and rendezvous of each step of the smoke ladder, from orch's own job_spec."""
    cluster = load_inventory(inventory)
    plan = resolve_plan("smoke", PlanOverrides(nodes=nodes, gpus_per_node="1", backend="slurm"))
    port = 20000 + secrets.randbelow(20000)
    # The nodes run the stack's Python, as orch's own steps do (the checkout is hidden from them).
    name = stack_name(None, plan, cluster)
    python, env = stack_python(name) if name is not None else (node_python(cluster), {})
    jobs: list[dict[str, object]] = []
    for i, step in enumerate(expand_steps(plan, cluster)):
        spec = job_spec(step, plan, cluster, "slurm", Path("."), python, port + i, env)
        iface = spec.argv[spec.argv.index("--socket-ifname") + 1] if "--socket-ifname" in spec.argv else ""
        rows = len(step.collectives) * len(step.sizes)
        jobs.append({
            "nnodes": step.nnodes, "nodes": step.nodes, "argv": spec.argv, "rows": rows,
            "env": {**spec.env, "MASTER_ADDR": spec.master_addr, "MASTER_PORT": str(spec.master_port),
                    **({"GLOO_SOCKET_IFNAME": iface} if iface else {})},
            "time_limit_s": spec.time_limit_s, "partition": spec.partition or "",
        })  # fmt: skip
    return jobs


# -- ReFrame: generated site config and test -------------------------------------------------------
def reframe_config(partition: str) -> str:
    site = {
        "systems": [{
            "name": "orchlab",
            "descr": "orch virtual lab (generated by bench/reframe_compare.py)",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [{
                "name": "lab",
                "scheduler": "slurm",
                "launcher": "srun",
                "access": [f"--partition={partition}"] if partition else [],
                "environs": ["orchpy"],
                "max_jobs": 1,
            }],
        }],
        "environments": [{"name": "orchpy", "target_systems": ["orchlab"],
                          "env_vars": [["PATH", f"{VENV_BIN}:$PATH"]]}],
    }  # fmt: skip
    return "site_configuration = " + json.dumps(site, indent=2) + "\n"


REFRAME_TEST = """\
import json

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, run_after, run_before, sanity_function

JOBS = {{str(j["nnodes"]): j for j in json.loads({jobs!r})}}


@rfm.simple_test
class CollbenchLadder(rfm.RunOnlyRegressionTest):
    nnodes = parameter([{counts}])
    valid_systems = ["orchlab:lab"]
    valid_prog_environs = ["orchpy"]
    exclusive_access = True

    @run_after("init")
    def set_job(self):
        job = JOBS[str(self.nnodes)]
        self.num_tasks = self.nnodes
        self.num_tasks_per_node = 1
        self.time_limit = f"{{job['time_limit_s']}}s"
        self.executable = job["argv"][0]
        self.executable_opts = job["argv"][1:]
        self.env_vars = dict(job["env"])

    @run_before("run")
    def set_nodes(self):
        job = JOBS[str(self.nnodes)]
        self.job.options += ["--nodelist=" + ",".join(job["nodes"]), "--no-requeue"]
        self.job.launcher.options = ["--kill-on-bad-exit=1"]

    @sanity_function
    def every_row_right(self):
        rows = sn.count(sn.findall(r"^#orch-json ", self.stdout))
        return sn.all([
            sn.assert_eq(rows, JOBS[str(self.nnodes)]["rows"]),
            sn.assert_not_found(r"Out of bounds values\\s*:\\s*[1-9]", self.stdout),
        ])
"""


def run_reframe(jobs: list[dict[str, object]], env: dict[str, str], work: Path) -> Timing:
    config, test = work / "rfm_site.py", work / "rfm_collbench.py"
    config.write_text(reframe_config(str(jobs[0]["partition"])))
    counts = ", ".join(str(j["nnodes"]) for j in jobs)
    test.write_text(REFRAME_TEST.format(jobs=json.dumps(jobs), counts=counts))
    report = work / "rfm-report.json"
    argv = [str(VENV_BIN / "reframe"), "-C", str(config), "-c", str(test), "--prefix", str(work / "rfm"),
            "--report-file", str(report), "--exec-policy=serial", "-r"]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=1800)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RoundFailed(f"reframe failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-999:]}")
    data = json.loads(report.read_text())
    ids = [str(tc["jobid"]) for run in data["runs"] for tc in run["testcases"] if tc.get("jobid")]
    return Timing("reframe", wall, ids, {})


def run_orch(
    inventory: Path,
    nodes: str,
    env: dict[str, str],
    work: Path,
    mode: str = "per-step",
    gpus: str = "1",
    label: str = "orch",
) -> Timing:
    """orch scale-test from spawn to exit; one job per step by default, as ReFrame runs them.
    bench/overhead.py times allocation mode this way too, beside its in-process figure."""
    out = work / f"orch-runs-{mode}"
    argv = [str(VENV_BIN / "orch"), "scale-test", "-i", str(inventory), "--nodes", nodes,
            "--gpus-per-node", gpus, "--backend", "slurm", "--slurm-mode", mode,
            "--out", str(out)]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RoundFailed(f"orch scale-test failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    (result,) = out.glob("*/result.json")
    ids = [s["job_id"] for s in json.loads(result.read_text())["steps"] if s.get("job_id")]
    return Timing(label, wall, ids, {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--inventory", type=Path, default=Path("inventories/lab.ini"))
    ap.add_argument("--nodes", default="1..3", help="the ladder (make bench provisions node1-node3)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not (VENV_BIN / "reframe").exists():
        sys.exit("reframe is not installed in this venv: pip install -e '.[bench]'")
    cluster = load_inventory(args.inventory)
    env = slurm_env(cluster)
    version = subprocess.run([str(VENV_BIN / "reframe"), "--version"], capture_output=True, text=True).stdout
    print(f"ReFrame {version.strip()}; ladder {args.nodes} nodes x 1 rank, smoke plan, one job at a time")
    pairs: list[tuple[Timing, Timing]] = []
    failures = 0
    r = 0
    while r < args.rounds:
        with tempfile.TemporaryDirectory(prefix="orch-rfm-") as tmp:
            work = Path(tmp)
            jobs = ladder_jobs(args.inventory, args.nodes)
            order = ["orch", "reframe"] if r % 2 == 0 else ["reframe", "orch"]
            got: dict[str, Timing] = {}
            try:
                for tool in order:
                    wait_idle([n.name for n in cluster.nodes], env)
                    if tool == "orch":
                        got[tool] = run_orch(args.inventory, args.nodes, env, work)
                    else:
                        got[tool] = run_reframe(jobs, env, work)
                    time.sleep(1.0)  # slurmdbd records the last job's end; the lab settles
            except RoundFailed as e:
                failures += 1
                why = str(e).splitlines()[0]
                print(f"round {r + 1}: discarded ({why}); failure {failures} of {MAX_FAILURES} allowed")
                if failures >= MAX_FAILURES:
                    sys.exit(f"too many failed rounds; last:\n{e}")
                continue
            for t in got.values():
                t.elapsed = elapsed_raw(t.job_ids, env)
            shutil.rmtree(work / "rfm", ignore_errors=True)
        o, f = got["orch"], got["reframe"]
        pairs.append((o, f))
        for t in (o, f):
            jobs_txt = ", ".join(f"{j}={t.elapsed.get(j, '?')}s" for j in t.job_ids)
            print(f"round {r + 1} {t.tool:8s} wall {t.wall_s:6.2f} s  jobs {jobs_txt}  sum {t.jobs_s} s  "
                  f"overhead wall/sum {t.overhead:.3f}")  # fmt: skip
        print(f"round {r + 1} ratio orch/reframe wall {o.wall_s / f.wall_s:.3f}  (first: {order[0]}; "
              f"{load_note()})")  # fmt: skip
        r += 1
    o_wall = statistics.median(p[0].wall_s for p in pairs)
    f_wall = statistics.median(p[1].wall_s for p in pairs)
    ratio = statistics.median(p[0].wall_s / p[1].wall_s for p in pairs)
    print(f"median wall: orch {o_wall:.2f} s, reframe {f_wall:.2f} s; "
          f"overhead orch {statistics.median(p[0].overhead for p in pairs):.3f}, "
          f"reframe {statistics.median(p[1].overhead for p in pairs):.3f}")  # fmt: skip
    print(
        f"ratio orch/reframe wall (median of {len(pairs)} rounds): {ratio:.3f}; target <= {TARGET}: "
        + ("met" if ratio <= TARGET else "NOT met")
    )


if __name__ == "__main__":
    main()
