"""Secrets stay out of everything orch writes: a canary as an Ansible vault variable, a become
password and environment variables of the orch process (also NCCL_*/GLOO_* ones, which a stack's
environment passes on) is searched for, as bytes, after provision, fingerprint, scale-test and
every report format, and after SIGINT and SIGKILL of `orch provision` and `orch scale-test`.
Never brings the lab up or down; writes only under tmp_path (and, for the proof that the search
bites, one planted file at a time in each searched place, removed at once).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
from test_chaos_stages_lab import alive, journal, queued, run_dirs, wait_for

from orchestrator.provision.runner import PlaybookRequest, build_envvars

if TYPE_CHECKING:
    from collections.abc import Callable

    from conftest import Lab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ORCH = [sys.executable, "-m", "orchestrator"]
VAULT = str(Path(sys.executable).with_name("ansible-vault"))


def orch(lab: Lab, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, env=env, timeout=900)


def hits(root: Path, canaries: dict[str, str]) -> list[str]:
    """Every regular file under root whose bytes hold a canary as plain bytes."""
    found = []
    for p in sorted(q for q in root.rglob("*") if q.is_file() and not q.is_symlink()):
        try:
            data = p.read_bytes()
        except OSError:
            continue  # went away (another session's Ansible temp) or not readable as a file
        found += [f"{name} in {p.relative_to(root)}" for name, c in canaries.items() if c.encode() in data]
    return found


def test_canary_secrets_are_nowhere(lab: Lab, tmp_path: Path) -> None:
    tok = secrets.token_hex(8)
    canaries = {
        "vault-var": f"vaultcanary{tok}",
        "vault-password": f"vaultpw{tok}",
        "become-password": f"becomecanary{tok}",
        "env": f"envcanary{tok}",
        "nccl-env": f"ncclcanary{tok}",
        "gloo-env": f"ateloocanary{tok}",
    }
    inv_dir = tmp_path / "inv"
    (inv_dir / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(lab.inventory, inv_dir / "lab.ini")
    pw = tmp_path / "vault-pass"
    pw.write_text(canaries["vault-password"] + "\n")
    bp = tmp_path / "become-pass"
    bp.write_text(canaries["become-password"] + "\n")
    enc = subprocess.run(
        [VAULT, "encrypt_string", "--vault-password-file", str(pw), canaries["vault-var"],
         "--name", "site_canary"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (inv_dir / "group_vars" / "all" / "vault.yml").write_text(enc.stdout)
    inventory = str(inv_dir / "lab.ini")
    runs, store = tmp_path / "runs", tmp_path / "store" / "orch.db"
    env = {
        **lab.env,
        "ORCH_STORE": str(store),
        "ORCH_TEST_CANARY": canaries["env"],
        "NCCL_TEST_CANARY": canaries["nccl-env"],
        "GLOO_TEST_CANARY": canaries["gloo-env"],
    }
    # The vault variable is really decrypted (else the test would prove nothing about it).
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "-i", inventory, "node1", "-m", "debug",
         "-a", "var=site_canary", "--vault-password-file", str(pw)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert canaries["vault-var"] in shown.stdout

    prov = orch(lab, env, "provision", "-i", inventory, "--stack", "cpu-gloo", "--out", str(runs),
                "--vault-password-file", str(pw), "--become-password-file", str(bp))  # fmt: skip
    assert prov.returncode == 0, prov.stdout[-3000:] + prov.stderr
    fp = orch(lab, env, "fingerprint", "-i", inventory, "--stack", "cpu-gloo", "--out", str(runs))
    assert fp.returncode == 0, fp.stdout[-3000:] + fp.stderr
    st = orch(lab, env, "scale-test", "-i", inventory, "--gpus-per-node", "1", "--nodes", "1,2",
              "--sizes", "1K:4K:x2", "--out", str(runs))  # fmt: skip
    assert st.returncode in (0, 1), st.stdout[-3000:] + st.stderr
    run_dirs = [p for p in runs.iterdir() if (p / "journal.jsonl").exists() and "smoke" in p.name]
    assert run_dirs, list(runs.iterdir())
    reports = tmp_path / "reports"
    reports.mkdir()
    formats = (("html", "html"), ("md", "md"), ("json", "json"), ("junit", "xml"), ("openmetrics", "txt"))
    for fmt, ext in formats:
        rep = orch(lab, env, "report", str(run_dirs[0]), "-f", fmt, "-o", str(reports / f"r.{ext}"),
                   "--store", str(store))  # fmt: skip
        assert rep.returncode == 0, rep.stderr
        assert (reports / f"r.{ext}").stat().st_size > 0
    assert list(runs.rglob("artifacts")), "no ansible-runner artifacts to search (test would not bite)"
    assert store.exists()
    planted = tmp_path / "planted"  # the search itself bites
    planted.mkdir()
    (planted / "x.bin").write_bytes(b"\0" + canaries["env"].encode() + b"\0")
    assert hits(planted, canaries) == ["env in x.bin"]
    written = [runs, store.parent, reports]
    found = [h for root in written for h in hits(root, canaries)]
    outputs = prov.stdout + prov.stderr + fp.stdout + fp.stderr + st.stdout + st.stderr
    found += [f"{name} in console output" for name, c in canaries.items() if c in outputs]
    assert not found, found


# --- interrupted runs ------------------------------------------------------------------------------


def secret_env() -> dict[str, str]:
    """Canaries, random per test, under the names real secrets have."""
    tok = secrets.token_hex(8)
    return {
        "HF_TOKEN": f"hfcanary{tok}",
        "AWS_SECRET_ACCESS_KEY": f"awscanary{tok}",
        "NCCL_SOME_TOKEN": f"ncclcanary{tok}",
        "GLOO_SOME_SECRET": f"gloocanary{tok}",
        "ORCH_TEST_CANARY": f"orchcanary{tok}",
    }


def ansible_temp_dirs(work_dir: Path) -> dict[str, Path]:
    """The controller-side places outside the run folder that Ansible writes to, as orch sets them."""
    req = PlaybookRequest(playbook="p.yml", playbooks_dir=work_dir, inventory=work_dir, work_dir=work_dir)
    return {
        "ssh control dir": Path(build_envvars(req)["ANSIBLE_SSH_CONTROL_PATH_DIR"]),
        "~/.ansible/tmp": Path.home() / ".ansible" / "tmp",
    }


def node_hits(lab: Lab, canaries: dict[str, str], since: float) -> list[str]:
    """Files under each node's /tmp holding a canary, searched on the node over SSH: the files whose
    inode changed after ``since`` (epoch seconds), the only ones that can hold a canary drawn then
    (a write sets ctime, and nothing sets it back). The lab's nodes share the host's /tmp, where CI's
    checkouts and venvs lie: grep through all of it three times took minutes of a CI run."""
    pats = " ".join(f"-e {shlex.quote(c)}" for c in canaries.values())
    new = f"find /tmp -xdev -type f -newerct @{int(since)} -print0"
    found = []
    for node in lab.nodes:
        res = lab.ssh(node, f"{new} | xargs -0 -r grep -lsF --devices=skip {pats}; true")
        found += [f"{node.name}:{line}" for line in res.stdout.split()]
    return found


def playbooks(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The ansible-playbook processes (main and forked workers) among procs, alive ones only."""
    out = []
    for p in alive(procs):
        try:
            if "ansible-playbook" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _sid(p: psutil.Process) -> int | None:
    try:
        return os.getsid(p.pid)
    except OSError:
        return None


