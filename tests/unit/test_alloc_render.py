"""Allocation mode's driver script and srun argv: compared line by line, no Slurm needed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from fakes import Answer, ScriptedRunner
from pydantic import ValidationError
from test_slurm_render import sbatch_lines

from orchestrator.errors import ConfigError, SchedulerError
from orchestrator.inventory import load_inventory
from orchestrator.models.plan import PlanOverrides
from orchestrator.plan import resolve_plan
from orchestrator.runs.executor import make_scheduler
from orchestrator.scheduler.allocation import AllocationScheduler, srun_argv
from orchestrator.scheduler.base import JobSpec
from orchestrator.scheduler.salloc import SallocScheduler
from orchestrator.scheduler.slurm import JOB_ENV_ALLOW, SlurmScheduler

ARGV = ["/opt/orch/venv/bin/python", "-m", "orchestrator.workloads.collbench", "--sizes", "1K:1M:x4"]


def spec(n: int, r: int = 1, **kw: object) -> JobSpec:
    base: dict[str, object] = {
        "name": f"orch-smoke-n{n}xg{r}",
        "step_id": f"n{n}xg{r}",
        "nodes": [f"node{i}" for i in range(1, n + 1)],
        "nnodes": n,
        "ranks_per_node": r,
        "argv": ARGV,
        "env": {"GLOO_SOCKET_IFNAME": "fab0"},
        "master_addr": "198.18.1.11",
        "master_port": 29500 + n,
        "time_limit_s": 300,
        "workdir": Path(f"/tmp/run dir/steps/n{n}xg{r}"),
    }
    base.update(kw)
    return JobSpec.model_validate(base)


def srun_lines(script: str) -> list[list[str]]:
    """Each step's command, split as the shell would (after `cd DIR && exec`)."""
    return [shlex.split(ln.split("&& exec ", 1)[1]) for ln in script.splitlines() if "&& exec srun" in ln]


def test_srun_argv_of_one_step() -> None:
    assert srun_argv(spec(2, 4)) == [
        "srun",
        "--export=ALL",
        "--job-name=orch-smoke-n2xg4",
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--nodelist=node1,node2",
        "--time=00:05:00",
        "--kill-on-bad-exit=1",
        "--output=/tmp/run dir/steps/n2xg4/rank-%t.log",
        *ARGV,
    ]
    assert "--gres=gpu:8" in srun_argv(spec(1, gpus_per_node=8))


def test_driver_books_the_largest_node_set_for_the_whole_ladder() -> None:
    script = AllocationScheduler().render_ladder([spec(1), spec(2, 2), spec(3)])
    lines = sbatch_lines(script)
    assert lines["job-name"] == "orch-smoke-ladder"
    assert lines["nodes"] == "3"
    assert lines["nodelist"] == "node1,node2,node3"
    assert lines["ntasks-per-node"] == "2"  # the most ranks any step runs on a node
    assert lines["time"] == "00:16:00"  # 3 x 300 s + 60 s of margin
    assert "exclusive" in lines and "no-requeue" in lines
    assert "output" not in lines and "gres" not in lines and "partition" not in lines


def test_driver_runs_each_step_in_ladder_order_with_its_own_rendezvous() -> None:
    steps = [spec(1), spec(2, 2), spec(3)]
    script = AllocationScheduler().render_ladder(steps)
    assert srun_lines(script) == [srun_argv(s) for s in steps]
    body = script.splitlines()
    ports = [ln.strip() for ln in body if "MASTER_PORT=" in ln]
    assert ports == ["export MASTER_PORT=29501", "export MASTER_PORT=29502", "export MASTER_PORT=29503"]
    step = "  cd -- '/tmp/run dir/steps/n2xg2' && exec srun --export=ALL --job-name=orch-smoke-n2xg2 "
    assert step in script
    assert "set -e" not in script  # a failed step must not stop the steps after it


def test_values_in_the_driver_are_quoted() -> None:
    hostile = spec(1, env={"NCCL_DEBUG": "INFO; touch /tmp/canary"}, argv=[*ARGV, "$(reboot)"])
    script = AllocationScheduler().render_ladder([hostile])
    assert "export NCCL_DEBUG='INFO; touch /tmp/canary'" in script
    assert srun_lines(script)[0][-1] == "$(reboot)"


@pytest.mark.parametrize(
    "bad",
    [
        {"nodes": ["node1;reboot"]},
        {"partition": "a b"},
        {"env": {"A;B": "x"}},
        {"task_env": {"ORCH_NODE": "SLURMD_NODENAME;x"}},
        {"workdir": Path("/tmp/a\\b")},
        {"launch": "batch"},
        {"extra_args": ["--mem=1G"]},
    ],
)
def test_unsafe_or_unsupported_specs_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        AllocationScheduler().render_ladder([spec(1, **bad)])


