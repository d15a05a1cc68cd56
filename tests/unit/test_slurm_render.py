"""The sbatch script orch renders: compared line by line, no Slurm needed."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.scheduler.base import JobSpec
from orchestrator.scheduler.slurm import SlurmScheduler, slurm_time


def spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "orch-smoke-n2xg1",
        "step_id": "n2xg1",
        "nodes": ["node1", "node2"],
        "nnodes": 2,
        "ranks_per_node": 1,
        "argv": [
            "/opt/orch/venv/bin/python",
            "-m",
            "orchestrator.workloads.collbench",
            "--sizes",
            "1K:1M:x4",
        ],
        "env": {"GLOO_SOCKET_IFNAME": "fab0"},
        "master_addr": "198.18.1.11",
        "master_port": 29511,
        "time_limit_s": 300,
        "workdir": Path("/tmp/run dir/steps/n2xg1"),
    }
    base.update(kw)
    return JobSpec.model_validate(base)


def sbatch_lines(script: str) -> dict[str, str]:
    out = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line[len("#SBATCH --") :].partition("=")
            out[key] = value
    return out


def test_sbatch_lines() -> None:
    lines = sbatch_lines(SlurmScheduler().render(spec()))
    assert lines["job-name"] == "orch-smoke-n2xg1"
    assert lines["nodes"] == "2"
    assert lines["ntasks-per-node"] == "1"
    assert lines["nodelist"] == "node1,node2"
    assert lines["time"] == "00:05:00"
    assert "gres" not in lines and "partition" not in lines
    assert "no-requeue" in lines


def test_gres_and_partition_when_asked() -> None:
    lines = sbatch_lines(SlurmScheduler().render(spec(gpus_per_node=8, partition="mi300x")))
    assert lines["gres"] == "gpu:8"
    assert lines["partition"] == "mi300x"


def test_values_are_shell_quoted() -> None:
    script = SlurmScheduler().render(spec(env={"NCCL_DEBUG": "INFO; touch /tmp/canary"}))
    assert "export NCCL_DEBUG='INFO; touch /tmp/canary'" in script
    srun = next(line for line in script.splitlines() if line.startswith("exec srun"))
    argv = shlex.split(srun)
    assert argv[argv.index("orchestrator.workloads.collbench") - 2] == "/opt/orch/venv/bin/python"
    assert "--output=/tmp/run dir/steps/n2xg1/rank-%t.log" in argv
    assert "cd '/tmp/run dir/steps/n2xg1'" in script


@pytest.mark.parametrize("bad", ["gpu;rm -rf /", "a b", "$(id)"])
def test_bad_partition_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="partition"):
        SlurmScheduler().render(spec(partition=bad))


def test_bad_env_name_refused() -> None:
    with pytest.raises(ConfigError, match="environment variable"):
        SlurmScheduler().render(spec(env={"A;B": "x"}))


@pytest.mark.parametrize(
    ("seconds", "text"), [(1, "00:00:01"), (300, "00:05:00"), (3661, "01:01:01"), (90061, "1-01:01:01")]
)
def test_slurm_time(seconds: int, text: str) -> None:
    assert slurm_time(seconds) == text
