"""Inject latency: kept-open SSH shell vs an Ansible ad-hoc command, measured in one run.

    .venv/bin/python bench/fault_latency.py [--inventory inventories/lab.ini] [--node node2] [-n 200]

Latency is from FaultEngine.inject() being called to the node confirming the fault active
(--kind, default link-down, on the node's first rdma_iface, reverted after each sample). The
Ansible figure is the wall time of `ansible NODE -m command -a "ip link set dev IFACE down"` (then
up), a few samples.
Prints p50/p99 of both and the ratio of the p50s. Not part of the test run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.faults.engine import FaultEngine
from orchestrator.inventory import load_inventory
from orchestrator.models.fault import FaultSpec, FaultTarget
from orchestrator.remote.shells import node_shells

ANSIBLE = str(Path(sys.executable).with_name("ansible"))


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inventory", type=Path, default=Path("inventories/lab.ini"))
    ap.add_argument("--node", default="node2")
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--ansible-samples", type=int, default=3)
    kinds = ["link-down", "roce-drop", "packet-loss", "throttle"]
    ap.add_argument("--kind", default="link-down", choices=kinds,
                    help="fault timed over the kept-open shell (the Ansible figure is always link-down)")
    args = ap.parse_args()
    cluster = load_inventory(args.inventory)
    node = cluster.node(args.node)
    iface = node.rdma_ifaces[0]
    spec = FaultSpec(kind=args.kind, target=FaultTarget(node=node.name, iface=iface), duration_s=5)
    ssh: list[float] = []
    with node_shells(cluster) as shells:
        engine = FaultEngine(cluster, shells)
        engine.sweep([node.name])
        for _ in range(args.n):
            active = engine.prepare(spec)
            try:
                engine.inject(active)
                assert active.record.outcome == "active", active.record.message
                ssh.append(active.record.inject_latency_s or 0.0)
            finally:
                engine.revert(active)
    ans: list[float] = []
    for _ in range(args.ansible_samples):
        t = time.monotonic()
        subprocess.run([ANSIBLE, "-i", str(args.inventory), node.name, "-m", "command", "-a",
                        f"ip link set dev {iface} down"], check=True, capture_output=True)
        ans.append(time.monotonic() - t)
        subprocess.run([ANSIBLE, "-i", str(args.inventory), node.name, "-m", "command", "-a",
                        f"ip link set dev {iface} up"], check=True, capture_output=True)
    p50, p99 = 1e3 * pct(ssh, .5), 1e3 * pct(ssh, .99)
    print(f"kept-open shell  {args.kind}  n={len(ssh)}  p50={p50:.2f} ms  p99={p99:.2f} ms")
    a50, amax = 1e3 * statistics.median(ans), 1e3 * max(ans)
    print(f"ansible ad-hoc   n={len(ans)}  p50={a50:.0f} ms  max={amax:.0f} ms")
    print(f"ratio ansible/ssh (p50): {statistics.median(ans) / pct(ssh, .5):.0f}x")
    print("targets: p50 <= 10 ms, p99 <= 30 ms:",
          "met" if pct(ssh, .5) <= 0.010 and pct(ssh, .99) <= 0.030 else "NOT met")


if __name__ == "__main__":
    main()
