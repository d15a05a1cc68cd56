"""At least 60 hostile values through every slot that reaches a command line: 0 executions.

Slots (issue 25, "Must show"): ssh options (the inventory's allow-list, inventory.ssh_option_problem),
sbatch options and the partition (JobSpec -> SlurmScheduler.submit, through a recording
CommandRunner), the ranks' argv (rendered into the sbatch script, which bash runs with a stand-in
srun; and allocation mode's srun argv, started without a shell), engine argv (ServingWorkload ->
engine_argv) and the interfaces that tc / ip / iptables get (Node -> the fault families' scripts,
run by bash with stand-in tc, ip and iptables).

Each value is either refused, by an error that names it, or arrives as exactly one argument of
the program; and the canary file every value tries to create never exists.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError
from test_injection import hostile as hostile50

from orchestrator.errors import OrchError
from orchestrator.faults.base import RECORD_ROOT
from orchestrator.faults.kinds import link, netfilter, tc
from orchestrator.inventory import ssh_option_problem
from orchestrator.models.cluster import Node
from orchestrator.models.fault import FaultParams
from orchestrator.models.serving import ServingWorkload
from orchestrator.remote.base import CmdResult
from orchestrator.scheduler.base import JobSpec
from orchestrator.scheduler.salloc import SallocScheduler
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.workloads.engines import engine_argv

TOOLS = ("srun", "tc", "ip", "iptables", "iptables-save", "iptables-restore", "flock")


def hostile(canary: str) -> list[str]:
    """test_injection's 50 values and 14 more: option injection aimed at sbatch, ssh and engines,
    path traversal, a lone NUL, a value of 100,000 characters."""
    c = canary
    more = [
        "--export=ALL", f"--wrap=touch {c}", "--uid=0", f"-o ProxyCommand=touch {c}", "-I/tmp/evil.so",
        "-oPKCS11Provider=/tmp/evil.so", "../../../../etc/shadow", f"../{c}", "--tensor-parallel-size=64",
        "-tp=64", "\x00", "x" * 100_000, f"$(touch {c})" * 50, "\u2212\u2212export=ALL",  # minus signs
    ]  # fmt: skip
    values = hostile50(c) + more
    assert len(values) >= 60 and len(set(values)) == len(values)
    return values


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder with stand-ins for srun, tc, ip, iptables: each writes its argv, one per line,
    NUL-separated, to $ARGS_OUT and exits 0."""
    d = tmp_path_factory.mktemp("hostile")
    (d / "bin").mkdir()
    for tool in TOOLS:
        stub = d / "bin" / tool
        # iptables -D fails, as on a host without the rule: the reverts' `while iptables -D` loops end.
        fail = 'for a in "$@"; do [ "$a" = -D ] && exit 1; done\n' if tool == "iptables" else ""
        if tool == "iptables-restore":  # its rules come on stdin: kept for the test to read
            fail = 'cat >> "$ARGS_OUT.restore"\n'
        stub.write_text(f'#!/bin/sh\nprintf "%s\\0" "$(basename "$0")" "$@" >> "$ARGS_OUT"\n{fail}')
        stub.chmod(0o755)
    yield d


def refused_naming(e: BaseException, value: str) -> bool:
    text = str(e)
    head = repr(value)[1:30] if value else ""
    return head in text or value[:30] in text