def test_a_hostile_job_name_never_reaches_the_driver() -> None:
    with pytest.raises(ValidationError, match="is not a valid name"):
        spec(1, name="orch-smoke-$(x)-n1xg1")


def test_driver_sbatch_lines_hold_only_numbers_and_names(tmp_path: Path) -> None:
    steps = [spec(1, workdir=tmp_path / "100%j done" / "n1xg1"), spec(2, partition="gpu")]
    script = AllocationScheduler().render_ladder([s.model_copy(update={"partition": "gpu"}) for s in steps])
    for key, value in sbatch_lines(script).items():
        assert key not in {"output", "error", "export", "chdir"}
        assert re.fullmatch(r"[A-Za-z0-9_.:,\-]*", value), (key, value)
    # The rank-log pattern keeps '%' literal for Slurm, as in per-step mode.
    assert f"--output={tmp_path}/100%%j done/n1xg1/rank-%t.log" in srun_lines(script)[0]


def test_sruns_keep_their_step_environment_despite_the_export_allow_list() -> None:
    """sbatch --export=<allow-list> is handed down to srun (SLURM_EXPORT_ENV) unless srun says
    otherwise: every step's srun passes --export=ALL, after the driver exported its variables."""
    script = AllocationScheduler().render_ladder([spec(1), spec(2)])
    assert all(argv[1] == "--export=ALL" for argv in srun_lines(script))
    assert script.count("export GLOO_SOCKET_IFNAME=fab0") == 2
    wrapped = srun_argv(spec(1, task_env={"ORCH_NODE": "SLURMD_NODENAME"}))
    wrapper = 'export ORCH_NODE="$SLURMD_NODENAME"; exec "$@"'
    assert wrapped[-len(ARGV) - 4 : -len(ARGV)] == ["bash", "-c", wrapper, "orch-task"]


def test_ladder_without_time_limits_takes_the_partitions() -> None:
    script = AllocationScheduler().render_ladder([spec(1, time_limit_s=None), spec(2)])
    assert "time" not in sbatch_lines(script)
    assert not any(a.startswith("--time") for a in srun_lines(script)[0])


def test_steps_asking_for_different_partitions_are_refused() -> None:
    with pytest.raises(ConfigError, match="partitions"):
        AllocationScheduler().render_ladder([spec(1, partition="a"), spec(2, partition="b")])


class Recorder(ScriptedRunner):
    """Every command prints `stdout` and exits 0."""

    def __init__(self, stdout: str) -> None:
        super().__init__()
        self.stdout = stdout

    def answer(self, argv: list[str]) -> Answer:
        return 0, self.stdout, ""


def test_submit_ladder_sbatches_one_driver_and_names_steps_by_place(tmp_path: Path) -> None:
    runner = Recorder("4242\n")
    sched = AllocationScheduler(runner=runner)  # type: ignore[arg-type]
    steps = [spec(1, workdir=tmp_path / "steps" / "n1xg1"), spec(2, workdir=tmp_path / "steps" / "n2xg1")]
    ids = sched.submit_ladder(steps, tmp_path / "alloc")
    assert ids == ["4242.0", "4242.1"]
    (argv,) = runner.calls
    export = f"--export={','.join(JOB_ENV_ALLOW)}"
    script = str(tmp_path / "alloc" / "alloc.sbatch")
    assert argv == ["sbatch", "--parsable", export, f"--output={tmp_path}/alloc/alloc-%j.out", script]
    assert (tmp_path / "alloc" / "alloc.sbatch").read_text() == sched.render_ladder(steps)
    with pytest.raises(SchedulerError):
        sched.submit(steps[0], after="4242")


def test_cancel_of_any_step_cancels_its_allocation() -> None:
    runner = Recorder("")
    AllocationScheduler(runner=runner).cancel(["4242.1", "4242.2"])  # type: ignore[arg-type]
    assert runner.calls == [["scancel", "4242"]]
    with pytest.raises(ConfigError):  # a tampered journal's id is not read as an option
        AllocationScheduler(runner=runner).cancel(["--user=someone.0"])  # type: ignore[arg-type]
    assert len(runner.calls) == 1


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [
        ({}, SallocScheduler),  # the default
        ({"slurm_mode": "allocation"}, SallocScheduler),
        ({"slurm_mode": "allocation-batch"}, AllocationScheduler),
        ({"slurm_mode": "per-step"}, SlurmScheduler),
        ({"slurm_mode": "allocation", "concurrent_steps": True}, SlurmScheduler),  # a job each
    ],
)
def test_plan_picks_the_slurm_mode(overrides: dict[str, object], kind: type, tmp_path: Path) -> None:
    inv = tmp_path / "lab.ini"
    inv.write_text("node1 ansible_host=198.18.0.11 gpu_vendor=none gpus_per_node=1\n")
    plan = resolve_plan("smoke", PlanOverrides.model_validate({"backend": "slurm", **overrides}))
    sched = make_scheduler("slurm", load_inventory(inv), plan)
    assert type(sched) is kind
