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
    assert "cd -- '/tmp/run dir/steps/n2xg1'" in script


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


def directives(script: str) -> list[str]:
    """The #SBATCH lines sbatch reads: those before the first line that is not a comment or blank."""
    out = []
    for line in script.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            out.append(line)
    return out


def test_paths_never_on_sbatch_lines_and_output_on_the_command_line() -> None:
    s = spec(workdir=Path("/tmp/run dir\n#SBATCH --export=ALL/steps/n2xg1"))
    script = SlurmScheduler().render(s)
    read = directives(script)
    # job-name, nodes, ntasks-per-node, nodelist, time, no-requeue, exclusive: nothing else, and
    # the quoted newline in the body comes after sbatch has stopped reading directives.
    assert [ln.split("=")[0] for ln in read] == [
        "#SBATCH --job-name", "#SBATCH --nodes", "#SBATCH --ntasks-per-node", "#SBATCH --nodelist",
        "#SBATCH --time", "#SBATCH --no-requeue", "#SBATCH --exclusive",
    ]  # fmt: skip
    argv = SlurmScheduler.sbatch_argv(s)
    assert argv[:3] == ["sbatch", "--parsable", "--export=PATH,HOME,USER,LOGNAME,LANG,LC_ALL,TZ,TMPDIR"]
    assert argv[3] == f"--output={s.workdir}/slurm-%j.out"
    body = script[script.index("cd -- ") :].split("\nexec srun")[0]
    assert shlex.split(body) == ["cd", "--", str(s.workdir)]


def test_requeue_begin_and_batch_launch() -> None:
    from datetime import datetime

    s = spec(requeue=True, exclusive=False, time_limit_s=None, launch="batch", argv=["/bin/orch", "a b"],
             log=Path("/l o g"), begin=datetime(2026, 12, 1, 2, 5), daily=True,
             script=Path("/c/x.sbatch"))  # fmt: skip
    script = SlurmScheduler().render(s)
    lines = sbatch_lines(script)
    assert "requeue" in lines and "no-requeue" not in lines
    assert "exclusive" not in lines and "time" not in lines
    assert "exec /bin/orch 'a b' >> '/l o g' 2>&1" in script.splitlines()
    resubmit = next(ln for ln in script.splitlines() if ln.startswith("sbatch "))
    assert 'date -d "tomorrow 02:05"' in resubmit and resubmit.endswith(" /c/x.sbatch")
    assert "srun" not in script


@pytest.mark.parametrize("bad", ["a\nb", "x\x00", "\u2028"])
def test_notes_are_one_printable_line(bad: str) -> None:
    with pytest.raises(ValueError, match="one line"):
        spec(notes=[bad])


@pytest.mark.parametrize("bad", ["--export=ALL", "--output=x", "--chdir=/", "--begin=now", "-x", "--a=b c"])
def test_extra_sbatch_options_are_plain_and_not_orchs_own(bad: str) -> None:
    with pytest.raises(ValueError, match="sbatch option"):
        spec(extra_args=[bad])
