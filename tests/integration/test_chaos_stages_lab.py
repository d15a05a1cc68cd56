"""SIGKILL of orch during provision, collect and report on the running lab (issue 7, part 2).

Each test follows its own processes, jobs and files only: other sessions use the shared lab at the
same time. Never brings the lab up or down; what a test changes on a node is put back in `finally`.
After each kill: `orch fault sweep` exits 0, none of the test's jobs is in squeue and the store
(a private ORCH_STORE) lists its runs.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from conftest import Lab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ORCH = [sys.executable, "-m", "orchestrator"]
REPO = Path(__file__).resolve().parents[2]
STAMP = "/opt/orch/venv/orch-wheelhouse.SHA256SUMS"
REINSTALL_TASK = "Reinstall orch from a rebuilt wheelhouse"
CHILDREN_GONE_S = 30.0  # ansible-playbook, its workers and their ssh after orch is killed


def env_of(lab: Lab, tmp_path: Path) -> dict[str, str]:
    return {**lab.env, "ORCH_STORE": str(tmp_path / "orch.db"), "PYTHONUNBUFFERED": "1"}


def orch(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCH, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO, check=False
    )


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*ORCH, *args], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def journal(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line]


def wait_for(check: Callable[[], bool], what: str, deadline_s: float = 60) -> float:
    """Poll check until true; the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        if check():
            return time.monotonic() - t0
        time.sleep(0.25)
    pytest.fail(f"timed out after {deadline_s:g} s waiting for {what}")


def queued(lab: Lab, ids: list[str]) -> list[str]:
    out = lab.slurm("squeue", "--noheader", "-o", "%i").stdout.split()
    jobs = {i.partition(".")[0] for i in ids}  # allocation mode: step ALLOC.K is queued as ALLOC
    return [j for j in out if j in jobs]


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            pass
    return left


def assert_lab_clean(lab: Lab, env: dict[str, str], job_ids: list[str]) -> None:
    """No fault left on any node, none of the run's jobs queued, the store readable."""
    sweep = orch(env, "fault", "sweep", "-i", str(lab.inventory), timeout=120)
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    wait_for(lambda: not queued(lab, job_ids), f"jobs {job_ids} to leave squeue", 60)
    runs = orch(env, "runs", "list")
    assert runs.returncode == 0 and "Traceback" not in runs.stderr, runs.stdout + runs.stderr


def run_dirs(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if (p / "journal.jsonl").exists()] if root.exists() else []


# --- provision -------------------------------------------------------------------------------------


def started_tasks(out: Path) -> list[tuple[str, str]]:
    """(task, host) of every runner_on_start ansible-runner has written so far."""
    found = []
    for f in out.glob("*/ansible/artifacts/*/job_events/*.json"):
        try:
            ev = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # being written
        if ev.get("event") == "runner_on_start":
            data = ev.get("event_data") or {}
            found.append((str(data.get("task", "")), str(data.get("host", ""))))
    return found


def test_sigkill_during_provision_leaves_no_ansible_and_reprovision_works(lab: Lab, tmp_path: Path) -> None:
    """SIGKILL while node2 reinstalls orch's wheel: ansible-playbook, its workers and their ssh end
    within a bound, and a second provision exits 0 and leaves node2 stamped again."""
    env = env_of(lab, tmp_path)
    node2 = lab.node("node2")
    stamp = lab.ssh(node2, "cat", STAMP).stdout
    assert stamp.strip(), "node2 is not provisioned: nothing to reinstall"
    proc: subprocess.Popen[bytes] | None = None
    try:
        lab.ssh(node2, "rm", "-f", STAMP)  # the reinstall task now runs on node2
        proc = spawn(env, "provision", "-i", str(lab.inventory), "--stack", "cpu-gloo",
                     "--out", str(tmp_path / "p1"))  # fmt: skip
        wait_for(lambda: (REINSTALL_TASK, "node2") in started_tasks(tmp_path / "p1"),
                 "node2's reinstall task to start", 240)  # fmt: skip
        children = psutil.Process(proc.pid).children(recursive=True)
        names = [" ".join(c.cmdline()) for c in alive(children)]
        assert any("ansible-playbook" in n for n in names), f"no ansible-playbook under orch: {names}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        took = wait_for(lambda: not alive(children), "orch's ansible/ssh children to end", CHILDREN_GONE_S)
        print(f"children of the killed provision gone {took:.1f} s after SIGKILL: {len(children)}")
        again = orch(env, "provision", "-i", str(lab.inventory), "--stack", "cpu-gloo",
                     "--out", str(tmp_path / "p2"), timeout=900)  # fmt: skip
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert lab.ssh(node2, "cat", STAMP).stdout == stamp, "node2 not stamped after the 2nd provision"
        imp = lab.ssh(node2, "/opt/orch/venv/bin/python -c 'import orchestrator'", check=False)
        assert imp.returncode == 0, imp.stderr
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if lab.ssh(node2, "test", "-s", STAMP, check=False).returncode != 0:
            orch(env, "provision", "-i", str(lab.inventory), "--stack", "cpu-gloo", "--limit", "node2",
                 "--out", str(tmp_path / "restore"), timeout=900)  # fmt: skip
    assert_lab_clean(lab, env, [])


