"""orch against its own failures on the running lab: SIGKILL mid-stage, a cut-off node, a full disk.

Never brings the lab up or down; restores every change (links, mounts, jobs) in `finally`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ORCH = [sys.executable, "-m", "orchestrator"]
WORKLOAD_MARKERS = ("orchestrator.workloads.collbench", "orchestrator.workloads.probe")


def orch(lab: Lab, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, env=lab.env, timeout=timeout)


def journal(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def wait_for(check: object, what: str, deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def workload_pids() -> list[int]:
    """collbench / probe processes anywhere on the machine (every lab node shares the PID space)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if any(m in cmd for m in WORKLOAD_MARKERS):
            found.append(p.info["pid"])
    return found


def node_net_state(lab: Lab) -> dict[str, str]:
    """iptables rules, qdiscs and link states of every node namespace."""
    state = {}
    for n in lab.nodes:
        ns = ["ip", "netns", "exec", f"orch-{n.name}"]
        ipt = subprocess.run([*ns, "iptables", "-S"], capture_output=True, text=True).stdout
        tc = subprocess.run([*ns, "tc", "qdisc", "show"], capture_output=True, text=True).stdout
        links = subprocess.run([*ns, "ip", "-br", "link"], capture_output=True, text=True).stdout
        brief = sorted(" ".join(ln.split()[:2]) for ln in links.splitlines())
        state[n.name] = ipt + tc + "\n".join(brief)
    return state


def orch_jobs(lab: Lab, ids: list[str] | None = None) -> list[str]:
    out = lab.slurm("squeue", "--noheader", "-o", "%i %j").stdout
    mine = [ln.split()[0] for ln in out.splitlines() if " orch-" in ln]
    jobs = {i.partition(".")[0] for i in ids or []}  # allocation mode: step ALLOC.K is queued as ALLOC
    return [j for j in mine if ids is None or j in jobs]


@pytest.fixture(autouse=True)
def _no_orch_jobs_left(lab: Lab) -> None:
    ids = orch_jobs(lab)
    if ids:
        lab.slurm("scancel", *ids)


