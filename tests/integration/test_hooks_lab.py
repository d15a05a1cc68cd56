"""`orch hooks install` on the 3-node lab (issue 26's must-show): the prolog refuses a node whose
certificate has expired, and the job runs elsewhere.

A short scale-test gives node1..node3 certificates (`orch cert issue`); node2's is then made
expired and sealed again (a self-consistent certificate that only its dates condemn). The hooks go
in through the role (ansible-runner over SSH, the lab's shared slurm.conf, `scontrol reconfigure`),
the scripts in a folder of the test's own (the lab's nodes see the host's /tmp) and calling each
node's /opt/orch/venv/bin/orch, the stack provisioned from orch's source. A job array of three
exclusive tasks is submitted: node2's prolog exits non-zero, Slurm drains node2 and, with
`nohold_on_prolog_fail`, requeues its task, which runs on node1 or node3; every task completes.
`orch hooks remove` gives slurm.conf back byte for byte. The epilog's `orch health --local` reads
planted, clean sources (the lab's nodes share the host's kernel log, which is not theirs).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import Lab, run

from orchestrator.certs.build import seal
from orchestrator.certs.service import cert_path, cert_text
from orchestrator.models.cert import Certificate

ORCH = [sys.executable, "-m", "orchestrator"]
SMALL = ["--nodes", "1,2,3", "--gpus-per-node", "1", "--collectives", "all_reduce", "--sizes", "1K:4K:x2",
         "--iters", "2", "--warmup", "1"]  # fmt: skip


def _orch(lab: Lab, *argv: str, timeout: float = 600) -> str:
    proc = run([*ORCH, *argv], env=lab.env, check=False, timeout=timeout)
    assert proc.returncode == 0, f"orch {' '.join(argv)}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc.stdout


def _expire(run_dir: Path, node: str) -> None:
    """Make NODE's certificate expired, its seal recomputed: only its dates are wrong."""
    path = cert_path(run_dir, node)
    cert = Certificate.model_validate_json(path.read_text())
    now = datetime.now(UTC)
    late = cert.model_copy(
        update={"issued_at": now - timedelta(days=40), "valid_until": now - timedelta(days=10)}
    )
    path.write_text(cert_text(seal(late)))


def _inventory(lab: Lab, tmp_path: Path) -> Path:
    """The lab's inventory with the hooks folder and clean health sources of the test's own."""
    clean = tmp_path / "clean"
    (clean / "sysfs" / "class" / "net" / "fab0").mkdir(parents=True)
    (clean / "sysfs" / "class" / "net" / "fab0" / "operstate").write_text("up\n")
    (clean / "tools").mkdir()
    (clean / "kern.log").write_text("")
    extra = [
        f"slurm_hooks_dir={tmp_path / 'hooks'}",
        f"orch_health_kernel_log={clean / 'kern.log'}",
        f"orch_health_sysfs={clean / 'sysfs'}",
        f"orch_health_tools_dir={clean / 'tools'}",
    ]
    lines = []
    for line in lab.inventory.read_text().splitlines():
        lines.append(line)
        if line.strip() == "[all:vars]":
            lines += extra
    inv = tmp_path / "lab-hooks.ini"
    inv.write_text("\n".join(lines) + "\n")
    return inv


def _tasks(lab: Lab, job: str) -> dict[str, tuple[str, str]]:
    """Each array task of JOB: (state, node), as the controller sees it now. A task requeued by a
    failed prolog waits for its BeginTime, which Slurm sets 121 s ahead (sacct: Eligible 2 min
    after the requeue, then up to a scheduler interval more: 149 s of this test): it is moved to
    now, as an operator would (`scontrol update StartTime=now`); where it runs is Slurm's choice."""
    out = lab.slurm("squeue", "--noheader", "--array", "-j", job, "-o", "%i %T %r", check=False).stdout
    for r in out.splitlines():
        if r.split()[1:] == ["PENDING", "BeginTime"]:
            lab.slurm("scontrol", "update", f"jobid={r.split()[0]}", "StartTime=now", check=False)
    out = lab.slurm("squeue", "--noheader", "--array", "-j", job, "-o", "%i %T %N", check=False).stdout
    rows = {r.split()[0]: (r.split()[1], (r.split()[2:] or [""])[0]) for r in out.splitlines() if r.strip()}
    acct = lab.slurm("sacct", "-j", job, "-X", "-n", "-P", "-o", "JobID,State,NodeList", check=False).stdout
    for r in acct.splitlines():
        jid, state, node = [*r.split("|"), "", ""][:3]
        word = (state.split() or [""])[0]
        if jid and jid not in rows and word in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"):
            rows[jid] = (word, node)
    return rows


def test_the_prolog_refuses_a_node_whose_certificate_expired_and_the_job_runs_elsewhere(
    lab: Lab, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    t = [time.monotonic()]
    _orch(lab, "scale-test", "-i", str(lab.inventory), "--plan", "smoke", *SMALL, "--out", str(runs))
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir() and (p / "result.json").exists()]
    _orch(lab, "cert", "issue", str(run_dir))
    _expire(run_dir, "node2")
    t.append(time.monotonic())
    inv = _inventory(lab, tmp_path)
    conf = lab.config.slurm_conf
    before = conf.read_bytes()
    job = ""
    try:
        _orch(lab, "hooks", "install", "-i", str(inv), "--cert-dir", str(runs), "--out", str(tmp_path / "h"))
        t.append(time.monotonic())
        text = conf.read_text()
        assert f"Prolog={tmp_path / 'hooks'}/prolog.sh" in text and "nohold_on_prolog_fail" in text, text
        # three tasks, a whole node each: one lands on node2 first, where the prolog refuses it
        job = lab.slurm("sbatch", "--parsable", "--array=0-2", "--exclusive", "-o", "/dev/null",
                        "--wrap", "sleep 2").stdout.strip().split(";")[0]  # fmt: skip
        deadline = time.monotonic() + 240
        tasks: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            tasks = _tasks(lab, job)
            if len(tasks) == 3 and all(s == "COMPLETED" for s, _ in tasks.values()):
                break
            time.sleep(2)
        assert sorted(s for s, _ in tasks.values()) == ["COMPLETED"] * 3, tasks
        assert {n for _, n in tasks.values()} <= {"node1", "node3"}, tasks
        t.append(time.monotonic())
        node2 = lab.slurm("scontrol", "show", "node", "-o", "node2").stdout
        assert "DRAIN" in node2 and "Prolog" in node2, node2
        print(f"\nhooks: job {job}: {tasks}; node2: {node2.split('Reason=', 1)[-1].strip()}")
    finally:
        if job:
            lab.slurm("scancel", job, check=False)
        removed = run([*ORCH, "hooks", "remove", "-i", str(inv), "--out", str(tmp_path / "h")],
                      env=lab.env, check=False, timeout=600)  # fmt: skip
        lab.slurm("scontrol", "update", "nodename=node2", "state=resume", check=False)
    assert removed.returncode == 0, removed.stdout[-3000:] + removed.stderr[-3000:]
    assert conf.read_bytes() == before  # byte for byte
    t.append(time.monotonic())
    names = ("certificates", "install", "job", "remove")
    walls = ", ".join(f"{w} {b - a:.1f} s" for w, a, b in zip(names, t[:-1], t[1:], strict=True))
    print(f"hooks: {walls}")
