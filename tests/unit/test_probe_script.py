"""The probe's Slurm --requeue batch script and its generation bookkeeping (no Slurm needed).

The script is rendered by the one Slurm client (scheduler/slurm.py) from the probe's JobSpec.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stop_file_on_one_node_stops_every_rank_after_the_same_step(tmp_path: Path) -> None:
    """Two ranks over gloo on loopback, each with its own folder (as on two nodes): only rank 0's
    folder gets the stop file. Both end cleanly (exit 0, a stop line, no error) after the same
    step; a rank that left on its own would leave the other's collective to fail or hang."""
    pytest.importorskip("torch")
    port = _free_port()
    dirs = [tmp_path / f"node{r}" for r in range(2)]
    procs = []
    for rank, out in enumerate(dirs):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}  # fmt: skip
        argv = [sys.executable, "-m", "orchestrator.workloads.probe", "--out", str(out), "--size", "1K",
                "--pg-timeout", "60", "--step-sleep", "0.01"]  # fmt: skip
        procs.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    try:
        hb0 = dirs[0] / "hb-rank0.jsonl"
        deadline = time.monotonic() + 120
        while last_completed_step(hb0) < 5 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), [p.communicate()[0][-2000:] for p in procs]
            time.sleep(0.1)
        (dirs[0] / "stop").touch()
        codes = [p.wait(timeout=30) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    lines = [
        [json.loads(ln) for ln in (d / f"hb-rank{r}.jsonl").read_text().splitlines()]
        for r, d in enumerate(dirs)
    ]
    assert codes == [0, 0], [[e for e in ls if e["ev"] == "error"] for ls in lines]
    stops = [[e["step"] for e in ls if e["ev"] == "stop"] for ls in lines]
    assert stops[0] == stops[1] and len(stops[0]) == 1, stops
    assert [e for ls in lines for e in ls if e["ev"] == "error"] == []
    assert [last_completed_step(d / f"hb-rank{r}.jsonl") for r, d in enumerate(dirs)] == [stops[0][0] - 1] * 2
