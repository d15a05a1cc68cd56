"""The probe's Slurm --requeue batch script and its generation bookkeeping (no Slurm needed).

The script is rendered by the one Slurm client (scheduler/slurm.py) from the probe's JobSpec.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from orchestrator.runs.probe_jobs import probe_job_spec
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.workloads.probe import ProbeSettings, last_completed_step, last_generation


def _script(**kw: object) -> str:
    spec = probe_job_spec(
        ProbeSettings(master_port=23456),
        python="/v/bin/python",
        out_dir=Path("/o d"),
        run_id="r1",
        workdir=Path("/w"),
        master_addr="198.18.1.11",
        nodelist=["node1", "node2", "node3"],
        **kw,
    )  # type: ignore[arg-type]
    return SlurmScheduler().render(spec)


def test_sbatch_lines() -> None:
    lines = _script().splitlines()
    sbatch = [ln for ln in lines if ln.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --job-name=probe-r1",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --nodelist=node1,node2,node3",
        "#SBATCH --requeue",
    ]
    assert "export ORCH_PROBE_RUN=r1" in lines and "export MASTER_ADDR=198.18.1.11" in lines
    assert "cd -- /w" in lines
    assert not any(ln.startswith("#SBATCH --job-name=orch-") for ln in lines)


def test_output_path_goes_on_the_command_line() -> None:
    spec = probe_job_spec(
        ProbeSettings(),
        python="/v/bin/python",
        out_dir=Path("/o d"),
        run_id="r1",
        workdir=Path("/w"),
        master_addr="198.18.1.11",
        nodelist=["node1"],
    )
    argv = SlurmScheduler.sbatch_argv(spec)
    assert "--output=/o d/slurm-%j.out" in argv and "--open-mode=append" in argv
    assert SlurmScheduler.script_path(spec) == Path("/o d/probe.sbatch")


def test_srun_line_is_valid_bash_and_sets_the_node_rank_per_task(tmp_path: Path) -> None:
    srun = next(ln for ln in _script().splitlines() if ln.startswith("exec srun "))
    argv = shlex.split(srun)
    assert argv[:5] == ["exec", "srun", "--export=ALL", "--kill-on-bad-exit=0", "bash"] and argv[5] == "-c"
    # What each task runs: the wrapper, with the argv as its arguments, printed instead of exec'd.
    task = argv[6].replace('exec "$@"', 'printf "%s\\n" "$PET_NODE_RANK" "$ORCH_NODE" "$@"')
    env = {"SLURM_NODEID": "2", "SLURMD_NODENAME": "node3", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        ["bash", "-c", task, *argv[7:]], env=env, capture_output=True, text=True, check=True
    ).stdout
    words = out.splitlines()
    assert words[:2] == ["2", "node3"]
    assert "--master-addr=198.18.1.11" in words and not any(w.startswith("--node-rank") for w in words)
    assert words[words.index("--out") + 1] == "/o d"  # the space survived both shells


def test_last_generation(tmp_path: Path) -> None:
    hb = tmp_path / "hb-rank0.jsonl"
    assert last_generation(hb) == -1
    hb.write_text(
        "\n".join(
            json.dumps(r)
            for r in [{"ev": "start", "gen": 0}, {"ev": "step", "gen": 0}, {"ev": "start", "gen": 2}]
        )
        + "\nnot json\n"
    )
    assert last_generation(hb) == 2


def test_last_completed_step(tmp_path: Path) -> None:
    hb = tmp_path / "hb-rank0.jsonl"
    assert last_completed_step(hb) == -1
    lines = [{"ev": "start", "gen": 5, "step": 99}, {"ev": "step", "step": 3}, {"ev": "step", "step": "7"}]
    hb.write_text("\n".join(json.dumps(r) for r in lines) + "\nnot json\n")
    assert last_completed_step(hb) == 7  # start lines do not count; steps as written
    assert last_generation(hb) == 5