class Recorder:
    """A CommandRunner that runs nothing: it records each argv and answers like sbatch."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], *, timeout: float | None = None, **_: object) -> CmdResult:
        self.calls.append(list(argv))
        return CmdResult(argv=argv, rc=0, stdout="4242\n", stderr="", elapsed_s=0.0)


def run_script(bench: Path, script: str, work: Path) -> list[list[str]]:
    """Run script with bash, the stand-ins first on PATH; the commands they saw, each as argv
    (iptables-restore's rule lines as iptables argv). The node's record folder (/run/orch-fault)
    is moved into work: the test writes nothing outside it."""
    script = script.replace(RECORD_ROOT, str(work / "run-orch-fault"))
    out = work / "args"
    restore = Path(f"{out}.restore")
    out.unlink(missing_ok=True)
    restore.unlink(missing_ok=True)
    env = {"PATH": f"{bench / 'bin'}:/usr/bin:/bin", "ARGS_OUT": str(out), "HOME": str(work)}
    (work / "script.sh").write_text(script)  # a file: a value of 100,000 characters is too long for -c
    subprocess.run(["bash", "script.sh"], cwd=work, env=env, capture_output=True, timeout=60, check=False)
    calls: list[list[str]] = []
    words = out.read_bytes().split(b"\0")[:-1] if out.exists() else []
    for word in words:
        text = word.decode("utf-8", "surrogateescape")
        if text in TOOLS:
            calls.append([text])
        elif calls:
            calls[-1].append(text)
    if restore.exists():  # each rule line as iptables-restore splits it (quotes as a shell's)
        calls += [
            ["iptables", *shlex.split(ln)] for ln in restore.read_text().splitlines() if ln.startswith("-")
        ]
    return calls


def spec(tmp: Path, **over: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "orch-20260101T000000Z-smoke-ab12-n1xg1", "step_id": "n1xg1", "nodes": ["node1"], "nnodes": 1,
        "ranks_per_node": 1, "argv": ["python3", "-c", "pass"], "workdir": tmp / "steps" / "n1xg1",
    }  # fmt: skip
    base.update(over)
    return JobSpec.model_validate(base)


# --- the slots: each returns the argvs the value reached (a refusal raises) -------------------------


def slot_ssh_option(v: str, _tmp: Path, _bench: Path) -> list[list[str]]:
    for args in (["-o", v], [v]):
        if (why := ssh_option_problem(args)) is not None:
            raise ValueError(f"ssh option {v!r}: {why}")
    return [["ssh", "-o", v, "node1"]]


def slot_sbatch_option(v: str, tmp: Path, _bench: Path) -> list[list[str]]:
    runner = Recorder()
    for extra in ([v], [f"--comment={v}"]):
        SlurmScheduler(runner=runner).submit(spec(tmp, extra_args=extra))
    return runner.calls


def slot_partition(v: str, tmp: Path, _bench: Path) -> list[list[str]]:
    runner = Recorder()
    SlurmScheduler(runner=runner).submit(spec(tmp, partition=v))
    return runner.calls + [shlex.split(ln.removeprefix("#SBATCH ")) for ln in
                           (tmp / "steps" / "n1xg1" / "job.sbatch").read_text().splitlines()
                           if ln.startswith("#SBATCH")]  # fmt: skip


def slot_rank_argv_in_script(v: str, tmp: Path, bench: Path) -> list[list[str]]:
    s = spec(tmp, argv=["python3", v, "--", v])
    script = SlurmScheduler().render(s)
    return [c for c in run_script(bench, script, tmp) if c[0] == "srun"]


def slot_srun_argv(v: str, tmp: Path, _bench: Path) -> list[list[str]]:
    return [SallocScheduler.step_argv("77", spec(tmp, argv=["python3", v]))]


def slot_engine_argv(v: str, _tmp: Path, _bench: Path) -> list[list[str]]:
    w = ServingWorkload.model_validate(
        {"name": "chat", "engine": "vllm", "model": {"path": "/models/m", "name": "m"}, "engine_args": [v],
         "load": {"concurrency": [1], "input_tokens": {"kind": "fixed", "tokens": 8},
                  "output_tokens": {"kind": "fixed", "tokens": 8}, "requests": 10}}
    )  # fmt: skip
    return [engine_argv(w, bindir="/opt/vllm/bin", host="10.0.0.1", port=8000, gpu_vendor="amd")]


def slot_fault_iface(v: str, tmp: Path, bench: Path) -> list[list[str]]:
    node = Node(name="node1", address="198.18.0.1", rdma_ifaces=[v])
    iface = node.rdma_ifaces[0]
    actions = [link.link_down(iface), tc.throttle(iface, FaultParams()), tc.delay(iface, FaultParams()),
               netfilter.roce_drop(iface, "f1"), netfilter.packet_loss(iface, "f1", 0.1)]  # fmt: skip
    calls: list[list[str]] = []
    for a in actions:
        calls += run_script(bench, f"{a.inject}\n{a.revert}", tmp)
    return [c for c in calls if c[0] in ("tc", "ip", "iptables")]


SLOTS: dict[str, Callable[[str, Path, Path], list[list[str]]]] = {
    "ssh-option": slot_ssh_option,
    "sbatch-option": slot_sbatch_option,
    "sbatch-partition": slot_partition,
    "rank-argv-in-sbatch-script": slot_rank_argv_in_script,
    "srun-argv": slot_srun_argv,
    "engine-argv": slot_engine_argv,
    "tc-ip-iptables-iface": slot_fault_iface,
}
N_VALUES = len(hostile("C"))


@pytest.mark.parametrize("slot", sorted(SLOTS))
def test_no_hostile_value_runs_anything(slot: str, bench: Path, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    refused = carried = 0
    for i, v in enumerate(hostile(str(canary))):
        work = tmp_path / f"v{i:02d}"
        work.mkdir()
        try:
            argvs = SLOTS[slot](v, work, bench)
        except (ValidationError, OrchError, ValueError) as e:
            assert refused_naming(e, v), f"value {i} {v[:40]!r}: refused without naming it: {str(e)[:300]}"
            refused += 1
            continue
        # Carried: the value (or --comment=value) is exactly one argument of some command.
        words = [w for argv in argvs for w in argv]
        assert argvs and any(w == v or w.endswith(f"={v}") for w in words), (
            f"value {i} {v[:40]!r} lost: {argvs}"
        )
        for argv in argvs:
            assert not any(v in w and w != v and not w.endswith(f"={v}") for w in argv if len(v) > 2), (
                f"value {i} {v[:40]!r} split or merged: {argv}"
            )
        carried += 1
        assert not canary.exists(), f"value {i} {v[:40]!r} ran the canary in {slot}"
    if slot in (
        "rank-argv-in-sbatch-script",
        "srun-argv",
    ):  # quoted, not refused: all but the NULs reach srun
        assert carried == N_VALUES - 2, (refused, carried)
    assert refused + carried == N_VALUES >= 60
    assert not canary.exists()


def test_the_bench_sees_what_a_benign_value_does(bench: Path, tmp_path: Path) -> None:
    """The check can fail: a plain interface reaches tc/ip/iptables as one argument, and a script
    that does run `touch` would create the canary."""
    calls = slot_fault_iface("eth1", tmp_path, bench)
    assert ["ip", "link", "set", "dev", "eth1", "down"] in calls
    assert any(c[:3] == ["tc", "qdisc", "add"] and "eth1" in c for c in calls)
    assert any(c[0] == "iptables" and "eth1" in c for c in calls)
    canary = tmp_path / "CANARY"
    run_script(bench, f"touch {shlex.quote(str(canary))}", tmp_path)
    assert canary.exists()
