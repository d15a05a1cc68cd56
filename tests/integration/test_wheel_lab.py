"""orch installed from its wheel, run from outside the checkout, against the lab.

Builds orch's wheel (`pip wheel --no-deps` of a clean copy of the tree), installs it into a fresh
venv in a temporary folder (no system site packages, so the shared venv's editable install is out
of sight; the dependencies come from the wheelhouse the lab fixture's provisioning built, offline),
then runs that venv's `orch` from a folder outside the checkout with PYTHONPATH unset: provision,
scale-test and recovery-test. The venv is built once per session. About 1.5 minutes on a
provisioned lab (33-36 s to build and install, 33-48 s for provision and scale-test), before the
recovery-test step runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class WheelInstall:
    wheel: Path
    venv: Path
    work: Path  # the cwd of every command: outside the checkout
    env: dict[str, str]

    def orch(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "orch"), *args],
            capture_output=True, text=True, env=self.env, cwd=self.work, timeout=timeout, check=False,
        )  # fmt: skip

    def python(self, code: str) -> str:
        proc = subprocess.run(
            [str(self.venv / "bin" / "python"), "-c", code],
            capture_output=True, text=True, env=self.env, cwd=self.work, timeout=60, check=True,
        )  # fmt: skip
        return proc.stdout.strip()


def _run(argv: list[str], cwd: Path | None = None) -> None:
    # Without PYTHONPATH: pip would take the checkout on it (with its orch.egg-info) for an
    # installed orch, and skip the wheel ("Requirement already satisfied").
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=300, check=False)
    assert proc.returncode == 0, f"{argv}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="session")
def installed(lab: Lab) -> Iterator[WheelInstall]:
    """orch's wheel in a fresh venv outside the checkout (after the lab fixture has provisioned).

    In a folder of its own, not pytest's tmp_path: other pytest sessions of the same user prune
    pytest's old base folders, this one included, while this session still runs.
    """
    with tempfile.TemporaryDirectory(prefix="orch-wheel-") as tmp:
        yield _install(lab, Path(tmp))


def _install(lab: Lab, root: Path) -> WheelInstall:
    assert not root.resolve().is_relative_to(REPO)
    dist, venv, work = root / "dist", root / "venv", root / "work"
    work.mkdir()
    # From a clean copy of what the build reads: setuptools builds in the tree's build/, and a file
    # left in build/lib by an older build (a module since moved) would go into the wheel (seen).
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "orchestrator", src / "orchestrator", ignore=shutil.ignore_patterns("__pycache__"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(src)])
    (wheel,) = dist.glob("orch-*.whl")
    _run([sys.executable, "-m", "venv", str(venv)])
    # orch's dependencies, offline: the lab fixture's `orch provision` left them (with torch) in the
    # cpu-gloo wheelhouse, built by pip from the same pyproject.
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    _run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-index", "--find-links",
          str(cache / "orch" / "wheelhouse" / "cpu-gloo"), str(wheel)], cwd=work)  # fmt: skip
    env = {
        **lab.env,  # SLURM_CONF and a plain PATH: no venv, no PYTHONPATH, no ORCH_* variables
        # provision's wheelhouse goes here: the checkout's own (built from the tree) stays as it is
        "XDG_CACHE_HOME": str(root / "cache"),
    }
    assert "PYTHONPATH" not in env and "ORCH_WHEEL" not in env
    return WheelInstall(wheel=wheel, venv=venv, work=work, env=env)


def _one_run(runs: Path) -> Path:
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    return run


def _journal(run: Path) -> list[str]:
    return [json.loads(line)["event"] for line in (run / "journal.jsonl").read_text().splitlines()]


def test_the_installed_wheel_is_what_runs(installed: WheelInstall) -> None:
    where = Path(installed.python("import orchestrator; print(orchestrator.__file__)"))
    assert where.is_relative_to(installed.venv), where
    # no source tree there: the nodes' orch is the very wheel it was installed from (direct_url.json)
    src = installed.python(
        "from orchestrator.provision import orchwheel; s = orchwheel.resolve(); print(s.kind, s.path)"
    )
    assert src == f"wheel {installed.wheel}"


def test_provision_and_scale_test_from_the_wheel(lab: Lab, installed: WheelInstall) -> None:
    runs = installed.work / "runs"
    prov = installed.orch("provision", "-i", str(lab.inventory), "--stack", "cpu-gloo", "--out", str(runs))
    assert prov.returncode == 0, prov.stdout[-3000:] + prov.stderr[-3000:]
    run = _one_run(runs)
    assert (run / "ansible" / "artifacts" / "provision" / "rc").read_text().strip() == "0"
    # every node's venv was installed from this wheelhouse, which holds this wheel
    wheelhouse = installed.work.parent / "cache" / "orch" / "wheelhouse" / "cpu-gloo"
    sums = (wheelhouse / "SHA256SUMS").read_text()
    wheel_sha = hashlib.sha256(installed.wheel.read_bytes()).hexdigest()
    assert f"{wheel_sha}  {installed.wheel.name}" in sums
    for node in lab.nodes:
        assert lab.ssh(node, "cat", "/opt/orch/venv/orch-wheelhouse.SHA256SUMS").stdout == sums

    runs = installed.work / "scale-runs"
    st = installed.orch("scale-test", "-i", str(lab.inventory), "--plan", "smoke", "--gpus-per-node", "1",
                        "--nodes", "1,2", "--out", str(runs))  # fmt: skip
    assert st.returncode == 0, st.stdout[-3000:] + st.stderr[-3000:]
    run = _one_run(runs)
    result = json.loads((run / "result.json").read_text())
    assert [s["step"]["id"] for s in result["steps"]] == ["n1xg1", "n2xg1"]
    assert all(s["rows"] for s in result["steps"])
    assert _journal(run)[-1] == "run_finished"


def test_recovery_test_from_the_wheel(lab: Lab, installed: WheelInstall) -> None:
    runs = installed.work / "recovery-runs"
    rt = installed.orch("recovery-test", "-i", str(lab.inventory), "--fault", "kill-worker",
                        "--target", "node2:3", "--repeat", "1", "--out", str(runs))  # fmt: skip
    assert rt.returncode == 0, rt.stdout[-3000:] + rt.stderr[-3000:]
    run = _one_run(runs)
    events = _journal(run)
    assert events[-1] == "run_finished" and events.count("recovery_done") == 1
    (record,) = (json.loads(p.read_text()) for p in (run / "recovery").glob("*.json"))
    assert record["verdict"] == "recovered"
