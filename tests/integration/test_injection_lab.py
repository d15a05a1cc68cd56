"""An inventory value reaches the real `srun` on the lab as one argument.

tests/unit/test_injection.py runs the rendered scripts with a stand-in srun; this runs them through
the lab's Slurm. `a;touch${IFS}Q` is a valid Linux interface name (the kernel refuses only '/',
':', white space and names over 15 bytes), but orch's interface names are an allow-list
(`[A-Za-z0-9_.-]{1,15}`, docs/inventory.md): the inventory is refused, naming the value. An
allowed name that is not the lab's own (VALUE) is passed to collbench as `--socket-ifname` and
must arrive as that one argument. The job's argv is wrapped so that each rank prints the
arguments it was given, as JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.lab

HOSTILE = "a;touch${IFS}Q"
VALUE = "fab0.v-1_x"
PRINT_ARGV = ["python3", "-c", "import json, sys; print('#argv ' + json.dumps(sys.argv[1:]))"]


def _inventory_with(lab: Lab, tmp_path: Path, value: str = VALUE) -> Path:
    """The lab's inventory with every node's rdma_ifaces set to value (INI: one word, no quotes)."""
    lines = []
    for line in lab.inventory.read_text().splitlines():
        if line.startswith("node") and " rdma_ifaces=" in line:
            words = [f"rdma_ifaces={value}" if w.startswith("rdma_ifaces=") else w for w in line.split(" ")]
            line = " ".join(words)
        lines.append(line)
    path = tmp_path / f"lab-{len(value)}.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("mode", ["per-step", "allocation", "allocation-batch"])
def test_an_inventory_value_reaches_srun_as_one_argument(lab: Lab, tmp_path: Path, mode: str) -> None:
    from orchestrator.errors import OrchError
    from orchestrator.inventory import load_inventory
    from orchestrator.models.plan import PlanOverrides
    from orchestrator.plan import expand_steps, resolve_plan
    from orchestrator.runs.executor import job_spec
    from orchestrator.scheduler.allocation import AllocationScheduler
    from orchestrator.scheduler.salloc import SallocScheduler
    from orchestrator.scheduler.slurm import SlurmScheduler

    with pytest.raises(OrchError) as refused:
        load_inventory(_inventory_with(lab, tmp_path, HOSTILE))
    assert HOSTILE in str(refused.value)
    cluster = load_inventory(_inventory_with(lab, tmp_path))
    assert all(n.rdma_ifaces == [VALUE] for n in cluster.nodes)
    plan = resolve_plan("smoke", PlanOverrides(nodes="2", gpus_per_node="1", backend="slurm"))
    step = expand_steps(plan, cluster)[0]
    workdir = tmp_path / "job"
    spec = job_spec(step, plan, cluster, "slurm", workdir, "python3", 29600)
    i = spec.argv.index("--socket-ifname")
    assert spec.argv[i + 1] == VALUE
    spec = spec.model_copy(update={"argv": [*PRINT_ARGV, *spec.argv]})
    kinds = {
        "per-step": SlurmScheduler,
        "allocation": SallocScheduler,
        "allocation-batch": AllocationScheduler,
    }
    sched = kinds[mode](slurm_conf=Path(lab.env["SLURM_CONF"]))
    job = sched.submit(spec)
    try:
        deadline = time.monotonic() + 90
        while not (state := sched.poll([job])[job]).status.terminal and time.monotonic() < deadline:
            time.sleep(0.5)
        assert state.raw_state == "COMPLETED", state
    finally:
        if isinstance(sched, SallocScheduler):
            sched.release()
    for rank in range(spec.nnodes * spec.ranks_per_node):
        log = (workdir / f"rank-{rank}.log").read_text()
        got = json.loads(next(ln for ln in log.splitlines() if ln.startswith("#argv "))[len("#argv ") :])
        assert got == [str(a) for a in spec.argv[len(PRINT_ARGV) :]], log
        assert got[got.index("--socket-ifname") + 1] == VALUE
    assert not list(tmp_path.rglob("Q")), "the value ran as shell text"
