"""orch provision / fingerprint against the session's 3-node lab (tests/integration/conftest.py brings
it up when none is healthy; skipped only without root)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestrator.lab.config import LabConfig

if TYPE_CHECKING:
    from conftest import Lab

REPO = Path(__file__).resolve().parents[2]
ORCH = str(Path(sys.executable).parent / "orch")
VENV = "/opt/orch/venv"
pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab_cfg(lab: Lab) -> LabConfig:
    return lab.config


def ssh(cfg: LabConfig, addr: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    argv = [
        "ssh",
        "-i",
        str(cfg.client_key),
        "-o",
        f"UserKnownHostsFile={cfg.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        f"root@{addr}",
        *cmd,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def orch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ORCH, *args], capture_output=True, text=True, timeout=900, check=False, cwd=REPO)


def test_cpu_gloo_provision_idempotent_and_fingerprint_drift(lab_cfg: LabConfig, tmp_path: Path) -> None:
    inv = str(lab_cfg.inventory_out)
    nodes = lab_cfg.node_specs
    # Not from nothing (that took 2.5 of CI's minutes): a venv built from nothing on every node is
    # test_migrate_lab.py's rollback (the venv removed, A installed again, certified). Here: the
    # first provision brings the nodes to cpu-gloo from whatever they hold, the second changes nothing.

    t0 = time.monotonic()
    first = orch("provision", "--inventory", inv, "--stack", "cpu-gloo", "--out", str(tmp_path))
    t1 = time.monotonic()
    assert first.returncode == 0, first.stdout + first.stderr
    for n in nodes:
        r = ssh(
            lab_cfg,
            n.mgmt_address,
            f"{VENV}/bin/python",
            "-c",
            "'import orchestrator.workloads.collbench, torch; print(torch.__version__)'",
        )
        assert r.returncode == 0 and r.stdout.startswith("2.13.0"), (n.name, r.stderr)

    t2 = time.monotonic()
    second = orch("provision", "--inventory", inv, "--stack", "cpu-gloo", "--out", str(tmp_path))
    t3 = time.monotonic()
    assert second.returncode == 0, second.stdout + second.stderr
    print(f"\nprovision cpu-gloo: first {t1 - t0:.1f} s, second {t3 - t2:.1f} s")
    events = sorted((tmp_path).glob("*-provision-*/ansible/artifacts/provision"))[-1]
    stats = [json.loads(f.read_text()) for f in (events / "job_events").glob("*.json")]
    final = next(e for e in stats if e.get("event") == "playbook_on_stats")["event_data"]
    assert all(final["changed"].get(n.name, 0) == 0 for n in nodes), final["changed"]
    assert all(final["ok"].get(n.name, 0) > 0 for n in nodes)

    def fingerprint(save: str) -> subprocess.CompletedProcess[str]:
        """orch fingerprint --json of the lab against cpu-gloo, saved to tmp_path/<save>.json."""
        return orch(
            "fingerprint", "--inventory", inv, "--stack", "cpu-gloo", "--json", "--out", str(tmp_path),
            "--save", str(tmp_path / f"{save}.json"),
        )  # fmt: skip

    fp = fingerprint("before")
    assert fp.returncode == 0, fp.stdout + fp.stderr
    doc = json.loads(fp.stdout)
    assert doc["compatible"] and all(v == "unchanged" for row in doc["matrix"].values() for v in row.values())

    victim = nodes[1]
    meta = f"{VENV}/lib/python3.11/site-packages/torch-2.13.0+cpu.dist-info/METADATA"
    assert ssh(lab_cfg, victim.mgmt_address, "cp", "-p", meta, meta + ".orch-test").returncode == 0
    try:
        r = ssh(
            lab_cfg,
            victim.mgmt_address,
            "sed",
            "-i",
            shlex.quote("s/^Version: 2.13.0+cpu$/Version: 2.12.0/"),
            meta,
        )
        assert r.returncode == 0
        fp2 = fingerprint("after")
        assert fp2.returncode == 1, fp2.stdout + fp2.stderr
        doc2 = json.loads(fp2.stdout)
        assert doc2["matrix"]["torch"][victim.name] == "needs porting"
        others = [n.name for n in nodes if n.name != victim.name]
        assert all(doc2["matrix"]["torch"][o] == "unchanged" for o in others)
        d = orch("fingerprint", "diff", str(tmp_path / "before.json"), str(tmp_path / "after.json"), "--json")
        assert d.returncode == 1
        changes = [(c["node"], c["field"], c["after"]) for c in json.loads(d.stdout)]
        assert changes[0] == (victim.name, "torch", "2.12.0")
        # the venv's package set (and its hash) sees the same edit
        fields = ("torch", "packages_hash", "packages")
        assert {(n, f) for n, f, _ in changes} == {(victim.name, f) for f in fields}
        assert (victim.name, "packages", "-torch==2.13.0+cpu +torch==2.12.0") in changes
        # scale-test refuses the steps that include the drifted node, before submitting anything
        ladder = ("scale-test", "--inventory", inv, "--stack", "cpu-gloo", "--gpus-per-node", "1",
                  "--collectives", "all_reduce", "--sizes", "64K")  # fmt: skip
        refused = orch(*ladder, "--out", str(tmp_path / "refused"))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"n2xg1 ({victim.name})" in refused.stderr and f"n3xg1 ({victim.name})" in refused.stderr
        assert "torch" in refused.stderr and "n1xg1" not in refused.stderr.split("include nodes")[0]
        (refused_dir,) = (tmp_path / "refused").glob("*-smoke-*")
        assert not (refused_dir / "steps" / "n1xg1" / "job.sbatch").exists()
        drift = json.loads((refused_dir / "drift.json").read_text())
        assert drift["nodes"][victim.name][0]["field"] == "torch"
        # ... and runs them with --allow-drift, carrying the drift into the steps' warnings
        allowed = orch(*ladder, "--allow-drift", "--out", str(tmp_path / "allowed"))
        assert allowed.returncode == 0, allowed.stdout + allowed.stderr
        (allowed_dir,) = (tmp_path / "allowed").glob("*-smoke-*")
        result = json.loads((allowed_dir / "result.json").read_text())
        warned = {s["step"]["id"]: any("torch" in w for w in s["warnings"]) for s in result["steps"]}
        assert warned == {"n1xg1": False, "n2xg1": True, "n3xg1": True}
    finally:
        ssh(lab_cfg, victim.mgmt_address, "mv", meta + ".orch-test", meta)
    assert (
        "2.13.0"
        in ssh(
            lab_cfg,
            victim.mgmt_address,
            f"{VENV}/bin/python",
            "-c",
            "'import importlib.metadata as m; print(m.version(\"torch\"))'",
        ).stdout
    )


@pytest.mark.parametrize("stack", ["rocm-6.2", "cuda-12.4"])
def test_gpu_stack_check_stops_each_host_with_one_line(
    lab_cfg: LabConfig, tmp_path: Path, stack: str
) -> None:
    r = orch(
        "provision",
        "--inventory",
        str(lab_cfg.inventory_out),
        "--stack",
        stack,
        "--check",
        "--out",
        str(tmp_path),
    )
    text = r.stdout + r.stderr
    assert r.returncode == 3, text
    assert "Traceback" not in text
    for n in lab_cfg.node_specs:
        assert any(n.name in ln and "failed" in ln for ln in r.stdout.splitlines()), text
    assert text.count("no supported GPU") >= len(lab_cfg.node_specs)