def gone(procs: list[psutil.Process]) -> bool:
    return not playbooks(procs)


def unqueued(lab: Lab, ids: list[str]) -> bool:
    return not queued(lab, ids)


def interrupt(proc: subprocess.Popen[bytes], sig: signal.Signals,
              ready: Callable[[list[psutil.Process]], bool],
              what: str) -> tuple[list[psutil.Process], dict[int, int | None]]:  # fmt: skip
    """Send sig to orch as soon as ready(its process tree); the ansible-playbook processes in
    that tree and each one's session, as they were then."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            tree = alive(psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            tree = []
        if ready(tree):
            ansible = playbooks(tree)
            sessions = {q.pid: _sid(q) for q in ansible}
            proc.send_signal(sig)
            return ansible, sessions
        assert proc.poll() is None, f"orch ended (exit {proc.returncode}) before {what}"
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def playing(out: Path, tree: list[psutil.Process]) -> bool:
    """ansible-runner wrote its command file and a worker runs a task: ansible-playbook processes
    in two sessions at least (each worker is a session of its own)."""
    if not list(out.glob("*/ansible/artifacts/*/command")):
        return False
    return len({_sid(q) for q in playbooks(tree)} - {None}) >= 2


def submitted(out: Path, tree: list[psutil.Process]) -> bool:
    """scale-test journaled its first step_submitted."""
    dirs = run_dirs(out)
    return bool(dirs) and any(e["event"] == "step_submitted" for e in journal(dirs[0]))


def test_interrupted_provision_and_scale_test_leave_no_secret(lab: Lab, tmp_path: Path) -> None:
    """SIGINT and SIGKILL during `orch provision` (while its play runs) and during `orch
    scale-test` (once a step is submitted), secrets in orch's environment: then no canary in the
    run folders (ansible-runner artifacts and ANSIBLE_LOCAL_TEMP included), the store, Ansible's
    temp and SSH control dirs, the console output, nor any node's /tmp; no ansible-playbook of a
    SIGINT'd provision is left running."""
    canaries = secret_env()
    since = time.time() - 2  # the canaries were drawn now; a file written before cannot hold one
    runs, store, logs = tmp_path / "runs", tmp_path / "store" / "orch.db", tmp_path / "logs"
    logs.mkdir()
    env = {**lab.env, **canaries, "ORCH_STORE": str(store), "PYTHONUNBUFFERED": "1"}
    inv = str(lab.inventory)
    procs: list[subprocess.Popen[bytes]] = []
    job_ids: list[str] = []

    def spawn(name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(logs / f"{name}.out", "wb") as out, open(logs / f"{name}.err", "wb") as err:
            p = subprocess.Popen([*ORCH, *args], env=env, stdout=out, stderr=err)
        procs.append(p)
        return p

    def err_tail(name: str) -> str:
        return (logs / f"{name}.err").read_text(errors="replace")[-2000:]

    try:
        for sig in (signal.SIGINT, signal.SIGKILL):
            name = f"provision-{sig.name}"
            p = spawn(name, "provision", "-i", inv, "--stack", "cpu-gloo", "--out", str(runs / name))
            ansible, sessions = interrupt(p, sig, partial(playing, runs / name), f"{name}: the play to start")
            # The premise: a worker in a session of its own, which a kill of one process group misses.
            ansible_sessions = {sessions[q.pid] for q in ansible} - {None}
            assert len(ansible_sessions) >= 2, f"{name}: no worker under orch at the signal"
            t0 = time.monotonic()
            if sig == signal.SIGINT:
                assert p.wait(timeout=60) == 130, err_tail(name)
                psutil.wait_procs(ansible, timeout=5)
                assert not playbooks(ansible), f"ansible-playbook outlived SIGINT: {playbooks(ansible)}"
            else:
                p.wait(timeout=10)
                wait_for(partial(gone, ansible), f"{name}: ansible-playbook to end", 60)
            print(f"{name}: {len(ansible)} ansible-playbook processes in {len(ansible_sessions)} "
                  f"sessions, all gone {time.monotonic() - t0:.1f} s after the signal")  # fmt: skip
        # An interrupted play may have stopped half-way: put the nodes back as other tests need them.
        again = subprocess.run(
            [*ORCH, "provision", "-i", inv, "--stack", "cpu-gloo", "--out", str(runs / "again")],
            env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        (logs / "again.out").write_text(again.stdout + again.stderr)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]

        for sig in (signal.SIGINT, signal.SIGKILL):
            name = f"scale-{sig.name}"
            p = spawn(name, "scale-test", "-i", inv, "--stack", "none", "--gpus-per-node", "1",
                      "--nodes", "2", "--sizes", "1M:16M:x4", "--out", str(runs / name))  # fmt: skip
            interrupt(p, sig, partial(submitted, runs / name), f"{name}: a step to be submitted")
            code = p.wait(timeout=120)
            (run_dir,) = run_dirs(runs / name)
            ids = [str(e["job_id"]) for e in journal(run_dir) if e["event"] == "step_submitted"]
            job_ids += ids
            if sig == signal.SIGINT:
                assert code == 130, err_tail(name)
            else:
                clean = subprocess.run([*ORCH, "runs", "cleanup", "--runs", str(runs / name)], env=env,
                                       capture_output=True, text=True, timeout=120)  # fmt: skip
                assert clean.returncode == 0, clean.stdout + clean.stderr
            wait_for(partial(unqueued, lab, ids), f"{name}: jobs {ids} to leave squeue", 60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        if job_ids and (left := queued(lab, job_ids)):
            lab.slurm("scancel", *left, check=False)

    places = {"run folders": runs, "store": store.parent, "console output": logs,
              **ansible_temp_dirs(runs / "x")}  # fmt: skip
    assert list(runs.glob("provision-SIGINT/*/ansible/artifacts/*/command")), "no command file to search"
    assert list(runs.glob("*/*/ansible/tmp")), "no ANSIBLE_LOCAL_TEMP under the run folders to search"
    assert store.exists()
    # The search bites: a canary planted in each place is found there, then removed.
    label, canary = next(iter(canaries.items()))
    for where, root in places.items():
        root.mkdir(parents=True, exist_ok=True)
        planted = root / f"orch-planted-{os.getpid()}-{secrets.token_hex(4)}"
        planted.write_bytes(b"\0" + canary.encode() + b"\0")
        try:
            assert f"{label} in {planted.name}" in hits(root, canaries), where
        finally:
            planted.unlink()
    for node in lab.nodes:
        spot = f"/tmp/orch-planted-{node.name}-{secrets.token_hex(4)}"
        lab.ssh(node, f"printf %s {shlex.quote(canary)} > {spot}")
        try:
            assert f"{node.name}:{spot}" in node_hits(lab, canaries, since), node.name
        finally:
            lab.ssh(node, "rm", "-f", spot)

    found = [f"{h} ({where})" for where, root in places.items() for h in hits(root, canaries)]
    found += node_hits(lab, canaries, since)
    assert not found, found