def test_sigkill_during_submit_then_cleanup_leaves_no_orphan(lab: Lab, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*ORCH, "scale-test", "-i", str(lab.inventory), "--gpus-per-node", "1", "--sizes", "1M:64M:x4",
         "--out", str(tmp_path)], env={**lab.env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    submitted: list[str] = []
    try:
        def has_job() -> bool:
            dirs = [p for p in tmp_path.iterdir() if (p / "journal.jsonl").exists()]
            if dirs:
                submitted[:] = [str(e["job_id"]) for e in journal(dirs[0]) if e["event"] == "step_submitted"]
            return bool(submitted)

        wait_for(has_job, "a submitted step", 180)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert orch_jobs(lab, submitted), "SIGKILL left no job behind: nothing to clean (test did not bite)"
    res = orch(lab, "runs", "cleanup", "--runs", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert run_dir.name in res.stdout
    wait_for(lambda: not orch_jobs(lab, submitted), "the orphan jobs to leave the queue")
    wait_for(lambda: not workload_pids(), "collbench processes to end on the nodes")
    assert "no orphan jobs" in orch(lab, "runs", "cleanup", "--runs", str(tmp_path)).stdout
    show = orch(lab, "runs", "show", str(run_dir))
    assert show.returncode == 0 and "interrupted" in show.stdout, show.stdout + show.stderr


def node_ns(node: str, *argv: str) -> str:
    argv = ("ip", "netns", "exec", f"orch-{node}", *argv)
    return subprocess.run(argv, capture_output=True, text=True).stdout


def own_records(node: str, fid: str) -> list[str]:
    return sorted(p.name for p in Path(f"/run/orch-fault/{node}").glob(f"{fid}.*"))


@pytest.mark.parametrize(
    ("kind", "node", "active", "gone"),
    [
        # Only this fault's own traces are checked: other sessions inject on the shared lab too.
        ("roce-drop", "node2", lambda fid: f"orch:{fid}" in node_ns("node2", "iptables", "-S"),
         lambda fid: f"orch:{fid}" not in node_ns("node2", "iptables", "-S")),
        ("link-down", "node3", lambda fid: "state DOWN" in node_ns("node3", "ip", "link", "show", "fab0"),
         lambda fid: "state DOWN" not in node_ns("node3", "ip", "link", "show", "fab0")),
    ],
)  # fmt: skip
def test_sigkill_during_fault_inject_node_timer_reverts(
    lab: Lab, tmp_path: Path, kind: str, node: str, active: object, gone: object
) -> None:
    """SIGKILL of `orch fault inject` mid-fault: the node's timer reverts it and removes its record."""
    duration_s, margin_s = 6.0, 2.0
    proc = subprocess.Popen(
        [*ORCH, "fault", "inject", "--kind", kind, "--target", f"{node}:fab0",
         "--duration", f"{duration_s:g}s", "--margin", f"{margin_s:g}", "-i", str(lab.inventory),
         "--runs", str(tmp_path)], env=lab.env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    fid = ""
    try:
        def injected() -> bool:
            nonlocal fid
            for rec in tmp_path.glob("*/faults/*.json"):
                data = json.loads(rec.read_text())
                if data["outcome"] == "active":
                    fid = data["id"]
            return bool(fid)

        wait_for(injected, "the fault to be active", 60)
        assert active(fid), f"{kind} {fid} is not in effect on {node}"  # type: ignore[operator]
        assert own_records(node, fid) == [f"{fid}.revert", f"{fid}.timer"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # The node-side timer fires duration + margin after the inject, without orch.
        bound = duration_s + margin_s + 10
        wait_for(lambda: gone(fid) and not own_records(node, fid), "the node-side timer", bound)  # type: ignore[operator]
    finally:
        if proc.poll() is None:
            proc.kill()
    sweep = orch(lab, "fault", "sweep", "-i", str(lab.inventory))
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    assert fid not in sweep.stdout, sweep.stdout
    assert gone(fid)  # type: ignore[operator]


def test_unreachable_node_is_named_and_the_others_finish(lab: Lab) -> None:
    link = "orch-m3"
    assert subprocess.run(["ip", "link", "show", link], capture_output=True).returncode == 0
    try:
        subprocess.run(["ip", "link", "set", link, "down"], check=True)
        sweep = orch(lab, "fault", "sweep", "-i", str(lab.inventory), timeout=120)
    finally:
        subprocess.run(["ip", "link", "set", link, "up"], check=True)
    assert sweep.returncode == 3, sweep.stdout + sweep.stderr
    text = sweep.stdout + sweep.stderr
    assert "node1: clean" in text and "node2: clean" in text, text
    assert "node3" in text and "unreachable" in text.lower(), text
    wait_for(lambda: lab.ssh(lab.node("node3"), "true", check=False).returncode == 0, "node3 back", 60)


def test_full_disk_in_run_directory(lab: Lab, tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        (mnt / "filler").write_bytes(b"\0" * (free - 48 * 1024))  # room for the start, not the run
        res = orch(lab, "scale-test", "-i", str(lab.inventory), "--gpus-per-node", "1", "--nodes", "1",
                   "--sizes", "1K:4K:x2", "--out", str(mnt / "runs"))  # fmt: skip
        assert res.returncode == 3, res.stdout + res.stderr
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "No space left" in errors[0] or "ENOSPC" in errors[0] or "space" in errors[0], errors
        # scale-test opens the results store (in --out) before it makes the run folder: a disk that
        # is full then is refused before the run exists (no half run left in `runs list`); a run
        # folder that was made must read back whole.
        runs = [p for p in (mnt / "runs").iterdir() if p.is_dir()] if (mnt / "runs").exists() else []
        for run_dir in runs:
            events = journal(run_dir)  # every line parses
            assert events and events[0]["event"] == "run_started"
            show = orch(lab, "runs", "show", str(run_dir))
            assert show.returncode == 0, show.stdout + show.stderr
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    assert orch_jobs(lab) == []


CONNECT_TIMEOUT_S = 10.0  # Ansible's and the kept-open shells' connect timeout
MARGIN_S = 50.0  # process start, Ansible fork, the reachable nodes' own work on a shared 2-core lab


def test_unreachable_node_for_fingerprint_and_scale_test(lab: Lab, tmp_path: Path) -> None:
    """node3's management link down: fingerprint names it and reads node1/2; steps that do not
    use node3 run and pass; a step that needs it is an infrastructure error naming node3."""
    link = "orch-m3"
    timed: dict[str, tuple[subprocess.CompletedProcess[str], float]] = {}

    def run(name: str, *args: str) -> None:
        t0 = time.monotonic()
        res = orch(lab, *args, "--out", str(tmp_path / name), timeout=300)
        timed[name] = (res, time.monotonic() - t0)

    small = ("--gpus-per-node", "1", "--sizes", "1K:4K:x2")
    try:
        subprocess.run(["ip", "link", "set", link, "down"], check=True)
        run("fp", "fingerprint", "-i", str(lab.inventory), "--stack", "cpu-gloo")
        run("st12", "scale-test", "-i", str(lab.inventory), "--nodes", "1,2", *small)
        run("st3", "scale-test", "-i", str(lab.inventory), "--nodes", "3", *small)
    finally:
        subprocess.run(["ip", "link", "set", link, "up"], check=True)
    fp, fp_s = timed["fp"]
    text = fp.stdout + fp.stderr
    assert fp.returncode == 3, text
    assert fp_s < CONNECT_TIMEOUT_S + MARGIN_S, fp_s
    words = [ln.split() for ln in text.splitlines()]
    rows = {w[1]: w[0] for w in words if len(w) > 1 and w[0] in ("ok", "unreachable")}
    assert rows.get("node3") == "unreachable" and rows.get("node1") == rows.get("node2") == "ok", text
    assert "node1 — unchanged" in text and "node2 — unchanged" in text, text
    st12, _ = timed["st12"]
    assert st12.returncode == 0, st12.stdout[-3000:] + st12.stderr
    assert "verdict: accepted" in st12.stdout
    st3, st3_s = timed["st3"]
    assert st3.returncode == 3, st3.stdout[-3000:] + st3.stderr
    errors = [ln for ln in st3.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "node3" in errors[0] and "Traceback" not in st3.stderr, st3.stderr
    assert st3_s < CONNECT_TIMEOUT_S + MARGIN_S, st3_s
    wait_for(lambda: lab.ssh(lab.node("node3"), "true", check=False).returncode == 0, "node3 back", 60)
