"""bench/gpu_check.sh and bench/build_wheelhouse.py: what can be checked without a GPU.

The GPU machine is offline (shared/LAB-NOTES.md): the script must install from the carried
wheelhouse and must not reach for git or ldconfig; the wheelhouse must hold what orch and the
serving check need. The serving part itself needs transformers and torch, which this venv lacks;
it was run by hand with ORCH_GPU_CHECK_DEVICE=cpu (docs/benchmarks.md, "gpu_check.sh").
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
BUILDER = ROOT / "bench" / "build_wheelhouse.py"


def _code_lines(path: Path) -> list[str]:
    """The script's lines less comments (its header may name what it no longer does)."""
    return [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]


def test_gpu_check_reaches_for_nothing_the_offline_gpu_machine_lacks() -> None:
    code = "\n".join(_code_lines(SCRIPT))
    assert "git clone" not in code
    assert "ldconfig" not in code
    assert "--no-deps" not in code
    installs = [line for line in code.splitlines() if re.search(r"pip(_cmd\[@\]\}\")? install", line)]
    assert installs, "gpu_check.sh installs orch with pip"
    assert all("--no-index" in line for line in installs), installs


def _requirements_printed() -> list[str]:
    out = subprocess.run(
        [sys.executable, str(BUILDER), "--print-requirements"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return out.stdout.split()


def test_wheelhouse_requirements_are_pyprojects_and_the_serving_stacks() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    stack = yaml.safe_load((ROOT / "orchestrator/playbooks/stacks/cpu-serve.yaml").read_text())
    printed = _requirements_printed()
    assert printed == [*deps, *stack["python"]["packages"]]
    names = {re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].lower() for r in printed}
    # transformers serve needs fastapi and uvicorn; the model builder needs tokenizers.
    assert {"transformers", "tokenizers", "fastapi", "uvicorn"} <= names


def test_wheelhouse_leaves_out_none_of_its_own_requirements() -> None:
    """What is left out of the wheelhouse must be in the GPU image, never a direct requirement:
    a requirement left out would make the offline install fail there."""
    sys.path.insert(0, str(BUILDER.parent))
    try:
        import build_wheelhouse
    finally:
        sys.path.remove(str(BUILDER.parent))
    for req in _requirements_printed():
        name = build_wheelhouse.normalise(re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0])
        assert not build_wheelhouse.LEFT_OUT.match(name), req
    assert build_wheelhouse.LEFT_OUT.match("torch")
    assert build_wheelhouse.LEFT_OUT.match("nvidia-nccl-cu13")


def _run(env_extra: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_GPU_CHECK")}
    env.update({"PY": sys.executable, "WORK": str(tmp / "work"), **env_extra})
    return subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_gpu_check_fails_without_a_wheelhouse_and_skips_serving(tmp_path: Path) -> None:
    res = _run({"ORCH_GPU_CHECK_DEVICE": "cpu", "WHEELHOUSE": str(tmp_path / "none")}, tmp_path)
    out = res.stdout
    assert res.returncode == 1, out + res.stderr
    assert "gpu_check: SKIP gpu: ORCH_GPU_CHECK_DEVICE=cpu" in out
    assert f"gpu_check: FAIL install: no wheelhouse at {tmp_path / 'none'}" in out
    assert "gpu_check: SKIP serving: orch is not installed" in out
    assert "gpu_check: ok" not in out


def test_gpu_check_refuses_an_unknown_device(tmp_path: Path) -> None:
    res = _run({"ORCH_GPU_CHECK_DEVICE": "rocm"}, tmp_path)
    assert res.returncode == 2
    assert "ORCH_GPU_CHECK_DEVICE must be cuda or cpu, not 'rocm'" in res.stdout
