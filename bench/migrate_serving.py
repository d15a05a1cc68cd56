"""Issue 23's must-shows 2 and 3 on the lab: a service migration between cpu-serve variants.

    .venv/bin/python bench/migrate_serving.py [--inventory INV] [--same 3] [--rounds 2] [--no-slower]

On node1 and node2 of a running lab (the lab's inventory less node3), with
docs/examples/migrate-serve-lab.yaml:

- must-show 2, B keeps numerics but is slower (`cpu-serve:fp32` -> `cpu-serve:fp32-small-kv`, 4
  KV-cache blocks): the quality gate passes, the serving compare fails naming level and figure, the
  run rolls back;
- must-show 3, A -> A (`cpu-serve:fp32` -> `cpu-serve:fp32`), `--same` times: quality at its floor,
  the compare flags nothing, every run passes.

node1 and node2 get cpu-serve first (seconds when they have it) and cpu-gloo again at the end, as
`make bench`'s other scripts expect. Prints each run's phases, quality figures, the compare's
figures per level (B against A with the A-against-A band and n) and wall time; exits 1 when a
must-show is not met. Not part of the test run (tests/integration/test_migrate_serving_lab.py has
must-shows 1 and 4 in CI).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _lab import slurm_env, wait_idle

from orchestrator.inventory import load_inventory
from orchestrator.metrics.decision import change_text
from orchestrator.models.decision import FigureChange

REPO = Path(__file__).resolve().parents[1]
PLAN = REPO / "docs/examples/migrate-serve-lab.yaml"
NODES = ("node1", "node2")
ORCH = [sys.executable, "-m", "orchestrator"]


def two_nodes(inventory: Path, dest: Path) -> Path:
    """The lab's inventory with node1 and node2 only (their lines and groups, its [all:vars])."""
    lines = inventory.read_text().splitlines()
    at = lines.index("[all:vars]")
    keep = [ln for ln in lines[:at] if ln.startswith("[") or ln.split(" ", 1)[0] in NODES]
    dest.write_text("\n".join(keep + lines[at:]) + "\n")
    return dest


def provision(inventory: Path, stack: str, env: dict[str, str]) -> None:
    t0 = time.monotonic()
    argv = [*ORCH, "provision", "-i", str(inventory), "--stack", stack, "--limit", ",".join(NODES)]
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, check=False)
    if res.returncode != 0:
        sys.exit(f"provisioning {stack} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    print(f"{stack} on {', '.join(NODES)} in {time.monotonic() - t0:.0f} s", flush=True)


def migrate(inv: Path, to: str, rounds: int, out: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    res = subprocess.run([*ORCH, "migrate", "run", "-i", str(inv), "--from", "cpu-serve:fp32", "--to", to,
                          "--plan", str(PLAN), "--rounds", str(rounds), "--out", str(out)],
                         capture_output=True, text=True, env=env, timeout=3600, check=False)  # fmt: skip
    runs = sorted(out.glob("*-migrate-*"))
    if not runs:
        sys.exit(f"migrate run to {to} left no run folder (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return res.returncode, json.loads((runs[-1] / "migrate.json").read_text())


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def show(title: str, code: int, state: dict[str, Any]) -> list[dict[str, Any]]:
    """Print one migration; return its serving levels."""
    print(f"\n== {title}: exit {code}, wall {state['wall_s']:.0f} s, run {state['run_dir']}")
    for p in state["phases"]:
        print(f"  {p['phase']:8s} {p['state']:8s} {p['reason'][:200]}")
    cmp = state.get("comparison") or {}
    for step, j in (cmp.get("quality") or {}).items():
        floor = ", ".join(f"{f['name']} {pct(f['exact_match'])}" for f in j["floor"])
        print(f"  quality {step}: {'passed' if j['passed'] else 'FAILED'}: B vs A exact match "
              f"{pct(j['b_vs_a']['exact_match'])} (n={j['b_vs_a']['n']}); floor: {floor}")  # fmt: skip
    levels: list[dict[str, Any]] = cmp.get("serving_levels") or []
    for lv in levels:
        print(f"  {lv['step']} {lv['level']}: {lv['direction']} ({lv['reason']})")
        for f in lv["figures"]:
            ch = f["change"]
            change = change_text(FigureChange.model_validate(ch))
            print(f"    {f['figure']:20s} A {num(ch['a'])} B {num(ch['b'])} {change}: {f['verdict']}")
    return levels


def slower(inv: Path, rounds: int, out: Path, env: dict[str, str]) -> list[str]:
    """Must-show 2: what of it is not met."""
    bad: list[str] = []
    code, state = migrate(inv, "cpu-serve:fp32-small-kv", rounds, out / "slower", env)
    levels = show("must-show 2: fp32 -> fp32-small-kv (B slower)", code, state)
    phases = {p["phase"]: p["state"] for p in state["phases"]}
    quality = (state.get("comparison") or {}).get("quality") or {}
    if not (quality and all(j["passed"] for j in quality.values())):
        bad.append("must-show 2: the quality gate did not pass")
    worse = [lv for lv in levels if lv["direction"].startswith("worse")]
    if phases.get("compare") != "failed" or not worse:
        bad.append(f"must-show 2: no serving level failed the compare ({phases.get('compare')})")
    if phases.get("rollback") != "passed":
        bad.append("must-show 2: no rollback")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inventory", type=Path, default=REPO / "inventories/lab.ini")
    ap.add_argument("--same", type=int, default=3, help="A -> A migrations (must-show 3)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of each compare")
    ap.add_argument("--out", type=Path, default=None, help="where the runs stay (default: a new /tmp folder)")
    ap.add_argument("--no-slower", action="store_true", help="must-show 3 alone (no fp32 -> fp32-small-kv)")
    args = ap.parse_args()
    env = slurm_env(load_inventory(args.inventory))
    wait_idle(list(NODES), env)
    bad: list[str] = []
    out = args.out or Path(tempfile.mkdtemp(prefix="orch-bench-migserve-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"runs in {out} (kept)", flush=True)
    inv = two_nodes(args.inventory, out / "two.ini")
    provision(args.inventory, "cpu-serve", env)
    try:
        if not args.no_slower:
            bad += slower(inv, args.rounds, out, env)
        for k in range(args.same):
            code, state = migrate(inv, "cpu-serve:fp32", args.rounds, out / f"same{k + 1}", env)
            levels = show(f"must-show 3: fp32 -> fp32, run {k + 1} of {args.same}", code, state)
            flagged = [f"{lv['level']} {lv['direction']}" for lv in levels if lv["direction"] != "same"]
            if code != 0 or flagged or not levels:
                bad.append(f"must-show 3, run {k + 1}: exit {code}, flagged {flagged or 'nothing'}")
    finally:
        provision(args.inventory, "cpu-gloo", env)
    print("\n" + ("\n".join(bad) if bad else f"must-shows 2 and 3 met ({args.same} of {args.same} A -> A)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
