"""The probe's Slurm --requeue batch script and its generation bookkeeping (no Slurm needed)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from orchestrator.workloads.probe import ProbeSettings, last_completed_step, last_generation, sbatch_script


def _script(**kw: object) -> str:
    return sbatch_script(ProbeSettings(master_port=23456), python="/v/bin/python", out_dir=Path("/o d"),
                         nnodes=3, run_id="r1", workdir=Path("/w"), **kw)  # type: ignore[arg-type]


def test_sbatch_lines() -> None:
    lines = _script(master_addr="198.18.1.11", nodelist=["node1", "node2", "node3"]).splitlines()
    sbatch = [ln for ln in lines if ln.startswith("#SBATCH")]
    assert sbatch == ["#SBATCH --job-name=probe-r1", "#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1",
                      "#SBATCH --nodelist=node1,node2,node3", "#SBATCH --requeue", "#SBATCH --chdir=/w",
                      "#SBATCH --output=/o d/slurm-%j.out", "#SBATCH --open-mode=append"]
    assert "export ORCH_PROBE_RUN=r1" in lines and "MASTER_ADDR=198.18.1.11" in lines
    assert not any(ln.startswith("#SBATCH --job-name=orch-") for ln in lines)


def test_srun_line_is_valid_bash_and_expands_per_task(tmp_path: Path) -> None:
    srun = next(ln for ln in _script().splitlines() if ln.startswith("srun "))
    argv = shlex.split(srun)
    assert argv[:3] == ["srun", "--kill-on-bad-exit=0", "bash"] and argv[3] == "-c"
    task = argv[4].replace("exec ", "printf '%s\\n' ", 1)
    env = {"SLURM_NODEID": "2", "MASTER_ADDR": "198.18.1.11", "SLURMD_NODENAME": "node3",
           "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["bash", "-c", task], env=env, capture_output=True, text=True, check=True).stdout
    words = out.splitlines()
    assert "--node-rank=2" in words and "--master-addr=198.18.1.11" in words
    assert words[words.index("--out") + 1] == "/o d"  # the space survived both shells


def test_last_generation(tmp_path: Path) -> None:
    hb = tmp_path / "hb-rank0.jsonl"
    assert last_generation(hb) == -1
    hb.write_text("\n".join(json.dumps(r) for r in [{"ev": "start", "gen": 0}, {"ev": "step", "gen": 0},
                                                     {"ev": "start", "gen": 2}]) + "\nnot json\n")
    assert last_generation(hb) == 2


def test_last_completed_step(tmp_path: Path) -> None:
    hb = tmp_path / "hb-rank0.jsonl"
    assert last_completed_step(hb) == -1
    lines = [{"ev": "start", "gen": 5, "step": 99}, {"ev": "step", "step": 3}, {"ev": "step", "step": "7"}]
    hb.write_text("\n".join(json.dumps(r) for r in lines) + "\nnot json\n")
    assert last_completed_step(hb) == 7  # start lines do not count; steps as written
    assert last_generation(hb) == 5
