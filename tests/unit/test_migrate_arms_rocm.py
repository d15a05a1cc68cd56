"""Issue 23, must-show 5: the rocm-6.4 arms `plain` and `aiter` rendered end to end, as a migration
between them would start vLLM: the engine's argv, its environment and its Slurm job script, and the
script run as rendered (bash, with a stand-in srun that records the argv and environment the
engine would get). No GPU here: what this does not show is in docs/migration.md, "Arms"."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.migrate.arms import Arm, arm_plan, arm_record
from orchestrator.models.cluster import Cluster, ClusterVars, Node
from orchestrator.plan import expand_serving_steps, load_plan
from orchestrator.remote.nodefiles import run_data_layout
from orchestrator.runs.serving import ENGINE_ENV, engine_job
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.stacks import load_stack

ROCM = load_stack("rocm-6.4")

STUB = """#!/bin/bash
# srun's stand-in: its argv (NUL-separated) and the environment the task would get
printf '%s\\0' "$@" > "$OUT/argv"
env -0 > "$OUT/env"
"""


def mi300(n: int = 2) -> Cluster:
    nodes = [Node(name=f"node{i}", address=f"10.0.0.{i}", gpus_per_node=8, gpu_vendor="amd")
             for i in range(1, n + 1)]  # fmt: skip
    return Cluster(source=Path("mi300.ini"), nodes=nodes, groups={"all": [x.name for x in nodes]},
                   vars=ClusterVars(orch_stack="rocm-6.2"))  # fmt: skip


@pytest.fixture
def plan(tmp_path: Path) -> Any:
    doc = {
        "name": "aiter-migration",
        "collectives": [],
        "serving": [{
            "name": "llama", "engine": "vllm", "dtype": "bfloat16", "tensor_parallel": 1,
            "model": {"path": "/models/Llama-3.1-8B-Instruct", "name": "llama-3.1-8b"},
            "engine_args": ["--max-model-len", "4096"],
            "load": {"concurrency": [1, 16], "input_tokens": {"kind": "fixed", "tokens": 512},
                     "output_tokens": {"kind": "fixed", "tokens": 128}, "requests": 200},
        }],
    }  # fmt: skip
    path = tmp_path / "aiter-migration.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_plan(path)


def test_the_two_arms_differ_in_the_aiter_switch_alone(plan: Any) -> None:
    cluster = mi300()
    a = arm_record(plan, cluster, Arm("rocm-6.4", "plain"), "A")
    b = arm_record(plan, cluster, Arm("rocm-6.4", "aiter"), "B")
    (ea,), (eb,) = a.engines, b.engines
    bindir = str(Path(sys.executable).parent)  # rocm-6.4 has no python prefix: see the docs
    want = [f"{bindir}/vllm", "serve", "/models/Llama-3.1-8B-Instruct", "--host", "10.0.0.1", "--port",
            "8000", "--dtype", "bfloat16", "--tensor-parallel-size", "1", "--served-model-name",
            "llama-3.1-8b", "--max-model-len", "4096"]  # fmt: skip
    assert ea.argv == want and eb.argv == want  # the variants set no argument: one argv
    assert ea.env["VLLM_ROCM_USE_AITER"] == "0" and eb.env["VLLM_ROCM_USE_AITER"] == "1"
    assert {k: v for k, v in ea.env.items() if k != "VLLM_ROCM_USE_AITER"} == {
        k: v for k, v in eb.env.items() if k != "VLLM_ROCM_USE_AITER"
    } == dict(ROCM.env)  # the stack's environment, the same on both arms
    assert ROCM.env["NCCL_IB_GID_INDEX"] == "3" and "VLLM_ROCM_USE_AITER" not in ROCM.env
    assert (ea.variant, eb.variant, a.ref, b.ref) == ("plain", "aiter", "rocm-6.4:plain", "rocm-6.4:aiter")


@pytest.mark.parametrize(("variant", "switch"), [("plain", "0"), ("aiter", "1")])
def test_each_arm_s_slurm_job_script_runs_vllm_with_its_switch(
    plan: Any, tmp_path: Path, variant: str, switch: str
) -> None:
    cluster = mi300()
    p = arm_plan(plan, Arm("rocm-6.4", variant))  # the plan as the arm runs it (ClusterOps.run_plan)
    step = expand_serving_steps(p, cluster)[0]
    assert step.variant == variant
    env = {**ROCM.env, **ENGINE_ENV}  # as the serving runner gives it: the stack's, then orch's
    _, spec = engine_job(
        p, cluster, step, p.serving[0], "node1", port=8000, here=False, bindir="/opt/vllm/bin", env=env,
        folder=tmp_path / "steps" / step.id, root=tmp_path, layout=run_data_layout(cluster, tmp_path),
        run_id="20261205T000000Z-migrate-ab12",
    )  # fmt: skip
    script = SlurmScheduler().render(spec)
    lines = script.splitlines()
    assert "#SBATCH --nodelist=node1" in lines and "#SBATCH --gres=gpu:1" in lines
    assert f"export VLLM_ROCM_USE_AITER={switch}" in lines and "export HF_HUB_OFFLINE=1" in lines
    assert sum(ln.startswith("export VLLM_ROCM_USE_AITER=") for ln in lines) == 1

    # Run it as rendered: bash, srun a stand-in; the workdir (a node path) moved into tmp_path.
    work = tmp_path / "node-work"
    work.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(STUB)
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "job.sh").write_text(script.replace(str(spec.workdir), str(work)))
    run_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(tmp_path / "job.sh")], env=run_env, capture_output=True, timeout=30,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "argv").read_bytes().decode().split("\0")[:-1]
    got_env = dict(kv.split("=", 1) for kv in (tmp_path / "env").read_bytes().decode().split("\0") if kv)
    engine = argv[argv.index("/opt/vllm/bin/vllm") :]
    assert engine[:3] == ["/opt/vllm/bin/vllm", "serve", "/models/Llama-3.1-8B-Instruct"]
    assert engine[engine.index("--dtype") + 1] == "bfloat16" and engine[-2:] == ["--max-model-len", "4096"]
    assert got_env["VLLM_ROCM_USE_AITER"] == switch and got_env["HF_HUB_OFFLINE"] == "1"
    assert got_env["NCCL_IB_GID_INDEX"] == "3" and os.environ.get("VLLM_ROCM_USE_AITER") is None