# --- collect ---------------------------------------------------------------------------------------


def test_sigkill_while_a_later_step_runs_then_cleanup_and_resume(lab: Lab, tmp_path: Path) -> None:
    """SIGKILL after step 1's step_done while step 2 is RUNNING: cleanup cancels step 2's job,
    resume finishes the run and keeps step 1 (its job id unchanged, not rerun)."""
    env = env_of(lab, tmp_path)
    out = tmp_path / "runs"
    proc = spawn(env, "scale-test", "-i", str(lab.inventory), "--gpus-per-node", "1", "--nodes", "1,2",
                 "--sizes", "1M:16M:x4", "--out", str(out))  # fmt: skip
    jobs: dict[str, str] = {}
    try:
        def second_running() -> bool:
            dirs = run_dirs(out)
            if not dirs:
                return False
            evs = journal(dirs[0])
            jobs.update({str(e["step"]): str(e["job_id"]) for e in evs if e["event"] == "step_submitted"})
            done = [e["step"] for e in evs if e["event"] == "step_done"]
            running = [e["step"] for e in evs if e["event"] == "step_state" and e["state"] == "RUNNING"]
            return done == ["n1xg1"] and "n2xg1" in running

        wait_for(second_running, "step n2xg1 RUNNING after n1xg1 done", 300)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    (run_dir,) = run_dirs(out)
    first_job, orphan = jobs["n1xg1"], jobs["n2xg1"]
    assert queued(lab, [orphan]), "step 2's job already left the queue: the kill did not land mid-step"
    clean = orch(env, "runs", "cleanup", "--runs", str(out))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert run_dir.name in clean.stdout and orphan in clean.stdout, clean.stdout
    wait_for(lambda: not queued(lab, [orphan]), f"orphan job {orphan} to leave squeue", 60)
    res = orch(env, "runs", "resume", str(run_dir), timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "accepted", result["status"]
    by_step = {s["step"]["id"]: s for s in result["steps"]}
    assert set(by_step) == {"n1xg1", "n2xg1"}, sorted(by_step)
    assert by_step["n1xg1"]["job_id"] == first_job, "step 1 was rerun"
    assert by_step["n2xg1"]["job_id"] != orphan, "step 2 kept the cancelled job"
    step1 = json.loads((run_dir / "steps" / "n1xg1" / "result.json").read_text())
    assert step1["job_id"] == first_job and step1["verdict"] == "pass"
    submitted = [e for e in journal(run_dir) if e["event"] == "step_submitted"]
    assert [e["step"] for e in submitted].count("n1xg1") == 1, "step 1 was submitted again"
    assert_lab_clean(lab, env, list(jobs.values()) + [str(e["job_id"]) for e in submitted])


# --- report ----------------------------------------------------------------------------------------


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("html", "body"):
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("html", "body") and self.open and self.open[-1] == tag:
            self.open.pop()


def complete_html(text: str) -> bool:
    parser = _Html()
    parser.feed(text)
    parser.close()
    return text.rstrip().endswith("</html>") and not parser.open


KILLS = 25


def test_sigkill_during_report_never_leaves_a_truncated_file(lab: Lab, tmp_path: Path) -> None:
    """A good report first; then SIGKILL of a second report run to the same file, at random small
    delays: the file is always the whole of one report (ends with </html>, html/body closed)."""
    env = env_of(lab, tmp_path)
    out = tmp_path / "runs"
    run = orch(env, "scale-test", "-i", str(lab.inventory), "--gpus-per-node", "1", "--nodes", "1",
               "--sizes", "1K:4K:x2", "--out", str(out))  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (run_dir,) = run_dirs(out)
    target = tmp_path / "report.html"
    times = []
    for _ in range(3):  # the shortest of three whole runs sets the kill window
        t0 = time.monotonic()
        good = orch(env, "report", str(run_dir), "--format", "html", "-o", str(target))
        times.append(time.monotonic() - t0)
        assert good.returncode == 0, good.stderr
    full_s = min(times)
    assert complete_html(target.read_text()), "the good report is not complete HTML"
    rng = random.Random(7)
    mid_run = 0
    for i in range(KILLS):
        proc = spawn(env, "report", str(run_dir), "--format", "html", "-o", str(target))
        time.sleep(rng.uniform(0.2 * full_s, 1.0 * full_s))
        if proc.poll() is None:
            mid_run += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        text = target.read_text()
        assert complete_html(text), f"kill {i}: {target} is not a whole report ({len(text)} bytes)"
    leftovers = sorted(p.name for p in tmp_path.glob(f".{target.name}.*.tmp"))
    print(f"{mid_run}/{KILLS} kills landed while the report ran; temp files left: {leftovers}")
    assert mid_run >= KILLS // 3, f"only {mid_run} kills landed mid-run: widen the window"
    assert_lab_clean(lab, env, [str(e["job_id"]) for e in journal(run_dir) if "job_id" in e])
