"""`orch hooks install|remove` on the 3-node lab (issue 26's must-show): with orch's prolog in
slurm.conf, a node whose certificate expired is refused by the prolog (Slurm drains it and, with
nohold_on_prolog_fail, requeues the job without holding it), and a 3-task job array completes on
the other nodes; `orch hooks remove` gives slurm.conf back byte for byte.

The certificates come from a short scale-test of the three nodes; node2's is then replaced by one
issued three days ago for one day (self-consistent: "expired", not "edited"). The scripts, the
certificates and the health sources live under /var/tmp, which the lab's nodes share (they share
one kernel too: each node's health check reads one planted clean kernel log and sysfs tree, so
that the machine's own kernel log drains nothing).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import REPO, Lab

from orchestrator.certs.service import cert_path, issue
from orchestrator.lab.config import PARTITION

ROOT = Path("/var/tmp/orch-hooks-test")
PLAN = """\
name: hooks3
ladder: {nodes: [3], ranks_per_node: [1]}
collectives: [all_reduce]
sizes: {min: 1M, max: 1M}
warmup_iters: 1
iters: 3
step_timeout_s: 60
thresholds:
  busbw: [{collective: all_reduce, min_gbs: 0.001}]
"""


def _orch(lab: Lab, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=lab.env, timeout=timeout, check=False, cwd=REPO)  # fmt: skip


def _inventory(lab: Lab) -> Path:
    """The lab's inventory with the hooks' folder and one clean set of health sources."""
    src = ROOT / "health"
    (src / "sysfs" / "class" / "net" / "fab0").mkdir(parents=True)
    (src / "sysfs" / "class" / "net" / "fab0" / "operstate").write_text("up\n")
    (src / "tools").mkdir()
    (src / "kern.log").write_text("")
    lines = []
    for line in lab.inventory.read_text().splitlines():
        lines.append(line)
        if line.strip() == "[all:vars]":
            lines += [f"slurm_hooks_dir={ROOT}/hooks", f"orch_health_kernel_log={src}/kern.log",
                      f"orch_health_sysfs={src}/sysfs", f"orch_health_tools_dir={src}/tools"]  # fmt: skip
    inv = ROOT / "lab-hooks.ini"
    inv.write_text("\n".join(lines) + "\n")
    return inv


def _certify(lab: Lab, inv: Path) -> Path:
    """A finished run of the three nodes, certified; node2's certificate replaced by an expired one."""
    plan = ROOT / "hooks3.yaml"
    plan.write_text(PLAN)
    runs = ROOT / "runs"
    done = _orch(lab, "scale-test", "-i", str(inv), "--plan", str(plan), "--out", str(runs))
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = next(p for p in runs.iterdir() if p.is_dir() and "hooks3" in p.name)
    old = issue(run_dir, now=datetime.now(UTC) - timedelta(days=3), valid_days=1)
    expired = Path(old.issued["node2"]).read_text()
    fresh = _orch(lab, "cert", "issue", str(run_dir))
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    cert_path(run_dir, "node2").write_text(expired)
    return runs


def _wait_configured(lab: Lab, want: bool, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conf = lab.slurm("scontrol", "show", "config", check=False).stdout
        has = f"{ROOT}/hooks/prolog.sh" in conf
        if has == want:
            return
        time.sleep(1)
    raise AssertionError(f"slurmctld did not {'take' if want else 'drop'} orch's Prolog= in {timeout_s} s")


def test_an_expired_node_is_refused_by_the_prolog_and_the_array_runs_elsewhere(lab: Lab) -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    conf = lab.config.slurm_conf
    before = conf.read_bytes()
    inv = _inventory(lab)
    runs = _certify(lab, inv)
    try:
        dry = _orch(
            lab, "hooks", "install", "-i", str(inv), "--cert-dir", str(runs), "--check", "--out", str(ROOT)
        )
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert f"+Prolog={ROOT}/hooks/prolog.sh" in dry.stdout and conf.read_bytes() == before

        got = _orch(lab, "hooks", "install", "-i", str(inv), "--cert-dir", str(runs), "--out", str(ROOT))
        assert got.returncode == 0, got.stdout + got.stderr
        _wait_configured(lab, True)

        out = ROOT / "out"
        out.mkdir()
        sub = lab.slurm("sbatch", "--parsable", "--array=1-3", "-N1", "-n1", "-p", PARTITION,
                        f"--output={out}/task-%a.txt", "--wrap", 'echo "$SLURMD_NODENAME"')  # fmt: skip
        job = sub.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 240
        states: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            acct = lab.slurm(
                "sacct", "-X", "-n", "-P", "-j", job, "--format=JobID,State,NodeList", check=False
            )
            states = {r[0]: (r[1], r[2]) for ln in acct.stdout.splitlines() if len(r := ln.split("|")) == 3}
            if len(states) == 3 and all(s == "COMPLETED" for s, _ in states.values()):
                break
            time.sleep(2)
        assert len(states) == 3 and all(s == "COMPLETED" for s, _ in states.values()), states
        assert all(n in ("node1", "node3") for _, n in states.values()), states
        ran = {p.read_text().strip() for p in out.glob("task-*.txt")}
        assert ran and ran <= {"node1", "node3"}, ran
        node2 = lab.slurm("sinfo", "-h", "-N", "-n", "node2", "-o", "%T|%E").stdout
        assert node2.startswith("drain"), node2  # Slurm's doing, on the prolog's exit code
    finally:
        gone = _orch(lab, "hooks", "remove", "-i", str(inv), "--out", str(ROOT))
        lab.slurm("scontrol", "update", "nodename=node2", "state=resume", check=False)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert conf.read_bytes() == before
    _wait_configured(lab, False)
