"""bench/startup.py — how fast `orch` starts: `orch --help` and `orch check --quick NODE`.

Each command's wall time (spawn to exit, monotonic clock), best of N rounds, as a ratio to
`python3 -c pass` with the python3 on PATH (as the issue and /work/shared/tools/house define the
goal; where that is a pyenv shim, a shell script, it is slower than the interpreter itself), and
to `-c pass` of the interpreter that runs orch (the stricter ratio: orch's own cost). In each round
the commands run one after the other, in an order that rotates, so that a busy machine slows them
alike. orch runs as the console script does (`python -m orchestrator`, this checkout first on
PYTHONPATH).

`check --quick` runs as a Slurm prolog runs it on a node: no inventory, the fingerprint read on
this machine by the real probe, against a certificate this script writes into a temporary folder
(its fingerprint is the one the probe reads here, its stack cpu-gloo). The exit code is printed:
0 where this machine has the cpu-gloo venv, 1 (drift) elsewhere; the time covers the whole check.
The probe is a Python program of its own that starts the node's tools one after the other
(nvidia-smi, amd-smi, ibv_devinfo, the venv's Python, ...): it is timed alone too, run as the
check runs it, and `check --quick - probe` (the two best times subtracted) is orch's own part.
`check --quick, no cert` is what /work/shared/tools/house times: the check of a node without a
certificate (start-up, then the certificate search; exit 1, no probe).

Each row also gives the CPU time (user + system) of the command and its children, best of N:
on a shared machine it moves less with the load than the wall time.

Goals (issue 22): check --quick <= 6x, --help <= 15x, on orch's own part. Never part of the
pass/fail run.

Usage: .venv/bin/python bench/startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOALS = {"--help": 15.0, "check --quick - probe": 6.0, "check --quick, no cert": 6.0}
NODE = "benchnode"


def write_certificate(root: Path) -> None:
    """root/r1/certs/NODE.json: a sealed certificate of this machine's fingerprint now."""
    from orchestrator.certs.build import seal, stack_summary
    from orchestrator.certs.quick import this_machine
    from orchestrator.certs.service import cert_path, cert_text
    from orchestrator.models.cert import Certificate, CertTest
    from orchestrator.provision.quickprint import quick_fingerprint
    from orchestrator.remote.local import LocalShell
    from orchestrator.stacks import load_stack

    prints, failed = quick_fingerprint(
        this_machine(NODE), load_stack("cpu-gloo"), [NODE], shells={NODE: LocalShell()}
    )
    if failed:
        raise SystemExit(f"the fingerprint probe failed here: {failed[NODE]}")
    now = datetime.now(UTC)
    cert = Certificate(
        node=NODE, run_id="20261204T000000Z-bench-0000", plan="smoke", run_status="accepted",
        issued_at=now, valid_until=now + timedelta(days=1),
        stack=stack_summary("cpu-gloo", now, prints[NODE]),
        tests=[CertTest(step="n1xg1", collective="all_reduce", nnodes=1, ranks=1, metric="busbw_gbs",
                        measured=1.0, passed=True)],
    )  # fmt: skip
    path = cert_path(root / "r1", NODE)
    path.parent.mkdir(parents=True)
    path.write_text(cert_text(seal(cert)))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wall(argv: list[str], env: dict[str, str], stdin: Path | None = None) -> tuple[float, float, int]:
    """Wall time, CPU time (the command and its children) and exit code of one run."""
    with open(stdin or os.devnull, "rb") as inp:
        c0, t0 = _cpu(), time.perf_counter()
        rc = subprocess.run(argv, env=env, stdin=inp, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL).returncode  # fmt: skip
        return time.perf_counter() - t0, _cpu() - c0, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="rounds; the best of them counts")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    py = sys.executable
    python3 = shutil.which("python3") or py
    from orchestrator.provision.quickprint import PROBE
    from orchestrator.stacks import load_stack

    stack_py = load_stack("cpu-gloo").python
    probe_argv = probe_script_argv(py, stack_py.prefix if stack_py else "/opt/orch/venv")
    with tempfile.TemporaryDirectory(prefix="orch-startup-") as tmp:
        runs = Path(tmp) / "runs"
        write_certificate(runs)
        (Path(tmp) / "empty").mkdir()
        orch = [py, "-m", "orchestrator"]
        cmds: dict[str, tuple[list[str], Path | None]] = {
            "python3 -c pass": ([python3, "-c", "pass"], None),
            "orch's python -c pass": ([py, "-c", "pass"], None),
            "--help": ([*orch, "--help"], None),
            "check --quick": ([*orch, "check", "--quick", NODE, "--dir", str(runs)], None),
            "probe alone": (probe_argv, PROBE),
            "check --quick, no cert": ([*orch, "check", "--quick", NODE, "--dir", f"{tmp}/empty"], None),
        }
        walls: dict[str, list[float]] = {k: [] for k in cmds}
        cpus: dict[str, list[float]] = {k: [] for k in cmds}
        codes: dict[str, int] = {}
        names = list(cmds)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                w, c, codes[name] = wall(cmds[name][0], env, cmds[name][1])
                walls[name].append(w)
                cpus[name].append(c)
    base = min(walls["python3 -c pass"])
    bare, bare_cpu = min(walls["orch's python -c pass"]), min(cpus["orch's python -c pass"])
    own = min(walls["check --quick"]) - min(walls["probe alone"])
    own_cpu = min(cpus["check --quick"]) - min(cpus["probe alone"])
    load = os.getloadavg()[0]
    print(f"orch start-up, best of {args.rounds}, load average {load:.1f} at the end")
    print(f"python3 on PATH: {python3}; orch's python: {py}")
    print(
        f"{'command':<26} {'wall s':>7} {'median':>7} {'x python3':>9} {'x own py':>8} {'cpu s':>6} "
        f"{'x own py':>8} {'goal':>5} exit"
    )
    rows = [(n, min(walls[n]), statistics.median(walls[n]), min(cpus[n]), codes[n]) for n in cmds]
    rows.append(("check --quick - probe", own, float("nan"), own_cpu, codes["check --quick"]))
    met = True
    for name, w, med, c, code in rows:
        goal = GOALS.get(name)
        met &= goal is None or w / base <= goal
        print(f"{name:<26} {w:7.3f} {med:7.3f} {w / base:9.1f} {w / bare:8.1f} {c:6.3f} {c / bare_cpu:8.1f} "
              f"{'' if goal is None else f'<={goal:g}':>5} {code}")  # fmt: skip
    print("goals met" if met else "goals NOT met")
    return 0


def probe_script_argv(py: str, venv: str) -> list[str]:
    """The probe's command line as quickprint.probe_script writes it (its source on stdin)."""
    from orchestrator.provision.quickprint import DEFAULT_BENCH_DIR

    return [py, "-", "--venv", venv, "--bench-dir", DEFAULT_BENCH_DIR]


if __name__ == "__main__":
    sys.exit(main())
